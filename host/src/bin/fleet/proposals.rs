//! `fleet propose`, `fleet proposals`, `fleet proposal`, `fleet review` and `fleet
//! withdraw` (SPEC §17); `fleet apply --proposal N` is an apply (`commands::apply` with
//! `ApplySource::Proposal`).

use std::path::Path;

use anstream::{print, println};
use serde_json::{Value, json};

use crate::client::{CliError, Client, EXIT_OK, print_json, printable};
use crate::commands::read_fleet_config;
use crate::history::{short_commit, source_line};
use crate::render::{Shown, plural, render_plan};

/// Proposes a document: prints its plan and the proposal's number.
pub fn propose(
    client: &Client,
    file: &Path,
    prune: bool,
    title: Option<&str>,
    source: Option<Value>,
    raw: bool,
) -> Result<u8, CliError> {
    let document = read_fleet_config(file)?;
    let mut request = json!({"document": document, "prune": prune});
    if let Some(title) = title {
        request["title"] = json!(title);
    }
    if let Some(source) = source {
        request["source"] = source;
    }
    let created = client.call("proposals/create", &request)?;
    let number = created["proposal"]["number"].as_u64().unwrap_or_default();
    let whole = client.call("proposals/get", &json!({ "number": number }))?;
    if raw {
        print_json(&whole)?;
        return Ok(EXIT_OK);
    }
    print!("{}", render_plan(&whole["plan"], Shown::Proposed));
    println!();
    println!("{}", headline(&whole["proposal"]));
    if whole["proposal"]["state"] == "open" {
        println!("Another principal reviews it with `fleet review {number} approve` (or reject); once approved,");
        println!("`fleet apply --proposal {number}` applies exactly this plan.");
    }
    Ok(EXIT_OK)
}

/// The tenant's proposals, newest first.
pub fn list(client: &Client, state: Option<&str>, limit: u64, raw: bool) -> Result<u8, CliError> {
    let mut request = json!({ "limit": limit });
    if let Some(state) = state {
        request["state"] = json!(state);
    }
    let answer = client.call("proposals/list", &request)?;
    if raw {
        print_json(&answer)?;
        return Ok(EXIT_OK);
    }
    let proposals = answer["proposals"].as_array().map(Vec::as_slice).unwrap_or_default();
    if proposals.is_empty() {
        println!("No proposals{}.", state.map(|state| format!(" are {state}")).unwrap_or_default());
    }
    for proposal in proposals {
        let commit = short_commit(&proposal["source"]).map(|commit| format!(", commit {commit}")).unwrap_or_default();
        println!("{}{commit}", headline(proposal));
    }
    Ok(EXIT_OK)
}

/// One proposal: its plan, its reviews, and whether it is approved.
pub fn show(client: &Client, number: u64, raw: bool) -> Result<u8, CliError> {
    let whole = client.call("proposals/get", &json!({ "number": number }))?;
    if raw {
        print_json(&whole)?;
        return Ok(EXIT_OK);
    }
    print!("{}", render_plan(&whole["plan"], Shown::Proposed));
    println!();
    println!("{}", headline(&whole["proposal"]));
    if let Some(source) = source_line(&whole["proposal"]["source"]) {
        println!("From {source}");
    }
    reviews(&whole["proposal"]);
    Ok(EXIT_OK)
}

/// Reviews a proposal, and says where it stands now.
pub fn review(client: &Client, number: u64, verdict: &str, comment: Option<&str>, raw: bool) -> Result<u8, CliError> {
    let mut request = json!({ "number": number, "verdict": verdict });
    if let Some(comment) = comment {
        request["comment"] = json!(comment);
    }
    let answer = client.call("proposals/review", &request)?;
    if raw {
        print_json(&answer)?;
        return Ok(EXIT_OK);
    }
    println!("{}", headline(&answer["proposal"]));
    reviews(&answer["proposal"]);
    Ok(EXIT_OK)
}

/// Withdraws one's own open proposal.
pub fn withdraw(client: &Client, number: u64, raw: bool) -> Result<u8, CliError> {
    let answer = client.call("proposals/withdraw", &json!({ "number": number }))?;
    if raw {
        print_json(&answer)?;
    } else {
        println!("{}", headline(&answer["proposal"]));
    }
    Ok(EXIT_OK)
}

/// `#3 open, approved: "title" by alice, 2024-…, 1 review, plan sha256:…`.
fn headline(proposal: &Value) -> String {
    let title = match proposal["title"].as_str() {
        Some("") | None => String::new(),
        Some(_) => format!(" {:?}", printable(&proposal["title"])),
    };
    let approved = if proposal["approved"] == true { ", approved" } else { ", not approved" };
    let approved = if proposal["state"] == "open" { approved } else { "" };
    let revision = proposal["revision"].as_u64().map(|revision| format!(" as revision {revision}")).unwrap_or_default();
    let reviews = proposal["reviews"].as_array().map_or(0, Vec::len);
    format!(
        "Proposal #{} {}{revision}{approved}:{title} by {}, {}, {}; plan {}",
        proposal["number"].as_u64().unwrap_or_default(),
        printable(&proposal["state"]),
        printable(&proposal["author"]),
        printable(&proposal["createdAt"]),
        plural(reviews, "review"),
        printable(&proposal["planHash"]),
    )
}

fn reviews(proposal: &Value) {
    for review in proposal["reviews"].as_array().into_iter().flatten() {
        let comment = match review["comment"].as_str() {
            Some("") | None => String::new(),
            Some(_) => format!(": {}", printable(&review["comment"])),
        };
        println!(
            "  {} {} at {}{comment}",
            printable(&review["principal"]),
            if review["verdict"] == "approve" { "approved" } else { "rejected" },
            printable(&review["at"]),
        );
    }
}

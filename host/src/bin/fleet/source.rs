//! `fleet source …` (SPEC §20.3): sets, shows and drives the tenant's git source, and the
//! source's line that `fleet status` prints beside the drift.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::client::{CliError, Client, escape_controls, print_json, printable};

/// What `fleet source set` puts.
pub struct Set<'a> {
    pub url: &'a str,
    pub branch: Option<&'a str>,
    pub path: Option<&'a str>,
    pub mode: &'a str,
    pub prune: bool,
    pub heal: bool,
    pub interval: Option<&'a str>,
    pub token_file: Option<&'a Path>,
    pub username: Option<&'a str>,
    pub signers: &'a [PathBuf],
}

/// `fleet source set URL …`: puts the source; prints it and the hook's secret, once.
pub fn set(client: &Client, set: &Set, json: bool) -> Result<u8, CliError> {
    let mut body = json!({"url": set.url, "mode": set.mode, "prune": set.prune, "heal": set.heal});
    for (field, value) in [("branch", set.branch), ("path", set.path), ("interval", set.interval)] {
        if let Some(value) = value {
            body[field] = json!(value);
        }
    }
    if let Some(file) = set.token_file {
        let token = read(file)?.trim().to_owned();
        let mut credential = json!({"token": token});
        if let Some(username) = set.username {
            credential["username"] = json!(username);
        }
        body["credential"] = credential;
    }
    let signers: Vec<String> =
        set.signers.iter().map(|file| read(file).map(|line| line.trim().to_owned())).collect::<Result<_, _>>()?;
    if !signers.is_empty() {
        body["signers"] = json!(signers);
    }
    let answer = client.call("sources/put", &body)?;
    if json {
        print_json(&answer)?;
        return Ok(0);
    }
    print!("{}", render(&answer["source"]));
    println!(
        "Hook: POST {}{} with this secret (shown once): {}",
        client.server(),
        printable(&answer["source"]["hookUrl"]),
        printable(&answer["hookSecret"])
    );
    Ok(0)
}

/// `fleet source [refresh|unpin|delete|sync|pin]`: calls the method, prints the source.
pub fn call(client: &Client, method: &str, body: Value, json: bool) -> Result<u8, CliError> {
    let answer = client.call(&format!("sources/{method}"), &body)?;
    if json {
        print_json(&answer)?;
    } else if method == "delete" {
        println!("Deleted the tenant's source; the estate is left as it is.");
    } else {
        print!("{}", render(&answer["source"]));
    }
    Ok(0)
}

fn read(file: &Path) -> Result<String, CliError> {
    std::fs::read_to_string(file).map_err(|error| CliError::Input(format!("{}: {error}", file.display())))
}

/// A commit as people name it.
fn short(commit: &Value) -> String {
    let commit = commit.as_str().unwrap_or_default();
    escape_controls(commit.get(..12).unwrap_or(commit))
}

/// The source and its status, a few lines.
pub fn render(source: &Value) -> String {
    let status = &source["status"];
    let mut out = format!(
        "Source {} {} {} ({}, every {}{}{}): {}",
        printable(&source["url"]),
        printable(&source["branch"]),
        printable(&source["path"]),
        printable(&source["mode"]),
        printable(&source["interval"]),
        if source["prune"] == true { ", prune" } else { "" },
        if source["heal"] == true { ", heal" } else { "" },
        state_line(source),
    );
    out.push('\n');
    if let Some(signers) = source["signers"].as_array().filter(|signers| !signers.is_empty()) {
        let listed: Vec<String> = signers.iter().map(printable).collect();
        out.push_str(&format!("Signed commits only, by {}.\n", listed.join(", ")));
    }
    if let Some(attempt) = status.get("lastAttempt") {
        out.push_str(&format!("Last attempt: {} at {}", short(&attempt["commit"]), printable(&attempt["at"])));
        if let Some(error) = attempt.get("error") {
            out.push_str(&format!(": {}", printable(error)));
        }
        out.push('\n');
    }
    out
}

/// `synced at 1a2b3c4d5e6f (revision 4)`, `outOfSync: head 1a2b… ahead of applied 9f8e…`, …
pub fn state_line(source: &Value) -> String {
    let status = &source["status"];
    let state = printable(&status["state"]);
    let head = status.get("headCommit").map(short);
    let applied = status.get("appliedCommit").map(short);
    let mut line = match (state.as_str(), &head, &applied) {
        ("synced" | "pinned", _, Some(applied)) => format!("{state} at {applied}"),
        (_, Some(head), Some(applied)) => format!("{state}: head {head}, applied {applied}"),
        (_, Some(head), None) => format!("{state}: head {head}, nothing applied from it yet"),
        _ => state.clone(),
    };
    if let Some(revision) = status["appliedRevision"].as_u64() {
        line.push_str(&format!(" (revision {revision})"));
    }
    if let Some(pinned) = source.get("pinned") {
        line.push_str(&format!(", pinned to {}", short(pinned)));
    }
    if let Some(proposal) = status["proposal"].as_u64() {
        line.push_str(&format!(", waiting on proposal {proposal}"));
    }
    if let Some(error) = status.get("error") {
        line.push_str(&format!(": {}", printable(error)));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_tells_git_ahead_apart_from_what_was_applied() {
        let source = json!({"url": "https://git.example/acme/estate.git", "branch": "main", "path": "fleet",
            "mode": "observe", "interval": "3m", "prune": false, "heal": false, "signers": [],
            "status": {"state": "outOfSync", "headCommit": "1a2b3c4d5e6f7a8b", "appliedCommit": "9f8e7d6c5b4a3210",
                       "appliedRevision": 4}});
        assert_eq!(
            render(&source),
            "Source https://git.example/acme/estate.git main fleet (observe, every 3m): outOfSync: head 1a2b3c4d5e6f, \
             applied 9f8e7d6c5b4a (revision 4)\n"
        );
        let failing = json!({"status": {"state": "failing", "headCommit": "1a2b3c4d5e6f7a8b",
            "error": "the commit has no file or directory \"fleet\"\u{1b}[2J"}});
        let line = state_line(&failing);
        assert!(line.starts_with("failing: head 1a2b3c4d5e6f, nothing applied"), "{line}");
        assert!(!line.contains('\u{1b}'), "control characters are escaped: {line}");
    }
}

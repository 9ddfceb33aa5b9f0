//! What the command line prints for people: plans (coloured `+ ~ - !` lines grouped by
//! kind), status and drift, errors with the file and field they name.

use std::path::Path;

use anstream::eprintln;
use anstyle::{AnsiColor, Style};
use serde_json::Value;

use crate::client::{CliError, escape_controls, printable};

pub fn style_for(text: &str) -> Style {
    let color = match text.chars().next() {
        Some('+') => AnsiColor::Green,
        Some('~') => AnsiColor::Yellow,
        Some('-') => AnsiColor::Red,
        Some('!') => AnsiColor::Magenta,
        Some('=') => AnsiColor::Cyan,
        _ => return Style::new(),
    };
    Style::new().fg_color(Some(color.into()))
}

/// What a plan shown is to the one reading it, which decides what it says to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// A plan to apply: what would refuse it, and how to get past that.
    Planned,
    /// A proposal's plan: reviews approve it; its apply gives the overrides.
    Proposed,
    /// A plan that was applied: nothing refused it.
    Applied,
}

/// A plan for people: changes grouped by kind, field changes, blocked reasons, a
/// summary line and the plan hash; what would refuse its apply as `shown` says.
pub fn render_plan(plan: &Value, shown: Shown) -> String {
    let mut out = String::new();
    let changes = plan["changes"].as_array().map(Vec::as_slice).unwrap_or_default();
    let left_alone = plan["leftAlone"].as_array().map(Vec::as_slice).unwrap_or_default();
    match (changes.is_empty(), left_alone.is_empty()) {
        (true, true) => out.push_str("No changes: the estate matches the document.\n"),
        (true, false) => out.push_str("No changes to make.\n"),
        (false, _) => {}
    }
    change_lines(&mut out, changes);
    // Blocked entries without a line above (none today) would otherwise go unseen.
    let listed = |blocked: &&Value| {
        changes.iter().any(|change| change["kind"] == blocked["kind"] && change["key"] == blocked["key"])
    };
    let blocked: Vec<&Value> =
        plan["blocked"].as_array().into_iter().flatten().filter(|blocked| !listed(blocked)).collect();
    for entry in blocked {
        let style = style_for("!");
        out.push_str(&format!("  {style}{}{style:#}\n", blocked_line(entry)));
    }
    if has(plan, "blocked") && shown != Shown::Applied {
        let style = style_for("!");
        out.push_str(&format!("\n{style}Blocked{style:#}: apply refuses this plan until the ! lines are resolved.\n"));
    }
    let verdicts = plan["policy"]["verdicts"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !verdicts.is_empty() {
        out.push('\n');
    }
    for verdict in verdicts {
        let line = verdict_line(verdict);
        let style = style_for(&line);
        out.push_str(&format!("  {style}{line}{style:#}\n"));
    }
    let denied = plan["summary"]["denied"].as_u64().unwrap_or_default() > 0;
    let style = style_for("!");
    match shown {
        Shown::Planned if denied => out.push_str(&format!(
            "\n{style}Denied{style:#}: apply refuses this plan; only mandatory policies can be overridden \
             (fleet apply --override POLICY=REASON).\n"
        )),
        Shown::Proposed if denied => out.push_str(&format!(
            "\n{style}Denied{style:#}: once approved, its apply needs an override of each mandatory denial \
             (fleet apply --proposal N --override POLICY=REASON).\n"
        )),
        Shown::Applied if denied => out.push_str("\nThe denials above were overridden.\n"),
        _ => {}
    }
    if shown == Shown::Planned
        && let Some(why) = approval_required(plan)
    {
        let style = style_for("=");
        out.push_str(&format!(
            "\n{style}Approval required{style:#}: {why}; apply refuses this plan directly: propose it \
             (fleet propose FILE) and have it reviewed.\n"
        ));
    }
    for line in left_alone_lines(left_alone) {
        out.push_str(&format!("\n{line}"));
    }
    let summary = &plan["summary"];
    let number = |action: &str| summary[action].as_u64().unwrap_or_default();
    // Renames only when the document has some to make (SPEC §15).
    let renames = summary["rename"].as_u64().map(|renames| format!(", {renames} to rename")).unwrap_or_default();
    out.push_str(&format!(
        "\nPlan: {} to create, {} to update, {} to delete, {} to archive, {} to restore{renames}; {} unchanged, {} blocked.\n",
        number("create"),
        number("update"),
        number("delete"),
        number("archive"),
        number("restore"),
        number("unchanged"),
        number("blocked")
    ));
    if let (Some(denied), Some(warnings)) = (summary["denied"].as_u64(), summary["warnings"].as_u64()) {
        out.push_str(&format!(
            "Policies: {} denied, {}{} ({}).\n",
            denied,
            match summary["approvalRequired"].as_u64().unwrap_or_default() {
                0 => String::new(),
                required => format!("{required} requiring approval, "),
            },
            plural(warnings as usize, "warning"),
            printable(&plan["policy"]["digest"])
        ));
    }
    out.push_str(&format!("Plan hash: {}\n", printable(&plan["planHash"])));
    out
}

/// Why a direct apply of `plan` would be `APPROVAL_REQUIRED`, if it would: the
/// deployment's `--require-approval`, or the policies' `require_approval` verdicts.
pub fn approval_required(plan: &Value) -> Option<&'static str> {
    if plan["approvalRequired"] == "deployment" {
        Some("this deployment applies changes only through approved proposals")
    } else if plan["summary"]["approvalRequired"].as_u64().unwrap_or_default() > 0 {
        Some("policies require approval of it")
    } else {
        None
    }
}

/// Changes grouped under their kind's heading, a line each: the line says it all (an
/// update's fields, a blocked change's reasons).
pub fn change_lines(out: &mut String, changes: &[Value]) {
    let mut heading = String::new();
    for change in changes {
        let this_heading = kind_heading(change["kind"].as_str().unwrap_or_default());
        if this_heading != heading {
            heading = this_heading;
            let bold = Style::new().bold();
            out.push_str(&format!("\n{bold}{heading}{bold:#}\n"));
        }
        let text = printable(&change["text"]);
        let style = style_for(&text);
        out.push_str(&format!("  {style}{text}{style:#}\n"));
    }
}

/// `! policy NAME: message (kind key)` for a denial, `=` for an approval it requires,
/// `?` for a warning (an advisory policy's denial or approval is one).
pub fn verdict_line(verdict: &Value) -> String {
    let binding = verdict["level"] != "advisory";
    let mark = match verdict["rule"].as_str() {
        Some("deny") if binding => "!",
        Some("require_approval") if binding => "=",
        _ => "?",
    };
    let object = match (verdict["kind"].as_str(), verdict["key"].as_str()) {
        (Some(kind), Some(key)) => format!(" ({} {})", escape_controls(kind), escape_controls(key)),
        (Some(only), None) | (None, Some(only)) => format!(" ({})", escape_controls(only)),
        (None, None) => String::new(),
    };
    format!("{mark} policy {}: {}{object}", printable(&verdict["policy"]), printable(&verdict["message"]))
}

/// The heading of a kind's changes, as the console has it: `Provider accounts`.
pub fn kind_heading(kind: &str) -> String {
    let noun = kind_noun(kind);
    let mut letters = noun.chars();
    let first = letters.next().map(|first| first.to_ascii_uppercase().to_string()).unwrap_or_default();
    format!("{first}{}s", letters.as_str())
}

/// A kind for people, from its camelCase name: `owner quota`, `provider account`.
pub fn kind_noun(kind: &str) -> String {
    fleet_guest::grammar::camel_words(kind, ' ')
}

/// `1 live flavor not in the document is left alone; --prune would delete it.`, one
/// line per kind and action.
fn left_alone_lines(left_alone: &[Value]) -> Vec<String> {
    let mut groups: Vec<(&str, &str, usize)> = Vec::new();
    for entry in left_alone {
        let (kind, action) = (entry["kind"].as_str().unwrap_or_default(), entry["action"].as_str().unwrap_or_default());
        match groups.iter_mut().find(|(k, a, _)| *k == kind && *a == action) {
            Some(group) => group.2 += 1,
            None => groups.push((kind, action, 1)),
        }
    }
    groups
        .into_iter()
        .map(|(kind, action, count)| {
            let (is, them) = if count == 1 { ("is", "it") } else { ("are", "them") };
            let action = if action == "archive" { "archive" } else { "delete" };
            format!(
                "{} not in the document {is} left alone; --prune would {action} {them}.\n",
                plural(count, &format!("live {}", kind_noun(kind)))
            )
        })
        .collect()
}

pub fn render_status(status: &Value) -> String {
    let mut out = String::new();
    let Some(applied) = status.get("applied") else {
        return "No document has been applied to this tenant.\n".into();
    };
    out.push_str(&format!(
        "Applied {} by {} at {} ({}, prune {}): revision {}{}.\n",
        printable(&applied["planHash"]),
        printable(&applied["appliedBy"]),
        printable(&applied["appliedAt"]),
        plural(applied["calls"].as_u64().unwrap_or_default() as usize, "call"),
        if applied["prune"] == true { "on" } else { "off" },
        applied["revision"].as_u64().unwrap_or_default(),
        if applied["heal"] == true { ", which fleet.drift heals" } else { "" },
    ));
    // Where the applied document came from (SPEC §20.2): the repository, the commit's
    // first 7 characters, and the ref and path when they were given.
    if let Some(commit) = applied["source"]["commit"].as_str() {
        let source = &applied["source"];
        let whence: Vec<String> =
            ["ref", "path"].iter().filter_map(|member| source[member].as_str()).map(escape_controls).collect();
        let whence = if whence.is_empty() { String::new() } else { format!(" ({})", whence.join(", ")) };
        out.push_str(&format!(
            "From {} @ {}{whence}.\n",
            printable(&source["repo"]),
            escape_controls(commit.get(..7).unwrap_or(commit))
        ));
    }
    if let Some(heal) = applied.get("lastHeal") {
        out.push_str(&format!(
            "Last healed at {} ({}): fleet.drift put back what had drifted.\n",
            printable(&heal["at"]),
            plural(heal["calls"].as_u64().unwrap_or_default() as usize, "call")
        ));
    }
    let checked_at = printable(&status["checkedAt"]);
    match status.get("drift") {
        Some(drift) => {
            let style = style_for("!");
            out.push_str(&format!(
                "{style}Drifted{style:#} since {}: the check at {checked_at} found the estate differing from the applied document:\n",
                printable(&drift["since"])
            ));
            for change in drift["changes"].as_array().into_iter().flatten() {
                out.push_str(&format!("  {}\n", drift_line(change)));
            }
        }
        None => out.push_str(&format!(
            "In sync with the applied document at the last check, {checked_at} (`fleet status --refresh` checks now).\n"
        )),
    }
    out
}

/// `pool gpu-a: gpus 64 -> 48 by bob via compute.pools.update at 2026-12-01T12:03:00Z`:
/// what happened, as the server words it, and when.
fn drift_line(change: &Value) -> String {
    let text = printable(&change["text"]);
    match change["changedAt"].as_str() {
        Some(at) => format!("{text} at {}", escape_controls(at)),
        None => format!("{text} (no record of who changed it)"),
    }
}

/// A value for people: strings quoted only when empty, absent as `(none)`.
pub fn shown(value: &Value) -> String {
    match value {
        Value::Null => "(none)".into(),
        Value::String(text) if text.is_empty() => "\"\"".into(),
        Value::String(text) => escape_controls(text),
        other => escape_controls(&other.to_string()),
    }
}

fn blocked_line(blocked: &Value) -> String {
    let field = blocked["field"].as_str().map(|field| format!(" {field}")).unwrap_or_default();
    format!(
        "! {} {}{field}: {}",
        printable(&blocked["kind"]),
        printable(&blocked["key"]),
        printable(&blocked["reason"])
    )
}

/// `1 call`, `2 calls`.
pub fn plural(count: usize, noun: &str) -> String {
    if count == 1 { format!("1 {noun}") } else { format!("{count} {noun}s") }
}

/// The fields of the client's requests besides the document, whose problems name no
/// file: `/source/commit`.
const REQUEST_FIELDS: [&str; 4] = ["/source", "/overrides", "/planHash", "/title"];

/// Prints an error; validation problems name the file and the field.
pub fn report(error: &CliError, file: Option<&Path>) {
    let red = Style::new().fg_color(Some(AnsiColor::Red.into())).bold();
    // Our own messages may span lines; nothing else they carry reaches the terminal raw.
    let message: Vec<String> = error.to_string().split('\n').map(escape_controls).collect();
    eprintln!("{red}error{red:#}: {}", message.join("\n"));
    if let CliError::Api { details, .. } = error {
        let prefix = file.map(|file| format!("{}: ", file.display())).unwrap_or_default();
        for problem in details["problems"].as_array().into_iter().flatten() {
            let path = printable(&problem["path"]);
            // A problem of the request's own fields is not the document file's.
            let prefix = if REQUEST_FIELDS.iter().any(|field| path.starts_with(field)) { "" } else { &prefix };
            let path = if path.is_empty() { "(document)" } else { path.as_str() };
            eprintln!("  {prefix}{path}: {}", printable(&problem["message"]));
        }
        for blocked in details["blocked"].as_array().into_iter().flatten() {
            eprintln!("  {prefix}{}", blocked_line(blocked));
        }
        for verdict in details["verdicts"].as_array().into_iter().flatten() {
            eprintln!("  {}", verdict_line(verdict));
        }
        if let (Some(expected), Some(actual)) = (details["expected"].as_str(), details["actual"].as_str()) {
            eprintln!(
                "  expected plan {expected}\n  current plan  {actual}\n  the estate moved since the plan was made: plan again"
            );
        }
    }
}

/// Whether the plan lists any `list` entry (changes, calls, blocked).
pub fn has(plan: &Value, list: &str) -> bool {
    plan[list].as_array().is_some_and(|items| !items.is_empty())
}

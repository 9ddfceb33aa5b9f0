//! `fleet history`, `fleet revision`, `fleet diff` (SPEC §15), with where each revision's
//! document came from (§20.2); `fleet rollback` is an apply of a revision's document
//! (`client::apply` with `ApplySource::Revision`).

use std::path::Path;

use anstream::{eprintln, print, println};
use serde_json::{Map, Value, json};

use crate::client::{self, CliError, Client, EXIT_CHANGES, EXIT_OK, escape_controls, print_json, printable};
use crate::render::{change_lines, plural, shown};

pub fn history(client: &Client, limit: u64, raw: bool) -> Result<u8, CliError> {
    let answer = client.call("fleet/history", &json!({ "limit": limit }))?;
    if raw {
        print_json(&answer)?;
        return Ok(EXIT_OK);
    }
    let revisions = answer["revisions"].as_array().map(Vec::as_slice).unwrap_or_default();
    if revisions.is_empty() {
        println!("No document has been applied to this tenant.");
    }
    for revision in revisions {
        let calls = revision["calls"].as_u64().unwrap_or_default() as usize;
        let proposal = revision["proposal"].as_u64().map(|number| format!(", proposal #{number}")).unwrap_or_default();
        let proposal = match revision["rollbackOf"].as_u64() {
            Some(number) => format!("{proposal}, rollback of {number}"),
            None => proposal,
        };
        let proposal = match short_commit(&revision["source"]) {
            Some(commit) => format!("{proposal}, commit {commit}"),
            None => proposal,
        };
        println!(
            "{:>6}  {}  {}  by {}, {}, prune {}{proposal}",
            revision["revision"].as_u64().unwrap_or_default(),
            printable(&revision["appliedAt"]),
            printable(&revision["planHash"]),
            printable(&revision["appliedBy"]),
            plural(calls, "call"),
            if revision["prune"] == true { "on" } else { "off" },
        );
        // Who let a mandatory policy's denials through, and why (SPEC §14).
        for overridden in revision["overrides"].as_array().into_iter().flatten() {
            println!(
                "        overrode policy {} ({}): {}",
                printable(&overridden["policy"]),
                printable(&revision["appliedBy"]),
                printable(&overridden["reason"]),
            );
        }
    }
    let last = revisions.last().and_then(|revision| revision["revision"].as_u64());
    let kept_from = answer["oldest"].as_u64();
    match (last, kept_from) {
        (Some(last), Some(oldest)) if last > oldest => {
            println!("(the newest {limit}; older ones follow revision {last})");
        }
        (Some(_), Some(oldest)) if oldest > 1 => {
            println!(
                "(revisions before {oldest} were pruned: the server keeps fewer, --keep-revisions or --revisions-max-age)"
            );
        }
        _ => {}
    }
    Ok(EXIT_OK)
}

/// One revision's document, to `output` (JSON or YAML by its extension) or stdout.
pub fn revision(client: &Client, number: u64, output: Option<&Path>) -> Result<u8, CliError> {
    let revision = client.call("fleet/revision", &json!({ "revision": number }))?;
    let document = &revision["document"];
    match output {
        Some(path) => {
            client::write_document(path, document)?;
            let source = source_line(&revision["source"]).map(|source| format!(", from {source}")).unwrap_or_default();
            eprintln!(
                "Wrote revision {number} (applied {} by {}{source}) to {}.",
                printable(&revision["appliedAt"]),
                printable(&revision["appliedBy"]),
                path.display()
            );
        }
        None => print_json(document)?,
    }
    Ok(EXIT_OK)
}

/// A source's commit as people name it: its first 7 characters.
pub fn short_commit(source: &Value) -> Option<String> {
    let commit = source["commit"].as_str()?;
    Some(escape_controls(commit.get(..7).unwrap_or(commit)))
}

/// Where a revision's or a proposal's document came from (SPEC §20.2), for people:
/// `https://github.com/acme/infra @ 1a2b3c4 (refs/heads/main, fleet/)`.
pub fn source_line(source: &Value) -> Option<String> {
    let commit = short_commit(source)?;
    let whence: Vec<String> =
        ["ref", "path"].iter().filter_map(|member| source[member].as_str()).map(escape_controls).collect();
    let whence = if whence.is_empty() { String::new() } else { format!(" ({})", whence.join(", ")) };
    Some(format!("{} @ {commit}{whence}", printable(&source["repo"])))
}

/// What changed from revision `from` to revision `to`, by kind and key, worded as a
/// plan words its changes. Exit code 0 when the documents agree, 2 when they differ.
pub fn diff(client: &Client, from: u64, to: u64, raw: bool) -> Result<u8, CliError> {
    let [old, new] = [from, to].map(|number| client.call("fleet/revision", &json!({ "revision": number })));
    let (old, new) = (old?, new?);
    let changes = changes(&old["document"], &new["document"], new["prune"] == true);
    let prune = (old["prune"] != new["prune"]).then(|| (old["prune"] == true, new["prune"] == true));
    if raw {
        let mut answer = json!({ "from": from, "to": to, "changes": changes });
        if let Some((was, is)) = prune {
            answer["prune"] = json!({ "from": was, "to": is });
        }
        print_json(&answer)?;
    } else {
        print!("{}", render(from, to, &changes, prune));
    }
    Ok(if changes.is_empty() && prune.is_none() { EXIT_OK } else { EXIT_CHANGES })
}

/// The changes between two documents: `{"action", "kind", "key", "fields"?, "text"}`,
/// by section and key in the documents' order.
fn changes(old: &Value, new: &Value, prune: bool) -> Vec<Value> {
    let catalog = fleet_guest::Catalog::built_in();
    let empty = Map::new();
    let (old, new) = (old.as_object().unwrap_or(&empty), new.as_object().unwrap_or(&empty));
    let mut names: Vec<&String> = new.keys().collect();
    names.extend(old.keys().filter(|name| !new.contains_key(*name)));
    let mut changes = Vec::new();
    for section in names {
        // A plugin's section, unknown here, is named by its section.
        let descriptor = catalog.by_section(section).map(|kind| catalog.get(kind));
        let kind = descriptor.map_or(section.as_str(), |descriptor| descriptor.kind);
        // Fields in the kind's own order, as a plan lists them.
        let order = |name: &String| descriptor.and_then(|descriptor| descriptor.position(name)).unwrap_or(usize::MAX);
        let before = old.get(section).and_then(Value::as_object).unwrap_or(&empty);
        let after = new.get(section).and_then(Value::as_object).unwrap_or(&empty);
        for (key, object) in after {
            let fields = object.as_object().unwrap_or(&empty);
            match before.get(key) {
                None => {
                    let mut listed: Vec<(&String, &Value)> = fields.iter().collect();
                    listed.sort_by_key(|(field, _)| order(field));
                    let listed: Vec<String> =
                        listed.into_iter().map(|(field, value)| format!("{field} {}", shown(value))).collect();
                    let text = format!("+ {kind} {key}: create ({})", listed.join(", "));
                    changes.push(json!({ "action": "create", "kind": kind, "key": key, "text": text }));
                }
                Some(was) => {
                    let was = was.as_object().unwrap_or(&empty);
                    let mut names: Vec<&String> = was.keys().collect();
                    names.extend(fields.keys().filter(|name| !was.contains_key(*name)));
                    names.sort_by_key(|name| order(name));
                    let moved: Vec<(&String, Value, Value)> = names
                        .into_iter()
                        .map(|name| {
                            let (from, to) = as_planned(was.get(name), fields.get(name));
                            (name, from, to)
                        })
                        .filter(|(_, from, to)| from != to)
                        .collect();
                    if moved.is_empty() {
                        continue;
                    }
                    let worded: Vec<String> = moved
                        .iter()
                        .map(|(name, from, to)| format!("{name} {} -> {}", shown(from), shown(to)))
                        .collect();
                    let fields: Vec<Value> =
                        moved.iter().map(|(name, from, to)| json!({ "field": name, "from": from, "to": to })).collect();
                    let text = format!("~ {kind} {key}: update ({})", worded.join(", "));
                    changes
                        .push(json!({ "action": "update", "kind": kind, "key": key, "fields": fields, "text": text }));
                }
            }
        }
        // What the newer document no longer lists: removed by its apply only with prune.
        let removal = match (prune, descriptor.is_some_and(|descriptor| descriptor.archives())) {
            (true, true) => "archive",
            (true, false) => "delete",
            (false, _) => "left alone",
        };
        for key in before.keys().filter(|key| !after.contains_key(*key)) {
            let text = format!("- {kind} {key}: {removal} (not in the document)");
            changes.push(json!({ "action": "remove", "kind": kind, "key": key, "text": text }));
        }
    }
    changes
}

/// A field of both revisions as the planner reads it: a field a document leaves out has
/// its type's default (SPEC §5: `0`, `""`, `{}`, `false`), which the other revision's
/// value shows. So `gpus` left out and `gpus: 0` are the same, and a field given a value
/// reads `gpus 0 -> 4`, not `(none) -> 4`.
fn as_planned(old: Option<&Value>, new: Option<&Value>) -> (Value, Value) {
    let default_of = |value: &Value| match value {
        Value::Number(_) => json!(0),
        Value::String(_) => json!(""),
        Value::Object(_) => json!({}),
        Value::Bool(_) => json!(false),
        _ => Value::Null,
    };
    match (old, new) {
        (Some(old), Some(new)) => (old.clone(), new.clone()),
        (Some(old), None) => (old.clone(), default_of(old)),
        (None, Some(new)) => (default_of(new), new.clone()),
        (None, None) => (Value::Null, Value::Null),
    }
}

fn render(from: u64, to: u64, changes: &[Value], prune: Option<(bool, bool)>) -> String {
    let mut out = String::new();
    let on_off = |flag: bool| if flag { "on" } else { "off" };
    if changes.is_empty() && prune.is_none() {
        out.push_str(&format!("No differences: revisions {from} and {to} apply the same document.\n"));
        return out;
    }
    if let Some((was, is)) = prune {
        out.push_str(&format!("Prune: {} -> {}\n", on_off(was), on_off(is)));
    }
    change_lines(&mut out, changes);
    let count = |action: &str| changes.iter().filter(|change| change["action"] == action).count();
    out.push_str(&format!(
        "\nFrom revision {from} to {to}: {} created, {} updated, {} no longer in the document.\n",
        count("create"),
        count("update"),
        count("remove")
    ));
    out
}

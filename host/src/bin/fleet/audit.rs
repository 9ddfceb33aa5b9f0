//! `fleet audit`: the tenant's audit trail (SPEC §13), one line per record, worded like
//! `fleet status`'s drift lines.

use anstream::println;
use serde_json::{Value, json};

use crate::client::{CliError, Client, EXIT_OK, escape_controls, print_json, printable};
use crate::render::{kind_noun, shown};

/// Which records to list: `compute.audit.list`'s filters. Newest first, unless the
/// list goes on `after` a record.
pub struct Filter {
    pub kind: Option<String>,
    pub id: Option<String>,
    pub key: Option<String>,
    pub before: Option<u64>,
    pub after: Option<u64>,
    pub limit: u64,
}

pub fn audit(client: &Client, filter: &Filter, raw: bool) -> Result<u8, CliError> {
    let newest = filter.after.is_none();
    let mut input = json!({ "limit": filter.limit, "order": if newest { "newest" } else { "oldest" } });
    for (name, value) in [("kind", &filter.kind), ("id", &filter.id), ("key", &filter.key)] {
        if let Some(value) = value {
            input[name] = json!(value);
        }
    }
    if let Some(after) = filter.after {
        input["after"] = json!(after);
    }
    if let Some(before) = filter.before {
        input["before"] = json!(before);
    }
    let answer = client.call("audit/list", &input)?;
    if raw {
        print_json(&answer)?;
        return Ok(EXIT_OK);
    }
    let records = answer["records"].as_array().map(Vec::as_slice).unwrap_or_default();
    if records.is_empty() {
        let paged = if filter.after.is_some() || filter.before.is_some() { " beyond that one" } else { "" };
        println!("No audit records{paged}.");
    }
    for record in records {
        println!("{:>6}  {}", record["seq"].as_u64().unwrap_or_default(), line(record));
    }
    if records.len() as u64 == filter.limit
        && let Some(last) = records.last()
    {
        let (flag, what) = if newest { ("--before", "older ones") } else { ("--after", "more") };
        println!("({what} follow: fleet audit {flag} {})", last["seq"].as_u64().unwrap_or_default());
    }
    Ok(EXIT_OK)
}

/// `pool gpu-a (pool_1a2b): gpus 8 -> 4 by bob via compute.pools.update at …`, worded as
/// a drift line is, names beside ids (of the object, and of what a change references),
/// and for a call of an apply, which apply: `(fleet.apply of sha256:…)`.
fn line(record: &Value) -> String {
    let named = |value: &Value, key: &Value| match key.as_str() {
        Some(key) => format!("{} ({})", escape_controls(key), shown(value)),
        None => shown(value),
    };
    let changes: Vec<String> = record["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|change| {
            format!(
                "{} {} -> {}",
                printable(&change["field"]),
                named(&change["from"], &change["fromKey"]),
                named(&change["to"], &change["toKey"])
            )
        })
        .collect();
    let what = match changes.as_slice() {
        [] => "no field changed".to_owned(),
        changes => changes.join(", "),
    };
    let mut line = format!(
        "{} {}: {what} by {} via {} at {}",
        kind_noun(record["kind"].as_str().unwrap_or_default()),
        named(&record["id"], &record["key"]),
        printable(&record["principal"]),
        printable(&record["method"]),
        printable(&record["at"]),
    );
    if record["via"] != "api" {
        line.push_str(&format!(" ({}", printable(&record["via"])));
        if let Some(hash) = record["planHash"].as_str() {
            line.push_str(&format!(" of {hash}"));
        }
        line.push(')');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_like_a_drift_line_and_names_its_apply() {
        let update = json!({"seq": 7, "at": "2026-12-01T12:03:00Z", "principal": "bob", "method": "compute.pools.update",
                            "kind": "pool", "id": "pool_1", "key": "gpu-a", "via": "api",
                            "changes": [{"field": "gpus", "from": 8, "to": 4},
                                        {"field": "site", "from": "site_1", "fromKey": "eu", "to": "site_2"}]});
        assert_eq!(
            line(&update),
            "pool gpu-a (pool_1): gpus 8 -> 4, site eu (site_1) -> site_2 by bob via compute.pools.update at \
             2026-12-01T12:03:00Z"
        );
        let create = json!({"seq": 8, "at": "2026-12-01T12:04:00Z", "principal": "ci", "method": "compute.sites.create",
                            "kind": "site", "id": "site_1", "via": "fleet.apply", "planHash": "sha256:ab",
                            "changes": [{"field": "region", "from": null, "to": "eu-west-1"}]});
        assert_eq!(
            line(&create),
            "site site_1: region (none) -> eu-west-1 by ci via compute.sites.create at 2026-12-01T12:04:00Z \
             (fleet.apply of sha256:ab)"
        );
    }
}

//! What a drift is, told for people and for events (SPEC §6.5): whether a check's plan
//! drifted, the event a change of answer publishes, and per drifted object what
//! happened, who did it and the plan's line that repairs it.

use serde_json::{Value, json};

use crate::api::ApiError;
use crate::db;
use crate::events;
use crate::store::trail;

/// `fleet.drifted`'s data for a check's `plan` of `tenant`'s document applied at
/// `applied_at` (see `Reconciler::drifted_event`).
pub(super) fn drifted_data(
    db: &db::Conn,
    (tenant, applied_at): (&str, &str),
    plan: &Value,
    recorded_since: Option<&str>,
    now: &str,
) -> Result<Value, ApiError> {
    let changes = drift_changes(db, tenant, plan)?;
    let since = match recorded_since {
        Some(since) => since.to_owned(),
        None => changes
            .iter()
            .filter_map(|change| change["changedAt"].as_str())
            .filter(|at| *at >= applied_at)
            .min()
            .unwrap_or(now)
            .to_owned(),
    };
    Ok(json!({ "planHash": plan["planHash"], "summary": plan["summary"], "since": since, "changes": changes }))
}

/// The event a check publishes, given the drift recorded before and found now.
pub fn transition(recorded: Option<&str>, found: Option<&str>) -> Option<&'static str> {
    match (recorded, found) {
        (None, None) => None,
        (Some(_), None) => Some(events::CONVERGED),
        (None, Some(_)) => Some(events::DRIFTED),
        (Some(before), Some(now)) if before != now => Some(events::DRIFTED),
        (Some(_), Some(_)) => None,
    }
}

/// The fleet has drifted when planning its applied document again has any call or
/// blocked change.
pub(super) fn drifted(plan: &Value) -> bool {
    let has = |list: &str| plan[list].as_array().is_some_and(|items| !items.is_empty());
    has("calls") || has("blocked")
}

/// Per drifted object of a drift plan (SPEC §6.5): the fields with their applied and
/// actual values, who last changed the object, when and through which method (from the
/// audit trail; null when it has no record), `text` saying what happened, for people
/// and chat (`pool gpu-a: gpus 96 -> 48 by bob via compute.pools.update`), and `repair`,
/// the plan's line that would undo it.
pub fn drift_changes(db: &db::Conn, tenant: &str, plan: &Value) -> Result<Vec<Value>, ApiError> {
    let mut changes = Vec::new();
    for change in plan["changes"].as_array().into_iter().flatten() {
        let kind = change["kind"].as_str().unwrap_or_default();
        // Quotas have no id: the audit trail names them by owner, their key.
        let id = change["id"].as_str().or_else(|| change["key"].as_str()).unwrap_or_default();
        let fields: Vec<Value> = change["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|field| json!({"field": field["field"], "applied": field["to"], "actual": field["from"]}))
            .collect();
        let last = trail::last_change(db, tenant, kind, id)?;
        let (changed_by, changed_at, method) = match last {
            Some((principal, at, method)) => (json!(principal), json!(at), json!(method)),
            None => (Value::Null, Value::Null, Value::Null),
        };
        let mut text = happened(kind, change, &fields);
        if let (Some(principal), Some(method)) = (changed_by.as_str(), method.as_str()) {
            text.push_str(&format!(" by {principal} via {method}"));
        }
        changes.push(json!({
            "kind": kind, "key": change["key"], "id": id, "action": change["action"], "fields": fields,
            "changedBy": changed_by, "changedAt": changed_at, "method": method, "text": text,
            "repair": change["text"],
        }));
    }
    Ok(changes)
}

/// What happened to an object, given the change of the plan that undoes it: the values
/// it moved from (applied) and to (actual), or that it was archived, deleted or made.
fn happened(kind: &str, change: &Value, fields: &[Value]) -> String {
    let object =
        format!("{} {}", fleet_guest::grammar::camel_words(kind, ' '), change["key"].as_str().unwrap_or_default());
    match change["action"].as_str().unwrap_or_default() {
        "update" => {
            let moved: Vec<String> = fields
                .iter()
                .map(|field| {
                    format!(
                        "{} {} -> {}",
                        field["field"].as_str().unwrap_or_default(),
                        shown(&field["applied"]),
                        shown(&field["actual"])
                    )
                })
                .collect();
            format!("{object}: {}", moved.join(", "))
        }
        "restore" => format!("{object} archived"),
        "create" => format!("{object} deleted"),
        "delete" | "archive" => format!("{object} made outside the applied document"),
        _ => change["text"].as_str().unwrap_or_default().to_owned(),
    }
}

/// A value in a sentence: strings bare unless empty, absent as `(none)`.
fn shown(value: &Value) -> String {
    match value {
        Value::Null => "(none)".into(),
        Value::String(text) if text.is_empty() => "\"\"".into(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

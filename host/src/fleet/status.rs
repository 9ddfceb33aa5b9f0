//! Status (SPEC §6.4): the applied document, when it was last checked, and the drift
//! found then; with `refresh`, a check now, made by the reconciler (or, on a read-only
//! server, planned and recorded nowhere).

use serde_json::{Map, Value, json};

use super::drift::{self, Checks};
use super::planning::Planning;
use crate::api::ApiError;
use crate::calls::input::Input;
use crate::calls::parse_body;
use crate::calls::registry::Call;
use crate::db::params;
use crate::db::{self, Conn};

/// SPEC §6.4: the applied document, when it was last checked, and the drift found. With
/// `refresh`, checks now first, as the reconciler would; a read-only deployment checks
/// without recording anything.
pub(super) fn status(planning: &Planning, checks: &Checks, call: Call) -> Result<String, ApiError> {
    let Call { caller, db, body, .. } = call;
    let mut input = Input::new(parse_body(body.as_bytes())?)?;
    let refresh = input.boolean("refresh", false).unwrap_or(false);
    input.finish()?;
    let found_now = match refresh {
        true if planning.read_only => Some((db::now(), drift::drift_now(planning, &caller.tenant)?)),
        true => {
            checks.check_now(&caller.tenant)?;
            None
        }
        false => None,
    };
    let mut output = db::transaction(&db, db::Tx::Read, |db| recorded_status(db, &caller.tenant))?;
    if let (Some((checked_at, plan)), Some(status)) = (found_now, output.as_object_mut())
        && status.contains_key("applied")
    {
        status.insert("checkedAt".into(), json!(checked_at));
        match plan {
            Some(plan) => status.insert("drift".into(), drift_of(&db, &caller.tenant, &checked_at, &plan)?),
            None => status.remove("drift"),
        };
    }
    Ok(output.to_string())
}

/// What status answers from the database alone.
fn recorded_status(db: &Conn, tenant: &str) -> Result<Value, ApiError> {
    let mut output = Map::new();
    let applied = db.query_opt(
        "SELECT plan_hash, applied_by, applied_at, calls, prune, coalesce(checked_at, applied_at), revision,
           heal_token IS NOT NULL, healed_at, healed_calls,
           (SELECT source FROM fleet_revisions
             WHERE fleet_revisions.tenant = fleet_applied.tenant AND fleet_revisions.revision = fleet_applied.revision)
         FROM fleet_applied WHERE tenant = ?1",
        params![tenant],
        |row| {
            let mut applied = json!({
                "revision": row.get::<i64>(6)?,
                "planHash": row.get::<String>(0)?,
                "appliedBy": row.get::<String>(1)?,
                "appliedAt": row.get::<String>(2)?,
                "calls": row.get::<i64>(3)?,
                "prune": row.get::<bool>(4)?,
                "heal": row.get::<bool>(7)?,
            });
            // The last time fleet.drift healed this revision, and with how many calls.
            if let Some(at) = row.get::<Option<String>>(8)? {
                applied["lastHeal"] = json!({"at": at, "calls": row.get::<Option<i64>>(9)?.unwrap_or_default()});
            }
            // Where the applied revision's document came from (SPEC §20.2).
            if let Some(source) = row.get::<Option<String>>(10)? {
                applied["source"] = serde_json::from_str(&source).map_err(|error| db::decode(10, error))?;
            }
            Ok((applied, row.get::<String>(5)?))
        },
    )?;
    if let Some((applied, checked_at)) = applied {
        output.insert("applied".into(), applied);
        output.insert("checkedAt".into(), json!(checked_at));
    }
    let drift = db.query_opt(
        "SELECT checked_at, plan_hash, summary, changes, coalesce(since, checked_at) FROM fleet_drift WHERE tenant = ?1",
        params![tenant],
        |row| -> Result<(String, String, String, String, String), db::Error> {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
        },
    )?;
    if let Some((checked_at, plan_hash, summary, changes, since)) = drift {
        let parse = |text: &str| serde_json::from_str::<Value>(text).map_err(ApiError::internal);
        output.insert(
            "drift".into(),
            json!({ "checkedAt": checked_at, "since": since, "planHash": plan_hash, "summary": parse(&summary)?,
                    "changes": parse(&changes)? }),
        );
    }
    Ok(Value::Object(output))
}

/// Status's `drift` for a plan found at `checked_at` and recorded nowhere (read-only).
fn drift_of(db: &Conn, tenant: &str, checked_at: &str, plan: &Value) -> Result<Value, ApiError> {
    let changes = drift::drift_changes(db, tenant, plan)?;
    Ok(json!({ "checkedAt": checked_at, "since": checked_at, "planHash": plan["planHash"], "summary": plan["summary"],
               "changes": changes }))
}

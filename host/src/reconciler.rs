//! `fleet.drift`: the background reconciler of SPEC §6.5.
//!
//! Level-triggered and idempotent: each activation takes no input, re-plans every
//! tenant's applied document as the principal who applied it with its prune flag, and
//! compares the answer with the recorded one. Only a change of answer publishes an
//! event, so running it twice in a row, or after a crash, publishes nothing new. One
//! tenant's failure is logged and reported, and never stops the others.

use std::sync::Arc;

use rusqlite::{OptionalExtension, params};
use serde_json::{Value, json};

use crate::api::ApiError;
use crate::app::App;
use crate::auth::Caller;
use crate::db::{self, Tx};
use crate::events;
use crate::fleet::run_planner;
use crate::sandbox::Entry;

/// What one check found for one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Converged,
    Drifted {
        plan_hash: String,
    },
    /// The check could not be made; the message is also logged.
    Failed(String),
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

/// Runs a check every `drift_interval` until `shutdown` resolves.
pub async fn run(app: Arc<App>, shutdown: impl std::future::Future<Output = ()>) {
    let mut interval = tokio::time::interval(app.config.drift_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval.tick().await;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = interval.tick() => {
                let app = app.clone();
                if let Err(error) = tokio::task::spawn_blocking(move || check_all(&app)).await {
                    tracing::error!(%error, "the drift check panicked");
                }
            }
            () = &mut shutdown => return,
        }
    }
}

struct Applied {
    tenant: String,
    document: String,
    prune: bool,
    principal: String,
    applied_at: String,
}

/// One activation over every tenant with an applied document.
pub fn check_all(app: &Arc<App>) -> Vec<(String, Outcome)> {
    let applied = match list_applied(app) {
        Ok(applied) => applied,
        Err(error) => {
            tracing::error!(%error, "fleet.drift could not list the applied documents");
            return Vec::new();
        }
    };
    let mut outcomes = Vec::new();
    for applied in applied {
        let outcome = check(app, &applied).unwrap_or_else(|error| {
            tracing::error!(tenant = %applied.tenant, %error, "fleet.drift could not check a tenant");
            Outcome::Failed(error.to_string())
        });
        outcomes.push((applied.tenant, outcome));
    }
    outcomes
}

fn list_applied(app: &App) -> Result<Vec<Applied>, ApiError> {
    let db = app.db.get()?;
    let mut statement =
        db.prepare("SELECT tenant, document, prune, applied_by, applied_at FROM fleet_applied ORDER BY tenant")?;
    let rows = statement.query_map([], |row| {
        Ok(Applied {
            tenant: row.get(0)?,
            document: row.get(1)?,
            prune: row.get(2)?,
            principal: row.get(3)?,
            applied_at: row.get(4)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn check(app: &Arc<App>, applied: &Applied) -> Result<Outcome, ApiError> {
    let document: Value = serde_json::from_str(&applied.document).map_err(ApiError::internal)?;
    let request = json!({ "document": document, "prune": applied.prune }).to_string();
    let caller = Caller { tenant: applied.tenant.clone(), principal: applied.principal.clone(), grants: Vec::new() };
    let plan: Value = serde_json::from_str(&run_planner(app, caller, app.db.get()?, Entry::Plan, &request)?)
        .map_err(ApiError::internal)?;
    let has_calls = plan["calls"].as_array().is_some_and(|calls| !calls.is_empty());
    let has_blocked = plan["blocked"].as_array().is_some_and(|blocked| !blocked.is_empty());
    let found = (has_calls || has_blocked).then(|| plan["planHash"].as_str().unwrap_or_default().to_owned());

    let db = app.db.get()?;
    let published = db::transaction(&db, Tx::Write, |db| {
        // An apply since the plan above is itself a check: leave its answer alone.
        let still_applied: Option<String> = db
            .query_row("SELECT applied_at FROM fleet_applied WHERE tenant = ?1", [&applied.tenant], |row| row.get(0))
            .optional()?;
        if still_applied.as_deref() != Some(applied.applied_at.as_str()) {
            return Ok(false);
        }
        let recorded: Option<String> = db
            .query_row("SELECT plan_hash FROM fleet_drift WHERE tenant = ?1", [&applied.tenant], |row| row.get(0))
            .optional()?;
        let data = json!({ "planHash": plan["planHash"], "summary": plan["summary"] });
        match &found {
            Some(plan_hash) => {
                db.execute(
                    "INSERT INTO fleet_drift (tenant, checked_at, plan_hash, summary, changes) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (tenant) DO UPDATE SET checked_at = excluded.checked_at, plan_hash = excluded.plan_hash,
                       summary = excluded.summary, changes = excluded.changes",
                    params![applied.tenant, db::now(), plan_hash, plan["summary"].to_string(), plan["changes"].to_string()],
                )?;
            }
            None => {
                db.execute("DELETE FROM fleet_drift WHERE tenant = ?1", [&applied.tenant])?;
            }
        }
        match transition(recorded.as_deref(), found.as_deref()) {
            Some(kind) => {
                events::publish(db, &applied.tenant, kind, &data)?;
                Ok(true)
            }
            None => Ok(false),
        }
    })?;
    if published {
        let _ = app.events.send(());
    }
    Ok(match found {
        Some(plan_hash) => Outcome::Drifted { plan_hash },
        None => Outcome::Converged,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_change_of_answer_publishes() {
        assert_eq!(transition(None, None), None);
        assert_eq!(transition(None, Some("sha256:a")), Some(events::DRIFTED));
        assert_eq!(transition(Some("sha256:a"), Some("sha256:a")), None);
        assert_eq!(transition(Some("sha256:a"), Some("sha256:b")), Some(events::DRIFTED));
        assert_eq!(transition(Some("sha256:a"), None), Some(events::CONVERGED));
    }
}

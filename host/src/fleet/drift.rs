//! `fleet.drift`: the background reconciler of SPEC §6.5.
//!
//! Level-triggered and idempotent: each activation takes no input, re-plans every
//! tenant's applied document as the principal who applied it with its prune flag, and
//! compares the answer with the recorded one. Only a change of answer publishes an
//! event, so running it twice in a row, or after a crash, publishes nothing new. One
//! tenant's failure is logged and reported, and never stops the others.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::api::ApiError;
use crate::app::App;
use crate::calls::auth::Caller;
use crate::db::{self, Tx};
use crate::fleet::events;
use crate::fleet::run_planner;
use crate::params;
use crate::planner::Entry;

/// What one check found for one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Converged,
    Drifted {
        plan_hash: String,
    },
    /// The drift was healed: the revision applied again, with these calls (SPEC §15).
    Healed {
        calls: u64,
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

/// How many due tenants a replica claims at once: small, so that replicas share the
/// work about evenly and a replica that dies holds few checks.
const CLAIM_BATCH: i64 = 16;

/// Runs every tenant's check once per `drift_interval` across every server on the
/// database, until `shutdown` resolves. Each server polls a few times per interval and
/// claims due tenants a few at a time, each claim one statement, so that of the
/// servers that poll together exactly one claims each tenant: with R replicas each
/// checks about 1/R of the tenants. A claim holds for one interval while its check is
/// in flight; a server that dies loses only those, which another claims once they
/// lapse (docs/decisions/0014).
pub async fn run(app: Arc<App>, shutdown: impl std::future::Future<Output = ()>) {
    let interval = app.config.drift_interval;
    let clock = Clock::start();
    let mut poll = tokio::time::interval((interval / 4).clamp(Duration::from_millis(10), Duration::from_secs(15)));
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = poll.tick() => {
                let (app, now) = (app.clone(), clock.now_ms());
                let checked = tokio::task::spawn_blocking(move || check_due(&app, now, millis(interval))).await;
                match checked {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => tracing::error!(%error, "fleet.drift could not claim its checks"),
                    Err(error) => tracing::error!(%error, "the drift check panicked"),
                }
            }
            () = &mut shutdown => return,
        }
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Wall-clock milliseconds as the runtime's clock counts them from the start: real time
/// in a server (the monotonic clock, which NTP slews but never steps), paused time in
/// tests.
struct Clock {
    wall: i64,
    started: tokio::time::Instant,
}

impl Clock {
    fn start() -> Clock {
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Clock { wall: millis(wall), started: tokio::time::Instant::now() }
    }

    fn now_ms(&self) -> i64 {
        self.wall.saturating_add(millis(self.started.elapsed()))
    }
}

/// The time now in milliseconds since the Unix epoch, as the schedule counts it.
pub fn now_ms() -> i64 {
    millis(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default())
}

/// Puts a tenant's next check one interval after `now` (an apply is a check), in the
/// apply's transaction.
pub fn schedule(db: &db::Conn, tenant: &str, now: i64, interval: Duration) -> Result<(), ApiError> {
    db.execute(
        "INSERT INTO drift_schedule (tenant, due_at) VALUES (?1, ?2)
         ON CONFLICT (tenant) DO UPDATE SET due_at = excluded.due_at",
        params![tenant, now.saturating_add(millis(interval))],
    )?;
    Ok(())
}

/// Claims and checks the tenants due at `now`, a batch at a time, until none is due;
/// returns how many this server checked.
pub fn check_due(app: &Arc<App>, now: i64, interval: i64) -> Result<usize, ApiError> {
    let mut checked = 0;
    loop {
        let claimed = claim(app, now, interval)?;
        if claimed.is_empty() {
            return Ok(checked);
        }
        check_claimed(app, now, interval, &claimed)?;
        app.metrics.drift_checks.inc_by(claimed.len() as u64);
        checked += claimed.len();
    }
}

/// Checks a batch of claimed tenants. Most checks find what the last one found, no
/// drift, and so change nothing but the time they ran: those are recorded together,
/// in one statement for the batch, and their claims end together in another. A check
/// that finds drift, or ends a recorded one, or that an apply overtook, is recorded in
/// a transaction of its own under the tenant's write lock, which publishes its event.
fn check_claimed(app: &Arc<App>, now: i64, interval: i64, claimed: &[(String, i64)]) -> Result<(), ApiError> {
    let tenants: Vec<&str> = claimed.iter().map(|(tenant, _)| tenant.as_str()).collect();
    let mut applied = applied_of_each(app, &tenants)?;
    let mut quiet = Vec::new();
    let mut released: Vec<(&str, i64)> = Vec::new();
    for (tenant, due_at) in claimed {
        let next = next_due(*due_at, now, interval);
        let Some(applied) = applied.remove(tenant) else {
            released.push((tenant, next));
            continue;
        };
        match replan(app, &applied) {
            Ok(plan) if !drifted(&plan) => {
                released.push((tenant, next));
                quiet.push((applied, plan));
            }
            Ok(plan) => {
                if let Err(error) = settle(app, &applied, &plan, Some(next)) {
                    tracing::error!(%tenant, %error, "fleet.drift could not record a check");
                    released.push((tenant, next));
                }
            }
            Err(error) => {
                tracing::error!(%tenant, %error, "fleet.drift could not check a tenant");
                released.push((tenant, next));
            }
        }
    }
    let db = app.db.get()?;
    let recorded = record_quiet(&db, &quiet)?;
    for (applied, plan) in quiet.iter().filter(|(applied, _)| !recorded.contains(&applied.tenant)) {
        // Not quiet after all: it ends a recorded drift, or an apply came between.
        if let Err(error) = record(app, applied, plan, None, None) {
            tracing::error!(tenant = %applied.tenant, %error, "fleet.drift could not record a check");
        }
    }
    release_each(&db, &app.replica, &released)
}

/// When a check that was due at `due_at` and ran at `now` is due again. A check late by
/// at most a quarter of an interval (a replica polls four times an interval) keeps its
/// tenant's cadence: due one interval after it was due, so that the tenant is checked
/// once an interval and its period does not grow by each check's lateness. A check
/// later than that (the replicas fell behind, or the tenant's schedule is new) starts
/// again from now: from its old cadence it would be due again at once, checked twice
/// in one interval.
fn next_due(due_at: i64, now: i64, interval: i64) -> i64 {
    let late = now.saturating_sub(due_at);
    match late <= interval / 4 {
        true => due_at.saturating_add(interval),
        false => now.saturating_add(interval),
    }
}

/// Records the time of the checks in `quiet` that found no drift where none was
/// recorded, for the same applied document as they planned: one statement. Returns the
/// tenants it recorded; the others need a check's whole record.
fn record_quiet(db: &db::Conn, quiet: &[(Applied, Value)]) -> Result<Vec<String>, ApiError> {
    if quiet.is_empty() {
        return Ok(Vec::new());
    }
    let now = db::now();
    let mut params = vec![db::Param::from(&now)];
    let mut each = Vec::new();
    for (applied, _) in quiet {
        let at = params.len() + 1;
        each.push(format!("(tenant = ?{at} AND applied_at = ?{})", at + 1));
        params.push(db::Param::from(&applied.tenant));
        params.push(db::Param::from(&applied.applied_at));
    }
    let sql = format!(
        "UPDATE fleet_applied SET checked_at = ?1
         WHERE ({}) AND NOT EXISTS (SELECT 1 FROM fleet_drift WHERE fleet_drift.tenant = fleet_applied.tenant)
         RETURNING tenant",
        each.join(" OR ")
    );
    Ok(db.query(&sql, &params, |row| row.get(0))?)
}

/// Ends the claims `replica` holds of these tenants' checks, each due again at its
/// time: one statement.
fn release_each(db: &db::Conn, replica: &str, released: &[(&str, i64)]) -> Result<(), ApiError> {
    if released.is_empty() {
        return Ok(());
    }
    let mut params = vec![db::Param::from(replica)];
    let (mut cases, mut names) = (Vec::new(), Vec::new());
    for (tenant, next) in released {
        let at = params.len() + 1;
        cases.push(format!("WHEN ?{at} THEN CAST(?{} AS BIGINT)", at + 1));
        names.push(format!("?{at}"));
        params.push(db::Param::from(*tenant));
        params.push(db::Param::Int(*next));
    }
    let sql = format!(
        "UPDATE drift_schedule SET due_at = CASE tenant {} END, claimed_until = NULL
         WHERE holder = ?1 AND tenant IN ({})",
        cases.join(" "),
        names.join(", ")
    );
    db.execute(&sql, &params)?;
    Ok(())
}

/// Claims up to [`CLAIM_BATCH`] tenants due at `now` whose checks nobody holds (or
/// whose holder's claim lapsed): one statement, so of the servers that poll together
/// exactly one claims each tenant: on PostgreSQL each candidate is locked as it is
/// chosen, and one another server holds is passed over. The outer `due_at` and
/// `claimed_until` conditions check each row again as it is written, so a tenant is
/// never claimed twice.
fn claim(app: &App, now: i64, interval: i64) -> Result<Vec<(String, i64)>, ApiError> {
    let db = app.db.get()?;
    let sql = match db.backend() {
        // The candidates another replica is claiming or releasing right now are skipped,
        // not waited for: waiting, this claim would find them claimed when it re-read
        // them and come back with fewer or none, and an empty claim ends the replica's
        // round until its next poll while tenants are still due. The candidates are
        // chosen once (a materialized CTE), whatever the table's statistics say: a
        // plan that ran the choice again for every row took seconds a claim.
        db::Backend::Postgres => {
            "WITH due AS MATERIALIZED (
                 SELECT tenant FROM drift_schedule
                 WHERE due_at <= ?2 AND (claimed_until IS NULL OR claimed_until <= ?2)
                 ORDER BY due_at, tenant LIMIT ?4 FOR UPDATE SKIP LOCKED)
             UPDATE drift_schedule SET holder = ?1, claimed_until = ?3 FROM due
             WHERE drift_schedule.tenant = due.tenant
               AND due_at <= ?2 AND (claimed_until IS NULL OR claimed_until <= ?2)
             RETURNING drift_schedule.tenant, due_at"
        }
        // One writer: nobody else holds a row.
        db::Backend::Sqlite => {
            "UPDATE drift_schedule SET holder = ?1, claimed_until = ?3
             WHERE due_at <= ?2 AND (claimed_until IS NULL OR claimed_until <= ?2)
               AND tenant IN (SELECT tenant FROM drift_schedule
                              WHERE due_at <= ?2 AND (claimed_until IS NULL OR claimed_until <= ?2)
                              ORDER BY due_at, tenant LIMIT ?4)
             RETURNING tenant, due_at"
        }
    };
    let claimed = db.query(sql, params![&app.replica, now, now.saturating_add(interval), CLAIM_BATCH], |row| {
        Ok((row.get(0)?, row.get(1)?))
    })?;
    if !claimed.is_empty() {
        tracing::debug!(replica = %app.replica, claimed = claimed.len(), "fleet.drift claimed checks");
    }
    Ok(claimed)
}

struct Applied {
    tenant: String,
    document: String,
    prune: bool,
    principal: String,
    applied_at: String,
    revision: i64,
    /// The token whose authority heals this revision's drift, if it heals.
    heal_token: Option<String>,
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

const APPLIED: &str = "SELECT tenant, document, prune, applied_by, applied_at, revision, heal_token FROM fleet_applied";

fn applied_of(row: &db::Row) -> Result<Applied, db::Error> {
    Ok(Applied {
        tenant: row.get(0)?,
        document: row.get(1)?,
        prune: row.get(2)?,
        principal: row.get(3)?,
        applied_at: row.get(4)?,
        revision: row.get(5)?,
        heal_token: row.get(6)?,
    })
}

fn list_applied(app: &App) -> Result<Vec<Applied>, ApiError> {
    Ok(app.db.get()?.query(&format!("{APPLIED} ORDER BY tenant"), &[], applied_of)?)
}

/// Checks one tenant now, as an activation would (`fleet status --refresh`): records
/// the answer and publishes an event if it changed. `None` if it never applied.
pub fn check_tenant(app: &Arc<App>, tenant: &str) -> Result<Option<Outcome>, ApiError> {
    applied(app, tenant)?.map(|applied| check(app, &applied)).transpose()
}

fn applied(app: &App, tenant: &str) -> Result<Option<Applied>, ApiError> {
    Ok(app.db.get()?.query_opt(&format!("{APPLIED} WHERE tenant = ?1"), params![tenant], applied_of)?)
}

/// The applied documents of these tenants (those that have one), by tenant: one query.
fn applied_of_each(app: &App, tenants: &[&str]) -> Result<HashMap<String, Applied>, ApiError> {
    let names: Vec<String> = (1..=tenants.len()).map(|at| format!("?{at}")).collect();
    let params: Vec<db::Param> = tenants.iter().map(|tenant| db::Param::from(*tenant)).collect();
    let sql = format!("{APPLIED} WHERE tenant IN ({})", names.join(", "));
    let applied = app.db.get()?.query(&sql, &params, applied_of)?;
    Ok(applied.into_iter().map(|applied| (applied.tenant.clone(), applied)).collect())
}

/// The plan that would bring `tenant` back to its applied document, if it drifted, found
/// now and recorded nowhere: a read-only deployment's `status --refresh`.
pub fn drift_now(app: &Arc<App>, tenant: &str) -> Result<Option<Value>, ApiError> {
    let Some(applied) = applied(app, tenant)? else { return Ok(None) };
    let plan = replan(app, &applied)?;
    Ok(drifted(&plan).then_some(plan))
}

/// The applied document planned again, as the principal who applied it. The check asks
/// what would converge the estate, not what its applier may do now: it plans with every
/// grant, so that no change is blocked at plan time for a permission (SPEC §14). It only
/// ever plans.
fn replan(app: &Arc<App>, applied: &Applied) -> Result<Value, ApiError> {
    let document: Value = serde_json::from_str(&applied.document).map_err(ApiError::internal)?;
    let request = json!({ "document": document, "prune": applied.prune }).to_string();
    let every = crate::calls::auth::Grant::parse("compute:*:* @ *").map_err(ApiError::internal)?;
    let caller = Caller {
        tenant: applied.tenant.clone(),
        principal: applied.principal.clone(),
        grants: vec![every],
        token: None,
    };
    serde_json::from_str(&run_planner(app, caller, app.db.get()?, Entry::Plan, &request)?).map_err(ApiError::internal)
}

/// The fleet has drifted when planning its applied document again has any call or
/// blocked change.
fn drifted(plan: &Value) -> bool {
    let has = |list: &str| plan[list].as_array().is_some_and(|items| !items.is_empty());
    has("calls") || has("blocked")
}

/// Per drifted object of a drift plan (SPEC §6.5): the fields with their applied and
/// actual values, and who last changed the object, when and through which method (from
/// the audit trail; null when it has no record). The change's line for people stays.
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
        let last = crate::audit::last_change(db, tenant, kind, id)?;
        let (changed_by, changed_at, method) = match last {
            Some((principal, at, method)) => (json!(principal), json!(at), json!(method)),
            None => (Value::Null, Value::Null, Value::Null),
        };
        changes.push(json!({
            "kind": kind, "key": change["key"], "id": id, "action": change["action"], "fields": fields,
            "changedBy": changed_by, "changedAt": changed_at, "method": method, "text": change["text"],
        }));
    }
    Ok(changes)
}

/// Checks one tenant and records the answer.
fn check(app: &Arc<App>, applied: &Applied) -> Result<Outcome, ApiError> {
    let plan = replan(app, applied)?;
    match drifted(&plan) {
        true => settle(app, applied, &plan, None),
        false => record(app, applied, &plan, None, None),
    }
}

/// A check found drift: a revision that heals is applied again, with the authority of
/// the token that applied it (SPEC §15); a heal refused is recorded as the drift, with
/// why. A claimed check (`release_at`) ends its claim either way.
fn settle(app: &Arc<App>, applied: &Applied, plan: &Value, release_at: Option<i64>) -> Result<Outcome, ApiError> {
    let Some(token) = &applied.heal_token else { return record(app, applied, plan, release_at, None) };
    // The document as it was applied, not encoded again.
    let request = format!(r#"{{"document":{},"prune":{}}}"#, applied.document, applied.prune);
    let heal = crate::fleet::Heal { revision: applied.revision, token };
    match crate::fleet::heal(app, &applied.tenant, &heal, &request)? {
        Ok(calls) => {
            if let Some(next) = release_at {
                release_each(&app.db.get()?, &app.replica, &[(&applied.tenant, next)])?;
            }
            tracing::info!(tenant = %applied.tenant, revision = applied.revision, calls, "fleet.drift healed drift");
            Ok(Outcome::Healed { calls })
        }
        Err(refused) => {
            tracing::warn!(tenant = %applied.tenant, %refused, "fleet.drift could not heal drift");
            record(app, applied, plan, release_at, Some(&refused))
        }
    }
}

/// Records what a check's `plan` found and publishes an event if the answer changed
/// (with `heal_error`, why the drift was not healed); a claimed check (`release_at`:
/// when it is due next) ends its claim in the same transaction.
fn record(
    app: &Arc<App>,
    applied: &Applied,
    plan: &Value,
    release_at: Option<i64>,
    heal_error: Option<&str>,
) -> Result<Outcome, ApiError> {
    let found = drifted(plan).then(|| plan["planHash"].as_str().unwrap_or_default().to_owned());

    let db = app.db.get()?;
    let published = db::transaction(&db, Tx::Write(&applied.tenant), |db| {
        if let Some(next) = release_at {
            release_each(db, &app.replica, &[(&applied.tenant, next)])?;
        }
        // An apply since the plan above is itself a check: leave its answer alone.
        let still_applied: Option<String> =
            db.query_opt("SELECT applied_at FROM fleet_applied WHERE tenant = ?1", params![&applied.tenant], |row| {
                row.get(0)
            })?;
        if still_applied.as_deref() != Some(applied.applied_at.as_str()) {
            return Ok(false);
        }
        db.execute("UPDATE fleet_applied SET checked_at = ?2 WHERE tenant = ?1", params![&applied.tenant, &db::now()])?;
        let recorded: Option<(String, Option<String>)> = db.query_opt(
            "SELECT plan_hash, since FROM fleet_drift WHERE tenant = ?1",
            params![&applied.tenant],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        let now = db::now();
        let data = match &found {
            Some(plan_hash) => {
                let changes = drift_changes(db, &applied.tenant, plan)?;
                // Drifted since the first check that saw it, or the earliest change
                // made outside fleet after the apply, whichever came first.
                let since = match &recorded {
                    Some((_, Some(since))) => since.clone(),
                    _ => changes
                        .iter()
                        .filter_map(|change| change["changedAt"].as_str())
                        .filter(|at| *at >= applied.applied_at.as_str())
                        .min()
                        .map_or_else(|| now.clone(), str::to_owned),
                };
                let changes = Value::Array(changes);
                db.execute(
                    "INSERT INTO fleet_drift (tenant, checked_at, plan_hash, summary, changes, since)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (tenant) DO UPDATE SET checked_at = excluded.checked_at, plan_hash = excluded.plan_hash,
                       summary = excluded.summary, changes = excluded.changes, since = excluded.since",
                    params![
                        &applied.tenant,
                        &now,
                        plan_hash,
                        &plan["summary"].to_string(),
                        &changes.to_string(),
                        &since
                    ],
                )?;
                let mut data = json!({ "planHash": plan["planHash"], "summary": plan["summary"], "since": since, "changes": changes });
                if let Some(why) = heal_error {
                    data["healError"] = json!(why);
                }
                data
            }
            None => {
                db.execute("DELETE FROM fleet_drift WHERE tenant = ?1", params![&applied.tenant])?;
                let applied_hash: String = db.query_one(
                    "SELECT plan_hash FROM fleet_applied WHERE tenant = ?1",
                    params![&applied.tenant],
                    |row| row.get(0),
                )?;
                json!({ "planHash": applied_hash, "since": now })
            }
        };
        let recorded = recorded.map(|(plan_hash, _)| plan_hash);
        match transition(recorded.as_deref(), found.as_deref()) {
            Some(kind) => {
                events::publish(&app.metrics, db, &applied.tenant, kind, &data)?;
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
    use serde_json::json;

    use super::*;
    use crate::app::Config;
    use crate::calls::auth::Grant;
    use crate::calls::dispatch;
    use crate::calls::registry::{Ctx, Via};

    #[test]
    fn a_check_a_poll_late_keeps_its_cadence_and_a_later_one_starts_again_from_now() {
        assert_eq!(next_due(10_000, 10_000, 10_000), 20_000, "on time");
        assert_eq!(next_due(10_000, 12_500, 10_000), 20_000, "a poll late: still due at 20 s");
        assert_eq!(next_due(10_000, 12_501, 10_000), 22_501, "later: one interval from now");
        assert_eq!(next_due(10_000, 25_000, 10_000), 35_000, "more than an interval late: from now");
    }

    #[test]
    fn only_a_change_of_answer_publishes() {
        assert_eq!(transition(None, None), None);
        assert_eq!(transition(None, Some("sha256:a")), Some(events::DRIFTED));
        assert_eq!(transition(Some("sha256:a"), Some("sha256:a")), None);
        assert_eq!(transition(Some("sha256:a"), Some("sha256:b")), Some(events::DRIFTED));
        assert_eq!(transition(Some("sha256:a"), None), Some(events::CONVERGED));
    }

    struct Fixture {
        app: Arc<App>,
        _dir: tempfile::TempDir,
    }

    fn fixture(drift_interval: Duration) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::for_tests(dir.path().join("fleet.db"));
        config.drift_interval = drift_interval;
        let app = App::new(config).unwrap();
        Fixture { app, _dir: dir }
    }

    fn caller(tenant: &str) -> Caller {
        Caller {
            tenant: tenant.into(),
            principal: "alice".into(),
            grants: vec![Grant::parse("compute:*:*@*").unwrap()],
            token: None,
        }
    }

    fn document() -> Value {
        json!({"sites": {"eu-west": {"region": "eu-west-1"}},
               "providerAccounts": {"aws": {"provider": "aws"}},
               "pools": {"gpu-a": {"site": "eu-west", "account": "aws", "class": "gpu", "owner": "team-ml", "gpus": 8}}})
    }

    impl Fixture {
        fn tenant_with_applied_document(&self, tenant: &str) {
            let db = self.app.db.get().unwrap();
            crate::calls::auth::create_tenant(&db, tenant, "2026-11-30T00:00:00Z").unwrap();
            let apply = self.app.registry.by_name("compute.fleet.apply").unwrap();
            dispatch(&self.app, caller(tenant), db, apply, json!({"document": document()}).to_string().as_bytes())
                .unwrap();
        }

        fn call(&self, tenant: &str, method: &str, input: Value) -> Value {
            let db = self.app.db.get().unwrap();
            let caller = caller(tenant);
            let method = self.app.registry.by_name(method).unwrap();
            db::transaction(&db, Tx::Write(tenant), |db| {
                method.run_in(&Ctx { caller: &caller, db, via: Via::Api }, input)
            })
            .unwrap()
        }

        fn set_gpus(&self, tenant: &str, gpus: u64) {
            let pool = self.call(tenant, "compute.pools.list", json!({}))["items"][0]["id"].clone();
            self.call(tenant, "compute.pools.update", json!({"id": pool, "gpus": gpus}));
        }

        fn event_types(&self, tenant: &str) -> Vec<String> {
            let events = self.call(tenant, "compute.events.list", json!({}));
            events["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|event| event["type"].as_str().unwrap().to_owned())
                .collect()
        }
    }

    #[test]
    fn checks_publish_once_per_change_of_answer() {
        let fixture = fixture(Duration::from_secs(900));
        fixture.tenant_with_applied_document("acme");
        assert_eq!(check_all(&fixture.app), [("acme".to_owned(), Outcome::Converged)]);
        assert!(fixture.event_types("acme").is_empty());

        fixture.set_gpus("acme", 4);
        let outcome = check_all(&fixture.app);
        assert!(matches!(&outcome[0].1, Outcome::Drifted { .. }), "{outcome:?}");
        assert_eq!(check_all(&fixture.app), outcome, "the same drift again");
        assert_eq!(fixture.event_types("acme"), ["fleet.drifted"]);

        // Drift is identified by its plan hash, which covers the values the correction
        // changes from: the same value again is the same drift, a new one another.
        fixture.set_gpus("acme", 4);
        check_all(&fixture.app);
        assert_eq!(fixture.event_types("acme"), ["fleet.drifted"], "the same value");
        fixture.set_gpus("acme", 2);
        check_all(&fixture.app);
        assert_eq!(fixture.event_types("acme"), ["fleet.drifted"; 2], "the value moved again");
        let pool = fixture.call("acme", "compute.pools.list", json!({}))["items"][0]["id"].clone();
        fixture.call("acme", "compute.pools.update", json!({"id": pool, "vcpus": 3}));
        check_all(&fixture.app);
        assert_eq!(fixture.event_types("acme"), ["fleet.drifted"; 3], "another field drifted");

        fixture.set_gpus("acme", 8);
        fixture.call("acme", "compute.pools.update", json!({"id": pool, "vcpus": 0}));
        assert_eq!(check_all(&fixture.app), [("acme".to_owned(), Outcome::Converged)]);
        assert_eq!(fixture.event_types("acme"), ["fleet.drifted", "fleet.drifted", "fleet.drifted", "fleet.converged"]);
    }

    impl Fixture {
        /// A token of `tenant` for `alice` with `grants`, and the caller it makes.
        fn token(&self, tenant: &str, grants: &[&str]) -> Caller {
            let db = self.app.db.get().unwrap();
            let grants: Vec<String> = grants.iter().map(|grant| (*grant).to_owned()).collect();
            let secret = crate::calls::auth::create_token(&db, tenant, "alice", &grants, &db::now(), None).unwrap();
            crate::calls::auth::authenticate_with(&db, Some(&format!("Bearer {secret}")), None).unwrap()
        }

        /// Applies the fixture's document as `caller`, asking for heal.
        fn apply_healing(&self, caller: Caller, heal: bool) {
            let db = self.app.db.get().unwrap();
            let apply = self.app.registry.by_name("compute.fleet.apply").unwrap();
            let body = json!({"document": document(), "heal": heal}).to_string();
            dispatch(&self.app, caller, db, apply, body.as_bytes()).unwrap();
        }

        fn gpus(&self, tenant: &str) -> u64 {
            self.call(tenant, "compute.pools.list", json!({}))["items"][0]["gpus"].as_u64().unwrap()
        }

        fn last_event(&self, tenant: &str) -> Value {
            let events = self.call(tenant, "compute.events.list", json!({}));
            events["events"].as_array().unwrap().last().cloned().unwrap_or(Value::Null)
        }

        fn status(&self, tenant: &str) -> Value {
            let db = self.app.db.get().unwrap();
            let status = self.app.registry.by_name("compute.fleet.status").unwrap();
            serde_json::from_str(&dispatch(&self.app, caller(tenant), db, status, b"{}").unwrap()).unwrap()
        }
    }

    const EVERY: &str = "compute:*:* @ *";

    /// SPEC §15 in paused time: a revision that heals is applied again by the reconciler
    /// when its check finds drift, audited as a heal, and the tenant is converged.
    #[tokio::test(start_paused = true)]
    async fn a_revision_that_heals_is_restored_when_its_check_finds_drift() {
        let interval = Duration::from_secs(15 * 60);
        let fixture = fixture(interval);
        crate::calls::auth::create_tenant(&fixture.app.db.get().unwrap(), "acme", &db::now()).unwrap();
        fixture.apply_healing(fixture.token("acme", &[EVERY]), true);
        assert_eq!(fixture.status("acme")["applied"]["heal"], true);
        fixture.set_gpus("acme", 1);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let reconciler = tokio::spawn(run(fixture.app.clone(), async move {
            let _ = stopped.await;
        }));

        tokio::time::sleep(interval + Duration::from_secs(1)).await;
        events_reach(&fixture, "acme", 1).await;
        assert_eq!(fixture.event_types("acme"), ["fleet.healed"]);
        let healed = fixture.last_event("acme");
        assert_eq!((healed["data"]["revision"].as_i64(), healed["data"]["calls"].as_u64()), (Some(1), Some(1)));
        assert_eq!(fixture.gpus("acme"), 8, "the revision's value again");
        let status = fixture.status("acme");
        assert!(status.get("drift").is_none(), "{status}");
        assert_eq!(status["applied"]["revision"], 1, "a heal restores the revision, it makes no new one");
        let audit = fixture.call("acme", "compute.audit.list", json!({}));
        let last = audit["records"].as_array().unwrap().last().unwrap().clone();
        assert_eq!((last["via"].as_str(), last["method"].as_str()), (Some("fleet.heal"), Some("compute.pools.update")));
        assert_eq!(last["planHash"], healed["data"]["planHash"]);

        // Converged: the next check finds nothing to do and says nothing.
        tokio::time::sleep(interval + Duration::from_secs(1)).await;
        let checked = fixture.status("acme")["checkedAt"].clone();
        let started = std::time::Instant::now();
        while fixture.status("acme")["checkedAt"] == checked && started.elapsed() < Duration::from_secs(30) {
            tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(10))).await.unwrap();
        }
        assert_eq!(fixture.event_types("acme"), ["fleet.healed"]);
        assert!(fixture.status("acme").get("drift").is_none());
        let _ = stop.send(());
        reconciler.await.unwrap();
    }

    /// Waits, in paused time, for `tenant`'s events to number `count`: checks run on
    /// blocking threads in real time.
    async fn events_reach(fixture: &Fixture, tenant: &str, count: usize) {
        let started = std::time::Instant::now();
        while fixture.event_types(tenant).len() < count && started.elapsed() < Duration::from_secs(30) {
            tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(10))).await.unwrap();
        }
    }

    /// In paused time: a heal the token that asked for it can no longer make, or the
    /// policies in force deny, is refused; the drift is recorded with why, nothing
    /// changes, and the same refusal is not announced again at the next check.
    #[tokio::test(start_paused = true)]
    async fn a_heal_is_refused_when_its_token_or_the_policies_do_not_allow_it() {
        let interval = Duration::from_secs(15 * 60);
        let fixture = fixture(interval);
        let db = fixture.app.db.get().unwrap();
        let cases: [(&str, &[&str], &str); 4] = [
            ("revoked", &[EVERY], "was revoked"),
            ("expired", &[EVERY], "expired at 2001-01-01T00:00:00Z"),
            ("narrow", &["compute:fleet:admin @ compute-fleet"], "not permitted: compute:pools:write @ compute-pools"),
            ("denied", &[EVERY], "policy no-updates: updates wait for the change window"),
        ];
        for (tenant, grants, _) in cases {
            crate::calls::auth::create_tenant(&db, tenant, &db::now()).unwrap();
            // Everything made with every grant first, so that only the heal needs more.
            fixture.apply_healing(caller(tenant), false);
            let token = fixture.token(tenant, grants);
            let id = token.token.clone().unwrap();
            fixture.apply_healing(token, true);
            match tenant {
                "revoked" => crate::calls::auth::revoke_token(&db, &id, &db::now()).unwrap(),
                "expired" => {
                    db.execute("UPDATE tokens SET expires_at = '2001-01-01T00:00:00Z' WHERE id = ?1", params![&id])
                        .unwrap();
                }
                "denied" => {
                    let source = "package window\n\ndeny contains \"updates wait for the change window\" if {\n\tsome change in input.changes\n\tchange.action == \"update\"\n}\n";
                    let policy = json!({"name": "no-updates", "level": "enforced", "source": source});
                    fixture.call(tenant, "compute.policies.put", policy);
                }
                _ => {}
            }
            fixture.set_gpus(tenant, 1);
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let reconciler = tokio::spawn(run(fixture.app.clone(), async move {
            let _ = stopped.await;
        }));
        for round in 1..=2 {
            tokio::time::sleep(interval + Duration::from_secs(1)).await;
            for (tenant, _, why) in cases {
                events_reach(&fixture, tenant, 1).await;
                assert_eq!(fixture.event_types(tenant), ["fleet.drifted"], "{tenant}, check {round}");
                let error = fixture.last_event(tenant)["data"]["healError"].as_str().unwrap_or_default().to_owned();
                assert!(error.contains(why), "{tenant}: {error}");
                assert_eq!(fixture.gpus(tenant), 1, "{tenant}: nothing healed");
            }
        }

        // An apply without heal turns it off: drift is reported, not healed.
        fixture.apply_healing(fixture.token("revoked", &[EVERY]), false);
        assert_eq!(fixture.status("revoked")["applied"]["heal"], false);
        fixture.set_gpus("revoked", 2);
        tokio::time::sleep(interval + Duration::from_secs(1)).await;
        events_reach(&fixture, "revoked", 3).await;
        let event = fixture.last_event("revoked");
        assert_eq!(event["type"], "fleet.drifted");
        assert!(event["data"].get("healError").is_none(), "{event}");
        assert_eq!(fixture.gpus("revoked"), 2);
        let _ = stop.send(());
        reconciler.await.unwrap();
    }

    #[test]
    fn one_tenants_failure_does_not_stop_the_others() {
        let fixture = fixture(Duration::from_secs(900));
        fixture.tenant_with_applied_document("broken");
        fixture.tenant_with_applied_document("healthy");
        let db = fixture.app.db.get().unwrap();
        db.execute("UPDATE fleet_applied SET document = 'not json' WHERE tenant = 'broken'", &[]).unwrap();
        fixture.set_gpus("healthy", 1);
        let outcomes = check_all(&fixture.app);
        assert!(matches!(&outcomes[0], (tenant, Outcome::Failed(_)) if tenant == "broken"), "{outcomes:?}");
        assert!(matches!(&outcomes[1], (tenant, Outcome::Drifted { .. }) if tenant == "healthy"), "{outcomes:?}");
        assert_eq!(fixture.event_types("healthy"), ["fleet.drifted"]);
    }

    /// Two replicas on one database share the checks: each tenant due is checked by
    /// exactly one of them, once, and both do some of the work.
    #[test]
    fn replicas_share_the_due_checks_and_check_each_tenant_once() {
        let fixture = fixture(Duration::from_secs(900));
        let tenants: Vec<String> = (0..48).map(|n| format!("t{n:02}")).collect();
        for tenant in &tenants {
            fixture.tenant_with_applied_document(tenant);
        }
        let mut other = App::new(fixture.app.config.clone()).unwrap();
        Arc::get_mut(&mut other).expect("a new app is not shared").replica = "other:1".into();
        let interval = 900_000;
        let due = now_ms() + interval;
        let counts: Vec<usize> = std::thread::scope(|scope| {
            let replicas =
                [&fixture.app, &other].map(|app| scope.spawn(move || check_due(app, due, interval).unwrap()));
            replicas.map(|replica| replica.join().unwrap()).into()
        });
        assert_eq!(counts.iter().sum::<usize>(), tenants.len(), "{counts:?}");
        assert!(counts.iter().all(|&count| count > 0), "both replicas checked some: {counts:?}");
        let db = fixture.app.db.get().unwrap();
        let scheduled: Vec<(String, i64, Option<i64>)> = db
            .query("SELECT tenant, due_at, claimed_until FROM drift_schedule ORDER BY tenant", &[], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .unwrap();
        assert_eq!(
            scheduled.iter().map(|(tenant, _, _)| tenant).collect::<Vec<_>>(),
            tenants.iter().collect::<Vec<_>>()
        );
        for (tenant, due_at, claimed_until) in scheduled {
            assert_eq!(claimed_until, None, "{tenant}: no claim left in flight");
            assert!(due_at > due && due_at <= due + interval, "{tenant} is due once more, an interval on: {due_at}");
        }
        // Nothing is due now: another poll claims nothing.
        assert_eq!(check_due(&fixture.app, due, interval).unwrap(), 0);
    }

    /// One claimed batch holds every kind of check: a quiet one (recorded with the
    /// batch), one that finds drift, one that ends a recorded drift, and a tenant that
    /// never applied. Each publishes what it should, and every claim ends.
    #[test]
    fn a_batch_of_checks_records_each_answer() {
        let fixture = fixture(Duration::from_secs(900));
        for tenant in ["quiet", "drifting", "recovering"] {
            fixture.tenant_with_applied_document(tenant);
        }
        fixture.set_gpus("recovering", 1);
        assert!(matches!(check_tenant(&fixture.app, "recovering").unwrap(), Some(Outcome::Drifted { .. })));
        fixture.set_gpus("recovering", 8);
        fixture.set_gpus("drifting", 2);
        let db = fixture.app.db.get().unwrap();
        crate::calls::auth::create_tenant(&db, "never-applied", "2026-11-30T00:00:00Z").unwrap();
        db.execute("INSERT INTO drift_schedule (tenant, due_at) VALUES ('never-applied', 0)", &[]).unwrap();
        let checked_at = |tenant: &str| -> Option<String> {
            db.query_one("SELECT checked_at FROM fleet_applied WHERE tenant = ?1", params![tenant], |row| row.get(0))
                .unwrap()
        };
        db.execute("UPDATE fleet_applied SET checked_at = '2026-01-01T00:00:00Z' WHERE tenant = 'quiet'", &[]).unwrap();

        let interval = 900_000;
        let due = now_ms() + interval;
        assert_eq!(check_due(&fixture.app, due, interval).unwrap(), 4);
        assert!(fixture.event_types("quiet").is_empty());
        assert_eq!(fixture.event_types("drifting"), ["fleet.drifted"]);
        assert_eq!(fixture.event_types("recovering"), ["fleet.drifted", "fleet.converged"]);
        assert_ne!(checked_at("quiet").as_deref(), Some("2026-01-01T00:00:00Z"), "the quiet check's time is recorded");
        let open: i64 = db
            .query_one(
                "SELECT COUNT(*) FROM drift_schedule WHERE claimed_until IS NOT NULL OR due_at <= ?1",
                params![due],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(open, 0, "every claim ended, each due an interval on");
        assert_eq!(check_due(&fixture.app, due, interval).unwrap(), 0);
    }

    /// The checks a replica claimed and never finished (it died) are taken by another
    /// once the claim lapses, not before.
    #[test]
    fn a_dead_replicas_claims_are_taken_over_when_they_lapse() {
        let fixture = fixture(Duration::from_secs(900));
        fixture.tenant_with_applied_document("acme");
        let interval = 900_000;
        let due = now_ms() + interval;
        let db = fixture.app.db.get().unwrap();
        db.execute(
            "UPDATE drift_schedule SET holder = 'dead:1', claimed_until = ?1 WHERE tenant = 'acme'",
            params![due + 1000],
        )
        .unwrap();
        assert_eq!(check_due(&fixture.app, due, interval).unwrap(), 0, "the claim still holds");
        assert_eq!(check_due(&fixture.app, due + 1000, interval).unwrap(), 1, "the claim lapsed");
    }

    /// The schedule, in paused time: nothing before the first interval, a check after it.
    #[tokio::test(start_paused = true)]
    async fn checks_run_every_interval() {
        let interval = Duration::from_secs(15 * 60);
        let fixture = fixture(interval);
        fixture.tenant_with_applied_document("acme");
        fixture.set_gpus("acme", 1);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let reconciler = tokio::spawn(run(fixture.app.clone(), async move {
            let _ = stopped.await;
        }));

        tokio::time::sleep(interval - Duration::from_secs(60)).await;
        assert!(fixture.event_types("acme").is_empty(), "no check before the interval");

        tokio::time::sleep(Duration::from_secs(61)).await;
        // The check itself runs on a blocking thread in real time.
        let started = std::time::Instant::now();
        while fixture.event_types("acme").is_empty() && started.elapsed() < Duration::from_secs(30) {
            tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(10))).await.unwrap();
        }
        assert_eq!(fixture.event_types("acme"), ["fleet.drifted"]);
        let _ = stop.send(());
        reconciler.await.unwrap();
    }
}

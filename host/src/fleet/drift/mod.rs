//! `fleet.drift`: the background reconciler of SPEC §6.5.
//!
//! Level-triggered and idempotent: each activation takes no input, re-plans every due
//! tenant's applied document as the principal who applied it with its prune flag, and
//! compares the answer with the recorded one. Only a change of answer publishes an
//! event, so running it twice in a row, or after a crash, publishes nothing new. One
//! tenant's failure is logged and reported, and never stops the others.
//!
//! The [`Reconciler`] holds only its handles (the planning, the dispatcher whose
//! registry a heal's calls run from and which checks a heal's token, this replica's
//! name); `status --refresh` asks it through [`Checks`] to check one tenant now.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::{Heal, Planning, heal};
use crate::api::{ApiError, Code};
use crate::calls::Dispatcher;
use crate::calls::auth::{Caller, Grant};
use crate::db::params;
use crate::db::{self, Tx};
use crate::events;
use crate::store::trail;

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

/// What one activation did: the due tenants this replica checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Activation {
    pub checked: usize,
}

/// `fleet.drifted`'s data for a check's `plan` (see [`Reconciler::drifted_event`]).
fn drifted_data(
    db: &db::Conn,
    applied: &Applied,
    plan: &Value,
    recorded_since: Option<&str>,
    now: &str,
) -> Result<Value, ApiError> {
    let changes = drift_changes(db, &applied.tenant, plan)?;
    let since = match recorded_since {
        Some(since) => since.to_owned(),
        None => changes
            .iter()
            .filter_map(|change| change["changedAt"].as_str())
            .filter(|at| *at >= applied.applied_at.as_str())
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

/// How many due tenants a replica claims at once: small, so that replicas share the
/// work about evenly and a replica that dies holds few checks.
const CLAIM_BATCH: i64 = 16;

/// A request to check one tenant now, and where its answer goes.
struct Asked {
    tenant: String,
    answer: oneshot::Sender<Result<Option<Outcome>, ApiError>>,
}

/// What `status --refresh` asks the reconciler through: check one tenant now, as an
/// activation would (recording the answer, publishing if it changed).
#[derive(Clone)]
pub struct Checks(mpsc::Sender<Asked>);

/// Where a reconciler receives what [`Checks`] asks.
pub struct Asking(mpsc::Receiver<Asked>);

/// A handle, and what the reconciler it is given to listens on.
pub fn checks() -> (Checks, Asking) {
    let (sender, receiver) = mpsc::channel(64);
    (Checks(sender), Asking(receiver))
}

impl Checks {
    /// Checks `tenant` now and answers how it went (`None`: it never applied). Called
    /// on a blocking thread: it waits for the reconciler's answer.
    pub fn check_now(&self, tenant: &str) -> Result<Option<Outcome>, ApiError> {
        let stopped = || ApiError::new(Code::Unavailable, "the drift reconciler is not running; try again shortly");
        let (answer, answered) = oneshot::channel();
        self.0.blocking_send(Asked { tenant: tenant.to_owned(), answer }).map_err(|_| stopped())?;
        answered.blocking_recv().map_err(|_| stopped())?
    }
}

/// The reconciler: level-triggered checks of every tenant's applied document, once per
/// interval across every replica on the database.
pub struct Reconciler {
    planning: Arc<Planning>,
    dispatcher: Arc<Dispatcher>,
    /// This server among the replicas on its database, as drift claims name their
    /// holder: `<host>:<pid>`.
    replica: String,
}

impl Reconciler {
    pub fn new(planning: Arc<Planning>, dispatcher: Arc<Dispatcher>) -> Reconciler {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "localhost".into());
        Reconciler { planning, dispatcher, replica: format!("{}:{}", host.trim(), std::process::id()) }
    }

    /// The reconciler, named as another replica (tests of replicas sharing checks).
    pub fn named(self, replica: &str) -> Reconciler {
        Reconciler { replica: replica.to_owned(), ..self }
    }

    /// Runs every tenant's check once per drift interval across every server on the
    /// database, and the checks `status --refresh` asks for, until `shutdown` resolves.
    /// Each server polls a few times per interval and claims due tenants a few at a
    /// time, each claim one statement, so that of the servers that poll together
    /// exactly one claims each tenant: with R replicas each checks about 1/R of the
    /// tenants. A claim holds for one interval while its check is in flight; a server
    /// that dies loses only those, which another claims once they lapse
    /// (docs/decisions/0014).
    pub async fn run(self: Arc<Self>, asking: Asking, shutdown: impl std::future::Future<Output = ()>) {
        let interval = self.planning.drift_interval;
        let clock = Clock::start();
        let mut poll = tokio::time::interval((interval / 4).clamp(Duration::from_millis(10), Duration::from_secs(15)));
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut asking = asking.0;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = poll.tick() => {
                    let (reconciler, now) = (self.clone(), clock.now_ms());
                    match tokio::task::spawn_blocking(move || reconciler.activate(now)).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => tracing::error!(%error, "fleet.drift could not claim its checks"),
                        Err(error) => tracing::error!(%error, "the drift check panicked"),
                    }
                }
                Some(asked) = asking.recv() => {
                    let reconciler = self.clone();
                    tokio::task::spawn_blocking(move || {
                        let _ = asked.answer.send(reconciler.check_tenant(&asked.tenant));
                    });
                }
                () = &mut shutdown => return,
            }
        }
    }
    /// One activation: claims and checks the tenants due at `now`, a batch at a time,
    /// until none is due.
    pub fn activate(&self, now: i64) -> Result<Activation, ApiError> {
        let interval = millis(self.planning.drift_interval);
        let mut checked = 0;
        loop {
            let claimed = self.claim(now, interval)?;
            if claimed.is_empty() {
                return Ok(Activation { checked });
            }
            self.check_claimed(now, interval, &claimed)?;
            self.planning.metrics.drift_checks.inc_by(claimed.len() as u64);
            checked += claimed.len();
        }
    }

    /// Checks a batch of claimed tenants. Most checks find what the last one found, no
    /// drift, and so change nothing but the time they ran: those are recorded together,
    /// in one statement for the batch, and their claims end together in another. A check
    /// that finds drift, or ends a recorded one, or that an apply overtook, is recorded in
    /// a transaction of its own under the tenant's write lock, which publishes its event.
    fn check_claimed(&self, now: i64, interval: i64, claimed: &[(String, i64)]) -> Result<(), ApiError> {
        let tenants: Vec<&str> = claimed.iter().map(|(tenant, _)| tenant.as_str()).collect();
        let mut applied = applied_of_each(&self.planning.db.get()?, &tenants)?;
        let mut quiet = Vec::new();
        let mut released: Vec<(&str, i64)> = Vec::new();
        for (tenant, due_at) in claimed {
            let next = next_due(*due_at, now, interval);
            let Some(applied) = applied.remove(tenant) else {
                released.push((tenant, next));
                continue;
            };
            match replan(&self.planning, &applied) {
                Ok(plan) if !drifted(&plan) => {
                    released.push((tenant, next));
                    quiet.push((applied, plan));
                }
                Ok(plan) => {
                    if let Err(error) = self.settle(&applied, &plan, Some(next)) {
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
        let db = self.planning.db.get()?;
        let recorded = record_quiet(&db, &quiet)?;
        for (applied, plan) in quiet.iter().filter(|(applied, _)| !recorded.contains(&applied.tenant)) {
            // Not quiet after all: it ends a recorded drift, or an apply came between.
            if let Err(error) = self.record(applied, plan, None, None) {
                tracing::error!(tenant = %applied.tenant, %error, "fleet.drift could not record a check");
            }
        }
        release_each(&db, &self.replica, &released)
    }

    /// Claims up to [`CLAIM_BATCH`] tenants due at `now` whose checks nobody holds (or
    /// whose holder's claim lapsed): one statement, so of the servers that poll together
    /// exactly one claims each tenant: on PostgreSQL each candidate is locked as it is
    /// chosen, and one another server holds is passed over. The outer `due_at` and
    /// `claimed_until` conditions check each row again as it is written, so a tenant is
    /// never claimed twice.
    fn claim(&self, now: i64, interval: i64) -> Result<Vec<(String, i64)>, ApiError> {
        let db = self.planning.db.get()?;
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
        let claimed = db.query(sql, params![&self.replica, now, now.saturating_add(interval), CLAIM_BATCH], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
        if !claimed.is_empty() {
            tracing::debug!(replica = %self.replica, claimed = claimed.len(), "fleet.drift claimed checks");
        }
        Ok(claimed)
    }

    /// One activation over every tenant with an applied document.
    pub fn check_all(&self) -> Vec<(String, Outcome)> {
        let applied = match self.planning.db.get().map_err(ApiError::from).and_then(|db| list_applied(&db)) {
            Ok(applied) => applied,
            Err(error) => {
                tracing::error!(%error, "fleet.drift could not list the applied documents");
                return Vec::new();
            }
        };
        let mut outcomes = Vec::new();
        for applied in applied {
            let outcome = self.check(&applied).unwrap_or_else(|error| {
                tracing::error!(tenant = %applied.tenant, %error, "fleet.drift could not check a tenant");
                Outcome::Failed(error.to_string())
            });
            outcomes.push((applied.tenant, outcome));
        }
        outcomes
    }

    /// Checks one tenant now, as an activation would (`fleet status --refresh`): records
    /// the answer and publishes an event if it changed. `None` if it never applied.
    pub fn check_tenant(&self, tenant: &str) -> Result<Option<Outcome>, ApiError> {
        applied(&self.planning.db.get()?, tenant)?.map(|applied| self.check(&applied)).transpose()
    }

    /// Checks one tenant and records the answer.
    fn check(&self, applied: &Applied) -> Result<Outcome, ApiError> {
        let plan = replan(&self.planning, applied)?;
        match drifted(&plan) {
            true => self.settle(applied, &plan, None),
            false => self.record(applied, &plan, None, None),
        }
    }

    /// A check found drift: a revision that heals is applied again, with the authority of
    /// the token that applied it (SPEC §15); a heal refused is recorded as the drift, with
    /// why. A claimed check (`release_at`) ends its claim either way.
    fn settle(&self, applied: &Applied, plan: &Value, release_at: Option<i64>) -> Result<Outcome, ApiError> {
        let Some(token) = &applied.heal_token else { return self.record(applied, plan, release_at, None) };
        // The document as it was applied, not encoded again.
        let request = format!(r#"{{"document":{},"prune":{}}}"#, applied.document, applied.prune);
        // The drift is told before it is healed, with who made each change.
        let drifted = self.drifted_event(applied, plan)?;
        let heal_of = Heal { revision: applied.revision, token, drifted: &drifted };
        match heal(&self.planning, &self.dispatcher, &applied.tenant, &heal_of, &request)? {
            Ok(calls) => {
                if let Some(next) = release_at {
                    release_each(&self.planning.db.get()?, &self.replica, &[(&applied.tenant, next)])?;
                }
                tracing::info!(tenant = %applied.tenant, revision = applied.revision, calls, "fleet.drift healed drift");
                Ok(Outcome::Healed { calls })
            }
            Err(refused) => {
                tracing::warn!(tenant = %applied.tenant, %refused, "fleet.drift could not heal drift");
                self.record(applied, plan, release_at, Some(&refused))
            }
        }
    }

    /// What `fleet.drifted` says of a check's `plan`: its hash and summary, each change
    /// with who made it, and since when: the first check that saw it
    /// (`recorded_since`), or the earliest change made outside fleet after the apply.
    /// The changes come out of the database (the audit trail names who changed what).
    fn drifted_event(&self, applied: &Applied, plan: &Value) -> Result<Value, ApiError> {
        let db = self.planning.db.get()?;
        let recorded: Option<Option<String>> =
            db.query_opt("SELECT since FROM fleet_drift WHERE tenant = ?1", params![&applied.tenant], |row| {
                row.get(0)
            })?;
        drifted_data(&db, applied, plan, recorded.flatten().as_deref(), &db::now())
    }

    /// Records what a check's `plan` found and publishes an event if the answer changed
    /// (with `heal_error`, why the drift was not healed); a claimed check (`release_at`:
    /// when it is due next) ends its claim in the same transaction.
    fn record(
        &self,
        applied: &Applied,
        plan: &Value,
        release_at: Option<i64>,
        heal_error: Option<&str>,
    ) -> Result<Outcome, ApiError> {
        let found = drifted(plan).then(|| plan["planHash"].as_str().unwrap_or_default().to_owned());

        let db = self.planning.db.get()?;
        let published = db::transaction(&db, Tx::Write(&applied.tenant), |db| {
            if let Some(next) = release_at {
                release_each(db, &self.replica, &[(&applied.tenant, next)])?;
            }
            // An apply since the plan above is itself a check: leave its answer alone.
            let still_applied: Option<String> = db.query_opt(
                "SELECT applied_at FROM fleet_applied WHERE tenant = ?1",
                params![&applied.tenant],
                |row| row.get(0),
            )?;
            if still_applied.as_deref() != Some(applied.applied_at.as_str()) {
                return Ok(false);
            }
            db.execute(
                "UPDATE fleet_applied SET checked_at = ?2 WHERE tenant = ?1",
                params![&applied.tenant, &db::now()],
            )?;
            let recorded: Option<(String, Option<String>)> = db.query_opt(
                "SELECT plan_hash, since FROM fleet_drift WHERE tenant = ?1",
                params![&applied.tenant],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
            let now = db::now();
            let data = match &found {
                Some(plan_hash) => {
                    let recorded_since = recorded.as_ref().and_then(|(_, since)| since.as_deref());
                    let mut data = drifted_data(db, applied, plan, recorded_since, &now)?;
                    let (since, changes) = (data["since"].as_str().unwrap_or_default().to_owned(), &data["changes"]);
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
                    events::publish(&self.planning.metrics, db, &applied.tenant, kind, &data)?;
                    // An operator reading the log sees what the events say.
                    match found.as_deref() {
                        Some(plan_hash) => tracing::info!(tenant = %applied.tenant, %plan_hash, "drift found"),
                        None => tracing::info!(tenant = %applied.tenant, "converged again"),
                    }
                    Ok(true)
                }
                None => Ok(false),
            }
        })?;
        if published {
            let _ = self.planning.wake.send(());
        }
        Ok(match found {
            Some(plan_hash) => Outcome::Drifted { plan_hash },
            None => Outcome::Converged,
        })
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

fn list_applied(db: &db::Conn) -> Result<Vec<Applied>, ApiError> {
    Ok(db.query(&format!("{APPLIED} ORDER BY tenant"), &[], applied_of)?)
}

fn applied(db: &db::Conn, tenant: &str) -> Result<Option<Applied>, ApiError> {
    Ok(db.query_opt(&format!("{APPLIED} WHERE tenant = ?1"), params![tenant], applied_of)?)
}

/// The applied documents of these tenants (those that have one), by tenant: one query.
fn applied_of_each(db: &db::Conn, tenants: &[&str]) -> Result<HashMap<String, Applied>, ApiError> {
    let names: Vec<String> = (1..=tenants.len()).map(|at| format!("?{at}")).collect();
    let params: Vec<db::Param> = tenants.iter().map(|tenant| db::Param::from(*tenant)).collect();
    let sql = format!("{APPLIED} WHERE tenant IN ({})", names.join(", "));
    let applied = db.query(&sql, &params, applied_of)?;
    Ok(applied.into_iter().map(|applied| (applied.tenant.clone(), applied)).collect())
}

/// The plan that would bring `tenant` back to its applied document, if it drifted, found
/// now and recorded nowhere: a read-only deployment's `status --refresh`.
pub fn drift_now(planning: &Planning, tenant: &str) -> Result<Option<Value>, ApiError> {
    let Some(applied) = applied(&planning.db.get()?, tenant)? else { return Ok(None) };
    let plan = replan(planning, &applied)?;
    Ok(drifted(&plan).then_some(plan))
}

/// The applied document planned again, as the principal who applied it. The check asks
/// what would converge the estate, not what its applier may do now: it plans with every
/// grant, so that no change is blocked at plan time for a permission (SPEC §14). It only
/// ever plans.
fn replan(planning: &Planning, applied: &Applied) -> Result<Value, ApiError> {
    let document: Value = serde_json::from_str(&applied.document).map_err(ApiError::internal)?;
    let request = json!({ "document": document, "prune": applied.prune }).to_string();
    let every = Grant::parse("compute:*:* @ *").map_err(ApiError::internal)?;
    let caller = Caller {
        tenant: applied.tenant.clone(),
        principal: applied.principal.clone(),
        grants: vec![every],
        token: None,
    };
    serde_json::from_str(&planning.plan(caller, &request)?).map_err(ApiError::internal)
}

/// The tenants whose last check found drift, and those it found converged: the gauges
/// of `/metrics`, read from the database so that every replica reports the same.
pub fn tenants(db: &db::Conn) -> Result<(i64, i64), ApiError> {
    let (applied, drifted): (i64, i64) =
        db.query_one("SELECT (SELECT count(*) FROM fleet_applied), (SELECT count(*) FROM fleet_drift)", &[], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
    Ok((drifted, applied - drifted))
}

/// The fleet has drifted when planning its applied document again has any call or
/// blocked change.
fn drifted(plan: &Value) -> bool {
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

#[cfg(test)]
mod tests;

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

mod changes;

/// The clock [`Reconciler::activate`] is given its time by.
pub use super::schedule::now_ms;
pub use changes::drift_changes;
use changes::{drifted, drifted_data, transition};

use super::apply::{Heal, heal};
use super::planning::Planning;
use super::request::PlannerRequest;
use super::schedule::{self, Clock, millis, next_due, release_each};
use crate::api::{ApiError, Code};
use crate::calls::Dispatcher;
use crate::calls::auth::{Caller, Grant};
use crate::db::params;
use crate::db::{self, Tx};
use crate::events;

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
            let claimed = schedule::claim(&self.planning.db.get()?, &self.replica, now, interval)?;
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
        applied_document(&self.planning.db.get()?, tenant)?.map(|applied| self.check(&applied)).transpose()
    }

    /// Checks one tenant and records the answer.
    fn check(&self, applied: &AppliedDocument) -> Result<Outcome, ApiError> {
        let plan = replan(&self.planning, applied)?;
        match drifted(&plan) {
            true => self.settle(applied, &plan, None),
            false => self.record(applied, &plan, None, None),
        }
    }

    /// A check found drift: a revision that heals is applied again, with the authority of
    /// the token that applied it (SPEC §15); a heal refused is recorded as the drift, with
    /// why. A claimed check (`release_at`) ends its claim either way.
    fn settle(&self, applied: &AppliedDocument, plan: &Value, release_at: Option<i64>) -> Result<Outcome, ApiError> {
        let Some(token) = &applied.heal_token else { return self.record(applied, plan, release_at, None) };
        // The document as it was applied, not encoded again.
        let request = PlannerRequest::of(&applied.document, applied.prune)?.text()?;
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
    fn drifted_event(&self, applied: &AppliedDocument, plan: &Value) -> Result<Value, ApiError> {
        let db = self.planning.db.get()?;
        let recorded: Option<Option<String>> =
            db.query_opt("SELECT since FROM fleet_drift WHERE tenant = ?1", params![&applied.tenant], |row| {
                row.get(0)
            })?;
        drifted_data(&db, (&applied.tenant, &applied.applied_at), plan, recorded.flatten().as_deref(), &db::now())
    }

    /// Records what a check's `plan` found and publishes an event if the answer changed
    /// (with `heal_error`, why the drift was not healed); a claimed check (`release_at`:
    /// when it is due next) ends its claim in the same transaction.
    fn record(
        &self,
        applied: &AppliedDocument,
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
                    let mut data =
                        drifted_data(db, (&applied.tenant, &applied.applied_at), plan, recorded_since, &now)?;
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
                    events::publish(db, &applied.tenant, kind, &data)?;
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

/// Records the time of the checks in `quiet` that found no drift where none was
/// recorded, for the same applied document as they planned: one statement. Returns the
/// tenants it recorded; the others need a check's whole record.
fn record_quiet(db: &db::Conn, quiet: &[(AppliedDocument, Value)]) -> Result<Vec<String>, ApiError> {
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

/// A tenant's applied document, as its checks read it.
struct AppliedDocument {
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

fn applied_of(row: &db::Row) -> Result<AppliedDocument, db::Error> {
    Ok(AppliedDocument {
        tenant: row.get(0)?,
        document: row.get(1)?,
        prune: row.get(2)?,
        principal: row.get(3)?,
        applied_at: row.get(4)?,
        revision: row.get(5)?,
        heal_token: row.get(6)?,
    })
}

fn list_applied(db: &db::Conn) -> Result<Vec<AppliedDocument>, ApiError> {
    Ok(db.query(&format!("{APPLIED} ORDER BY tenant"), &[], applied_of)?)
}

fn applied_document(db: &db::Conn, tenant: &str) -> Result<Option<AppliedDocument>, ApiError> {
    Ok(db.query_opt(&format!("{APPLIED} WHERE tenant = ?1"), params![tenant], applied_of)?)
}

/// The applied documents of these tenants (those that have one), by tenant: one query.
fn applied_of_each(db: &db::Conn, tenants: &[&str]) -> Result<HashMap<String, AppliedDocument>, ApiError> {
    let names: Vec<String> = (1..=tenants.len()).map(|at| format!("?{at}")).collect();
    let params: Vec<db::Param> = tenants.iter().map(|tenant| db::Param::from(*tenant)).collect();
    let sql = format!("{APPLIED} WHERE tenant IN ({})", names.join(", "));
    let applied = db.query(&sql, &params, applied_of)?;
    Ok(applied.into_iter().map(|applied| (applied.tenant.clone(), applied)).collect())
}

/// The plan that would bring `tenant` back to its applied document, if it drifted, found
/// now and recorded nowhere: a read-only deployment's `status --refresh`.
pub fn drift_now(planning: &Planning, tenant: &str) -> Result<Option<Value>, ApiError> {
    let Some(applied) = applied_document(&planning.db.get()?, tenant)? else { return Ok(None) };
    let plan = replan(planning, &applied)?;
    Ok(drifted(&plan).then_some(plan))
}

/// The applied document planned again, as the principal who applied it. The check asks
/// what would converge the estate, not what its applier may do now: it plans with every
/// grant, so that no change is blocked at plan time for a permission (SPEC §14). It only
/// ever plans.
fn replan(planning: &Planning, applied: &AppliedDocument) -> Result<Value, ApiError> {
    let request = PlannerRequest::of(&applied.document, applied.prune)?.text()?;
    let every = Grant::parse("compute:*:* @ *").map_err(ApiError::internal)?;
    let caller = Caller {
        tenant: applied.tenant.clone(),
        principal: applied.principal.clone(),
        grants: vec![every],
        token: None,
        git_source: None,
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

#[cfg(test)]
mod tests;

//! Apply (SPEC §6.3), a proposal's apply (§17) and the heal that fleet.drift makes
//! (§15): in one write transaction the planner plans again and runs every call through
//! the module handlers, then what the apply leaves is recorded with it: the overlay's
//! writes and the audit records, the name bindings, the revision and the applied
//! document, the proposal it applied, the drift it ends, and the next check's time.

use std::sync::Arc;
use std::time::Duration;

use fleet_guest::grammar::is_name;
use serde_json::{Value, json};

use super::{Planning, bindings, drift, history, proposals};
use crate::api::{ApiError, Code};
use crate::calls::Dispatcher;
use crate::calls::auth::Caller;
use crate::calls::context::{Ctx, Via};
use crate::calls::registry::{Answer, Call, Registry};
use crate::db::params;
use crate::db::{self, Conn};
use crate::events;
use crate::planner::{ApprovalGate, Entry, Session};
use crate::store::trail;

/// SPEC §6.3: in one write transaction, a fresh planner plans, checks the planHash (if
/// given) and the blocked changes, and runs every call through `methods.invoke`, which
/// authorizes each as the caller and runs it through the module handlers; then the
/// bindings and the applied document are recorded, and it commits. Any error rolls all
/// of it back. Unpinned, the plan applied is the one made inside the transaction, so
/// identical concurrent applies converge (the later ones with no calls).
pub(super) fn apply(planning: &Planning, call: Call) -> Answer {
    let how = match proposals::named(call.body) {
        Ok(None) => How::Apply,
        Ok(Some(number)) => How::Proposal(number),
        Err(error) => return Answer::from(Err(error)),
    };
    let (sandbox, applied) = applied(planning, call.methods, call.caller, call.db, call.body, how);
    let output = applied.map(|applied| applied.map(|(output, _)| output).unwrap_or_default());
    Answer { output, sandbox }
}

/// What an apply is: a document's, an approved proposal's (by its number), or a heal.
#[derive(Clone, Copy)]
enum How<'a> {
    Apply,
    Proposal(i64),
    Heal(&'a Heal<'a>),
}

/// A heal fleet.drift makes (SPEC §15): the revision it restores, if it is still the
/// applied one with the same heal token when the heal's transaction begins.
pub struct Heal<'a> {
    pub revision: i64,
    pub token: &'a str,
    /// What `fleet.drifted` says of the drift it heals, published first.
    pub drifted: &'a Value,
}

/// An apply, a proposal's or a heal: the heal is audited `fleet.heal`, records no
/// revision, and ends the drift with `fleet.healed`. Answers the guest's CPU time, and
/// the output and the calls made; a heal that an apply overtook makes nothing and
/// answers none.
fn applied(
    planning: &Planning,
    methods: &Arc<Registry>,
    caller: Caller,
    db: Conn,
    body: &str,
    how: How,
) -> (Duration, Result<Option<(String, u64)>, ApiError>) {
    if let Err(error) = db::begin(&db, db::Tx::Write(&caller.tenant)) {
        return (Duration::ZERO, Err(error));
    }
    // A proposal's apply plans the proposal's own request, pinned to its plan hash.
    let proposed = match how {
        How::Proposal(number) => match proposals::request_to_apply(&db, &caller, methods, number, body) {
            Ok(to_apply) => Some(to_apply),
            Err(error) => return (Duration::ZERO, db::finish(&db, Err(error))),
        },
        _ => None,
    };
    let body = proposed.as_ref().map_or(body, |to_apply| to_apply.request.as_str());
    let author = proposed.as_ref().map(|to_apply| to_apply.author.clone());
    let heal = match how {
        How::Heal(heal) => Some(heal),
        _ => None,
    };
    if let Some(heal) = heal {
        let current = db.query_opt(
            "SELECT revision, heal_token FROM fleet_applied WHERE tenant = ?1",
            params![&caller.tenant],
            |row| Ok((row.get::<i64>(0)?, row.get::<Option<String>>(1)?)),
        );
        // An apply since the check found the drift: the heal is no longer wanted.
        match current {
            Ok(current) if current == Some((heal.revision, Some(heal.token.to_owned()))) => {}
            Ok(_) => return (Duration::ZERO, db::finish(&db, Ok(None))),
            Err(error) => return (Duration::ZERO, db::finish(&db, Err(error.into()))),
        }
    }
    let gate = match how {
        How::Apply if planning.require_approval => ApprovalGate::EveryChange,
        How::Apply => ApprovalGate::Verdicts,
        How::Proposal(_) | How::Heal(_) => ApprovalGate::None,
    };
    let session = Session::new(caller, db, planning.source()).planned_as(author).applying(methods.clone()).gated(gate);
    let (session, result) = planning.sandbox.call(session, Entry::Apply, body);
    let recorded = result.and_then(|output| {
        let applied: Applied = serde_json::from_str(&output).map_err(ApiError::internal)?;
        if let Some(apply) = &session.methods {
            let ctx = Ctx { caller: &session.caller, db: &session.db, via: Via::Apply(&apply.deferred) };
            let overrides = applied.overrides.iter().map(|item| (&*item.policy, &*item.reason));
            crate::policies::record_overrides(&ctx, overrides)?;
            apply.deferred.objects.flush(&session.db, &session.caller.tenant)?;
            let via = if heal.is_some() { "fleet.heal" } else { "fleet.apply" };
            trail::write_pending(&session.db, &apply.deferred.audits, via, &applied.plan.plan_hash)?;
        }
        match how {
            How::Apply => {
                record(planning, &session.db, &session.caller, body, &applied, None)?;
            }
            How::Proposal(number) => {
                let revision = record(planning, &session.db, &session.caller, body, &applied, Some(number))?;
                proposals::applied(planning, &session.db, &session.caller, number, revision)?;
            }
            How::Heal(heal) => record_heal(planning, &session.db, &session.caller, &applied, heal)?,
        }
        drift::schedule(&session.db, &session.caller.tenant, drift::now_ms(), planning.drift_interval)?;
        let calls = applied.applied;
        Ok((output, calls))
    });
    let finished = db::finish(&session.db, recorded).map(|(output, calls)| {
        planning.metrics.apply_calls.inc_by(calls);
        let _ = planning.wake.send(());
        Some((output, calls))
    });
    // A proposal whose plan no longer comes out the same is stale: a new one is needed.
    let finished = match (finished, how) {
        (Err(error), How::Proposal(number)) if error.code == Code::ConfigDrift => {
            match proposals::stale(planning, &session.db, &session.caller, number) {
                Ok(()) => Err(error),
                Err(marking) => Err(marking),
            }
        }
        (finished, _) => finished,
    };
    (session.sandbox, finished)
}

/// Why a heal was refused, or the calls it made; an error is an outage or a bug, for
/// the check to report, not a refusal. The token that asked for the heal is checked as
/// any request's is, by the dispatcher, for `compute.fleet.apply`.
pub fn heal(
    planning: &Planning,
    dispatcher: &Dispatcher,
    tenant: &str,
    heal: &Heal,
    request: &str,
) -> Result<Result<u64, String>, ApiError> {
    let caller = match dispatcher.caller_of_token(tenant, heal.token, "compute.fleet.apply")? {
        Ok(caller) => caller,
        Err(refused) => return Ok(Err(refused)),
    };
    let (_, applied) =
        applied(planning, dispatcher.registry(), caller, dispatcher.db().get()?, request, How::Heal(heal));
    match applied {
        Ok(Some((_, calls))) => Ok(Ok(calls)),
        // The check that found the drift no longer records anything either.
        Ok(None) => Ok(Err("an apply came after the check that found the drift".to_owned())),
        Err(error) if matches!(error.code, Code::Unavailable | Code::Internal | Code::ResourceExhausted) => Err(error),
        Err(error) => Ok(Err(refusal(&error))),
    }
}

/// Why an apply was refused, in one line: the error, and what it lists (the blocked
/// changes' reasons, the policies' denials).
fn refusal(error: &ApiError) -> String {
    let mut why = format!("{}: {}", error.code.as_str(), error.message);
    let details = error.details.as_ref();
    let listed = |list: &str| details.and_then(|details| details[list].as_array()).cloned().unwrap_or_default();
    for blocked in listed("blocked") {
        why.push_str(&format!(
            "; {} {}: {}",
            blocked["kind"].as_str().unwrap_or_default(),
            blocked["key"].as_str().unwrap_or_default(),
            blocked["reason"].as_str().unwrap_or_default()
        ));
    }
    for verdict in listed("verdicts") {
        why.push_str(&format!(
            "; policy {}: {}",
            verdict["policy"].as_str().unwrap_or_default(),
            verdict["message"].as_str().unwrap_or_default()
        ));
    }
    why
}

/// What `record` reads of an apply's output (the planner's JSON, which goes to the
/// client unchanged): read in place, the rest skipped, as it is megabytes for a large
/// estate.
#[derive(serde::Deserialize)]
struct Applied<'a> {
    #[serde(borrow)]
    plan: AppliedPlan<'a>,
    applied: u64,
    /// The overrides that let the plan's denials through (SPEC §14).
    #[serde(borrow, default)]
    overrides: Vec<AppliedOverride<'a>>,
}

impl Applied<'_> {
    /// `[{"policy", "reason"}]`, as history keeps and `fleet.applied` tells them.
    fn overrides_json(&self) -> Value {
        self.overrides.iter().map(|item| json!({"policy": item.policy, "reason": item.reason})).collect()
    }
}

#[derive(serde::Deserialize)]
struct AppliedOverride<'a> {
    #[serde(borrow)]
    policy: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    reason: std::borrow::Cow<'a, str>,
}

#[derive(serde::Deserialize)]
struct AppliedPlan<'a> {
    #[serde(rename = "planHash", borrow)]
    plan_hash: std::borrow::Cow<'a, str>,
    summary: Value,
    #[serde(borrow)]
    changes: Vec<AppliedChange<'a>>,
}

#[derive(serde::Deserialize)]
struct AppliedChange<'a> {
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    key: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    action: std::borrow::Cow<'a, str>,
    /// A rename's old name.
    #[serde(borrow, default)]
    from: Option<std::borrow::Cow<'a, str>>,
}

/// What `record` reads of the apply request: the document as its text, stored as sent.
#[derive(serde::Deserialize)]
struct ApplyRequest<'a> {
    #[serde(borrow)]
    document: &'a serde_json::value::RawValue,
    #[serde(default)]
    prune: bool,
    #[serde(default)]
    heal: bool,
    #[serde(rename = "rollbackOf", default)]
    rollback_of: Option<i64>,
}

/// Inside apply's transaction: the names of created objects, the applied document as
/// the next revision (naming the proposal applied, if any), and the drift state (an
/// apply counts as a check that converged; its caller puts the next check one interval
/// later). Answers the revision.
fn record(
    planning: &Planning,
    db: &Conn,
    caller: &Caller,
    body: &str,
    applied: &Applied,
    proposal: Option<i64>,
) -> Result<i64, ApiError> {
    // The planner accepted the request, so it is a JSON object with a document.
    let request: ApplyRequest = serde_json::from_str(body).map_err(ApiError::internal)?;
    let plan = &applied.plan;
    name_objects(planning, db, &caller.tenant, plan)?;
    let heal_token = match (request.heal, &caller.token) {
        (false, _) => None,
        (true, Some(token)) => Some(token.as_str()),
        (true, None) => {
            return Err(ApiError::new(Code::InvalidArgument, "only a caller with a token can ask for heal"));
        }
    };
    let (document, prune) = (request.document.get(), request.prune);
    // An apply that changes nothing (no call, no override, no heal asked for, the
    // document applied already) records no revision: only the check it counts as, and
    // the end of a drift it finds gone (decision 0027).
    let unchanged =
        match proposal.is_none() && applied.applied == 0 && heal_token.is_none() && applied.overrides.is_empty() {
            true => unchanged(db, &caller.tenant, document, prune)?,
            false => None,
        };
    let revision = match unchanged {
        Some(revision) => {
            db.execute(
                "UPDATE fleet_applied SET checked_at = ?2 WHERE tenant = ?1",
                params![&caller.tenant, &db::now()],
            )?;
            revision
        }
        None => record_revision(planning, db, caller, &request, applied, heal_token, proposal)?,
    };
    let was_drifted = db.execute("DELETE FROM fleet_drift WHERE tenant = ?1", params![&caller.tenant])? > 0;
    if was_drifted {
        events::publish(
            &planning.metrics,
            db,
            &caller.tenant,
            events::CONVERGED,
            &json!({ "planHash": plan.plan_hash, "summary": plan.summary, "since": db::now() }),
        )?;
    }
    Ok(revision)
}

/// Inside apply's transaction: the applied document as the tenant's next revision,
/// `fleet.applied`, and the applied document's row. Answers the revision.
fn record_revision(
    planning: &Planning,
    db: &Conn,
    caller: &Caller,
    request: &ApplyRequest,
    applied: &Applied,
    heal_token: Option<&str>,
    proposal: Option<i64>,
) -> Result<i64, ApiError> {
    let (document, prune, plan) = (request.document.get(), request.prune, &applied.plan);
    let overrides = applied.overrides_json();
    let (applied_at, calls) = (db::now(), applied.applied);
    let kept = history::Kept {
        document,
        prune,
        plan_hash: &plan.plan_hash,
        applied_by: &caller.principal,
        applied_at: &applied_at,
        calls,
        overrides: &overrides.to_string(),
        proposal,
        rollback_of: request.rollback_of,
    };
    let revision = history::keep(db, &caller.tenant, &kept, planning.retention)?;
    publish_applied(planning, db, caller, applied, revision, proposal, "fleet.apply")?;
    db.execute(
        "INSERT INTO fleet_applied
           (tenant, document, prune, plan_hash, applied_by, applied_at, calls, checked_at, revision, heal_token)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6, ?8, ?9)
         ON CONFLICT (tenant) DO UPDATE SET document = excluded.document, prune = excluded.prune,
           plan_hash = excluded.plan_hash, applied_by = excluded.applied_by,
           applied_at = excluded.applied_at, calls = excluded.calls, checked_at = excluded.checked_at,
           revision = excluded.revision, heal_token = excluded.heal_token, healed_at = NULL, healed_calls = NULL",
        params![
            &caller.tenant,
            document,
            prune,
            &*plan.plan_hash,
            &caller.principal,
            &applied_at,
            i64::try_from(calls).unwrap_or(i64::MAX),
            revision,
            heal_token,
        ],
    )?;
    Ok(revision)
}

/// The applied revision, if an apply of `document` with `prune` would record it again:
/// the same document (as JSON values, whatever its spacing and member order), the same
/// prune, and no heal asked for then either.
fn unchanged(db: &Conn, tenant: &str, document: &str, prune: bool) -> Result<Option<i64>, ApiError> {
    let applied = db.query_opt(
        "SELECT document, prune, heal_token, revision FROM fleet_applied WHERE tenant = ?1",
        params![tenant],
        |row| {
            Ok((row.get::<String>(0)?, row.get::<bool>(1)?, row.get::<Option<String>>(2)?, row.get::<Option<i64>>(3)?))
        },
    )?;
    let Some((applied, applied_prune, None, Some(revision))) = applied else { return Ok(None) };
    let same = |left: &str, right: &str| {
        serde_json::from_str::<Value>(left)
            .ok()
            .zip(serde_json::from_str::<Value>(right).ok())
            .is_some_and(|(a, b)| a == b)
    };
    Ok((applied_prune == prune && same(&applied, document)).then_some(revision))
}

/// The names an apply gives: bindings of the objects it created under names, and the
/// renames it made (SPEC §15).
fn name_objects(planning: &Planning, db: &Conn, tenant: &str, plan: &AppliedPlan) -> Result<(), ApiError> {
    let created = plan.changes.iter().filter(|change| change.action == "create" && is_name(&change.key));
    let named = created.filter_map(|change| Some((&*change.kind, &*change.key, &**change.id.as_ref()?)));
    bindings::bind(db, tenant, named)?;
    let catalog = &planning.modules.catalog;
    for change in plan.changes.iter().filter(|change| change.action == "rename") {
        let (Some(from), Some(id)) = (&change.from, &change.id) else { continue };
        let kind = catalog
            .by_kind(&change.kind)
            .map(|kind| catalog.get(kind))
            .ok_or_else(|| ApiError::internal(format_args!("the plan renames a {} of no kind served", change.kind)))?;
        bindings::rename(db, tenant, kind, from, &change.key, id)?;
    }
    Ok(())
}

/// Inside a heal's transaction: the names of what it created, the check it counts as,
/// the drift it ends, and `fleet.healed`.
fn record_heal(
    planning: &Planning,
    db: &Conn,
    caller: &Caller,
    applied: &Applied,
    heal: &Heal,
) -> Result<(), ApiError> {
    let plan = &applied.plan;
    name_objects(planning, db, &caller.tenant, plan)?;
    let now = db::now();
    let calls = i64::try_from(applied.applied).unwrap_or(i64::MAX);
    db.execute(
        "UPDATE fleet_applied SET checked_at = ?2, healed_at = ?2, healed_calls = ?3 WHERE tenant = ?1",
        params![&caller.tenant, &now, calls],
    )?;
    db.execute("DELETE FROM fleet_drift WHERE tenant = ?1", params![&caller.tenant])?;
    // What drifted, and who changed it, then that it was healed: the heal is no secret.
    events::publish(&planning.metrics, db, &caller.tenant, events::DRIFTED, heal.drifted)?;
    let data = json!({ "revision": heal.revision, "planHash": plan.plan_hash, "calls": applied.applied });
    events::publish(&planning.metrics, db, &caller.tenant, events::HEALED, &data)?;
    publish_applied(planning, db, caller, applied, heal.revision, None, "fleet.heal")
}

/// `fleet.applied` (SPEC §18), which every apply, heal and proposal apply publishes:
/// the revision it made (or a heal restored) and how.
fn publish_applied(
    planning: &Planning,
    db: &Conn,
    caller: &Caller,
    applied: &Applied,
    revision: i64,
    proposal: Option<i64>,
    via: &str,
) -> Result<(), ApiError> {
    let mut data = json!({"revision": revision, "planHash": applied.plan.plan_hash, "principal": caller.principal,
                          "calls": applied.applied, "overrides": applied.overrides_json(), "via": via});
    if let Some(proposal) = proposal {
        data["proposal"] = json!(proposal);
    }
    events::publish(&planning.metrics, db, &caller.tenant, events::APPLIED, &data)?;
    Ok(())
}

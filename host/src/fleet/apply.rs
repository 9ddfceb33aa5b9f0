//! Apply (SPEC §6.3), a proposal's apply (§17) and the heal that fleet.drift makes
//! (§15), one path: the request is read once into what it applies ([`Applying`]); then,
//! in one write transaction, its gate (an approved proposal and the applier's right to
//! its calls, or the revision a heal restores), a fresh planner that plans again and
//! runs every call through the module handlers, and the record of what the apply
//! leaves: the overlay's writes and the audit records, the name bindings, the revision
//! and the applied document, the proposal it applied, the drift it ends, and the next
//! check's time.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use fleet_guest::grammar::is_name;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::plan_source;
use super::planning::Planning;
use super::proposals::{self, Approved};
use super::request::PlannerRequest;
use super::{bindings, history, schedule};
use crate::api::{ApiError, Code};
use crate::calls::Dispatcher;
use crate::calls::auth::Caller;
use crate::calls::context::{Ctx, Via};
use crate::calls::input::{self, Input};
use crate::calls::parse_body;
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
    let applying = match Applying::read(call.body, planning.git_insecure) {
        Ok(applying) => applying,
        Err(error) => return Answer::from(Err(error)),
    };
    let (sandbox, done) = run(planning, call.methods, call.caller, call.db, &applying);
    Answer { output: done.map(|done| done.map(|done| done.output).unwrap_or_default()), sandbox }
}

/// What an apply applies, read once from its request.
enum Applying<'a> {
    /// A document, in the request as the client sent it (without its `source`, which
    /// is no part of the plan): the planner reads it and refuses what is wrong with it;
    /// the host reads what it records once it is accepted.
    Document { request: Cow<'a, str>, source: Option<String> },
    /// An approved proposal (`{"proposal": N, "overrides"?}`), with the overrides the
    /// applier gives its plan's denials.
    Proposal { number: i64, overrides: Option<Box<RawValue>> },
    /// A heal: the applied document again, restoring its revision.
    Heal { heal: &'a Heal<'a>, request: &'a str },
}

impl<'a> Applying<'a> {
    /// A request that names a proposal is read here, once, and must name nothing the
    /// proposal holds; any other request is a document's, the planner's to read, once
    /// the host has taken out its `source`.
    fn read(body: &'a str, insecure: bool) -> Result<Applying<'a>, ApiError> {
        let document = || Applying::Document { request: Cow::Borrowed(body), source: None };
        // Only a request that holds the word can name one.
        if !body.contains(r#""proposal""#) {
            return Applying::with_source(body, insecure);
        }
        // A body that is no JSON object is the planner's to refuse, with its problems.
        let Ok(Value::Object(members)) = parse_body(body.as_bytes()) else { return Ok(document()) };
        if !members.contains_key("proposal") {
            return Applying::with_source(body, insecure);
        }
        let mut input = Input::new(Value::Object(members))?;
        let number = input.count("proposal", true).map_or(0, |number| i64::try_from(number).unwrap_or(i64::MAX));
        if number == 0 {
            input.problem("proposal", "must be a proposal's number, 1 or more");
        }
        let overrides = input.take_optional("overrides");
        for field in ["document", "prune", "planHash", "heal", "rollbackOf"] {
            if input.take_optional(field).is_some() {
                input.problem(field, "a proposal's apply takes its document, prune and plan hash from the proposal");
            }
        }
        if input.take_optional("source").is_some() {
            input.problem("source", "a proposal's apply records the proposal's source, the one its reviewers saw");
        }
        input.finish()?;
        let overrides = overrides.map(|overrides| serde_json::value::to_raw_value(&overrides)).transpose();
        Ok(Applying::Proposal { number, overrides: overrides.map_err(ApiError::internal)? })
    }

    /// A document's apply whose request may hold a `source`: taken out and checked here
    /// (`INVALID_ARGUMENT` at its paths when it is wrong, before anything is planned),
    /// the other members left as they came, in their order, for the planner.
    fn with_source(body: &'a str, insecure: bool) -> Result<Applying<'a>, ApiError> {
        let document = || Applying::Document { request: Cow::Borrowed(body), source: None };
        // Only a request that holds the word can name one.
        if !body.contains(r#""source""#) {
            return Ok(document());
        }
        // A body that is no JSON object, or names a member twice, is the planner's to refuse.
        let Ok(members) = input::members(body) else { return Ok(document()) };
        let Some(position) = members.iter().position(|(name, _)| name == "source") else { return Ok(document()) };
        let mut input = Input::new(parse_body(format!(r#"{{"source":{}}}"#, members[position].1.get()).as_bytes())?)?;
        let source = plan_source::take(&mut input, insecure);
        input.finish()?;
        let others = members.iter().enumerate().filter(|(index, _)| *index != position);
        let request = super::request::object_text(others.map(|(_, (name, value))| (name.as_str(), value.get())))?;
        Ok(Applying::Document { request: Cow::Owned(request), source })
    }

    /// The source the apply records on the revision it makes, if the request gave one.
    fn source(&self) -> Option<&str> {
        match self {
            Applying::Document { source, .. } => source.as_deref(),
            Applying::Proposal { .. } | Applying::Heal { .. } => None,
        }
    }

    /// The gate a direct apply passes when the deployment or a policy wants approval
    /// first; a proposal was approved, and a heal restores what was applied.
    fn gate(&self, planning: &Planning) -> ApprovalGate {
        match self {
            Applying::Document { .. } if planning.require_approval => ApprovalGate::EveryChange,
            Applying::Document { .. } => ApprovalGate::Verdicts,
            Applying::Proposal { .. } | Applying::Heal { .. } => ApprovalGate::None,
        }
    }
}

/// A heal fleet.drift makes (SPEC §15): the revision it restores, if it is still the
/// applied one with the same heal token when the heal's transaction begins.
pub struct Heal<'a> {
    pub revision: i64,
    pub token: &'a str,
    /// What `fleet.drifted` says of the drift it heals, published first.
    pub drifted: &'a Value,
}

/// What an apply that committed answers, and the calls it made.
struct Done {
    output: String,
    calls: u64,
}

/// What an apply's gate let through: the planner's request, and the proposal a
/// proposal's apply applies (planned as its author, so that its creates keep the ids
/// the reviewers saw).
struct Gated<'a> {
    request: Cow<'a, str>,
    proposal: Option<Approved>,
}

/// An apply, a proposal's or a heal, from its gate to its record: the heal is audited
/// `fleet.heal`, records no revision, and ends the drift with `fleet.healed`. Answers
/// the guest's CPU time, and what the apply made; a heal that an apply overtook makes
/// nothing and answers none.
fn run(
    planning: &Planning,
    methods: &Arc<Registry>,
    caller: Caller,
    db: Conn,
    applying: &Applying,
) -> (Duration, Result<Option<Done>, ApiError>) {
    if let Err(error) = db::begin(&db, db::Tx::Write(&caller.tenant)) {
        return (Duration::ZERO, Err(error));
    }
    let gated = match pass_gate(&db, &caller, methods, applying) {
        Ok(Some(gated)) => gated,
        Ok(None) => return (Duration::ZERO, db::finish(&db, Ok(None))),
        Err(error) => return (Duration::ZERO, db::finish(&db, Err(error))),
    };
    let author = gated.proposal.as_ref().map(|proposal| proposal.author().to_owned());
    let session = Session::new(caller, db, planning.source())
        .planned_as(author)
        .applying(methods.clone())
        .gated(applying.gate(planning));
    let (session, planned) = planning.sandbox.call(session, Entry::Apply, &gated.request);
    let recorded = planned.and_then(|output| {
        let calls = record(planning, &session, applying, gated, &output)?;
        Ok(Done { output, calls })
    });
    let finished = db::finish(&session.db, recorded).map(|done| {
        planning.metrics.apply_calls.inc_by(done.calls);
        let _ = planning.wake.send(());
        Some(done)
    });
    // A proposal whose plan no longer comes out the same is stale: a new one is needed.
    let finished = match (finished, applying) {
        (Err(error), Applying::Proposal { number, .. }) if error.code == Code::ConfigDrift => {
            match proposals::mark_stale(&session.db, &session.caller, *number) {
                Ok(()) => {
                    let _ = planning.wake.send(());
                    Err(error)
                }
                Err(marking) => Err(marking),
            }
        }
        (finished, _) => finished,
    };
    (session.sandbox, finished)
}

/// Inside the apply's transaction, before the planner: what the apply plans, or `None`
/// for a heal an apply overtook. A proposal must be open and approved, and the applier
/// allowed every call of its plan (`PERMISSION_DENIED` otherwise: without them the plan
/// would come out blocked, and the proposal would seem stale); it is planned again
/// pinned to its plan hash, with the overrides the applier gives.
fn pass_gate<'a>(
    db: &Conn,
    caller: &Caller,
    methods: &Registry,
    applying: &'a Applying,
) -> Result<Option<Gated<'a>>, ApiError> {
    match applying {
        Applying::Document { request, .. } => Ok(Some(Gated {
            request: super::request::with_git_source(Cow::Borrowed(request), caller)?,
            proposal: None,
        })),
        Applying::Proposal { number, overrides } => {
            let proposal = proposals::approved(db, &caller.tenant, *number)?;
            authorize_calls(&proposal.plan, caller, methods)?;
            let request = PlannerRequest {
                plan_hash: Some(proposal.plan_hash()),
                overrides: overrides.as_deref(),
                source: super::request::source_member(proposal.git_source.as_deref())?,
                ..PlannerRequest::of(&proposal.document, proposal.prune())?
            }
            .text()?;
            Ok(Some(Gated { request: Cow::Owned(request), proposal: Some(proposal) }))
        }
        Applying::Heal { heal, request } => {
            let current = db.query_opt(
                "SELECT revision, heal_token FROM fleet_applied WHERE tenant = ?1",
                params![&caller.tenant],
                |row| Ok((row.get::<i64>(0)?, row.get::<Option<String>>(1)?)),
            )?;
            // An apply since the check found the drift: the heal is no longer wanted.
            let wanted = current == Some((heal.revision, Some(heal.token.to_owned())));
            Ok(wanted.then_some(Gated { request: Cow::Borrowed(request), proposal: None }))
        }
    }
}

/// Whether `caller` may run every method the stored plan calls.
fn authorize_calls(plan: &str, caller: &Caller, registry: &Registry) -> Result<(), ApiError> {
    #[derive(Deserialize)]
    struct Calls<'a> {
        #[serde(borrow)]
        calls: Vec<Called<'a>>,
    }
    #[derive(Deserialize)]
    struct Called<'a> {
        #[serde(borrow)]
        method: Cow<'a, str>,
    }
    let calls: Calls = serde_json::from_str(plan).map_err(ApiError::internal)?;
    let mut methods: Vec<&str> = calls.calls.iter().map(|call| &*call.method).collect();
    methods.sort_unstable();
    methods.dedup();
    for name in methods {
        let method = registry.by_name(name).ok_or_else(|| {
            ApiError::internal(format_args!("the plan calls {name}, which this server does not serve"))
        })?;
        method.authorize(caller).map_err(|refused| {
            ApiError::new(Code::PermissionDenied, format!("{}; nothing was applied", refused.message))
                .with_details(refused.details.unwrap_or_default())
        })?;
    }
    Ok(())
}

/// Inside the apply's transaction, after the planner ran every call: the overrides, the
/// overlay's writes and the audit records; then what this kind of apply records; then
/// the next check's time. Answers the calls made.
fn record(
    planning: &Planning,
    session: &Session,
    applying: &Applying,
    gated: Gated,
    output: &str,
) -> Result<u64, ApiError> {
    let answer: ApplyAnswer = serde_json::from_str(output).map_err(ApiError::internal)?;
    let (db, caller) = (&session.db, &session.caller);
    if let Some(apply) = &session.methods {
        let ctx = Ctx { caller, db, via: Via::Apply(&apply.deferred) };
        let overrides = answer.overrides.iter().map(|item| (&*item.policy, &*item.reason));
        crate::policies::record_overrides(&ctx, overrides)?;
        apply.deferred.objects.flush(db, &caller.tenant)?;
        let via = if matches!(applying, Applying::Heal { .. }) { "fleet.heal" } else { "fleet.apply" };
        trail::write_pending(db, &apply.deferred.audits, via, &answer.plan.plan_hash)?;
    }
    match (applying, gated.proposal) {
        (Applying::Heal { heal, .. }, _) => record_heal(planning, db, caller, &answer, heal)?,
        (_, Some(proposal)) => {
            let document: &RawValue = serde_json::from_str(&proposal.document).map_err(ApiError::internal)?;
            let source = proposal.source().map(str::to_owned);
            let applied = Recorded { document, prune: proposal.prune(), heal: false, rollback_of: None, source };
            let revision = record_apply(planning, db, caller, &applied, &answer, Some(proposal.number()))?;
            proposals::mark_applied(db, caller, proposal, revision)?;
        }
        (_, None) => {
            // The planner accepted the request, so it is a JSON object with a document.
            let mut applied: Recorded = serde_json::from_str(&gated.request).map_err(ApiError::internal)?;
            applied.source = applying.source().map(str::to_owned);
            record_apply(planning, db, caller, &applied, &answer, None)?;
        }
    }
    schedule::schedule(db, &caller.tenant, schedule::now_ms(), planning.drift_interval)?;
    Ok(answer.applied)
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
    let applying = Applying::Heal { heal, request };
    let (_, healed) = run(planning, dispatcher.registry(), caller, dispatcher.db().get()?, &applying);
    match healed {
        Ok(Some(done)) => Ok(Ok(done.calls)),
        // The check that found the drift no longer records anything either.
        Ok(None) => Ok(Err("an apply came after the check that found the drift".to_owned())),
        Err(error) if matches!(error.code, Code::Unavailable | Code::Internal | Code::ResourceExhausted) => Err(error),
        Err(error) => Ok(Err(refusal(&error))),
    }
}

/// Why an apply was refused, in one line: the error, and what it lists (the blocked
/// changes' reasons, the policies' denials).
pub(crate) fn refusal(error: &ApiError) -> String {
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

/// What `record` reads of the planner's answer to an apply (which goes to the client
/// unchanged): read in place, the rest skipped, as it is megabytes for a large estate.
#[derive(Deserialize)]
struct ApplyAnswer<'a> {
    #[serde(borrow)]
    plan: AnsweredPlan<'a>,
    applied: u64,
    /// The overrides that let the plan's denials through (SPEC §14).
    #[serde(borrow, default)]
    overrides: Vec<AnsweredOverride<'a>>,
}

impl ApplyAnswer<'_> {
    /// `[{"policy", "reason"}]`, as history keeps and `fleet.applied` tells them.
    fn overrides_json(&self) -> Value {
        self.overrides.iter().map(|item| json!({"policy": item.policy, "reason": item.reason})).collect()
    }
}

#[derive(Deserialize)]
struct AnsweredOverride<'a> {
    #[serde(borrow)]
    policy: Cow<'a, str>,
    #[serde(borrow)]
    reason: Cow<'a, str>,
}

#[derive(Deserialize)]
struct AnsweredPlan<'a> {
    #[serde(rename = "planHash", borrow)]
    plan_hash: Cow<'a, str>,
    summary: Value,
    #[serde(borrow)]
    changes: Vec<AnsweredChange<'a>>,
}

#[derive(Deserialize)]
struct AnsweredChange<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    action: Cow<'a, str>,
    /// A rename's old name.
    #[serde(borrow, default)]
    from: Option<Cow<'a, str>>,
}

/// What an apply records of what it applied: the document as its text, stored as sent
/// (or as the proposal stored it), how, and whether it heals.
#[derive(Deserialize)]
struct Recorded<'a> {
    #[serde(borrow)]
    document: &'a RawValue,
    #[serde(default)]
    prune: bool,
    #[serde(default)]
    heal: bool,
    /// A count, `3.0` too, as the planner read it.
    #[serde(rename = "rollbackOf", default)]
    rollback_of: Option<serde_json::Number>,
    /// Where the document came from (SPEC §20.2), as JSON text: the request's (which the
    /// planner never sees) or the proposal's.
    #[serde(skip)]
    source: Option<String>,
}

/// Inside apply's transaction: the names of created objects, the applied document as
/// the next revision (naming the proposal applied, if any), and the drift state (an
/// apply counts as a check that converged; its caller puts the next check one interval
/// later). Answers the revision.
fn record_apply(
    planning: &Planning,
    db: &Conn,
    caller: &Caller,
    request: &Recorded,
    applied: &ApplyAnswer,
    proposal: Option<i64>,
) -> Result<i64, ApiError> {
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
        None => record_revision(planning, db, caller, request, applied, heal_token, proposal)?,
    };
    let was_drifted = db.execute("DELETE FROM fleet_drift WHERE tenant = ?1", params![&caller.tenant])? > 0;
    if was_drifted {
        events::publish(
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
    request: &Recorded,
    applied: &ApplyAnswer,
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
        rollback_of: request
            .rollback_of
            .as_ref()
            .and_then(fleet_guest::json::count_of_number)
            .and_then(|n| i64::try_from(n).ok()),
        source: request.source.as_deref(),
    };
    let revision = history::keep(db, &caller.tenant, &kept, planning.retention)?;
    let how = How { proposal, source: request.source.as_deref(), via: "fleet.apply" };
    publish_applied(db, caller, applied, revision, &how)?;
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
fn name_objects(planning: &Planning, db: &Conn, tenant: &str, plan: &AnsweredPlan) -> Result<(), ApiError> {
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
    applied: &ApplyAnswer,
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
    events::publish(db, &caller.tenant, events::DRIFTED, heal.drifted)?;
    let data = json!({ "revision": heal.revision, "planHash": plan.plan_hash, "calls": applied.applied });
    events::publish(db, &caller.tenant, events::HEALED, &data)?;
    // The revision a heal restores is always kept: the applied one is never pruned.
    let source = db.query_opt(
        "SELECT source FROM fleet_revisions WHERE tenant = ?1 AND revision = ?2",
        params![&caller.tenant, heal.revision],
        |row| row.get::<Option<String>>(0),
    )?;
    let source = source.flatten();
    let how = How { proposal: None, source: source.as_deref(), via: "fleet.heal" };
    publish_applied(db, caller, applied, heal.revision, &how)
}

/// How the revision `fleet.applied` tells of came to be: the proposal applied, where its
/// document came from, and whether an apply or a heal made it.
struct How<'a> {
    proposal: Option<i64>,
    /// JSON text, as kept on the revision.
    source: Option<&'a str>,
    via: &'a str,
}

/// `fleet.applied` (SPEC §18, §20.2), which every apply, heal and proposal apply
/// publishes: the revision it made (or a heal restored) and how.
fn publish_applied(
    db: &Conn,
    caller: &Caller,
    applied: &ApplyAnswer,
    revision: i64,
    how: &How,
) -> Result<(), ApiError> {
    let mut data = json!({"revision": revision, "planHash": applied.plan.plan_hash, "principal": caller.principal,
                          "calls": applied.applied, "overrides": applied.overrides_json(), "via": how.via});
    if let Some(proposal) = how.proposal {
        data["proposal"] = json!(proposal);
    }
    if let Some(source) = how.source {
        data["source"] = serde_json::from_str(source).map_err(ApiError::internal)?;
    }
    events::publish(db, &caller.tenant, events::APPLIED, &data)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The planner's request, and the source kept, of a document's apply `body`.
    fn read(body: &str) -> Result<(String, Option<Value>), ApiError> {
        match Applying::read(body, false)? {
            Applying::Document { request, source } => {
                Ok((request.into_owned(), source.map(|source| serde_json::from_str(&source).unwrap())))
            }
            Applying::Proposal { .. } | Applying::Heal { .. } => panic!("not a document's apply: {body}"),
        }
    }

    fn paths(error: &ApiError) -> Vec<String> {
        let problems = error.details.as_ref().and_then(|details| details["problems"].as_array()).expect("problems");
        problems.iter().map(|problem| problem["path"].as_str().unwrap().to_owned()).collect()
    }

    #[test]
    fn the_source_never_reaches_the_planner() {
        let source = r#"{"repo": "https://git.example.com/acme/infra", "commit": "abcdef0"}"#;
        let document = r#"{"sites": {"lab": {"region": "r", "labels": {"source": "git"}}}}"#;
        let body = format!(r#"{{"prune": true, "source": {source}, "document": {document}, "heal": false}}"#);
        let (request, kept) = read(&body).unwrap();
        assert_eq!(request, format!(r#"{{"prune":true,"document":{document},"heal":false}}"#));
        assert_eq!(kept, Some(serde_json::from_str::<Value>(source).unwrap()));
        assert_eq!(read(&format!(r#"{{"source": {source}}}"#)).unwrap().0, "{}");

        // Without a source, the request goes to the planner as it came, whatever it holds.
        for body in
            [format!(r#"{{"document": {document}}}"#), r#"{"document": {}, "document": {}, "source": 1}"#.into()]
        {
            assert_eq!(read(&body).unwrap(), (body.clone(), None));
        }
    }

    #[test]
    fn a_bad_source_is_refused_before_anything_is_planned() {
        let body = r#"{"document": {}, "source": {"repo": "https://u:p@h/r", "commit": "abc", "x": 1}}"#;
        let error = read(body).expect_err("a bad source");
        assert_eq!(error.code, Code::InvalidArgument);
        assert_eq!(paths(&error), ["/source/repo", "/source/commit", "/source/x"]);
        let error =
            read(r#"{"document": {}, "source": {"repo": "https://h/r", "commit": "abcdef0", "ref": "\u0007"}}"#)
                .expect_err("a control character");
        assert_eq!(paths(&error), ["/source/ref"]);
    }

    #[test]
    fn a_proposals_apply_takes_the_proposals_source() {
        let body = r#"{"proposal": 1, "source": {"repo": "https://h/r", "commit": "abcdef0"}}"#;
        let error = Applying::read(body, false).err().expect("a source beside a proposal");
        assert_eq!(paths(&error), ["/source"]);
        assert!(Applying::read(r#"{"proposal": 1}"#, false).unwrap().source().is_none());
    }
}

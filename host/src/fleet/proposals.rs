//! Proposals (SPEC §17): a document planned now by its author and kept with that plan,
//! byte for byte, reviewed by principals other than its author, and applied exactly as
//! reviewed (`fleet/apply {"proposal": N}`, in `apply.rs`).
//!
//! Whether a proposal is approved is the planner's answer, like a verdict: the policies
//! in force may define `approve` and `reject` rules over the plan's policy input and
//! `input.proposal`; without an `approve` rule, one approving review by another
//! principal and no rejecting one approve it. It is judged when the proposal is made
//! and at every review, in the transaction that records it, under the tenant's write
//! lock (so two reviews at once are judged one after the other). An apply needs no new
//! judgement: anything that could change it (the state, the document, the policies)
//! changes the plan hash, and the apply is then `CONFIG_DRIFT`.

use std::collections::BTreeMap;
use std::sync::Arc;

use fleet_guest::grammar::TEXT_PATTERN;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::Planning;
use super::schema::{fleet_config_schema, review_schema};
use crate::api::{ApiError, Code, Problem};
use crate::audit::{self, FieldChange};
use crate::calls::auth::Caller;
use crate::calls::context::{Ctx, Via};
use crate::calls::input::{Input, MAX_COUNT, Page};
use crate::calls::parse_body;
use crate::calls::registry::{Answer, Call, Composite, Method, MethodKind, Registry, handler};
use crate::db::{self, Conn, Tx, params};
use crate::events;
use crate::metrics::Metrics;
use crate::planner::{Entry, Session};

/// A proposal's states (SPEC §17).
pub const STATES: [&str; 5] = ["open", "applied", "rejected", "withdrawn", "stale"];
/// The longest title, in characters.
const MAX_TITLE: usize = 200;
/// The longest review comment, in characters.
const MAX_COMMENT: usize = 2000;

pub fn register(registry: &mut Registry, planning: &Arc<Planning>) {
    let number = json!({"type": "integer", "minimum": 1, "maximum": MAX_COUNT});
    let by_number = json!({"type": "object", "additionalProperties": false, "required": ["number"],
        "properties": {"number": number}});
    let answer = json!({"type": "object", "required": ["proposal"], "properties": {"proposal": proposal_schema()}});
    let composite = |run: fn(&Planning, Call<'_>) -> Answer| -> Composite {
        let planning = planning.clone();
        Arc::new(move |call: Call<'_>| run(&planning, call))
    };
    registry.register(
        Method::planner("proposals", "create", MethodKind::Mutation, composite(create))
            .permission("compute:proposals:write", "compute-proposals")
            .phase("v0.4")
            .summary("Plans a FleetConfig document now, as the caller, and keeps the document, its plan and plan hash as the tenant's next proposal, to be reviewed by others and applied exactly as planned.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "required": ["document"], "properties": {
                    "document": fleet_config_schema(&planning.modules.catalog), "prune": {"type": "boolean", "default": false},
                    "title": {"type": "string", "maxLength": MAX_TITLE, "pattern": TEXT_PATTERN}}}),
                answer.clone(),
            ),
    );
    registry.register(
        Method::new("proposals", "get", MethodKind::Read, Arc::new(get))
            .phase("v0.4")
            .summary("One proposal, with its plan as it was made (byte for byte) and its document.")
            .schemas(by_number.clone(), {
                let mut schema = answer.clone();
                schema["properties"]["plan"] = json!({"type": "object"});
                schema["properties"]["document"] = json!({"type": "object"});
                schema
            }),
    );
    let mut listing = Page::schema_properties();
    listing.insert("state".into(), json!({"type": "string", "enum": STATES}));
    listing.insert(
        "after".into(),
        json!({"type": "integer", "minimum": 1, "maximum": MAX_COUNT, "description": "List the proposals older than this one."}),
    );
    registry.register(
        Method::new("proposals", "list", MethodKind::Read, handler(list))
            .phase("v0.4")
            .summary("The tenant's proposals, newest first, without plan and document; `state` filters, `after` pages on to older ones.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "properties": listing}),
                json!({"type": "object", "required": ["proposals"], "properties": {
                    "proposals": {"type": "array", "items": proposal_schema()}}}),
            ),
    );
    registry.register(
        Method::planner("proposals", "review", MethodKind::Mutation, composite(review))
            .permission("compute:proposals:review", "compute-proposals")
            .phase("v0.4")
            .summary("Approves or rejects an open proposal of another principal (a later review replaces the earlier), and judges again whether it is approved.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "required": ["number", "verdict"], "properties": {
                    "number": number, "verdict": {"type": "string", "enum": ["approve", "reject"]},
                    "comment": {"type": "string", "maxLength": MAX_COMMENT, "pattern": TEXT_PATTERN}}}),
                answer.clone(),
            ),
    );
    let metrics = planning.metrics.clone();
    registry.register(
        Method::new(
            "proposals",
            "withdraw",
            MethodKind::Mutation,
            handler(move |ctx: &Ctx, body| withdraw(&metrics, ctx, body)),
        )
        .phase("v0.4")
        .summary("Withdraws an open proposal; only its author may.")
        .schemas(by_number, answer),
    );
}

fn proposal_schema() -> Value {
    json!({"type": "object",
        "required": ["number", "title", "state", "author", "createdAt", "planHash", "prune", "summary", "reviews", "approved"],
        "properties": {
            "number": {"type": "integer", "minimum": 1}, "title": {"type": "string"},
            "state": {"type": "string", "enum": STATES}, "author": {"type": "string"},
            "createdAt": {"type": "string", "format": "date-time"},
            "planHash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}, "prune": {"type": "boolean"},
            "summary": {"type": "object"}, "reviews": {"type": "array", "items": review_schema()},
            "approved": {"type": "boolean"}, "revision": {"type": "integer", "minimum": 1}}})
}

/// A proposal as it is stored, its reviews with it.
struct Stored {
    number: i64,
    title: String,
    state: String,
    author: String,
    created_at: String,
    plan_hash: String,
    prune: bool,
    summary: String,
    approved: bool,
    revision: Option<i64>,
    reviews: Vec<Review>,
}

/// One principal's review.
#[derive(serde::Serialize)]
struct Review {
    principal: String,
    verdict: String,
    comment: String,
    at: String,
}

const COLUMNS: &str = "number, title, state, author, created_at, plan_hash, prune, summary, approved, revision";

fn stored_row(row: &db::Row) -> Result<Stored, db::Error> {
    Ok(Stored {
        number: row.get(0)?,
        title: row.get(1)?,
        state: row.get(2)?,
        author: row.get(3)?,
        created_at: row.get(4)?,
        plan_hash: row.get(5)?,
        prune: row.get(6)?,
        summary: row.get(7)?,
        approved: row.get(8)?,
        revision: row.get(9)?,
        reviews: Vec::new(),
    })
}

impl Stored {
    fn json(&self) -> Result<Value, ApiError> {
        let summary: Value = serde_json::from_str(&self.summary).map_err(ApiError::internal)?;
        let mut proposal = json!({
            "number": self.number, "title": self.title, "state": self.state, "author": self.author,
            "createdAt": self.created_at, "planHash": self.plan_hash, "prune": self.prune, "summary": summary,
            "reviews": self.reviews, "approved": self.approved,
        });
        if let Some(revision) = self.revision {
            proposal["revision"] = json!(revision);
        }
        Ok(proposal)
    }

    /// `input.proposal` of the approval rules (SPEC §17).
    fn for_planner(&self) -> Value {
        json!({"number": self.number, "author": self.author, "title": self.title, "reviews": self.reviews})
    }

    /// Unless it is open, what the caller is told it cannot do to it.
    fn must_be_open(&self, doing: &str) -> Result<(), ApiError> {
        match self.state.as_str() {
            "open" => Ok(()),
            state => Err(ApiError::failed_precondition(format!(
                "proposal {} is {state}; only an open proposal can be {doing}",
                self.number
            ))),
        }
    }
}

/// The tenant's proposal `number` with its reviews, or `NOT_FOUND`.
fn load(db: &Conn, tenant: &str, number: i64) -> Result<Stored, ApiError> {
    let found = db.query_opt(
        &format!("SELECT {COLUMNS} FROM proposals WHERE tenant = ?1 AND number = ?2"),
        params![tenant, number],
        stored_row,
    )?;
    let mut stored = found.ok_or_else(|| ApiError::not_found(format!("this tenant has no proposal {number}")))?;
    stored.reviews = reviews(db, tenant, number)?;
    Ok(stored)
}

fn reviews(db: &Conn, tenant: &str, number: i64) -> Result<Vec<Review>, ApiError> {
    Ok(db.query(
        "SELECT principal, verdict, comment, at FROM proposal_reviews WHERE tenant = ?1 AND number = ?2
         ORDER BY at, principal",
        params![tenant, number],
        |row| Ok(Review { principal: row.get(0)?, verdict: row.get(1)?, comment: row.get(2)?, at: row.get(3)? }),
    )?)
}

/// A request's `number`, as a row's key.
fn number_of(input: &mut Input) -> i64 {
    input.count("number", true).map_or(0, |number| i64::try_from(number).unwrap_or(i64::MAX))
}

// ---- create ------------------------------------------------------------------------------

/// `{"document", "prune"?, "title"?}`, the document left as text for the planner, which
/// reports its problems.
struct CreateRequest<'a> {
    document: Option<&'a RawValue>,
    prune: bool,
    title: String,
}

impl<'a> CreateRequest<'a> {
    fn read(body: &'a str) -> Result<CreateRequest<'a>, ApiError> {
        let members: BTreeMap<String, &'a RawValue> = serde_json::from_str(body).map_err(|_| {
            ApiError::invalid(vec![Problem {
                path: String::new(),
                message: "the request body must be a JSON object {\"document\", \"prune\"?, \"title\"?}".into(),
            }])
        })?;
        let mut request = CreateRequest { document: None, prune: false, title: String::new() };
        let mut rest = serde_json::Map::new();
        for (name, value) in members {
            match name.as_str() {
                "document" => request.document = Some(value),
                _ => {
                    rest.insert(name, parse_body(value.get().as_bytes())?);
                }
            }
        }
        let mut input = Input::new(Value::Object(rest))?;
        request.prune = input.boolean("prune", false).unwrap_or(false);
        request.title = input.string("title", false).unwrap_or_default();
        if request.title.chars().count() > MAX_TITLE {
            input.problem("title", format!("must be at most {MAX_TITLE} characters"));
        }
        if request.document.is_none() {
            input.problem("document", "is required");
        }
        input.finish()?;
        Ok(request)
    }
}

/// What a proposal keeps of its plan, read in place.
#[derive(Deserialize)]
struct Planned {
    summary: Value,
    blocked: Vec<Value>,
    #[serde(default)]
    policy: Option<Verdicts>,
    #[serde(default)]
    approval: Option<Approval>,
    #[serde(rename = "planHash")]
    plan_hash: String,
}

#[derive(Deserialize)]
struct Verdicts {
    verdicts: Vec<Value>,
}

/// The planner's `approval` of a proposal.
#[derive(Deserialize)]
struct Approval {
    approved: bool,
    rejected: bool,
}

fn create(planning: &Planning, call: Call) -> Answer {
    let request = match CreateRequest::read(call.body) {
        Ok(request) => request,
        Err(error) => return Answer::from(Err(error)),
    };
    let Call { caller, db, .. } = call;
    if let Err(error) = db::begin(&db, Tx::Write(&caller.tenant)) {
        return Answer::from(Err(error));
    }
    let number = match db.query_one(
        "SELECT coalesce(max(number), 0) FROM proposals WHERE tenant = ?1",
        params![&caller.tenant],
        |row| row.get::<i64>(0),
    ) {
        Ok(last) => last + 1,
        Err(error) => return Answer::from(db::finish(&db, Err(error.into()))),
    };
    let proposal = json!({"number": number, "author": caller.principal, "title": request.title, "reviews": []});
    let document = request.document.map_or("{}", RawValue::get);
    let plan_request = format!(r#"{{"document":{document},"prune":{},"proposal":{proposal}}}"#, request.prune);
    let session = Session::new(caller, db, planning.source());
    let (session, output) = planning.sandbox.call(session, Entry::Plan, &plan_request);
    let Session { caller, db, sandbox, .. } = session;
    let made = output.and_then(|plan| {
        let planned: Planned = serde_json::from_str(&plan).map_err(ApiError::internal)?;
        proposable(&planned)?;
        let (approved, rejected) = planned.approval.as_ref().map_or((false, false), |it| (it.approved, it.rejected));
        let stored = Stored {
            number,
            title: request.title,
            state: if rejected { "rejected" } else { "open" }.to_owned(),
            author: caller.principal.clone(),
            created_at: db::now(),
            plan_hash: planned.plan_hash,
            prune: request.prune,
            summary: planned.summary.to_string(),
            approved,
            revision: None,
            reviews: Vec::new(),
        };
        db.execute(
            "INSERT INTO proposals (tenant, number, title, state, author, created_at, plan_hash, prune, summary,
                                    document, plan, approved)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                &caller.tenant,
                number,
                &stored.title,
                &stored.state,
                &stored.author,
                &stored.created_at,
                &stored.plan_hash,
                stored.prune,
                &stored.summary,
                document,
                &without_approval(&plan),
                approved,
            ],
        )?;
        let ctx = Ctx { caller: &caller, db: &db, via: Via::Api };
        let (hash, title) = (json!(stored.plan_hash), json!(stored.title));
        let changes = [
            FieldChange { field: "state", from: None, to: Some(&json!("open")) },
            FieldChange { field: "planHash", from: None, to: Some(&hash) },
            FieldChange { field: "title", from: None, to: Some(&title) },
        ];
        audit::record(&ctx, "compute.proposals.create", "proposal", &number.to_string(), &changes)?;
        publish(&planning.metrics, &db, &caller.tenant, events::PROPOSAL_OPENED, &stored, None)?;
        if rejected {
            changed_state(&planning.metrics, &ctx, &stored, "open", "compute.proposals.create")?;
        } else if approved {
            publish(&planning.metrics, &db, &caller.tenant, events::PROPOSAL_APPROVED, &stored, None)?;
        }
        Ok(json!({ "proposal": stored.json()? }).to_string())
    });
    let output = db::finish(&db, made);
    if output.is_ok() {
        let _ = planning.wake.send(());
    }
    Answer { output, sandbox }
}

/// A plan with blocked changes or enforced denials is no proposal (SPEC §17); denials of
/// mandatory policies are, their overrides given at apply.
fn proposable(planned: &Planned) -> Result<(), ApiError> {
    if !planned.blocked.is_empty() {
        let count = planned.blocked.len();
        return Err(ApiError::new(
            Code::InvalidState,
            format!("the plan has {count} blocked change{}; it cannot be proposed", if count == 1 { "" } else { "s" }),
        )
        .with_details(json!({ "blocked": planned.blocked })));
    }
    let enforced: Vec<&Value> = planned
        .policy
        .iter()
        .flat_map(|policy| &policy.verdicts)
        .filter(|verdict| verdict["rule"] == "deny" && verdict["level"] == "enforced")
        .collect();
    if !enforced.is_empty() {
        return Err(ApiError::new(
            Code::PolicyDenied,
            "enforced policies deny the plan, and nothing overrides them; it cannot be proposed",
        )
        .with_details(json!({ "verdicts": enforced })));
    }
    Ok(())
}

/// The plan as `fleet/plan` answers it: the planner writes a proposal's `approval` as
/// the member before the last (`planHash`), and it is no part of the plan reviewed.
fn without_approval(plan: &str) -> String {
    let (Some(start), Some(end)) = (plan.rfind(r#","approval":{"approved":"#), plan.rfind(r#","planHash":"#)) else {
        return plan.to_owned();
    };
    if start > end {
        return plan.to_owned();
    }
    format!("{}{}", &plan[..start], &plan[end..])
}

// ---- review, withdraw, state -----------------------------------------------------------

fn review(planning: &Planning, call: Call) -> Answer {
    let read = parse_body(call.body.as_bytes()).and_then(|body| {
        let mut input = Input::new(body)?;
        let number = number_of(&mut input);
        let verdict = input.string("verdict", true);
        if verdict.as_deref().is_some_and(|verdict| !matches!(verdict, "approve" | "reject")) {
            input.problem("verdict", "must be approve or reject");
        }
        let comment = input.string("comment", false).unwrap_or_default();
        if comment.chars().count() > MAX_COMMENT {
            input.problem("comment", format!("must be at most {MAX_COMMENT} characters"));
        }
        input.finish()?;
        Ok((number, verdict.unwrap_or_default(), comment))
    });
    let (number, verdict, comment) = match read {
        Ok(read) => read,
        Err(error) => return Answer::from(Err(error)),
    };
    let Call { caller, db, .. } = call;
    if let Err(error) = db::begin(&db, Tx::Write(&caller.tenant)) {
        return Answer::from(Err(error));
    }
    let reviewed = load(&db, &caller.tenant, number).and_then(|stored| {
        stored.must_be_open("reviewed")?;
        if stored.author == caller.principal {
            return Err(ApiError::failed_precondition(format!(
                "{} wrote proposal {number}; someone else must review it",
                caller.principal
            )));
        }
        db.execute(
            "INSERT INTO proposal_reviews (tenant, number, principal, verdict, comment, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (tenant, number, principal) DO UPDATE SET verdict = excluded.verdict,
               comment = excluded.comment, at = excluded.at",
            params![&caller.tenant, number, &caller.principal, &verdict, &comment, &db::now()],
        )?;
        let (document, prune) = db.query_one(
            "SELECT document, prune FROM proposals WHERE tenant = ?1 AND number = ?2",
            params![&caller.tenant, number],
            |row| Ok((row.get::<String>(0)?, row.get::<bool>(1)?)),
        )?;
        let reviews = reviews(&db, &caller.tenant, number)?;
        Ok((Stored { reviews, ..stored }, document, prune))
    });
    let (mut stored, document, prune) = match reviewed {
        Ok(reviewed) => reviewed,
        Err(error) => return Answer::from(db::finish(&db, Err(error))),
    };
    // Judged again with this review among the others, on the tenant's state now.
    let plan_request = format!(r#"{{"document":{document},"prune":{prune},"proposal":{}}}"#, stored.for_planner());
    let (session, output) =
        planning.sandbox.call(Session::new(caller, db, planning.source()), Entry::Plan, &plan_request);
    let Session { caller, db, sandbox, .. } = session;
    let judged = match output {
        Ok(plan) => serde_json::from_str::<Planned>(&plan).map_err(ApiError::internal).map(|planned| planned.approval),
        // A document that no longer plans approves nothing; a rejecting review still rejects.
        Err(error) if !matches!(error.code, Code::Internal | Code::Unavailable | Code::ResourceExhausted) => Ok(None),
        Err(error) => Err(error),
    };
    let recorded = judged.and_then(|approval| {
        let rejected_by_review = stored.reviews.iter().any(|review| review.verdict == "reject");
        let (approved, rejected) = match approval {
            Some(approval) => (approval.approved, approval.rejected),
            None => (false, rejected_by_review),
        };
        let was_approved = stored.approved;
        stored.approved = approved;
        let ctx = Ctx { caller: &caller, db: &db, via: Via::Api };
        let given = stored.reviews.iter().find(|review| review.principal == caller.principal);
        let given = json!({"principal": caller.principal, "verdict": verdict, "comment": comment,
                           "at": given.map(|review| review.at.as_str())});
        let changes = [FieldChange { field: "review", from: None, to: Some(&given) }];
        audit::record(&ctx, "compute.proposals.review", "proposal", &number.to_string(), &changes)?;
        db.execute(
            "UPDATE proposals SET approved = ?3 WHERE tenant = ?1 AND number = ?2",
            params![&caller.tenant, number, approved],
        )?;
        publish(&planning.metrics, &db, &caller.tenant, events::PROPOSAL_REVIEWED, &stored, Some(given))?;
        if rejected {
            stored.state = "rejected".to_owned();
            changed_state(&planning.metrics, &ctx, &stored, "open", "compute.proposals.review")?;
        } else if approved && !was_approved {
            publish(&planning.metrics, &db, &caller.tenant, events::PROPOSAL_APPROVED, &stored, None)?;
        }
        Ok(json!({ "proposal": stored.json()? }).to_string())
    });
    let output = db::finish(&db, recorded);
    if output.is_ok() {
        let _ = planning.wake.send(());
    }
    Answer { output, sandbox }
}

fn withdraw(metrics: &Metrics, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let number = number_of(&mut input);
    input.finish()?;
    let mut stored = load(ctx.db, &ctx.caller.tenant, number)?;
    stored.must_be_open("withdrawn")?;
    if stored.author != ctx.caller.principal {
        return Err(ApiError::failed_precondition(format!(
            "only {}, who wrote proposal {number}, can withdraw it",
            stored.author
        )));
    }
    stored.state = "withdrawn".to_owned();
    changed_state(metrics, ctx, &stored, "open", "compute.proposals.withdraw")?;
    stored.json().map(|proposal| json!({ "proposal": proposal }))
}

/// Records `stored`'s new state (from `was`): the row, its audit record and its event.
fn changed_state(metrics: &Metrics, ctx: &Ctx, stored: &Stored, was: &str, method: &str) -> Result<(), ApiError> {
    ctx.db.execute(
        "UPDATE proposals SET state = ?3, revision = ?4 WHERE tenant = ?1 AND number = ?2",
        params![&ctx.caller.tenant, stored.number, &stored.state, stored.revision],
    )?;
    let (from, to) = (json!(was), json!(stored.state));
    let changes = [FieldChange { field: "state", from: Some(&from), to: Some(&to) }];
    audit::record(ctx, method, "proposal", &stored.number.to_string(), &changes)?;
    let kind = match stored.state.as_str() {
        "applied" => events::PROPOSAL_APPLIED,
        "rejected" => events::PROPOSAL_REJECTED,
        "withdrawn" => events::PROPOSAL_WITHDRAWN,
        "stale" => events::PROPOSAL_STALE,
        _ => return Err(ApiError::internal(format_args!("no event says a proposal became {}", stored.state))),
    };
    publish(metrics, ctx.db, &ctx.caller.tenant, kind, stored, None)
}

/// A proposal's event: `{"number", "state", "planHash"}`, and the review given.
fn publish(
    metrics: &Metrics,
    db: &Conn,
    tenant: &str,
    kind: &str,
    stored: &Stored,
    review: Option<Value>,
) -> Result<(), ApiError> {
    let mut data = json!({"number": stored.number, "state": stored.state, "planHash": stored.plan_hash});
    if let Some(review) = review {
        data["review"] = review;
    }
    events::publish(metrics, db, tenant, kind, &data).map(|_| ())
}

// ---- get, list --------------------------------------------------------------------------

/// The proposal, with its plan and document as they were stored: spliced in, not
/// re-encoded, so the plan is byte for byte the one reviewed.
fn get(ctx: &Ctx, body: Value) -> Result<String, ApiError> {
    let mut input = Input::new(body)?;
    let number = number_of(&mut input);
    input.finish()?;
    let stored = load(ctx.db, &ctx.caller.tenant, number)?;
    let (plan, document) = ctx.db.query_one(
        "SELECT plan, document FROM proposals WHERE tenant = ?1 AND number = ?2",
        params![&ctx.caller.tenant, number],
        |row| Ok((row.get::<String>(0)?, row.get::<String>(1)?)),
    )?;
    Ok(format!(r#"{{"proposal":{},"plan":{plan},"document":{document}}}"#, stored.json()?))
}

fn list(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let state = input.string("state", false);
    if state.as_deref().is_some_and(|state| !STATES.contains(&state)) {
        input.problem("state", format!("must be one of {}", STATES.join(", ")));
    }
    let after = input.count("after", false);
    if after == Some(0) {
        input.problem("after", "must be a proposal's number, 1 or more");
    }
    let limit = input.limit();
    input.finish()?;
    let before = after.map_or(i64::MAX, |after| i64::try_from(after).unwrap_or(i64::MAX));
    let tenant = &ctx.caller.tenant;
    let mut proposals = ctx.db.query(
        &format!(
            "SELECT {COLUMNS} FROM proposals WHERE tenant = ?1 AND number < ?2 AND (?3 = '' OR state = ?3)
             ORDER BY number DESC LIMIT ?4"
        ),
        params![tenant, before, state.as_deref().unwrap_or(""), limit as i64],
        stored_row,
    )?;
    for stored in &mut proposals {
        stored.reviews = reviews(ctx.db, tenant, stored.number)?;
    }
    let proposals: Result<Vec<Value>, ApiError> = proposals.iter().map(Stored::json).collect();
    Ok(json!({ "proposals": proposals? }))
}

// ---- apply ------------------------------------------------------------------------------

/// The proposal an apply request names, if it names one: then the request is
/// `{"proposal": N, "overrides"?}` and nothing else. A document's apply is read by the
/// planner; only a request that holds the word is parsed here.
pub(super) fn named(body: &str) -> Result<Option<i64>, ApiError> {
    #[derive(Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        proposal: Option<&'a RawValue>,
    }
    if !body.contains(r#""proposal""#) {
        return Ok(None);
    }
    match serde_json::from_str::<Head>(body) {
        Ok(Head { proposal: Some(_) }) => {}
        _ => return Ok(None),
    }
    let mut input = Input::new(parse_body(body.as_bytes())?)?;
    let number = input.count("proposal", true).map_or(0, |number| i64::try_from(number).unwrap_or(i64::MAX));
    if number == 0 {
        input.problem("proposal", "must be a proposal's number, 1 or more");
    }
    input.take_optional("overrides");
    for field in ["document", "prune", "planHash", "heal"] {
        if input.take_optional(field).is_some() {
            input.problem(field, "a proposal's apply takes its document, prune and plan hash from the proposal");
        }
    }
    input.finish()?;
    Ok(Some(number))
}

/// Inside the apply's transaction: the planner's request that applies proposal
/// `number` exactly, pinned to its plan hash, with the overrides the apply gives; or
/// `FAILED_PRECONDITION` when it is not open and approved. The caller must be allowed
/// every call of the plan (`PERMISSION_DENIED` otherwise): planned as the caller
/// without them, the plan would come out blocked, and the proposal would seem stale.
pub(super) fn request_to_apply(
    db: &Conn,
    caller: &Caller,
    registry: &Registry,
    number: i64,
    body: &str,
) -> Result<String, ApiError> {
    let stored = load(db, &caller.tenant, number)?;
    stored.must_be_open("applied")?;
    if !stored.approved {
        return Err(ApiError::failed_precondition(format!("proposal {number} is not approved; nothing was applied")));
    }
    let (document, plan) = db.query_one(
        "SELECT document, plan FROM proposals WHERE tenant = ?1 AND number = ?2",
        params![&caller.tenant, number],
        |row| Ok((row.get::<String>(0)?, row.get::<String>(1)?)),
    )?;
    authorize_calls(&plan, caller, registry)?;
    let overrides = parse_body(body.as_bytes())?.get("overrides").map(Value::to_string);
    let overrides = overrides.map(|overrides| format!(r#","overrides":{overrides}"#)).unwrap_or_default();
    Ok(format!(
        r#"{{"document":{document},"prune":{},"planHash":{}{overrides}}}"#,
        stored.prune,
        json!(stored.plan_hash)
    ))
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
        method: std::borrow::Cow<'a, str>,
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

/// Inside the apply's transaction: the proposal is applied, by `revision`.
pub(super) fn applied(
    planning: &Planning,
    db: &Conn,
    caller: &Caller,
    number: i64,
    revision: i64,
) -> Result<(), ApiError> {
    let mut stored = load(db, &caller.tenant, number)?;
    stored.state = "applied".to_owned();
    stored.revision = Some(revision);
    let ctx = Ctx { caller, db, via: Via::Api };
    changed_state(&planning.metrics, &ctx, &stored, "open", "compute.fleet.apply")
}

/// After an apply that found the proposal's plan changed: in a transaction of its own
/// (the apply's rolled back), the proposal becomes stale, if it is still open.
pub(super) fn stale(planning: &Planning, db: &Conn, caller: &Caller, number: i64) -> Result<(), ApiError> {
    db::begin(db, Tx::Write(&caller.tenant))?;
    let marked = load(db, &caller.tenant, number).and_then(|mut stored| {
        if stored.state != "open" {
            return Ok(());
        }
        stored.state = "stale".to_owned();
        let ctx = Ctx { caller, db, via: Via::Api };
        changed_state(&planning.metrics, &ctx, &stored, "open", "compute.fleet.apply")
    });
    db::finish(db, marked)?;
    let _ = planning.wake.send(());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_kept_is_the_plan_without_its_approval() {
        let hash = format!("sha256:{}", "a".repeat(64));
        let plain = format!(r#"{{"changes":[],"calls":[{{"input":{{"approval":"x"}}}}],"planHash":"{hash}"}}"#);
        let judged = format!(
            r#"{{"changes":[],"calls":[{{"input":{{"approval":"x"}}}}],"approval":{{"approved":true,"rejected":false,"rule":"default","pending":[],"rejections":[]}},"planHash":"{hash}"}}"#
        );
        assert_eq!(without_approval(&judged), plain);
        assert_eq!(without_approval(&plain), plain);
    }

    #[test]
    fn an_apply_names_a_proposal_only_as_its_own_member() {
        assert_eq!(named(r#"{"document": {"pools": {"proposal": {}}}}"#).unwrap(), None);
        assert_eq!(named(r#"{"proposal": 3}"#).unwrap(), Some(3));
        assert_eq!(named(r#"{"proposal": 3, "overrides": [{"policy": "p", "reason": "r"}]}"#).unwrap(), Some(3));
        let error = named(r#"{"proposal": 3, "document": {}}"#).unwrap_err();
        assert_eq!(error.code, Code::InvalidArgument);
        assert_eq!(named(r#"{"proposal": "x"}"#).unwrap_err().code, Code::InvalidArgument);
    }
}

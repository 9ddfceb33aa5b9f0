//! Proposals (SPEC §17): a document planned now by its author and kept with that plan,
//! byte for byte, reviewed by principals other than its author, and applied exactly as
//! reviewed (`fleet/apply {"proposal": N}`, in `../apply.rs`).
//!
//! Here: the methods, the stored proposal, withdraw, get and list, the states' events
//! and audit records, and what an apply reads of a proposal and records of it;
//! `judged.rs` the two methods that run the planner (create and review).
//!
//! Whether a proposal is approved is the planner's answer, like a verdict: the policies
//! in force may define `approve` and `reject` rules over the plan's policy input and
//! `input.proposal`; without an `approve` rule, one approving review by another
//! principal and no rejecting one approve it. It is judged when the proposal is made
//! and at every review, in the transaction that records it, under the tenant's write
//! lock (so two reviews at once are judged one after the other). An apply needs no new
//! judgement: anything that could change it (the state, the document, the policies)
//! changes the plan hash, and the apply is then `CONFIG_DRIFT`.

use std::sync::Arc;

use fleet_guest::grammar::TEXT_PATTERN;
use serde_json::{Value, json};

mod judged;

use super::plan_source;
use super::planning::Planning;
use super::schema::{fleet_config_schema, review_schema};

use crate::api::ApiError;
use crate::audit::{self, FieldChange};
use crate::calls::auth::Caller;
use crate::calls::context::{Ctx, Via};
use crate::calls::input::{Input, MAX_COUNT, Page};
use crate::calls::registry::{Answer, Call, Composite, Method, MethodKind, Registry, handler};
use crate::db::{self, Conn, params};
use crate::events;

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
    let answer = json!({"type": "object", "required": ["proposal"], "properties": {"proposal": proposal_schema(planning.git_insecure)}});
    let composite = |run: fn(&Planning, Call<'_>) -> Answer| -> Composite {
        let planning = planning.clone();
        Arc::new(move |call: Call<'_>| run(&planning, call))
    };
    registry.register(
        Method::planner("proposals", "create", MethodKind::Mutation, composite(judged::create))
            .permission("compute:proposals:write", "compute-proposals")
            .phase("v0.4")
            .summary("Plans a FleetConfig document now, as the caller, and keeps the document, its plan and plan hash (and where the document came from) as the tenant's next proposal, to be reviewed by others and applied exactly as planned.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "required": ["document"], "properties": {
                    "document": fleet_config_schema(&planning.modules.catalog), "prune": {"type": "boolean", "default": false},
                    "title": {"type": "string", "maxLength": MAX_TITLE, "pattern": TEXT_PATTERN},
                    "source": plan_source::schema(planning.git_insecure)}}),
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
                    "proposals": {"type": "array", "items": proposal_schema(planning.git_insecure)}}}),
            ),
    );
    registry.register(
        Method::planner("proposals", "review", MethodKind::Mutation, composite(judged::review))
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
    registry.register(
        Method::new("proposals", "withdraw", MethodKind::Mutation, handler(withdraw))
            .phase("v0.4")
            .summary("Withdraws an open proposal; only its author may.")
            .schemas(by_number, answer),
    );
}

fn proposal_schema(insecure: bool) -> Value {
    json!({"type": "object",
        "required": ["number", "title", "state", "author", "createdAt", "planHash", "prune", "summary", "reviews", "approved"],
        "properties": {
            "number": {"type": "integer", "minimum": 1}, "title": {"type": "string"},
            "state": {"type": "string", "enum": STATES}, "author": {"type": "string"},
            "createdAt": {"type": "string", "format": "date-time"},
            "planHash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}, "prune": {"type": "boolean"},
            "summary": {"type": "object"}, "reviews": {"type": "array", "items": review_schema()},
            "approved": {"type": "boolean"}, "revision": {"type": "integer", "minimum": 1},
            "source": plan_source::schema(insecure)}})
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
    /// Where its document came from (SPEC §20.2), as JSON text.
    source: Option<String>,
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

const COLUMNS: &str = "number, title, state, author, created_at, plan_hash, prune, summary, approved, revision, source";

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
        source: row.get(10)?,
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
        if let Some(source) = &self.source {
            proposal["source"] = serde_json::from_str(source).map_err(ApiError::internal)?;
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

// ---- what an apply reads and records ------------------------------------------------------

/// An open, approved proposal as its apply reads it, in one row: what it applies (its
/// document, prune and plan hash), as whom it is planned (its author, so its creates keep
/// the ids the reviewers saw), and the plan whose calls the applier must be allowed.
pub(in crate::fleet) struct Approved {
    stored: Stored,
    pub document: String,
    pub plan: String,
    /// The `input.source` it was planned with, when a git source's cycle opened it.
    pub git_source: Option<String>,
}

impl Approved {
    pub fn number(&self) -> i64 {
        self.stored.number
    }

    pub fn author(&self) -> &str {
        &self.stored.author
    }

    pub fn prune(&self) -> bool {
        self.stored.prune
    }

    pub fn plan_hash(&self) -> &str {
        &self.stored.plan_hash
    }

    /// Where its document came from, as JSON text: what its apply records.
    pub fn source(&self) -> Option<&str> {
        self.stored.source.as_deref()
    }
}

/// Inside the apply's transaction: proposal `number`, when it is open and approved;
/// else `NOT_FOUND` or `FAILED_PRECONDITION`.
pub(in crate::fleet) fn approved(db: &Conn, tenant: &str, number: i64) -> Result<Approved, ApiError> {
    let found = db.query_opt(
        &format!("SELECT {COLUMNS}, document, plan, git_source FROM proposals WHERE tenant = ?1 AND number = ?2"),
        params![tenant, number],
        |row| {
            Ok(Approved {
                stored: stored_row(row)?,
                document: row.get(11)?,
                plan: row.get(12)?,
                git_source: row.get(13)?,
            })
        },
    )?;
    let approved = found.ok_or_else(|| ApiError::not_found(format!("this tenant has no proposal {number}")))?;
    approved.stored.must_be_open("applied")?;
    if !approved.stored.approved {
        return Err(ApiError::failed_precondition(format!("proposal {number} is not approved; nothing was applied")));
    }
    Ok(approved)
}

/// Inside the apply's transaction: the proposal is applied, by `revision`.
pub(in crate::fleet) fn mark_applied(
    db: &Conn,
    caller: &Caller,
    approved: Approved,
    revision: i64,
) -> Result<(), ApiError> {
    let stored = Stored { state: "applied".to_owned(), revision: Some(revision), ..approved.stored };
    let ctx = Ctx { caller, db, via: Via::Api };
    changed_state(&ctx, &stored, "open", "compute.fleet.apply")
}

/// After an apply that found the proposal's plan changed: in a transaction of its own
/// (the apply's rolled back), the proposal becomes stale, if it is still open.
pub(crate) fn mark_stale(db: &Conn, caller: &Caller, number: i64) -> Result<(), ApiError> {
    db::begin(db, db::Tx::Write(&caller.tenant))?;
    let marked = load(db, &caller.tenant, number).and_then(|mut stored| {
        if stored.state != "open" {
            return Ok(());
        }
        stored.state = "stale".to_owned();
        let ctx = Ctx { caller, db, via: Via::Api };
        changed_state(&ctx, &stored, "open", "compute.fleet.apply")
    });
    db::finish(db, marked)
}

/// A request's `number`, as a row's key.
/// A proposal's `number`: 1 or more, as its schema says (0 is a bad value, not a
/// proposal that is not there).
fn number_of(input: &mut Input) -> i64 {
    let number = input.count("number", true);
    if number == Some(0) {
        input.problem("number", "must be a proposal's number, 1 or more");
    }
    number.map_or(0, |number| i64::try_from(number).unwrap_or(i64::MAX))
}

// ---- withdraw, and the states' records ---------------------------------------------------

fn withdraw(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
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
    changed_state(ctx, &stored, "open", "compute.proposals.withdraw")?;
    stored.json().map(|proposal| json!({ "proposal": proposal }))
}

/// Records `stored`'s new state (from `was`): the row, its audit record and its event.
fn changed_state(ctx: &Ctx, stored: &Stored, was: &str, method: &str) -> Result<(), ApiError> {
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
    publish(ctx.db, &ctx.caller.tenant, kind, stored, None)
}

/// A proposal's event: `{"number", "state", "planHash"}`, and the review given.
fn publish(db: &Conn, tenant: &str, kind: &str, stored: &Stored, review: Option<Value>) -> Result<(), ApiError> {
    let mut data = json!({"number": stored.number, "state": stored.state, "planHash": stored.plan_hash});
    if let Some(review) = review {
        data["review"] = review;
    }
    events::publish(db, tenant, kind, &data).map(|_| ())
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

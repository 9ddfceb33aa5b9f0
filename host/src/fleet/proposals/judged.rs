//! The proposal methods that run the planner: `create` plans the document as its author
//! and keeps the plan; `review` records a review and has the planner judge the proposal
//! again with it. Both run in the tenant's write transaction.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{MAX_COMMENT, MAX_TITLE, Stored, changed_state, load, number_of, publish, reviews};
use crate::api::{ApiError, Code};
use crate::audit::{self, FieldChange};
use crate::calls::context::{Ctx, Via};
use crate::calls::input::{self, Input};
use crate::calls::parse_body;
use crate::calls::registry::{Answer, Call};
use crate::db::{self, Tx, params};
use crate::events;
use crate::fleet::plan_source;
use crate::fleet::planning::Planning;
use crate::fleet::request::{PlannerRequest, source_member};
use crate::planner::{Entry, Session};

// ---- create ---------------------------------------------------------------------------

/// `{"document", "prune"?, "title"?, "source"?}`, the document left as text for the
/// planner, which reports its problems; the source never reaches it.
struct CreateRequest<'a> {
    document: Option<&'a RawValue>,
    prune: bool,
    title: String,
    /// As JSON text.
    source: Option<String>,
}

impl<'a> CreateRequest<'a> {
    fn read(body: &'a str, insecure: bool) -> Result<CreateRequest<'a>, ApiError> {
        let members = input::members(body)?;
        let mut request = CreateRequest { document: None, prune: false, title: String::new(), source: None };
        // The members but the document, read together, so that a problem's path names
        // its member.
        let mut rest = Vec::new();
        for (name, value) in members {
            match name.as_str() {
                "document" => request.document = Some(value),
                _ => rest.push(format!("{}:{}", json!(name), value.get())),
            }
        }
        let mut input = Input::new(parse_body(format!("{{{}}}", rest.join(",")).as_bytes())?)?;
        request.prune = input.boolean("prune", false).unwrap_or(false);
        request.title = input.string("title", false).unwrap_or_default();
        if request.title.chars().count() > MAX_TITLE {
            input.problem("title", format!("must be at most {MAX_TITLE} characters"));
        }
        request.source = plan_source::take(&mut input, insecure);
        if request.document.is_none() {
            input.problem("document", "is required");
        }
        input.finish()?;
        Ok(request)
    }
}

/// What a proposal keeps of its plan, read in place, and the proposal's approval.
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

pub(super) fn create(planning: &Planning, call: Call) -> Answer {
    let request = match CreateRequest::read(call.body, planning.git_insecure) {
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
    let git_source = caller.git_source.as_deref();
    let plan_request = PlannerRequest::of(document, request.prune).and_then(|planned| {
        PlannerRequest { proposal: Some(proposal), source: source_member(git_source)?, ..planned }.text()
    });
    let plan_request = match plan_request {
        Ok(plan_request) => plan_request,
        Err(error) => return Answer::from(db::finish(&db, Err(error))),
    };
    let session = Session::new(caller, db, planning.source());
    let (session, output) = planning.sandbox.call(session, Entry::Plan, &plan_request);
    let Session { caller, db, sandbox, .. } = session;
    let made = output.and_then(|plan| {
        let planned: Planned = serde_json::from_str(&plan).map_err(ApiError::internal)?;
        proposable(&planned)?;
        let reviewed = without_approval(&plan)?;
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
            source: request.source,
            reviews: Vec::new(),
        };
        db.execute(
            "INSERT INTO proposals (tenant, number, title, state, author, created_at, plan_hash, prune, summary,
                                    document, plan, approved, source, git_source)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
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
                &reviewed,
                approved,
                stored.source.as_deref(),
                caller.git_source.as_deref(),
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
        publish(&db, &caller.tenant, events::PROPOSAL_OPENED, &stored, None)?;
        if rejected {
            changed_state(&ctx, &stored, "open", "compute.proposals.create")?;
        } else if approved {
            publish(&db, &caller.tenant, events::PROPOSAL_APPROVED, &stored, None)?;
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

/// The plan as `fleet/plan` answers it, its members byte for byte: the planner's
/// answer without its `approval` member, which is the proposal's, no part of the plan
/// reviewed.
fn without_approval(plan: &str) -> Result<String, ApiError> {
    struct Members<'a>(Vec<(String, &'a RawValue)>);
    impl serde::Serialize for Members<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap as _;
            let mut map = serializer.serialize_map(Some(self.0.len()))?;
            for (name, value) in &self.0 {
                map.serialize_entry(name, value)?;
            }
            map.end()
        }
    }
    let mut members = input::members(plan).map_err(ApiError::internal)?;
    members.retain(|(name, _)| name != "approval");
    serde_json::to_string(&Members(members)).map_err(ApiError::internal)
}

// ---- review ---------------------------------------------------------------------------

pub(super) fn review(planning: &Planning, call: Call) -> Answer {
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
        let (document, prune, git_source) = db.query_one(
            "SELECT document, prune, git_source FROM proposals WHERE tenant = ?1 AND number = ?2",
            params![&caller.tenant, number],
            |row| Ok((row.get::<String>(0)?, row.get::<bool>(1)?, row.get::<Option<String>>(2)?)),
        )?;
        let reviews = reviews(&db, &caller.tenant, number)?;
        Ok((Stored { reviews, ..stored }, document, prune, git_source))
    });
    let (mut stored, document, prune, git_source) = match reviewed {
        Ok(reviewed) => reviewed,
        Err(error) => return Answer::from(db::finish(&db, Err(error))),
    };
    // Judged again with this review among the others, on the tenant's state now.
    let plan_request = PlannerRequest::of(&document, prune).and_then(|planned| {
        let source = source_member(git_source.as_deref())?;
        PlannerRequest { proposal: Some(stored.for_planner()), source, ..planned }.text()
    });
    let plan_request = match plan_request {
        Ok(plan_request) => plan_request,
        Err(error) => return Answer::from(db::finish(&db, Err(error))),
    };
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
        publish(&db, &caller.tenant, events::PROPOSAL_REVIEWED, &stored, Some(given))?;
        if rejected {
            stored.state = "rejected".to_owned();
            changed_state(&ctx, &stored, "open", "compute.proposals.review")?;
        } else if approved && !was_approved {
            publish(&db, &caller.tenant, events::PROPOSAL_APPROVED, &stored, None)?;
        }
        Ok(json!({ "proposal": stored.json()? }).to_string())
    });
    let output = db::finish(&db, recorded);
    if output.is_ok() {
        let _ = planning.wake.send(());
    }
    Answer { output, sandbox }
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
        assert_eq!(without_approval(&judged).unwrap(), plain);
        assert_eq!(without_approval(&plain).unwrap(), plain);
        // An `approval` anywhere but at the top is the plan's own.
        let nested = format!(r#"{{"calls":[{{"approval":{{"approved":true}}}}],"planHash":"{hash}"}}"#);
        assert_eq!(without_approval(&nested).unwrap(), nested);
    }
}

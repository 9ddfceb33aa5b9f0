//! What an apply of a proposal asks of it (`fleet/apply {"proposal": N}`, SPEC §17):
//! whether a request names one, the planner's request that applies it exactly, the
//! caller's right to every call of its plan, and its state afterwards.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{changed_state, load};
use crate::api::{ApiError, Code};
use crate::calls::auth::Caller;
use crate::calls::context::{Ctx, Via};
use crate::calls::input::Input;
use crate::calls::parse_body;
use crate::calls::registry::Registry;
use crate::db::{self, Conn, Tx, params};
use crate::fleet::Planning;

/// The proposal an apply request names, if it names one: then the request is
/// `{"proposal": N, "overrides"?}` and nothing else. A document's apply is read by the
/// planner; only a request that holds the word is parsed here.
pub(in crate::fleet) fn named(body: &str) -> Result<Option<i64>, ApiError> {
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
    for field in ["document", "prune", "planHash", "heal", "rollbackOf"] {
        if input.take_optional(field).is_some() {
            input.problem(field, "a proposal's apply takes its document, prune and plan hash from the proposal");
        }
    }
    input.finish()?;
    Ok(Some(number))
}

/// What applies a proposal exactly: the planner's request, pinned to its plan hash,
/// and the author, as whom it is planned again (its creates keep the ids the reviewers
/// saw, SPEC §17).
pub(in crate::fleet) struct ToApply {
    pub request: String,
    pub author: String,
}

/// Inside the apply's transaction: what applies proposal `number` exactly, with the
/// overrides the apply gives; or `FAILED_PRECONDITION` when it is not open and
/// approved. The caller must be allowed every call of the plan (`PERMISSION_DENIED`
/// otherwise): without them the plan would come out blocked, and the proposal would
/// seem stale.
pub(in crate::fleet) fn request_to_apply(
    db: &Conn,
    caller: &Caller,
    registry: &Registry,
    number: i64,
    body: &str,
) -> Result<ToApply, ApiError> {
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
    let request = format!(
        r#"{{"document":{document},"prune":{},"planHash":{}{overrides}}}"#,
        stored.prune,
        json!(stored.plan_hash)
    );
    Ok(ToApply { request, author: stored.author })
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
pub(in crate::fleet) fn applied(
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
pub(in crate::fleet) fn stale(planning: &Planning, db: &Conn, caller: &Caller, number: i64) -> Result<(), ApiError> {
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
    use crate::api::Code;

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

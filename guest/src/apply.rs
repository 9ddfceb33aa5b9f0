//! Apply, guest side (SPEC §6.3): plan, check the hash and blocked changes, then run
//! every call through the host, stopping at the first error.

use serde::Serialize;

use crate::plan::Plan;
use crate::{Error, ErrorCode, Host};

#[derive(Serialize)]
struct Applied<'a> {
    plan: &'a Plan,
    applied: usize,
}

/// Runs a plan's calls after the checks of step 1; `expected_hash` is the request's
/// `planHash`, if given.
pub(crate) fn apply(host: &mut dyn Host, plan: &Plan, expected_hash: Option<&str>) -> Result<String, Error> {
    if let Some(expected) = expected_hash
        && expected != plan.plan_hash
    {
        return Err(Error::new(
            ErrorCode::ConfigDrift,
            "the plan differs from the planHash given: the state or the document changed",
        )
        .with_details(serde_json::json!({"expected": expected, "actual": plan.plan_hash})));
    }
    if !plan.blocked.is_empty() {
        let count = plan.blocked.len();
        let message = if count == 1 {
            "the plan has 1 blocked change; nothing was applied".to_owned()
        } else {
            format!("the plan has {count} blocked changes; nothing was applied")
        };
        return Err(
            Error::new(ErrorCode::InvalidState, message).with_details(serde_json::json!({"blocked": plan.blocked}))
        );
    }
    let mut applied = 0;
    for call in &plan.calls {
        host.invoke(&call.method, &call.invoke_input()?)?;
        applied += 1;
    }
    serde_json::to_string(&Applied { plan, applied })
        .map_err(|error| Error::new(ErrorCode::Internal, format!("the apply result cannot be written: {error}")))
}

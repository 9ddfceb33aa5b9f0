//! Apply, guest side (SPEC §6.3): plan, check the hash, blocked changes, denials and
//! the approval the host's gate asks for (§17), then run every call through the host,
//! stopping at the first error.

use serde::Serialize;

use crate::document::{Override, PlanRequest};
use crate::error::{Error, ErrorCode, Problem};
use crate::host::{ApprovalGate, Host};
use crate::plan::Plan;
use crate::policy::Verdict;
use crate::state::{Caller, Level};

/// What an apply answers (SPEC §6.3): the plan applied, the calls it made, and the
/// overrides that let it through.
#[derive(Serialize)]
struct ApplyAnswer<'a> {
    plan: &'a Plan,
    applied: usize,
    /// The overrides that let a denied plan through, for the host's audit trail.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    overrides: &'a [&'a Override],
}

/// The permission that overrides mandatory policies (SPEC §14).
pub const OVERRIDE_PERMISSION: (&str, &str) = ("compute:fleet:override", "compute-fleet");

/// Runs a plan's calls after the checks of step 1 (the request's `planHash`, if given,
/// among them), then writes the result to `out`.
pub(crate) fn apply(
    host: &mut dyn Host,
    plan: &Plan,
    request: &PlanRequest,
    caller: &Caller,
    out: impl std::io::Write,
) -> Result<(), Error> {
    let expected_hash = request.plan_hash.as_deref();
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
    let overrides = overridden(plan, &request.overrides, caller)?;
    gate(plan, host.approval_gate())?;
    let mut applied = 0;
    for call in &plan.calls {
        host.invoke(&call.method.to_string(), &call.invoke_input()?)?;
        applied += 1;
    }
    crate::json::writer::write_json(out, &ApplyAnswer { plan, applied, overrides: &overrides }, "apply result")
}

/// `APPROVAL_REQUIRED` when the gate holds the plan back.
fn gate(plan: &Plan, gate: ApprovalGate) -> Result<(), Error> {
    let verdicts: Vec<&Verdict> = plan.policy.iter().flat_map(|judgement| judgement.approvals()).collect();
    let mut details = serde_json::json!({ "verdicts": verdicts });
    let message = match gate {
        ApprovalGate::None => return Ok(()),
        ApprovalGate::EveryChange if !plan.calls.is_empty() => {
            details["reason"] = "deployment".into();
            "this deployment applies changes only through approved proposals; propose the plan (fleet propose) and have it reviewed; nothing was applied".to_owned()
        }
        _ if verdicts.is_empty() => return Ok(()),
        _ => format!(
            "policies require approval of the plan ({}); propose it (fleet propose) and have it reviewed; nothing was applied",
            verdicts.iter().map(|verdict| verdict.message.as_str()).collect::<Vec<_>>().join("; ")
        ),
    };
    Err(Error::new(ErrorCode::ApprovalRequired, message).with_details(details))
}

/// The overrides that let the plan's denials through, or `POLICY_DENIED`: every denial
/// must come from a mandatory policy the request overrides, and the caller must hold
/// the override permission. Nothing overrides an enforced policy.
fn overridden<'a>(plan: &Plan, overrides: &'a [Override], caller: &Caller) -> Result<Vec<&'a Override>, Error> {
    let Some(judgement) = &plan.policy else {
        return match overrides.first() {
            None => Ok(Vec::new()),
            Some(first) => Err(unknown_policy(&first.policy)),
        };
    };
    if let Some(unknown) = overrides.iter().find(|item| !judgement.in_force.contains(&item.policy)) {
        return Err(unknown_policy(&unknown.policy));
    }
    let denials: Vec<&Verdict> = judgement.verdicts.iter().filter(|verdict| verdict.denies()).collect();
    if denials.is_empty() {
        return Ok(Vec::new());
    }
    let denied = |message: String| {
        Error::new(ErrorCode::PolicyDenied, message).with_details(serde_json::json!({ "verdicts": denials }))
    };
    let count = |count: usize| if count == 1 { "1 denial".to_owned() } else { format!("{count} denials") };
    let enforced = denials.iter().filter(|verdict| verdict.level == Level::Enforced).count();
    if enforced > 0 {
        return Err(denied(format!(
            "enforced policies deny the plan ({}), and nothing overrides them; nothing was applied",
            count(enforced)
        )));
    }
    let mut policies: Vec<&str> = denials.iter().map(|verdict| verdict.policy.as_str()).collect();
    policies.dedup();
    let missing: Vec<&str> =
        policies.iter().copied().filter(|policy| overrides.iter().all(|item| item.policy != *policy)).collect();
    if !missing.is_empty() {
        return Err(denied(format!(
            "policies deny the plan ({}); nothing was applied. To apply it anyway, override {} with a reason",
            count(denials.len()),
            missing.join(", ")
        )));
    }
    let (permission, scope) = OVERRIDE_PERMISSION;
    if let Some(grants) = &caller.grants
        && !crate::grants::allows(grants, permission, scope)
    {
        return Err(denied(format!(
            "{} may not override policies: it needs {permission} @ {scope}; nothing was applied",
            caller.principal
        )));
    }
    Ok(overrides.iter().filter(|item| policies.contains(&item.policy.as_str())).collect())
}

fn unknown_policy(policy: &str) -> Error {
    let problem = Problem { path: "/overrides".to_owned(), message: format!("no policy {policy:?} is in force") };
    Error::new(ErrorCode::InvalidArgument, "the request has 1 problem")
        .with_details(serde_json::json!({ "problems": [problem] }))
}

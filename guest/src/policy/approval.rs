//! Whether a proposal is approved (SPEC §17): the `approve` and `reject` rules of the
//! policies in force over the plan's input and `input.proposal`, or, when no policy
//! defines `approve`, the default rule (one approval by someone other than the author,
//! no rejection). A `reject` review or a true `reject` rule rejects it outright.

use regorus::Value as Rego;
use serde::Serialize;

use super::{Compiled, failure, messages};
use crate::document::{Proposal, ReviewVerdict};
use crate::state::Policy;

/// The plan's `approval`, written when the request names a proposal. Not hashed: the
/// same plan is approved or not as its reviews come in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Approval {
    pub(crate) approved: bool,
    pub(crate) rejected: bool,
    /// `"policies"` when a policy defines `approve`, else `"default"`.
    pub(crate) rule: &'static str,
    /// The policies whose `approve` is not true yet (with the error, if it failed).
    pub(crate) pending: Vec<Pending>,
    pub(crate) rejections: Vec<Rejection>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Pending {
    pub(crate) policy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
}

/// A reason the proposal is rejected: a policy's `reject` rule, or a reviewer's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Rejection {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) principal: Option<String>,
    pub(crate) message: String,
}

/// What one rule said: true (with its messages, when it is a set), or not.
enum Said {
    Yes(Vec<String>),
    No,
    Failed(String),
}

fn said(compiled: &mut Compiled, rule: &str) -> Option<Said> {
    if !compiled.defined.contains(rule) {
        return None;
    }
    let value = compiled.engine.eval_rule(format!("{}.{rule}", compiled.package));
    Some(match value {
        Ok(Rego::Bool(true)) => Said::Yes(Vec::new()),
        Ok(Rego::Bool(false) | Rego::Undefined) => Said::No,
        Ok(value) => match messages(&value) {
            Ok(found) if found.is_empty() => Said::No,
            Ok(found) => Said::Yes(found.into_iter().map(|(_, _, message)| message).collect()),
            Err(_) => Said::Failed(format!("the {rule} rule is neither a boolean nor a set of messages")),
        },
        Err(error) => Said::Failed(failure(&error)),
    })
}

/// Judges `proposal` by the policies' rules, each run on `input` (the plan's policy
/// input, `proposal` among its members) after its name is given to `judging`, or by
/// the default rule.
pub(crate) fn judge(
    policies: &[Policy],
    compiled: &mut [Compiled],
    input: &Rego,
    proposal: &Proposal,
    judging: &dyn Fn(&str),
) -> Approval {
    let mut pending = Vec::new();
    let mut rejections = reviewers_rejections(proposal);
    let mut defines_approve = false;
    for (policy, compiled) in policies.iter().zip(compiled.iter_mut()) {
        if !compiled.defined.contains("approve") && !compiled.defined.contains("reject") {
            continue;
        }
        judging(&policy.name);
        compiled.engine.set_input(input.clone());
        match said(compiled, "approve") {
            None => {}
            Some(Said::Yes(_)) => defines_approve = true,
            Some(Said::No) => {
                defines_approve = true;
                pending.push(Pending { policy: policy.name.clone(), message: None });
            }
            Some(Said::Failed(message)) => {
                defines_approve = true;
                pending.push(Pending { policy: policy.name.clone(), message: Some(message) });
            }
        }
        match said(compiled, "reject") {
            None | Some(Said::No) => {}
            Some(Said::Yes(messages)) => {
                let messages = if messages.is_empty() { vec!["rejected".to_owned()] } else { messages };
                rejections.extend(messages.into_iter().map(|message| Rejection {
                    policy: Some(policy.name.clone()),
                    principal: None,
                    message,
                }));
            }
            // A rule that fails rejects nothing, and approves nothing either.
            Some(Said::Failed(message)) => {
                pending.push(Pending { policy: policy.name.clone(), message: Some(message) })
            }
        }
    }
    judging("");
    if !defines_approve {
        return by_default(proposal, pending, rejections);
    }
    let rejected = !rejections.is_empty();
    Approval { approved: pending.is_empty() && !rejected, rejected, rule: "policies", pending, rejections }
}

/// The default rule: one `approve` review by a principal other than the author, and
/// no rejection. `pending` holds only failures of `reject` rules, which also hold it.
pub(crate) fn by_default(proposal: &Proposal, pending: Vec<Pending>, rejections: Vec<Rejection>) -> Approval {
    let rejected = !rejections.is_empty();
    let approved_by_someone = proposal
        .reviews
        .iter()
        .any(|review| review.verdict == ReviewVerdict::Approve && review.principal != proposal.author);
    Approval {
        approved: approved_by_someone && pending.is_empty() && !rejected,
        rejected,
        rule: "default",
        pending,
        rejections,
    }
}

/// The reviews that reject, each a rejection in the reviewer's words.
pub(crate) fn reviewers_rejections(proposal: &Proposal) -> Vec<Rejection> {
    proposal
        .reviews
        .iter()
        .filter(|review| review.verdict == ReviewVerdict::Reject && review.principal != proposal.author)
        .map(|review| Rejection {
            policy: None,
            principal: Some(review.principal.clone()),
            message: if review.comment.is_empty() { "rejected".to_owned() } else { review.comment.clone() },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::error::ErrorCode;
    use crate::state::{Caller, Level, Policy, Snapshot};

    fn state(policies: &[(&str, Level, &str)]) -> Snapshot {
        let mut state = Snapshot::empty(Caller { tenant: "acme".into(), principal: "alice".into(), grants: None });
        state.policies = policies
            .iter()
            .map(|(name, level, source)| Policy { name: (*name).into(), level: *level, source: (*source).into() })
            .collect();
        state
    }

    const DOCUMENT: &str = r#"{"sites": {"eu": {"region": "eu-west-1"}}}"#;

    fn planned(state: &Snapshot, reviews: Value) -> Value {
        let proposal = json!({"number": 1, "author": "alice", "title": "t", "reviews": reviews});
        let request = format!(r#"{{"document": {DOCUMENT}, "proposal": {proposal}}}"#);
        serde_json::from_str(&crate::plan(state, &request).unwrap()).unwrap()
    }

    fn review(principal: &str, verdict: &str) -> Value {
        json!({"principal": principal, "verdict": verdict, "comment": "", "at": "2026-12-06T00:00:00Z"})
    }

    #[test]
    fn the_default_rule_wants_one_approval_by_someone_else_and_no_rejection() {
        let state = state(&[]);
        let approval = |reviews| planned(&state, reviews)["approval"].clone();
        assert_eq!(
            approval(json!([])),
            json!({"approved": false, "rejected": false, "rule": "default", "pending": [], "rejections": []})
        );
        assert_eq!(approval(json!([review("alice", "approve")]))["approved"], false, "the author's own");
        assert_eq!(approval(json!([review("bob", "approve")]))["approved"], true);
        let rejected = approval(json!([review("bob", "approve"), review("carol", "reject")]));
        assert_eq!((rejected["approved"].as_bool(), rejected["rejected"].as_bool()), (Some(false), Some(true)));
        assert_eq!(rejected["rejections"], json!([{"principal": "carol", "message": "rejected"}]));
    }

    #[test]
    fn policies_approve_and_reject_and_a_failing_rule_approves_nothing() {
        let two =
            "package two\n\napprove if count([r | some r in input.proposal.reviews; r.verdict == \"approve\"]) >= 2\n";
        let veto = "package veto\n\nreject contains \"carol said no\" if { some r in input.proposal.reviews; r.principal == \"carol\" }\n";
        let state = state(&[("two", Level::Advisory, two), ("veto", Level::Mandatory, veto)]);
        let one = planned(&state, json!([review("bob", "approve")]));
        assert_eq!(one["approval"]["rule"], "policies");
        assert_eq!(one["approval"]["pending"], json!([{"policy": "two"}]));
        let both = planned(&state, json!([review("bob", "approve"), review("dana", "approve")]));
        assert_eq!(both["approval"]["approved"], true, "{both}");
        // A reject rule rejects whatever the reviews say; the plan hash never moves.
        let vetoed =
            planned(&state, json!([review("bob", "approve"), review("dana", "approve"), review("carol", "approve")]));
        assert_eq!(
            (vetoed["approval"]["approved"].as_bool(), vetoed["approval"]["rejected"].as_bool()),
            (Some(false), Some(true))
        );
        assert_eq!(vetoed["approval"]["rejections"], json!([{"policy": "veto", "message": "carol said no"}]));
        let plain: Value =
            serde_json::from_str(&crate::plan(&state, &format!(r#"{{"document": {DOCUMENT}}}"#)).unwrap()).unwrap();
        assert_eq!(plain["planHash"], both["planHash"]);
        assert!(plain.get("approval").is_none());

        let failing = "package failing\n\napprove if to_number(\"ten\") > 1\n";
        let state = super::tests::state(&[("failing", Level::Mandatory, failing)]);
        let judged = planned(&state, json!([review("bob", "approve")]));
        assert_eq!(judged["approval"]["approved"], false);
        assert!(judged["approval"]["pending"][0]["message"].as_str().unwrap().contains("could not parse"), "{judged}");
    }

    #[test]
    fn binding_require_approval_verdicts_hold_back_a_direct_apply() {
        let source = "package gate\n\nrequire_approval contains {\"msg\": \"sites need a review\", \"kind\": \"site\", \"key\": \"eu\"} if { true }\n";
        let request = format!(r#"{{"document": {DOCUMENT}}}"#);
        let mandatory = state(&[("gate", Level::Mandatory, source)]);
        let plan: Value = serde_json::from_str(&crate::plan(&mandatory, &request).unwrap()).unwrap();
        assert_eq!(plan["summary"]["approvalRequired"], 1, "{plan}");
        assert_eq!(plan["summary"]["warnings"], 0);
        assert_eq!(plan["policy"]["verdicts"][0]["rule"], "require_approval");
        let error = crate::apply(&mut mandatory.clone(), &request).unwrap_err();
        assert_eq!(error.code, ErrorCode::ApprovalRequired, "{error:?}");
        assert_eq!(error.details.unwrap()["verdicts"][0]["message"], "sites need a review");

        // An advisory policy's is a warning, and holds nothing back.
        let advisory = state(&[("gate", Level::Advisory, source)]);
        let plan: Value = serde_json::from_str(&crate::plan(&advisory, &request).unwrap()).unwrap();
        assert_eq!(
            (plan["summary"]["approvalRequired"].as_u64(), plan["summary"]["warnings"].as_u64()),
            (Some(0), Some(1))
        );
        let error = crate::apply(&mut advisory.clone(), &request).unwrap_err();
        assert_eq!(error.code, ErrorCode::Unsupported, "past the gate, to the calls: {error:?}");
    }
}

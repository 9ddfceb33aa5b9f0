//! The hashed form of a plan: what the plan hash covers (its blocked changes, calls and
//! changes, the document filled in, the policies' verdicts and `prune`), written with
//! every object's members in canonical (sorted) order.

use serde::{Serialize, Serializer};

use super::output::{Blocked, Call, Change, FieldChanges, Input, Line, Plan};
use crate::document::{FilledDocument, PlanRequest};
use crate::estate::Estate;
use crate::hash::IdempotencyKey;
use crate::kinds::Method;
use crate::policy::CanonicalJudgement;

/// What the plan hash covers, every object's members in canonical (sorted) order so
/// that the hash streams without a JSON tree (`hash::plan_hash` checks the order).
/// The changes are in it because they carry the values a plan changes *from*.
#[derive(Serialize)]
pub(super) struct Hashed<'a> {
    #[serde(serialize_with = "canonical_blocked")]
    blocked: &'a [Blocked],
    #[serde(serialize_with = "canonical_calls")]
    calls: &'a [Call],
    #[serde(serialize_with = "canonical_changes")]
    changes: &'a [Change],
    document: FilledDocument<'a>,
    /// Only with policies in force, so that plans without them hash as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<CanonicalJudgement<'a>>,
    prune: bool,
}

impl<'a> Hashed<'a> {
    pub(super) fn of(estate: &Estate, request: &'a PlanRequest, plan: &'a Plan) -> Hashed<'a> {
        Hashed {
            blocked: &plan.blocked,
            calls: &plan.calls,
            changes: &plan.changes,
            document: request.document.canonical(&estate.catalog),
            policy: plan.policy.as_ref().map(CanonicalJudgement),
            prune: request.prune,
        }
    }
}

fn canonical_blocked<S: Serializer>(blocked: &&[Blocked], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(blocked.iter().map(|blocked| {
        let Blocked { kind, key, field, reason } = blocked;
        CanonicalMap([
            ("field", field.map(Member::Text)),
            ("key", Some(Member::Text(key))),
            ("kind", Some(Member::Text(kind))),
            ("reason", Some(Member::Text(reason))),
        ])
    }))
}

fn canonical_calls<S: Serializer>(calls: &&[Call], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(calls.iter().map(|call| {
        let Call { method, input, idempotency_key } = call;
        CanonicalMap([
            ("idempotencyKey", idempotency_key.as_ref().map(Member::IdempotencyKey)),
            ("input", Some(Member::Input(input))),
            ("method", Some(Member::Method(method))),
        ])
    }))
}

fn canonical_changes<S: Serializer>(changes: &&[Change], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(changes.iter().map(|change| {
        CanonicalMap([
            ("action", Some(Member::Text(change.action.verb()))),
            ("fields", Some(Member::FieldChanges(change))),
            ("from", change.from().map(Member::Text)),
            ("id", change.id.as_deref().map(Member::Text)),
            ("key", Some(Member::Text(&change.key))),
            ("kind", Some(Member::Text(change.kind))),
            ("text", Some(Member::Line(change.text()))),
        ])
    }))
}

/// An object of members given in sorted order; absent ones are left out.
struct CanonicalMap<'a, const N: usize>([(&'static str, Option<Member<'a>>); N]);

enum Member<'a> {
    Text(&'a str),
    Line(Line<'a>),
    Method(&'a Method),
    IdempotencyKey(&'a IdempotencyKey),
    /// Written with its members sorted by name.
    Input(&'a Input),
    /// `[{"field", "from", "to"}]`, `from` null for a new value.
    FieldChanges(&'a Change),
}

impl<const N: usize> Serialize for CanonicalMap<'_, N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let members = self.0.iter().filter_map(|(name, member)| member.as_ref().map(|member| (*name, member)));
        serializer.collect_map(members)
    }
}

impl Serialize for Member<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Member::Text(text) => serializer.serialize_str(text),
            Member::Line(line) => line.serialize(serializer),
            Member::Method(method) => method.serialize(serializer),
            Member::IdempotencyKey(key) => key.serialize(serializer),
            Member::Input(input) => {
                let members = input.members();
                match input {
                    Input::Whole { kind, .. } => {
                        serializer.collect_map(kind.whole_input_order().iter().map(|&member| members[member]))
                    }
                    Input::Fields(_) => {
                        let mut sorted = members;
                        sorted.sort_by_key(|(name, _)| *name);
                        serializer.collect_map(sorted)
                    }
                }
            }
            Member::FieldChanges(change) => FieldChanges(change).serialize(serializer),
        }
    }
}

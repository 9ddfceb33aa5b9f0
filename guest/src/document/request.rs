//! A plan or apply request as the planner reads it: the typed FleetConfig (its sections
//! and `moved`), `prune`, the plan hash an apply names and its overrides, and the
//! problems found while reading one.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Problem;
use crate::error::{Error, ErrorCode};
use crate::kinds::Catalog;
use crate::value::Value;

/// A validated FleetConfig: per kind (by its position in the catalogue), objects by key
/// with every field filled in (defaults for omitted ones), in descriptor order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Document {
    pub(crate) sections: Vec<Section>,
    /// Renames (SPEC §15), sorted by kind and `from`.
    pub(crate) moved: Vec<Move>,
}

/// A document's objects of one kind: key -> every field's value, in descriptor order.
/// Keys and values are shared, not copied, by the plan that repeats them.
pub(crate) type Section = BTreeMap<Arc<str>, Arc<[Value]>>;

/// `{"kind", "from", "to"}`: the object bound to the name `from` is now named `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Move {
    pub(crate) from: String,
    #[serde(rename = "kind")]
    pub(crate) kind_name: &'static str,
    pub(crate) to: String,
    /// The kind's position in the catalogue.
    #[serde(skip)]
    pub(crate) kind: usize,
}

/// The document member that carries renames; no section may be called this.
pub const MOVED: &str = "moved";

impl Document {
    pub(crate) fn new(catalog: &Catalog) -> Document {
        Document { sections: vec![BTreeMap::new(); catalog.len()], moved: Vec::new() }
    }

    pub(crate) fn section(&self, kind: usize) -> &Section {
        &self.sections[kind]
    }
}

/// A plan or apply request (SPEC §6.2, §6.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlanRequest {
    pub(crate) document: Document,
    pub(crate) prune: bool,
    pub(crate) plan_hash: Option<String>,
    /// Apply only: the mandatory policies whose denials the caller overrides (SPEC §14).
    pub(crate) overrides: Vec<Override>,
    /// Plan only: the proposal whose approval the plan reports (SPEC §17).
    pub(crate) proposal: Option<Box<Proposal>>,
    /// The git source the document comes from, as the host vouches for it: the
    /// policies' `input.source` (SPEC §20.3).
    pub(crate) source: Option<Box<Source>>,
}

/// `input.source` (SPEC §20.3): the git source a cycle plans from. The host gives it
/// only for a source's own cycle and plans, never as a client sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Source {
    pub(crate) url: String,
    pub(crate) branch: String,
    /// None when the document planned is not a commit's yet (a pull request's plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) commit: Option<String>,
    pub(crate) path: String,
    /// The fingerprint of the allowed signer whose signature the commit carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) signer: Option<String>,
}

/// What a plan request's `source` must be.
pub(crate) const SOURCE_FORM: &str = "must be {\"url\", \"branch\", \"commit\"?, \"path\", \"signer\"?}, all strings";

/// A proposal as the host keeps it, for the approval rules' `input.proposal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Proposal {
    #[serde(deserialize_with = "count")]
    pub(crate) number: u64,
    pub(crate) author: String,
    #[serde(default)]
    pub(crate) title: String,
    #[serde(default)]
    pub(crate) reviews: Vec<Review>,
}

/// A count as JSON may write it (`3`, `3.0`), as every count of a request is read.
fn count<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let number = serde_json::Number::deserialize(deserializer)?;
    crate::json::count_of_number(&number).ok_or_else(|| serde::de::Error::custom("not a count"))
}

/// What a plan request's `proposal` must be.
pub(crate) const PROPOSAL_FORM: &str = "must be {\"number\" (1 or more), \"author\", \"title\"?, \"reviews\"?: [{\"principal\", \"verdict\": \"approve\" | \"reject\", \"comment\"?, \"at\"?}]}";

/// A principal's review of a proposal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Review {
    pub(crate) principal: String,
    pub(crate) verdict: ReviewVerdict,
    #[serde(default)]
    pub(crate) comment: String,
    #[serde(default)]
    pub(crate) at: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ReviewVerdict {
    Approve,
    Reject,
}

/// An override of a mandatory policy's denials, with the reason the audit trail keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Override {
    pub(crate) policy: String,
    pub(crate) reason: String,
}

/// Every problem found in a request, reported together as one `INVALID_ARGUMENT`.
#[derive(Debug, Default)]
pub(crate) struct Problems(Vec<Problem>);

impl From<Vec<Problem>> for Problems {
    fn from(problems: Vec<Problem>) -> Problems {
        Problems(problems)
    }
}

impl Problems {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn push(&mut self, path: String, message: impl Into<String>) {
        self.0.push(Problem { path, message: message.into() });
    }

    /// `Ok` when there is no problem; otherwise the error listing the first
    /// [`crate::error::MAX_PROBLEMS`] by path (so that the list never depends on how a
    /// JSON object was stored) and counting the rest.
    pub(crate) fn into_result(mut self) -> Result<(), Error> {
        if self.0.is_empty() {
            return Ok(());
        }
        self.0.sort_by(|left, right| left.path.cmp(&right.path));
        let count = self.0.len();
        let message = if count == 1 {
            "the request has 1 problem".to_owned()
        } else {
            format!("the request has {count} problems")
        };
        let listed = crate::error::Problems::from(self.0);
        Err(Error::new(ErrorCode::InvalidArgument, message).with_details(listed.details()))
    }
}

/// What a malformed `planHash` is told.
pub const PLAN_HASH_FORM: &str = "must be \"sha256:\" and 64 lowercase hex digits, as a plan gives it";

/// Whether `text` has the form of a plan's `planHash`: `sha256:` and 64 lowercase hex digits.
pub fn is_plan_hash(text: &str) -> bool {
    text.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f')))
}

impl PlanRequest {
    pub(crate) fn new(catalog: &Catalog) -> PlanRequest {
        PlanRequest {
            document: Document::new(catalog),
            prune: false,
            plan_hash: None,
            overrides: Vec::new(),
            proposal: None,
            source: None,
        }
    }
}

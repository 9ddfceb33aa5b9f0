//! A rename of the document (SPEC §15): a change without a call.

use super::output::{Action, Blocked, Change, Plan, Written};
use super::planner::Planner;
use crate::document::Move;
use crate::estate::Renamed;
use crate::text;

impl Planner<'_> {
    /// A rename of the document (SPEC §15): a change without a call, blocked when
    /// nothing has the old name or another object has the new one; none once done.
    pub(super) fn plan_rename(&self, plan: &mut Plan, moved: &Move, renamed: &Renamed) {
        let descriptor = self.estate.kind(moved.kind);
        let (from, to) = (moved.from.as_str(), moved.to.as_str());
        let reason = match renamed {
            Renamed::Done => return,
            _ if !self.estate.runs(moved.kind) => {
                Some(format!("the {} module is not run by this deployment", descriptor.group))
            }
            Renamed::Now(_) => None,
            Renamed::Taken(_) => Some(format!("{to} already names another {}", descriptor.kind)),
            Renamed::Nothing => Some(format!("nothing is named {from}")),
            Renamed::Reused(_) => Some(format!(
                "{from} is moved to {to} by this document, so a new {} {from} waits for a later apply",
                descriptor.kind
            )),
        };
        let id = match renamed {
            Renamed::Now(id) | Renamed::Taken(id) | Renamed::Reused(id) => Some(id.as_str().into()),
            Renamed::Done | Renamed::Nothing => None,
        };
        let text = match &reason {
            None => text::rename(descriptor, from, to),
            Some(reason) => text::blocked(descriptor, to, [reason.as_str()].into_iter()),
        };
        let (kind, key) = (descriptor.kind, to.to_owned());
        let written = Written { from: Some(from.to_owned()), fields: Vec::new(), text };
        plan.changes.push(Change::written(Action::Rename, kind, key.as_str().into(), id, written));
        match reason {
            None => *plan.summary.rename.get_or_insert(0) += 1,
            Some(reason) => plan.blocked.push(Blocked { kind, key, field: None, reason }),
        }
    }
}

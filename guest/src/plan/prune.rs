//! Pruning: the live objects the document leaves out, removed when `prune` is on and
//! listed as left alone otherwise.

use std::sync::Arc;

use rustc_hash::FxHashSet as HashSet;

use super::output::{Action, Blocked, Change, LeftAlone, Plan};
use super::planner::{Planner, removal_call};
use crate::kinds::Removal;
use crate::state::Object;
use crate::text;

impl Planner<'_> {
    /// The live objects the document leaves out (never those of kinds that are never
    /// removed or whose module does not run): removed when `prune` is on, listed as
    /// left alone otherwise, with what `prune` would do; in reverse kind order, by key
    /// within a kind. An object that is deleted rather than archived stays either way
    /// while an object that stays live after the plan references it.
    pub(super) fn prune(&self, plan: &mut Plan, prune: bool) {
        let estate = self.estate;
        let catalog = &estate.catalog;
        // Per kind, the ids that objects live after the plan reference.
        let mut used: Vec<HashSet<String>> = vec![HashSet::default(); catalog.len()];
        for (kind, descriptor) in catalog.iter() {
            for entry in &self.entries[kind] {
                for index in 0..descriptor.fields.len() {
                    let Some(target) = catalog.target(kind, index) else { continue };
                    let current = entry.current().map(|current| current.values[index].as_text());
                    if let Some(id) = self.resolve(target, entry.values[index].as_text(), current) {
                        used[target].insert(id.to_owned());
                    }
                }
            }
        }
        // Referrers come after what they reference, so walking back decides every
        // referrer before its references.
        for (kind, descriptor) in catalog.iter().rev() {
            let removable = estate.runs(kind) && descriptor.removal != Removal::Never;
            let in_document = &self.keys_by_id[kind];
            let mut removals: Vec<(&str, &Object)> = Vec::new();
            for object in estate.objects(kind).iter().filter(|object| !object.archived) {
                if in_document.contains_key(object.key.as_str()) {
                    continue;
                }
                let kept = !removable || (descriptor.removal == Removal::Delete && used[kind].contains(&object.key));
                if !kept {
                    removals.push((estate.key_of(kind, &object.key), object));
                    continue;
                }
                for (index, value) in object.values.iter().enumerate() {
                    if let Some(target) = catalog.target(kind, index) {
                        used[target].insert(value.as_text().to_owned());
                    }
                }
            }
            removals.sort_unstable_by(|left, right| left.0.cmp(right.0));
            let action = if descriptor.removal == Removal::Archive { Action::Archive } else { Action::Delete };
            for (key, object) in removals {
                let id = descriptor.id_prefix().map(|_| object.key.clone());
                if !prune {
                    plan.left_alone.push(LeftAlone { kind: descriptor.kind, key: key.to_owned(), id, action });
                    continue;
                }
                let id = id.map(Arc::from);
                if let Some(missing) = self.not_permitted[kind].clone() {
                    let text = text::blocked(descriptor, key, [missing.as_str()].into_iter());
                    plan.changes.push(Change::whole(action, descriptor, key.into(), id, text));
                    let blocked = Blocked { kind: descriptor.kind, key: key.to_owned(), field: None, reason: missing };
                    plan.blocked.push(blocked);
                    continue;
                }
                match action {
                    Action::Archive => plan.summary.archive += 1,
                    _ => plan.summary.delete += 1,
                }
                let text = text::removal(descriptor, key, action.verb());
                plan.changes.push(Change::whole(action, descriptor, key.into(), id, text));
                plan.calls.push(removal_call(descriptor, action.verb(), &object.key));
            }
        }
    }
}

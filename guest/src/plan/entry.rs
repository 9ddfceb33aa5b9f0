//! One object of the document planned, step by step: its references resolved, the
//! fields it changes, the reasons its change is blocked, and then its change and calls:
//! a blocked change, a create, or an update and restore.

use super::output::{Action, Blocked, Call, Change, Detail, FieldChange, Input, Plan, Written};
use super::planner::{Entry, Planner, Reason, Target, removal_call};
use crate::grammar::quoted;
use crate::hash::IdempotencyKey;
use crate::kinds::{FieldType, Rule};
use crate::state::Object;
use crate::text;
use crate::value::Value;

/// The fields of an existing object that the document changes.
#[derive(Default)]
struct Changed {
    /// In alphabetical order of their fields, with `from` as export would show it.
    changes: Vec<FieldChange>,
    /// Their positions in the kind's fields.
    positions: Vec<usize>,
}

impl<'a> Planner<'a> {
    /// Plans the object at `position` of `kind`'s entries: its change and calls, or its
    /// change blocked and why.
    pub(super) fn plan_entry(&self, plan: &mut Plan, kind: usize, position: usize) {
        let entry = &self.entries[kind][position];
        let mut reasons: Vec<Reason> = Vec::new();
        let resolved = self.resolve_references(kind, entry, &mut reasons);
        let changed = match entry.current() {
            Some(current) => self.field_changes(kind, entry, current, &resolved, &mut reasons),
            None => Changed::default(),
        };
        self.blocking_reasons(kind, position, entry, &resolved, &changed, &mut reasons);
        if !reasons.is_empty() {
            return self.plan_blocked(plan, kind, entry, changed, reasons);
        }
        match entry.current() {
            None => self.plan_create(plan, kind, entry, &resolved),
            Some(current) => self.plan_update(plan, kind, entry, current, &resolved, changed),
        }
    }

    /// The object's references resolved to ids; `None` for other fields and unknown
    /// references, each of which is a reason.
    fn resolve_references<'s>(
        &'s self,
        kind: usize,
        entry: &'s Entry<'a>,
        reasons: &mut Vec<Reason>,
    ) -> Vec<Option<&'s str>> {
        let estate = self.estate;
        let fields = estate.kind(kind).fields;
        let current = entry.current();
        let mut resolved: Vec<Option<&str>> = vec![None; fields.len()];
        for (index, field) in fields.iter().enumerate() {
            if let Some(target) = estate.catalog.target(kind, index) {
                let text = entry.values[index].as_text();
                resolved[index] = self.resolve(target, text, current.map(|current| current.values[index].as_text()));
                if resolved[index].is_none() {
                    reasons.push((
                        Some(field.name),
                        format!(
                            "{} {} is neither in the document nor a live {}",
                            field.name,
                            quoted(text),
                            estate.kind(target).kind
                        ),
                    ));
                }
            }
        }
        resolved
    }

    /// The changed fields of an existing object, in alphabetical order, with `from` as
    /// export would show it; a change fleet may not make is a reason. (A create changes
    /// every field.)
    fn field_changes(
        &self,
        kind: usize,
        entry: &Entry<'a>,
        current: &Object,
        resolved: &[Option<&str>],
        reasons: &mut Vec<Reason>,
    ) -> Changed {
        let estate = self.estate;
        let descriptor = estate.kind(kind);
        let (fields, values) = (descriptor.fields, entry.values);
        let mut changed = Changed::default();
        for &index in descriptor.alphabetical() {
            let field = &fields[index];
            let target = estate.catalog.target(kind, index);
            let differs = match target {
                Some(_) => resolved[index] != Some(current.values[index].as_text()),
                None => values[index] != current.values[index],
            };
            if !differs {
                continue;
            }
            let from = match target {
                Some(target) => Value::Text(estate.key_of(target, current.values[index].as_text()).into()),
                None => current.values[index].clone(),
            };
            let (was, to) = (from.display(), values[index].display());
            if !descriptor.fleet_updates {
                let reason =
                    format!("{} are never changed by fleet ({} {was} -> {to})", descriptor.section, field.name);
                reasons.push((Some(field.name), reason));
            } else if field.immutable {
                reasons.push((Some(field.name), format!("{} is immutable ({was} -> {to})", field.name)));
            }
            changed.positions.push(index);
            changed.changes.push(FieldChange { field: field.name, from: Some(from), to: values[index].clone() });
        }
        changed
    }

    /// Every other reason the object's change is blocked: an id of nothing, the kind's
    /// rules, its plugin's findings, calls the caller may not make, a module that does
    /// not run. Sorted: key problems first, then by field name like `fields`; stable
    /// within a field.
    fn blocking_reasons(
        &self,
        kind: usize,
        position: usize,
        entry: &Entry<'a>,
        resolved: &[Option<&str>],
        changed: &Changed,
        reasons: &mut Vec<Reason>,
    ) {
        let estate = self.estate;
        let descriptor = estate.kind(kind);
        if matches!(entry.target, Target::UnknownId) {
            reasons.push((None, format!("no {} with id {}", descriptor.kind, entry.key)));
        }
        for rule in descriptor.rules {
            self.check_rule(kind, *rule, entry.values, resolved, reasons);
        }
        if let Some(refused) = self.refused[kind].get(&position) {
            reasons.extend(refused.iter().cloned());
        }
        let makes_calls = entry.current().is_none_or(|current| current.archived || !changed.positions.is_empty());
        if makes_calls && let Some(missing) = &self.not_permitted[kind] {
            reasons.push((None, missing.clone()));
        }
        if !estate.runs(kind) {
            *reasons = vec![(None, format!("the {} module is not run by this deployment", descriptor.group))];
        }
        reasons.sort_by_key(|(field, _)| *field);
    }

    /// A rule of the kind over the object and those it references; the referenced
    /// object is the document's if it is there, else the state's.
    fn check_rule(
        &self,
        kind: usize,
        rule: Rule,
        values: &[Value],
        resolved: &[Option<&str>],
        reasons: &mut Vec<Reason>,
    ) {
        let descriptor = self.estate.kind(kind);
        match rule {
            Rule::Differs { field, via, other } => {
                let (Some(field_at), Some(via_at)) = (descriptor.position(field), descriptor.position(via)) else {
                    return;
                };
                let Some(target) = self.estate.catalog.target(kind, via_at) else { return };
                let (Some(other_at), Some(referenced)) = (self.estate.kind(target).position(other), resolved[via_at])
                else {
                    return;
                };
                let theirs = match self.keys_by_id[target].get(referenced) {
                    Some(key) => self.entries[target]
                        .binary_search_by(|entry| (**entry.key).cmp(key))
                        .ok()
                        .map(|found| &self.entries[target][found].values[other_at]),
                    None => self.estate.get(target, referenced).map(|object| &object.values[other_at]),
                };
                let ours = &values[field_at];
                if theirs == Some(ours) {
                    let target = self.estate.kind(target).kind;
                    let reason =
                        format!("{field} is the {other} of {target} {} ({})", values[via_at].as_text(), ours.display());
                    reasons.push((Some(field), reason));
                }
            }
        }
    }

    /// The blocked change: what it would do (a create changes every field), its text
    /// line naming the reasons, and each reason as a blocked entry.
    fn plan_blocked(&self, plan: &mut Plan, kind: usize, entry: &Entry<'a>, changed: Changed, reasons: Vec<Reason>) {
        let descriptor = self.estate.kind(kind);
        let (key, values, current) = (entry.key, entry.values, entry.current());
        let action = match current {
            None => Action::Create,
            Some(current) if current.archived && changed.positions.is_empty() => Action::Restore,
            Some(_) => Action::Update,
        };
        let changes = match current {
            None => descriptor
                .alphabetical()
                .iter()
                .map(|&index| FieldChange {
                    field: descriptor.fields[index].name,
                    from: None,
                    to: values[index].clone(),
                })
                .collect(),
            Some(_) => changed.changes,
        };
        let text = text::blocked(descriptor, key, reasons.iter().map(|(_, reason)| reason.as_str()));
        let kind = descriptor.kind;
        let written = Written { from: None, fields: changes, text };
        plan.changes.push(Change::written(action, kind, key.clone(), entry.shared_id(), written));
        plan.blocked.extend(reasons.into_iter().map(|(field, reason)| Blocked {
            kind,
            key: key.to_string(),
            field,
            reason,
        }));
    }

    /// A new object: its change, held as the document's values, and its create (or
    /// set) call, references as the ids they resolve to.
    fn plan_create(&self, plan: &mut Plan, kind: usize, entry: &Entry<'a>, resolved: &[Option<&str>]) {
        let descriptor = self.estate.kind(kind);
        let (key, values, fields) = (entry.key, entry.values, descriptor.fields);
        let id = entry.shared_id();
        let identity = Value::Text(id.clone().unwrap_or_else(|| key.clone()));
        let references = (0..fields.len())
            .filter(|&index| matches!(fields[index].ty, FieldType::Ref(_)))
            .map(|index| self.resolved_value(kind, values, resolved, index))
            .collect();
        let input = Input::Whole { kind: descriptor, identity, values: values.clone(), references };
        plan.summary.create += 1;
        let detail = Detail::Created(descriptor, values.clone());
        plan.changes.push(Change { action: Action::Create, kind: descriptor.kind, key: key.clone(), id, detail });
        let idempotency_key = descriptor.id_prefix().map(|_| IdempotencyKey {
            tenant: self.tenant.clone(),
            kind: descriptor.kind,
            key: key.clone(),
        });
        let verb = if descriptor.upserted() { "set" } else { "create" };
        plan.calls.push(Call { method: descriptor.method(verb), input, idempotency_key });
    }

    /// An existing object: restored first when it is archived, then updated when the
    /// document changes fields; unchanged otherwise.
    fn plan_update(
        &self,
        plan: &mut Plan,
        kind: usize,
        entry: &Entry<'a>,
        current: &Object,
        resolved: &[Option<&str>],
        changed: Changed,
    ) {
        let descriptor = self.estate.kind(kind);
        let (key, values, fields) = (entry.key, entry.values, descriptor.fields);
        let id = entry.shared_id();
        let identity = Value::Text(id.clone().unwrap_or_else(|| key.clone()));
        let Changed { changes, positions: mut changed } = changed;
        // The update's input, while the resolved references are at hand: an upsert
        // states the whole object, an update what changed.
        let update = (!changed.is_empty()).then(|| {
            let mut input = vec![(descriptor.identity_name(), identity)];
            if descriptor.upserted() {
                input.extend(
                    fields
                        .iter()
                        .enumerate()
                        .map(|(index, field)| (field.name, self.resolved_value(kind, values, resolved, index))),
                );
            } else {
                changed.sort_unstable();
                input.extend(
                    changed
                        .iter()
                        .map(|&index| (fields[index].name, self.resolved_value(kind, values, resolved, index))),
                );
            }
            Input::Fields(input)
        });
        if current.archived {
            plan.summary.restore += 1;
            let text = text::restore(descriptor, key);
            plan.changes.push(Change::whole(Action::Restore, descriptor, key.clone(), id.clone(), text));
            plan.calls.push(removal_call(descriptor, "restore", &current.key));
        }
        let Some(input) = update else {
            if !current.archived {
                plan.summary.unchanged += 1;
            }
            return;
        };
        plan.summary.update += 1;
        let text = text::update(
            descriptor,
            key,
            changes.iter().map(|change| (change.field, change.from.as_ref().unwrap_or(&change.to), &change.to)),
        );
        let written = Written { from: None, fields: changes, text };
        plan.changes.push(Change::written(Action::Update, descriptor.kind, key.clone(), id, written));
        let verb = if descriptor.upserted() { "set" } else { "update" };
        plan.calls.push(Call { method: descriptor.method(verb), input, idempotency_key: None });
    }

    /// Field `index`'s value as a call writes it: a reference as the id it resolves to
    /// (shared, see [`Planner::shared`]), any other field as the document gives it.
    fn resolved_value(&self, kind: usize, values: &[Value], resolved: &[Option<&str>], index: usize) -> Value {
        match resolved[index] {
            Some(id) => Value::Text(self.shared(self.estate.catalog.target(kind, index), id)),
            None => values[index].clone(),
        }
    }
}

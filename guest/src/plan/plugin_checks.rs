//! The checks of plugin kinds at plan time (SPEC §10): every object the plan would
//! create or change, written as the plugin's check reads it with the objects it
//! references as they will be after the plan, checked in one batch per kind.

use rustc_hash::FxHashMap as HashMap;

use super::planner::{Entry, Planner, Target};
use crate::plugins::{Subject, object_json};
use crate::value::Value;
use crate::{Error, Host};

impl Planner<'_> {
    /// The values of a document object as they would be written, references as ids;
    /// `None` when a reference names nothing (the change is blocked for that).
    fn desired(&self, kind: usize, entry: &Entry) -> Option<Vec<Value>> {
        let current = entry.current();
        let mut values = entry.values.to_vec();
        for (index, value) in values.iter_mut().enumerate() {
            if let Some(target) = self.estate.catalog.target(kind, index) {
                let current = current.map(|current| current.values[index].as_text());
                *value = Value::Text(self.resolve(target, value.as_text(), current)?.into());
            }
        }
        Some(values)
    }

    /// The object with id `id` of `kind` as it will be after the plan, in the form a
    /// plugin's check reads: the document's if it is there, else the state's.
    fn object_after(&self, kind: usize, id: &str) -> Option<String> {
        let descriptor = self.estate.kind(kind);
        if let Some(key) = self.keys_by_id[kind].get(id) {
            let entries = &self.entries[kind];
            let entry = &entries[entries.binary_search_by(|entry| (**entry.key).cmp(key)).ok()?];
            let values = self.desired(kind, entry).unwrap_or_else(|| entry.values.to_vec());
            return Some(object_json(descriptor, id, |position| &values[position]));
        }
        let object = self.estate.get(kind, id)?;
        Some(object_json(descriptor, id, |position| &object.values[position]))
    }

    /// Runs the check of a plugin kind, in one batch, on every object the plan would
    /// create or change (SPEC §10), and keeps each problem it finds as a reason to
    /// block that object's change: a plan never promises what apply would refuse.
    /// Objects blocked for other reasons (an unknown reference or id, an immutable
    /// change) are not checked, as the API would not reach the check either.
    pub(super) fn check_plugin_kind(&mut self, kind: usize, host: &dyn Host) -> Result<(), Error> {
        let descriptor = self.estate.kind(kind);
        let mut subjects = Vec::new();
        let mut positions = Vec::new();
        // Per kind, the objects referenced so far, written: many objects reference the
        // same few, and each is written once per check.
        let mut referenced: Vec<HashMap<String, String>> = vec![HashMap::default(); self.estate.catalog.len()];
        for (position, entry) in self.entries[kind].iter().enumerate() {
            let (Some(id), false) = (entry.id(), matches!(entry.target, Target::UnknownId)) else { continue };
            let Some(values) = self.desired(kind, entry) else { continue };
            let current = entry.current();
            if let Some(current) = current {
                let immutable_changes = descriptor
                    .fields
                    .iter()
                    .zip(values.iter().zip(&current.values))
                    .any(|(field, (to, from))| field.immutable && to != from);
                if current.values == values || immutable_changes {
                    continue;
                }
            }
            let mut references = Vec::new();
            for (index, field) in descriptor.fields.iter().enumerate() {
                let Some(target) = self.estate.catalog.target(kind, index) else { continue };
                let id = values[index].as_text();
                let written = match referenced[target].get(id) {
                    Some(written) => written,
                    None => match self.object_after(target, id) {
                        Some(written) => referenced[target].entry(id.to_owned()).or_insert(written),
                        None => continue,
                    },
                };
                references.push((field.name.to_owned(), written.clone()));
            }
            subjects.push(Subject {
                object: object_json(descriptor, id, |position| &values[position]),
                previous: current.map(|current| object_json(descriptor, &current.key, |at| &current.values[at])),
                references,
            });
            positions.push(position);
        }
        if subjects.is_empty() {
            return Ok(());
        }
        for finding in host.check(descriptor.kind, subjects)? {
            let Some(&position) = positions.get(finding.subject as usize) else { continue };
            let name = finding.path.strip_prefix('/').map(|path| path.split('/').next().unwrap_or_default());
            let field = descriptor.fields.iter().find(|field| Some(field.name) == name).map(|field| field.name);
            self.refused[kind].entry(position).or_default().push((field, finding.message));
        }
        Ok(())
    }
}

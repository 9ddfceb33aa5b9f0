//! The checks of plugin kinds at plan time (SPEC §10): every object the plan would
//! create or change, written as the plugin's check reads it with the objects it
//! references as they will be after the plan, checked in one batch per kind.

use rustc_hash::FxHashMap as HashMap;

use super::planner::{Entry, Planner, Target};
use crate::error::Error;
use crate::host::Host;
use crate::plugins::{Subject, object_json};
use crate::value::Value;

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

#[cfg(test)]
mod tests {
    use serde_json::Value as Json;

    use crate::error::{Error, ErrorCode};
    use crate::host::Host;
    use crate::kinds::Catalog;
    use crate::plugins::tests::reservations;
    use crate::plugins::{Finding, Subject};
    use crate::state::{Caller, Snapshot};

    /// A host with the reservations kind whose check refuses more vcpus than the pool's,
    /// and remembers what it was asked.
    struct WithPlugin {
        snapshot: Snapshot,
        asked: std::cell::RefCell<Vec<Subject>>,
    }

    impl Host for WithPlugin {
        fn caller(&self) -> Caller {
            self.snapshot.caller.clone()
        }

        fn state(&self, _catalog: &Catalog) -> Result<Snapshot, Error> {
            Ok(self.snapshot.clone())
        }

        fn invoke(&mut self, method: &str, _input: &str) -> Result<String, Error> {
            Err(Error::new(ErrorCode::Unsupported, method))
        }

        fn plugin_kinds(&self) -> Result<String, Error> {
            Ok(serde_json::to_string(&[reservations()]).unwrap())
        }

        fn check(&self, kind: &str, subjects: Vec<Subject>) -> Result<Vec<Finding>, Error> {
            assert_eq!(kind, "reservation");
            self.asked.borrow_mut().extend(subjects.iter().cloned());
            let vcpus = |text: &str| serde_json::from_str::<Json>(text).unwrap()["vcpus"].as_u64().unwrap();
            Ok(subjects
                .iter()
                .enumerate()
                .filter(|(_, subject)| vcpus(&subject.object) > vcpus(&subject.references[0].1))
                .map(|(index, _)| Finding { subject: index as u32, path: "/vcpus".into(), message: "too many".into() })
                .collect())
        }
    }

    #[test]
    fn plugin_kinds_are_planned_after_what_they_reference_and_checked_as_they_will_be() {
        let mut snapshot = Snapshot::empty(Caller { tenant: "acme".into(), principal: "alice".into(), grants: None });
        snapshot.modules.push("reservation".into());
        let host = WithPlugin { snapshot, asked: Default::default() };
        let document = serde_json::json!({
            "sites": {"eu": {"region": "eu-1"}},
            "providerAccounts": {"aws": {"provider": "aws"}},
            "pools": {"gpu": {"site": "eu", "account": "aws", "class": "gpu", "owner": "ml", "vcpus": 4}},
            "reservations": {
                "fits": {"pool": "gpu", "owner": "ml", "vcpus": 4},
                "greedy": {"pool": "gpu", "owner": "ml", "vcpus": 8},
                "nowhere": {"pool": "no-such-pool", "owner": "ml"},
            },
        });
        let plan: Json =
            serde_json::from_str(&crate::plan(&host, &serde_json::json!({"document": document}).to_string()).unwrap())
                .unwrap();
        let methods: Vec<&str> =
            plan["calls"].as_array().unwrap().iter().map(|call| call["method"].as_str().unwrap()).collect();
        assert_eq!(
            methods,
            ["compute.sites.create", "compute.accounts.create", "compute.pools.create", "compute.reservations.create"]
        );
        assert_eq!(plan["calls"][3]["idempotencyKey"], "fleet:acme:reservation:fits");
        let blocked: Vec<(&str, &str)> = plan["blocked"]
            .as_array()
            .unwrap()
            .iter()
            .map(|blocked| (blocked["key"].as_str().unwrap(), blocked["reason"].as_str().unwrap()))
            .collect();
        assert_eq!(blocked[0], ("greedy", "too many"));
        assert_eq!(plan["blocked"][0]["field"], "vcpus");
        assert_eq!(blocked[1].0, "nowhere");
        // Asked about the two it would create, not the one blocked by its reference; the
        // pool as the plan will make it, with its planned id.
        let asked = host.asked.borrow();
        assert_eq!(asked.len(), 2);
        let pool_id = plan["calls"][2]["input"]["id"].as_str().unwrap();
        let pool: Json = serde_json::from_str(&asked[0].references[0].1).unwrap();
        assert_eq!((pool["id"].as_str(), pool["vcpus"].as_u64()), (Some(pool_id), Some(4)));
        let fits: Json = serde_json::from_str(&asked[0].object).unwrap();
        assert_eq!(fits["pool"], pool_id);
        assert_eq!(fits["id"], plan["calls"][3]["input"]["id"]);
        assert_eq!(asked[0].previous, None);
    }
}

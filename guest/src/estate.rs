//! The tenant's state indexed for planning: objects per kind (a kind is its position in
//! the catalogue) by id, name bindings both ways, and the modules this deployment runs.

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap as HashMap};
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;

use crate::kinds::{Catalog, Descriptor};
use crate::state::Object;
use crate::state::{Caller, Policy, Snapshot};

#[derive(Debug, Default)]
struct Table {
    runs: bool,
    /// Sorted by key.
    objects: Vec<Object>,
    /// The positions in `objects`, found by their keys' hashes: no key is copied.
    by_key: HashTable<usize>,
    name_to_id: HashMap<String, String>,
    id_to_name: HashMap<String, String>,
}

impl Table {
    /// Where in `objects` the object with this key is.
    fn position(&self, key: &str) -> Option<usize> {
        self.by_key.find(hash(key), |&position| self.objects[position].key == key).copied()
    }
}

/// The positions of `objects` (whose keys are unique) by their keys.
fn index(objects: &[Object]) -> HashTable<usize> {
    let mut by_key = HashTable::with_capacity(objects.len());
    for (position, object) in objects.iter().enumerate() {
        by_key.insert_unique(hash(&object.key), position, |&other| hash(&objects[other].key));
    }
    by_key
}

fn hash(key: &str) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// What a rename finds in the bindings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Renamed {
    /// `from` named the object with this id, and now `to` does.
    Now(String),
    /// `to` names an object and `from` no other: the move was applied before.
    Done,
    /// `from` names the object with this id, and `to` another object.
    Taken(String),
    /// Neither name names anything.
    Nothing,
    /// `from` names the object with this id, and the document names a new object
    /// `from` too: that waits for a later apply.
    Reused(String),
}

#[derive(Debug)]
pub(crate) struct Estate {
    pub(crate) caller: Caller,
    pub(crate) catalog: Catalog,
    tables: Vec<Table>,
    /// The policies in force (SPEC §14).
    pub(crate) policies: Vec<Policy>,
}

impl Estate {
    /// Indexes a snapshot, taking its values without copying them. Objects of kinds the
    /// catalogue does not know are ignored.
    pub(crate) fn new(catalog: Catalog, snapshot: Snapshot) -> Estate {
        let Snapshot { caller, modules, mut tables, bindings, policies } = snapshot;
        let mut indexed: Vec<Table> = Vec::with_capacity(catalog.len());
        for (_, kind) in catalog.iter() {
            let mut objects = tables.remove(kind.kind).unwrap_or_default();
            objects.sort_by(|left, right| left.key.cmp(&right.key));
            let by_key = index(&objects);
            let runs = modules.iter().any(|module| module == kind.kind);
            indexed.push(Table { runs, objects, by_key, ..Table::default() });
        }
        // A name binds the smallest existing id bound to it; an id is keyed by the
        // smallest name that binds it. Bindings of objects that no longer exist are
        // ignored, so their names are free for new objects. The planner cannot see the
        // objects of a module that does not run, so their bindings are taken as given.
        for binding in bindings {
            let Some(kind) = catalog.by_kind(&binding.kind) else { continue };
            let table = &mut indexed[kind];
            if table.runs && table.position(&binding.id).is_none() {
                continue;
            }
            match table.name_to_id.entry(binding.name) {
                Entry::Vacant(entry) => {
                    entry.insert(binding.id);
                }
                Entry::Occupied(mut entry) => {
                    if binding.id < *entry.get() {
                        entry.insert(binding.id);
                    }
                }
            }
        }
        for table in &mut indexed {
            let mut id_to_name: HashMap<String, String> = HashMap::default();
            id_to_name.reserve(table.name_to_id.len());
            for (name, id) in &table.name_to_id {
                match id_to_name.entry(id.clone()) {
                    Entry::Vacant(entry) => {
                        entry.insert(name.clone());
                    }
                    Entry::Occupied(mut entry) => {
                        if name < entry.get() {
                            entry.insert(name.clone());
                        }
                    }
                }
            }
            table.id_to_name = id_to_name;
        }
        Estate { caller, catalog, tables: indexed, policies }
    }

    pub(crate) fn kind(&self, kind: usize) -> &'static Descriptor {
        self.catalog.get(kind)
    }

    /// Whether this deployment runs the module of `kind`.
    pub(crate) fn runs(&self, kind: usize) -> bool {
        self.tables[kind].runs
    }

    /// The objects of a kind, sorted by key.
    pub(crate) fn objects(&self, kind: usize) -> &[Object] {
        &self.tables[kind].objects
    }

    /// The object of a kind with this key, archived or not.
    pub(crate) fn get(&self, kind: usize, key: &str) -> Option<&Object> {
        let table = &self.tables[kind];
        table.position(key).map(|position| &table.objects[position])
    }

    /// The id an existing object bound to `name` has.
    pub(crate) fn bound(&self, kind: usize, name: &str) -> Option<&str> {
        self.tables[kind].name_to_id.get(name).map(String::as_str)
    }

    /// Renames the object bound to `from` to `to` (SPEC §15), as the bindings will be
    /// once the plan is applied, and says what the move is. `listed`: the document
    /// also has an object keyed `from`, which is the old name used again.
    pub(crate) fn rename(&mut self, kind: usize, from: &str, to: &str, listed: bool) -> Renamed {
        let table = &mut self.tables[kind];
        match (table.name_to_id.get(from).cloned(), table.name_to_id.get(to)) {
            // The create of the new `from` would replay the moved object's create, whose
            // idempotency key moves only once the apply's calls have run.
            (Some(id), None) if listed => Renamed::Reused(id),
            (Some(id), None) => {
                table.name_to_id.remove(from);
                table.name_to_id.insert(to.to_owned(), id.clone());
                // The id's key is its smallest name, as when the bindings were read.
                let smallest = table.name_to_id.iter().filter(|(_, bound)| **bound == id).map(|(name, _)| name).min();
                match smallest {
                    Some(name) => table.id_to_name.insert(id.clone(), name.clone()),
                    None => table.id_to_name.remove(&id),
                };
                Renamed::Now(id)
            }
            (Some(id), Some(other)) if *other == id => Renamed::Done,
            // Made before, and the old name given to a new object since.
            (Some(_), Some(_)) if listed => Renamed::Done,
            (Some(id), Some(_)) => Renamed::Taken(id),
            (None, Some(_)) => Renamed::Done,
            (None, None) => Renamed::Nothing,
        }
    }

    /// The key export gives the object with this id: its bound name, else the id.
    pub(crate) fn key_of<'a>(&'a self, kind: usize, id: &'a str) -> &'a str {
        self.tables[kind].id_to_name.get(id).map_or(id, String::as_str)
    }
}

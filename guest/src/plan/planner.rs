//! The planner at work: the state it plans against, the document's objects by kind and
//! what each key names (an object of the state, a create and its planned id, or an id
//! of nothing), and references resolved through them to ids.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::output::{Call, Input};
use crate::document::{PlanRequest, Problems};
use crate::estate::Estate;
use crate::hash;
use crate::json::pointer;
use crate::kinds::Descriptor;
use crate::state::Object;
use crate::value::Value;

/// What a document key names.
pub(super) enum Target<'a> {
    /// An existing object (archived or not).
    Existing(&'a Object),
    /// An object to create, with its planned id (none for kinds identified by a field).
    Create(Option<Arc<str>>),
    /// An id key of no existing object.
    UnknownId,
}

/// One document object and what its key names.
pub(super) struct Entry<'a> {
    pub(super) key: &'a Arc<str>,
    pub(super) values: &'a Arc<[Value]>,
    pub(super) target: Target<'a>,
}

impl<'a> Entry<'a> {
    /// The id the object has or will have (the identity field's value for kinds
    /// identified by a field).
    pub(super) fn id(&self) -> Option<&str> {
        match &self.target {
            Target::Existing(current) => Some(&current.key),
            Target::Create(id) => id.as_deref(),
            Target::UnknownId => Some(self.key),
        }
    }

    /// [`Entry::id`], shared with the maps and calls that repeat it.
    pub(super) fn shared_id(&self) -> Option<Arc<str>> {
        match &self.target {
            Target::Existing(current) => Some(current.key.as_str().into()),
            Target::Create(id) => id.clone(),
            Target::UnknownId => Some(self.key.clone()),
        }
    }

    /// The object of the state the key names, if it names one.
    pub(super) fn current(&self) -> Option<&'a Object> {
        match &self.target {
            Target::Existing(current) => Some(*current),
            Target::Create(_) | Target::UnknownId => None,
        }
    }
}

/// A reason a change is blocked, with the field it is about (none: the whole object).
pub(super) type Reason = (Option<&'static str>, String);

/// The planner at work: the state, the document's entries by kind, and how document
/// keys and ids map to each other. A kind is its position in the estate's catalogue.
pub(super) struct Planner<'a> {
    pub(super) estate: &'a Estate,
    pub(super) entries: Vec<Vec<Entry<'a>>>,
    /// Per kind: document key -> id the object has or will have.
    ids_by_key: Vec<HashMap<&'a str, Arc<str>>>,
    /// Per kind: that id -> document key.
    pub(super) keys_by_id: Vec<HashMap<Arc<str>, &'a str>>,
    /// The caller's tenant, which every create's idempotency key names.
    pub(super) tenant: Arc<str>,
    /// Per kind: why the caller may not make its calls, if it may not.
    pub(super) not_permitted: Vec<Option<String>>,
    /// Per plugin kind: entry position -> the problems its plugin's check found.
    pub(super) refused: Vec<HashMap<usize, Vec<Reason>>>,
}

impl<'a> Planner<'a> {
    /// A planner of the document's objects against `estate`, none of their keys read yet.
    pub(super) fn new(estate: &'a Estate) -> Planner<'a> {
        let kinds = estate.catalog.len();
        Planner {
            estate,
            entries: (0..kinds).map(|_| Vec::new()).collect(),
            ids_by_key: vec![HashMap::default(); kinds],
            keys_by_id: vec![HashMap::default(); kinds],
            refused: vec![HashMap::default(); kinds],
            tenant: estate.caller.tenant.as_str().into(),
            not_permitted: estate.catalog.iter().map(|(_, kind)| Planner::not_permitted(estate, kind)).collect(),
        }
    }

    /// Finds what every document key names, and reports objects named by two keys.
    pub(super) fn resolve_keys(&mut self, request: &'a PlanRequest, problems: &mut Problems) {
        let estate = self.estate;
        for (kind, descriptor) in estate.catalog.iter() {
            // Room for every key at once: maps that grow as they fill are rebuilt each time.
            let section = request.document.section(kind);
            let mut keys_by_existing_id: HashMap<&str, &str> = HashMap::default();
            keys_by_existing_id.reserve(section.len());
            self.ids_by_key[kind].reserve(section.len());
            self.keys_by_id[kind].reserve(section.len());
            self.entries[kind].reserve_exact(section.len());
            for (key, values) in section {
                let target = if descriptor.upserted() {
                    estate.get(kind, key).map_or(Target::Create(None), Target::Existing)
                } else if estate.catalog.id_kind(key) == Some(kind) {
                    estate.get(kind, key).map_or(Target::UnknownId, Target::Existing)
                } else {
                    match estate.bound(kind, key) {
                        Some(id) => match estate.get(kind, id) {
                            Some(current) => Target::Existing(current),
                            // Only for modules that do not run: the object is out of sight.
                            None => Target::Create(Some(id.into())),
                        },
                        None => Target::Create(free_id(estate, kind, key).map(Arc::from)),
                    }
                };
                if let Target::Existing(current) = &target
                    && let Some(first) = keys_by_existing_id.insert(&current.key, key)
                {
                    problems.push(
                        pointer(&[descriptor.section, key]),
                        format!("names the same {} as the key {first:?}", descriptor.kind),
                    );
                }
                let entry = Entry { key, values, target };
                if let Some(id) = entry.shared_id() {
                    self.ids_by_key[kind].insert(key, id.clone());
                    self.keys_by_id[kind].insert(id, key);
                }
                self.entries[kind].push(entry);
            }
        }
    }

    /// The id a reference resolves to: an object of the document, else a live object
    /// of the state by bound name or id, else the current reference when unchanged.
    pub(super) fn resolve<'s>(&'s self, kind: usize, text: &'s str, current: Option<&'s str>) -> Option<&'s str> {
        if let Some(id) = self.ids_by_key[kind].get(text) {
            return Some(id);
        }
        if self.keys_by_id[kind].contains_key(text) {
            return Some(text);
        }
        let named = match self.estate.bound(kind, text) {
            Some(id) => Some(id),
            None => (self.estate.catalog.id_kind(text) == Some(kind)).then_some(text),
        };
        if let Some(id) = named {
            let live = self.estate.get(kind, id).is_some_and(|object| !object.archived);
            if live || current == Some(id) {
                return Some(id);
            }
        }
        (current == Some(text)).then_some(text)
    }

    /// `id`, an id of `kind`, as shared text: the planned id itself when it is one
    /// (every reference to a new object repeats it), else a copy.
    pub(super) fn shared(&self, kind: Option<usize>, id: &str) -> Arc<str> {
        match kind.and_then(|kind| self.keys_by_id[kind].get_key_value(id)) {
            Some((shared, _)) => shared.clone(),
            None => id.into(),
        }
    }

    /// Why the caller may not make the calls of a kind, when it may not (SPEC §14: the
    /// plan shows it rather than apply failing on the first refusal).
    fn not_permitted(estate: &Estate, descriptor: &Descriptor) -> Option<String> {
        let grants = estate.caller.grants.as_deref()?;
        let (permission, scope) = crate::grants::write_permission(descriptor.group);
        (!crate::grants::allows(grants, &permission, &scope)).then(|| format!("not permitted: {permission} @ {scope}"))
    }
}

/// The id a create of `key` gets (SPEC §6.2), derived again while it is taken (§15).
fn free_id(estate: &Estate, kind: usize, key: &str) -> Option<String> {
    let descriptor = estate.kind(kind);
    let id = hash::planned_id(&estate.caller, descriptor, key)?;
    if estate.get(kind, &id).is_none() {
        return Some(id);
    }
    (2..=u32::MAX)
        .filter_map(|n| hash::planned_id_again(&estate.caller, descriptor, key, Some(n)))
        .find(|id| estate.get(kind, id).is_none())
}

/// A call that takes only the object's identity: delete, archive, restore.
pub(super) fn removal_call(kind: &Descriptor, verb: &'static str, key: &str) -> Call {
    Call {
        method: kind.method(verb),
        input: Input::Fields(vec![(kind.identity_name(), Value::Text(key.into()))]),
        idempotency_key: None,
    }
}

//! The plan (SPEC §6.2): resolving a document's keys and references against the state,
//! diffing, blocking, pruning, ordering the changes and calls, and hashing the result.

use std::sync::Arc;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use serde::ser::SerializeMap as _;
use serde::{Serialize, Serializer};

use crate::document::{Move, PlanRequest, Problems, pointer};
use crate::estate::{Estate, Renamed};
use crate::hash::{self, IdempotencyKey};
use crate::kinds::{Descriptor, FieldType, Method, Removal, Rule};
use crate::plugins::{Subject, object_json};
use crate::policy::{CanonicalJudgement, Judgement};
use crate::state::{Object, Value};
use crate::text;
use crate::{Error, ErrorCode, Host};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Action {
    Create,
    Update,
    Delete,
    Archive,
    Restore,
    /// A name binding moved (SPEC §15): no call.
    Rename,
}

impl Action {
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Archive => "archive",
            Action::Restore => "restore",
            Action::Rename => "rename",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FieldChange {
    pub(crate) field: &'static str,
    pub(crate) from: Option<Value>,
    pub(crate) to: Value,
}

/// A change of the plan, written as `{"action", "kind", "key", "from"?, "id"?, "fields",
/// "text"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) action: Action,
    pub(crate) kind: &'static str,
    pub(crate) key: Arc<str>,
    pub(crate) id: Option<Arc<str>>,
    pub(crate) detail: Detail,
}

/// What a change says field by field and in its text line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Detail {
    /// A create that nothing blocks, held as the document's values of the kind: every
    /// field changes from null to its value, and the text line summarizes them. Both
    /// are written when the plan is, never held, since a large plan is mostly creates.
    Created(&'static Descriptor, Arc<[Value]>),
    Written(Box<Written>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written {
    /// A rename's old name; the change's `key` is its new one.
    pub(crate) from: Option<String>,
    /// In alphabetical order of their fields.
    pub(crate) fields: Vec<FieldChange>,
    pub(crate) text: String,
}

impl Change {
    fn written(action: Action, kind: &'static str, key: Arc<str>, id: Option<Arc<str>>, written: Written) -> Change {
        Change { action, kind, key, id, detail: Detail::Written(Box::new(written)) }
    }

    /// A change of the whole object, no field named: a removal or a restore.
    fn whole(action: Action, descriptor: &Descriptor, key: Arc<str>, id: Option<Arc<str>>, text: String) -> Change {
        Change::written(action, descriptor.kind, key, id, Written { from: None, fields: Vec::new(), text })
    }

    /// A rename's old name.
    pub(crate) fn from(&self) -> Option<&str> {
        match &self.detail {
            Detail::Written(written) => written.from.as_deref(),
            Detail::Created(..) => None,
        }
    }

    /// The changed fields, `(field, from, to)` in alphabetical order of fields.
    pub(crate) fn fields(&self) -> Vec<(&'static str, Option<&Value>, &Value)> {
        match &self.detail {
            Detail::Created(descriptor, values) => descriptor
                .alphabetical()
                .iter()
                .map(|&index| (descriptor.fields[index].name, None, &values[index]))
                .collect(),
            Detail::Written(written) => {
                written.fields.iter().map(|change| (change.field, change.from.as_ref(), &change.to)).collect()
            }
        }
    }

    /// The text line for people.
    pub(crate) fn text(&self) -> Line<'_> {
        match &self.detail {
            Detail::Created(kind, values) => Line::Create(text::Create { kind, key: &self.key, values }),
            Detail::Written(written) => Line::Written(&written.text),
        }
    }
}

/// A change's text line: a create's is written from its values where it goes.
pub(crate) enum Line<'a> {
    Create(text::Create<'a>),
    Written(&'a str),
}

impl std::fmt::Display for Line<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Line::Create(create) => create.fmt(formatter),
            Line::Written(text) => formatter.write_str(text),
        }
    }
}

impl Serialize for Line<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Line::Create(create) => serializer.collect_str(create),
            Line::Written(text) => serializer.serialize_str(text),
        }
    }
}

impl Serialize for Change {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("action", &self.action)?;
        map.serialize_entry("kind", self.kind)?;
        map.serialize_entry("key", &*self.key)?;
        if let Some(from) = self.from() {
            map.serialize_entry("from", from)?;
        }
        if let Some(id) = &self.id {
            map.serialize_entry("id", &**id)?;
        }
        map.serialize_entry("fields", &Member::FieldChanges(self))?;
        map.serialize_entry("text", &self.text())?;
        map.end()
    }
}

/// A call's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    /// Named values, written in the order given.
    Fields(Vec<(&'static str, Value)>),
    /// A new object's: its identity, then every field of its kind in descriptor order,
    /// the document's values shared, each reference (`references`, in field order) as
    /// the id it resolves to.
    Whole { kind: &'static Descriptor, identity: Value, values: Arc<[Value]>, references: Box<[Value]> },
}

impl Input {
    /// The input's members in the order they are written.
    pub(crate) fn members(&self) -> Vec<(&'static str, &Value)> {
        match self {
            Input::Fields(fields) => fields.iter().map(|(name, value)| (*name, value)).collect(),
            Input::Whole { kind, identity, values, references } => {
                let mut references = references.iter();
                let fields = kind.fields.iter().zip(values.iter()).map(|(field, value)| match field.ty {
                    FieldType::Ref(_) => (field.name, references.next().unwrap_or(value)),
                    _ => (field.name, value),
                });
                std::iter::once((kind.identity_name(), identity)).chain(fields).collect()
            }
        }
    }
}

impl Serialize for Input {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.members())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Call {
    pub(crate) method: Method,
    pub(crate) input: Input,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) idempotency_key: Option<IdempotencyKey>,
}

impl Call {
    /// The input `methods.invoke` receives: creates carry their idempotency key.
    pub(crate) fn invoke_input(&self) -> Result<String, Error> {
        let key = self.idempotency_key.as_ref().map(|key| Value::Text(key.to_string().into()));
        let mut members = self.input.members();
        members.extend(key.as_ref().map(|key| ("idempotencyKey", key)));
        crate::writer::to_string(&Ordered(members))
            .map_err(|error| Error::new(ErrorCode::Internal, format!("a call cannot be written: {error}")))
    }
}

/// Named values, written as a JSON object in the order given.
struct Ordered<'a>(Vec<(&'static str, &'a Value)>);

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().copied())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Blocked {
    pub(crate) kind: &'static str,
    pub(crate) key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) field: Option<&'static str>,
    pub(crate) reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Summary {
    pub(crate) create: usize,
    pub(crate) update: usize,
    pub(crate) delete: usize,
    pub(crate) archive: usize,
    pub(crate) restore: usize,
    pub(crate) unchanged: usize,
    pub(crate) blocked: usize,
    /// With renames in the document: those the plan makes (SPEC §15).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rename: Option<usize>,
    /// With policies in force: their denials that block the plan (SPEC §14).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) denied: Option<usize>,
    /// With policies in force: their warnings, advisory denials included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) warnings: Option<usize>,
}

/// A live object the document leaves out and a plan without `prune` leaves alone, with
/// what `prune` would do to it (SPEC §6.2 `leftAlone`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LeftAlone {
    pub(crate) kind: &'static str,
    pub(crate) key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    pub(crate) action: Action,
}

/// A plan, serialized in the field order of SPEC §6.2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Plan {
    pub(crate) changes: Vec<Change>,
    pub(crate) calls: Vec<Call>,
    pub(crate) summary: Summary,
    pub(crate) blocked: Vec<Blocked>,
    pub(crate) left_alone: Vec<LeftAlone>,
    /// The verdicts of the policies in force; none when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) policy: Option<Judgement>,
    pub(crate) plan_hash: String,
}

/// What the plan hash covers, every object's members in canonical (sorted) order so
/// that the hash streams without a JSON tree (`hash::plan_hash` checks the order).
/// The changes are in it because they carry the values a plan changes *from*.
#[derive(Serialize)]
struct Hashed<'a> {
    #[serde(serialize_with = "canonical_blocked")]
    blocked: &'a [Blocked],
    #[serde(serialize_with = "canonical_calls")]
    calls: &'a [Call],
    #[serde(serialize_with = "canonical_changes")]
    changes: &'a [Change],
    document: crate::document::FilledDocument<'a>,
    /// Only with policies in force, so that plans without them hash as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<CanonicalJudgement<'a>>,
    prune: bool,
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
    Value(Option<&'a Value>),
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
            Member::FieldChanges(change) => {
                serializer.collect_seq(change.fields().into_iter().map(|(field, from, to)| {
                    CanonicalMap([
                        ("field", Some(Member::Text(field))),
                        ("from", Some(Member::Value(from))),
                        ("to", Some(Member::Value(Some(to)))),
                    ])
                }))
            }
            Member::Value(value) => value.serialize(serializer),
        }
    }
}

/// What a document key names.
enum Target<'a> {
    /// An existing object (archived or not).
    Existing(&'a Object),
    /// An object to create, with its planned id (none for kinds identified by a field).
    Create(Option<Arc<str>>),
    /// An id key of no existing object.
    UnknownId,
}

/// One document object and what its key names.
struct Entry<'a> {
    key: &'a Arc<str>,
    values: &'a Arc<[Value]>,
    target: Target<'a>,
}

impl Entry<'_> {
    /// The id the object has or will have (the identity field's value for kinds
    /// identified by a field).
    fn id(&self) -> Option<&str> {
        match &self.target {
            Target::Existing(current) => Some(&current.key),
            Target::Create(id) => id.as_deref(),
            Target::UnknownId => Some(self.key),
        }
    }

    /// [`Entry::id`], shared with the maps and calls that repeat it.
    fn shared_id(&self) -> Option<Arc<str>> {
        match &self.target {
            Target::Existing(current) => Some(current.key.as_str().into()),
            Target::Create(id) => id.clone(),
            Target::UnknownId => Some(self.key.clone()),
        }
    }

    fn current(&self) -> Option<&Object> {
        match &self.target {
            Target::Existing(current) => Some(current),
            Target::Create(_) | Target::UnknownId => None,
        }
    }
}

/// A reason a change is blocked, with the field it is about (none: the whole object).
type Reason = (Option<&'static str>, String);

/// The planner at work: the state, the document's entries by kind, and how document
/// keys and ids map to each other. A kind is its position in the estate's catalogue.
struct Planner<'a> {
    estate: &'a Estate,
    entries: Vec<Vec<Entry<'a>>>,
    /// Per kind: document key -> id the object has or will have.
    ids_by_key: Vec<HashMap<&'a str, Arc<str>>>,
    /// Per kind: that id -> document key.
    keys_by_id: Vec<HashMap<Arc<str>, &'a str>>,
    /// The caller's tenant, which every create's idempotency key names.
    tenant: Arc<str>,
    /// Per kind: why the caller may not make its calls, if it may not.
    not_permitted: Vec<Option<String>>,
    /// Per plugin kind: entry position -> the problems its plugin's check found.
    refused: Vec<HashMap<usize, Vec<Reason>>>,
    plan: Plan,
}

/// Plans a validated request against the state. `problems` are those validation found
/// so far; key problems found here join them, and any problem fails the plan. The host
/// runs the checks of plugin kinds.
pub(crate) fn plan(
    estate: &mut Estate,
    request: &PlanRequest,
    mut problems: Problems,
    host: &dyn Host,
) -> Result<Plan, Error> {
    // The document's renames first: the rest is planned under the new names.
    let renames: Vec<Renamed> = request
        .document
        .moved
        .iter()
        .map(|moved| {
            let listed = request.document.section(moved.kind).contains_key(moved.from.as_str());
            estate.rename(moved.kind, &moved.from, &moved.to, listed)
        })
        .collect();
    let estate = &*estate;
    let kinds = estate.catalog.len();
    let mut planner = Planner {
        estate,
        entries: (0..kinds).map(|_| Vec::new()).collect(),
        ids_by_key: vec![HashMap::default(); kinds],
        keys_by_id: vec![HashMap::default(); kinds],
        refused: vec![HashMap::default(); kinds],
        tenant: estate.caller.tenant.as_str().into(),
        not_permitted: estate.catalog.iter().map(|(_, kind)| Planner::not_permitted(estate, kind)).collect(),
        plan: Plan {
            changes: Vec::new(),
            calls: Vec::new(),
            summary: Summary::default(),
            blocked: Vec::new(),
            left_alone: Vec::new(),
            policy: None,
            plan_hash: String::new(),
        },
    };
    planner.resolve_keys(request, &mut problems);
    problems.into_result()?;
    // Every create is a change and a call: room for those at once, so that a large plan
    // is not copied as it grows, nor left with a growth's slack.
    let creates = planner.entries.iter().flatten().filter(|entry| matches!(entry.target, Target::Create(_))).count();
    planner.plan.changes.reserve(creates);
    planner.plan.calls.reserve(creates);
    if !request.document.moved.is_empty() {
        planner.plan.summary.rename = Some(0);
    }
    for kind in 0..kinds {
        for (moved, renamed) in request.document.moved.iter().zip(&renames).filter(|(moved, _)| moved.kind == kind) {
            planner.plan_rename(moved, renamed);
        }
        if estate.kind(kind).plugin {
            planner.check_plugin_kind(kind, host)?;
        }
        for position in 0..planner.entries[kind].len() {
            planner.plan_entry(kind, position);
        }
    }
    planner.prune(request.prune);
    let mut plan = planner.plan;
    plan.summary.blocked = plan.blocked.len();
    plan.policy = crate::judge::judge(estate, request, &plan, host)?;
    if let Some(judgement) = &plan.policy {
        plan.summary.denied = Some(judgement.denied());
        plan.summary.warnings = Some(judgement.warnings());
    }
    plan.plan_hash = hash::plan_hash(&Hashed::of(estate, request, &plan), host.sha256())?;
    Ok(plan)
}

impl<'a> Hashed<'a> {
    fn of(estate: &Estate, request: &'a PlanRequest, plan: &'a Plan) -> Hashed<'a> {
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

impl<'a> Planner<'a> {
    /// Finds what every document key names, and reports objects named by two keys.
    fn resolve_keys(&mut self, request: &'a PlanRequest, problems: &mut Problems) {
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
    fn resolve<'s>(&'s self, kind: usize, text: &'s str, current: Option<&'s str>) -> Option<&'s str> {
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

    /// A rename of the document (SPEC §15): a change without a call, blocked when
    /// nothing has the old name or another object has the new one; none once done.
    fn plan_rename(&mut self, moved: &Move, renamed: &Renamed) {
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
        self.plan.changes.push(Change::written(Action::Rename, kind, key.as_str().into(), id, written));
        match reason {
            None => *self.plan.summary.rename.get_or_insert(0) += 1,
            Some(reason) => self.plan.blocked.push(Blocked { kind, key, field: None, reason }),
        }
    }

    fn plan_entry(&mut self, kind: usize, position: usize) {
        let estate = self.estate;
        let descriptor = estate.kind(kind);
        let entry = &self.entries[kind][position];
        let (key, values) = (entry.key, entry.values);
        let unknown_id = matches!(entry.target, Target::UnknownId);
        let fields = descriptor.fields;
        let current = entry.current();

        // References resolved to ids; `None` for other fields and unknown references.
        let mut resolved: Vec<Option<&str>> = vec![None; fields.len()];
        let mut reasons: Vec<Reason> = Vec::new();
        if unknown_id {
            reasons.push((None, format!("no {} with id {key}", descriptor.kind)));
        }
        for (index, field) in fields.iter().enumerate() {
            if let Some(target) = estate.catalog.target(kind, index) {
                let text = values[index].as_text();
                resolved[index] = self.resolve(target, text, current.map(|current| current.values[index].as_text()));
                if resolved[index].is_none() {
                    reasons.push((
                        Some(field.name),
                        format!(
                            "{} {} is neither in the document nor a live {}",
                            field.name,
                            crate::grammar::quoted(text),
                            estate.kind(target).kind
                        ),
                    ));
                }
            }
        }

        // Changed fields of an existing object, in alphabetical order, with `from` as
        // export would show it. (A create changes every field.)
        let mut changes: Vec<FieldChange> = Vec::new();
        let mut changed: Vec<usize> = Vec::new();
        if let Some(current) = current {
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
                changed.push(index);
                changes.push(FieldChange { field: field.name, from: Some(from), to: values[index].clone() });
            }
        }

        for rule in descriptor.rules {
            self.check_rule(kind, *rule, values, &resolved, &mut reasons);
        }
        if let Some(refused) = self.refused[kind].get(&position) {
            reasons.extend(refused.iter().cloned());
        }
        let makes_calls = current.is_none_or(|current| current.archived || !changed.is_empty());
        if makes_calls && let Some(missing) = &self.not_permitted[kind] {
            reasons.push((None, missing.clone()));
        }
        if !estate.runs(kind) {
            reasons = vec![(None, format!("the {} module is not run by this deployment", descriptor.group))];
        }
        // Key problems first, then by field name like `fields`; stable within a field.
        reasons.sort_by_key(|(field, _)| *field);

        if !reasons.is_empty() {
            let action = match current {
                None => Action::Create,
                Some(current) if current.archived && changed.is_empty() => Action::Restore,
                Some(_) => Action::Update,
            };
            if current.is_none() {
                changes = descriptor
                    .alphabetical()
                    .iter()
                    .map(|&index| FieldChange { field: fields[index].name, from: None, to: values[index].clone() })
                    .collect();
            }
            let text = text::blocked(descriptor, key, reasons.iter().map(|(_, reason)| reason.as_str()));
            let kind = descriptor.kind;
            let written = Written { from: None, fields: changes, text };
            self.plan.changes.push(Change::written(action, kind, key.clone(), entry.shared_id(), written));
            self.plan.blocked.extend(reasons.into_iter().map(|(field, reason)| Blocked {
                kind,
                key: key.to_string(),
                field,
                reason,
            }));
            return;
        }

        let resolved_value = |index: usize| match resolved[index] {
            Some(id) => Value::Text(self.shared(estate.catalog.target(kind, index), id)),
            None => values[index].clone(),
        };
        let id = entry.shared_id();
        let identity = Value::Text(id.clone().unwrap_or_else(|| key.clone()));
        let Some(current) = current else {
            let references = (0..fields.len())
                .filter(|&index| matches!(fields[index].ty, FieldType::Ref(_)))
                .map(resolved_value)
                .collect();
            let input = Input::Whole { kind: descriptor, identity, values: values.clone(), references };
            self.plan.summary.create += 1;
            let detail = Detail::Created(descriptor, values.clone());
            self.plan.changes.push(Change {
                action: Action::Create,
                kind: descriptor.kind,
                key: key.clone(),
                id,
                detail,
            });
            let idempotency_key = descriptor.id_prefix().map(|_| IdempotencyKey {
                tenant: self.tenant.clone(),
                kind: descriptor.kind,
                key: key.clone(),
            });
            let verb = if descriptor.upserted() { "set" } else { "create" };
            self.plan.calls.push(Call { method: descriptor.method(verb), input, idempotency_key });
            return;
        };

        // The update's input, while the resolved references are at hand: an upsert
        // states the whole object, an update what changed.
        let update = (!changed.is_empty()).then(|| {
            let mut input = vec![(descriptor.identity_name(), identity)];
            if descriptor.upserted() {
                input.extend(fields.iter().enumerate().map(|(index, field)| (field.name, resolved_value(index))));
            } else {
                changed.sort_unstable();
                input.extend(changed.iter().map(|&index| (fields[index].name, resolved_value(index))));
            }
            Input::Fields(input)
        });
        if current.archived {
            self.plan.summary.restore += 1;
            let text = text::restore(descriptor, key);
            self.plan.changes.push(Change::whole(Action::Restore, descriptor, key.clone(), id.clone(), text));
            self.plan.calls.push(removal_call(descriptor, "restore", &current.key));
        }
        let Some(input) = update else {
            if !current.archived {
                self.plan.summary.unchanged += 1;
            }
            return;
        };
        self.plan.summary.update += 1;
        let text = text::update(
            descriptor,
            key,
            changes.iter().map(|change| (change.field, change.from.as_ref().unwrap_or(&change.to), &change.to)),
        );
        let written = Written { from: None, fields: changes, text };
        self.plan.changes.push(Change::written(Action::Update, descriptor.kind, key.clone(), id, written));
        let verb = if descriptor.upserted() { "set" } else { "update" };
        self.plan.calls.push(Call { method: descriptor.method(verb), input, idempotency_key: None });
    }

    /// `id`, an id of `kind`, as shared text: the planned id itself when it is one
    /// (every reference to a new object repeats it), else a copy.
    fn shared(&self, kind: Option<usize>, id: &str) -> Arc<str> {
        match kind.and_then(|kind| self.keys_by_id[kind].get_key_value(id)) {
            Some((shared, _)) => shared.clone(),
            None => id.into(),
        }
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

    /// Why the caller may not make the calls of a kind, when it may not (SPEC §14: the
    /// plan shows it rather than apply failing on the first refusal).
    fn not_permitted(estate: &Estate, descriptor: &Descriptor) -> Option<String> {
        let grants = estate.caller.grants.as_deref()?;
        let (permission, scope) = crate::grants::write_permission(descriptor.group);
        (!crate::grants::allows(grants, &permission, &scope)).then(|| format!("not permitted: {permission} @ {scope}"))
    }

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
    fn check_plugin_kind(&mut self, kind: usize, host: &dyn Host) -> Result<(), Error> {
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

    /// The live objects the document leaves out (never those of kinds that are never
    /// removed or whose module does not run): removed when `prune` is on, listed as
    /// left alone otherwise, with what `prune` would do; in reverse kind order, by key
    /// within a kind. An object that is deleted rather than archived stays either way
    /// while an object that stays live after the plan references it.
    fn prune(&mut self, prune: bool) {
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
                    self.plan.left_alone.push(LeftAlone { kind: descriptor.kind, key: key.to_owned(), id, action });
                    continue;
                }
                let id = id.map(Arc::from);
                if let Some(missing) = self.not_permitted[kind].clone() {
                    let text = text::blocked(descriptor, key, [missing.as_str()].into_iter());
                    self.plan.changes.push(Change::whole(action, descriptor, key.into(), id, text));
                    let blocked = Blocked { kind: descriptor.kind, key: key.to_owned(), field: None, reason: missing };
                    self.plan.blocked.push(blocked);
                    continue;
                }
                match action {
                    Action::Archive => self.plan.summary.archive += 1,
                    _ => self.plan.summary.delete += 1,
                }
                let text = text::removal(descriptor, key, action.verb());
                self.plan.changes.push(Change::whole(action, descriptor, key.into(), id, text));
                self.plan.calls.push(removal_call(descriptor, action.verb(), &object.key));
            }
        }
    }
}

/// A call that takes only the object's identity: delete, archive, restore.
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

fn removal_call(kind: &Descriptor, verb: &'static str, key: &str) -> Call {
    Call {
        method: kind.method(verb),
        input: Input::Fields(vec![(kind.identity_name(), Value::Text(key.into()))]),
        idempotency_key: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::parse_plan;
    use crate::{Caller, Catalog, Snapshot};
    use serde_json::json;

    const SITE: &str = "site_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const ACCOUNT: &str = "acct_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const POOL: &str = "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn snapshot(modules: serde_json::Value, archived: bool) -> Snapshot {
        serde_json::from_value(json!({
            "caller": {"tenant": "acme", "principal": "alice"},
            "modules": modules,
            "sites": [{"id": SITE, "region": "r"}],
            "providerAccounts": [{"id": ACCOUNT, "provider": "aws"}],
            "pools": [{"id": POOL, "site": SITE, "account": ACCOUNT, "class": "cpu", "owner": "o", "archived": archived}],
            "flavors": [{"id": "flv_aaaaaaaaaaaaaaaaaaaaaaaaaa", "pool": POOL}],
            "bindings": [{"kind": "pool", "name": "old", "id": POOL}]
        }))
        .unwrap()
    }

    /// The hash covers what a plan changes *from*: the same calls against an estate that
    /// moved are another plan (SPEC §6.2).
    #[test]
    fn the_hash_covers_the_values_changed_from() {
        let planned = |vcpus: u64| {
            let mut state =
                snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), false);
            state.objects_mut("pool")[0].values[4] = Value::Count(vcpus);
            let document = json!({"pools": {"old": {"site": SITE, "account": ACCOUNT, "class": "cpu", "owner": "o",
                                                     "vcpus": 70}}});
            plan_of(state, document, false)
        };
        let (from_60, from_80) = (planned(60), planned(80));
        assert_eq!(from_60.calls, from_80.calls);
        assert_ne!(from_60.plan_hash, from_80.plan_hash);
    }

    /// Every golden case's plan is hashed on the streamed path, not through a JSON tree.
    #[test]
    fn plans_hash_without_a_json_tree() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plans");
        let mut planned = 0;
        for case in std::fs::read_dir(root).unwrap() {
            let case = case.unwrap().path();
            let read = |name: &str| std::fs::read_to_string(case.join(name)).unwrap();
            let snapshot: Snapshot = serde_json::from_str(&read("state.json")).unwrap();
            let Ok((request, problems)) = parse_plan(&Catalog::built_in(), &read("request.json"), false) else {
                continue;
            };
            let mut estate = Estate::new(Catalog::built_in(), snapshot);
            let Ok(plan) = plan(&mut estate, &request, problems, &Snapshot::empty(Caller::default())) else {
                continue;
            };
            let hashed = Hashed::of(&estate, &request, &plan);
            assert!(crate::writer::to_writer_if_canonical(std::io::sink(), &hashed).unwrap(), "{case:?}");
            planned += 1;
        }
        assert!(planned >= 15, "{planned} golden cases plan");
    }

    fn plan_of(snapshot: Snapshot, document: serde_json::Value, prune: bool) -> Plan {
        let (request, problems) =
            parse_plan(&Catalog::built_in(), &json!({"document": document, "prune": prune}).to_string(), false)
                .unwrap();
        let mut estate = Estate::new(Catalog::built_in(), snapshot.clone());
        plan(&mut estate, &request, problems, &snapshot).unwrap()
    }

    fn methods(plan: &Plan) -> Vec<String> {
        plan.calls.iter().map(|call| call.method.to_string()).collect()
    }

    #[test]
    fn creates_and_updates_go_by_kind_then_removals_in_reverse() {
        let document = json!({
            "flavors": {"b": {"pool": "new"}, "a": {"pool": "new"}},
            "pools": {"new": {"site": SITE, "account": "acct", "class": "gpu", "owner": "o"}},
            "providerAccounts": {"acct": {"provider": "aws"}}
        });
        let plan = plan_of(
            snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), false),
            document,
            true,
        );
        assert_eq!(
            methods(&plan),
            [
                "compute.accounts.create",
                "compute.pools.create",
                "compute.flavors.create",
                "compute.flavors.create",
                "compute.flavors.delete",
                "compute.pools.archive",
                "compute.accounts.delete",
            ]
        );
        let keys: Vec<&str> = plan.changes.iter().map(|change| &*change.key).collect();
        assert_eq!(keys, ["acct", "new", "a", "b", "flv_aaaaaaaaaaaaaaaaaaaaaaaaaa", "old", ACCOUNT]);
        assert_eq!(plan.summary, Summary { create: 4, delete: 2, archive: 1, ..Summary::default() });
    }

    #[test]
    fn prune_keeps_accounts_of_pools_that_stay_live() {
        // The pools module does not run: its pool stays live, so its account stays.
        let modules = json!(["site", "providerAccount", "ownerQuota", "offer", "flavor"]);
        let plan = plan_of(snapshot(modules, false), json!({}), true);
        assert_eq!(methods(&plan), ["compute.flavors.delete"]);
        // An archived pool does not keep its account.
        let plan = plan_of(
            snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), true),
            json!({}),
            true,
        );
        assert_eq!(methods(&plan), ["compute.flavors.delete", "compute.accounts.delete"]);
        // A pool of the document does.
        let document = json!({"pools": {"old": {"site": SITE, "account": ACCOUNT, "class": "cpu", "owner": "o"}}});
        let plan = plan_of(
            snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), false),
            document,
            true,
        );
        assert_eq!(methods(&plan), ["compute.flavors.delete"]);
    }

    #[test]
    fn restore_comes_before_update_and_archived_objects_are_not_pruned_again() {
        let document =
            json!({"pools": {"old": {"site": SITE, "account": ACCOUNT, "class": "cpu", "owner": "o", "gpus": 1}}});
        let plan = plan_of(
            snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), true),
            document,
            false,
        );
        assert_eq!(methods(&plan), ["compute.pools.restore", "compute.pools.update"]);
        assert_eq!(plan.changes[1].text().to_string(), "~ pool old: update (gpus 0 -> 1)");
        let plan = plan_of(
            snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), true),
            json!({"flavors": {}}),
            true,
        );
        assert!(!methods(&plan).contains(&"compute.pools.archive".to_owned()));
    }
}

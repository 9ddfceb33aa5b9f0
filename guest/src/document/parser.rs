//! The reader of a plan or apply request that reports every problem (SPEC §5): one
//! [`Parser`] value holds what every step needs (the catalogue, whether the request is
//! an apply's, the document's strings held once, the problems found so far), and each
//! step of the request is one of its methods. The fast reader (`streamed.rs`) reads
//! through the same value, so a field is checked one way, here.

use std::sync::Arc;

use rustc_hash::FxHashSet as HashSet;
use serde_json::{Map, Value as Json};

use super::request::{
    Document, MOVED, Move, Override, PLAN_HASH_FORM, PROPOSAL_FORM, PlanRequest, Problems, Proposal, SOURCE_FORM,
    Source, is_plan_hash,
};
use crate::grammar::{NAME_PATTERN, is_name};
use crate::json::{self, MAX_COUNT, pointer};
use crate::kinds::{Catalog, FieldType, RESERVED, with_article};
use crate::value::{StringMap, Value};

/// The longest reason an override may give.
const MAX_REASON: usize = 1000;

/// The strings of a document being read, each held once however often the document
/// repeats it: a large document names the same sites, accounts, classes and owners over
/// and over, and references repeat the keys they name.
#[derive(Default)]
pub(super) struct Strings(HashSet<Arc<str>>);

impl Strings {
    pub(super) fn get(&mut self, text: &str) -> Arc<str> {
        if let Some(known) = self.0.get(text) {
            return known.clone();
        }
        let text: Arc<str> = text.into();
        self.0.insert(text.clone());
        text
    }
}

/// A request being read: what every step of reading it needs, held once.
pub(super) struct Parser<'c> {
    pub(super) catalog: &'c Catalog,
    /// Whether the request is an apply's, which may name a `planHash`, `overrides` and
    /// `heal`.
    plan_hash_allowed: bool,
    pub(super) strings: Strings,
    pub(super) problems: Problems,
}

impl<'c> Parser<'c> {
    pub(super) fn new(catalog: &'c Catalog, plan_hash_allowed: bool) -> Parser<'c> {
        Parser { catalog, plan_hash_allowed, strings: Strings::default(), problems: Problems::default() }
    }

    /// A request's members, the document among them.
    pub(super) fn request(&mut self, map: &Map<String, Json>) -> PlanRequest {
        let mut parsed = PlanRequest::new(self.catalog);
        for (key, value) in map {
            match (key.as_str(), value) {
                ("document", Json::Object(document)) => parsed.document = self.document(document),
                ("document", _) => self.problems.push(pointer(&["document"]), "the document must be an object"),
                (key, value) => self.member(&mut parsed, key, value),
            }
        }
        if !map.contains_key("document") {
            self.problems.push(pointer(&["document"]), "the document is required");
        }
        parsed
    }

    /// A member of a plan or apply request other than its document.
    pub(super) fn member(&mut self, parsed: &mut PlanRequest, key: &str, value: &Json) {
        let problems = &mut self.problems;
        match key {
            "prune" => match value {
                Json::Bool(prune) => parsed.prune = *prune,
                _ => problems.push(pointer(&["prune"]), "must be a boolean"),
            },
            "planHash" if self.plan_hash_allowed => match value {
                Json::String(plan_hash) if is_plan_hash(plan_hash) => parsed.plan_hash = Some(plan_hash.clone()),
                _ => problems.push(pointer(&["planHash"]), PLAN_HASH_FORM),
            },
            "overrides" if self.plan_hash_allowed => parsed.overrides = self.overrides(value),
            "proposal" if !self.plan_hash_allowed => match serde_json::from_value::<Proposal>(value.clone()) {
                Ok(proposal) if proposal.number >= 1 => parsed.proposal = Some(Box::new(proposal)),
                _ => problems.push(pointer(&["proposal"]), PROPOSAL_FORM),
            },
            "source" => match serde_json::from_value::<Source>(value.clone()) {
                Ok(source) => parsed.source = Some(Box::new(source)),
                Err(_) => problems.push(pointer(&["source"]), SOURCE_FORM),
            },
            // Whether fleet.drift restores the revision this apply makes (SPEC §15): the
            // host's to keep; the plan is the same either way.
            "heal" if self.plan_hash_allowed => {
                if !matches!(value, Json::Bool(_)) {
                    problems.push(pointer(&["heal"]), "must be a boolean");
                }
            }
            // The revision whose document this apply puts back (`fleet rollback N`): the
            // host's to keep on the revision it makes; the plan is the same either way.
            "rollbackOf" if self.plan_hash_allowed => {
                if crate::json::count(value).is_none_or(|revision| revision == 0) {
                    problems.push(pointer(&["rollbackOf"]), "must be a revision's number, 1 or more");
                }
            }
            _ => problems.push(pointer(&[key]), "unknown field"),
        }
    }

    /// `[{"policy": name, "reason": text}]`, each policy named once.
    fn overrides(&mut self, value: &Json) -> Vec<Override> {
        let problems = &mut self.problems;
        let Json::Array(items) = value else {
            problems.push(pointer(&["overrides"]), "must be an array of {\"policy\", \"reason\"} objects");
            return Vec::new();
        };
        let mut overrides: Vec<Override> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let at = index.to_string();
            let Json::Object(members) = item else {
                problems.push(pointer(&["overrides", &at]), "must be an object {\"policy\", \"reason\"}");
                continue;
            };
            for name in members.keys().filter(|name| !matches!(name.as_str(), "policy" | "reason")) {
                problems.push(pointer(&["overrides", &at, name]), "unknown field");
            }
            let policy = match members.get("policy") {
                Some(Json::String(policy)) if is_name(policy) => Some(policy.clone()),
                _ => {
                    problems.push(
                        pointer(&["overrides", &at, "policy"]),
                        format!("must be a policy name matching {NAME_PATTERN}"),
                    );
                    None
                }
            };
            let reason = match members.get("reason") {
                Some(Json::String(reason)) if !reason.trim().is_empty() && reason.chars().count() <= MAX_REASON => {
                    Some(reason.clone())
                }
                _ => {
                    let message = format!("must say why, in 1 to {MAX_REASON} characters");
                    problems.push(pointer(&["overrides", &at, "reason"]), message);
                    None
                }
            };
            if let (Some(policy), Some(reason)) = (policy, reason) {
                if overrides.iter().any(|known| known.policy == policy) {
                    problems.push(pointer(&["overrides", &at, "policy"]), "names a policy another override names");
                    continue;
                }
                overrides.push(Override { policy, reason });
            }
        }
        overrides
    }

    fn document(&mut self, document: &Map<String, Json>) -> Document {
        let mut parsed = Document::new(self.catalog);
        for (section, objects) in document {
            if section == MOVED {
                parsed.moved = self.moves(objects);
                continue;
            }
            let Some(kind) = self.section_kind(section) else { continue };
            let Json::Object(objects) = objects else {
                self.problems.push(pointer(&[section]), "a section must be an object of objects by key");
                continue;
            };
            for (key, object) in objects {
                if let Some((key, values)) = self.entry(kind, key, object) {
                    parsed.sections[kind].insert(key, values);
                }
            }
        }
        parsed
    }

    /// The kind whose section is named `section`.
    pub(super) fn section_kind(&mut self, section: &str) -> Option<usize> {
        let kind = self.catalog.by_section(section);
        if kind.is_none() {
            let sections: Vec<&str> = self.catalog.iter().map(|(_, kind)| kind.section).collect();
            self.problems
                .push(pointer(&[section]), format!("unknown section; the sections are {}", sections.join(", ")));
        }
        kind
    }

    /// One object of a section: its key and fields checked; its key (held once) and
    /// values when both are valid.
    fn entry(&mut self, kind: usize, key: &str, object: &Json) -> Option<(Arc<str>, Arc<[Value]>)> {
        let key_is_valid = self.check_key(kind, key);
        let values = self.object(kind, key, object);
        match (key_is_valid, values) {
            (true, Some(values)) => Some((self.strings.get(key), values.into())),
            _ => None,
        }
    }

    /// `moved`: `[{"kind", "from", "to"}]` of kinds whose objects are named by bindings,
    /// each name a name of the grammar, `from` and `to` different; within a kind no name
    /// is moved twice, to twice, or both moved and moved to (so no entry depends on
    /// another).
    pub(super) fn moves(&mut self, value: &Json) -> Vec<Move> {
        let (catalog, problems) = (self.catalog, &mut self.problems);
        let Json::Array(items) = value else {
            problems.push(pointer(&[MOVED]), "must be an array of {\"kind\", \"from\", \"to\"} objects");
            return Vec::new();
        };
        let mut moves: Vec<Move> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let at = index.to_string();
            let path = |member: &str| pointer(&[MOVED, &at, member]);
            let Json::Object(members) = item else {
                problems.push(pointer(&[MOVED, &at]), "must be an object {\"kind\", \"from\", \"to\"}");
                continue;
            };
            for name in members.keys().filter(|name| !matches!(name.as_str(), "kind" | "from" | "to")) {
                problems.push(path(name), "unknown field");
            }
            let kind = match members.get("kind") {
                Some(Json::String(name)) => match catalog.by_kind(name) {
                    Some(kind) if catalog.get(kind).upserted() => {
                        let descriptor = catalog.get(kind);
                        let identity = descriptor.identity_name();
                        problems.push(
                            path("kind"),
                            format!(
                                "{} are keyed by their {identity}, not named, so they are not renamed",
                                descriptor.section
                            ),
                        );
                        None
                    }
                    Some(kind) => Some(kind),
                    None => {
                        let kinds: Vec<&str> = catalog.iter().map(|(_, descriptor)| descriptor.kind).collect();
                        problems.push(path("kind"), format!("unknown kind; the kinds are {}", kinds.join(", ")));
                        None
                    }
                },
                _ => {
                    problems.push(path("kind"), "must be a kind, such as pool");
                    None
                }
            };
            let mut name = |member: &str| match members.get(member) {
                Some(Json::String(name)) if is_name(name) => Some(name.clone()),
                _ => {
                    problems.push(path(member), format!("must be a name matching {NAME_PATTERN}"));
                    None
                }
            };
            let (from, to) = (name("from"), name("to"));
            let (Some(kind), Some(from), Some(to)) = (kind, from, to) else { continue };
            if from == to {
                problems.push(path("to"), "is the same name as from");
                continue;
            }
            let same_kind = || moves.iter().filter(|known| known.kind == kind);
            if same_kind().any(|known| known.from == from) {
                problems.push(path("from"), "another entry moves this name too");
            } else if same_kind().any(|known| known.to == to) {
                problems.push(path("to"), "another entry moves to this name too");
            } else if same_kind().any(|known| known.to == from || known.from == to) {
                problems.push(path("from"), "another entry moves to or from these names: rename in two applies");
            } else {
                moves.push(Move { from, kind_name: catalog.get(kind).kind, to, kind });
            }
        }
        moves.sort_by(|left, right| (left.kind, &left.from).cmp(&(right.kind, &right.from)));
        moves
    }

    /// Whether `key` may name an object of `kind`: a name, or an id of the kind where
    /// the kind has ids.
    pub(super) fn check_key(&mut self, kind: usize, key: &str) -> bool {
        let descriptor = self.catalog.get(kind);
        let path = || pointer(&[descriptor.section, key]);
        match descriptor.id_prefix() {
            None if is_name(key) => true,
            None => {
                let message = format!(
                    "{}'s key must be {} name matching {NAME_PATTERN}",
                    descriptor.a(),
                    with_article(descriptor.identity_name())
                );
                self.problems.push(path(), message);
                false
            }
            Some(_) if is_name(key) || self.catalog.id_kind(key) == Some(kind) => true,
            Some(prefix) => {
                self.problems.push(
                    path(),
                    format!(
                        "a key must be a name matching {NAME_PATTERN} or {} id ({prefix}_ and 26 base32 characters)",
                        descriptor.a()
                    ),
                );
                false
            }
        }
    }

    /// An object's values, every field in descriptor order (defaults for omitted ones),
    /// when every field is valid.
    fn object(&mut self, kind: usize, key: &str, object: &Json) -> Option<Vec<Value>> {
        let descriptor = self.catalog.get(kind);
        let Json::Object(object) = object else {
            self.problems.push(pointer(&[descriptor.section, key]), format!("{} must be an object", descriptor.a()));
            return None;
        };
        let fields = descriptor.fields;
        let mut values: Vec<Value> = fields.iter().map(|field| Value::default_of(field.ty)).collect();
        let mut valid = true;
        for (name, value) in object {
            let path = || pointer(&[descriptor.section, key, name]);
            let Some(position) = descriptor.position(name) else {
                if RESERVED.contains(&name.as_str()) {
                    self.problems.push(path(), "is set by the server and is never part of a FleetConfig");
                } else {
                    let names: Vec<&str> = fields.iter().map(|field| field.name).collect();
                    self.problems.push(path(), format!("unknown field; {} has {}", descriptor.a(), names.join(", ")));
                }
                valid = false;
                continue;
            };
            match self.value(kind, position, value, path) {
                Some(value) => values[position] = value,
                None => valid = false,
            }
        }
        for field in fields.iter().filter(|field| field.required && !object.contains_key(field.name)) {
            self.problems.push(pointer(&[descriptor.section, key, field.name]), "is required");
            valid = false;
        }
        valid.then_some(values)
    }

    /// One field's value; `path` makes its JSON pointer, needed only for a problem.
    fn value(&mut self, kind: usize, position: usize, value: &Json, path: impl Fn() -> String) -> Option<Value> {
        let parsed = match (self.catalog.get(kind).fields[position].ty, value) {
            (FieldType::Count, value) => json::count(value)
                .map(Value::Count)
                .ok_or_else(|| format!("must be a non-negative integer no larger than {MAX_COUNT}")),
            (FieldType::Bool, Json::Bool(flag)) => Ok(Value::Bool(*flag)),
            (FieldType::Bool, _) => Err("must be true or false".to_owned()),
            (FieldType::Map, Json::Object(map)) => {
                let mut parsed = StringMap::new();
                let mut valid = true;
                for (entry, value) in map {
                    match value {
                        Json::String(text) => {
                            parsed.insert(entry.clone(), text.clone());
                        }
                        _ => {
                            self.problems.push(format!("{}{}", path(), pointer(&[entry])), "must be a string");
                            valid = false;
                        }
                    }
                }
                return valid.then_some(Value::Map(parsed));
            }
            (FieldType::Map, _) => Err("must be an object of string values".to_owned()),
            (_, Json::String(text)) => self.text_value(kind, position, text),
            (_, _) => Err("must be a string".to_owned()),
        };
        parsed.map_err(|message| self.problems.push(path(), message)).ok()
    }

    /// The value of field `position` of `kind`, a field of text (a string, a name or a
    /// reference), given `text`, or what is wrong with it.
    pub(super) fn text_value(&mut self, kind: usize, position: usize, text: &str) -> Result<Value, String> {
        let catalog = self.catalog;
        let field = &catalog.get(kind).fields[position];
        match field.ty {
            FieldType::String if field.required && text.is_empty() => Err("must not be empty".to_owned()),
            FieldType::Name if !is_name(text) => Err(format!("must match {NAME_PATTERN}")),
            FieldType::Ref(_) => {
                // A catalogue holds the kind every reference of its kinds names.
                let target = catalog.target(kind, position).map(|target| (target, catalog.get(target)));
                match target {
                    Some((target, _)) if is_name(text) || catalog.id_kind(text) == Some(target) => {
                        Ok(Value::Text(self.strings.get(text)))
                    }
                    _ => {
                        let a = target.map_or_else(String::new, |(_, descriptor)| descriptor.a());
                        Err(format!("must be the key of {a} in the document or {a} id"))
                    }
                }
            }
            _ => Ok(Value::Text(self.strings.get(text))),
        }
    }
}

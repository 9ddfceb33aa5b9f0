//! Requests and FleetConfig documents: parsing JSON text, validating it against the
//! catalogue's descriptors with every problem reported at once (SPEC §5), and the typed
//! document the planner reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashSet as HashSet;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value as Json};

use crate::error::Problem;
use crate::grammar::{NAME_PATTERN, is_name};
use crate::json::MAX_COUNT;
pub(crate) use crate::json::pointer;
use crate::kinds::{Catalog, Descriptor, FieldType, RESERVED, with_article};
use crate::state::{StringMap, Value};
use crate::{Error, ErrorCode, json};

mod cursor;
mod streamed;

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

/// The strings of a document being read, each held once however often the document
/// repeats it: a large document names the same sites, accounts, classes and owners over
/// and over, and references repeat the keys they name.
#[derive(Default)]
pub(crate) struct Strings(HashSet<Arc<str>>);

impl Strings {
    pub(crate) fn get(&mut self, text: &str) -> Arc<str> {
        if let Some(known) = self.0.get(text) {
            return known.clone();
        }
        let text: Arc<str> = text.into();
        self.0.insert(text.clone());
        text
    }
}

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
    fn new(catalog: &Catalog) -> Document {
        Document { sections: vec![BTreeMap::new(); catalog.len()], moved: Vec::new() }
    }

    pub(crate) fn section(&self, kind: usize) -> &Section {
        &self.sections[kind]
    }

    /// The document with only the sections of `kinds`, every object with every field in
    /// descriptor order: what export returns (the modules that run).
    pub(crate) fn filled<'a>(&'a self, catalog: &Catalog, kinds: Vec<usize>) -> FilledDocument<'a> {
        let kinds = kinds
            .into_iter()
            .map(|kind| (catalog.get(kind), kind, (0..catalog.get(kind).fields.len()).collect()))
            .collect();
        FilledDocument { document: self, kinds, moved: false }
    }

    /// The whole document filled in, sections and fields in canonical (sorted) order:
    /// what the plan hash covers, streamed without a JSON tree.
    pub(crate) fn canonical<'a>(&'a self, catalog: &Catalog) -> FilledDocument<'a> {
        let mut kinds: Vec<_> =
            catalog.iter().map(|(kind, descriptor)| (descriptor, kind, descriptor.alphabetical().to_vec())).collect();
        kinds.sort_by_key(|(descriptor, _, _)| descriptor.section);
        FilledDocument { document: self, kinds, moved: !self.moved.is_empty() }
    }
}

pub(crate) struct FilledDocument<'a> {
    document: &'a Document,
    /// Per kind written: its descriptor, its position, and its field positions in the
    /// order they are written.
    kinds: Vec<(&'static Descriptor, usize, Vec<usize>)>,
    /// Whether `moved` is written, among the sections in sorted order.
    moved: bool,
}

impl Serialize for FilledDocument<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(None)?;
        let mut moved = self.moved;
        for (descriptor, kind, order) in &self.kinds {
            if moved && descriptor.section > MOVED {
                map.serialize_entry(MOVED, &self.document.moved)?;
                moved = false;
            }
            let objects = self.document.section(*kind);
            map.serialize_entry(descriptor.section, &FilledSection { descriptor, order, objects })?;
        }
        if moved {
            map.serialize_entry(MOVED, &self.document.moved)?;
        }
        map.end()
    }
}

struct FilledSection<'a> {
    descriptor: &'static Descriptor,
    order: &'a [usize],
    objects: &'a Section,
}

impl Serialize for FilledSection<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (descriptor, order) = (self.descriptor, self.order);
        serializer
            .collect_map(self.objects.iter().map(|(key, values)| (&**key, FilledObject { descriptor, order, values })))
    }
}

/// One object with every field, in the order given.
struct FilledObject<'a> {
    descriptor: &'static Descriptor,
    order: &'a [usize],
    values: &'a [Value],
}

impl Serialize for FilledObject<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(
            self.order.iter().map(|&position| (self.descriptor.fields[position].name, &self.values[position])),
        )
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
}

/// An override of a mandatory policy's denials, with the reason the audit trail keeps.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Override {
    pub(crate) policy: String,
    pub(crate) reason: String,
}

/// The longest reason an override may give.
const MAX_REASON: usize = 1000;

/// Every problem found in a request, reported together as one `INVALID_ARGUMENT`.
#[derive(Debug, Default)]
pub(crate) struct Problems(Vec<Problem>);

impl Problems {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn push(&mut self, path: String, message: impl Into<String>) {
        self.0.push(Problem { path, message: message.into() });
    }

    /// `Ok` when there is no problem; otherwise the error listing them all, sorted by
    /// path so that the order never depends on how a JSON object was stored.
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
        Err(Error::new(ErrorCode::InvalidArgument, message).with_details(serde_json::json!({ "problems": self.0 })))
    }
}

/// What a malformed `planHash` is told.
pub const PLAN_HASH_FORM: &str = "must be \"sha256:\" and 64 lowercase hex digits, as a plan gives it";

/// Whether `text` has the form of a plan's `planHash`: `sha256:` and 64 lowercase hex digits.
pub fn is_plan_hash(text: &str) -> bool {
    text.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f')))
}

/// Parses request text; an empty request (no bytes at all) means `{}`.
fn parse_json(request: &str) -> Result<Map<String, Json>, Error> {
    if request.is_empty() {
        return Ok(Map::new());
    }
    let value = json::parse(request).map_err(|found| {
        Problems(found).into_result().err().unwrap_or_else(|| Error::new(ErrorCode::InvalidArgument, "malformed JSON"))
    })?;
    match value {
        Json::Object(map) => Ok(map),
        _ => {
            let mut problems = Problems::default();
            problems.push(String::new(), "the request must be a JSON object");
            problems.into_result().map(|()| Map::new())
        }
    }
}

/// Parses an export request: `{}` (or empty text), nothing else.
pub(crate) fn parse_export(request: &str) -> Result<(), Error> {
    let map = parse_json(request)?;
    let mut problems = Problems::default();
    for key in map.keys() {
        problems.push(pointer(&[key]), "unknown field; export takes no input");
    }
    problems.into_result()
}

/// Parses a plan request (`plan_hash_allowed` false) or an apply request (true). The
/// problems found so far are returned with the request, so that the planner can add
/// those it finds while resolving keys and report them all together.
pub(crate) fn parse_plan(
    catalog: &Catalog,
    request: &str,
    plan_hash_allowed: bool,
) -> Result<(PlanRequest, Problems), Error> {
    if let Some(valid) = streamed::valid_request(catalog, request, plan_hash_allowed) {
        return Ok((valid, Problems::default()));
    }
    parse_plan_reporting(catalog, request, plan_hash_allowed)
}

/// [`parse_plan`] through a JSON tree of the whole request: every problem found.
fn parse_plan_reporting(
    catalog: &Catalog,
    request: &str,
    plan_hash_allowed: bool,
) -> Result<(PlanRequest, Problems), Error> {
    let map = parse_json(request)?;
    let mut problems = Problems::default();
    let mut parsed = PlanRequest::new(catalog);
    for (key, value) in &map {
        match (key.as_str(), value) {
            ("document", Json::Object(document)) => parsed.document = parse_document(catalog, document, &mut problems),
            ("document", _) => problems.push(pointer(&["document"]), "the document must be an object"),
            (key, value) => parse_member(&mut parsed, key, value, plan_hash_allowed, &mut problems),
        }
    }
    if !map.contains_key("document") {
        problems.push(pointer(&["document"]), "the document is required");
    }
    Ok((parsed, problems))
}

/// Whether the fast reader reads `request` as the reader that reports every problem
/// does, whenever it reads it at all (the document fuzz target asks).
#[cfg(feature = "fuzzing")]
pub(crate) fn streamed_agrees(request: &str) -> bool {
    let catalog = Catalog::built_in();
    [false, true].into_iter().all(|plan_hash_allowed| {
        let Some(streamed) = streamed::valid_request(&catalog, request, plan_hash_allowed) else { return true };
        let reported = parse_plan_reporting(&catalog, request, plan_hash_allowed);
        matches!(reported, Ok((read, problems)) if problems.is_empty() && read == streamed)
    })
}

impl PlanRequest {
    fn new(catalog: &Catalog) -> PlanRequest {
        PlanRequest { document: Document::new(catalog), prune: false, plan_hash: None, overrides: Vec::new() }
    }
}

/// A member of a plan or apply request other than its document.
fn parse_member(parsed: &mut PlanRequest, key: &str, value: &Json, plan_hash_allowed: bool, problems: &mut Problems) {
    match key {
        "prune" => match value {
            Json::Bool(prune) => parsed.prune = *prune,
            _ => problems.push(pointer(&["prune"]), "must be a boolean"),
        },
        "planHash" if plan_hash_allowed => match value {
            Json::String(plan_hash) if is_plan_hash(plan_hash) => parsed.plan_hash = Some(plan_hash.clone()),
            _ => problems.push(pointer(&["planHash"]), PLAN_HASH_FORM),
        },
        "overrides" if plan_hash_allowed => parsed.overrides = parse_overrides(value, problems),
        // Whether fleet.drift restores the revision this apply makes (SPEC §15): the
        // host's to keep; the plan is the same either way.
        "heal" if plan_hash_allowed => {
            if !matches!(value, Json::Bool(_)) {
                problems.push(pointer(&["heal"]), "must be a boolean");
            }
        }
        _ => problems.push(pointer(&[key]), "unknown field"),
    }
}

/// `[{"policy": name, "reason": text}]`, each policy named once.
fn parse_overrides(value: &Json, problems: &mut Problems) -> Vec<Override> {
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

fn parse_document(catalog: &Catalog, document: &Map<String, Json>, problems: &mut Problems) -> Document {
    let mut parsed = Document::new(catalog);
    let mut strings = Strings::default();
    for (section, objects) in document {
        if section == MOVED {
            parsed.moved = parse_moves(catalog, objects, problems);
            continue;
        }
        let Some(kind) = section_kind(catalog, section, problems) else { continue };
        let Json::Object(objects) = objects else {
            problems.push(pointer(&[section]), "a section must be an object of objects by key");
            continue;
        };
        for (key, object) in objects {
            parse_entry(catalog, kind, key, object, &mut strings, problems, &mut parsed.sections[kind]);
        }
    }
    parsed
}

/// The kind whose section is named `section`.
fn section_kind(catalog: &Catalog, section: &str, problems: &mut Problems) -> Option<usize> {
    let kind = catalog.by_section(section);
    if kind.is_none() {
        let sections: Vec<&str> = catalog.iter().map(|(_, kind)| kind.section).collect();
        problems.push(pointer(&[section]), format!("unknown section; the sections are {}", sections.join(", ")));
    }
    kind
}

/// One object of a section: its key and fields checked, and kept when both are valid.
fn parse_entry(
    catalog: &Catalog,
    kind: usize,
    key: &str,
    object: &Json,
    strings: &mut Strings,
    problems: &mut Problems,
    section: &mut Section,
) {
    let key_is_valid = check_key(catalog, kind, key, problems);
    let values = parse_object(catalog, kind, key, object, strings, problems);
    if let (true, Some(values)) = (key_is_valid, values) {
        section.insert(strings.get(key), values.into());
    }
}

/// `moved`: `[{"kind", "from", "to"}]` of kinds whose objects are named by bindings,
/// each name a name of the grammar, `from` and `to` different; within a kind no name is
/// moved twice, to twice, or both moved and moved to (so no entry depends on another).
fn parse_moves(catalog: &Catalog, value: &Json, problems: &mut Problems) -> Vec<Move> {
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

fn check_key(catalog: &Catalog, kind: usize, key: &str, problems: &mut Problems) -> bool {
    let descriptor = catalog.get(kind);
    let path = || pointer(&[descriptor.section, key]);
    match descriptor.id_prefix() {
        None if is_name(key) => true,
        None => {
            let message = format!(
                "{}'s key must be {} name matching {NAME_PATTERN}",
                descriptor.a(),
                with_article(descriptor.identity_name())
            );
            problems.push(path(), message);
            false
        }
        Some(_) if is_name(key) || catalog.id_kind(key) == Some(kind) => true,
        Some(prefix) => {
            problems.push(
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

fn parse_object(
    catalog: &Catalog,
    kind: usize,
    key: &str,
    object: &Json,
    strings: &mut Strings,
    problems: &mut Problems,
) -> Option<Vec<Value>> {
    let descriptor = catalog.get(kind);
    let Json::Object(object) = object else {
        problems.push(pointer(&[descriptor.section, key]), format!("{} must be an object", descriptor.a()));
        return None;
    };
    let fields = descriptor.fields;
    let mut values: Vec<Value> = fields.iter().map(|field| Value::default_of(field.ty)).collect();
    let mut valid = true;
    for (name, value) in object {
        let path = || pointer(&[descriptor.section, key, name]);
        let Some(position) = descriptor.position(name) else {
            if RESERVED.contains(&name.as_str()) {
                problems.push(path(), "is set by the server and is never part of a FleetConfig");
            } else {
                let names: Vec<&str> = fields.iter().map(|field| field.name).collect();
                problems.push(path(), format!("unknown field; {} has {}", descriptor.a(), names.join(", ")));
            }
            valid = false;
            continue;
        };
        match parse_value(catalog, kind, position, value, path, strings, problems) {
            Some(value) => values[position] = value,
            None => valid = false,
        }
    }
    for field in fields.iter().filter(|field| field.required && !object.contains_key(field.name)) {
        problems.push(pointer(&[descriptor.section, key, field.name]), "is required");
        valid = false;
    }
    valid.then_some(values)
}

/// Parses one field's value; `path` makes its JSON pointer, needed only for a problem.
fn parse_value(
    catalog: &Catalog,
    kind: usize,
    position: usize,
    value: &Json,
    path: impl Fn() -> String,
    strings: &mut Strings,
    problems: &mut Problems,
) -> Option<Value> {
    let mut fail = |message: String| {
        problems.push(path(), message);
        None
    };
    match (catalog.get(kind).fields[position].ty, value) {
        (FieldType::Count, value) => match json::count(value) {
            Some(count) => Some(Value::Count(count)),
            None => fail(format!("must be a non-negative integer no larger than {MAX_COUNT}")),
        },
        (FieldType::Bool, Json::Bool(flag)) => Some(Value::Bool(*flag)),
        (FieldType::Bool, _) => fail("must be true or false".to_owned()),
        (FieldType::Map, Json::Object(map)) => {
            let mut parsed = StringMap::new();
            let mut valid = true;
            for (entry, value) in map {
                match value {
                    Json::String(text) => {
                        parsed.insert(entry.clone(), text.clone());
                    }
                    _ => {
                        problems.push(format!("{}{}", path(), pointer(&[entry])), "must be a string");
                        valid = false;
                    }
                }
            }
            valid.then_some(Value::Map(parsed))
        }
        (FieldType::Map, _) => fail("must be an object of string values".to_owned()),
        (_, Json::String(text)) => text_value(catalog, kind, position, text, strings).map_or_else(fail, Some),
        (_, _) => fail("must be a string".to_owned()),
    }
}

/// The value of field `position` of `kind`, a field of text (a string, a name or a
/// reference), given `text`, or what is wrong with it.
fn text_value(
    catalog: &Catalog,
    kind: usize,
    position: usize,
    text: &str,
    strings: &mut Strings,
) -> Result<Value, String> {
    let field = &catalog.get(kind).fields[position];
    match field.ty {
        FieldType::String if field.required && text.is_empty() => Err("must not be empty".to_owned()),
        FieldType::Name if !is_name(text) => Err(format!("must match {NAME_PATTERN}")),
        FieldType::Ref(_) => {
            // A catalogue holds the kind every reference of its kinds names.
            let target = catalog.target(kind, position).map(|target| (target, catalog.get(target)));
            match target {
                Some((target, _)) if is_name(text) || catalog.id_kind(text) == Some(target) => {
                    Ok(Value::Text(strings.get(text)))
                }
                _ => {
                    let a = target.map_or_else(String::new, |(_, descriptor)| descriptor.a());
                    Err(format!("must be the key of {a} in the document or {a} id"))
                }
            }
        }
        _ => Ok(Value::Text(strings.get(text))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(request: &str) -> Vec<(String, String)> {
        let result = parse_plan(&Catalog::built_in(), request, false).and_then(|(_, problems)| problems.into_result());
        let Err(error) = result else {
            return Vec::new();
        };
        assert_eq!(error.code, ErrorCode::InvalidArgument);
        let details = error.details.unwrap_or_default();
        details["problems"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|problem| {
                (
                    problem["path"].as_str().unwrap_or_default().to_owned(),
                    problem["message"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    fn paths(request: &str) -> Vec<String> {
        problems(request).into_iter().map(|(path, _)| path).collect()
    }

    #[test]
    fn ids_name_their_kind() {
        let catalog = Catalog::built_in();
        assert_eq!(catalog.id_kind("pool_aaaaaaaaaaaaaaaaaaaaaaaaaa"), catalog.by_kind("pool"));
        assert_eq!(catalog.id_kind("flv_234567abcdefghijklmnopqrst"), catalog.by_kind("flavor"));
        assert_eq!(catalog.id_kind("pool_aaaaaaaaaaaaaaaaaaaaaaaaa"), None, "25 characters");
        assert_eq!(catalog.id_kind("pool_aaaaaaaaaaaaaaaaaaaaaaaaa1"), None, "1 is not base32");
        assert_eq!(catalog.id_kind("quota_aaaaaaaaaaaaaaaaaaaaaaaaaa"), None);
    }

    #[test]
    fn pointers_escape_tilde_and_slash() {
        assert_eq!(pointer(&["pools", "a/b~c", "labels"]), "/pools/a~1b~0c/labels");
    }

    #[test]
    fn empty_request_needs_a_document() {
        assert_eq!(paths(""), ["/document"]);
        assert_eq!(paths("{}"), ["/document"]);
    }

    #[test]
    fn malformed_json_has_an_empty_path() {
        assert_eq!(paths("{"), [""]);
        assert_eq!(paths("[]"), [""]);
    }

    #[test]
    fn envelope_problems() {
        assert_eq!(paths(r#"{"document": [], "prune": 1, "planHash": "x"}"#), ["/document", "/planHash", "/prune"]);
        let hash = format!("sha256:{}", "0f".repeat(32));
        let request = format!(r#"{{"document": {{}}, "prune": true, "planHash": "{hash}"}}"#);
        let (request, problems) = parse_plan(&Catalog::built_in(), &request, true).unwrap();
        assert!(problems.into_result().is_ok());
        assert!(request.prune);
        assert_eq!(request.plan_hash, Some(hash));
        for malformed in ["x", "sha256:00", &format!("sha256:{}", "A".repeat(64)), &format!("sha1:{}", "0".repeat(64))]
        {
            let request = format!(r#"{{"document": {{}}, "planHash": "{malformed}"}}"#);
            assert_eq!(
                parse_plan(&Catalog::built_in(), &request, true).unwrap().1.into_result().unwrap_err().code,
                ErrorCode::InvalidArgument
            );
        }
    }

    #[test]
    fn every_problem_is_reported_in_one_pass() {
        let request = r#"{"document": {
            "pools": {
                "gpu-a": {"site": "Bad", "class": "gpu", "owner": "team-ml", "vcpus": -1, "gpus": 1.5,
                          "labels": {"a": 1}, "id": "pool_x", "colour": "red"},
                "Bad_Key": {"site": "s", "account": "a", "class": "c", "owner": "o"},
                "site_aaaaaaaaaaaaaaaaaaaaaaaaaa": {"site": "s", "account": "a", "class": "c", "owner": "o"}
            },
            "sites": {"eu": {"region": ""}, "us": 3},
            "ownerQuotas": {"pool_aaaaaaaaaaaaaaaaaaaaaaaaaa": {"instances": 9007199254740992}},
            "offers": {"o": {"pool": "p", "to": "Team"}},
            "flavors": [],
            "extra": {}
        }}"#;
        assert_eq!(
            paths(request),
            [
                "/extra",
                "/flavors",
                "/offers/o/to",
                "/ownerQuotas/pool_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                "/ownerQuotas/pool_aaaaaaaaaaaaaaaaaaaaaaaaaa/instances",
                "/pools/Bad_Key",
                "/pools/gpu-a/account",
                "/pools/gpu-a/colour",
                "/pools/gpu-a/gpus",
                "/pools/gpu-a/id",
                "/pools/gpu-a/labels/a",
                "/pools/gpu-a/site",
                "/pools/gpu-a/vcpus",
                "/pools/site_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                "/sites/eu/region",
                "/sites/us",
            ]
        );
    }

    #[test]
    fn references_take_names_or_ids_of_their_kind() {
        let document = |site: &str| {
            format!(
                r#"{{"document": {{"pools": {{"p": {{"site": "{site}", "account": "a", "class": "c", "owner": "o"}}}}}}}}"#
            )
        };
        assert!(paths(&document("eu-west")).is_empty());
        assert!(paths(&document("site_aaaaaaaaaaaaaaaaaaaaaaaaaa")).is_empty());
        assert_eq!(paths(&document("pool_aaaaaaaaaaaaaaaaaaaaaaaaaa")), ["/pools/p/site"]);
    }

    #[test]
    fn defaults_fill_omitted_fields() {
        let (request, _) =
            parse_plan(&Catalog::built_in(), r#"{"document": {"offers": {"o": {"pool": "p", "to": "t"}}}}"#, false)
                .unwrap();
        let offer = &request.document.section(4)["o"];
        assert_eq!(
            &offer[..],
            &[Value::Text("p".into()), Value::Text("t".into()), Value::Count(0), Value::Count(0), Value::Count(0)]
        );
    }
}

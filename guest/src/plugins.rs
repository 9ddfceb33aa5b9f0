//! Module plugins as the planner and the host both see them (SPEC §10): a plugin's
//! descriptor in its JSON form (what `fleet plugin inspect` prints and the planner's
//! `plugins.kinds` import gives), checked and turned into a [`Descriptor`]; and the
//! objects a plugin's check judges, written the same way at plan time and at API time.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use serde_json::Value as Json;

use crate::grammar::{self, CAMEL_PATTERN, NAME_PATTERN, PREFIX_PATTERN};
use crate::kinds::{Descriptor, Field, FieldType, Identity, Part, RESERVED, Removal};
use crate::value::Value;

/// The most fields a plugin kind may have.
pub const MAX_FIELDS: usize = 64;

/// A plugin's descriptor in its JSON form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginKind {
    pub group: String,
    pub kind: String,
    pub section: String,
    pub id_prefix: String,
    pub removal: Removal,
    pub fields: Vec<PluginField>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginField {
    pub name: String,
    /// `string`, `name`, `count`, `bool`, `map` or `ref`.
    #[serde(rename = "type")]
    pub ty: String,
    /// The kind a `ref` names.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub required: bool,
    pub immutable: bool,
}

/// A field's type as a plugin's descriptor states it (SPEC §10): a type by its name, a
/// `ref` with the kind it names. The names on the wire are [`TYPE_NAMES`], the one place
/// that spells them, for the planner and the host alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclaredType<'a> {
    String,
    Name,
    Count,
    Bool,
    Map,
    Ref(&'a str),
}

/// The field types' names in a descriptor's JSON form, in the order of [`DeclaredType`].
pub const TYPE_NAMES: [&str; 6] = ["string", "name", "count", "bool", "map", "ref"];

impl<'a> DeclaredType<'a> {
    /// The type's name and, for a `ref`, the kind it names.
    pub fn wire(self) -> (&'static str, Option<&'a str>) {
        let (position, target) = match self {
            DeclaredType::String => (0, None),
            DeclaredType::Name => (1, None),
            DeclaredType::Count => (2, None),
            DeclaredType::Bool => (3, None),
            DeclaredType::Map => (4, None),
            DeclaredType::Ref(kind) => (5, Some(kind)),
        };
        (TYPE_NAMES[position], target)
    }

    /// The type a descriptor names, if it names one; a `ref` needs the kind it names.
    pub fn parse(name: &str, target: Option<&'a str>) -> Option<DeclaredType<'a>> {
        let position = TYPE_NAMES.iter().position(|known| *known == name)?;
        Some(match (position, target) {
            (0, None) => DeclaredType::String,
            (1, None) => DeclaredType::Name,
            (2, None) => DeclaredType::Count,
            (3, None) => DeclaredType::Bool,
            (4, None) => DeclaredType::Map,
            (5, Some(kind)) => DeclaredType::Ref(kind),
            _ => return None,
        })
    }
}

impl From<FieldType> for DeclaredType<'static> {
    fn from(ty: FieldType) -> DeclaredType<'static> {
        match ty {
            FieldType::String => DeclaredType::String,
            FieldType::Name => DeclaredType::Name,
            FieldType::Count => DeclaredType::Count,
            FieldType::Bool => DeclaredType::Bool,
            FieldType::Map => DeclaredType::Map,
            FieldType::Ref(kind) => DeclaredType::Ref(kind),
        }
    }
}

impl PluginField {
    /// A field of a descriptor's JSON form.
    pub fn new(name: String, ty: DeclaredType<'_>, required: bool, immutable: bool) -> PluginField {
        let (ty, target) = ty.wire();
        PluginField { name, ty: ty.to_owned(), target: target.map(str::to_owned), required, immutable }
    }
}

impl PluginKind {
    /// The JSON form of a plugin kind's descriptor.
    pub fn of(descriptor: &Descriptor) -> PluginKind {
        let fields = descriptor
            .fields
            .iter()
            .map(|field| PluginField::new(field.name.to_owned(), field.ty.into(), field.required, field.immutable))
            .collect();
        PluginKind {
            group: descriptor.group.to_owned(),
            kind: descriptor.kind.to_owned(),
            section: descriptor.section.to_owned(),
            id_prefix: descriptor.id_prefix().unwrap_or_default().to_owned(),
            removal: descriptor.removal,
            fields,
        }
    }

    /// Checks the descriptor on its own (clashes with other kinds and references to
    /// them are the catalogue's to find) and makes it a kind for the rest of the
    /// process. Every problem is reported, one per line.
    pub fn into_descriptor(self) -> Result<&'static Descriptor, String> {
        let mut problems = Vec::new();
        // Every plan checks every plugin kind again (an instance serves one request), so
        // a problem is written only when there is one.
        let expect = |problems: &mut Vec<String>, ok: bool, problem: &dyn Fn() -> String| {
            if !ok {
                problems.push(problem());
            }
        };
        expect(&mut problems, grammar::is_name(&self.group), &|| {
            format!("group {:?} does not match {NAME_PATTERN}", self.group)
        });
        expect(&mut problems, grammar::is_camel(&self.kind), &|| {
            format!("kind {:?} does not match {CAMEL_PATTERN}", self.kind)
        });
        expect(&mut problems, grammar::is_camel(&self.section), &|| {
            format!("section {:?} does not match {CAMEL_PATTERN}", self.section)
        });
        expect(&mut problems, self.section != crate::document::MOVED, &|| {
            format!("section {:?} is the document's list of renames", self.section)
        });
        expect(&mut problems, grammar::is_prefix(&self.id_prefix), &|| {
            format!("idPrefix {:?} does not match {PREFIX_PATTERN}", self.id_prefix)
        });
        expect(&mut problems, self.fields.len() <= MAX_FIELDS, &|| {
            format!("it has {} fields; at most {MAX_FIELDS}", self.fields.len())
        });
        let mut fields = Vec::with_capacity(self.fields.len());
        for (position, field) in self.fields.iter().enumerate() {
            let name = &field.name;
            expect(&mut problems, grammar::is_camel(name), &|| {
                format!("field {name:?} does not match {CAMEL_PATTERN}")
            });
            expect(&mut problems, !RESERVED.contains(&name.as_str()), &|| format!("field {name:?} is reserved"));
            expect(&mut problems, !self.fields[..position].iter().any(|earlier| earlier.name == *name), &|| {
                format!("field {name:?} is declared twice")
            });
            let ty = match DeclaredType::parse(&field.ty, field.target.as_deref()) {
                Some(DeclaredType::String) => FieldType::String,
                Some(DeclaredType::Name) => FieldType::Name,
                Some(DeclaredType::Count) => FieldType::Count,
                Some(DeclaredType::Bool) => FieldType::Bool,
                Some(DeclaredType::Map) => FieldType::Map,
                Some(DeclaredType::Ref(kind)) if grammar::is_camel(kind) => FieldType::Ref(leak(kind)),
                _ if field.ty == TYPE_NAMES[5] => {
                    problems.push(format!("field {name:?} references {:?}, which is not a kind name", field.target));
                    continue;
                }
                _ => {
                    let ty = &field.ty;
                    let known = format!("{} or {}", TYPE_NAMES[..5].join(", "), TYPE_NAMES[5]);
                    problems.push(format!("field {name:?} has no type {ty:?} ({known})"));
                    continue;
                }
            };
            fields.push(Field { name: leak(name), ty, required: field.required, immutable: field.immutable });
        }
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        // A new object's text line names its required fields: `(pool gpu-a, owner ml)`.
        let summary: Vec<Part> =
            fields.iter().filter(|field| field.required).map(|field| Part::Labeled(field.name)).collect();
        Ok(Box::leak(Box::new(Descriptor {
            kind: leak(&self.kind),
            group: leak(&self.group),
            section: leak(&self.section),
            identity: Identity::Id { prefix: leak(&self.id_prefix) },
            removal: self.removal,
            archivable: false,
            fields: Box::leak(fields.into_boxed_slice()),
            fleet_updates: true,
            rules: &[],
            summary: Box::leak(summary.into_boxed_slice()),
            plugin: true,
            orders: std::sync::OnceLock::new(),
        })))
    }
}

/// Descriptors live as long as the process (the host loads plugins once; a planner
/// instance serves one request), so their names are leaked rather than owned.
fn leak(text: &str) -> &'static str {
    Box::leak(text.to_owned().into_boxed_str())
}

/// The plugin kinds of a `plugins.kinds` answer. Their descriptors live as long as the
/// process, so an answer read before gives the kinds it gave then rather than new ones:
/// a host that keeps one instance for many calls, as the console does, gives the same
/// answer to every call, which would otherwise leak its kinds again each time.
pub fn parse_kinds(json: &str) -> Result<Vec<&'static Descriptor>, String> {
    static READ: Mutex<Vec<(String, Vec<&'static Descriptor>)>> = Mutex::new(Vec::new());
    let mut read = READ.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, kinds)) = read.iter().find(|(answer, _)| answer == json) {
        return Ok(kinds.clone());
    }
    let kinds: Vec<PluginKind> = serde_json::from_str(json).map_err(|error| format!("plugin kinds: {error}"))?;
    let kinds = kinds.into_iter().map(PluginKind::into_descriptor).collect::<Result<Vec<_>, _>>()?;
    read.push((json.to_owned(), kinds.clone()));
    Ok(kinds)
}

/// One object for a plugin's check (the plugin package's `subject`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub object: String,
    pub previous: Option<String>,
    /// `(reference field, the object it names)`.
    pub references: Vec<(String, String)>,
}

/// A problem a plugin's check found (the plugin package's `problem`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub subject: u32,
    pub path: String,
    pub message: String,
}

/// An object as a plugin's check sees it: a JSON object of `id` and every field of the
/// kind, members sorted by name. `value` gives a field's value by its position.
pub fn object_json<'v>(kind: &Descriptor, id: &str, value: impl Fn(usize) -> &'v Value) -> String {
    let mut object: BTreeMap<&str, Json> = BTreeMap::new();
    object.insert(kind.identity_name(), Json::String(id.to_owned()));
    for (position, field) in kind.fields.iter().enumerate() {
        object.insert(field.name, serde_json::to_value(value(position)).unwrap_or(Json::Null));
    }
    serde_json::to_string(&object).unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A plugin kind of reservations of a pool's vcpus by an owner.
    pub(crate) fn reservations() -> PluginKind {
        serde_json::from_str(
            r#"{"group": "reservations", "kind": "reservation", "section": "reservations", "idPrefix": "rsv",
                "removal": "delete", "fields": [
                  {"name": "pool", "type": "ref", "ref": "pool", "required": true, "immutable": true},
                  {"name": "owner", "type": "name", "required": true, "immutable": false},
                  {"name": "vcpus", "type": "count", "required": false, "immutable": false}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn a_valid_descriptor_becomes_a_plugin_kind_and_prints_back_the_same() {
        let form = reservations();
        let descriptor = form.clone().into_descriptor().unwrap();
        assert!(descriptor.plugin);
        assert_eq!(descriptor.id_prefix(), Some("rsv"));
        assert_eq!(descriptor.fields[0].ty, FieldType::Ref("pool"));
        assert_eq!(descriptor.summary, &[Part::Labeled("pool"), Part::Labeled("owner")]);
        assert_eq!(PluginKind::of(descriptor), form);
    }

    #[test]
    fn an_answer_read_again_gives_the_same_kinds() {
        let answer = serde_json::to_string(&[reservations()]).unwrap();
        let first = parse_kinds(&answer).unwrap();
        let again = parse_kinds(&answer).unwrap();
        assert!(std::ptr::eq(first[0], again[0]), "the kinds of an answer read before are not made again");
        let mut other = reservations();
        other.id_prefix = "rsvn".into();
        let other = parse_kinds(&serde_json::to_string(&[other]).unwrap()).unwrap();
        assert_eq!(other[0].id_prefix(), Some("rsvn"));
        assert!(parse_kinds("[{}]").is_err());
        assert!(parse_kinds("[{}]").is_err(), "an answer that failed is read again, and fails again");
    }

    #[test]
    fn every_problem_of_a_descriptor_is_reported() {
        let mut form = reservations();
        form.kind = "Reservation".into();
        form.id_prefix = "r".into();
        form.fields[1].name = "id".into();
        form.fields[2].ty = "float".into();
        let error = form.into_descriptor().unwrap_err();
        for expected in [
            "kind \"Reservation\" does not match",
            "idPrefix \"r\" does not match ^[a-z]{2,8}$",
            "field \"id\" is reserved",
            "field \"vcpus\" has no type \"float\"",
        ] {
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn objects_are_written_with_sorted_members() {
        let descriptor = reservations().into_descriptor().unwrap();
        let values = [Value::Text("pool_x".into()), Value::Text("ml".into()), Value::Count(4)];
        let json = object_json(descriptor, "rsv_y", |position| &values[position]);
        assert_eq!(json, r#"{"id":"rsv_y","owner":"ml","pool":"pool_x","vcpus":4}"#);
    }
}

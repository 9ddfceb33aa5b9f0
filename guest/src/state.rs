//! The tenant's state as the planner reads it, kind-generically: per kind, objects with
//! their fields in descriptor order (references are ids), the kinds whose modules run,
//! fleet's name bindings, and the policies in force (their data; `policy/` compiles and
//! runs them). It has two forms:
//!
//! - **JSON** (`compute.preview.snapshot`, the golden cases' `state.json`): `{"caller",
//!   "modules": [kind], <section>: [object as the API writes it], "bindings": [{"kind",
//!   "name", "id"}], "policies"?: [{"name", "level", "source"}]}`; absent fields take
//!   their defaults.
//! - **The state encoding**, which crosses the WIT boundary in one copy (`wit/fleet.wit`
//!   documents it for other hosts): self-describing, little-endian, strings as a `u32`
//!   byte length and UTF-8.
//!
//!   ```text
//!   state    = version:u8 (2) · modules:u32 · kind:str* · tables:u32 · table*
//!              · bindings:u32 · (kind:str · name:str · id:str)*
//!              · policies:u32 · (name:str · level:str · source:str)*
//!   table    = section:str · fields:u32 · name:str* · rows:u32 · row*
//!   row      = values:u32 · (field:u32 · value)*     field indexes the table's names
//!   value    = 0:u8 · str | 1:u8 · u64 | 2:u8 · (0|1):u8 | 3:u8 · pairs:u32 · (str · str)*
//!   ```
//!
//!   A table's names are the kind's identity (`id`, or e.g. `owner`), `archived`, and
//!   any of its fields; a row gives each at most once, absent ones take their defaults.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value as Json};

use crate::error::{Error, ErrorCode};
use crate::kinds::{Catalog, Descriptor, FieldType};
use crate::value::{StringMap, Value};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Caller {
    pub tenant: String,
    pub principal: String,
    /// The caller's grants (`PERMISSION @ SCOPE`), when the host says them: a plan then
    /// blocks the changes whose calls the caller may not make (SPEC §14). `None` (golden
    /// cases, benchmarks) plans as if every call were allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<Vec<String>>,
}

/// One object as the state reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// The id; the identity field's value for kinds identified by a field.
    pub key: String,
    /// Every field of the kind, in descriptor order (references are ids).
    pub values: Vec<Value>,
    pub archived: bool,
}

/// A name fleet gave an object it created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// The kind name.
    pub kind: String,
    pub name: String,
    pub id: String,
}

/// How binding a policy's denials are (SPEC §14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Its denials are warnings.
    Advisory,
    /// Its denials block the plan unless overridden.
    Mandatory,
    /// Its denials block the plan, and nothing overrides them.
    Enforced,
}

impl Level {
    pub const NAMES: [&'static str; 3] = ["advisory", "mandatory", "enforced"];

    pub fn parse(text: &str) -> Option<Level> {
        match text {
            "advisory" => Some(Level::Advisory),
            "mandatory" => Some(Level::Mandatory),
            "enforced" => Some(Level::Enforced),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        Level::NAMES[self as usize]
    }
}

/// A policy in force: its name, level and Rego source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub name: String,
    pub level: Level,
    pub source: String,
}

/// Everything the planner reads of a tenant, in one value: what a host reports, or a
/// fixture of the golden tests (`state.json`). As a [`crate::host::Host`] it cannot invoke
/// methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub caller: Caller,
    /// The kinds (by name) whose modules this deployment runs.
    pub modules: Vec<String>,
    /// Objects per kind name. A kind whose module does not run has none.
    pub tables: BTreeMap<String, Vec<Object>>,
    pub bindings: Vec<Binding>,
    /// The policies in force, the deployment's and the tenant's (SPEC §14).
    pub policies: Vec<Policy>,
}

impl Snapshot {
    /// A tenant with nothing in it, every built-in module run.
    pub fn empty(caller: Caller) -> Snapshot {
        let modules = crate::kinds::BUILT_IN.iter().map(|kind| kind.kind.to_owned()).collect();
        Snapshot { caller, modules, tables: BTreeMap::new(), bindings: Vec::new(), policies: Vec::new() }
    }

    /// The objects of a kind.
    pub fn objects(&self, kind: &str) -> &[Object] {
        self.tables.get(kind).map_or(&[], Vec::as_slice)
    }

    /// The objects of a kind, to change.
    pub fn objects_mut(&mut self, kind: &str) -> &mut Vec<Object> {
        self.tables.entry(kind.to_owned()).or_default()
    }

    /// Reads the JSON form, kinds and fields as `catalog` has them.
    pub fn from_json(catalog: &Catalog, json: &Json) -> Result<Snapshot, Error> {
        let Json::Object(members) = json else {
            return Err(malformed("the state must be a JSON object"));
        };
        let caller: Caller = match members.get("caller") {
            Some(caller) => serde_json::from_value(caller.clone()).map_err(|error| malformed(&error))?,
            None => return Err(malformed("the state has no caller")),
        };
        let mut writer = StateWriter::new();
        let modules: Vec<String> = match members.get("modules") {
            Some(modules) => serde_json::from_value(modules.clone()).map_err(|error| malformed(&error))?,
            None => catalog.iter().map(|(_, kind)| kind.kind.to_owned()).collect(),
        };
        writer.modules(modules.iter().map(String::as_str));
        for (section, objects) in members {
            if matches!(section.as_str(), "caller" | "modules" | "bindings" | "plugins" | "policies") {
                continue;
            }
            let Json::Array(objects) = objects else {
                return Err(malformed(format_args!("section {section} must be an array of objects")));
            };
            let mut names: Vec<&str> = Vec::new();
            for object in objects {
                let Json::Object(object) = object else {
                    return Err(malformed(format_args!("section {section} must be an array of objects")));
                };
                for name in object.keys() {
                    if !names.contains(&name.as_str()) {
                        names.push(name);
                    }
                }
            }
            let mut table = writer.table(section, &names);
            for object in objects.iter().filter_map(Json::as_object) {
                let mut row = table.row(object.len());
                for (name, value) in object {
                    let field = names.iter().position(|candidate| candidate == name).unwrap_or_default();
                    let value = Value::from_json(value)
                        .ok_or_else(|| malformed(format_args!("{section}: {name} has a value of no field type")))?;
                    row.value(field, &value);
                }
            }
        }
        let bindings: Vec<Binding> = match members.get("bindings") {
            Some(bindings) => serde_json::from_value(bindings.clone()).map_err(|error| malformed(&error))?,
            None => Vec::new(),
        };
        writer.bindings(bindings.iter().map(|binding| (&*binding.kind, &*binding.name, &*binding.id)));
        let policies: Vec<Policy> = match members.get("policies") {
            Some(policies) => serde_json::from_value(policies.clone()).map_err(|error| malformed(&error))?,
            None => Vec::new(),
        };
        writer.policies(&policies);
        let mut snapshot = decode(catalog, &writer.finish())?;
        snapshot.caller = caller;
        Ok(snapshot)
    }

    /// The JSON form: every field written, objects as the API writes them.
    pub fn to_json(&self, catalog: &Catalog) -> Json {
        let mut members = Map::new();
        members.insert("caller".into(), serde_json::to_value(&self.caller).unwrap_or_default());
        members.insert("modules".into(), serde_json::to_value(&self.modules).unwrap_or_default());
        for (_, kind) in catalog.iter() {
            let objects: Vec<Json> = self.objects(kind.kind).iter().map(|object| object_json(kind, object)).collect();
            if !objects.is_empty() {
                members.insert(kind.section.into(), Json::Array(objects));
            }
        }
        members.insert("bindings".into(), serde_json::to_value(&self.bindings).unwrap_or_default());
        if !self.policies.is_empty() {
            members.insert("policies".into(), serde_json::to_value(&self.policies).unwrap_or_default());
        }
        Json::Object(members)
    }

    /// The state encoding of this snapshot (the caller is not part of it).
    pub fn encode(&self, catalog: &Catalog) -> Vec<u8> {
        let mut writer = StateWriter::new();
        writer.modules(self.modules.iter().map(String::as_str));
        for (_, kind) in catalog.iter() {
            let objects = self.objects(kind.kind);
            if objects.is_empty() {
                continue;
            }
            let mut table = writer.kind_table(kind);
            for object in objects {
                table.object(object);
            }
        }
        writer.bindings(self.bindings.iter().map(|binding| (&*binding.kind, &*binding.name, &*binding.id)));
        writer.policies(&self.policies);
        writer.finish()
    }
}

fn object_json(kind: &Descriptor, object: &Object) -> Json {
    let mut members = Map::new();
    members.insert(kind.identity_name().into(), Json::String(object.key.clone()));
    for (field, value) in kind.fields.iter().zip(&object.values) {
        members.insert(field.name.into(), serde_json::to_value(value).unwrap_or_default());
    }
    if kind.archives() {
        members.insert("archived".into(), Json::Bool(object.archived));
    }
    Json::Object(members)
}

/// The built-in kinds' JSON form, for fixtures and tests.
impl<'de> Deserialize<'de> for Snapshot {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Snapshot, D::Error> {
        let json = Json::deserialize(deserializer)?;
        Snapshot::from_json(&Catalog::built_in(), &json).map_err(|error| serde::de::Error::custom(error.message))
    }
}

impl Serialize for Snapshot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json(&Catalog::built_in()).serialize(serializer)
    }
}

fn malformed(detail: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::Internal, format!("the host's state is malformed: {detail}"))
}

// ---- the state encoding ----------------------------------------------------------------

const VERSION: u8 = 2;
const TEXT: u8 = 0;
const COUNT: u8 = 1;
const BOOL: u8 = 2;
const MAP: u8 = 3;

/// Writes the state encoding: modules, then tables, then bindings, then policies (none
/// unless written), each once.
pub struct StateWriter {
    bytes: Vec<u8>,
    tables: u32,
    /// Where the table count goes, once the modules are written.
    tables_at: usize,
    policies_written: bool,
}

impl Default for StateWriter {
    fn default() -> StateWriter {
        StateWriter::new()
    }
}

impl StateWriter {
    pub fn new() -> StateWriter {
        StateWriter { bytes: vec![VERSION], tables: 0, tables_at: 0, policies_written: false }
    }

    /// The kinds whose modules run; first.
    pub fn modules<'a>(&mut self, kinds: impl IntoIterator<Item = &'a str>) {
        let at = self.reserve();
        let mut count = 0;
        for kind in kinds {
            self.text(kind);
            count += 1;
        }
        self.patch(at, count);
        self.tables_at = self.reserve();
    }

    /// A table of `section` whose rows give values of the named fields.
    pub fn table(&mut self, section: &str, names: &[&str]) -> TableWriter<'_> {
        self.tables += 1;
        self.text(section);
        self.u32(names.len());
        for name in names {
            self.text(name);
        }
        let rows_at = self.reserve();
        TableWriter { writer: self, rows: 0, rows_at }
    }

    /// A table of a kind with its identity, every field and `archived`, in that order
    /// (what [`TableWriter::object`] writes).
    pub fn kind_table(&mut self, kind: &Descriptor) -> TableWriter<'_> {
        let mut names = vec![kind.identity_name(), "archived"];
        names.extend(kind.fields.iter().map(|field| field.name));
        self.table(kind.section, &names)
    }

    /// The name bindings; last.
    pub fn bindings<'a>(&mut self, bindings: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>) {
        self.patch(self.tables_at, self.tables as usize);
        let at = self.reserve();
        let mut count = 0;
        for (kind, name, id) in bindings {
            self.text(kind);
            self.text(name);
            self.text(id);
            count += 1;
        }
        self.patch(at, count);
    }

    /// The policies in force; after the bindings.
    pub fn policies(&mut self, policies: &[Policy]) {
        self.u32(policies.len());
        for policy in policies {
            self.text(&policy.name);
            self.text(policy.level.as_str());
            self.text(&policy.source);
        }
        self.policies_written = true;
    }

    pub fn finish(mut self) -> Vec<u8> {
        if !self.policies_written {
            self.u32(0);
        }
        self.bytes
    }

    fn reserve(&mut self) -> usize {
        self.bytes.extend_from_slice(&[0; 4]);
        self.bytes.len() - 4
    }

    fn patch(&mut self, at: usize, count: usize) {
        self.bytes[at..at + 4].copy_from_slice(&(count as u32).to_le_bytes());
    }

    fn u32(&mut self, value: usize) {
        self.bytes.extend_from_slice(&(value as u32).to_le_bytes());
    }

    fn text(&mut self, text: &str) {
        self.u32(text.len());
        self.bytes.extend_from_slice(text.as_bytes());
    }
}

pub struct TableWriter<'a> {
    writer: &'a mut StateWriter,
    rows: usize,
    rows_at: usize,
}

impl TableWriter<'_> {
    /// A row of `values` values.
    pub fn row(&mut self, values: usize) -> RowWriter<'_> {
        self.rows += 1;
        self.writer.u32(values);
        RowWriter { writer: self.writer }
    }

    /// A whole object of a table made by [`StateWriter::kind_table`].
    pub fn object(&mut self, object: &Object) {
        let mut row = self.row(object.values.len() + 2);
        row.text(0, &object.key);
        row.flag(1, object.archived);
        for (position, value) in object.values.iter().enumerate() {
            row.value(position + 2, value);
        }
    }
}

impl Drop for TableWriter<'_> {
    fn drop(&mut self) {
        self.writer.patch(self.rows_at, self.rows);
    }
}

/// The values of one row, each by its position in the table's names.
pub struct RowWriter<'a> {
    writer: &'a mut StateWriter,
}

impl RowWriter<'_> {
    pub fn text(&mut self, field: usize, text: &str) {
        self.writer.u32(field);
        self.writer.bytes.push(TEXT);
        self.writer.text(text);
    }

    pub fn count(&mut self, field: usize, count: u64) {
        self.writer.u32(field);
        self.writer.bytes.push(COUNT);
        self.writer.bytes.extend_from_slice(&count.to_le_bytes());
    }

    pub fn flag(&mut self, field: usize, flag: bool) {
        self.writer.u32(field);
        self.writer.bytes.extend_from_slice(&[BOOL, u8::from(flag)]);
    }

    /// A map, its pairs in key order.
    pub fn map<'m>(&mut self, field: usize, pairs: impl ExactSizeIterator<Item = (&'m str, &'m str)>) {
        self.writer.u32(field);
        self.writer.bytes.push(MAP);
        self.writer.u32(pairs.len());
        for (key, value) in pairs {
            self.writer.text(key);
            self.writer.text(value);
        }
    }

    pub fn value(&mut self, field: usize, value: &Value) {
        match value {
            Value::Text(text) => self.text(field, text),
            Value::Count(count) => self.count(field, *count),
            Value::Bool(flag) => self.flag(field, *flag),
            Value::Map(map) => self.map(field, map.iter().map(|(key, value)| (key.as_str(), value.as_str()))),
        }
    }
}

/// The state in one body for another host of the planner (the edge, SPEC §11): a JSON
/// header of what the state encoding leaves out (`{"caller", "plugins"}`), then the
/// encoding. The header's length comes first, 4 bytes little-endian.
pub fn envelope(header: &str, encoding: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 + header.len() + encoding.len());
    body.extend_from_slice(&(header.len() as u32).to_le_bytes());
    body.extend_from_slice(header.as_bytes());
    body.extend_from_slice(encoding);
    body
}

/// The header and the encoding of an [`envelope`], or why it is not one.
pub fn open_envelope(body: &[u8]) -> Result<(&str, &[u8]), String> {
    let (length, rest) = body.split_first_chunk::<4>().ok_or("shorter than its header's length")?;
    let length = u32::from_le_bytes(*length) as usize;
    if rest.len() < length {
        return Err(format!("its header of {length} bytes is cut short"));
    }
    let (header, encoding) = rest.split_at(length);
    let header = std::str::from_utf8(header).map_err(|_| "its header is not UTF-8")?;
    Ok((header, encoding))
}

/// Reads the state encoding, kinds and fields as `catalog` has them. The caller is left
/// empty: it comes from `current-caller`.
pub fn decode(catalog: &Catalog, bytes: &[u8]) -> Result<Snapshot, Error> {
    let mut reader = Reader { bytes, at: 0 };
    let version = reader.byte()?;
    if version != VERSION {
        return Err(malformed(format_args!("state encoding version {version}; this planner reads {VERSION}")));
    }
    let modules = (0..reader.u32()?).map(|_| reader.text().map(str::to_owned)).collect::<Result<Vec<_>, _>>()?;
    let mut tables = BTreeMap::new();
    for _ in 0..reader.u32()? {
        let section = reader.text()?;
        let kind = catalog.by_section(section).map(|kind| catalog.get(kind));
        let kind = kind.ok_or_else(|| malformed(format_args!("no kind has the section {section}")))?;
        let columns = (0..reader.u32()?).map(|_| reader.column(kind)).collect::<Result<Vec<_>, _>>()?;
        let rows = reader.u32()?;
        let objects: &mut Vec<Object> = tables.entry(kind.kind.to_owned()).or_default();
        objects.reserve(rows as usize);
        let mut above = vec![None; kind.fields.len()];
        for _ in 0..rows {
            objects.push(reader.object(kind, &columns, &mut above)?);
        }
    }
    let mut bindings = Vec::new();
    for _ in 0..reader.u32()? {
        let (kind, name, id) = (reader.text()?, reader.text()?, reader.text()?);
        bindings.push(Binding { kind: kind.to_owned(), name: name.to_owned(), id: id.to_owned() });
    }
    let mut policies = Vec::new();
    for _ in 0..reader.u32()? {
        let (name, level, source) = (reader.text()?, reader.text()?, reader.text()?);
        let level = Level::parse(level).ok_or_else(|| malformed(format_args!("no policy level is {level:?}")))?;
        policies.push(Policy { name: name.to_owned(), level, source: source.to_owned() });
    }
    if reader.at != bytes.len() {
        return Err(malformed("bytes after the policies"));
    }
    Ok(Snapshot { caller: Caller::default(), modules, tables, bindings, policies })
}

/// What a table's name stands for.
#[derive(Clone, Copy)]
enum Column {
    Key,
    Archived,
    Field(usize),
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], Error> {
        let end = self.at.checked_add(count).filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| malformed("it ends early"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, Error> {
        let mut bytes = [0; 4];
        bytes.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(bytes))
    }

    fn u64(&mut self) -> Result<u64, Error> {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(bytes))
    }

    fn text(&mut self) -> Result<&'a str, Error> {
        let length = self.u32()? as usize;
        std::str::from_utf8(self.take(length)?).map_err(|_| malformed("a string is not UTF-8"))
    }

    /// A field's text, shared with the row above when it is the same (`above` holds that
    /// row's): the rows of a table mostly name the same few sites, accounts and classes,
    /// and comparing bytes costs less than checking them and copying them anew.
    fn shared_text(&mut self, above: &mut Option<Arc<str>>) -> Result<Arc<str>, Error> {
        let length = self.u32()? as usize;
        let bytes = self.take(length)?;
        if let Some(text) = above.as_ref().filter(|text| text.as_bytes() == bytes) {
            return Ok(text.clone());
        }
        let text: Arc<str> = std::str::from_utf8(bytes).map_err(|_| malformed("a string is not UTF-8"))?.into();
        *above = Some(text.clone());
        Ok(text)
    }

    fn column(&mut self, kind: &Descriptor) -> Result<Column, Error> {
        let name = self.text()?;
        if name == kind.identity_name() {
            Ok(Column::Key)
        } else if name == "archived" {
            Ok(Column::Archived)
        } else {
            let position = kind.position(name);
            position.map(Column::Field).ok_or_else(|| malformed(format_args!("{} has no field {name}", kind.a())))
        }
    }

    fn value(&mut self) -> Result<Value, Error> {
        Ok(match self.byte()? {
            TEXT => Value::Text(self.text()?.into()),
            COUNT => Value::Count(self.u64()?),
            BOOL => Value::Bool(self.byte()? != 0),
            MAP => {
                let mut map = StringMap::new();
                for _ in 0..self.u32()? {
                    let (key, value) = (self.text()?, self.text()?);
                    map.insert(key.to_owned(), value.to_owned());
                }
                Value::Map(map)
            }
            tag => return Err(malformed(format_args!("a value of unknown type {tag}"))),
        })
    }

    /// An object of `kind`; `above` holds the texts of the row above, by field.
    fn object(
        &mut self,
        kind: &Descriptor,
        columns: &[Column],
        above: &mut [Option<Arc<str>>],
    ) -> Result<Object, Error> {
        let mut key = None;
        let mut archived = false;
        let mut values: Vec<Value> = kind.fields.iter().map(|field| Value::default_of(field.ty)).collect();
        for _ in 0..self.u32()? {
            let column = self.u32()? as usize;
            let column = *columns.get(column).ok_or_else(|| malformed("a value of no column"))?;
            // Keys and texts are read in place; any other value whole, then checked.
            let text = self.bytes.get(self.at) == Some(&TEXT);
            match column {
                Column::Key if text => {
                    self.at += 1;
                    key = Some(self.text()?.to_owned());
                }
                Column::Field(position)
                    if text
                        && matches!(
                            kind.fields[position].ty,
                            FieldType::String | FieldType::Name | FieldType::Ref(_)
                        ) =>
                {
                    self.at += 1;
                    values[position] = Value::Text(self.shared_text(&mut above[position])?);
                }
                _ => match (column, self.value()?) {
                    (Column::Archived, Value::Bool(flag)) => archived = flag,
                    (Column::Field(position), value) if value.fits(kind.fields[position].ty) => {
                        values[position] = value
                    }
                    _ => return Err(malformed(format_args!("{} has a value of the wrong type", kind.a()))),
                },
            }
        }
        let key = key.ok_or_else(|| malformed(format_args!("{} has no {}", kind.a(), kind.identity_name())))?;
        Ok(Object { key, values, archived })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fixture() -> Json {
        json!({
            "caller": {"tenant": "acme", "principal": "alice"},
            "modules": ["site", "pool"],
            "sites": [{"id": "site_aaaaaaaaaaaaaaaaaaaaaaaaaa", "region": "r", "labels": {"b": "2", "a": "1"}}],
            "pools": [{"id": "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa", "site": "site_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                       "account": "acct_aaaaaaaaaaaaaaaaaaaaaaaaaa", "class": "cpu", "owner": "o", "gpus": 3,
                       "archived": true}],
            "ownerQuotas": [{"owner": "o", "instances": 4}],
            "bindings": [{"kind": "pool", "name": "p", "id": "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa"}]
        })
    }

    #[test]
    fn an_envelope_opens_to_what_was_put_in_and_a_cut_one_says_so() {
        let body = envelope(r#"{"caller": {}}"#, &[2, 0, 1]);
        assert_eq!(open_envelope(&body), Ok((r#"{"caller": {}}"#, [2, 0, 1].as_slice())));
        assert!(open_envelope(&body[..10]).unwrap_err().contains("cut short"));
        assert!(open_envelope(&body[..3]).is_err());
    }

    #[test]
    fn json_and_the_encoding_carry_the_same_state() {
        let catalog = Catalog::built_in();
        let snapshot = Snapshot::from_json(&catalog, &fixture()).unwrap();
        let pool = &snapshot.objects("pool")[0];
        assert!(pool.archived);
        assert_eq!(pool.values[6], Value::Count(3));
        assert_eq!(pool.values[4], Value::Count(0), "defaults fill absent fields");
        assert_eq!(snapshot.objects("ownerQuota")[0].key, "o");
        let mut decoded = decode(&catalog, &snapshot.encode(&catalog)).unwrap();
        decoded.caller = snapshot.caller.clone();
        assert_eq!(decoded, snapshot);
        let again = Snapshot::from_json(&catalog, &snapshot.to_json(&catalog)).unwrap();
        assert_eq!(again, snapshot);
    }

    /// A run of equal texts in a field is decoded into one shared copy; others are not.
    #[test]
    fn equal_texts_of_rows_in_a_row_are_shared() {
        let catalog = Catalog::built_in();
        let mut state = fixture();
        let pool = |id: &str, owner: &str| {
            json!({"id": id, "site": "site_aaaaaaaaaaaaaaaaaaaaaaaaaa", "account": "acct_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                   "class": "cpu", "owner": owner})
        };
        state["pools"] = json!([
            pool("pool_aaaaaaaaaaaaaaaaaaaaaaaaaa", "o"),
            pool("pool_bbbbbbbbbbbbbbbbbbbbbbbbbb", "p"),
            pool("pool_cccccccccccccccccccccccccc", "o")
        ]);
        let snapshot = Snapshot::from_json(&catalog, &state).unwrap();
        let decoded = decode(&catalog, &snapshot.encode(&catalog)).unwrap();
        assert_eq!(decoded.tables, snapshot.tables);
        let pools = decoded.objects("pool");
        let text = |row: usize, field: usize| match &pools[row].values[field] {
            Value::Text(text) => text.clone(),
            other => panic!("{other:?}"),
        };
        assert!(Arc::ptr_eq(&text(0, 0), &text(2, 0)), "the site, in every row");
        assert!(!Arc::ptr_eq(&text(0, 3), &text(2, 3)), "the owner, equal but not to the row above");
        assert_eq!(text(0, 3), text(2, 3));
    }

    #[test]
    fn malformed_states_are_errors_not_panics() {
        let catalog = Catalog::built_in();
        let bytes = Snapshot::from_json(&catalog, &fixture()).unwrap().encode(&catalog);
        for end in 0..bytes.len() {
            assert!(decode(&catalog, &bytes[..end]).is_err(), "cut at {end}");
        }
        let mut wrong_type = fixture();
        wrong_type["pools"][0]["gpus"] = json!("three");
        let error = Snapshot::from_json(&catalog, &wrong_type).unwrap_err();
        assert_eq!(error.code, ErrorCode::Internal);
        assert!(error.message.contains("a pool has a value of the wrong type"), "{}", error.message);
        let mut unknown = fixture();
        unknown["pools"][0]["colour"] = json!("red");
        assert!(Snapshot::from_json(&catalog, &unknown).unwrap_err().message.contains("no field colour"));
        let mut version = bytes.clone();
        version[0] = 9;
        assert!(decode(&catalog, &version).unwrap_err().message.contains("version 9"));
    }
}

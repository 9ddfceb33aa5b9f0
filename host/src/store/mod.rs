//! The one storage layer of module objects, from the descriptors: a kind's table is
//! named by its group (a plugin's is `plugin_<group>`, made at start), its columns by
//! its fields in snake_case (quoted, so that any field name is a column), maps as JSON
//! text, counts and bools as integers. The module handlers, the planner's state and the
//! preview's snapshot all read through here.
//!
//! The handlers reach objects through [`Objects`]: the database itself for an API
//! call, or, inside an apply, the apply's [`Overlay`] over it, which keeps the calls'
//! writes in memory and writes them when the apply records itself, many rows to a
//! statement, so that an apply is not bound by round trips to the database (SPEC §12).

mod encode;
mod objects;
mod overlay;
mod rows;
mod tables;
pub mod trail;

use std::collections::HashMap;
use std::rc::Rc;

use fleet_guest::kinds::{Descriptor, FieldType};
use serde_json::{Map, Value};

use crate::db::{self, Row};

pub use encode::encode_table;
pub use objects::Objects;
pub use overlay::Overlay;
pub use rows::load_all;
pub use tables::prepare_plugin_table;

/// One stored object: its key (id, or the identity field's value), its fields by wire
/// name.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub key: String,
    pub fields: Map<String, Value>,
    pub archived: bool,
    pub created_at: String,
    pub updated_at: String,
}

impl Object {
    pub fn text(&self, field: &str) -> &str {
        self.fields.get(field).and_then(Value::as_str).unwrap_or_default()
    }

    /// The object as the API writes it.
    pub fn to_json(&self, kind: &Descriptor) -> Value {
        let mut object = Map::new();
        object.insert(kind.identity_name().into(), Value::String(self.key.clone()));
        for field in kind.fields {
            object.insert(field.name.into(), self.fields.get(field.name).cloned().unwrap_or(Value::Null));
        }
        if kind.archives() {
            object.insert("archived".into(), Value::Bool(self.archived));
        }
        object.insert("createdAt".into(), Value::String(self.created_at.clone()));
        object.insert("updatedAt".into(), Value::String(self.updated_at.clone()));
        Value::Object(object)
    }
}

/// The column of a field: its wire name in snake_case, quoted.
pub fn column(name: &str) -> String {
    format!("\"{}\"", fleet_guest::grammar::camel_words(name, '_'))
}

/// The table of a kind: the group's for the built-in kinds (migrations make them), and
/// `"plugin_<group>"` for a plugin's (made by [`prepare_plugin_table`]), which no
/// built-in or fleet table can be.
pub fn table(kind: &Descriptor) -> String {
    if kind.plugin { format!("\"{}\"", plugin_table(kind)) } else { kind.group.to_owned() }
}

/// A plugin kind's table name, unquoted.
pub(super) fn plugin_table(kind: &Descriptor) -> String {
    format!("plugin_{}", kind.group)
}

/// The identity column, then one per field.
pub(super) fn columns(kind: &Descriptor) -> Vec<String> {
    let mut columns = vec![column(kind.identity_name())];
    columns.extend(kind.fields.iter().map(|field| column(field.name)));
    columns
}

pub(super) fn select(kind: &Descriptor) -> String {
    let archived = if kind.archives() { "archived" } else { "0" };
    format!(
        "SELECT {}, {archived}, created_at, updated_at FROM {} WHERE tenant = ?1",
        columns(kind).join(", "),
        table(kind)
    )
}

/// The statements the handlers and the planner's state run for every object: their text
/// is made once per kind and thread, not on every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Statement {
    /// Every object of the tenant, ordered by key.
    All,
    /// With idempotency keys, for an apply's overlay.
    AllStored,
    StoredByKey,
    StoredByIdempotencyKey,
    ByKey,
    ByIdempotencyKey,
    IsLive,
    Insert,
    Upsert,
    Delete,
    ReleaseIdempotencyKey,
}

/// What a kind's statements are made of: its static parts, which name it for as long as
/// the process runs (a plugin's descriptor is leaked, never freed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Shape {
    kind: &'static str,
    group: &'static str,
    identity: &'static str,
    fields: (usize, usize),
    archives: bool,
    upserted: bool,
    plugin: bool,
}

impl Shape {
    fn of(kind: &Descriptor) -> Shape {
        Shape {
            kind: kind.kind,
            group: kind.group,
            identity: kind.identity_name(),
            fields: (kind.fields.as_ptr() as usize, kind.fields.len()),
            archives: kind.archives(),
            upserted: kind.upserted(),
            plugin: kind.plugin,
        }
    }
}

thread_local! {
    static STATEMENTS: std::cell::RefCell<HashMap<(Shape, Statement), Rc<str>>> = Default::default();
}

/// The text of `which` for `kind`, made by `make` the first time this thread needs it.
pub(super) fn statement(kind: &Descriptor, which: Statement, make: impl FnOnce() -> String) -> Rc<str> {
    let key = (Shape::of(kind), which);
    if let Some(sql) = STATEMENTS.with_borrow(|statements| statements.get(&key).cloned()) {
        return sql;
    }
    let sql: Rc<str> = make().into();
    STATEMENTS.with_borrow_mut(|statements| statements.insert(key, sql.clone()));
    sql
}

pub(super) fn count(row: &Row, index: usize) -> Result<u64, db::Error> {
    Ok(row.get::<i64>(index)?.max(0) as u64)
}

pub(super) fn read_row(kind: &Descriptor, row: &Row) -> Result<Object, db::Error> {
    let mut fields = Map::new();
    for (offset, field) in kind.fields.iter().enumerate() {
        let index = offset + 1;
        let value = match field.ty {
            FieldType::Count => Value::from(count(row, index)?),
            FieldType::Bool => Value::Bool(row.get(index)?),
            FieldType::Map => serde_json::from_str(row.text(index)?).map_err(|error| db::decode(index, error))?,
            FieldType::String | FieldType::Name | FieldType::Ref(_) => Value::String(row.get(index)?),
        };
        fields.insert(field.name.into(), value);
    }
    let index = kind.fields.len() + 1;
    Ok(Object {
        key: row.get(0)?,
        fields,
        archived: row.get(index)?,
        created_at: row.get(index + 1)?,
        updated_at: row.get(index + 2)?,
    })
}

/// An object and the idempotency key it holds.
#[derive(Clone)]
struct Stored {
    object: Object,
    idempotency_key: Option<String>,
}

#[cfg(test)]
mod tests;

//! The one storage layer of module objects, from the descriptors: a kind's table is
//! named by its group (a plugin's is `plugin_<group>`, made at start), its columns by
//! its fields in snake_case (quoted, so that any field name is a column), maps as JSON
//! text, counts and bools as integers. The module handlers, the planner's state and the
//! preview's snapshot all read through here.

use fleet_guest::kinds::{Descriptor, FieldType};
use fleet_guest::state::{RowWriter, StateWriter};
use rusqlite::types::{Type, ValueRef};
use rusqlite::{Connection, OptionalExtension, Row, ToSql, params_from_iter};
use serde_json::{Map, Value};

use crate::api::ApiError;

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
fn plugin_table(kind: &Descriptor) -> String {
    format!("plugin_{}", kind.group)
}

/// The SQL type of a field's column, and the default of its values.
fn sql_type(ty: FieldType) -> (&'static str, &'static str) {
    match ty {
        FieldType::Count | FieldType::Bool => ("INTEGER", "0"),
        FieldType::Map => ("TEXT", "'{}'"),
        FieldType::String | FieldType::Name | FieldType::Ref(_) => ("TEXT", "''"),
    }
}

/// Makes (or completes) the table of a plugin kind, in the shape of the built-in ones,
/// with the triggers that count the tenant's state generation (migration 0008). A field
/// the plugin added since gets a column holding its default; a column of a field the
/// plugin dropped stays, unread. A field whose type changed over existing data is
/// refused. A read-only database is only checked.
pub fn prepare_plugin_table(db: &Connection, kind: &Descriptor, read_only: bool) -> anyhow::Result<()> {
    let table = table(kind);
    let existing: Vec<(String, String)> = db
        .prepare(&format!("SELECT name, type FROM pragma_table_info('{}')", plugin_table(kind)))?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut statements = Vec::new();
    if existing.is_empty() {
        statements.push(format!(
            "CREATE TABLE IF NOT EXISTS {table} (tenant TEXT NOT NULL REFERENCES tenants (name), id TEXT NOT NULL, \
             archived INTEGER NOT NULL DEFAULT 0, idempotency_key TEXT, created_at TEXT NOT NULL, \
             updated_at TEXT NOT NULL, PRIMARY KEY (tenant, id), UNIQUE (tenant, idempotency_key)) STRICT"
        ));
        for (event, row) in [("insert", "NEW"), ("update", "NEW"), ("delete", "OLD")] {
            statements.push(format!(
                "CREATE TRIGGER IF NOT EXISTS \"{name}_{event}_bumps_state\" AFTER {event} ON {table} BEGIN \
                 UPDATE generations SET generation = generation + 1 WHERE tenant = {row}.tenant AND what = 'state'; END",
                name = plugin_table(kind),
            ));
        }
    }
    for field in kind.fields {
        let name = fleet_guest::grammar::camel_words(field.name, '_');
        let (ty, default) = sql_type(field.ty);
        match existing.iter().find(|(column, _)| *column == name) {
            Some((_, had)) if had != ty => anyhow::bail!(
                "field {} is stored as {had} and the plugin now declares it as {ty}: a field's type cannot change \
                 over existing objects",
                field.name
            ),
            Some(_) => {}
            None => statements
                .push(format!("ALTER TABLE {table} ADD COLUMN {} {ty} NOT NULL DEFAULT {default}", column(field.name))),
        }
    }
    if statements.is_empty() {
        return Ok(());
    }
    if read_only {
        anyhow::bail!("the database has no table (or not every column) for it: serve it once without --read-only");
    }
    db.execute_batch(&format!("BEGIN IMMEDIATE; {}; COMMIT;", statements.join("; ")))?;
    Ok(())
}

/// The identity column, then one per field.
fn columns(kind: &Descriptor) -> Vec<String> {
    let mut columns = vec![column(kind.identity_name())];
    columns.extend(kind.fields.iter().map(|field| column(field.name)));
    columns
}

fn select(kind: &Descriptor) -> String {
    let archived = if kind.archives() { "archived" } else { "0" };
    format!(
        "SELECT {}, {archived}, created_at, updated_at FROM {} WHERE tenant = ?1",
        columns(kind).join(", "),
        table(kind)
    )
}

fn conversion_failed(index: usize, error: impl std::error::Error + Send + Sync + 'static) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(index, Type::Text, Box::new(error))
}

fn count(row: &Row, index: usize) -> rusqlite::Result<u64> {
    Ok(row.get::<_, i64>(index)?.max(0) as u64)
}

fn read_row(kind: &Descriptor, row: &Row) -> rusqlite::Result<Object> {
    let mut fields = Map::new();
    for (offset, field) in kind.fields.iter().enumerate() {
        let index = offset + 1;
        let value = match field.ty {
            FieldType::Count => Value::from(count(row, index)?),
            FieldType::Bool => Value::Bool(row.get(index)?),
            FieldType::Map => {
                serde_json::from_str(row.get_ref(index)?.as_str()?).map_err(|error| conversion_failed(index, error))?
            }
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

/// Every object of the tenant, ordered by key.
pub fn load_all(db: &Connection, kind: &Descriptor, tenant: &str) -> Result<Vec<Object>, ApiError> {
    let sql = format!("{} ORDER BY {}", select(kind), column(kind.identity_name()));
    let mut statement = db.prepare_cached(&sql)?;
    let rows = statement.query_map([tenant], |row| read_row(kind, row))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The tenant's object of `kind` with this key.
pub fn load(db: &Connection, kind: &Descriptor, tenant: &str, key: &str) -> Result<Option<Object>, ApiError> {
    load_where(db, kind, tenant, &column(kind.identity_name()), key)
}

/// The tenant's object of `kind` made with this idempotency key.
pub fn load_by_idempotency_key(
    db: &Connection,
    kind: &Descriptor,
    tenant: &str,
    idempotency_key: &str,
) -> Result<Option<Object>, ApiError> {
    load_where(db, kind, tenant, "idempotency_key", idempotency_key)
}

/// The tenant's object of `kind` whose (unique) column `column` is `value`.
fn load_where(
    db: &Connection,
    kind: &Descriptor,
    tenant: &str,
    column: &str,
    value: &str,
) -> Result<Option<Object>, ApiError> {
    let sql = format!("{} AND {column} = ?2", select(kind));
    let mut statement = db.prepare_cached(&sql)?;
    Ok(statement.query_row([tenant, value], |row| read_row(kind, row)).optional()?)
}

/// The keys of the tenant's live objects of `kind` whose field `field` is `value`,
/// sorted.
pub fn live_keys_where(
    db: &Connection,
    kind: &Descriptor,
    tenant: &str,
    field: &str,
    value: &str,
) -> Result<Vec<String>, ApiError> {
    let live = if kind.archives() { " AND archived = 0" } else { "" };
    let identity = column(kind.identity_name());
    let sql = format!(
        "SELECT {identity} FROM {} WHERE tenant = ?1 AND {} = ?2{live} ORDER BY {identity}",
        table(kind),
        column(field)
    );
    let mut statement = db.prepare_cached(&sql)?;
    let keys = statement.query_map([tenant, value], |row| row.get(0))?;
    Ok(keys.collect::<Result<_, _>>()?)
}

fn sql_value(ty: FieldType, value: &Value) -> Box<dyn ToSql> {
    match ty {
        FieldType::Count => Box::new(value.as_i64().unwrap_or_default()),
        FieldType::Bool => Box::new(value.as_bool().unwrap_or_default()),
        FieldType::Map => Box::new(value.to_string()),
        FieldType::String | FieldType::Name | FieldType::Ref(_) => {
            Box::new(value.as_str().unwrap_or_default().to_owned())
        }
    }
}

/// Writes the whole object (insert or replace by key).
pub fn write(
    db: &Connection,
    kind: &Descriptor,
    tenant: &str,
    object: &Object,
    idempotency_key: Option<&str>,
) -> Result<(), ApiError> {
    let mut names = vec!["tenant".to_owned()];
    let mut values: Vec<Box<dyn ToSql>> = vec![Box::new(tenant.to_owned())];
    names.extend(columns(kind));
    values.push(Box::new(object.key.clone()));
    for field in kind.fields {
        values.push(sql_value(field.ty, object.fields.get(field.name).unwrap_or(&Value::Null)));
    }
    if kind.archives() {
        names.push("archived".into());
        values.push(Box::new(object.archived));
    }
    if !kind.upserted() {
        names.push("idempotency_key".into());
        values.push(Box::new(idempotency_key.map(str::to_owned)));
    }
    names.extend(["created_at".to_owned(), "updated_at".to_owned()]);
    values.push(Box::new(object.created_at.clone()));
    values.push(Box::new(object.updated_at.clone()));
    let placeholders: Vec<String> = (1..=names.len()).map(|index| format!("?{index}")).collect();
    let identity = column(kind.identity_name());
    let assignments: Vec<String> = names
        .iter()
        .filter(|name| !matches!(name.as_str(), "tenant" | "created_at" | "idempotency_key") && **name != identity)
        .map(|name| format!("{name} = excluded.{name}"))
        .collect();
    let sql = format!(
        "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (tenant, {identity}) DO UPDATE SET {}",
        table(kind),
        names.join(", "),
        placeholders.join(", "),
        assignments.join(", ")
    );
    db.prepare_cached(&sql)?.execute(params_from_iter(values.iter()))?;
    Ok(())
}

pub fn delete(db: &Connection, kind: &Descriptor, tenant: &str, key: &str) -> Result<(), ApiError> {
    let sql = format!("DELETE FROM {} WHERE tenant = ?1 AND {} = ?2", table(kind), column(kind.identity_name()));
    db.prepare_cached(&sql)?.execute([tenant, key])?;
    Ok(())
}

/// Frees an idempotency key held by an archived object.
pub fn release_idempotency_key(db: &Connection, kind: &Descriptor, tenant: &str, key: &str) -> Result<(), ApiError> {
    let sql = format!("UPDATE {} SET idempotency_key = NULL WHERE tenant = ?1 AND id = ?2", table(kind));
    db.prepare_cached(&sql)?.execute([tenant, key])?;
    Ok(())
}

/// Writes the tenant's objects of `kind` as a table of the planner's state encoding,
/// straight from the rows: this is the hot path of every plan.
pub fn encode_table(db: &Connection, kind: &Descriptor, tenant: &str, state: &mut StateWriter) -> Result<(), ApiError> {
    let sql = format!("{} ORDER BY {}", select(kind), column(kind.identity_name()));
    let mut statement = db.prepare_cached(&sql)?;
    let mut rows = statement.query([tenant])?;
    let mut table = state.kind_table(kind);
    while let Some(row) = rows.next()? {
        let mut writer = table.row(kind.fields.len() + 2);
        writer.text(0, row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?);
        writer.flag(1, row.get(kind.fields.len() + 1)?);
        for (offset, field) in kind.fields.iter().enumerate() {
            encode_value(row, offset + 1, field.ty, offset + 2, &mut writer)?;
        }
    }
    Ok(())
}

fn encode_value(row: &Row, index: usize, ty: FieldType, column: usize, writer: &mut RowWriter) -> Result<(), ApiError> {
    match ty {
        FieldType::Count => writer.count(column, count(row, index)?),
        FieldType::Bool => writer.flag(column, row.get(index)?),
        FieldType::Map => {
            let map: std::collections::BTreeMap<String, String> =
                serde_json::from_str(row.get_ref(index)?.as_str().map_err(rusqlite::Error::from)?)
                    .map_err(|error| conversion_failed(index, error))?;
            writer.map(column, map.iter().map(|(key, value)| (key.as_str(), value.as_str())));
        }
        FieldType::String | FieldType::Name | FieldType::Ref(_) => match row.get_ref(index)? {
            ValueRef::Text(text) => writer.text(column, std::str::from_utf8(text).map_err(ApiError::internal)?),
            _ => return Err(ApiError::internal(format_args!("column {index} is not text"))),
        },
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use fleet_guest::kinds::BUILT_IN;

    /// A descriptor field without its column (or a column of another type) fails here,
    /// not in a request: every kind's objects round-trip through a migrated database.
    #[test]
    fn every_built_in_kind_has_its_table_and_columns() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open_with(&dir.path().join("fleet.db"), crate::db::Options::default()).unwrap();
        let db = pool.get().unwrap();
        crate::calls::auth::create_tenant(&db, "acme", "2026-11-30T00:00:00Z").unwrap();
        for kind in BUILT_IN {
            let fields = kind
                .fields
                .iter()
                .map(|field| {
                    let value = serde_json::to_value(fleet_guest::Value::default_of(field.ty)).unwrap();
                    (field.name.to_owned(), value)
                })
                .collect();
            let now = "2026-11-30T00:00:00Z".to_owned();
            let key = match kind.id_prefix() {
                Some(prefix) => super::super::new_id(prefix),
                None => "team-ml".to_owned(),
            };
            let object =
                super::Object { key: key.clone(), fields, archived: false, created_at: now.clone(), updated_at: now };
            super::write(&db, kind, "acme", &object, None).unwrap();
            assert_eq!(super::load(&db, kind, "acme", &key).unwrap(), Some(object), "{}", kind.kind);
            let mut state = fleet_guest::state::StateWriter::new();
            state.modules([kind.kind]);
            super::encode_table(&db, kind, "acme", &mut state).unwrap();
            state.bindings([]);
            let snapshot = fleet_guest::state::decode(&fleet_guest::Catalog::built_in(), &state.finish()).unwrap();
            assert_eq!(snapshot.objects(kind.kind).len(), 1, "{}", kind.kind);
        }
    }

    #[test]
    fn columns_are_snake_case_and_quoted() {
        assert_eq!(super::column("memoryMib"), "\"memory_mib\"");
        assert_eq!(super::column("to"), "\"to\"");
        assert_eq!(super::column("credentialsRef"), "\"credentials_ref\"");
    }
}

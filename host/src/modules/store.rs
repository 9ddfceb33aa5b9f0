//! The one storage layer of module objects, from the descriptors: a kind's table is
//! named by its group (a plugin's is `plugin_<group>`, made at start), its columns by
//! its fields in snake_case (quoted, so that any field name is a column), maps as JSON
//! text, counts and bools as integers. The module handlers, the planner's state and the
//! preview's snapshot all read through here.

use fleet_guest::kinds::{Descriptor, FieldType};
use fleet_guest::state::{RowWriter, StateWriter};
use std::collections::HashMap;
use std::rc::Rc;

use serde_json::{Map, Value};

use crate::api::ApiError;
use crate::db::{self, Backend, Conn, Param, Row, Tx};
use crate::params;

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

/// The SQL type of a field's column on `backend`, and the default of its values.
fn sql_type(backend: Backend, ty: FieldType) -> (&'static str, &'static str) {
    match (ty, backend) {
        (FieldType::Count | FieldType::Bool, Backend::Sqlite) => ("INTEGER", "0"),
        (FieldType::Count | FieldType::Bool, Backend::Postgres) => ("BIGINT", "0"),
        (FieldType::Map, _) => ("TEXT", "'{}'"),
        (FieldType::String | FieldType::Name | FieldType::Ref(_), _) => ("TEXT", "''"),
    }
}

/// The columns of a table as `(name, SQL type)`; none if it does not exist.
fn table_columns(db: &Conn, table: &str) -> Result<Vec<(String, String)>, db::Error> {
    let sql = match db.backend() {
        Backend::Sqlite => "SELECT name, type FROM pragma_table_info(?1)",
        Backend::Postgres => {
            "SELECT column_name::text, data_type::text FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = ?1"
        }
    };
    db.query(sql, params![table], |row| Ok((row.get(0)?, row.get(1)?)))
}

/// The statements that make a plugin kind's table on `backend`, in the shape of the
/// built-in ones.
fn create_plugin_table(backend: Backend, kind: &Descriptor) -> Vec<String> {
    let (table, name) = (table(kind), plugin_table(kind));
    let (integer, _) = sql_type(backend, FieldType::Bool);
    let strict = if backend == Backend::Sqlite { " STRICT" } else { "" };
    let mut statements = vec![format!(
        "CREATE TABLE IF NOT EXISTS {table} (tenant TEXT NOT NULL REFERENCES tenants (name), id TEXT NOT NULL, \
         archived {integer} NOT NULL DEFAULT 0, idempotency_key TEXT, created_at TEXT NOT NULL, \
         updated_at TEXT NOT NULL, PRIMARY KEY (tenant, id), UNIQUE (tenant, idempotency_key)){strict}"
    )];
    match backend {
        Backend::Sqlite => {
            for (event, row) in [("insert", "NEW"), ("update", "NEW"), ("delete", "OLD")] {
                statements.push(format!(
                    "CREATE TRIGGER IF NOT EXISTS \"{name}_{event}_bumps_state\" AFTER {event} ON {table} BEGIN \
                     UPDATE generations SET generation = generation + 1 WHERE tenant = {row}.tenant AND what = 'state'; END"
                ));
            }
        }
        Backend::Postgres => statements.push(format!(
            "CREATE TRIGGER \"{name}_bumps_state\" AFTER INSERT OR UPDATE OR DELETE ON {table} \
             FOR EACH ROW EXECUTE FUNCTION fleet_bump_generation('state')"
        )),
    }
    statements
}

/// Makes (or completes) the table of a plugin kind, in the shape of the built-in ones,
/// with the triggers that count the tenant's state generation (migration 0008). A field
/// the plugin added since gets a column holding its default; a column of a field the
/// plugin dropped stays, unread. A field whose type changed over existing data is
/// refused. A read-only database is only checked.
///
/// Replicas that start together make it once: the check and the change are one
/// transaction under the schema lock.
pub fn prepare_plugin_table(db: &Conn, kind: &Descriptor, read_only: bool) -> anyhow::Result<()> {
    db::begin(db, if read_only { Tx::Read } else { Tx::Schema })?;
    match plugin_table_changes(db, kind, read_only) {
        Ok(()) => Ok(db::finish(db, Ok(()))?),
        Err(error) => {
            let _ = db::finish::<()>(db, Err(ApiError::internal(&error)));
            Err(error)
        }
    }
}

fn plugin_table_changes(db: &Conn, kind: &Descriptor, read_only: bool) -> anyhow::Result<()> {
    let table = table(kind);
    let backend = db.backend();
    let existing = table_columns(db, &plugin_table(kind))?;
    let mut statements = Vec::new();
    if existing.is_empty() {
        statements = create_plugin_table(backend, kind);
    }
    for field in kind.fields {
        let name = fleet_guest::grammar::camel_words(field.name, '_');
        let (ty, default) = sql_type(backend, field.ty);
        match existing.iter().find(|(column, _)| *column == name) {
            Some((_, had)) if !had.eq_ignore_ascii_case(ty) => anyhow::bail!(
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
    db.batch(&statements.join("; "))?;
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

/// The statements the handlers and the planner's state run for every object: their text
/// is made once per kind and thread, not on every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Statement {
    /// Every object of the tenant, ordered by key.
    All,
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
struct Shape {
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
fn statement(kind: &Descriptor, which: Statement, make: impl FnOnce() -> String) -> Rc<str> {
    let key = (Shape::of(kind), which);
    if let Some(sql) = STATEMENTS.with_borrow(|statements| statements.get(&key).cloned()) {
        return sql;
    }
    let sql: Rc<str> = make().into();
    STATEMENTS.with_borrow_mut(|statements| statements.insert(key, sql.clone()));
    sql
}

fn count(row: &Row, index: usize) -> Result<u64, db::Error> {
    Ok(row.get::<i64>(index)?.max(0) as u64)
}

fn read_row(kind: &Descriptor, row: &Row) -> Result<Object, db::Error> {
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

/// Every object of the tenant, ordered by key.
pub fn load_all(db: &Conn, kind: &Descriptor, tenant: &str) -> Result<Vec<Object>, ApiError> {
    let sql = select_all(kind);
    Ok(db.query(&sql, params![tenant], |row| read_row(kind, row))?)
}

fn select_all(kind: &Descriptor) -> Rc<str> {
    statement(kind, Statement::All, || format!("{} ORDER BY {}", select(kind), column(kind.identity_name())))
}

/// The tenant's object of `kind` with this key.
pub fn load(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<Option<Object>, ApiError> {
    load_where(db, kind, tenant, Statement::ByKey, key)
}

/// Whether the tenant has a live (not archived) object of `kind` with this key: one
/// indexed lookup that reads no fields.
pub fn is_live(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<bool, ApiError> {
    let sql = statement(kind, Statement::IsLive, || {
        let archived = if kind.archives() { "archived = 0" } else { "1 = 1" };
        format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE tenant = ?1 AND {} = ?2 AND {archived})",
            table(kind),
            column(kind.identity_name())
        )
    });
    Ok(db.query_one(&sql, params![tenant, key], |row| row.get(0))?)
}

/// The tenant's object of `kind` made with this idempotency key.
pub fn load_by_idempotency_key(
    db: &Conn,
    kind: &Descriptor,
    tenant: &str,
    idempotency_key: &str,
) -> Result<Option<Object>, ApiError> {
    load_where(db, kind, tenant, Statement::ByIdempotencyKey, idempotency_key)
}

/// The tenant's object of `kind` whose key (`ByKey`) or idempotency key
/// (`ByIdempotencyKey`) is `value`.
fn load_where(
    db: &Conn,
    kind: &Descriptor,
    tenant: &str,
    which: Statement,
    value: &str,
) -> Result<Option<Object>, ApiError> {
    let sql = statement(kind, which, || {
        let column = match which {
            Statement::ByIdempotencyKey => "idempotency_key".to_owned(),
            _ => column(kind.identity_name()),
        };
        format!("{} AND {column} = ?2", select(kind))
    });
    Ok(db.query_opt(&sql, params![tenant, value], |row| read_row(kind, row))?)
}

/// The keys of the tenant's live objects of `kind` whose field `field` is `value`,
/// sorted.
pub fn live_keys_where(
    db: &Conn,
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
    Ok(db.query(&sql, params![tenant, value], |row| row.get(0))?)
}

/// A field's value as its column holds it; a map's JSON text is made by the caller.
fn sql_value<'a>(ty: FieldType, value: &'a Value, map: Option<&'a str>) -> Param<'a> {
    match ty {
        FieldType::Count => Param::Int(value.as_i64().unwrap_or_default()),
        FieldType::Bool => Param::Bool(value.as_bool().unwrap_or_default()),
        FieldType::Map => Param::Text(map.unwrap_or("{}")),
        FieldType::String | FieldType::Name | FieldType::Ref(_) => Param::Text(value.as_str().unwrap_or_default()),
    }
}

/// Writes the whole object over the one stored with its key (or as a new one); the
/// stored object keeps its idempotency key and creation time.
pub fn write(db: &Conn, kind: &Descriptor, tenant: &str, object: &Object) -> Result<(), ApiError> {
    store(db, kind, tenant, object, None, true)
}

/// Writes a new object, made with `idempotency_key` if given; an object already stored
/// with its key is an error of the database (the caller made sure there is none, or
/// made the key itself).
pub fn insert(
    db: &Conn,
    kind: &Descriptor,
    tenant: &str,
    object: &Object,
    idempotency_key: Option<&str>,
) -> Result<(), ApiError> {
    store(db, kind, tenant, object, idempotency_key, false)
}

fn store(
    db: &Conn,
    kind: &Descriptor,
    tenant: &str,
    object: &Object,
    idempotency_key: Option<&str>,
    replace: bool,
) -> Result<(), ApiError> {
    let field_values: Vec<&Value> =
        kind.fields.iter().map(|field| object.fields.get(field.name).unwrap_or(&Value::Null)).collect();
    let maps: Vec<Option<String>> = kind
        .fields
        .iter()
        .zip(&field_values)
        .map(|(field, value)| (field.ty == FieldType::Map).then(|| value.to_string()))
        .collect();
    // In the order of `stored_columns`.
    let mut values = vec![Param::Text(tenant), Param::Text(&object.key)];
    for ((field, value), map) in kind.fields.iter().zip(&field_values).zip(&maps) {
        values.push(sql_value(field.ty, value, map.as_deref()));
    }
    if kind.archives() {
        values.push(Param::Bool(object.archived));
    }
    if !kind.upserted() {
        values.push(idempotency_key.into());
    }
    values.push(Param::Text(&object.created_at));
    values.push(Param::Text(&object.updated_at));
    let sql = match replace {
        true => statement(kind, Statement::Upsert, || insert_statement(kind, true)),
        false => statement(kind, Statement::Insert, || insert_statement(kind, false)),
    };
    db.execute(&sql, &values)?;
    Ok(())
}

/// Every column a stored object writes, in the order of `store`'s values.
fn stored_columns(kind: &Descriptor) -> Vec<String> {
    let mut names = vec!["tenant".to_owned()];
    names.extend(columns(kind));
    if kind.archives() {
        names.push("archived".into());
    }
    if !kind.upserted() {
        names.push("idempotency_key".into());
    }
    names.extend(["created_at".to_owned(), "updated_at".to_owned()]);
    names
}

/// The insert of an object; with `replace`, one that writes over the object stored with
/// its key, which keeps its idempotency key and creation time.
fn insert_statement(kind: &Descriptor, replace: bool) -> String {
    let names = stored_columns(kind);
    let placeholders: Vec<String> = (1..=names.len()).map(|index| format!("?{index}")).collect();
    let mut sql = format!("INSERT INTO {} ({}) VALUES ({})", table(kind), names.join(", "), placeholders.join(", "));
    if replace {
        let identity = column(kind.identity_name());
        let assignments: Vec<String> = names
            .iter()
            .filter(|name| !matches!(name.as_str(), "tenant" | "created_at" | "idempotency_key") && **name != identity)
            .map(|name| format!("{name} = excluded.{name}"))
            .collect();
        sql.push_str(&format!(" ON CONFLICT (tenant, {identity}) DO UPDATE SET {}", assignments.join(", ")));
    }
    sql
}

pub fn delete(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<(), ApiError> {
    let sql = statement(kind, Statement::Delete, || {
        format!("DELETE FROM {} WHERE tenant = ?1 AND {} = ?2", table(kind), column(kind.identity_name()))
    });
    db.execute(&sql, params![tenant, key])?;
    Ok(())
}

/// Frees an idempotency key held by an archived object.
pub fn release_idempotency_key(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<(), ApiError> {
    let sql = statement(kind, Statement::ReleaseIdempotencyKey, || {
        format!("UPDATE {} SET idempotency_key = NULL WHERE tenant = ?1 AND id = ?2", table(kind))
    });
    db.execute(&sql, params![tenant, key])?;
    Ok(())
}

/// Writes the tenant's objects of `kind` as a table of the planner's state encoding,
/// straight from the rows: this is the hot path of every plan.
pub fn encode_table(db: &Conn, kind: &Descriptor, tenant: &str, state: &mut StateWriter) -> Result<(), ApiError> {
    let sql = select_all(kind);
    let mut table = state.kind_table(kind);
    db.for_each(&sql, params![tenant], |row| {
        let mut writer = table.row(kind.fields.len() + 2);
        writer.text(0, row.text(0)?);
        writer.flag(1, row.get(kind.fields.len() + 1)?);
        for (offset, field) in kind.fields.iter().enumerate() {
            encode_value(row, offset + 1, field.ty, offset + 2, &mut writer)?;
        }
        Ok(())
    })?;
    Ok(())
}

fn encode_value(
    row: &Row,
    index: usize,
    ty: FieldType,
    column: usize,
    writer: &mut RowWriter,
) -> Result<(), db::Error> {
    match ty {
        FieldType::Count => writer.count(column, count(row, index)?),
        FieldType::Bool => writer.flag(column, row.get(index)?),
        FieldType::Map => {
            let map: std::collections::BTreeMap<String, String> =
                serde_json::from_str(row.text(index)?).map_err(|error| db::decode(index, error))?;
            writer.map(column, map.iter().map(|(key, value)| (key.as_str(), value.as_str())));
        }
        FieldType::String | FieldType::Name | FieldType::Ref(_) => writer.text(column, row.text(index)?),
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
            super::insert(&db, kind, "acme", &object, None).unwrap();
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

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

use fleet_guest::kinds::{Descriptor, FieldType};
use fleet_guest::state::{RowWriter, StateWriter};
use std::cell::RefCell;
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
        // Once per statement (migration 0011); transition tables take one event each.
        Backend::Postgres => {
            for (event, rows) in [("insert", "NEW"), ("update", "NEW"), ("delete", "OLD")] {
                statements.push(format!(
                    "CREATE TRIGGER \"{name}_bumps_state_{event}\" AFTER {event} ON {table} \
                     REFERENCING {rows} TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION fleet_bump_generations('state')"
                ));
            }
        }
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

/// The objects of the tenant with their idempotency keys: all of them (`AllStored`),
/// or the one whose key (`StoredByKey`) or idempotency key (`StoredByIdempotencyKey`)
/// is `value`.
fn load_stored(
    db: &Conn,
    kind: &Descriptor,
    tenant: &str,
    which: Statement,
    value: &str,
) -> Result<Vec<Stored>, ApiError> {
    let sql = statement(kind, which, || {
        let archived = if kind.archives() { "archived" } else { "0" };
        let idempotency = if kind.upserted() { "NULL" } else { "idempotency_key" };
        let all = format!(
            "SELECT {}, {archived}, created_at, updated_at, {idempotency} FROM {} WHERE tenant = ?1",
            columns(kind).join(", "),
            table(kind)
        );
        match which {
            Statement::StoredByKey => format!("{all} AND {} = ?2", column(kind.identity_name())),
            Statement::StoredByIdempotencyKey => format!("{all} AND idempotency_key = ?2"),
            _ => all,
        }
    });
    let column = kind.fields.len() + 4;
    let read = |row: &Row| Ok(Stored { object: read_row(kind, row)?, idempotency_key: row.get(column)? });
    Ok(match which {
        Statement::AllStored => db.query(&sql, params![tenant], read)?,
        _ => db.query(&sql, params![tenant, value], read)?,
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
fn load(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<Option<Object>, ApiError> {
    load_where(db, kind, tenant, Statement::ByKey, key)
}

/// Whether the tenant has a live (not archived) object of `kind` with this key: one
/// indexed lookup that reads no fields.
fn is_live(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<bool, ApiError> {
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
fn load_by_idempotency_key(
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
fn live_keys_where(
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
fn write(db: &Conn, kind: &Descriptor, tenant: &str, object: &Object) -> Result<(), ApiError> {
    store(db, kind, tenant, object, None, true)
}

/// Writes a new object, made with `idempotency_key` if given; an object already stored
/// with its key is an error of the database (the caller made sure there is none, or
/// made the key itself).
fn insert(
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
    let maps = map_texts(kind, object);
    let mut values = vec![Param::Text(tenant)];
    row_values(kind, object, idempotency_key, &maps, &mut values);
    let sql = match replace {
        true => statement(kind, Statement::Upsert, || insert_statement(kind, 1, true)),
        false => statement(kind, Statement::Insert, || insert_statement(kind, 1, false)),
    };
    db.execute(&sql, &values)?;
    Ok(())
}

/// The JSON text of an object's map fields, by field position (none for the others).
fn map_texts(kind: &Descriptor, object: &Object) -> Vec<Option<String>> {
    kind.fields
        .iter()
        .map(|field| {
            (field.ty == FieldType::Map).then(|| object.fields.get(field.name).unwrap_or(&Value::Null).to_string())
        })
        .collect()
}

/// An object's values after the tenant, in the order of `stored_columns`.
fn row_values<'a>(
    kind: &Descriptor,
    object: &'a Object,
    idempotency_key: Option<&'a str>,
    maps: &'a [Option<String>],
    values: &mut Vec<Param<'a>>,
) {
    values.push(Param::Text(&object.key));
    for (field, map) in kind.fields.iter().zip(maps) {
        let value = object.fields.get(field.name).unwrap_or(&Value::Null);
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

/// The insert of `rows` objects of the tenant `?1`; with `replace`, one that writes over
/// the objects stored with their keys, which keep their idempotency keys and creation
/// times.
fn insert_statement(kind: &Descriptor, rows: usize, replace: bool) -> String {
    let names = stored_columns(kind);
    let values = db::value_rows(rows, 1, names.len() - 1);
    let mut sql = format!("INSERT INTO {} ({}) VALUES {values}", table(kind), names.join(", "));
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

fn delete(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<(), ApiError> {
    let sql = statement(kind, Statement::Delete, || {
        format!("DELETE FROM {} WHERE tenant = ?1 AND {} = ?2", table(kind), column(kind.identity_name()))
    });
    db.execute(&sql, params![tenant, key])?;
    Ok(())
}

/// Frees an idempotency key held by an archived object.
fn release_idempotency_key(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<(), ApiError> {
    let sql = statement(kind, Statement::ReleaseIdempotencyKey, || {
        format!("UPDATE {} SET idempotency_key = NULL WHERE tenant = ?1 AND id = ?2", table(kind))
    });
    db.execute(&sql, params![tenant, key])?;
    Ok(())
}

// ---- objects, through an apply's overlay or not ------------------------------------------

/// The module objects of one tenant as a handler reaches them: straight in the
/// database, or through an apply's [`Overlay`].
#[derive(Clone, Copy)]
pub struct Objects<'a> {
    pub db: &'a Conn,
    pub tenant: &'a str,
    pub overlay: Option<&'a Overlay>,
}

impl Objects<'_> {
    /// The object of `kind` with this key.
    pub fn load(&self, kind: &'static Descriptor, key: &str) -> Result<Option<Object>, ApiError> {
        match self.overlay {
            Some(overlay) => Ok(overlay.stored(self, kind, key)?.map(|stored| stored.object)),
            None => load(self.db, kind, self.tenant, key),
        }
    }

    /// Whether a live (not archived) object of `kind` has this key.
    pub fn is_live(&self, kind: &'static Descriptor, key: &str) -> Result<bool, ApiError> {
        match self.overlay {
            Some(overlay) => Ok(overlay.stored(self, kind, key)?.is_some_and(|stored| !stored.object.archived)),
            None => is_live(self.db, kind, self.tenant, key),
        }
    }

    /// The object of `kind` made with this idempotency key.
    pub fn load_by_idempotency_key(
        &self,
        kind: &'static Descriptor,
        idempotency_key: &str,
    ) -> Result<Option<Object>, ApiError> {
        match self.overlay {
            Some(overlay) => overlay.by_idempotency_key(self, kind, idempotency_key),
            None => load_by_idempotency_key(self.db, kind, self.tenant, idempotency_key),
        }
    }

    /// The keys of the live objects of `kind` whose field `field` is `value`, sorted.
    pub fn live_keys_where(
        &self,
        kind: &'static Descriptor,
        field: &str,
        value: &str,
    ) -> Result<Vec<String>, ApiError> {
        match self.overlay {
            Some(overlay) => overlay.live_keys_where(self, kind, field, value),
            None => live_keys_where(self.db, kind, self.tenant, field, value),
        }
    }

    /// Writes a new object, made with `idempotency_key` if given.
    pub fn insert(
        &self,
        kind: &'static Descriptor,
        object: &Object,
        idempotency_key: Option<&str>,
    ) -> Result<(), ApiError> {
        match self.overlay {
            Some(overlay) => {
                let stored = Stored { object: object.clone(), idempotency_key: idempotency_key.map(str::to_owned) };
                overlay.write(kind, Op::Insert, stored);
                Ok(())
            }
            None => insert(self.db, kind, self.tenant, object, idempotency_key),
        }
    }

    /// Writes the whole object over the one stored with its key; the stored object
    /// keeps its idempotency key and creation time.
    pub fn write(&self, kind: &'static Descriptor, object: &Object) -> Result<(), ApiError> {
        match self.overlay {
            Some(overlay) => {
                let before = overlay.stored(self, kind, &object.key)?;
                let mut stored = Stored { object: object.clone(), idempotency_key: None };
                if let Some(before) = before {
                    stored.idempotency_key = before.idempotency_key;
                    stored.object.created_at = before.object.created_at;
                }
                overlay.write(kind, Op::Upsert, stored);
                Ok(())
            }
            None => write(self.db, kind, self.tenant, object),
        }
    }

    pub fn delete(&self, kind: &'static Descriptor, key: &str) -> Result<(), ApiError> {
        match self.overlay {
            Some(overlay) => {
                overlay.remove(kind, key);
                Ok(())
            }
            None => delete(self.db, kind, self.tenant, key),
        }
    }

    /// Frees the idempotency key an archived object holds.
    pub fn release_idempotency_key(&self, kind: &'static Descriptor, key: &str) -> Result<(), ApiError> {
        match self.overlay {
            Some(overlay) => {
                if let Some(mut stored) = overlay.stored(self, kind, key)? {
                    stored.idempotency_key = None;
                    overlay.write(kind, Op::Release, stored);
                }
                Ok(())
            }
            None => release_idempotency_key(self.db, kind, self.tenant, key),
        }
    }
}

/// Lookups of a kind an overlay sends to the database before it reads the tenant's
/// whole table of that kind once and answers the rest from memory: a small apply costs
/// a few indexed lookups, a large one a few reads of whole tables.
const LOOKUPS_BEFORE_LOADING: usize = 16;

/// The most rows one statement of a flush writes, and the most parameters.
const FLUSH_ROWS: usize = 500;
const FLUSH_PARAMETERS: usize = 30_000;

/// The writes of an apply's calls, in memory until [`Overlay::flush`] writes them in
/// the apply's transaction, in the order they were made and as few statements as
/// that order allows. Reads through it see them. It lives inside one transaction
/// that holds the tenant's write lock, so nobody else changes what it has read.
#[derive(Default)]
pub struct Overlay(RefCell<OverlayState>);

#[derive(Default)]
struct OverlayState {
    /// By kind name.
    kinds: HashMap<&'static str, KindState>,
    /// What to write, in order.
    log: Vec<(&'static Descriptor, Op, Change)>,
}

#[derive(Default)]
struct KindState {
    /// Objects the apply wrote, by key; `None` once it deleted one.
    written: HashMap<String, Option<Stored>>,
    /// The keys of written objects by their idempotency keys.
    written_by_idempotency_key: HashMap<String, String>,
    /// The tenant's objects of the kind as the apply found them, once read whole.
    loaded: Option<Table>,
    /// Lookups sent to the database so far.
    lookups: usize,
}

#[derive(Default)]
struct Table {
    objects: HashMap<String, Stored>,
    by_idempotency_key: HashMap<String, String>,
}

/// An object and the idempotency key it holds.
#[derive(Clone)]
struct Stored {
    object: Object,
    idempotency_key: Option<String>,
}

/// What a write is, for the statement that makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Insert,
    Upsert,
    Delete,
    Release,
}

enum Change {
    Row(Stored),
    Key(String),
}

impl KindState {
    /// What the apply knows of the object with this key: `Some(answer)` when it wrote
    /// it or read the whole table, `None` when only the database can tell.
    fn known(&self, key: &str) -> Option<Option<Stored>> {
        if let Some(written) = self.written.get(key) {
            return Some(written.clone());
        }
        self.loaded.as_ref().map(|table| table.objects.get(key).cloned())
    }

    /// Counts a lookup of the database; says whether the table should be read whole
    /// first instead.
    fn should_load(&mut self) -> bool {
        self.lookups += 1;
        self.loaded.is_none() && self.lookups > LOOKUPS_BEFORE_LOADING
    }
}

impl Overlay {
    fn ensure_loaded(&self, objects: &Objects, kind: &'static Descriptor) -> Result<bool, ApiError> {
        let load = self.0.borrow_mut().kinds.entry(kind.kind).or_default().should_load();
        if load {
            let rows = load_stored(objects.db, kind, objects.tenant, Statement::AllStored, "")?;
            let mut table = Table::default();
            for stored in rows {
                if let Some(idempotency_key) = &stored.idempotency_key {
                    table.by_idempotency_key.insert(idempotency_key.clone(), stored.object.key.clone());
                }
                table.objects.insert(stored.object.key.clone(), stored);
            }
            self.0.borrow_mut().kinds.entry(kind.kind).or_default().loaded = Some(table);
        }
        Ok(self.0.borrow().kinds.get(kind.kind).is_some_and(|state| state.loaded.is_some()))
    }

    fn stored(&self, objects: &Objects, kind: &'static Descriptor, key: &str) -> Result<Option<Stored>, ApiError> {
        if let Some(known) = self.0.borrow().kinds.get(kind.kind).and_then(|state| state.known(key)) {
            return Ok(known);
        }
        if self.ensure_loaded(objects, kind)? {
            return Ok(self.0.borrow().kinds[kind.kind].known(key).flatten());
        }
        Ok(load_stored(objects.db, kind, objects.tenant, Statement::StoredByKey, key)?.pop())
    }

    fn by_idempotency_key(
        &self,
        objects: &Objects,
        kind: &'static Descriptor,
        idempotency_key: &str,
    ) -> Result<Option<Object>, ApiError> {
        let holder = |stored: &Option<Stored>| {
            stored.as_ref().filter(|stored| stored.idempotency_key.as_deref() == Some(idempotency_key)).cloned()
        };
        // A written object that holds the key; else the one the database had, unless
        // the apply has since written it (and so knows whether it still holds it).
        let candidate = {
            let state = self.0.borrow();
            let written = state.kinds.get(kind.kind).and_then(|state| {
                let key = state.written_by_idempotency_key.get(idempotency_key)?;
                holder(state.written.get(key)?)
            });
            if let Some(written) = written {
                return Ok(Some(written.object));
            }
            state.kinds.get(kind.kind).and_then(|state| {
                let table = state.loaded.as_ref()?;
                Some(table.by_idempotency_key.get(idempotency_key).cloned())
            })
        };
        let key = match candidate {
            Some(key) => key,
            None if self.ensure_loaded(objects, kind)? => self.0.borrow().kinds[kind.kind]
                .loaded
                .as_ref()
                .and_then(|table| table.by_idempotency_key.get(idempotency_key).cloned()),
            None => {
                let found =
                    load_stored(objects.db, kind, objects.tenant, Statement::StoredByIdempotencyKey, idempotency_key)?;
                found.into_iter().next().map(|stored| stored.object.key)
            }
        };
        let Some(key) = key else { return Ok(None) };
        Ok(holder(&self.stored(objects, kind, &key)?).map(|stored| stored.object))
    }

    fn live_keys_where(
        &self,
        objects: &Objects,
        kind: &'static Descriptor,
        field: &str,
        value: &str,
    ) -> Result<Vec<String>, ApiError> {
        let matches = |stored: &Stored| !stored.object.archived && stored.object.text(field) == value;
        let mut keys: Vec<String> = if self.ensure_loaded(objects, kind)? {
            let state = self.0.borrow();
            let table = state.kinds[kind.kind].loaded.as_ref().map(|table| &table.objects);
            table.into_iter().flatten().filter(|(_, stored)| matches(stored)).map(|(key, _)| key.clone()).collect()
        } else {
            live_keys_where(objects.db, kind, objects.tenant, field, value)?
        };
        // What the apply wrote decides for the objects it wrote.
        let state = self.0.borrow();
        if let Some(state) = state.kinds.get(kind.kind) {
            keys.retain(|key| !state.written.contains_key(key));
            keys.extend(
                state
                    .written
                    .iter()
                    .filter(|(_, stored)| stored.as_ref().is_some_and(matches))
                    .map(|(key, _)| key.clone()),
            );
        }
        keys.sort_unstable();
        Ok(keys)
    }

    fn write(&self, kind: &'static Descriptor, op: Op, stored: Stored) {
        let mut state = self.0.borrow_mut();
        let kind_state = state.kinds.entry(kind.kind).or_default();
        if let Some(idempotency_key) = &stored.idempotency_key {
            kind_state.written_by_idempotency_key.insert(idempotency_key.clone(), stored.object.key.clone());
        }
        kind_state.written.insert(stored.object.key.clone(), Some(stored.clone()));
        state.log.push((kind, op, Change::Row(stored)));
    }

    fn remove(&self, kind: &'static Descriptor, key: &str) {
        let mut state = self.0.borrow_mut();
        state.kinds.entry(kind.kind).or_default().written.insert(key.to_owned(), None);
        state.log.push((kind, Op::Delete, Change::Key(key.to_owned())));
    }

    /// Writes everything the apply's calls wrote, in their order, in the caller's
    /// transaction: consecutive writes of one kind and one sort share a statement, up
    /// to [`FLUSH_ROWS`] rows (an upsert run breaks where a key comes again, as one
    /// statement cannot change a row twice).
    pub fn flush(&self, db: &Conn, tenant: &str) -> Result<(), ApiError> {
        let log = std::mem::take(&mut self.0.borrow_mut().log);
        let mut start = 0;
        while start < log.len() {
            let (kind, op, _) = &log[start];
            // A run of inserts is one `insert_rows`, which makes its own statements.
            let row_limit = match op {
                Op::Insert => usize::MAX,
                _ => rows_per_statement(kind),
            };
            let mut keys = std::collections::HashSet::new();
            let mut end = start;
            while end < log.len() && end - start < row_limit {
                let (next_kind, next_op, change) = &log[end];
                if !std::ptr::eq(*next_kind, *kind) || next_op != op {
                    break;
                }
                let key = match change {
                    Change::Row(stored) => &stored.object.key,
                    Change::Key(key) => key,
                };
                if !keys.insert(key.as_str()) {
                    break;
                }
                end += 1;
            }
            flush_run(db, kind, *op, tenant, &log[start..end])?;
            start = end;
        }
        Ok(())
    }
}

/// The rows of one statement that writes objects of `kind`: as many as its parameters
/// allow, at most [`FLUSH_ROWS`].
fn rows_per_statement(kind: &Descriptor) -> usize {
    (FLUSH_PARAMETERS / (stored_columns(kind).len() + 1)).clamp(1, FLUSH_ROWS)
}

/// One statement for a run of writes of one kind and one sort (a run of inserts may
/// take several on SQLite).
fn flush_run(
    db: &Conn,
    kind: &Descriptor,
    op: Op,
    tenant: &str,
    run: &[(&'static Descriptor, Op, Change)],
) -> Result<(), ApiError> {
    let rows = || {
        run.iter().filter_map(|(_, _, change)| match change {
            Change::Row(stored) => Some(stored),
            Change::Key(_) => None,
        })
    };
    let keys = || {
        run.iter().map(|(_, _, change)| match change {
            Change::Row(stored) => stored.object.key.as_str(),
            Change::Key(key) => key.as_str(),
        })
    };
    match op {
        Op::Insert | Op::Upsert => {
            let maps: Vec<Vec<Option<String>>> = rows().map(|stored| map_texts(kind, &stored.object)).collect();
            let mut values = vec![Param::Text(tenant)];
            for (stored, maps) in rows().zip(&maps) {
                row_values(kind, &stored.object, stored.idempotency_key.as_deref(), maps, &mut values);
            }
            if op == Op::Insert {
                let columns = stored_columns(kind);
                let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
                let (shared, own) = values.split_at(1);
                db.insert_rows(&table(kind), &columns, shared, own, rows_per_statement(kind))?;
            } else {
                db.execute(&insert_statement(kind, run.len(), true), &values)?;
            }
        }
        Op::Delete | Op::Release => {
            let listed = (2..run.len() + 2).map(|n| format!("?{n}")).collect::<Vec<_>>().join(", ");
            let condition = format!("tenant = ?1 AND {} IN ({listed})", column(kind.identity_name()));
            let sql = match op {
                Op::Delete => format!("DELETE FROM {} WHERE {condition}", table(kind)),
                _ => format!("UPDATE {} SET idempotency_key = NULL WHERE {condition}", table(kind)),
            };
            let mut values = vec![Param::Text(tenant)];
            values.extend(keys().map(Param::Text));
            db.execute(&sql, &values)?;
        }
    }
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

    /// An apply's overlay reads its own writes (before and after it reads a table
    /// whole), hands an archived object's idempotency key to a new one, and its flush
    /// leaves the database as the same calls made one by one would.
    #[test]
    fn an_overlay_reads_its_own_writes_and_flushes_them_in_order() {
        use super::{Objects, Overlay};
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open_with(&dir.path().join("fleet.db"), crate::db::Options::default()).unwrap();
        let db = pool.get().unwrap();
        crate::calls::auth::create_tenant(&db, "acme", "2026-11-30T00:00:00Z").unwrap();
        let site = &fleet_guest::kinds::SITE;
        let object = |key: &str, region: &str| super::Object {
            key: key.into(),
            fields: serde_json::json!({"region": region, "description": "", "labels": {}}).as_object().unwrap().clone(),
            archived: false,
            created_at: "2026-11-30T00:00:00Z".into(),
            updated_at: "2026-11-30T00:00:00Z".into(),
        };
        let direct = Objects { db: &db, tenant: "acme", overlay: None };
        let ids: Vec<String> = (0..40).map(|_| super::super::new_id("site")).collect();
        for (n, id) in ids.iter().enumerate() {
            direct.insert(site, &object(id, "r"), Some(&format!("key-{n}"))).unwrap();
        }
        let overlay = Overlay::default();
        let through = Objects { db: &db, tenant: "acme", overlay: Some(&overlay) };
        // More lookups than it sends to the database before reading the table whole.
        for (n, id) in ids.iter().enumerate() {
            assert!(through.is_live(site, id).unwrap(), "{n}");
        }
        let fresh = super::super::new_id("site");
        through.insert(site, &object(&fresh, "new"), Some("fresh")).unwrap();
        through.write(site, &object(&ids[0], "moved")).unwrap();
        through.delete(site, &ids[1]).unwrap();
        through.release_idempotency_key(site, &ids[2]).unwrap();
        assert_eq!(through.load(site, &fresh).unwrap().unwrap().text("region"), "new");
        assert_eq!(through.load(site, &ids[0]).unwrap().unwrap().text("region"), "moved");
        assert_eq!(through.load(site, &ids[1]).unwrap(), None);
        assert_eq!(through.load_by_idempotency_key(site, "key-0").unwrap().unwrap().key, ids[0], "kept its key");
        assert_eq!(through.load_by_idempotency_key(site, "key-1").unwrap(), None, "deleted");
        assert_eq!(through.load_by_idempotency_key(site, "key-2").unwrap(), None, "released");
        assert_eq!(through.load_by_idempotency_key(site, "fresh").unwrap().unwrap().key, fresh);
        assert_eq!(through.live_keys_where(site, "region", "moved").unwrap(), [ids[0].clone()]);
        assert_eq!(direct.load(site, &fresh).unwrap(), None, "nothing is written before the flush");
        // The released key goes to a new object in the same apply.
        let heir = super::super::new_id("site");
        through.insert(site, &object(&heir, "r"), Some("key-2")).unwrap();

        overlay.flush(&db, "acme").unwrap();
        assert_eq!(direct.load(site, &fresh).unwrap().unwrap().text("region"), "new");
        assert_eq!(direct.load(site, &ids[0]).unwrap().unwrap().text("region"), "moved");
        assert_eq!(direct.load(site, &ids[1]).unwrap(), None);
        assert_eq!(direct.load_by_idempotency_key(site, "key-0").unwrap().unwrap().key, ids[0]);
        assert_eq!(direct.load_by_idempotency_key(site, "key-2").unwrap().unwrap().key, heir);
        assert_eq!(direct.load_by_idempotency_key(site, "fresh").unwrap().unwrap().key, fresh);
        assert_eq!(super::load_all(&db, site, "acme").unwrap().len(), 41);
    }

    #[test]
    fn columns_are_snake_case_and_quoted() {
        assert_eq!(super::column("memoryMib"), "\"memory_mib\"");
        assert_eq!(super::column("to"), "\"to\"");
        assert_eq!(super::column("credentialsRef"), "\"credentials_ref\"");
    }
}

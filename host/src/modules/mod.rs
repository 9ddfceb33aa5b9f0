//! The six platform modules (SPEC §4) and the machinery they share.
//!
//! A module is one API group, one table and one FleetConfig section. Each module file
//! declares its [`Module`]: its fields (which drive validation, storage, the OpenAPI
//! schemas and the planner's state adapters), which removals it allows, and its own
//! rules as hooks. The handlers here are the single code path for every change to
//! these objects: the HTTP methods and fleet's apply both call them, inside whatever
//! transaction the caller opened.

pub mod accounts;
pub mod flavors;
pub mod offers;
pub mod pools;
pub mod quotas;
pub mod sites;

use std::sync::Arc;

use fleet_guest::Kind;
use rand::RngCore;
use rusqlite::{Connection, OptionalExtension, Row, ToSql, params_from_iter};
use serde_json::{Map, Value, json};

use crate::api::{ApiError, Code, Problem};
use crate::audit::FieldChange;
use crate::db;
use crate::input::{Input, MAX_COUNT, pointer};
use crate::registry::{Ctx, Method, MethodKind, Registry};

/// The longest idempotency key a create accepts, in characters (as JSON Schema's
/// `maxLength` counts).
pub const MAX_IDEMPOTENCY_KEY: usize = 512;

const NAME_PATTERN: &str = "^[a-z][a-z0-9-]{0,62}$";

/// Strings hold no control characters (SPEC §2), as an ECMA-262 pattern.
pub const TEXT_PATTERN: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";

/// Any string without control characters.
pub fn text_schema() -> Value {
    json!({"type": "string", "pattern": TEXT_PATTERN})
}

/// Every module, in dependency order.
pub const ALL: [&Module; 6] =
    [&sites::MODULE, &accounts::MODULE, &pools::MODULE, &quotas::MODULE, &offers::MODULE, &flavors::MODULE];

pub fn of(kind: Kind) -> &'static Module {
    match kind {
        Kind::Site => &sites::MODULE,
        Kind::ProviderAccount => &accounts::MODULE,
        Kind::Pool => &pools::MODULE,
        Kind::OwnerQuota => &quotas::MODULE,
        Kind::Offer => &offers::MODULE,
        Kind::Flavor => &flavors::MODULE,
    }
}

/// The value types of module fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// Any string.
    Text,
    /// A string that must not be empty.
    NonEmpty,
    /// A string matching the name pattern (names, owners, providers, classes).
    Name,
    /// The id of a live object of this kind in the caller's tenant.
    Ref(Kind),
    /// A non-negative integer up to 2^53 - 1.
    Count,
    /// A map of string to string, stored as JSON text.
    Map,
}

pub struct Field {
    /// The wire (camelCase) name.
    pub name: &'static str,
    pub column: &'static str,
    pub ty: FieldType,
    pub required: bool,
    pub immutable: bool,
}

impl Field {
    pub const fn new(name: &'static str, column: &'static str, ty: FieldType) -> Field {
        Field { name, column, ty, required: false, immutable: false }
    }

    pub const fn required(mut self) -> Field {
        self.required = true;
        self
    }

    pub const fn immutable(mut self) -> Field {
        self.immutable = true;
        self
    }

    fn default_value(&self) -> Value {
        match self.ty {
            FieldType::Count => json!(0),
            FieldType::Map => json!({}),
            _ => json!(""),
        }
    }
}

/// A value rule of one module that needs stored state, e.g. an offer's `to` against its
/// pool's owner. It sees the object as it would be written and returns problems that are
/// reported as `INVALID_ARGUMENT` together with the request's own. Fields that failed
/// their own validation are absent from the object, so a rule skips what it cannot judge.
pub type Rule = fn(&Ctx, &Object) -> Result<Vec<Problem>, ApiError>;

/// A precondition of a delete, given the object as stored.
pub type Hook = fn(&Ctx, &Object) -> Result<(), ApiError>;

pub struct Module {
    pub kind: Kind,
    pub table: &'static str,
    pub fields: &'static [Field],
    /// Quotas are keyed by `owner`; everything else by `id`.
    pub keyed_by_owner: bool,
    pub deletable: bool,
    pub archivable: bool,
    /// Run before every create, update and set.
    pub validate: Rule,
    /// Run before a delete.
    pub before_delete: Hook,
}

pub fn no_problems(_: &Ctx, _: &Object) -> Result<Vec<Problem>, ApiError> {
    Ok(Vec::new())
}

pub fn no_rule(_: &Ctx, _: &Object) -> Result<(), ApiError> {
    Ok(())
}

impl Module {
    pub fn group(&self) -> &'static str {
        self.kind.group()
    }

    fn key_field(&self) -> &'static str {
        if self.keyed_by_owner { "owner" } else { "id" }
    }

    fn describe(&self) -> String {
        self.kind.name().to_string()
    }

    /// Registers the module's methods.
    pub fn register(&'static self, registry: &mut Registry) {
        type Op = fn(&'static Module, &Ctx, Value) -> Result<Value, ApiError>;
        let group = self.group();
        let method = |name: &str, kind: MethodKind, op: Op, summary: String, input: Value, output: Value| {
            Method::new(group, name, kind, Arc::new(move |ctx: &Ctx, body: Value| op(self, ctx, body)))
                .summary(summary)
                .schemas(input, output)
        };
        let kind = self.kind.name();
        let object = self.object_schema();
        let key = self.key_schema();
        registry.register(method(
            "list",
            MethodKind::Read,
            list,
            format!("Lists the tenant's {} objects, archived ones included.", kind),
            json!({"type": "object", "additionalProperties": false}),
            json!({"type": "object", "properties": {"items": {"type": "array", "items": object}}}),
        ));
        registry.register(method(
            "get",
            MethodKind::Read,
            get,
            format!("Reads one {kind}."),
            key.clone(),
            object.clone(),
        ));
        if self.keyed_by_owner {
            registry.register(method(
                "set",
                MethodKind::Mutation,
                set,
                format!("Creates or replaces the {kind} of an owner."),
                self.input_schema(true),
                object.clone(),
            ));
        } else {
            registry.register(method(
                "create",
                MethodKind::Mutation,
                create,
                format!("Creates a {kind}; an idempotencyKey of a live object returns that object."),
                self.input_schema(true),
                object.clone(),
            ));
            registry.register(method(
                "update",
                MethodKind::Mutation,
                update,
                format!("Changes fields of a {kind}; immutable fields cannot change."),
                self.input_schema(false),
                object.clone(),
            ));
        }
        if self.deletable {
            registry.register(method(
                "delete",
                MethodKind::Mutation,
                delete,
                format!("Deletes a {kind}."),
                key.clone(),
                object.clone(),
            ));
        }
        if self.archivable {
            registry.register(method(
                "archive",
                MethodKind::Mutation,
                archive,
                format!("Archives a {kind}."),
                key.clone(),
                object.clone(),
            ));
            registry.register(method(
                "restore",
                MethodKind::Mutation,
                restore,
                format!("Restores an archived {kind}."),
                key,
                object,
            ));
        }
    }

    pub fn field_schema(field: &Field) -> Value {
        match field.ty {
            FieldType::Count => json!({"type": "integer", "minimum": 0, "maximum": MAX_COUNT}),
            FieldType::Map => json!({"type": "object", "propertyNames": text_schema(),
                                     "additionalProperties": text_schema()}),
            FieldType::Name => json!({"type": "string", "pattern": NAME_PATTERN}),
            FieldType::NonEmpty => json!({"type": "string", "minLength": 1, "pattern": TEXT_PATTERN}),
            FieldType::Ref(kind) => json!({"type": "string", "pattern": id_pattern(kind),
                                           "description": format!("the id of a live {} of the tenant", kind.name())}),
            FieldType::Text => text_schema(),
        }
    }

    fn object_schema(&self) -> Value {
        let mut properties: Map<String, Value> =
            self.fields.iter().map(|field| (field.name.to_string(), Module::field_schema(field))).collect();
        properties.insert(self.key_field().into(), self.key_property());
        if self.archivable {
            properties.insert("archived".into(), json!({"type": "boolean"}));
        }
        properties.insert("createdAt".into(), json!({"type": "string", "format": "date-time"}));
        properties.insert("updatedAt".into(), json!({"type": "string", "format": "date-time"}));
        json!({"type": "object", "properties": properties})
    }

    fn key_property(&self) -> Value {
        if self.keyed_by_owner {
            json!({"type": "string", "pattern": NAME_PATTERN})
        } else {
            json!({"type": "string", "pattern": id_pattern(self.kind)})
        }
    }

    fn key_schema(&self) -> Value {
        json!({"type": "object", "required": [self.key_field()], "additionalProperties": false,
               "properties": {self.key_field(): self.key_property()}})
    }

    fn input_schema(&self, create: bool) -> Value {
        let mut properties: Map<String, Value> =
            self.fields.iter().map(|field| (field.name.to_string(), Module::field_schema(field))).collect();
        properties.insert(self.key_field().into(), self.key_property());
        let mut required: Vec<&str> = Vec::new();
        if create {
            required.extend(self.fields.iter().filter(|field| field.required).map(|field| field.name));
            if !self.keyed_by_owner {
                properties.insert(
                    "idempotencyKey".into(),
                    json!({"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY, "pattern": TEXT_PATTERN}),
                );
            }
        }
        if (!create || self.keyed_by_owner) && !required.contains(&self.key_field()) {
            required.push(self.key_field());
        }
        json!({"type": "object", "additionalProperties": false, "required": required, "properties": properties})
    }
}

/// One stored object: its key (id, or owner for quotas), its fields by wire name.
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

    pub fn count(&self, field: &str) -> u64 {
        self.fields.get(field).and_then(Value::as_u64).unwrap_or_default()
    }

    pub fn to_json(&self, module: &Module) -> Value {
        let mut object = Map::new();
        object.insert(module.key_field().into(), Value::String(self.key.clone()));
        for field in module.fields {
            if field.name != module.key_field() {
                object.insert(field.name.into(), self.fields.get(field.name).cloned().unwrap_or(Value::Null));
            }
        }
        if module.archivable {
            object.insert("archived".into(), Value::Bool(self.archived));
        }
        object.insert("createdAt".into(), Value::String(self.created_at.clone()));
        object.insert("updatedAt".into(), Value::String(self.updated_at.clone()));
        Value::Object(object)
    }
}

// ---- storage ------------------------------------------------------------------------

fn columns(module: &Module) -> Vec<&'static str> {
    let mut columns = vec![if module.keyed_by_owner { "owner" } else { "id" }];
    columns.extend(
        module.fields.iter().filter(|field| field.name != "owner" || !module.keyed_by_owner).map(|field| field.column),
    );
    columns
}

fn select(module: &Module) -> String {
    let archived = if module.archivable { "archived" } else { "0" };
    format!(
        "SELECT {}, {archived}, created_at, updated_at FROM {} WHERE tenant = ?1",
        columns(module).join(", "),
        module.table
    )
}

fn read_row(module: &Module, row: &Row) -> rusqlite::Result<Object> {
    let mut fields = Map::new();
    let mut index = 1;
    for field in module.fields.iter().filter(|field| field.name != "owner" || !module.keyed_by_owner) {
        let value = match field.ty {
            FieldType::Count => json!(row.get::<_, i64>(index)?),
            FieldType::Map => {
                let text: String = row.get(index)?;
                serde_json::from_str(&text).map_err(|error| {
                    rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(error))
                })?
            }
            _ => Value::String(row.get(index)?),
        };
        fields.insert(field.name.into(), value);
        index += 1;
    }
    let key: String = row.get(0)?;
    if module.keyed_by_owner {
        fields.insert("owner".into(), Value::String(key.clone()));
    }
    Ok(Object {
        key,
        fields,
        archived: row.get(index)?,
        created_at: row.get(index + 1)?,
        updated_at: row.get(index + 2)?,
    })
}

/// Every object of the tenant, ordered by key.
pub fn load_all(db: &Connection, module: &Module, tenant: &str) -> Result<Vec<Object>, ApiError> {
    let sql = format!("{} ORDER BY {}", select(module), module.key_field());
    let mut statement = db.prepare_cached(&sql)?;
    let rows = statement.query_map([tenant], |row| read_row(module, row))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn load(db: &Connection, module: &Module, tenant: &str, key: &str) -> Result<Option<Object>, ApiError> {
    let sql = format!("{} AND {} = ?2", select(module), module.key_field());
    let mut statement = db.prepare_cached(&sql)?;
    Ok(statement.query_row([tenant, key], |row| read_row(module, row)).optional()?)
}

fn load_by_idempotency_key(
    db: &Connection,
    module: &Module,
    tenant: &str,
    idempotency_key: &str,
) -> Result<Option<Object>, ApiError> {
    let sql = format!("{} AND idempotency_key = ?2", select(module));
    let mut statement = db.prepare_cached(&sql)?;
    Ok(statement.query_row([tenant, idempotency_key], |row| read_row(module, row)).optional()?)
}

fn sql_value(field: &Field, value: &Value) -> Box<dyn ToSql> {
    match field.ty {
        FieldType::Count => Box::new(value.as_i64().unwrap_or_default()),
        FieldType::Map => Box::new(value.to_string()),
        _ => Box::new(value.as_str().unwrap_or_default().to_owned()),
    }
}

/// Writes the whole object (insert or replace by key).
fn write(
    db: &Connection,
    module: &Module,
    tenant: &str,
    object: &Object,
    idempotency_key: Option<&str>,
) -> Result<(), ApiError> {
    let mut names = vec!["tenant"];
    let mut values: Vec<Box<dyn ToSql>> = vec![Box::new(tenant.to_owned())];
    names.extend(columns(module));
    values.push(Box::new(object.key.clone()));
    for field in module.fields.iter().filter(|field| field.name != "owner" || !module.keyed_by_owner) {
        values.push(sql_value(field, object.fields.get(field.name).unwrap_or(&Value::Null)));
    }
    if module.archivable {
        names.push("archived");
        values.push(Box::new(object.archived));
    }
    if !module.keyed_by_owner {
        names.push("idempotency_key");
        values.push(Box::new(idempotency_key.map(str::to_owned)));
    }
    names.extend(["created_at", "updated_at"]);
    values.push(Box::new(object.created_at.clone()));
    values.push(Box::new(object.updated_at.clone()));
    let placeholders: Vec<String> = (1..=names.len()).map(|index| format!("?{index}")).collect();
    let assignments: Vec<String> = names
        .iter()
        .filter(|name| !matches!(**name, "tenant" | "created_at" | "idempotency_key") && **name != module.key_field())
        .map(|name| format!("{name} = excluded.{name}"))
        .collect();
    let sql = format!(
        "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (tenant, {}) DO UPDATE SET {}",
        module.table,
        names.join(", "),
        placeholders.join(", "),
        module.key_field(),
        assignments.join(", ")
    );
    db.prepare_cached(&sql)?.execute(params_from_iter(values.iter()))?;
    Ok(())
}

// ---- validation ---------------------------------------------------------------------

/// Reads the module's fields from a request. On create, required fields must be there
/// and absent ones take their defaults; on update every field is optional. A value with
/// a problem is left out (and reported through `input`).
pub fn read_fields(module: &Module, input: &mut Input, create: bool) -> Map<String, Value> {
    let mut fields = Map::new();
    for field in module.fields {
        if module.keyed_by_owner && field.name == "owner" {
            continue;
        }
        let required = create && field.required;
        let present = input.has(field.name);
        let value = match field.ty {
            FieldType::Text => input.string(field.name, required).map(Value::String),
            FieldType::NonEmpty => match input.string(field.name, required) {
                Some(text) if text.is_empty() => {
                    input.problem(field.name, "must not be empty");
                    None
                }
                other => other.map(Value::String),
            },
            FieldType::Ref(kind) => read_id(input, field.name, kind, required).map(Value::String),
            FieldType::Name => input.name(field.name, required).map(Value::String),
            FieldType::Count => input.count(field.name, required).map(Value::from),
            FieldType::Map => input.string_map(field.name, required).map(|map| json!(map)),
        };
        match value {
            Some(value) => {
                fields.insert(field.name.into(), value);
            }
            None if create && !required && !present => {
                fields.insert(field.name.into(), field.default_value());
            }
            None => {}
        }
    }
    fields
}

/// `<prefix>_` + 26 characters of lowercase base32.
pub fn is_id(text: &str, prefix: &str) -> bool {
    text.strip_prefix(prefix).and_then(|rest| rest.strip_prefix('_')).is_some_and(|body| {
        body.len() == 26 && body.bytes().all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
    })
}

pub fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}_{}", data_encoding::BASE32_NOPAD.encode(&bytes).to_lowercase())
}

fn id_pattern(kind: Kind) -> String {
    format!("^{}_[a-z2-7]{{26}}$", kind.id_prefix().unwrap_or_default())
}

/// A field holding the id of an object of `kind`: a malformed id is a bad value
/// (`INVALID_ARGUMENT`), whatever the tenant holds.
fn read_id(input: &mut Input, field: &str, kind: Kind, required: bool) -> Option<String> {
    let text = input.string(field, required)?;
    let prefix = kind.id_prefix().unwrap_or_default();
    if is_id(&text, prefix) {
        Some(text)
    } else {
        input.problem(
            field,
            format!("{text:?} is not a {} id ({prefix}_ and 26 lowercase base32 characters)", kind.name()),
        );
        None
    }
}

/// The key of a get, update, delete, archive or restore: an id, or a quota's owner.
fn read_key(module: &Module, input: &mut Input) -> Option<String> {
    if module.keyed_by_owner { input.name("owner", true) } else { read_id(input, "id", module.kind, true) }
}

/// References must name live objects of the caller's tenant (`FAILED_PRECONDITION`);
/// archived objects are not live. With `only`, just the references among those fields.
fn check_references(
    ctx: &Ctx,
    module: &Module,
    object: &Object,
    only: Option<&Map<String, Value>>,
) -> Result<(), ApiError> {
    let mut problems = Vec::new();
    for field in module.fields {
        let FieldType::Ref(kind) = field.ty else { continue };
        if only.is_some_and(|changed| !changed.contains_key(field.name)) {
            continue;
        }
        let id = object.text(field.name);
        let live = load(ctx.db, of(kind), &ctx.caller.tenant, id)?.is_some_and(|found| !found.archived);
        if !live {
            let message = format!("{} {id:?} is not a live {} of this tenant", field.name, kind.name());
            problems.push(Problem { path: pointer(field.name), message });
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let message = problems.iter().map(|problem| problem.message.as_str()).collect::<Vec<_>>().join("; ");
    Err(ApiError::failed_precondition(message).with_details(json!({ "problems": problems })))
}

fn not_found(module: &Module, key: &str) -> ApiError {
    ApiError::not_found(format!("no {} {key:?}", module.describe()))
}

// ---- handlers -------------------------------------------------------------------------
//
// Every handler checks in the same order: the request's shape and values, with the
// module's value rules (INVALID_ARGUMENT, all problems at once); then existence
// (NOT_FOUND, ALREADY_EXISTS); then references and preconditions (FAILED_PRECONDITION).
// Nothing is written before every check has passed, and the surrounding transaction
// rolls back whatever a later call of the same transaction fails on.

fn list(module: &'static Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    Input::new(body)?.finish()?;
    let items: Vec<Value> =
        load_all(ctx.db, module, &ctx.caller.tenant)?.iter().map(|object| object.to_json(module)).collect();
    Ok(json!({ "items": items }))
}

/// Reads the key of a request that names one existing object, and loads that object.
fn existing(module: &'static Module, ctx: &Ctx, body: Value) -> Result<Object, ApiError> {
    let mut input = Input::new(body)?;
    let key = read_key(module, &mut input);
    input.finish()?;
    let key = key.unwrap_or_default();
    load(ctx.db, module, &ctx.caller.tenant, &key)?.ok_or_else(|| not_found(module, &key))
}

fn get(module: &'static Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    Ok(existing(module, ctx, body)?.to_json(module))
}

fn create(module: &'static Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let id = read_id(&mut input, "id", module.kind, false);
    let idempotency_key = input.string("idempotencyKey", false);
    if let Some(key) = &idempotency_key
        && (key.is_empty() || key.chars().count() > MAX_IDEMPOTENCY_KEY)
    {
        input.problem("idempotencyKey", format!("must be 1 to {MAX_IDEMPOTENCY_KEY} characters"));
    }
    let fields = read_fields(module, &mut input, true);
    let now = db::now();
    let key = id.unwrap_or_else(|| new_id(module.kind.id_prefix().unwrap_or_default()));
    let object = Object { key, fields, archived: false, created_at: now.clone(), updated_at: now };
    input.extend((module.validate)(ctx, &object)?);
    input.finish()?;

    let tenant = &ctx.caller.tenant;
    // The key belongs to the live object made with it; an archived holder gives it up.
    let mut archived_holder = None;
    if let Some(key) = &idempotency_key
        && let Some(holder) = load_by_idempotency_key(ctx.db, module, tenant, key)?
    {
        if !holder.archived {
            return Ok(holder.to_json(module));
        }
        archived_holder = Some(holder.key);
    }
    if load(ctx.db, module, tenant, &object.key)?.is_some() {
        return Err(ApiError::new(
            Code::AlreadyExists,
            format!("{} {:?} already exists", module.describe(), object.key),
        ));
    }
    check_references(ctx, module, &object, None)?;
    if let Some(holder) = archived_holder {
        let sql = format!("UPDATE {} SET idempotency_key = NULL WHERE tenant = ?1 AND id = ?2", module.table);
        ctx.db.prepare_cached(&sql)?.execute([tenant, &holder])?;
    }
    write(ctx.db, module, tenant, &object, idempotency_key.as_deref())?;
    audit(ctx, module, "create", None, Some(&object))?;
    Ok(object.to_json(module))
}

fn update(module: &'static Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let id = read_key(module, &mut input);
    let changes = read_fields(module, &mut input, false);
    let tenant = &ctx.caller.tenant;
    let stored = match &id {
        Some(id) => load(ctx.db, module, tenant, id)?,
        None => None,
    };
    if let Some(stored) = &stored {
        for field in module.fields.iter().filter(|field| field.immutable) {
            if let Some(value) = changes.get(field.name)
                && Some(value) != stored.fields.get(field.name)
            {
                let was = stored.fields.get(field.name).unwrap_or(&Value::Null);
                input.problem(field.name, format!("is immutable: it cannot change from {was} to {value}"));
            }
        }
        // The rules judge the mutable changes; a change to an immutable field is
        // already a problem of its own.
        let mut merged = stored.clone();
        let immutable = |name: &str| module.fields.iter().any(|field| field.immutable && field.name == name);
        merged.fields.extend(
            changes.iter().filter(|(name, _)| !immutable(name)).map(|(name, value)| (name.clone(), value.clone())),
        );
        input.extend((module.validate)(ctx, &merged)?);
    }
    input.finish()?;
    let id = id.unwrap_or_default();
    let stored = stored.ok_or_else(|| not_found(module, &id))?;

    let changed: Map<String, Value> =
        changes.into_iter().filter(|(name, value)| stored.fields.get(name) != Some(value)).collect();
    if changed.is_empty() {
        return Ok(stored.to_json(module));
    }
    let mut object = stored.clone();
    object.fields.extend(changed.clone());
    object.updated_at = db::now();
    check_references(ctx, module, &object, Some(&changed))?;
    write(ctx.db, module, tenant, &object, None)?;
    audit(ctx, module, "update", Some(&stored), Some(&object))?;
    Ok(object.to_json(module))
}

/// The quota upsert: the object afterwards is exactly the limits given (absent ones 0).
/// Setting the limits a quota already has changes nothing, `updatedAt` included.
fn set(module: &'static Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let owner = read_key(module, &mut input);
    let mut fields = read_fields(module, &mut input, true);
    let tenant = &ctx.caller.tenant;
    let stored = match &owner {
        Some(owner) => load(ctx.db, module, tenant, owner)?,
        None => None,
    };
    let owner = owner.unwrap_or_default();
    fields.insert("owner".into(), Value::String(owner.clone()));
    let now = db::now();
    let created_at = stored.as_ref().map_or_else(|| now.clone(), |stored| stored.created_at.clone());
    let object = Object { key: owner, fields, archived: false, created_at, updated_at: now };
    input.extend((module.validate)(ctx, &object)?);
    input.finish()?;

    if let Some(stored) = &stored
        && stored.fields == object.fields
    {
        return Ok(stored.to_json(module));
    }
    check_references(ctx, module, &object, None)?;
    write(ctx.db, module, tenant, &object, None)?;
    audit(ctx, module, "set", stored.as_ref(), Some(&object))?;
    Ok(object.to_json(module))
}

/// Removes the object; the answer is the object as it was. Its idempotency key is free
/// again.
fn delete(module: &'static Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let object = existing(module, ctx, body)?;
    (module.before_delete)(ctx, &object)?;
    let sql = format!("DELETE FROM {} WHERE tenant = ?1 AND {} = ?2", module.table, module.key_field());
    ctx.db.prepare_cached(&sql)?.execute([&ctx.caller.tenant, &object.key])?;
    audit(ctx, module, "delete", Some(&object), None)?;
    Ok(object.to_json(module))
}

/// Archive and restore are idempotent: asking for the state an object is in changes
/// nothing. A restore must leave a live object with live references.
fn set_archived(module: &'static Module, ctx: &Ctx, body: Value, archived: bool) -> Result<Value, ApiError> {
    let stored = existing(module, ctx, body)?;
    if stored.archived == archived {
        return Ok(stored.to_json(module));
    }
    let mut object = stored.clone();
    object.archived = archived;
    object.updated_at = db::now();
    if !archived {
        check_references(ctx, module, &object, None)?;
    }
    write(ctx.db, module, &ctx.caller.tenant, &object, None)?;
    audit(ctx, module, if archived { "archive" } else { "restore" }, Some(&stored), Some(&object))?;
    Ok(object.to_json(module))
}

/// The audit record of a change from `before` to `after` (either absent for a create
/// or a delete): every field that differs, `archived` included.
fn audit(
    ctx: &Ctx,
    module: &Module,
    method: &str,
    before: Option<&Object>,
    after: Option<&Object>,
) -> Result<(), ApiError> {
    let archived = |object: Option<&Object>| object.map(|object| Value::Bool(object.archived));
    let (archived_before, archived_after) = (archived(before), archived(after));
    let mut changes: Vec<FieldChange> = module
        .fields
        .iter()
        .map(|field| FieldChange {
            field: field.name,
            from: before.and_then(|object| object.fields.get(field.name)),
            to: after.and_then(|object| object.fields.get(field.name)),
        })
        .filter(|change| change.from != change.to)
        .collect();
    if module.archivable && before.is_some() && after.is_some() && archived_before != archived_after {
        changes.push(FieldChange { field: "archived", from: archived_before.as_ref(), to: archived_after.as_ref() });
    }
    let key = after.or(before).map(|object| object.key.as_str()).unwrap_or_default();
    crate::audit::record(ctx, &format!("compute.{}.{method}", module.group()), module.kind.name(), key, &changes)
}

fn archive(module: &'static Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    set_archived(module, ctx, body, true)
}

fn restore(module: &'static Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    set_archived(module, ctx, body, false)
}

#[cfg(test)]
mod tests;

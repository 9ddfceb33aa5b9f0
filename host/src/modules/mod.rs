//! The modules (SPEC §4): one API group, one table and one FleetConfig section per kind,
//! all served by the same code from the kinds' descriptors (`fleet_guest::kinds`).
//!
//! A descriptor drives validation, storage (`store`), the method schemas and the
//! planner's state. What is not a field type is a rule of the descriptor (an offer's
//! `to` differs from its pool's owner) or holds for every kind (a reference names a live
//! object of the tenant; a deleted object is referenced by no live object). The
//! handlers here are the single code path for every change to module objects: the
//! HTTP methods and fleet's apply both call them, inside whatever transaction the
//! caller opened.

pub mod store;

use std::sync::Arc;

use fleet_guest::grammar::{self, NAME_PATTERN, TEXT_PATTERN};
use fleet_guest::kinds::{Descriptor, FieldType, Removal, Rule, with_article};
use fleet_guest::plugins::{Subject, object_json};
use fleet_guest::{Catalog, json::MAX_COUNT};
use rand::RngCore;
use serde_json::{Map, Value, json};

use crate::api::{ApiError, Code, Problem};
use crate::audit::FieldChange;
use crate::calls::input::{Input, pointer};
use crate::calls::registry::{Ctx, Method, MethodKind, Registry};
use crate::db;
use crate::plugins::{Plugin, Plugins};
pub use store::Object;

/// The longest idempotency key a create accepts, in characters (as JSON Schema's
/// `maxLength` counts).
pub const MAX_IDEMPOTENCY_KEY: usize = 512;

/// Any string without control characters.
pub fn text_schema() -> Value {
    json!({"type": "string", "pattern": TEXT_PATTERN})
}

/// One kind served as a module: its descriptor, and the catalogue its references name
/// kinds of.
#[derive(Clone)]
pub struct Module {
    pub kind: &'static Descriptor,
    catalog: Arc<Catalog>,
    /// The plugin that serves the kind, whose check judges every create and update.
    plugin: Option<Arc<Plugin>>,
}

impl Module {
    /// The module of the kind at `kind` in `catalog`, served by `plugin` if a plugin's.
    pub fn new(catalog: Arc<Catalog>, kind: usize, plugin: Option<Arc<Plugin>>) -> Module {
        Module { kind: catalog.get(kind), catalog, plugin }
    }

    /// The descriptor of the kind a reference names.
    fn target(&self, kind: &str) -> Option<&'static Descriptor> {
        self.catalog.by_kind(kind).map(|position| self.catalog.get(position))
    }

    /// Registers the module's methods.
    pub fn register(&self, registry: &mut Registry) {
        type Op = fn(&Module, &Ctx, Value) -> Result<Value, ApiError>;
        let kind = self.kind;
        let name = kind.kind;
        let object = object_schema(kind, &self.catalog);
        let key = key_schema(kind);
        let mut add = |verb: &str, method_kind: MethodKind, op: Op, summary: String, input: Value, output: &Value| {
            let module = self.clone();
            let handler = Arc::new(move |ctx: &Ctx, body: Value| op(&module, ctx, body));
            let method = Method::new(kind.group, verb, method_kind, handler).summary(summary);
            registry.register(method.schemas(input, output.clone()));
        };
        let archived = if kind.archives() { ", archived ones included" } else { "" };
        add(
            "list",
            MethodKind::Read,
            list,
            format!("Lists the tenant's {name} objects{archived}."),
            json!({"type": "object", "additionalProperties": false}),
            &json!({"type": "object", "properties": {"items": {"type": "array", "items": object}}}),
        );
        add("get", MethodKind::Read, get, format!("Reads one {name}."), key.clone(), &object);
        if kind.upserted() {
            let summary = format!("Creates or replaces the {name} of {}.", with_article(kind.identity_name()));
            add("set", MethodKind::Mutation, set, summary, input_schema(kind, &self.catalog, true), &object);
        } else {
            let summary = format!("Creates {}; an idempotencyKey of a live object returns that object.", kind.a());
            add("create", MethodKind::Mutation, create, summary, input_schema(kind, &self.catalog, true), &object);
            let summary = format!("Changes fields of {}; immutable fields cannot change.", kind.a());
            add("update", MethodKind::Mutation, update, summary, input_schema(kind, &self.catalog, false), &object);
        }
        if kind.removal == Removal::Delete {
            let summary = format!("Deletes {}; refused while a live object references it.", kind.a());
            add("delete", MethodKind::Mutation, delete, summary, key.clone(), &object);
        }
        if kind.archives() {
            add("archive", MethodKind::Mutation, archive, format!("Archives {}.", kind.a()), key.clone(), &object);
            add("restore", MethodKind::Mutation, restore, format!("Restores an archived {name}."), key, &object);
        }
    }
}

/// The kinds this deployment knows (its catalogue) and those whose modules it runs.
pub struct Modules {
    pub catalog: Arc<Catalog>,
    runs: Vec<bool>,
    /// Per kind, the plugin that serves it.
    plugins: Vec<Option<Arc<Plugin>>>,
}

impl Modules {
    /// The modules of `catalog` whose kinds `runs` names, and those of every plugin.
    pub fn new(catalog: Arc<Catalog>, runs: impl Fn(&str) -> bool, plugins: &Plugins) -> Modules {
        let plugins: Vec<Option<Arc<Plugin>>> =
            catalog.iter().map(|(_, kind)| plugins.by_kind(kind.kind).cloned()).collect();
        let runs = catalog.iter().map(|(position, kind)| plugins[position].is_some() || runs(kind.kind)).collect();
        Modules { catalog, runs, plugins }
    }

    /// Whether this deployment runs the module of the kind named `kind`.
    pub fn runs(&self, kind: &str) -> bool {
        self.catalog.by_kind(kind).is_some_and(|position| self.runs[position])
    }

    /// The kinds whose modules run, in dependency order.
    pub fn running(&self) -> impl Iterator<Item = &'static Descriptor> + '_ {
        self.catalog.iter().filter(|(position, _)| self.runs[*position]).map(|(_, kind)| kind)
    }

    /// Registers the methods of every module that runs.
    pub fn register(&self, registry: &mut Registry) {
        for (position, _) in self.catalog.iter().filter(|(position, _)| self.runs[*position]) {
            Module::new(self.catalog.clone(), position, self.plugins[position].clone()).register(registry);
        }
    }
}

// ---- schemas ---------------------------------------------------------------------------

/// The request schema of a field's value.
pub fn field_schema(ty: FieldType, required: bool, catalog: &Catalog) -> Value {
    match ty {
        FieldType::Count => json!({"type": "integer", "minimum": 0, "maximum": MAX_COUNT}),
        FieldType::Bool => json!({"type": "boolean"}),
        FieldType::Map => json!({"type": "object", "propertyNames": text_schema(),
                                 "additionalProperties": text_schema()}),
        FieldType::Name => json!({"type": "string", "pattern": NAME_PATTERN}),
        FieldType::String if required => json!({"type": "string", "minLength": 1, "pattern": TEXT_PATTERN}),
        FieldType::String => text_schema(),
        FieldType::Ref(kind) => {
            let prefix = catalog.by_kind(kind).and_then(|position| catalog.get(position).id_prefix());
            json!({"type": "string", "pattern": grammar::id_pattern(prefix.unwrap_or_default()),
                   "description": format!("the id of a live {kind} of the tenant")})
        }
    }
}

fn key_property(kind: &Descriptor) -> Value {
    match kind.id_prefix() {
        Some(prefix) => json!({"type": "string", "pattern": grammar::id_pattern(prefix)}),
        None => json!({"type": "string", "pattern": NAME_PATTERN}),
    }
}

fn object_schema(kind: &Descriptor, catalog: &Catalog) -> Value {
    let mut properties: Map<String, Value> = kind
        .fields
        .iter()
        .map(|field| (field.name.to_string(), field_schema(field.ty, field.required, catalog)))
        .collect();
    properties.insert(kind.identity_name().into(), key_property(kind));
    if kind.archives() {
        properties.insert("archived".into(), json!({"type": "boolean"}));
    }
    properties.insert("createdAt".into(), json!({"type": "string", "format": "date-time"}));
    properties.insert("updatedAt".into(), json!({"type": "string", "format": "date-time"}));
    json!({"type": "object", "properties": properties})
}

fn key_schema(kind: &Descriptor) -> Value {
    let identity = kind.identity_name();
    json!({"type": "object", "required": [identity], "additionalProperties": false,
           "properties": {identity: key_property(kind)}})
}

fn input_schema(kind: &Descriptor, catalog: &Catalog, create: bool) -> Value {
    let mut properties: Map<String, Value> = kind
        .fields
        .iter()
        .map(|field| (field.name.to_string(), field_schema(field.ty, field.required, catalog)))
        .collect();
    let identity = kind.identity_name();
    properties.insert(identity.into(), key_property(kind));
    let mut required: Vec<&str> = Vec::new();
    if create && !kind.upserted() {
        properties.insert(
            "idempotencyKey".into(),
            json!({"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY, "pattern": TEXT_PATTERN}),
        );
        required.extend(kind.fields.iter().filter(|field| field.required).map(|field| field.name));
    } else {
        required.push(identity);
    }
    json!({"type": "object", "additionalProperties": false, "required": required, "properties": properties})
}

// ---- validation ---------------------------------------------------------------------

/// Reads the kind's fields from a request. On create, required fields must be there
/// and absent ones take their defaults; on update every field is optional. A value with
/// a problem is left out (and reported through `input`).
pub fn read_fields(module: &Module, input: &mut Input, create: bool) -> Map<String, Value> {
    let mut fields = Map::new();
    for field in module.kind.fields {
        let required = create && field.required;
        let present = input.has(field.name);
        let value = match field.ty {
            FieldType::String => match input.string(field.name, required) {
                Some(text) if text.is_empty() && field.required => {
                    input.problem(field.name, "must not be empty");
                    None
                }
                other => other.map(Value::String),
            },
            FieldType::Ref(kind) => {
                let prefix = module.target(kind).and_then(Descriptor::id_prefix).unwrap_or_default();
                read_id(input, field.name, kind, prefix, required).map(Value::String)
            }
            FieldType::Name => input.name(field.name, required).map(Value::String),
            FieldType::Count => input.count(field.name, required).map(Value::from),
            FieldType::Bool => input.boolean(field.name, required).map(Value::Bool),
            FieldType::Map => input.string_map(field.name, required).map(|map| json!(map)),
        };
        match value {
            Some(value) => {
                fields.insert(field.name.into(), value);
            }
            None if create && !required && !present => {
                fields.insert(field.name.into(), default_value(field.ty));
            }
            None => {}
        }
    }
    fields
}

fn default_value(ty: FieldType) -> Value {
    serde_json::to_value(fleet_guest::Value::default_of(ty)).unwrap_or(Value::Null)
}

pub fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    grammar::id_from(prefix, &bytes)
}

/// A field holding the id of an object of `kind`: a malformed id is a bad value
/// (`INVALID_ARGUMENT`), whatever the tenant holds.
fn read_id(input: &mut Input, field: &str, kind: &str, prefix: &str, required: bool) -> Option<String> {
    let text = input.string(field, required)?;
    if grammar::is_id(&text, prefix) {
        Some(text)
    } else {
        input.problem(
            field,
            format!("{} is not a {kind} id ({prefix}_ and 26 lowercase base32 characters)", grammar::quoted(&text)),
        );
        None
    }
}

/// The key of a get, update, delete, archive or restore: an id, or the identity field.
fn read_key(kind: &Descriptor, input: &mut Input) -> Option<String> {
    match kind.id_prefix() {
        Some(prefix) => read_id(input, "id", kind.kind, prefix, true),
        None => input.name(kind.identity_name(), true),
    }
}

/// The kind's rules over the object as it would be written (`INVALID_ARGUMENT`
/// problems). Fields that failed their own validation are absent from the object, so a
/// rule skips what it cannot judge; so does a reference to nothing, which the reference
/// check reports.
fn check_rules(module: &Module, ctx: &Ctx, object: &Object) -> Result<Vec<Problem>, ApiError> {
    let mut problems = Vec::new();
    for rule in module.kind.rules {
        match *rule {
            Rule::Differs { field, via, other } => {
                let (ours, reference) = (object.text(field), object.text(via));
                let target =
                    module.kind.fields.iter().find(|candidate| candidate.name == via).and_then(|via| match via.ty {
                        FieldType::Ref(kind) => module.target(kind),
                        _ => None,
                    });
                let (Some(target), false, false) = (target, ours.is_empty(), reference.is_empty()) else { continue };
                let Some(referenced) = ctx.objects().load(target, reference)? else { continue };
                if referenced.text(other) == ours {
                    let message = format!("{field} is the {other} of {} {reference} ({ours})", target.kind);
                    problems.push(Problem { path: pointer(field), message });
                }
            }
        }
    }
    Ok(problems)
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
    for field in module.kind.fields {
        let FieldType::Ref(kind) = field.ty else { continue };
        if only.is_some_and(|changed| !changed.contains_key(field.name)) {
            continue;
        }
        let id = object.text(field.name);
        let live = match module.target(kind) {
            Some(target) => ctx.objects().is_live(target, id)?,
            None => false,
        };
        if !live {
            let message = format!("{} {id:?} is not a live {kind} of this tenant", field.name);
            problems.push(Problem { path: pointer(field.name), message });
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let message = problems.iter().map(|problem| problem.message.as_str()).collect::<Vec<_>>().join("; ");
    Err(ApiError::failed_precondition(message).with_details(json!({ "problems": problems })))
}

/// The plugin's own rules over the object as it will be written (SPEC §10), given
/// the objects it references and the object as it was: `INVALID_ARGUMENT` with the
/// plugin's problems. They run last, once the references are known to be live.
fn check_plugin(module: &Module, ctx: &Ctx, object: &Object, previous: Option<&Object>) -> Result<(), ApiError> {
    let Some(plugin) = &module.plugin else { return Ok(()) };
    let mut references = Vec::new();
    for (field, kind) in module.kind.references() {
        let Some(target) = module.target(kind) else { continue };
        if let Some(referenced) = ctx.objects().load(target, object.text(field))? {
            references.push((field.to_owned(), checked_form(target, &referenced)));
        }
    }
    let subject = Subject {
        object: checked_form(module.kind, object),
        previous: previous.map(|previous| checked_form(module.kind, previous)),
        references,
    };
    let findings = plugin.check([subject])?;
    if findings.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        findings.into_iter().map(|finding| Problem { path: finding.path, message: finding.message }).collect(),
    ))
}

/// An object in the form a plugin's check reads, written by the planner's own code so
/// that plan and API give a plugin the same text.
fn checked_form(kind: &Descriptor, object: &Object) -> String {
    let values: Vec<fleet_guest::Value> = kind
        .fields
        .iter()
        .map(|field| {
            let value = object.fields.get(field.name).and_then(fleet_guest::Value::from_json);
            value.unwrap_or_else(|| fleet_guest::Value::default_of(field.ty))
        })
        .collect();
    object_json(kind, &object.key, |position| &values[position])
}

/// A delete is refused while a live object of the tenant references the object
/// (`FAILED_PRECONDITION`, the referrers by section in `details`).
fn check_unreferenced(ctx: &Ctx, module: &Module, object: &Object) -> Result<(), ApiError> {
    let mut referrers = Map::new();
    let mut lines = Vec::new();
    for (_, referrer) in module.catalog.iter() {
        for field in referrer.fields {
            if field.ty != FieldType::Ref(module.kind.kind) {
                continue;
            }
            let keys = ctx.objects().live_keys_where(referrer, field.name, &object.key)?;
            if !keys.is_empty() {
                lines.push(format!("the live {} {keys:?}", referrer.section));
                referrers.insert(referrer.section.into(), json!(keys));
            }
        }
    }
    if referrers.is_empty() {
        return Ok(());
    }
    let kind = module.kind.kind;
    Err(ApiError::failed_precondition(format!(
        "{kind} {:?} is used by {}; remove them or point them at another {kind} first",
        object.key,
        lines.join(" and ")
    ))
    .with_details(Value::Object(referrers)))
}

fn not_found(kind: &Descriptor, key: &str) -> ApiError {
    ApiError::not_found(format!("no {} {}", kind.kind, grammar::quoted(key)))
}

// ---- handlers -------------------------------------------------------------------------
//
// Every handler checks in the same order: the request's shape and values, with the
// module's value rules (INVALID_ARGUMENT, all problems at once); then existence
// (NOT_FOUND, ALREADY_EXISTS); then references and preconditions (FAILED_PRECONDITION).
// Nothing is written before every check has passed, and the surrounding transaction
// rolls back whatever a later call of the same transaction fails on.

fn list(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    Input::new(body)?.finish()?;
    let items: Vec<Value> = store::load_all(ctx.db, module.kind, &ctx.caller.tenant)?
        .iter()
        .map(|object| object.to_json(module.kind))
        .collect();
    Ok(json!({ "items": items }))
}

/// Reads the key of a request that names one existing object, and loads that object.
fn existing(module: &Module, ctx: &Ctx, body: Value) -> Result<Object, ApiError> {
    let mut input = Input::new(body)?;
    let key = read_key(module.kind, &mut input);
    input.finish()?;
    let key = key.unwrap_or_default();
    ctx.objects().load(module.kind, &key)?.ok_or_else(|| not_found(module.kind, &key))
}

fn get(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    Ok(existing(module, ctx, body)?.to_json(module.kind))
}

fn create(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let prefix = module.kind.id_prefix().unwrap_or_default();
    let id = read_id(&mut input, "id", module.kind.kind, prefix, false);
    let idempotency_key = input.string("idempotencyKey", false);
    if let Some(key) = &idempotency_key
        && (key.is_empty() || key.chars().count() > MAX_IDEMPOTENCY_KEY)
    {
        input.problem("idempotencyKey", format!("must be 1 to {MAX_IDEMPOTENCY_KEY} characters"));
    }
    let fields = read_fields(module, &mut input, true);
    let now = db::now();
    // A key made here is new: 128 random bits (were it not, the insert fails, never
    // overwrites).
    let chosen = id.is_some();
    let key = id.unwrap_or_else(|| new_id(prefix));
    let object = Object { key, fields, archived: false, created_at: now.clone(), updated_at: now };
    input.extend(check_rules(module, ctx, &object)?);
    input.finish()?;

    let objects = ctx.objects();
    // The key belongs to the live object made with it; an archived holder gives it up.
    let mut archived_holder = None;
    if let Some(key) = &idempotency_key
        && let Some(holder) = objects.load_by_idempotency_key(module.kind, key)?
    {
        if !holder.archived {
            return Ok(holder.to_json(module.kind));
        }
        archived_holder = Some(holder.key);
    }
    if chosen && objects.load(module.kind, &object.key)?.is_some() {
        return Err(ApiError::new(
            Code::AlreadyExists,
            format!("{} {:?} already exists", module.kind.kind, object.key),
        ));
    }
    check_references(ctx, module, &object, None)?;
    check_plugin(module, ctx, &object, None)?;
    if let Some(holder) = archived_holder {
        objects.release_idempotency_key(module.kind, &holder)?;
    }
    objects.insert(module.kind, &object, idempotency_key.as_deref())?;
    audit(ctx, module, "create", None, Some(&object))?;
    Ok(object.to_json(module.kind))
}

fn update(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let id = read_key(module.kind, &mut input);
    let changes = read_fields(module, &mut input, false);
    let stored = match &id {
        Some(id) => ctx.objects().load(module.kind, id)?,
        None => None,
    };
    if let Some(stored) = &stored {
        for field in module.kind.fields.iter().filter(|field| field.immutable) {
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
        let immutable = |name: &str| module.kind.fields.iter().any(|field| field.immutable && field.name == name);
        merged.fields.extend(
            changes.iter().filter(|(name, _)| !immutable(name)).map(|(name, value)| (name.clone(), value.clone())),
        );
        input.extend(check_rules(module, ctx, &merged)?);
    }
    input.finish()?;
    let id = id.unwrap_or_default();
    let stored = stored.ok_or_else(|| not_found(module.kind, &id))?;

    let changed: Map<String, Value> =
        changes.into_iter().filter(|(name, value)| stored.fields.get(name) != Some(value)).collect();
    if changed.is_empty() {
        return Ok(stored.to_json(module.kind));
    }
    let mut object = stored.clone();
    object.fields.extend(changed.clone());
    object.updated_at = db::now();
    check_references(ctx, module, &object, Some(&changed))?;
    check_plugin(module, ctx, &object, Some(&stored))?;
    ctx.objects().write(module.kind, &object)?;
    audit(ctx, module, "update", Some(&stored), Some(&object))?;
    Ok(object.to_json(module.kind))
}

/// The quota upsert: the object afterwards is exactly the limits given (absent ones 0).
/// Setting the limits a quota already has changes nothing, `updatedAt` included.
fn set(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let owner = read_key(module.kind, &mut input);
    let fields = read_fields(module, &mut input, true);
    let stored = match &owner {
        Some(owner) => ctx.objects().load(module.kind, owner)?,
        None => None,
    };
    let owner = owner.unwrap_or_default();
    let now = db::now();
    let created_at = stored.as_ref().map_or_else(|| now.clone(), |stored| stored.created_at.clone());
    let object = Object { key: owner, fields, archived: false, created_at, updated_at: now };
    input.extend(check_rules(module, ctx, &object)?);
    input.finish()?;

    if let Some(stored) = &stored
        && stored.fields == object.fields
    {
        return Ok(stored.to_json(module.kind));
    }
    check_references(ctx, module, &object, None)?;
    ctx.objects().write(module.kind, &object)?;
    audit(ctx, module, "set", stored.as_ref(), Some(&object))?;
    Ok(object.to_json(module.kind))
}

/// Removes the object; the answer is the object as it was. Its idempotency key is free
/// again.
fn delete(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let object = existing(module, ctx, body)?;
    check_unreferenced(ctx, module, &object)?;
    ctx.objects().delete(module.kind, &object.key)?;
    audit(ctx, module, "delete", Some(&object), None)?;
    Ok(object.to_json(module.kind))
}

/// Archive and restore are idempotent: asking for the state an object is in changes
/// nothing. A restore must leave a live object with live references.
fn set_archived(module: &Module, ctx: &Ctx, body: Value, archived: bool) -> Result<Value, ApiError> {
    let stored = existing(module, ctx, body)?;
    if stored.archived == archived {
        return Ok(stored.to_json(module.kind));
    }
    let mut object = stored.clone();
    object.archived = archived;
    object.updated_at = db::now();
    if !archived {
        check_references(ctx, module, &object, None)?;
    }
    ctx.objects().write(module.kind, &object)?;
    audit(ctx, module, if archived { "archive" } else { "restore" }, Some(&stored), Some(&object))?;
    Ok(object.to_json(module.kind))
}

/// The audit record of a change from `before` to `after` (either absent for a create
/// or a delete): every field that differs, `archived` included.
fn audit(
    ctx: &Ctx,
    module: &Module,
    method: &'static str,
    before: Option<&Object>,
    after: Option<&Object>,
) -> Result<(), ApiError> {
    let archived = |object: Option<&Object>| object.map(|object| Value::Bool(object.archived));
    let (archived_before, archived_after) = (archived(before), archived(after));
    let mut changes: Vec<FieldChange> = module
        .kind
        .fields
        .iter()
        .map(|field| FieldChange {
            field: field.name,
            from: before.and_then(|object| object.fields.get(field.name)),
            to: after.and_then(|object| object.fields.get(field.name)),
        })
        .filter(|change| change.from != change.to)
        .collect();
    if module.kind.archives() && before.is_some() && after.is_some() && archived_before != archived_after {
        changes.push(FieldChange { field: "archived", from: archived_before.as_ref(), to: archived_after.as_ref() });
    }
    let key = after.or(before).map(|object| object.key.as_str()).unwrap_or_default();
    crate::audit::record(ctx, &module.kind.method(method).to_string(), module.kind.kind, key, &changes)
}

fn archive(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    set_archived(module, ctx, body, true)
}

fn restore(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    set_archived(module, ctx, body, false)
}

#[cfg(test)]
mod tests;

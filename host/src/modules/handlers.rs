//! The handlers of a module's methods.
//!
//! Every handler checks in the same order: the request's shape and values, with the
//! module's value rules (INVALID_ARGUMENT, all problems at once); then existence
//! (NOT_FOUND, ALREADY_EXISTS); then references and preconditions (FAILED_PRECONDITION).
//! Nothing is written before every check has passed, and the surrounding transaction
//! rolls back whatever a later call of the same transaction fails on.

use serde_json::{Map, Value, json};

use super::rules::{
    check_plugin, check_references, check_rules, check_unreferenced, new_id, not_found, read_fields, read_id, read_key,
};
use super::{MAX_IDEMPOTENCY_KEY, Module};
use crate::api::{ApiError, Code};
use crate::audit::FieldChange;
use crate::calls::context::Ctx;
use crate::calls::input::Input;
use crate::db;
use crate::store::{self, Object};

pub(super) fn list(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
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

pub(super) fn get(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    Ok(existing(module, ctx, body)?.to_json(module.kind))
}

pub(super) fn create(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
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

pub(super) fn update(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
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
pub(super) fn set(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
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
pub(super) fn delete(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
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

pub(super) fn archive(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    set_archived(module, ctx, body, true)
}

pub(super) fn restore(module: &Module, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    set_archived(module, ctx, body, false)
}

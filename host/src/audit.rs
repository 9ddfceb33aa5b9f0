//! The audit trail (SPEC §13): one record per successful mutation, made by the module
//! handlers and written in the transaction of the change itself (an apply's, many to a
//! statement, when the apply records itself; `store::trail` keeps them), with the
//! field-level changes; listed per tenant by `compute.audit.list`.

use serde_json::{Map, Value, json};

use crate::api::ApiError;
use crate::calls::context::{Ctx, Via};
use crate::calls::input::{Input, Page};
use crate::calls::registry::{Method, MethodKind, Registry, handler};
use crate::db;
use crate::db::params;
use crate::store::trail::{self, Record};

pub use crate::store::trail::FieldChange;

pub fn register(registry: &mut Registry) {
    let record = json!({"type": "object", "required": ["seq", "at", "principal", "method", "kind", "id", "via", "changes"],
        "properties": {
            "seq": {"type": "integer", "minimum": 1}, "at": {"type": "string", "format": "date-time"},
            "principal": {"type": "string"}, "method": {"type": "string"}, "kind": {"type": "string"},
            "id": {"type": "string"}, "via": {"type": "string", "enum": ["api", "fleet.apply", "fleet.heal"]},
            "key": {"type": "string", "description": "The object's name in the tenant's FleetConfig, when it has one."},
            "planHash": {"type": "string"},
            "changes": {"type": "array", "items": {"type": "object", "required": ["field", "from", "to"],
                "properties": {"field": {"type": "string"}, "from": {}, "to": {},
                    "fromKey": {"type": "string", "description": "The name of the object `from` references by id."},
                    "toKey": {"type": "string", "description": "The name of the object `to` references by id."}}}}}});
    let mut filters = Page::schema_properties();
    filters.insert("id".into(), crate::calls::schema::text_schema());
    filters.insert("kind".into(), crate::calls::schema::text_schema());
    let mut key = crate::calls::schema::text_schema();
    key["description"] = json!("An object's name as FleetConfig keys it (or its id): its records alone.");
    filters.insert("key".into(), key);
    filters.insert(
        "before".into(),
        json!({"type": "integer", "minimum": 1, "maximum": crate::calls::input::MAX_COUNT,
               "description": "Only records before this sequence number."}),
    );
    filters.insert(
        "order".into(),
        json!({"type": "string", "enum": ["oldest", "newest"], "default": "oldest",
               "description": "Oldest first (page on with after) or newest first (page on with before)."}),
    );
    registry.register(
        Method::new("audit", "list", MethodKind::Read, handler(list))
            .phase("v0.2")
            .summary("Lists the tenant's audit records oldest first after a sequence number, or newest first before one; optionally for one object (by id or name) or kind. Objects and the references in changes are named beside their ids.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "properties": filters}),
                json!({"type": "object", "required": ["records"], "properties": {
                    "records": {"type": "array", "items": record}}}),
            ),
    );
}

/// Records a mutation the caller just made, in its transaction: at once over the API;
/// inside an apply, kept in the apply's `Pending` and written with its plan hash when
/// the apply records itself (`trail::write_pending`), in the same transaction.
pub fn record(ctx: &Ctx, method: &str, kind: &str, id: &str, changes: &[FieldChange]) -> Result<(), ApiError> {
    let record = Record {
        tenant: ctx.caller.tenant.clone(),
        at: db::now(),
        principal: ctx.caller.principal.clone(),
        method: method.to_owned(),
        kind: kind.to_owned(),
        id: id.to_owned(),
        changes: serde_json::to_string(changes).map_err(ApiError::internal)?,
    };
    match ctx.via {
        Via::Api => trail::insert(ctx.db, ctx.via.as_str(), &record),
        Via::Apply(deferred) => {
            deferred.audits.push(record);
            Ok(())
        }
    }
}

fn list(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let page = input.page();
    let before = input.count("before", false);
    if before == Some(0) {
        input.problem("before", "must be a sequence number, 1 or more");
    }
    let before = before.map_or(i64::MAX, |before| i64::try_from(before).unwrap_or(i64::MAX));
    let newest = match input.string("order", false).as_deref() {
        None | Some("oldest") => false,
        Some("newest") => true,
        Some(_) => {
            input.problem("order", "must be \"oldest\" or \"newest\"");
            false
        }
    };
    let id = input.string("id", false);
    let kind = input.string("kind", false);
    let key = input.string("key", false);
    input.finish()?;
    // A key is the object's name (any kind's, unless one is given), or an id itself.
    let ids: Option<Vec<String>> = key.map(|key| ids_named(ctx, &key, kind.as_deref())).transpose()?;
    if ids.as_ref().is_some_and(|ids| id.as_ref().is_some_and(|id| !ids.contains(id))) {
        return Ok(json!({ "records": [] }));
    }
    let ids: Vec<Option<String>> = match (id, ids) {
        (Some(id), _) => vec![Some(id)],
        (None, Some(ids)) => ids.into_iter().map(Some).collect(),
        (None, None) => vec![None],
    };
    let order = if newest { "DESC" } else { "ASC" };
    let mut records = Vec::new();
    // One page per id a key names (one, or a few), merged into one.
    for id in &ids {
        read_page(
            ctx,
            &mut records,
            order,
            &[page.after as i64, before, page.limit as i64],
            id.as_deref(),
            kind.as_deref(),
        )?;
    }
    records.sort_by_key(|record| record["seq"].as_i64().unwrap_or_default());
    if newest {
        records.reverse();
    }
    records.truncate(usize::try_from(page.limit).unwrap_or(usize::MAX));
    name_ids(ctx, &mut records)?;
    Ok(json!({ "records": records }))
}

/// A page of records (`after`, `before`, `limit`) in `order`, of one object or all.
fn read_page(
    ctx: &Ctx,
    records: &mut Vec<Value>,
    order: &str,
    [after, before, limit]: &[i64; 3],
    id: Option<&str>,
    kind: Option<&str>,
) -> Result<(), ApiError> {
    ctx.db.for_each(
        &format!(
            "SELECT seq, at, principal, method, kind, object_id, via, plan_hash, changes FROM audit
             WHERE tenant = ?1 AND seq > ?2 AND seq < ?6 AND (CAST(?3 AS TEXT) IS NULL OR object_id = ?3)
               AND (CAST(?4 AS TEXT) IS NULL OR kind = ?4)
             ORDER BY seq {order} LIMIT ?5"
        ),
        params![&ctx.caller.tenant, *after, id, kind, *limit, *before],
        |row| {
            let (seq, plan_hash): (i64, Option<String>) = (row.get(0)?, row.get(7)?);
            let [at, principal, method, kind, id, via, changes] =
                [1, 2, 3, 4, 5, 6, 8].map(|column| row.get::<String>(column));
            let mut record = Map::new();
            record.insert("seq".into(), json!(seq));
            record.insert("at".into(), json!(at?));
            record.insert("principal".into(), json!(principal?));
            record.insert("method".into(), json!(method?));
            record.insert("kind".into(), json!(kind?));
            record.insert("id".into(), json!(id?));
            record.insert("via".into(), json!(via?));
            if let Some(plan_hash) = plan_hash {
                record.insert("planHash".into(), json!(plan_hash));
            }
            let changes = changes?;
            let changes = serde_json::from_str(&changes).map_err(|error| db::decode(8, error))?;
            record.insert("changes".into(), changes);
            records.push(Value::Object(record));
            Ok(())
        },
    )?;
    Ok(())
}

/// The ids of the tenant's objects named `key` (of `kind`, if given), and `key` itself,
/// which may be an id or a quota's owner.
fn ids_named(ctx: &Ctx, key: &str, kind: Option<&str>) -> Result<Vec<String>, ApiError> {
    let mut ids: Vec<String> = ctx.db.query(
        "SELECT id FROM fleet_bindings WHERE tenant = ?1 AND name = ?2 AND (CAST(?3 AS TEXT) IS NULL OR kind = ?3)",
        params![&ctx.caller.tenant, key, kind],
        |row| row.get(0),
    )?;
    ids.push(key.to_owned());
    Ok(ids)
}

/// Names beside ids, as plans and drift name objects: each record's object, and the
/// objects its changes reference, by the names the tenant's applies bound them to
/// (fleet's bindings; an object made over the API alone has none).
fn name_ids(ctx: &Ctx, records: &mut [Value]) -> Result<(), ApiError> {
    let looks_like_id = |value: &Value| value.as_str().filter(|text| text.contains('_')).map(str::to_owned);
    let mut ids: Vec<String> = Vec::new();
    for record in records.iter() {
        ids.extend(looks_like_id(&record["id"]));
        for change in record["changes"].as_array().into_iter().flatten() {
            ids.extend(looks_like_id(&change["from"]));
            ids.extend(looks_like_id(&change["to"]));
        }
    }
    ids.sort_unstable();
    ids.dedup();
    let mut names = std::collections::HashMap::new();
    for id in ids {
        // Through the bindings' index by id: a page's worth of lookups.
        let name: Option<String> = ctx.db.query_opt(
            "SELECT name FROM fleet_bindings WHERE tenant = ?1 AND id = ?2",
            params![&ctx.caller.tenant, &id],
            |row| row.get(0),
        )?;
        if let Some(name) = name {
            names.insert(id, name);
        }
    }
    let name = |value: &Value| value.as_str().and_then(|id| names.get(id)).map(|name| json!(name));
    for record in records.iter_mut() {
        if let Some(key) = name(&record["id"]) {
            record["key"] = key;
        }
        for change in record["changes"].as_array_mut().into_iter().flatten() {
            if let Some(key) = name(&change["from"]) {
                change["fromKey"] = key;
            }
            if let Some(key) = name(&change["to"]) {
                change["toKey"] = key;
            }
        }
    }
    Ok(())
}

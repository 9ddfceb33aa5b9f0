//! The audit trail (SPEC §13): one record per successful mutation, written by the module
//! handlers in the transaction of the change itself, with the field-level changes;
//! listed per tenant by `compute.audit.list`, and read by the drift reconciler to say
//! who changed a drifted object.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::api::ApiError;
use crate::calls::input::{Input, Page};
use crate::calls::registry::{Ctx, Method, MethodKind, Registry};
use crate::db::{self, Conn};
use crate::params;

pub fn register(registry: &mut Registry) {
    let record = json!({"type": "object", "required": ["seq", "at", "principal", "method", "kind", "id", "via", "changes"],
        "properties": {
            "seq": {"type": "integer", "minimum": 1}, "at": {"type": "string", "format": "date-time"},
            "principal": {"type": "string"}, "method": {"type": "string"}, "kind": {"type": "string"},
            "id": {"type": "string"}, "via": {"type": "string", "enum": ["api", "fleet.apply"]},
            "planHash": {"type": "string"},
            "changes": {"type": "array", "items": {"type": "object", "required": ["field", "from", "to"],
                "properties": {"field": {"type": "string"}, "from": {}, "to": {}}}}}});
    let mut filters = Page::schema_properties();
    filters.insert("id".into(), crate::modules::text_schema());
    filters.insert("kind".into(), crate::modules::text_schema());
    registry.register(
        Method::new("audit", "list", MethodKind::Read, Arc::new(list))
            .phase("v0.2")
            .summary("Lists the tenant's audit records after a sequence number, oldest first, optionally for one object id or kind.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "properties": filters}),
                json!({"type": "object", "required": ["records"], "properties": {
                    "records": {"type": "array", "items": record}}}),
            ),
    );
}

/// One field's change: `from` is null on a create, `to` on a delete.
pub struct FieldChange<'a> {
    pub field: &'a str,
    pub from: Option<&'a Value>,
    pub to: Option<&'a Value>,
}

/// Appends a record of a mutation the caller just made, in its transaction. An apply's
/// records get its plan hash when the apply records itself (`stamp_plan_hash`).
pub fn record(ctx: &Ctx, method: &str, kind: &str, id: &str, changes: &[FieldChange]) -> Result<(), ApiError> {
    let changes: Vec<Value> =
        changes.iter().map(|change| json!({"field": change.field, "from": change.from, "to": change.to})).collect();
    ctx.db.execute(
        "INSERT INTO audit (tenant, at, principal, method, kind, object_id, via, changes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            &ctx.caller.tenant,
            &db::now(),
            &ctx.caller.principal,
            method,
            kind,
            id,
            ctx.via.as_str(),
            &Value::Array(changes).to_string()
        ],
    )?;
    Ok(())
}

/// The sequence number of the last audit record (0 before the first).
pub fn last_seq(db: &Conn) -> Result<i64, ApiError> {
    Ok(db.query_one("SELECT coalesce(max(seq), 0) FROM audit", &[], |row| row.get(0))?)
}

/// Inside an apply's transaction: its records, those after `after` (the last record
/// before it began: writers run one at a time), get the plan hash it applied. A range
/// of the primary key, however long the tenant's history.
pub fn stamp_plan_hash(db: &Conn, tenant: &str, after: i64, plan_hash: &str) -> Result<(), ApiError> {
    db.execute(
        "UPDATE audit SET plan_hash = ?3 WHERE seq > ?2 AND tenant = ?1 AND via = 'fleet.apply' AND plan_hash IS NULL",
        params![tenant, after, plan_hash],
    )?;
    Ok(())
}

/// Who last changed an object, when and through which method: `(principal, at, method)`.
pub fn last_change(
    db: &Conn,
    tenant: &str,
    kind: &str,
    id: &str,
) -> Result<Option<(String, String, String)>, ApiError> {
    Ok(db.query_opt(
        "SELECT principal, at, method FROM audit WHERE tenant = ?1 AND kind = ?2 AND object_id = ?3
         ORDER BY seq DESC LIMIT 1",
        params![tenant, kind, id],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )?)
}

fn list(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let page = input.page();
    let id = input.string("id", false);
    let kind = input.string("kind", false);
    input.finish()?;
    let mut records = Vec::new();
    ctx.db.for_each(
        "SELECT seq, at, principal, method, kind, object_id, via, plan_hash, changes FROM audit
         WHERE tenant = ?1 AND seq > ?2 AND (CAST(?3 AS TEXT) IS NULL OR object_id = ?3)
           AND (CAST(?4 AS TEXT) IS NULL OR kind = ?4)
         ORDER BY seq LIMIT ?5",
        params![&ctx.caller.tenant, page.after as i64, id.as_deref(), kind.as_deref(), page.limit as i64],
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
    Ok(json!({ "records": records }))
}

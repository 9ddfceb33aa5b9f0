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
            "planHash": {"type": "string"},
            "changes": {"type": "array", "items": {"type": "object", "required": ["field", "from", "to"],
                "properties": {"field": {"type": "string"}, "from": {}, "to": {}}}}}});
    let mut filters = Page::schema_properties();
    filters.insert("id".into(), crate::calls::schema::text_schema());
    filters.insert("kind".into(), crate::calls::schema::text_schema());
    registry.register(
        Method::new("audit", "list", MethodKind::Read, handler(list))
            .phase("v0.2")
            .summary("Lists the tenant's audit records after a sequence number, oldest first, optionally for one object id or kind.")
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

//! The audit trail (SPEC §13): one record per successful mutation, made by the module
//! handlers and written in the transaction of the change itself (an apply's, many to a
//! statement, when the apply records itself), with the field-level changes; listed per
//! tenant by `compute.audit.list`, and read by the drift reconciler to say who changed
//! a drifted object.

use std::cell::RefCell;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::api::ApiError;
use crate::calls::input::{Input, Page};
use crate::calls::registry::{Ctx, Deferred, Method, MethodKind, Registry, Via};
use crate::db::{self, Conn, Param};
use crate::params;

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

/// One field's change: `from` is null on a create, `to` on a delete. Stored as
/// `{"field", "from", "to"}`.
#[derive(serde::Serialize)]
pub struct FieldChange<'a> {
    pub field: &'a str,
    pub from: Option<&'a Value>,
    pub to: Option<&'a Value>,
}

/// Records a mutation the caller just made, in its transaction: at once over the API;
/// inside an apply, kept in the apply's `Pending` and written with its plan hash when
/// the apply records itself (`write_pending`), in the same transaction.
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
        Via::Api => insert(ctx.db, ctx.via.as_str(), &record),
        Via::Apply(deferred) => {
            deferred.audits.0.borrow_mut().push(record);
            Ok(())
        }
    }
}

/// A record not written yet.
struct Record {
    tenant: String,
    at: String,
    principal: String,
    method: String,
    kind: String,
    id: String,
    changes: String,
}

/// The records of an apply's calls, in the order of the calls.
#[derive(Default)]
pub struct Pending(RefCell<Vec<Record>>);

/// Records written by one statement: a round trip for this many.
const ROWS_PER_STATEMENT: usize = 64;

/// Writes an apply's records with the plan hash it applied.
pub fn write_pending(db: &Conn, deferred: &Deferred, via: &str, plan_hash: &str) -> Result<(), ApiError> {
    let records = deferred.audits.0.take();
    let values: Vec<Param> = records.iter().flat_map(Record::values).collect();
    let shared = [Param::Text(via), Param::Text(plan_hash)];
    db.insert_rows("audit", &COLUMNS, &shared, &values, ROWS_PER_STATEMENT)?;
    Ok(())
}

/// The columns an audit record writes: the two its apply shares, then its own.
const COLUMNS: [&str; 9] = ["via", "plan_hash", "tenant", "at", "principal", "method", "kind", "object_id", "changes"];

impl Record {
    /// Its own values, in the order of [`COLUMNS`] after the shared two.
    fn values(&self) -> [Param<'_>; 7] {
        [&self.tenant, &self.at, &self.principal, &self.method, &self.kind, &self.id, &self.changes].map(Param::from)
    }
}

/// Writes the record of a call made through the API, which has no plan hash.
fn insert(db: &Conn, via: &str, record: &Record) -> Result<(), ApiError> {
    let sql = format!("INSERT INTO audit ({}) VALUES {}", COLUMNS.join(", "), db::value_rows(1, 2, 7));
    let mut values = vec![Param::Text(via), Param::Null];
    values.extend(record.values());
    db.execute(&sql, &values)?;
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

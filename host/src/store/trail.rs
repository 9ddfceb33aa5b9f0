//! The audit trail's storage (SPEC §13): one record per successful mutation, written in
//! the mutation's own transaction; an apply's records wait in its [`Pending`] and are
//! written with its plan hash when it records itself. `crate::audit` makes the records
//! and serves `compute.audit.list`.

use std::cell::RefCell;

use serde_json::Value;

use crate::api::ApiError;
use crate::db::params;
use crate::db::{self, Conn, Param};

/// One field's change: `from` is null on a create, `to` on a delete. Stored as
/// `{"field", "from", "to"}`.
#[derive(serde::Serialize)]
pub struct FieldChange<'a> {
    pub field: &'a str,
    pub from: Option<&'a Value>,
    pub to: Option<&'a Value>,
}

/// A record not written yet.
pub struct Record {
    pub tenant: String,
    pub at: String,
    pub principal: String,
    pub method: String,
    pub kind: String,
    pub id: String,
    /// The changes, as JSON text.
    pub changes: String,
}

/// The records of an apply's calls, in the order of the calls.
#[derive(Default)]
pub struct Pending(RefCell<Vec<Record>>);

impl Pending {
    pub fn push(&self, record: Record) {
        self.0.borrow_mut().push(record);
    }
}

/// Records written by one statement: a round trip for this many.
const ROWS_PER_STATEMENT: usize = 64;

/// The columns an audit record writes: the two its apply shares, then its own.
const COLUMNS: [&str; 9] = ["via", "plan_hash", "tenant", "at", "principal", "method", "kind", "object_id", "changes"];

impl Record {
    /// Its own values, in the order of [`COLUMNS`] after the shared two.
    fn values(&self) -> [Param<'_>; 7] {
        [&self.tenant, &self.at, &self.principal, &self.method, &self.kind, &self.id, &self.changes].map(Param::from)
    }
}

/// Writes an apply's records with the plan hash it applied.
pub fn write_pending(db: &Conn, pending: &Pending, via: &str, plan_hash: &str) -> Result<(), ApiError> {
    let records = pending.0.take();
    let values: Vec<Param> = records.iter().flat_map(Record::values).collect();
    let shared = [Param::Text(via), Param::Text(plan_hash)];
    db.insert_rows("audit", &COLUMNS, &shared, &values, ROWS_PER_STATEMENT)?;
    Ok(())
}

/// Writes the record of a call made through the API, which has no plan hash.
pub fn insert(db: &Conn, via: &str, record: &Record) -> Result<(), ApiError> {
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

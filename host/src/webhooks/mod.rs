//! Notifications (SPEC §18): a tenant's webhooks, and the durable outbox that delivers
//! its events to them, signed as the Standard Webhooks specification says.
//!
//! An event's deliveries are written in the transaction that writes the event
//! ([`enqueue`], called by `events::publish`), so an event committed is an event that
//! will be delivered, through restarts and `kill -9`. The [`Deliverer`] of every replica
//! (`deliver.rs`) claims due deliveries in the database (`outbox.rs`: each attempt is one
//! replica's), sends them (`client.rs`), and retries with backoff for 24 hours.
//! `crate::reach` keeps deliveries from reaching inside the deployment's network;
//! `sign.rs` signs; `methods.rs` is `compute.webhooks.*`; `at_rest.rs` keeps the signing
//! secrets sealed in the database when the deployment has a key (SPEC §20.4).

mod at_rest;
mod client;
mod deliver;
mod methods;
mod outbox;
pub(crate) mod sign;

use serde_json::{Value, json};

pub use crate::reach::Reach;
pub use deliver::{Delivered, Deliverer, Schedule};
pub use methods::register;

use crate::api::ApiError;
use crate::db::{Conn, params};

/// The event `compute.webhooks.test` delivers.
pub const TEST: &str = "webhook.test";
/// The most webhooks a tenant may have unless the deployment says otherwise
/// (`serve --webhooks-per-tenant`): each one's outbox is work for every replica.
pub const PER_TENANT: usize = 20;
/// The most deliveries one webhook keeps pending: past it, the oldest fail, so that a
/// dead endpoint's outbox does not grow without bound.
pub const MAX_PENDING: i64 = 1000;

/// An event as its deliveries carry it.
pub struct Event<'a> {
    pub tenant: &'a str,
    pub seq: i64,
    /// Its `webhook-id`, stored with it.
    pub webhook_id: &'a str,
    pub kind: &'a str,
    pub at: &'a str,
    pub data: &'a Value,
}

/// In the transaction of the tenant's `event`: a delivery of it to every enabled
/// webhook of the tenant that takes its kind.
pub fn enqueue(db: &Conn, event: &Event) -> Result<(), ApiError> {
    let names: Vec<String> = db.query(
        "SELECT name FROM webhooks WHERE tenant = ?1 AND enabled = 1
           AND (events LIKE '%,*,%' OR events LIKE '%,' || ?2 || ',%')",
        params![event.tenant, event.kind],
        |row| row.get(0),
    )?;
    if names.is_empty() {
        return Ok(());
    }
    let body = body(event.kind, event.at, event.tenant, event.seq, event.data);
    for name in names {
        insert(db, event.tenant, &name, event.webhook_id, event.kind, &body)?;
    }
    Ok(())
}

/// `{"type", "timestamp", "data": {…the event's data, "tenant", "seq"}}`.
fn body(kind: &str, at: &str, tenant: &str, seq: i64, data: &Value) -> String {
    let mut data = match data {
        Value::Object(members) => members.clone(),
        _ => serde_json::Map::new(),
    };
    data.insert("tenant".into(), json!(tenant));
    data.insert("seq".into(), json!(seq));
    json!({"type": kind, "timestamp": at, "data": data}).to_string()
}

/// A pending delivery to `webhook`; past [`MAX_PENDING`], its oldest pending one fails
/// (counted as a failed delivery).
fn insert(db: &Conn, tenant: &str, webhook: &str, message: &str, kind: &str, body: &str) -> Result<(), ApiError> {
    let now = outbox::now_ms();
    db.execute(
        "INSERT INTO webhook_deliveries (tenant, webhook, message, type, body, state, created_ms, next_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?6)",
        params![tenant, webhook, message, kind, body, now],
    )?;
    let pending: i64 = db.query_one(
        "SELECT count(*) FROM webhook_deliveries WHERE tenant = ?1 AND webhook = ?2 AND state = 'pending'",
        params![tenant, webhook],
        |row| row.get(0),
    )?;
    if pending > MAX_PENDING {
        let oldest: Option<i64> = db.query_one(
            "SELECT min(id) FROM webhook_deliveries WHERE tenant = ?1 AND webhook = ?2 AND state = 'pending'",
            params![tenant, webhook],
            |row| row.get::<Option<i64>>(0),
        )?;
        if let Some(oldest) = oldest {
            let why =
                format!("dropped: the webhook had {MAX_PENDING} deliveries pending (its endpoint does not take them)");
            outbox::fail(db, oldest, tenant, webhook, &why)?;
            db.count_at_commit(|metrics| metrics.webhook_attempt("failed"));
        }
    }
    Ok(())
}

/// Deliveries pending in every tenant's outbox (`fleet_webhook_pending`).
pub fn pending(db: &Conn) -> Result<i64, ApiError> {
    Ok(db.query_one("SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'", &[], |row| row.get(0))?)
}

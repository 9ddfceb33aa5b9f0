//! The event log: events stored with a sequence number in the transaction that makes
//! them (their webhook deliveries with them), listed per tenant by
//! `compute.events.list`, and followed live as Server-Sent Events (`http::sse`), which
//! [`Wake`] tells when events were committed.

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::api::ApiError;
use crate::calls::context::Ctx;
use crate::calls::input::{Input, Page};
use crate::calls::registry::{Method, MethodKind, Registry, handler};
use crate::db::params;
use crate::db::{self, Conn};

pub const DRIFTED: &str = "fleet.drifted";
pub const CONVERGED: &str = "fleet.converged";
/// fleet.drift restored a revision that heals (SPEC §15).
pub const HEALED: &str = "fleet.healed";
/// Every apply, heal and proposal apply (SPEC §18).
pub const APPLIED: &str = "fleet.applied";
/// A proposal's life (SPEC §17).
pub const PROPOSAL_OPENED: &str = "proposal.opened";
pub const PROPOSAL_REVIEWED: &str = "proposal.reviewed";
pub const PROPOSAL_APPROVED: &str = "proposal.approved";
pub const PROPOSAL_REJECTED: &str = "proposal.rejected";
pub const PROPOSAL_APPLIED: &str = "proposal.applied";
pub const PROPOSAL_STALE: &str = "proposal.stale";
pub const PROPOSAL_WITHDRAWN: &str = "proposal.withdrawn";
/// A git source's cycle came to a new state (SPEC §20.3).
pub const SOURCE_OUT_OF_SYNC: &str = "source.outOfSync";
pub const SOURCE_SYNCED: &str = "source.synced";
pub const SOURCE_PROPOSED: &str = "source.proposed";
pub const SOURCE_BLOCKED: &str = "source.blocked";
pub const SOURCE_DIVERGED: &str = "source.diverged";
pub const SOURCE_FAILING: &str = "source.failing";
pub const SOURCE_UNVERIFIED: &str = "source.unverified";
/// Every event type fleet publishes, for the metrics to count from zero.
pub const TYPES: [&str; 18] = [
    APPLIED,
    DRIFTED,
    CONVERGED,
    HEALED,
    PROPOSAL_OPENED,
    PROPOSAL_REVIEWED,
    PROPOSAL_APPROVED,
    PROPOSAL_REJECTED,
    PROPOSAL_APPLIED,
    PROPOSAL_STALE,
    PROPOSAL_WITHDRAWN,
    SOURCE_OUT_OF_SYNC,
    SOURCE_SYNCED,
    SOURCE_PROPOSED,
    SOURCE_BLOCKED,
    SOURCE_DIVERGED,
    SOURCE_FAILING,
    SOURCE_UNVERIFIED,
];

/// Wakes this process's event streams when events were committed (those of other
/// replicas are woken by `NOTIFY`).
pub type Wake = broadcast::Sender<()>;

/// A new wake, with no stream yet.
pub fn wake() -> Wake {
    broadcast::channel(64).0
}

pub fn register(registry: &mut Registry) {
    registry.register(
        Method::new("events", "list", MethodKind::Read, handler(list))
            .phase("v0.2")
            .summary("Lists the tenant's events after a sequence number, oldest first.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "properties": Page::schema_properties()}),
                json!({"type": "object", "properties": {"events": {"type": "array", "items": {"type": "object"}}}}),
            ),
    );
}

/// Stores an event in the caller's transaction, which must be a writer's: writers run
/// one at a time, so sequence numbers are given in the order their transactions commit
/// and a reader resuming after `seq` never skips one committed late. Subscribers of this
/// process are woken after commit by the caller; those of other replicas by `NOTIFY`.
/// The event is counted in the metrics when its transaction commits.
pub fn publish(db: &Conn, tenant: &str, kind: &str, data: &Value) -> Result<i64, ApiError> {
    let counted = kind.to_owned();
    db.count_at_commit(move |metrics| metrics.published(&counted));
    let at = db::now();
    let webhook_id = webhook_id();
    let seq = db.query_one(
        "INSERT INTO events (tenant, type, at, data, webhook_id) VALUES (?1, ?2, ?3, ?4, ?5) RETURNING seq",
        params![tenant, kind, &at, &data.to_string(), &webhook_id],
        |row| row.get(0),
    )?;
    // Its deliveries to the tenant's webhooks, in the same transaction (SPEC §18).
    let event = crate::webhooks::Event { tenant, seq, webhook_id: &webhook_id, kind, at: &at, data };
    crate::webhooks::enqueue(db, &event)?;
    db::notify_events(db)?;
    Ok(seq)
}

/// An event's `webhook-id` (SPEC §18): `evt_` and 128 random bits, so that no restore of
/// an older backup and no other deployment sends it with another body.
fn webhook_id() -> String {
    use rand::RngCore as _;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    fleet_guest::grammar::id_from("evt", &bytes)
}

/// The tenant's events after `after`, oldest first, at most `limit`.
pub fn read(db: &Conn, tenant: &str, after: u64, limit: u64) -> Result<Vec<Value>, ApiError> {
    Ok(db.query(
        "SELECT seq, type, tenant, at, data FROM events WHERE tenant = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        params![tenant, after as i64, limit as i64],
        |row| {
            let seq: i64 = row.get(0)?;
            let data: Value = serde_json::from_str(row.text(4)?).map_err(|error| db::decode(4, error))?;
            Ok(json!({ "seq": seq, "type": row.text(1)?, "tenant": row.text(2)?, "at": row.text(3)?, "data": data }))
        },
    )?)
}

fn list(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let page = input.page();
    input.finish()?;
    let events = read(ctx.db, &ctx.caller.tenant, page.after, page.limit)?;
    Ok(json!({ "events": events }))
}

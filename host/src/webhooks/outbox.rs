//! The outbox's SQL: claiming due deliveries (a claim is one replica's until it ends or
//! lapses), recording an attempt and what its outcome makes of the delivery, and
//! failing one at once. The times it is given (a claim's end, a retry's wait, the
//! window) are the [`Deliverer`](super::Deliverer)'s; what it answers is what changed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::at_rest;
use crate::api::ApiError;
use crate::db::{self, Conn, params};
use crate::secrets::{self, Key};

/// A tenant's attempts in flight at once, across replicas.
const PER_TENANT: i64 = 2;

/// Milliseconds since the Unix epoch: the clock of the outbox's due times.
pub(super) fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// A delivery this replica claimed.
pub(super) struct Claimed {
    pub(super) id: i64,
    pub(super) tenant: String,
    pub(super) webhook: String,
    /// Its `webhook-id`.
    pub(super) message: String,
    pub(super) body: String,
    /// The attempts made of it, this one included.
    pub(super) attempts: i64,
    pub(super) created_ms: i64,
}

/// Where a claimed delivery goes, and the secret that signs it, opened (or why it could
/// not be: sealed with another key, or this server has none).
pub(super) struct Endpoint {
    pub(super) url: String,
    pub(super) secret: Result<String, secrets::Error>,
}

/// What an attempt came to.
pub(super) enum Outcome {
    Answered(u16),
    Failed(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Answered(status) => write!(formatter, "answered {status}"),
            Outcome::Failed(error) => formatter.write_str(error),
        }
    }
}

/// What recording an attempt made of its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recorded {
    /// Answered with a 2xx.
    Delivered,
    /// Answered `410 Gone`: the webhook is disabled and `failed` deliveries with it, this
    /// one and every other pending one of the webhook.
    Disabled { failed: u64 },
    /// Its next attempt would fall past its window: it failed.
    Failed,
    /// To be tried again after its backoff.
    Retried,
}

/// When the outbox's earliest pending delivery falls due (none when nothing is pending):
/// one index read.
pub(super) fn earliest(db: &Conn) -> Result<Option<i64>, ApiError> {
    Ok(db.query_one("SELECT min(next_ms) FROM webhook_deliveries WHERE state = 'pending'", &[], |row| {
        row.get::<Option<i64>>(0)
    })?)
}

/// Claims until `until` up to `most` deliveries due at `now`, at most [`PER_TENANT`] of a
/// tenant's and none of a tenant with one in flight anywhere, each with its webhook's
/// endpoint (none when the webhook is gone or disabled). A claim moves a delivery's due
/// time to the claim's end, where another replica may take it if this one died, so that
/// the earliest due time stays one index read. Each endpoint's secret is opened with
/// `key`.
pub(super) fn claim(
    db: &Conn,
    now: i64,
    until: i64,
    most: usize,
    key: Option<&Key>,
) -> Result<Vec<(Claimed, Option<Endpoint>)>, ApiError> {
    let rows = db.query(
        "UPDATE webhook_deliveries SET claimed_until_ms = ?2, next_ms = ?2, attempts = attempts + 1
         WHERE id IN (
           SELECT id FROM (
             SELECT d.id, ROW_NUMBER() OVER (PARTITION BY d.tenant ORDER BY d.next_ms, d.id) AS rank
             FROM webhook_deliveries d
             WHERE d.state = 'pending' AND d.next_ms <= ?1 AND d.claimed_until_ms <= ?1
               AND d.tenant NOT IN (SELECT f.tenant FROM webhook_deliveries f
                                    WHERE f.state = 'pending' AND f.claimed_until_ms > ?1)
           ) ranked
           WHERE rank <= ?3 ORDER BY id LIMIT ?4)
         AND state = 'pending' AND claimed_until_ms <= ?1
         RETURNING id, tenant, webhook, message, body, attempts, created_ms",
        params![now, until, PER_TENANT, i64::try_from(most).unwrap_or(i64::MAX)],
        |row| {
            Ok(Claimed {
                id: row.get(0)?,
                tenant: row.get(1)?,
                webhook: row.get(2)?,
                message: row.get(3)?,
                body: row.get(4)?,
                attempts: row.get(5)?,
                created_ms: row.get(6)?,
            })
        },
    )?;
    let mut claimed = Vec::with_capacity(rows.len());
    for delivery in rows {
        let endpoint = db.query_opt(
            "SELECT url, secret FROM webhooks WHERE tenant = ?1 AND name = ?2 AND enabled = 1",
            params![&delivery.tenant, &delivery.webhook],
            |row| Ok((row.get::<String>(0)?, row.get::<String>(1)?)),
        )?;
        let endpoint = endpoint.map(|(url, stored)| Endpoint {
            url,
            secret: at_rest::reveal(key, &delivery.tenant, &delivery.webhook, &stored),
        });
        claimed.push((delivery, endpoint));
    }
    Ok(claimed)
}

/// In one transaction, the attempt's row and what its outcome makes of the delivery: a
/// 2xx delivers it; `410 Gone` disables the webhook and fails its pending deliveries;
/// anything else retries it `backoff` ms from now, unless that falls more than `window`
/// ms after it was made, when it fails.
pub(super) fn record(
    db: &Conn,
    delivery: &Claimed,
    outcome: &Outcome,
    elapsed: Duration,
    backoff: i64,
    window: i64,
) -> Result<Recorded, ApiError> {
    db::transaction(db, db::Tx::Write(&delivery.tenant), |db| {
        let (status, error) = match outcome {
            Outcome::Answered(status) => (Some(i64::from(*status)), None),
            Outcome::Failed(error) => (None, Some(error.as_str())),
        };
        attempted(db, delivery, status, error, elapsed)?;
        let now = now_ms();
        match outcome {
            Outcome::Answered(status) if (200..300).contains(status) => {
                db.execute(
                    "UPDATE webhook_deliveries SET state = 'delivered', claimed_until_ms = 0
                     WHERE id = ?1 AND state = 'pending'",
                    params![delivery.id],
                )?;
                Ok(Recorded::Delivered)
            }
            Outcome::Answered(410) => {
                let why = format!("disabled at {}: the endpoint answered 410 Gone", db::now());
                db.execute(
                    "UPDATE webhooks SET enabled = 0, disabled = ?3 WHERE tenant = ?1 AND name = ?2",
                    params![&delivery.tenant, &delivery.webhook, &why],
                )?;
                let failed = db.execute(
                    "UPDATE webhook_deliveries SET state = 'failed', claimed_until_ms = 0
                     WHERE tenant = ?1 AND webhook = ?2 AND state = 'pending'",
                    params![&delivery.tenant, &delivery.webhook],
                )?;
                Ok(Recorded::Disabled { failed })
            }
            _ => {
                let next = now + backoff;
                if next - delivery.created_ms > window {
                    db.execute(
                        "UPDATE webhook_deliveries SET state = 'failed', claimed_until_ms = 0
                         WHERE id = ?1 AND state = 'pending'",
                        params![delivery.id],
                    )?;
                    Ok(Recorded::Failed)
                } else {
                    db.execute(
                        "UPDATE webhook_deliveries SET next_ms = ?2, claimed_until_ms = 0
                         WHERE id = ?1 AND state = 'pending'",
                        params![delivery.id, next],
                    )?;
                    Ok(Recorded::Retried)
                }
            }
        }
    })
}

/// The delivery's row of attempt `delivery.attempts`.
fn attempted(
    db: &Conn,
    delivery: &Claimed,
    status: Option<i64>,
    error: Option<&str>,
    elapsed: Duration,
) -> Result<(), ApiError> {
    db.execute(
        "INSERT INTO webhook_attempts (delivery, attempt, tenant, webhook, at, status, error, duration_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            delivery.id,
            delivery.attempts,
            &delivery.tenant,
            &delivery.webhook,
            &db::now(),
            status,
            error,
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX),
        ],
    )?;
    Ok(())
}

/// Fails a pending delivery at once, saying why, as an attempt of its own.
pub(super) fn fail(db: &Conn, id: i64, tenant: &str, webhook: &str, why: &str) -> Result<(), ApiError> {
    let attempts: i64 = db.query_one(
        "UPDATE webhook_deliveries SET state = 'failed', claimed_until_ms = 0, attempts = attempts + 1
         WHERE id = ?1 RETURNING attempts",
        params![id],
        |row| row.get(0),
    )?;
    db.execute(
        "INSERT INTO webhook_attempts (delivery, attempt, tenant, webhook, at, status, error, duration_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, NULL, ?6, 0)",
        params![id, attempts, tenant, webhook, &db::now(), why],
    )?;
    Ok(())
}

//! The drift checks' schedule (SPEC §6.5, docs/decisions/0014): when each tenant's next
//! check is due (an apply puts it one interval on, being a check itself), and which
//! replica holds it: claims a few due tenants at a time, each claim one statement, and
//! their release, each due again at its time.

use std::time::Duration;

use crate::api::ApiError;
use crate::db::{self, params};

/// How many due tenants a replica claims at once: small, so that replicas share the
/// work about evenly and a replica that dies holds few checks.
pub(super) const CLAIM_BATCH: i64 = 16;

pub(super) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Wall-clock milliseconds as the runtime's clock counts them from the start: real time
/// in a server (the monotonic clock, which NTP slews but never steps), paused time in
/// tests.
pub(super) struct Clock {
    wall: i64,
    started: tokio::time::Instant,
}

impl Clock {
    pub(super) fn start() -> Clock {
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Clock { wall: millis(wall), started: tokio::time::Instant::now() }
    }

    pub(super) fn now_ms(&self) -> i64 {
        self.wall.saturating_add(millis(self.started.elapsed()))
    }
}

/// The time now in milliseconds since the Unix epoch, as the schedule counts it.
pub fn now_ms() -> i64 {
    millis(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default())
}

/// Puts a tenant's next check one interval after `now` (an apply is a check), in the
/// apply's transaction.
pub(super) fn schedule(db: &db::Conn, tenant: &str, now: i64, interval: Duration) -> Result<(), ApiError> {
    db.execute(
        "INSERT INTO drift_schedule (tenant, due_at) VALUES (?1, ?2)
         ON CONFLICT (tenant) DO UPDATE SET due_at = excluded.due_at",
        params![tenant, now.saturating_add(millis(interval))],
    )?;
    Ok(())
}

/// When a check that was due at `due_at` and ran at `now` is due again. A check late by
/// at most a quarter of an interval (a replica polls four times an interval) keeps its
/// tenant's cadence: due one interval after it was due, so that the tenant is checked
/// once an interval and its period does not grow by each check's lateness. A check
/// later than that (the replicas fell behind, or the tenant's schedule is new) starts
/// again from now: from its old cadence it would be due again at once, checked twice
/// in one interval.
pub(super) fn next_due(due_at: i64, now: i64, interval: i64) -> i64 {
    let late = now.saturating_sub(due_at);
    match late <= interval / 4 {
        true => due_at.saturating_add(interval),
        false => now.saturating_add(interval),
    }
}

/// Claims up to [`CLAIM_BATCH`] tenants due at `now` whose checks nobody holds (or
/// whose holder's claim lapsed): one statement, so of the servers that poll together
/// exactly one claims each tenant: on PostgreSQL each candidate is locked as it is
/// chosen, and one another server holds is passed over. The outer `due_at` and
/// `claimed_until` conditions check each row again as it is written, so a tenant is
/// never claimed twice.
pub(super) fn claim(db: &db::Conn, replica: &str, now: i64, interval: i64) -> Result<Vec<(String, i64)>, ApiError> {
    let sql = match db.backend() {
        // The candidates another replica is claiming or releasing right now are skipped,
        // not waited for: waiting, this claim would find them claimed when it re-read
        // them and come back with fewer or none, and an empty claim ends the replica's
        // round until its next poll while tenants are still due. The candidates are
        // chosen once (a materialized CTE), whatever the table's statistics say: a
        // plan that ran the choice again for every row took seconds a claim.
        db::Backend::Postgres => {
            "WITH due AS MATERIALIZED (
                 SELECT tenant FROM drift_schedule
                 WHERE due_at <= ?2 AND (claimed_until IS NULL OR claimed_until <= ?2)
                 ORDER BY due_at, tenant LIMIT ?4 FOR UPDATE SKIP LOCKED)
             UPDATE drift_schedule SET holder = ?1, claimed_until = ?3 FROM due
             WHERE drift_schedule.tenant = due.tenant
               AND due_at <= ?2 AND (claimed_until IS NULL OR claimed_until <= ?2)
             RETURNING drift_schedule.tenant, due_at"
        }
        // One writer: nobody else holds a row.
        db::Backend::Sqlite => {
            "UPDATE drift_schedule SET holder = ?1, claimed_until = ?3
             WHERE due_at <= ?2 AND (claimed_until IS NULL OR claimed_until <= ?2)
               AND tenant IN (SELECT tenant FROM drift_schedule
                              WHERE due_at <= ?2 AND (claimed_until IS NULL OR claimed_until <= ?2)
                              ORDER BY due_at, tenant LIMIT ?4)
             RETURNING tenant, due_at"
        }
    };
    let claimed = db.query(sql, params![replica, now, now.saturating_add(interval), CLAIM_BATCH], |row| {
        Ok((row.get(0)?, row.get(1)?))
    })?;
    if !claimed.is_empty() {
        tracing::debug!(%replica, claimed = claimed.len(), "fleet.drift claimed checks");
    }
    Ok(claimed)
}

/// Ends the claims `replica` holds of these tenants' checks, each due again at its
/// time: one statement.
pub(super) fn release_each(db: &db::Conn, replica: &str, released: &[(&str, i64)]) -> Result<(), ApiError> {
    if released.is_empty() {
        return Ok(());
    }
    let mut params = vec![db::Param::from(replica)];
    let (mut cases, mut names) = (Vec::new(), Vec::new());
    for (tenant, next) in released {
        let at = params.len() + 1;
        cases.push(format!("WHEN ?{at} THEN CAST(?{} AS BIGINT)", at + 1));
        names.push(format!("?{at}"));
        params.push(db::Param::from(*tenant));
        params.push(db::Param::Int(*next));
    }
    let sql = format!(
        "UPDATE drift_schedule SET due_at = CASE tenant {} END, claimed_until = NULL
         WHERE holder = ?1 AND tenant IN ({})",
        cases.join(" "),
        names.join(", ")
    );
    db.execute(&sql, &params)?;
    Ok(())
}

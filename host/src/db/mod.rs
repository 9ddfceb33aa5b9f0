//! The SQLite database: one file, WAL, foreign keys on, a busy timeout, versioned
//! append-only migrations, and a connection pool for the blocking threads that run
//! handlers.

mod migrations;

use std::path::Path;
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::Connection;

use crate::api::ApiError;

pub type Pool = r2d2::Pool<SqliteConnectionManager>;
pub type Conn = r2d2::PooledConnection<SqliteConnectionManager>;

const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens (creating if needed) and migrates the database at `path`.
pub fn open(path: &Path) -> anyhow::Result<Pool> {
    let mut first = Connection::open(path)?;
    configure(&mut first)?;
    migrations::migrations().to_latest(&mut first)?;
    drop(first);
    let manager = SqliteConnectionManager::file(path).with_init(configure);
    Ok(r2d2::Pool::builder().max_size(16).build(manager)?)
}

fn configure(db: &mut Connection) -> rusqlite::Result<()> {
    db.busy_timeout(BUSY_TIMEOUT)?;
    db.pragma_update(None, "journal_mode", "WAL")?;
    db.pragma_update(None, "synchronous", "NORMAL")?;
    db.pragma_update(None, "foreign_keys", true)?;
    Ok(())
}

/// How a transaction begins: readers take a consistent snapshot, writers take the
/// write lock up front so that two writers never deadlock on a lock upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tx {
    Read,
    Write,
}

/// Runs `work` in a transaction: committed when it returns `Ok`, rolled back otherwise.
/// Explicit `BEGIN`/`COMMIT` rather than `rusqlite::Transaction` so that the connection
/// can be owned elsewhere (by a sandbox store) while the transaction is open.
pub fn transaction<T>(
    db: &Connection,
    mode: Tx,
    work: impl FnOnce(&Connection) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    db.execute_batch(match mode {
        Tx::Read => "BEGIN DEFERRED",
        Tx::Write => "BEGIN IMMEDIATE",
    })?;
    match work(db) {
        Ok(value) => {
            if let Err(error) = db.execute_batch("COMMIT") {
                let _ = db.execute_batch("ROLLBACK");
                return Err(error.into());
            }
            Ok(value)
        }
        Err(error) => {
            if let Err(rollback) = db.execute_batch("ROLLBACK") {
                tracing::error!(%rollback, "rollback failed");
            }
            Err(error)
        }
    }
}

/// The current time as an RFC 3339 UTC string with seconds precision.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

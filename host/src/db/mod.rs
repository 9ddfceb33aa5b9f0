//! The SQLite database: one file, WAL, foreign keys on, a busy timeout, versioned
//! append-only migrations, and a connection pool for the blocking threads that run
//! handlers.

mod migrations;

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};

use crate::api::ApiError;

pub type Pool = r2d2::Pool<SqliteConnectionManager>;
pub type Conn = r2d2::PooledConnection<SqliteConnectionManager>;

/// How the server opens its database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// How long a statement waits for another writer's lock before the request answers
    /// `UNAVAILABLE`.
    pub busy_timeout: Duration,
    /// Never write: the file must exist and be migrated already, and every connection
    /// is `query_only`, so SQLite itself refuses any write (SPEC §6.3, `--read-only`).
    pub read_only: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options { busy_timeout: Duration::from_secs(10), read_only: false }
    }
}

/// Opens (creating if needed) and migrates the database at `path`.
pub fn open(path: &Path) -> anyhow::Result<Pool> {
    open_with(path, Options::default())
}

/// Opens the database at `path` as `options` say.
pub fn open_with(path: &Path, options: Options) -> anyhow::Result<Pool> {
    check_path(path, options.read_only)?;
    let init = move |db: &mut Connection| configure(db, options);
    if options.read_only {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let mut first = Connection::open_with_flags(path, flags)
            .with_context(|| format!("a read-only server needs an existing database; none at {}", path.display()))?;
        init(&mut first)?;
        let pending = migrations::migrations().pending_migrations(&first)?;
        anyhow::ensure!(
            pending == 0,
            "the database at {} is {pending} migration(s) behind this fleet; a read-only server does not migrate: \
             start a writable `fleet serve` on it once",
            path.display()
        );
        let manager = SqliteConnectionManager::file(path).with_flags(flags).with_init(init);
        return Ok(r2d2::Pool::builder().max_size(16).test_on_check_out(false).build(manager)?);
    }
    let mut first = Connection::open(path)?;
    init(&mut first)?;
    migrations::migrations().to_latest(&mut first)?;
    drop(first);
    let manager = SqliteConnectionManager::file(path).with_init(init);
    // A connection to a local file does not go stale: no test query on every checkout.
    Ok(r2d2::Pool::builder().max_size(16).test_on_check_out(false).build(manager)?)
}

/// Says in words what SQLite would call "unable to open database file": a directory,
/// a missing parent directory, a file that cannot be written.
fn check_path(path: &Path, read_only: bool) -> anyhow::Result<()> {
    let shown = path.display();
    anyhow::ensure!(!path.is_dir(), "the database {shown} is a directory; --db takes a file path");
    let parent = path.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
    anyhow::ensure!(
        parent.is_dir(),
        "the database {shown} cannot be created: its directory {} does not exist",
        parent.display()
    );
    if read_only {
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("the database {shown} cannot be opened for writing"))?;
    Ok(())
}

fn configure(db: &mut Connection, options: Options) -> rusqlite::Result<()> {
    db.busy_timeout(options.busy_timeout)?;
    if options.read_only {
        db.pragma_update(None, "query_only", true)?;
    } else {
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
    }
    db.pragma_update(None, "foreign_keys", true)?;
    // Every request's statements (transactions, the token, eight state tables, the
    // module handlers) stay prepared.
    db.set_prepared_statement_cache_capacity(128);
    Ok(())
}

/// Runs a statement without parameters or rows (`BEGIN`, `COMMIT`, ...), prepared once
/// per connection rather than parsed on every request.
fn run(db: &Connection, sql: &str) -> rusqlite::Result<()> {
    db.prepare_cached(sql)?.execute([])?;
    Ok(())
}

fn commit(db: &Connection) -> rusqlite::Result<()> {
    run(db, "COMMIT")
}

fn rollback(db: &Connection) -> rusqlite::Result<()> {
    run(db, "ROLLBACK")
}

/// How a transaction begins: readers take a consistent snapshot, writers take the
/// write lock up front so that two writers never deadlock on a lock upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tx {
    Read,
    Write,
}

/// Begins a transaction. Explicit `BEGIN` rather than `rusqlite::Transaction` so that
/// the connection can be owned elsewhere (by a sandbox store) while it is open. A pooled
/// connection that comes back with a transaction still open (a failed `COMMIT`, a
/// panic) is rolled back first, so one failure never leaks into the next request.
pub fn begin(db: &Connection, mode: Tx) -> Result<(), ApiError> {
    if !db.is_autocommit() {
        tracing::warn!("a pooled connection still had a transaction open; rolling it back");
        rollback(db)?;
    }
    run(
        db,
        match mode {
            Tx::Read => "BEGIN DEFERRED",
            Tx::Write => "BEGIN IMMEDIATE",
        },
    )?;
    Ok(())
}

/// Runs `work` in a transaction: committed when it returns `Ok`, rolled back otherwise.
pub fn transaction<T>(
    db: &Connection,
    mode: Tx,
    work: impl FnOnce(&Connection) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    begin(db, mode)?;
    let outcome = work(db);
    finish(db, outcome)
}

/// Ends the transaction [`begin`] opened as `outcome` says: committed when it is `Ok`,
/// rolled back otherwise (and when the commit fails).
pub fn finish<T>(db: &Connection, outcome: Result<T, ApiError>) -> Result<T, ApiError> {
    match outcome {
        Ok(value) => {
            if let Err(error) = commit(db) {
                if let Err(rollback) = rollback(db) {
                    tracing::error!(%rollback, "rollback after a failed commit failed");
                }
                return Err(error.into());
            }
            Ok(value)
        }
        Err(error) => {
            if let Err(rollback) = rollback(db) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_left_open_is_rolled_back_at_the_next_begin() {
        let dir = tempfile::tempdir().unwrap();
        let pool = open(&dir.path().join("fleet.db")).unwrap();
        let db = pool.get().unwrap();
        begin(&db, Tx::Write).unwrap();
        db.execute("INSERT INTO tenants (name, created_at) VALUES ('leaked', 'now')", []).unwrap();
        // As if the request had failed between its begin and its commit.
        transaction(&db, Tx::Read, |db| {
            let leaked: bool =
                db.query_row("SELECT EXISTS (SELECT 1 FROM tenants WHERE name = 'leaked')", [], |row| row.get(0))?;
            assert!(!leaked);
            Ok(())
        })
        .unwrap();
        assert!(db.is_autocommit());
    }
}

//! The database, on one of two backends behind one interface: SQLite (one file, the
//! embedded default) or PostgreSQL (any number of replicas on one server, SPEC §12).
//! The rest of the host writes its SQL once, in the dialect both accept (`?N`
//! parameters, `ON CONFLICT`, `RETURNING`), and reads rows through [`Row`]; the schema
//! history is the same list of migrations on both (docs/decisions/0012).

pub mod backup;
mod migrations;
mod postgres;
mod sqlite;
pub mod tls;
mod value;

use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use self::postgres::Listener;
pub(crate) use self::value::params;
pub use self::value::{Column, Param, Row, decode};
use crate::api::ApiError;
use crate::metrics::Metrics;

/// How the server opens its database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// How long a statement waits for another writer's lock before the request answers
    /// `UNAVAILABLE`.
    pub busy_timeout: Duration,
    /// Never write: the database must exist and be migrated already, and every
    /// connection refuses writes itself (SPEC §6.3, `--read-only`).
    pub read_only: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options { busy_timeout: Duration::from_secs(10), read_only: false }
    }
}

/// Which database a `--db` names: a `postgres://` (or `postgresql://`) URL, else a
/// SQLite file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl Location {
    pub fn of(db: &Path) -> Location {
        match db.to_str() {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Location::Postgres(url.to_owned())
            }
            _ => Location::Sqlite(db.to_owned()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// What a statement can fail with, on either backend.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("postgres: {0}")]
    Postgres(#[from] ::postgres::Error),
    #[error("column {column}: {message}")]
    Decode { column: usize, message: String },
    #[error("a query that returns one row returned none")]
    NoRow,
    /// The connection failed while a `COPY` was sending its rows.
    #[error("postgres: sending rows: {0}")]
    Copy(std::io::Error),
}

/// A failure that passes: the client may try again shortly (SPEC §7a).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passing {
    /// Another writer held the lock past the busy timeout, or the database asked the
    /// transaction to be tried again.
    Busy,
    /// The connection to the database was cut, or the database is shutting down or
    /// starting up.
    Outage,
}

impl Error {
    /// Whether this failure passes, and how: `None` is a bug, not a condition.
    pub fn passing(&self) -> Option<Passing> {
        match self {
            Error::Sqlite(error) => match error.sqlite_error_code() {
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => Some(Passing::Busy),
                _ => None,
            },
            Error::Postgres(error) => postgres::passing(error),
            // Only the connection fails a write of rows already made.
            Error::Copy(_) => Some(Passing::Outage),
            Error::Decode { .. } | Error::NoRow => None,
        }
    }
}

impl From<Error> for ApiError {
    /// A database still locked by another writer when the busy timeout ran out, or one
    /// out of reach, is `UNAVAILABLE`, which the server answers with `Retry-After`
    /// (SPEC §7a).
    fn from(error: Error) -> ApiError {
        let unavailable = |message| ApiError::new(crate::api::Code::Unavailable, message);
        match error.passing() {
            Some(Passing::Busy) => {
                tracing::warn!(%error, "the database stayed locked past the busy timeout");
                unavailable("the database is busy; try again shortly")
            }
            Some(Passing::Outage) => {
                tracing::warn!(%error, "lost the connection to the database");
                unavailable("the database is unavailable; try again shortly")
            }
            None => ApiError::internal(error),
        }
    }
}

/// Connections to the database, for the blocking threads that run handlers; what their
/// transactions count once they commit goes to the deployment's metrics.
#[derive(Clone)]
pub struct Pool {
    links: Links,
    metrics: Option<Arc<Metrics>>,
}

#[derive(Clone)]
enum Links {
    Sqlite(r2d2::Pool<r2d2_sqlite::SqliteConnectionManager>),
    Postgres(postgres::Connections),
}

impl Pool {
    fn of(links: Links) -> Pool {
        Pool { links, metrics: None }
    }

    /// The pool, its transactions counting what they committed in `metrics`.
    pub fn counting(self, metrics: Metrics) -> Pool {
        Pool { metrics: Some(Arc::new(metrics)), ..self }
    }

    pub fn get(&self) -> Result<Conn, r2d2::Error> {
        let link = match &self.links {
            Links::Sqlite(pool) => Link::Sqlite(pool.get()?),
            Links::Postgres(pool) => Link::Postgres(Box::new(RefCell::new(pool.get()?))),
        };
        Ok(Conn { link, metrics: self.metrics.clone(), counts: RefCell::default() })
    }

    /// Where other replicas' events are heard, on PostgreSQL; `None` on SQLite, where
    /// every writer shares this process's wake-ups or the next keep-alive re-read.
    pub fn listener(&self) -> Option<Listener> {
        match &self.links {
            Links::Sqlite(_) => None,
            Links::Postgres(pool) => Some(pool.listener()),
        }
    }
}

/// What a transaction counts in the metrics once it commits.
type Count = Box<dyn FnOnce(&Metrics) + Send>;

/// One connection, taken from the pool for a request (or owned by a sandbox store
/// while a plan runs), and what its open transaction counts when it commits.
pub struct Conn {
    link: Link,
    metrics: Option<Arc<Metrics>>,
    counts: RefCell<Vec<Count>>,
}

enum Link {
    Sqlite(r2d2::PooledConnection<r2d2_sqlite::SqliteConnectionManager>),
    /// The `postgres` client takes `&mut self`; a request uses its connection from one
    /// thread at a time, so a `RefCell` keeps the interface `&self` like SQLite's.
    Postgres(Box<RefCell<r2d2::PooledConnection<postgres::Manager>>>),
}

impl Conn {
    pub fn backend(&self) -> Backend {
        match &self.link {
            Link::Sqlite(_) => Backend::Sqlite,
            Link::Postgres(_) => Backend::Postgres,
        }
    }

    /// Counts `count` in the metrics once the open transaction commits, and never if it
    /// rolls back: an event, say, is counted when it is there to be read.
    pub fn count_at_commit(&self, count: impl FnOnce(&Metrics) + Send + 'static) {
        self.counts.borrow_mut().push(Box::new(count));
    }

    /// The counts of the transaction that ended, counted if it committed.
    fn ended(&self, committed: bool) {
        let counts = std::mem::take(&mut *self.counts.borrow_mut());
        if let (true, Some(metrics)) = (committed, &self.metrics) {
            counts.into_iter().for_each(|count| count(metrics));
        }
    }

    /// Runs a statement (prepared once per connection); returns the rows it changed.
    pub fn execute(&self, sql: &str, params: &[Param]) -> Result<u64, Error> {
        match &self.link {
            Link::Sqlite(db) => Ok(db.prepare_cached(sql)?.execute(rusqlite::params_from_iter(params))? as u64),
            Link::Postgres(db) => db.borrow_mut().execute(sql, params),
        }
    }

    /// Calls `each` with every row of a query, in order.
    pub fn for_each(
        &self,
        sql: &str,
        params: &[Param],
        mut each: impl FnMut(&Row) -> Result<(), Error>,
    ) -> Result<(), Error> {
        match &self.link {
            Link::Sqlite(db) => {
                let mut statement = db.prepare_cached(sql)?;
                let mut rows = statement.query(rusqlite::params_from_iter(params))?;
                while let Some(row) = rows.next()? {
                    each(&Row::Sqlite(row))?;
                }
                Ok(())
            }
            Link::Postgres(db) => {
                for row in db.borrow_mut().query(sql, params)? {
                    each(&Row::Postgres(&row))?;
                }
                Ok(())
            }
        }
    }

    /// Every row of a query, each read by `read`.
    pub fn query<T>(
        &self,
        sql: &str,
        params: &[Param],
        mut read: impl FnMut(&Row) -> Result<T, Error>,
    ) -> Result<Vec<T>, Error> {
        let mut rows = Vec::new();
        self.for_each(sql, params, |row| {
            rows.push(read(row)?);
            Ok(())
        })?;
        Ok(rows)
    }

    /// The first row of a query, if any, read by `read`.
    pub fn query_opt<T>(
        &self,
        sql: &str,
        params: &[Param],
        read: impl FnOnce(&Row) -> Result<T, Error>,
    ) -> Result<Option<T>, Error> {
        let mut read = Some(read);
        let mut found = None;
        self.for_each(sql, params, |row| {
            if let Some(read) = read.take() {
                found = Some(read(row)?);
            }
            Ok(())
        })?;
        Ok(found)
    }

    /// The one row of a query, read by `read`.
    pub fn query_one<T>(
        &self,
        sql: &str,
        params: &[Param],
        read: impl FnOnce(&Row) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.query_opt(sql, params, read)?.ok_or(Error::NoRow)
    }

    /// Inserts rows into `table`: each row is `shared` (the values of the first columns,
    /// the same in every row) and then its own values, the next `columns.len() -
    /// shared.len()` of `values`. PostgreSQL takes them all in one `COPY … FROM STDIN`,
    /// streamed as they are written, so that the server inserts while the host writes;
    /// SQLite, in-process, runs multi-row `INSERT`s of at most `rows_per_statement`.
    pub fn insert_rows(
        &self,
        table: &str,
        columns: &[&str],
        shared: &[Param],
        values: &[Param],
        rows_per_statement: usize,
    ) -> Result<(), Error> {
        let own = columns.len() - shared.len();
        if values.is_empty() || own == 0 {
            return Ok(());
        }
        match &self.link {
            Link::Sqlite(_) => {
                for chunk in values.chunks(own * rows_per_statement.max(1)) {
                    let sql = format!(
                        "INSERT INTO {table} ({}) VALUES {}",
                        columns.join(", "),
                        value_rows(chunk.len() / own, shared.len(), own)
                    );
                    let params: Vec<Param> = shared.iter().chain(chunk).copied().collect();
                    self.execute(&sql, &params)?;
                }
                Ok(())
            }
            Link::Postgres(db) => db.borrow_mut().copy_in(table, columns, shared, values.chunks(own)),
        }
    }

    /// Runs statements without parameters or rows, separated by semicolons (a
    /// migration, a table for a plugin). Not prepared.
    pub fn batch(&self, sql: &str) -> Result<(), Error> {
        match &self.link {
            Link::Sqlite(db) => Ok(db.execute_batch(sql)?),
            Link::Postgres(db) => db.borrow_mut().batch(sql),
        }
    }
}

/// The rows after `VALUES` of a statement that writes `rows` rows: each the parameters
/// `?1 … ?shared` that every row repeats, then `columns` of its own, numbered on
/// (`value_rows(2, 1, 2)` is `(?1, ?2, ?3), (?1, ?4, ?5)`).
pub fn value_rows(rows: usize, shared: usize, columns: usize) -> String {
    let row = |row: usize| {
        let own = (1..=columns).map(|column| shared + row * columns + column);
        let numbers: Vec<String> = (1..=shared).chain(own).map(|number| format!("?{number}")).collect();
        format!("({})", numbers.join(", "))
    };
    (0..rows).map(row).collect::<Vec<_>>().join(", ")
}

/// Opens (creating and migrating if needed) the database at `db`.
pub fn open(db: &Path) -> anyhow::Result<Pool> {
    open_with(db, Options::default())
}

/// Opens the database at `db` as `options` say.
pub fn open_with(db: &Path, options: Options) -> anyhow::Result<Pool> {
    match Location::of(db) {
        Location::Sqlite(path) => sqlite::open(&path, options),
        Location::Postgres(url) => postgres::open(&url, options),
    }
}

/// How a transaction begins: readers take a consistent snapshot, writers take the
/// write lock of the tenant they write up front, so that two writers never deadlock on
/// a lock upgrade, an apply plans and writes with nobody else writing that tenant in
/// between, and a tenant's events are numbered in the order its writers commit. On
/// PostgreSQL the lock is the tenant's own, so that writers of different tenants never
/// wait for each other; SQLite has one writer at a time (docs/decisions/0014).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tx<'a> {
    Read,
    /// Writes the objects, fleet state or events of this tenant.
    Write(&'a str),
    /// A change of the schema (a plugin's table): serialized with migrations and with
    /// other replicas starting.
    Schema,
}

/// Begins a transaction. Explicit `BEGIN` rather than a transaction object so that the
/// connection can be owned elsewhere (by a sandbox store) while it is open. A pooled
/// connection that comes back with a transaction still open (a failed `COMMIT`, a
/// panic) is rolled back first, so one failure never leaks into the next request.
pub fn begin(db: &Conn, mode: Tx<'_>) -> Result<(), ApiError> {
    match &db.link {
        Link::Sqlite(db) => sqlite::begin(db, mode)?,
        Link::Postgres(db) => db.borrow_mut().begin(mode)?,
    }
    Ok(())
}

/// Commits, and counts what the transaction counts once it did (a commit whose answer
/// was lost counts nothing).
fn commit(db: &Conn) -> Result<(), Error> {
    let committed = match &db.link {
        Link::Sqlite(link) => sqlite::run(link, "COMMIT"),
        Link::Postgres(link) => link.borrow_mut().end("COMMIT"),
    };
    db.ended(committed.is_ok());
    committed
}

fn rollback(db: &Conn) -> Result<(), Error> {
    db.ended(false);
    match &db.link {
        Link::Sqlite(db) => sqlite::run(db, "ROLLBACK"),
        Link::Postgres(db) => db.borrow_mut().end("ROLLBACK"),
    }
}

/// Runs `work` in a transaction: committed when it returns `Ok`, rolled back otherwise.
pub fn transaction<T>(db: &Conn, mode: Tx<'_>, work: impl FnOnce(&Conn) -> Result<T, ApiError>) -> Result<T, ApiError> {
    begin(db, mode)?;
    let outcome = work(db);
    finish(db, outcome)
}

/// What a client is told when the database went away as its change was committed.
pub const COMMIT_UNKNOWN: &str = "the database went away as the change was committed, so it may or may not have \
     been made; sending the same request again is safe for fleet.apply (it plans again) and for a create with an \
     idempotencyKey";

/// Ends the transaction [`begin`] opened as `outcome` says: committed when it is `Ok`,
/// rolled back otherwise (and when the commit fails). A commit whose answer was lost
/// with the connection is `UNAVAILABLE` with [`COMMIT_UNKNOWN`].
pub fn finish<T>(db: &Conn, outcome: Result<T, ApiError>) -> Result<T, ApiError> {
    match outcome {
        Ok(value) => {
            if let Err(error) = commit(db) {
                // The connection went as the commit was sent: only the database knows
                // whether it committed, and it is out of reach.
                if error.passing() == Some(Passing::Outage) {
                    tracing::warn!(%error, "lost the connection to the database while committing");
                    return Err(ApiError::new(crate::api::Code::Unavailable, COMMIT_UNKNOWN));
                }
                if let Err(rollback) = rollback(db) {
                    tracing::error!(%rollback, "rollback after a failed commit failed");
                }
                return Err(error.into());
            }
            Ok(value)
        }
        Err(error) => {
            // A connection that is gone took its transaction with it.
            if let Err(rollback) = rollback(db)
                && rollback.passing() != Some(Passing::Outage)
            {
                tracing::error!(%rollback, "rollback failed");
            }
            Err(error)
        }
    }
}

/// Wakes the event subscribers of every replica once the caller's transaction commits
/// (PostgreSQL's `NOTIFY` is delivered at commit and dropped at rollback). On SQLite the
/// publishing process wakes its own subscribers after the commit.
pub fn notify_events(db: &Conn) -> Result<(), Error> {
    match &db.link {
        Link::Sqlite(_) => Ok(()),
        Link::Postgres(_) => db.execute(&format!("NOTIFY {}", postgres::NOTIFY_CHANNEL), &[]).map(drop),
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
        begin(&db, Tx::Write("leaked")).unwrap();
        db.execute("INSERT INTO tenants (name, created_at) VALUES ('leaked', 'now')", &[]).unwrap();
        // As if the request had failed between its begin and its commit.
        transaction(&db, Tx::Read, |db| {
            let leaked: bool =
                db.query_one("SELECT EXISTS (SELECT 1 FROM tenants WHERE name = 'leaked')", &[], |row| row.get(0))?;
            assert!(!leaked);
            Ok(())
        })
        .unwrap();
        let Link::Sqlite(sqlite) = &db.link else { unreachable!("a file is SQLite") };
        assert!(sqlite.is_autocommit());
    }

    #[test]
    fn a_transaction_counts_what_it_counts_only_when_it_commits() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        metrics.count_events(&["counted"]);
        let pool = open(&dir.path().join("fleet.db")).unwrap().counting(metrics.clone());
        let db = pool.get().unwrap();
        let count = |db: &Conn| db.count_at_commit(|metrics| metrics.published("counted"));
        let rolled_back: Result<(), ApiError> = transaction(&db, Tx::Write("acme"), |db| {
            count(db);
            Err(ApiError::new(crate::api::Code::FailedPrecondition, "rolled back"))
        });
        assert!(rolled_back.is_err());
        transaction(&db, Tx::Write("acme"), |db| {
            count(db);
            Ok(())
        })
        .unwrap();
        let exposition = metrics.render(0, 0, 0);
        assert!(exposition.contains("fleet_events_published_total{type=\"counted\"} 1"), "{exposition}");
    }

    #[test]
    fn value_rows_repeat_the_shared_parameters_and_number_the_rest_on() {
        assert_eq!(value_rows(2, 1, 2), "(?1, ?2, ?3), (?1, ?4, ?5)");
        assert_eq!(value_rows(1, 0, 3), "(?1, ?2, ?3)");
    }

    #[test]
    fn a_url_names_postgres_and_anything_else_a_file() {
        assert_eq!(Location::of(Path::new("postgres://u@h/db")), Location::Postgres("postgres://u@h/db".into()));
        assert_eq!(Location::of(Path::new("postgresql://h/db")), Location::Postgres("postgresql://h/db".into()));
        assert_eq!(Location::of(Path::new("./fleet.db")), Location::Sqlite("./fleet.db".into()));
    }
}

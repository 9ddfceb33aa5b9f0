//! PostgreSQL: replicas of fleet on one database (SPEC §12). Each pooled connection
//! keeps its statements prepared; a tenant's writers serialize on that tenant's
//! advisory lock, taken at the start of their transaction, so writers of different
//! tenants never wait for each other (docs/decisions/0014); migrations run once, under
//! another advisory lock, however many replicas start together; events wake every
//! replica through `LISTEN`/`NOTIFY`.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use postgres::error::SqlState;
use postgres::{Client, Statement};

use super::tls::Connector;
use super::{Error, Links, Options, Param, Passing, Pool, Tx, migrations};

/// The class of the tenants' write locks: the first key of the two-key advisory lock a
/// write transaction holds until it ends; the second is [`tenant_key`]. (PostgreSQL's
/// two-key locks never collide with its one-key locks, such as [`SCHEMA_LOCK`].)
const TENANT_WRITE_LOCKS: i32 = 0x666c_6565;
/// The advisory lock migrations and schema changes hold.
const SCHEMA_LOCK: i64 = 0x666c_6565_7402;
/// The channel `NOTIFY` wakes event subscribers on.
pub(super) const NOTIFY_CHANNEL: &str = "fleet_events";

/// Whether a PostgreSQL error is a passing condition the client may retry, and which.
pub(super) fn passing(error: &postgres::Error) -> Option<Passing> {
    // A connection cut mid-statement fails with the socket's error, or as closed.
    let cut = error.is_closed() || std::error::Error::source(error).is_some_and(|source| source.is::<std::io::Error>());
    if cut {
        return Some(Passing::Outage);
    }
    match error.code()? {
        &SqlState::LOCK_NOT_AVAILABLE
        | &SqlState::T_R_SERIALIZATION_FAILURE
        | &SqlState::T_R_DEADLOCK_DETECTED
        | &SqlState::QUERY_CANCELED => Some(Passing::Busy),
        &SqlState::CONNECTION_EXCEPTION
        | &SqlState::CONNECTION_DOES_NOT_EXIST
        | &SqlState::CONNECTION_FAILURE
        | &SqlState::TRANSACTION_RESOLUTION_UNKNOWN
        | &SqlState::TOO_MANY_CONNECTIONS
        | &SqlState::ADMIN_SHUTDOWN
        | &SqlState::CRASH_SHUTDOWN
        | &SqlState::CANNOT_CONNECT_NOW
        | &SqlState::IDLE_SESSION_TIMEOUT => Some(Passing::Outage),
        _ => None,
    }
}

/// A connection with its prepared statements, by the SQL the host wrote.
pub struct Connection {
    client: Client,
    statements: HashMap<String, Statement>,
    in_transaction: bool,
}

impl Connection {
    fn statement(&mut self, sql: &str) -> Result<Statement, Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(&placeholders(sql))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    pub(super) fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64, Error> {
        let statement = self.statement(sql)?;
        Ok(self.client.execute(&statement, &bind(params))?)
    }

    pub(super) fn query(&mut self, sql: &str, params: &[Param]) -> Result<Vec<postgres::Row>, Error> {
        let statement = self.statement(sql)?;
        Ok(self.client.query(&statement, &bind(params))?)
    }

    /// `COPY table (columns) FROM STDIN` in the text format, a row at a time: the
    /// client sends its buffer as it fills, and PostgreSQL inserts what has arrived.
    pub(super) fn copy_in<'a>(
        &mut self,
        table: &str,
        columns: &[&str],
        shared: &[Param],
        rows: impl Iterator<Item = &'a [Param<'a>]>,
    ) -> Result<(), Error> {
        use std::io::Write as _;
        let mut writer = self.client.copy_in(&format!("COPY {table} ({}) FROM STDIN", columns.join(", ")))?;
        let mut line = Vec::new();
        for row in rows {
            line.clear();
            for (index, value) in shared.iter().chain(row).enumerate() {
                if index > 0 {
                    line.push(b'\t');
                }
                copy_text(value, &mut line);
            }
            line.push(b'\n');
            writer.write_all(&line).map_err(Error::Copy)?;
        }
        writer.finish()?;
        Ok(())
    }

    pub(super) fn batch(&mut self, sql: &str) -> Result<(), Error> {
        Ok(self.client.batch_execute(sql)?)
    }

    /// Readers see one snapshot of the whole database (`REPEATABLE READ`). Writers run
    /// `READ COMMITTED` after taking the write lock, so each of their statements sees
    /// every write committed before it: nobody else can write in between.
    pub(super) fn begin(&mut self, mode: Tx<'_>) -> Result<(), Error> {
        if self.in_transaction {
            tracing::warn!("a pooled connection still had a transaction open; rolling it back");
            self.end("ROLLBACK")?;
        }
        let begin = match mode {
            Tx::Read => "BEGIN ISOLATION LEVEL REPEATABLE READ".to_owned(),
            Tx::Write(tenant) => {
                format!("BEGIN; SELECT pg_advisory_xact_lock({TENANT_WRITE_LOCKS}, {})", tenant_key(tenant))
            }
            Tx::Schema => format!("BEGIN; SELECT pg_advisory_xact_lock({SCHEMA_LOCK})"),
        };
        self.in_transaction = true;
        if let Err(error) = self.client.batch_execute(&begin) {
            // A lock that timed out leaves the transaction aborted: end it here, or the
            // next statement on this pooled connection (the next request's
            // authentication, which runs outside any transaction) fails with it.
            let _ = self.end("ROLLBACK");
            return Err(error.into());
        }
        Ok(())
    }

    /// `COMMIT` or `ROLLBACK`.
    pub(super) fn end(&mut self, sql: &str) -> Result<(), Error> {
        self.in_transaction = false;
        Ok(self.client.batch_execute(sql)?)
    }
}

/// The second key of a tenant's write lock: the first four bytes of the SHA-256 of its
/// name, the same on every replica and release. Two tenants whose names share them
/// share a lock, which only makes one wait for the other.
fn tenant_key(tenant: &str) -> i32 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(tenant.as_bytes());
    i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// A value as `COPY`'s text format writes it: `\N` for NULL, a flag as `1` or `0`
/// (which boolean and integer columns both read), text with its backslashes, tabs and
/// line ends escaped.
fn copy_text(value: &Param, out: &mut Vec<u8>) {
    match *value {
        Param::Null => out.extend_from_slice(b"\\N"),
        Param::Int(value) => out.extend_from_slice(value.to_string().as_bytes()),
        Param::Bool(value) => out.push(if value { b'1' } else { b'0' }),
        Param::Text(text) => {
            for &byte in text.as_bytes() {
                match byte {
                    b'\\' => out.extend_from_slice(b"\\\\"),
                    b'\t' => out.extend_from_slice(b"\\t"),
                    b'\n' => out.extend_from_slice(b"\\n"),
                    b'\r' => out.extend_from_slice(b"\\r"),
                    _ => out.push(byte),
                }
            }
        }
    }
}

fn bind<'a>(params: &'a [Param<'a>]) -> Vec<&'a (dyn postgres::types::ToSql + Sync)> {
    params.iter().map(|param| param as &(dyn postgres::types::ToSql + Sync)).collect()
}

/// The host's `?N` parameters as PostgreSQL's `$N`, outside quoted text and names.
fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote = None;
    for character in sql.chars() {
        match (quote, character) {
            (None, '\'' | '"') => quote = Some(character),
            (Some(open), _) if open == character => quote = None,
            (None, '?') => {
                out.push('$');
                continue;
            }
            _ => {}
        }
        out.push(character);
    }
    out
}

/// Makes pooled connections: each sets its lock timeout (the busy timeout) and, on a
/// read-only server, refuses every write itself.
pub struct Manager {
    config: postgres::Config,
    tls: Connector,
    options: Options,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Connection, postgres::Error> {
        let mut client = self.config.connect(self.tls.clone())?;
        let mut settings = format!("SET lock_timeout = {}", self.options.busy_timeout.as_millis().max(1));
        if self.options.read_only {
            settings.push_str("; SET default_transaction_read_only = on");
        }
        client.batch_execute(&settings)?;
        Ok(Connection { client, statements: HashMap::new(), in_transaction: false })
    }

    fn is_valid(&self, connection: &mut Connection) -> Result<(), postgres::Error> {
        connection.client.is_valid(Duration::from_secs(5))
    }

    fn has_broken(&self, connection: &mut Connection) -> bool {
        connection.client.is_closed()
    }
}

/// The pool of a server. Dropped off the async runtime: the client closes each
/// connection by blocking on a runtime of its own, which cannot start on a thread that
/// drives async tasks (where a server's or a benchmark's last handle may go).
#[derive(Clone)]
pub struct Connections {
    pool: Option<r2d2::Pool<Manager>>,
    /// Where the pool connects, and how, for the connection that listens.
    config: Box<postgres::Config>,
    tls: Connector,
}

impl Connections {
    pub fn get(&self) -> Result<r2d2::PooledConnection<Manager>, r2d2::Error> {
        match &self.pool {
            Some(pool) => pool.get(),
            // Taken only by `drop`.
            None => unreachable!("a pool is only taken when it is dropped"),
        }
    }

    /// The connection that will hear other replicas' events.
    pub fn listener(&self) -> Listener {
        Listener { config: (*self.config).clone(), tls: self.tls.clone() }
    }
}

impl Drop for Connections {
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else { return };
        if tokio::runtime::Handle::try_current().is_ok() {
            let _ = std::thread::spawn(move || drop(pool)).join();
        }
    }
}

pub(super) fn open(url: &str, options: Options) -> anyhow::Result<Pool> {
    let (config, tls) = super::tls::parse(url)?;
    let mut first = config
        .connect(tls.clone())
        .with_context(|| format!("cannot connect to the PostgreSQL database {}", shown(url)))?;
    let pending = migrate(&mut first, options.read_only)?;
    anyhow::ensure!(
        pending == 0,
        "the database {} is {pending} migration(s) behind this fleet; a read-only server does not migrate: \
         start a writable `fleet serve` on it once",
        shown(url)
    );
    drop(first);
    let manager = Manager { config: config.clone(), tls: tls.clone(), options };
    // Not tested on every checkout (a round trip per request): a connection the server
    // closed fails its statement with a retryable `UNAVAILABLE`, and the pool drops it.
    let pool = r2d2::Pool::builder()
        .max_size(16)
        .min_idle(Some(2))
        .test_on_check_out(false)
        .connection_timeout(options.busy_timeout)
        .build(manager)?;
    Ok(Pool::of(Links::Postgres(Connections { pool: Some(pool), config: Box::new(config), tls })))
}

/// The URL without its password, for messages.
fn shown(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{}{user}{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Applies the pending migrations (none when read-only) under the schema lock, so
/// replicas that start together migrate once; returns how many remain pending.
fn migrate(client: &mut Client, read_only: bool) -> anyhow::Result<usize> {
    client.batch_execute(&format!("SELECT pg_advisory_lock({SCHEMA_LOCK})"))?;
    let outcome = migrate_locked(client, read_only);
    client.batch_execute(&format!("SELECT pg_advisory_unlock({SCHEMA_LOCK})"))?;
    outcome
}

fn migrate_locked(client: &mut Client, read_only: bool) -> anyhow::Result<usize> {
    if !read_only {
        client.batch_execute(
            "CREATE TABLE IF NOT EXISTS fleet_schema (version BIGINT PRIMARY KEY, name TEXT NOT NULL, \
             applied_at TEXT NOT NULL)",
        )?;
    }
    let exists: bool = client.query_one("SELECT to_regclass('fleet_schema') IS NOT NULL", &[])?.try_get(0)?;
    let applied: i64 = match exists {
        true => client.query_one("SELECT COALESCE(MAX(version), 0) FROM fleet_schema", &[])?.try_get(0)?,
        false => 0,
    };
    let pending: Vec<_> = migrations::POSTGRES.iter().enumerate().skip(applied as usize).collect();
    if read_only {
        return Ok(pending.len());
    }
    for (index, (name, sql)) in pending {
        let mut transaction = client.transaction()?;
        transaction.batch_execute(sql).with_context(|| format!("migration {name}"))?;
        transaction.execute(
            "INSERT INTO fleet_schema (version, name, applied_at) VALUES ($1, $2, $3)",
            &[&(index as i64 + 1), name, &super::now()],
        )?;
        transaction.commit()?;
    }
    Ok(0)
}

/// The connection that hears `NOTIFY` from every replica, on a thread of its own; it
/// reconnects after a failure, and calls `wake` then too (whatever was published
/// meanwhile is read by `seq` like anything else).
pub struct Listener {
    config: postgres::Config,
    tls: Connector,
}

impl Listener {
    /// Listens until the process ends, calling `wake` for every notification.
    pub fn spawn(self, wake: impl Fn() + Send + 'static) {
        let spawned = std::thread::Builder::new().name("fleet-listen".into()).spawn(move || {
            loop {
                if let Err(error) = self.listen(&wake) {
                    tracing::warn!(%error, "lost the connection that hears other replicas' events; reconnecting");
                }
                std::thread::sleep(Duration::from_secs(1));
                wake();
            }
        });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start the thread that hears other replicas' events");
        }
    }

    fn listen(&self, wake: &impl Fn()) -> Result<(), postgres::Error> {
        let mut client = self.config.connect(self.tls.clone())?;
        client.batch_execute(&format!("LISTEN {NOTIFY_CHANNEL}"))?;
        let mut notifications = client.notifications();
        let mut iter = notifications.blocking_iter();
        while postgres::fallible_iterator::FallibleIterator::next(&mut iter)?.is_some() {
            wake();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connects to a server that hangs up as soon as it has read the client's first
    /// bytes: whatever the socket then reports, it is an outage, not a bug.
    #[test]
    fn a_connection_cut_by_the_server_is_an_outage() {
        use std::io::Read as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            for _ in 0..2 {
                let (mut stream, _) = listener.accept().unwrap();
                let _ = stream.read(&mut [0; 64]);
            }
        });
        let url = format!("host=127.0.0.1 port={port} user=fleet connect_timeout=5");
        let refused = format!("host=127.0.0.1 port={} user=fleet connect_timeout=5", unused_port());
        for url in [&url, &url, &refused] {
            let error = postgres::Client::connect(url, postgres::NoTls).err().expect("nothing to connect to");
            assert_eq!(passing(&error), Some(Passing::Outage), "{error:?}");
        }
        server.join().unwrap();
    }

    fn unused_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    #[test]
    fn placeholders_become_dollars_outside_quotes() {
        assert_eq!(
            placeholders("SELECT a FROM t WHERE b = ?1 AND c = ?12"),
            "SELECT a FROM t WHERE b = $1 AND c = $12"
        );
        assert_eq!(placeholders("SELECT '?1', \"?2\" FROM t WHERE x = ?3"), "SELECT '?1', \"?2\" FROM t WHERE x = $3");
    }

    #[test]
    fn copy_text_escapes_what_copy_would_read_otherwise() {
        let text = |value: Param| {
            let mut out = Vec::new();
            copy_text(&value, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(text(Param::Text("a\\N\tb\nc\rd é")), "a\\\\N\\tb\\nc\\rd é");
        assert_eq!(text(Param::Null), "\\N");
        assert_eq!((text(Param::Bool(true)), text(Param::Bool(false))), ("1".into(), "0".into()));
        assert_eq!(text(Param::Int(-42)), "-42");
    }

    #[test]
    fn tenant_keys_are_stable_and_tell_tenants_apart() {
        // SHA-256("acme") begins 82 2b 33 ad: every replica computes this.
        assert_eq!(tenant_key("acme"), i32::from_be_bytes([0x82, 0x2b, 0x33, 0xad]));
        assert_ne!(tenant_key("acme"), tenant_key("acme2"));
    }

    #[test]
    fn messages_never_show_the_password() {
        assert_eq!(shown("postgres://fleet:secret@db:5432/fleet"), "postgres://fleet@db:5432/fleet");
        assert_eq!(shown("postgres://db/fleet"), "postgres://db/fleet");
    }
}

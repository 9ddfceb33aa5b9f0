//! SQLite: one file, WAL, foreign keys on, a busy timeout, the migrations tracked in
//! `user_version`.

use std::path::Path;

use anyhow::Context as _;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};

use super::{Error, Links, Options, Pool, Tx, migrations};

pub(super) fn open(path: &Path, options: Options) -> anyhow::Result<Pool> {
    check_path(path, options.read_only)?;
    let init = move |db: &mut Connection| configure(db, options);
    let flags = if options.read_only {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI
    } else {
        OpenFlags::default()
    };
    let mut first = Connection::open_with_flags(path, flags).with_context(|| match options.read_only {
        true => format!("a read-only server needs an existing database; none at {}", path.display()),
        false => format!("the database {} cannot be opened", path.display()),
    })?;
    init(&mut first)?;
    let migrations = migrations::sqlite();
    if options.read_only {
        let pending = migrations.pending_migrations(&first)?;
        anyhow::ensure!(
            pending == 0,
            "the database at {} is {pending} migration(s) behind this fleet; a read-only server does not migrate: \
             start a writable `fleet serve` on it once",
            path.display()
        );
    } else {
        migrations.to_latest(&mut first)?;
    }
    drop(first);
    let manager = SqliteConnectionManager::file(path).with_flags(flags).with_init(init);
    // A connection to a local file does not go stale: no test query on every checkout.
    Ok(Pool::of(Links::Sqlite(r2d2::Pool::builder().max_size(16).test_on_check_out(false).build(manager)?)))
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
pub(super) fn run(db: &Connection, sql: &str) -> Result<(), Error> {
    db.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// Readers begin deferred; writers (and schema changes) take SQLite's one write lock
/// at once.
pub(super) fn begin(db: &Connection, mode: Tx<'_>) -> Result<(), Error> {
    if !db.is_autocommit() {
        tracing::warn!("a pooled connection still had a transaction open; rolling it back");
        run(db, "ROLLBACK")?;
    }
    run(
        db,
        match mode {
            Tx::Read => "BEGIN DEFERRED",
            Tx::Write(_) | Tx::Schema => "BEGIN IMMEDIATE",
        },
    )
}

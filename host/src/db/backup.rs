//! `fleet admin backup` and `restore` of a SQLite database (issue 54): SQLite's online
//! backup API copies a database a running server keeps writing, as of one moment; a
//! restore puts a copy back once it is known to be a fleet database this binary can
//! run. PostgreSQL has its own tools (`pg_dump`, `pg_restore`; docs/guide/operating.md).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use rustix::process::{Flock, FlockOffsetType, FlockType, fcntl_getlk};

use super::Location;

/// How a copy's source is opened: read only.
const READING: OpenFlags = OpenFlags::SQLITE_OPEN_READ_ONLY.union(OpenFlags::SQLITE_OPEN_NO_MUTEX);

/// How long a copy waits for a writer that holds the database.
const BUSY: Duration = Duration::from_secs(30);

/// What a backup or restore copied: the schema version and how much.
#[derive(Debug, PartialEq, Eq)]
pub struct Copied {
    pub schema: usize,
    pub tenants: i64,
    pub revisions: i64,
    pub bytes: u64,
}

/// Copies the database at `db` to the new file `file`, consistent as of one moment
/// while servers keep writing it: all pages in one step, under one read transaction,
/// which in WAL mode no writer waits for. The copy appears whole or not at all.
pub fn backup(db: &Path, file: &Path) -> anyhow::Result<Copied> {
    let source = sqlite_path(db, "backup")?;
    ensure!(!file.exists(), "{} exists already; a backup never overwrites a file", file.display());
    let from = Connection::open_with_flags(&source, READING)
        .with_context(|| format!("the database {} cannot be opened", source.display()))?;
    let partial = partial(file);
    let copied = copy(&from, &partial).and_then(|()| {
        let copy = Connection::open_with_flags(&partial, READING)?;
        check(&copy, &source.display().to_string())
    });
    match copied {
        Ok(copied) => {
            std::fs::rename(&partial, file)
                .with_context(|| format!("the backup cannot be put at {}", file.display()))?;
            Ok(copied)
        }
        Err(error) => {
            let _ = std::fs::remove_file(&partial);
            Err(error)
        }
    }
}

/// Puts the backup `file` back as the database at `db`: refused unless it is a fleet
/// database whose schema this binary knows (an older one is migrated when a server
/// starts on it), and unless `db` does not exist yet or `replace` says to overwrite it
/// (with every server on it stopped: a running one would keep what it cached).
pub fn restore(file: &Path, db: &Path, replace: bool) -> anyhow::Result<Copied> {
    let target = sqlite_path(db, "restore")?;
    let from =
        Connection::open_with_flags(file, READING).with_context(|| format!("{} cannot be opened", file.display()))?;
    let copied = check(&from, &file.display().to_string())?;
    ensure!(
        replace || !target.exists() || std::fs::metadata(&target)?.len() == 0,
        "{} exists; stop every server on it and restore with --replace to overwrite it",
        target.display()
    );
    if let Some(pid) = opened_by(&target)? {
        bail!(
            "{} is open in process {pid} (a running server?): a server keeps what it read, and what it \
             writes after the restore would be lost; stop every server on it, then restore",
            target.display()
        );
    }
    let partial = partial(&target);
    if let Err(error) = copy(&from, &partial) {
        let _ = std::fs::remove_file(&partial);
        return Err(error);
    }
    // The old database's write-ahead log must not be replayed onto the restored file.
    for suffix in ["-wal", "-shm"] {
        let mut side = target.clone().into_os_string();
        side.push(suffix);
        match std::fs::remove_file(&side) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                return Err(error).with_context(|| format!("{} cannot be removed", Path::new(&side).display()));
            }
            _ => {}
        }
    }
    std::fs::rename(&partial, &target).with_context(|| format!("{} cannot be replaced", target.display()))?;
    Ok(copied)
}

fn sqlite_path(db: &Path, what: &str) -> anyhow::Result<PathBuf> {
    match Location::of(db) {
        Location::Sqlite(path) => Ok(path),
        Location::Postgres(_) => bail!(
            "`fleet admin {what}` copies a SQLite database; for PostgreSQL use pg_dump and pg_restore \
             (docs/guide/operating.md#backups)"
        ),
    }
}

/// A file beside `file` that becomes it once whole.
fn partial(file: &Path) -> PathBuf {
    let mut partial = file.as_os_str().to_owned();
    partial.push(format!(".partial-{}", std::process::id()));
    PathBuf::from(partial)
}

/// The process that has the SQLite database at `db` open, if another one does: every
/// connection to a database in WAL mode holds a read lock on the "DMS" byte of its
/// `-shm` file for as long as it is open (SQLite's unix VFS: byte 128), which a lock
/// query sees. A database no one opened in WAL mode has no `-shm` file, or one nobody
/// locks.
fn opened_by(db: &Path) -> anyhow::Result<Option<i32>> {
    const DMS: u64 = 128;
    let mut shm = db.as_os_str().to_owned();
    shm.push("-shm");
    let shm = match std::fs::File::open(&shm) {
        Ok(shm) => shm,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error).with_context(|| format!("{} cannot be opened", Path::new(&shm).display())),
    };
    let wanted =
        Flock { start: DMS, length: 1, pid: None, typ: FlockType::WriteLock, offset_type: FlockOffsetType::Set };
    let holder = fcntl_getlk(&shm, &wanted).context("the database's lock cannot be queried")?;
    Ok(holder.map(|lock| lock.pid.map_or(0, |pid| pid.as_raw_nonzero().get())))
}

/// Copies every page of `from` into a new database at `to`, in one step, waiting out a
/// writer that holds the lock. The copy is one file, in rollback-journal mode: nothing
/// is left beside it (a WAL-mode copy kept `-wal` and `-shm` files); a server that
/// opens it puts it back in WAL mode.
fn copy(from: &Connection, to: &Path) -> anyhow::Result<()> {
    let mut into = Connection::open(to).with_context(|| format!("{} cannot be created", to.display()))?;
    let backup = Backup::new(from, &mut into)?;
    let started = Instant::now();
    loop {
        match backup.step(-1)? {
            StepResult::Done => {
                drop(backup);
                into.pragma_update(None, "journal_mode", "DELETE")?;
                return Ok(());
            }
            StepResult::More | StepResult::Busy | StepResult::Locked if started.elapsed() < BUSY => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => bail!("the database stayed busy for {}s; try again", BUSY.as_secs()),
        }
    }
}

/// Whether `db` is an intact fleet database this binary can run, and what it holds.
fn check(db: &Connection, name: &str) -> anyhow::Result<Copied> {
    let not_fleet = || format!("{name} is not a fleet database");
    let intact: String = db.query_row("PRAGMA quick_check", [], |row| row.get(0)).with_context(not_fleet)?;
    ensure!(intact == "ok", "{name} is damaged: {intact}");
    let schema: i64 = db.query_row("PRAGMA user_version", [], |row| row.get(0)).with_context(not_fleet)?;
    let schema = usize::try_from(schema).with_context(not_fleet)?;
    let known = super::migrations::SQLITE.len();
    ensure!(
        schema <= known,
        "{name} has schema version {schema}, newer than this fleet's {known}: use the fleet release that made it"
    );
    let count = |table: &str| db.query_row(&format!("SELECT count(*) FROM {table}"), [], |row| row.get(0));
    let (tenants, revisions) = match (count("tenants"), count("fleet_revisions")) {
        (Ok(tenants), Ok(revisions)) if schema > 0 => (tenants, revisions),
        // Before revisions existed (schema 13 or older).
        (Ok(tenants), Err(_)) if schema > 0 => (tenants, 0),
        _ => bail!(not_fleet()),
    };
    let pages: i64 = db.query_row("PRAGMA page_count", [], |row| row.get(0))?;
    let page_size: i64 = db.query_row("PRAGMA page_size", [], |row| row.get(0))?;
    Ok(Copied { schema, tenants, revisions, bytes: u64::try_from(pages * page_size).unwrap_or_default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_checked_and_what_is_not_fleets_or_newer_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("fleet.db");
        let pool = super::super::open(&db).unwrap();
        crate::calls::auth::create_tenant(&pool.get().unwrap(), "acme", "2026-12-01T00:00:00Z").unwrap();

        let copy = dir.path().join("copy.db");
        let copied = backup(&db, &copy).unwrap();
        assert_eq!((copied.schema, copied.tenants), (super::super::migrations::SQLITE.len(), 1));
        let again = backup(&db, &copy).unwrap_err().to_string();
        assert!(again.contains("never overwrites"), "{again}");

        let restored = dir.path().join("restored.db");
        assert_eq!(restore(&copy, &restored, false).unwrap(), copied);
        let refused = restore(&copy, &restored, false).unwrap_err().to_string();
        assert!(refused.contains("--replace"), "{refused}");
        restore(&copy, &restored, true).unwrap();

        let stranger = dir.path().join("stranger.db");
        Connection::open(&stranger).unwrap().execute_batch("CREATE TABLE t (x); PRAGMA user_version = 3").unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "not a database at all, but long enough to look like a header of one").unwrap();
        for (file, expected) in [(&stranger, "is not a fleet database"), (&text, "is not a fleet database")] {
            let error = format!("{:#}", restore(file, &dir.path().join("x.db"), false).unwrap_err());
            assert!(error.contains(expected), "{error}");
        }
        let newer = dir.path().join("newer.db");
        std::fs::copy(&copy, &newer).unwrap();
        Connection::open(&newer).unwrap().pragma_update(None, "user_version", 999).unwrap();
        let error = restore(&newer, &dir.path().join("y.db"), false).unwrap_err().to_string();
        assert!(error.contains("schema version 999, newer than"), "{error}");
        let postgres = backup(Path::new("postgres://u@h/db"), &dir.path().join("z")).unwrap_err().to_string();
        assert!(postgres.contains("pg_dump"), "{postgres}");
    }
}

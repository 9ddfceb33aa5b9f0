//! Schema migrations, append-only: never edit one that has shipped, add the next, on
//! both backends under the same number and name, so that the schema has one version
//! history (SPEC §12). SQLite counts them in `user_version`, PostgreSQL in
//! `fleet_schema`.

use rusqlite_migration::{M, Migrations};

/// The history, by name, once: each backend's file of that name is its step (a step
/// missing in either dialect does not compile).
macro_rules! history {
    ($($name:literal),* $(,)?) => {
        pub(super) const SQLITE: &[(&str, &str)] =
            &[$(($name, include_str!(concat!("migrations/sqlite/", $name, ".sql")))),*];
        pub const POSTGRES: &[(&str, &str)] =
            &[$(($name, include_str!(concat!("migrations/postgres/", $name, ".sql")))),*];
    };
}

history!(
    "0001_tenants_tokens",
    "0002_modules",
    "0003_fleet",
    "0004_checked_at",
    "0005_token_lifecycle",
    "0006_audit",
    "0007_columns_from_fields",
    "0008_generations",
    "0009_leases",
    "0010_drift_schedule",
    "0011_generations_per_statement",
    "0012_drift_schedule_order",
    "0013_policies",
    "0014_revisions",
    "0015_proposals",
    "0016_webhooks",
    "0017_hardening",
    "0018_sources",
    "0019_git_sources",
);

pub fn sqlite() -> Migrations<'static> {
    Migrations::new(SQLITE.iter().map(|(_, sql)| M::up(sql)).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_are_valid() {
        super::sqlite().validate().unwrap();
    }

    /// Every file of either dialect is a step of the history.
    #[test]
    fn every_migration_file_is_in_the_history() {
        for (dialect, history) in [("sqlite", super::SQLITE), ("postgres", super::POSTGRES)] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/db/migrations").join(dialect);
            let mut files: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|entry| entry.unwrap().file_name().to_string_lossy().trim_end_matches(".sql").to_owned())
                .collect();
            files.sort();
            assert_eq!(files, history.iter().map(|(name, _)| *name).collect::<Vec<_>>(), "{dialect}");
        }
    }

    /// A database that had applied documents before revisions existed: each tenant's
    /// applied document becomes its revision 1, and status names it.
    #[test]
    fn the_applied_document_becomes_revision_1() {
        let mut db = rusqlite::Connection::open_in_memory().unwrap();
        let before = super::SQLITE.iter().position(|(name, _)| *name == "0014_revisions").unwrap();
        super::sqlite().to_version(&mut db, before).unwrap();
        db.execute_batch(
            "INSERT INTO tenants (name, created_at) VALUES ('acme', '2026-01-01T00:00:00Z');
             INSERT INTO fleet_applied (tenant, document, prune, plan_hash, applied_by, applied_at, calls)
             VALUES ('acme', '{\"sites\": {}}', 1, 'sha256:aa', 'alice', '2026-01-02T00:00:00Z', 3);",
        )
        .unwrap();
        super::sqlite().to_latest(&mut db).unwrap();
        let revision: (i64, String, bool, String, String, i64, String) = db
            .query_row(
                "SELECT revision, document, prune, plan_hash, applied_by, calls, overrides FROM fleet_revisions",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?)),
            )
            .unwrap();
        assert_eq!(revision, (1, "{\"sites\": {}}".into(), true, "sha256:aa".into(), "alice".into(), 3, "[]".into()));
        let current: i64 = db.query_row("SELECT revision FROM fleet_applied", [], |row| row.get(0)).unwrap();
        assert_eq!(current, 1);
    }
}

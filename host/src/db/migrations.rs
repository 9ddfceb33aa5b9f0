//! Schema migrations, append-only: never edit one that has shipped, add the next, on
//! both backends under the same number and name, so that the schema has one version
//! history (SPEC §12). SQLite counts them in `user_version`, PostgreSQL in
//! `fleet_schema`.

use rusqlite_migration::{M, Migrations};

/// The history, by name, once: each backend's file of that name is its step (a step
/// missing in either dialect does not compile).
macro_rules! history {
    ($($name:literal),* $(,)?) => {
        const SQLITE: &[(&str, &str)] =
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
}

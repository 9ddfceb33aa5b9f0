//! Schema migrations, append-only: never edit one that has shipped, add the next, on
//! both backends under the same number and name, so that the schema has one version
//! history (SPEC §12). SQLite counts them in `user_version`, PostgreSQL in
//! `fleet_schema`.

use rusqlite_migration::{M, Migrations};

macro_rules! migrations {
    ($backend:literal: $($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("migrations/", $backend, "/", $name, ".sql")))),*]
    };
}

/// The history, by name: each backend's file of that name is its step.
const SQLITE: &[(&str, &str)] = migrations!("sqlite":
    "0001_tenants_tokens",
    "0002_modules",
    "0003_fleet",
    "0004_checked_at",
    "0005_token_lifecycle",
    "0006_audit",
    "0007_columns_from_fields",
    "0008_generations",
    "0009_leases",
);

pub const POSTGRES: &[(&str, &str)] = migrations!("postgres":
    "0001_tenants_tokens",
    "0002_modules",
    "0003_fleet",
    "0004_checked_at",
    "0005_token_lifecycle",
    "0006_audit",
    "0007_columns_from_fields",
    "0008_generations",
    "0009_leases",
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

    #[test]
    fn both_backends_have_one_history() {
        let names = |migrations: &[(&'static str, &str)]| migrations.iter().map(|(name, _)| *name).collect::<Vec<_>>();
        assert_eq!(names(super::SQLITE), names(super::POSTGRES));
    }
}

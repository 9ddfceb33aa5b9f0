//! Schema migrations, append-only: never edit one that has shipped, add the next.

use rusqlite_migration::{M, Migrations};

pub fn migrations() -> Migrations<'static> {
    Migrations::new(vec![
        M::up(include_str!("migrations/0001_tenants_tokens.sql")),
        M::up(include_str!("migrations/0002_modules.sql")),
        M::up(include_str!("migrations/0003_fleet.sql")),
        M::up(include_str!("migrations/0004_checked_at.sql")),
        M::up(include_str!("migrations/0005_token_lifecycle.sql")),
        M::up(include_str!("migrations/0006_audit.sql")),
        M::up(include_str!("migrations/0007_columns_from_fields.sql")),
        M::up(include_str!("migrations/0008_generations.sql")),
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_are_valid() {
        super::migrations().validate().unwrap();
    }
}

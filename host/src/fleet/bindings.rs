//! Name bindings (SPEC §5): `(tenant, kind, name) -> id` for every object fleet created
//! under a name. Export keys bound objects by name; plans resolve names through them.

use fleet_guest::Binding;
use rusqlite::{Connection, params};

use crate::api::ApiError;

/// The tenant's name bindings.
pub fn all(db: &Connection, tenant: &str) -> Result<Vec<Binding>, ApiError> {
    let mut statement =
        db.prepare_cached("SELECT kind, name, id FROM fleet_bindings WHERE tenant = ?1 ORDER BY kind, name")?;
    let rows =
        statement.query_map([tenant], |row| Ok(Binding { kind: row.get(0)?, name: row.get(1)?, id: row.get(2)? }))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Binds `name` to the object fleet created with `id`.
pub fn bind(db: &Connection, tenant: &str, kind: &str, name: &str, id: &str) -> Result<(), ApiError> {
    db.prepare_cached(
        "INSERT INTO fleet_bindings (tenant, kind, name, id) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant, kind, name) DO UPDATE SET id = excluded.id",
    )?
    .execute(params![tenant, kind, name, id])?;
    Ok(())
}

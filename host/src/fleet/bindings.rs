//! Name bindings (SPEC §5): `(tenant, kind, name) -> id` for every object fleet created
//! under a name. Export keys bound objects by name; plans resolve names through them.

use crate::api::ApiError;
use crate::db::Conn;
use crate::params;
use fleet_guest::Binding;

/// The tenant's name bindings.
pub fn all(db: &Conn, tenant: &str) -> Result<Vec<Binding>, ApiError> {
    Ok(db.query(
        "SELECT kind, name, id FROM fleet_bindings WHERE tenant = ?1 ORDER BY kind, name",
        params![tenant],
        |row| Ok(Binding { kind: row.get(0)?, name: row.get(1)?, id: row.get(2)? }),
    )?)
}

/// Binds `name` to the object fleet created with `id`.
pub fn bind(db: &Conn, tenant: &str, kind: &str, name: &str, id: &str) -> Result<(), ApiError> {
    db.execute(
        "INSERT INTO fleet_bindings (tenant, kind, name, id) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant, kind, name) DO UPDATE SET id = excluded.id",
        params![tenant, kind, name, id],
    )?;
    Ok(())
}

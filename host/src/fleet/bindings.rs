//! Name bindings (SPEC §5): `(tenant, kind, name) -> id` for every object fleet created
//! under a name. Export keys bound objects by name; plans resolve names through them.

use fleet_guest::{Binding, Descriptor};

use crate::api::ApiError;
use crate::db::params;
use crate::db::{self, Conn, Param};

/// The tenant's name bindings.
pub fn all(db: &Conn, tenant: &str) -> Result<Vec<Binding>, ApiError> {
    Ok(db.query(
        "SELECT kind, name, id FROM fleet_bindings WHERE tenant = ?1 ORDER BY kind, name",
        params![tenant],
        |row| Ok(Binding { kind: row.get(0)?, name: row.get(1)?, id: row.get(2)? }),
    )?)
}

/// Bindings written by one statement: a round trip for this many.
const ROWS_PER_STATEMENT: usize = 128;

/// Binds each `(kind, name)` to the object fleet created with `id`. At most one binding
/// per `(kind, name)`: a document's keys are unique within a section.
pub fn bind<'a>(
    db: &Conn,
    tenant: &str,
    bindings: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
) -> Result<(), ApiError> {
    let bindings: Vec<_> = bindings.into_iter().collect();
    for chunk in bindings.chunks(ROWS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO fleet_bindings (tenant, kind, name, id) VALUES {}
             ON CONFLICT (tenant, kind, name) DO UPDATE SET id = excluded.id",
            db::value_rows(chunk.len(), 1, 3)
        );
        let mut values = vec![Param::Text(tenant)];
        values
            .extend(chunk.iter().flat_map(|&(kind, name, id)| [Param::Text(kind), Param::Text(name), Param::Text(id)]));
        db.execute(&sql, &values)?;
    }
    Ok(())
}

/// A rename an apply makes (SPEC §15): `from` no longer names the object with `id`,
/// `to` does, and the idempotency key of the object's create moves with it, so that a
/// later create under `from` is a new object. In the apply's transaction, after its
/// calls' writes.
pub fn rename(db: &Conn, tenant: &str, kind: &Descriptor, from: &str, to: &str, id: &str) -> Result<(), ApiError> {
    db.execute(
        "DELETE FROM fleet_bindings WHERE tenant = ?1 AND kind = ?2 AND name = ?3",
        params![tenant, kind.kind, from],
    )?;
    bind(db, tenant, [(kind.kind, to, id)])?;
    let key = |name: &str| fleet_guest::idempotency_key(tenant, kind.kind, name);
    let sql = format!(
        "UPDATE {} SET idempotency_key = ?3 WHERE tenant = ?1 AND {} = ?2 AND idempotency_key = ?4",
        crate::store::table(kind),
        crate::store::column(kind.identity_name())
    );
    db.execute(&sql, params![tenant, id, &key(to), &key(from)])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn many_bindings_are_written_in_chunks_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("fleet.db")).unwrap();
        let db = pool.get().unwrap();
        crate::calls::auth::create_tenant(&db, "acme", "2026-11-30T00:00:00Z").unwrap();
        let names: Vec<(String, String)> =
            (0..300).map(|index| (format!("pool-{index:03}"), format!("pool_{index:026}"))).collect();
        super::bind(&db, "acme", names.iter().map(|(name, id)| ("pool", name.as_str(), id.as_str()))).unwrap();
        // Bound again (an id changed): the binding follows.
        super::bind(&db, "acme", [("pool", "pool-007", "pool_other")]).unwrap();
        let bound = super::all(&db, "acme").unwrap();
        assert_eq!(bound.len(), 300);
        assert_eq!((bound[7].name.as_str(), bound[7].id.as_str()), ("pool-007", "pool_other"));
        assert_eq!((bound[299].name.as_str(), bound[299].id.as_str()), ("pool-299", names[299].1.as_str()));
    }
}

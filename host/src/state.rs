//! The tenant's state in the planner's own types, read from the module tables: what the
//! WIT module adapters hand the guest, and what other planner hosts get from
//! `compute.preview.snapshot`. A kind whose module this deployment does not run reads as
//! empty. The columns are those of `db/migrations/0002_modules.sql`; the module tests and
//! the golden round trips (export, then plan: no calls) keep the two in step.

use fleet_guest::state::StringMap;
use fleet_guest::{Flavor, Kind, Offer, OwnerQuota, Pool, ProviderAccount, Site, Snapshot};
use rusqlite::{Connection, Row};

use crate::api::ApiError;
use crate::app::App;
use crate::auth::Caller;

/// Reads a whole table of the tenant with typed SQL: this is the hot path of every
/// plan, so it skips the generic module objects.
fn query<T>(
    app: &App,
    db: &Connection,
    tenant: &str,
    kind: Kind,
    sql: &str,
    row: impl Fn(&Row) -> rusqlite::Result<T>,
) -> Result<Vec<T>, ApiError> {
    if !app.runs(kind) {
        return Ok(Vec::new());
    }
    let mut statement = db.prepare_cached(sql)?;
    let rows = statement.query_map([tenant], |found| row(found))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A map column (JSON text of string to string).
fn map(row: &Row, index: usize) -> rusqlite::Result<StringMap> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text)
        .map_err(|error| rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(error)))
}

fn count(row: &Row, index: usize) -> rusqlite::Result<u64> {
    Ok(row.get::<_, i64>(index)?.max(0) as u64)
}

pub fn sites(app: &App, db: &Connection, tenant: &str) -> Result<Vec<Site>, ApiError> {
    let sql = "SELECT id, region, description, labels FROM sites WHERE tenant = ?1 ORDER BY id";
    query(app, db, tenant, Kind::Site, sql, |row| {
        Ok(Site { id: row.get(0)?, region: row.get(1)?, description: row.get(2)?, labels: map(row, 3)? })
    })
}

pub fn provider_accounts(app: &App, db: &Connection, tenant: &str) -> Result<Vec<ProviderAccount>, ApiError> {
    let sql = "SELECT id, provider, credentials_ref, settings FROM accounts WHERE tenant = ?1 ORDER BY id";
    query(app, db, tenant, Kind::ProviderAccount, sql, |row| {
        Ok(ProviderAccount {
            id: row.get(0)?,
            provider: row.get(1)?,
            credentials_ref: row.get(2)?,
            settings: map(row, 3)?,
        })
    })
}

pub fn pools(app: &App, db: &Connection, tenant: &str) -> Result<Vec<Pool>, ApiError> {
    let sql = "SELECT id, site, account, class, owner, vcpus, memory_mib, gpus, labels, archived
               FROM pools WHERE tenant = ?1 ORDER BY id";
    query(app, db, tenant, Kind::Pool, sql, |row| {
        Ok(Pool {
            id: row.get(0)?,
            site: row.get(1)?,
            account: row.get(2)?,
            class: row.get(3)?,
            owner: row.get(4)?,
            vcpus: count(row, 5)?,
            memory_mib: count(row, 6)?,
            gpus: count(row, 7)?,
            labels: map(row, 8)?,
            archived: row.get(9)?,
        })
    })
}

pub fn owner_quotas(app: &App, db: &Connection, tenant: &str) -> Result<Vec<OwnerQuota>, ApiError> {
    let sql = "SELECT owner, vcpus, memory_mib, gpus, instances FROM quotas WHERE tenant = ?1 ORDER BY owner";
    query(app, db, tenant, Kind::OwnerQuota, sql, |row| {
        Ok(OwnerQuota {
            owner: row.get(0)?,
            vcpus: count(row, 1)?,
            memory_mib: count(row, 2)?,
            gpus: count(row, 3)?,
            instances: count(row, 4)?,
        })
    })
}

pub fn offers(app: &App, db: &Connection, tenant: &str) -> Result<Vec<Offer>, ApiError> {
    let sql = "SELECT id, pool, to_owner, vcpus, memory_mib, gpus FROM offers WHERE tenant = ?1 ORDER BY id";
    query(app, db, tenant, Kind::Offer, sql, |row| {
        Ok(Offer {
            id: row.get(0)?,
            pool: row.get(1)?,
            to: row.get(2)?,
            vcpus: count(row, 3)?,
            memory_mib: count(row, 4)?,
            gpus: count(row, 5)?,
        })
    })
}

pub fn flavors(app: &App, db: &Connection, tenant: &str) -> Result<Vec<Flavor>, ApiError> {
    let sql = "SELECT id, pool, vcpus, memory_mib, gpus, disk_gib, archived FROM flavors WHERE tenant = ?1 ORDER BY id";
    query(app, db, tenant, Kind::Flavor, sql, |row| {
        Ok(Flavor {
            id: row.get(0)?,
            pool: row.get(1)?,
            vcpus: count(row, 2)?,
            memory_mib: count(row, 3)?,
            gpus: count(row, 4)?,
            disk_gib: count(row, 5)?,
            archived: row.get(6)?,
        })
    })
}

/// Everything the planner reads of the caller's tenant, at once.
pub fn snapshot(app: &App, db: &Connection, caller: &Caller) -> Result<Snapshot, ApiError> {
    let tenant = &caller.tenant;
    Ok(Snapshot {
        caller: fleet_guest::Caller { tenant: tenant.clone(), principal: caller.principal.clone() },
        modules: Kind::ALL.into_iter().filter(|kind| app.runs(*kind)).collect(),
        sites: sites(app, db, tenant)?,
        provider_accounts: provider_accounts(app, db, tenant)?,
        pools: pools(app, db, tenant)?,
        owner_quotas: owner_quotas(app, db, tenant)?,
        offers: offers(app, db, tenant)?,
        flavors: flavors(app, db, tenant)?,
        bindings: crate::fleet::bindings(db, tenant)?,
    })
}

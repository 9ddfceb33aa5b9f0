//! The tenant's state in the planner's own types, read from the module tables: what the
//! WIT module adapters hand the guest, and what the native planner reads in benchmarks.
//! A kind whose module this deployment does not run reads as empty.

use fleet_guest::{Flavor, Kind, Offer, OwnerQuota, Pool, ProviderAccount, Site, Snapshot};
use rusqlite::Connection;

use crate::api::ApiError;
use crate::app::App;
use crate::auth::Caller;
use crate::modules::{self, Object};

fn table(app: &App, db: &Connection, tenant: &str, kind: Kind) -> Result<Vec<Object>, ApiError> {
    if !app.runs(kind) {
        return Ok(Vec::new());
    }
    modules::load_all(db, modules::of(kind), tenant)
}

pub fn sites(app: &App, db: &Connection, tenant: &str) -> Result<Vec<Site>, ApiError> {
    Ok(table(app, db, tenant, Kind::Site)?
        .into_iter()
        .map(|site| Site {
            region: site.text("region").into(),
            description: site.text("description").into(),
            labels: site.pairs("labels").into_iter().collect(),
            id: site.key,
        })
        .collect())
}

pub fn provider_accounts(app: &App, db: &Connection, tenant: &str) -> Result<Vec<ProviderAccount>, ApiError> {
    Ok(table(app, db, tenant, Kind::ProviderAccount)?
        .into_iter()
        .map(|account| ProviderAccount {
            provider: account.text("provider").into(),
            credentials_ref: account.text("credentialsRef").into(),
            settings: account.pairs("settings").into_iter().collect(),
            id: account.key,
        })
        .collect())
}

pub fn pools(app: &App, db: &Connection, tenant: &str) -> Result<Vec<Pool>, ApiError> {
    Ok(table(app, db, tenant, Kind::Pool)?
        .into_iter()
        .map(|pool| Pool {
            site: pool.text("site").into(),
            account: pool.text("account").into(),
            class: pool.text("class").into(),
            owner: pool.text("owner").into(),
            vcpus: pool.count("vcpus"),
            memory_mib: pool.count("memoryMib"),
            gpus: pool.count("gpus"),
            labels: pool.pairs("labels").into_iter().collect(),
            archived: pool.archived,
            id: pool.key,
        })
        .collect())
}

pub fn owner_quotas(app: &App, db: &Connection, tenant: &str) -> Result<Vec<OwnerQuota>, ApiError> {
    Ok(table(app, db, tenant, Kind::OwnerQuota)?
        .into_iter()
        .map(|quota| OwnerQuota {
            vcpus: quota.count("vcpus"),
            memory_mib: quota.count("memoryMib"),
            gpus: quota.count("gpus"),
            instances: quota.count("instances"),
            owner: quota.key,
        })
        .collect())
}

pub fn offers(app: &App, db: &Connection, tenant: &str) -> Result<Vec<Offer>, ApiError> {
    Ok(table(app, db, tenant, Kind::Offer)?
        .into_iter()
        .map(|offer| Offer {
            pool: offer.text("pool").into(),
            to: offer.text("to").into(),
            vcpus: offer.count("vcpus"),
            memory_mib: offer.count("memoryMib"),
            gpus: offer.count("gpus"),
            id: offer.key,
        })
        .collect())
}

pub fn flavors(app: &App, db: &Connection, tenant: &str) -> Result<Vec<Flavor>, ApiError> {
    Ok(table(app, db, tenant, Kind::Flavor)?
        .into_iter()
        .map(|flavor| Flavor {
            pool: flavor.text("pool").into(),
            vcpus: flavor.count("vcpus"),
            memory_mib: flavor.count("memoryMib"),
            gpus: flavor.count("gpus"),
            disk_gib: flavor.count("diskGib"),
            archived: flavor.archived,
            id: flavor.key,
        })
        .collect())
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

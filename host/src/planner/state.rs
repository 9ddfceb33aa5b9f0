//! The tenant's state as the planner reads it, from the module tables through the one
//! storage layer: the state encoding the WIT `snapshot` import hands the guest, and the
//! JSON form other planner hosts read (export and plan with
//! `Accept: application/vnd.fleet.state+json`, and `compute.preview.snapshot`). A kind whose module
//! this deployment does not run has no table; its bindings are still given.

use fleet_guest::Snapshot;
use fleet_guest::state::StateWriter;
use rusqlite::Connection;

use crate::api::ApiError;
use crate::calls::auth::Caller;
use crate::fleet::bindings;
use crate::modules::{Modules, store};

/// The state encoding of the tenant's objects and bindings.
pub fn encode(modules: &Modules, db: &Connection, tenant: &str) -> Result<Vec<u8>, ApiError> {
    let mut state = StateWriter::new();
    state.modules(modules.running().map(|kind| kind.kind));
    for kind in modules.running() {
        store::encode_table(db, kind, tenant, &mut state)?;
    }
    let bindings = bindings::all(db, tenant)?;
    state.bindings(bindings.iter().map(|binding| (&*binding.kind, &*binding.name, &*binding.id)));
    Ok(state.finish())
}

/// Everything the planner reads of the caller's tenant, at once.
pub fn snapshot(modules: &Modules, db: &Connection, caller: &Caller) -> Result<Snapshot, ApiError> {
    let bytes = encode(modules, db, &caller.tenant)?;
    let mut snapshot = fleet_guest::state::decode(&modules.catalog, &bytes)?;
    snapshot.caller = fleet_guest::Caller { tenant: caller.tenant.clone(), principal: caller.principal.clone() };
    Ok(snapshot)
}

//! The tenant's state as the planner reads it, assembled by fleet from the module
//! tables (through `store`), the name bindings and the policies in force: the state
//! encoding the WIT `snapshot` import hands the guest (this is the planner's
//! [`StateSource`]), and the JSON form other planner hosts read (`preview`). A kind whose
//! module this deployment does not run has no table; its bindings are still given.

use std::sync::Arc;

use fleet_guest::Snapshot;
use fleet_guest::state::StateWriter;

use crate::api::ApiError;
use crate::cache::{Cache, Scope, generation};
use crate::calls::auth::Caller;
use crate::db::Conn;
use crate::fleet::bindings;
use crate::metrics::Metrics;
use crate::modules::Modules;
use crate::planner::StateSource;
use crate::policies::Deployment;
use crate::store;

/// The tenants' states for the planner, each kept encoded at the generation it was read
/// at (docs/decisions/0010).
pub struct Reader {
    pub modules: Arc<Modules>,
    /// The deployment's policies, in force for every tenant beside its own.
    pub policies: Deployment,
    cache: Cache<Vec<u8>>,
}

impl Reader {
    /// A reader of the modules that run, keeping at most `capacity` bytes of states.
    pub fn new(modules: Arc<Modules>, policies: Deployment, capacity: usize, metrics: Metrics) -> Reader {
        Reader { modules, policies, cache: Cache::new("state", capacity, metrics) }
    }

    /// Everything the planner reads of the caller's tenant, at once, as of the
    /// transaction `db` is in.
    pub fn snapshot(&self, db: &Conn, caller: &Caller) -> Result<Snapshot, ApiError> {
        let state = self.encode(db, &caller.tenant)?;
        let mut snapshot = fleet_guest::state::decode(&self.modules.catalog, &state)?;
        snapshot.caller = caller.for_planner();
        Ok(snapshot)
    }
}

impl StateSource for Reader {
    /// The state encoding of the tenant, as of the transaction `db` is in.
    fn encode(&self, db: &Conn, tenant: &str) -> Result<Arc<Vec<u8>>, ApiError> {
        let generation = generation(db, tenant, Scope::State)?;
        if let Some(state) = self.cache.get(tenant, generation) {
            return Ok(state);
        }
        let state = encode(&self.modules, &self.policies, db, tenant)?;
        let bytes = state.len();
        Ok(self.cache.put(tenant, generation, state, bytes))
    }

    fn last_size(&self, tenant: &str) -> Option<usize> {
        self.cache.bytes_of(tenant)
    }
}

/// The state encoding of the tenant's objects, bindings and the policies in force.
pub fn encode(modules: &Modules, policies: &Deployment, db: &Conn, tenant: &str) -> Result<Vec<u8>, ApiError> {
    let mut state = StateWriter::new();
    state.modules(modules.running().map(|kind| kind.kind));
    for kind in modules.running() {
        store::encode_table(db, kind, tenant, &mut state)?;
    }
    let bindings = bindings::all(db, tenant)?;
    state.bindings(bindings.iter().map(|binding| (&*binding.kind, &*binding.name, &*binding.id)));
    state.policies(&crate::policies::in_force(policies, db, tenant)?);
    Ok(state.finish())
}

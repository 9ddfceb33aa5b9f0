//! The fleet planner: FleetConfig documents, export, plan and apply, with no I/O of its own.
//!
//! Everything the planner knows about a tenant comes through [`Host`]: the component glue
//! in `component.rs` implements it with the WIT imports, native callers (tests, the
//! benchmark) with a [`state::Snapshot`].

pub mod error;
pub mod state;

#[cfg(target_arch = "wasm32")]
#[expect(unsafe_code, reason = "the canonical ABI glue that wit-bindgen generates")]
mod component;

pub use error::{Error, ErrorCode};
pub use state::{Binding, Caller, Flavor, Kind, Offer, OwnerQuota, Pool, ProviderAccount, Site, Snapshot};

/// What the planner may ask of the host that runs it: the module adapters of `wit/`.
pub trait Host {
    fn caller(&self) -> Caller;
    fn modules(&self) -> Vec<Kind>;
    fn sites(&self) -> Vec<Site>;
    fn provider_accounts(&self) -> Vec<ProviderAccount>;
    fn pools(&self) -> Vec<Pool>;
    fn owner_quotas(&self) -> Vec<OwnerQuota>;
    fn offers(&self) -> Vec<Offer>;
    fn flavors(&self) -> Vec<Flavor>;
    fn bindings(&self) -> Vec<Binding>;
    /// Runs a module method as the caller (apply only). Hosts without composite methods
    /// answer [`ErrorCode::Unsupported`].
    fn invoke(&mut self, method: &str, input: &str) -> Result<String, Error>;
}

/// `{}` -> `{"document": FleetConfig, "missing": [...]}` (SPEC §6.1).
pub fn export(host: &dyn Host, request: &str) -> Result<String, Error> {
    let _ = request;
    let snapshot = Snapshot::read(host);
    let missing: Vec<&str> =
        Kind::ALL.iter().filter(|kind| !snapshot.modules.contains(kind)).map(|kind| kind.section()).collect();
    Ok(serde_json::json!({"document": {}, "missing": missing}).to_string())
}

/// `{"document", "prune"?}` -> Plan (SPEC §6.2).
pub fn plan(host: &dyn Host, request: &str) -> Result<String, Error> {
    let _ = (host, request);
    Err(Error::new(ErrorCode::Unsupported, "plan is not built yet"))
}

/// `{"document", "prune"?, "planHash"?}` -> `{"plan", "applied"}` (SPEC §6.3).
pub fn apply(host: &mut dyn Host, request: &str) -> Result<String, Error> {
    let _ = (host, request);
    Err(Error::new(ErrorCode::Unsupported, "apply is not built yet"))
}

//! The fleet host: the HTTP API over SQLite or PostgreSQL state, the method registry,
//! and the sandbox that runs the planner component. Its modules stand in the layers of
//! ARCHITECTURE.md ("Layers of the host"; `tests/house.rs` holds the code to them),
//! each using only its own layer and those below:
//!
//! - `app`, the composition root that builds every part, and `demo`, which seeds the
//!   demo tenant;
//! - `http`: the transport (hyper), connection limits, request ids, the event stream,
//!   the console's files, `/metrics`, the API's description;
//! - the methods, each capturing at registration what it uses: `fleet` (export, plan,
//!   apply, status, history, proposals, previews, drift), the `modules` (the kinds' API
//!   groups), `policies`, `audit`, `events` and `webhooks`; and the hosts of the
//!   components they run, `planner` and `plugins`;
//! - `calls`: the method registry, authentication and authorization, request bodies,
//!   what a handler sees, and the dispatcher that runs a method;
//! - `store` (module objects and the audit trail), `cache`, `sandbox` (the runtime the
//!   planner and plugins share), `db`, `reach` (which addresses the server's own
//!   requests may reach), `secrets` (values sealed at rest under the deployment's key),
//!   and at the ground `api` (the error) and `metrics`.
//!
//! The `fleet` binary (`bin/fleet`) parses flags, runs the server or the admin
//! commands, and holds the operator's client.

pub mod api;
pub mod app;
pub mod audit;
pub mod cache;
pub mod calls;
pub mod db;
pub mod demo;
pub mod events;
pub mod fleet;
pub mod http;
pub mod metrics;
pub mod modules;
pub mod planner;
pub mod plugins;
pub mod policies;
pub mod reach;
pub mod sandbox;
pub mod secrets;
pub mod sources;
pub mod store;
#[cfg(test)]
mod testing;
pub mod webhooks;

pub use app::{App, Config};

/// What the `fleet` binary sets `RUST_LIB_BACKTRACE` to as it starts, given its value
/// then: `0` when it is unset. `RUST_BACKTRACE=1` asks for the backtraces of panics, but
/// libraries that capture one for every error they make (anyhow, which regorus and
/// wasmtime use) read it too: regorus makes and drops an error for each key a policy
/// looks up and does not find, and with a backtrace each, native policy evaluation ran
/// 2.4 times slower. Panics keep their backtraces; an operator who wants library ones
/// sets `RUST_LIB_BACKTRACE` themselves.
pub fn library_backtraces(current: Option<&std::ffi::OsStr>) -> Option<&'static str> {
    current.is_none().then_some("0")
}

#[cfg(test)]
mod tests {
    #[test]
    fn library_backtraces_are_off_unless_asked_for() {
        assert_eq!(super::library_backtraces(None), Some("0"));
        assert_eq!(super::library_backtraces(Some("1".as_ref())), None, "the operator's choice stands");
        assert_eq!(super::library_backtraces(Some("0".as_ref())), None);
    }
}

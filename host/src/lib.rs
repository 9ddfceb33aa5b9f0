//! The fleet host: HTTP API, SQLite state, the method registry, and the sandbox that
//! runs the planner component. The layers, each using only those below it:
//!
//! - `http`: the transport (hyper), connection limits, the event stream, the console
//!   page, `/metrics`, the API's description;
//! - `fleet` (export, plan, apply, status, history, previews, drift), the `modules`
//!   (the kinds' API groups), `policies`, `audit` and `events`: the methods, each
//!   capturing at registration what it uses;
//! - `planner`: the planner component's host (its sandbox and imports), and `plugins`;
//! - `calls`: the method registry, authentication and authorization, request bodies,
//!   what a handler sees, and the dispatcher that runs a method;
//! - `sandbox` (the runtime the planner and plugins share), `store` (module objects and
//!   the audit trail), `cache`, `db`, `reach` (which addresses the server's own requests
//!   may reach), `metrics` and `api` (the error).
//!
//! `app` is the composition root that builds them. The `fleet` binary (`bin/fleet`)
//! parses flags, runs the server or the admin commands, and holds the operator client.

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

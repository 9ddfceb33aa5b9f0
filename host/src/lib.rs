//! The fleet host: HTTP API, SQLite state, the method registry, and the sandbox that
//! runs the planner component. The layers, each using only those below it:
//!
//! - `http`: the transport (hyper), connection limits, the console page, `/metrics`;
//! - `calls`: the method registry, authentication and authorization, request bodies,
//!   and running a method in its transaction;
//! - `fleet` (export, plan, apply, status, bindings, drift, events) and `modules` (the
//!   kinds' API groups and their storage);
//! - `planner`: the sandbox that runs the planner component, and its imports;
//! - `db`: SQLite, migrations and transactions.
//!
//! `app` is the composition root that builds them; `policies` keeps the guardrails the
//! planner judges plans by (SPEC §14); `audit` and `metrics` are read and
//! written from every layer. The `fleet` binary (`bin/fleet`) parses flags, runs the
//! server or the admin commands, and holds the operator client.

pub mod api;
pub mod app;
pub mod audit;
pub mod cache;
pub mod calls;
pub mod db;
pub mod demo;
pub mod fleet;
pub mod http;
pub mod metrics;
pub mod modules;
pub mod planner;
pub mod plugins;
pub mod policies;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub use app::{App, Config};

/// Serves `app` on `listener` with the drift reconciler running beside it (unless the
/// deployment is read-only, which writes nothing), until `shutdown` resolves; then both
/// stop and open connections finish.
pub async fn serve(app: Arc<App>, listener: TcpListener, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let (stop, stopped) = watch::channel(false);
    let reconciler = (!app.config.read_only).then(|| {
        tokio::spawn(fleet::drift::run(app.clone(), async move {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|stop| *stop).await;
        }))
    });
    let served = http::run(app, listener, shutdown).await;
    let _ = stop.send(true);
    if let Some(reconciler) = reconciler {
        let _ = reconciler.await;
    }
    served
}

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

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
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

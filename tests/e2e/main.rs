//! End-to-end tests: each starts the real `fleet` binary on 127.0.0.1 with a SQLite
//! file in a temp dir.

#![expect(clippy::unwrap_used, reason = "a failed unwrap is a failed test, helpers included")]

mod caches;
mod cli;
mod edge;
mod edge_host;
mod fleet;
mod foundation;
mod hardening;
mod modules;
mod observability;
mod plugins;
mod support;

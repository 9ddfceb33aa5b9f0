// The suite's modules, included by both of its roots: `main.rs` (the `e2e` target, on
// SQLite) and `main_postgres.rs` (`e2e-postgres`); `support::postgres()` tells which.

mod caches;
mod cli;
mod cluster;
mod edge;
mod edge_host;
mod faults;
mod fleet;
mod foundation;
mod guardrails;
mod hardening;
mod history;
mod modules;
mod observability;
mod plugins;
mod replicas;
mod support;
mod tls;

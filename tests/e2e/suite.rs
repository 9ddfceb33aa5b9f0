// The suite's modules, included by both of its roots: `main.rs` (the `e2e` target, on
// SQLite) and `main_postgres.rs` (`e2e-postgres`), which adds what only PostgreSQL has;
// `support::postgres()` tells which. A file per area of SPEC.md.

mod api; // §2, §8
mod approvals; // §17
mod auth; // §3, §9's admin commands
mod caches; // docs/decisions/0010
mod ci; // §20.2
mod cli; // §9
mod connections; // §7a
mod edge; // §11
mod events; // §6.5
mod fleet; // §6
mod git_hooks; // §20.3's inbound hook
mod git_sources; // §20.3
mod guardrails; // §14
mod history; // §15
mod module_rules; // §4's validation
mod modules; // §4
mod observability; // §13
mod plugins; // §10
mod sandbox; // §7
mod sources; // §20.2
mod support;
mod tls; // §12's HTTPS
mod webhooks; // §18

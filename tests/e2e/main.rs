//! End-to-end tests: each starts the real `fleet` binary on 127.0.0.1 with a SQLite
//! file in a temp dir.

mod cli;
mod fleet;
mod foundation;
mod modules;
mod support;

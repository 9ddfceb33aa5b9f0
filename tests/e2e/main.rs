//! End-to-end tests: each starts the real `fleet` binary on 127.0.0.1 with a database
//! of its own, here a SQLite file in a temp dir. `main_postgres.rs` runs the same suite
//! on a throwaway PostgreSQL cluster.

#![expect(clippy::unwrap_used, reason = "a failed unwrap is a failed test, helpers included")]

include!("suite.rs");
mod backups; // issue 54: SQLite's online backups
mod guides; // issue 62: every guide runs as written (on SQLite, as the guides do)

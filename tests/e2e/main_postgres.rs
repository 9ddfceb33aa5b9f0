//! The end-to-end suite of `main.rs` again, with every server on a database of its own
//! on a throwaway PostgreSQL cluster (`support/cluster.rs`), and what only PostgreSQL
//! has: replicas, outages, TLS to the database.

#![expect(clippy::unwrap_used, reason = "a failed unwrap is a failed test, helpers included")]

include!("suite.rs");
mod failover; // §12, amendment "Failover"
mod postgres; // §12
mod replicas; // §12

//! The end-to-end suite of `main.rs` again, with every server on a database of its own
//! on a throwaway PostgreSQL cluster (`cluster.rs`), and the replica tests.

#![expect(clippy::unwrap_used, reason = "a failed unwrap is a failed test, helpers included")]

include!("suite.rs");

//! Calls: the method registry and everything between a request and a handler that does
//! not depend on the transport: authentication and authorization (`auth`), reading a
//! body (`input`), what requests hold of memory (`memory`), what a handler sees
//! (`context`), the methods' schemas (`schema`), and the one path from a request to a
//! method's answer (`dispatch`).

pub mod auth;
pub mod context;
pub mod dispatch;
pub mod input;
pub mod memory;
pub mod registry;
pub mod schema;

pub use dispatch::{Dispatcher, parse_body};

//! What a method's handler sees (dropshot's request context): the authenticated caller,
//! a connection inside the transaction opened for it, and how it was called. Inside an
//! apply, its writes and audit records wait in the apply's [`Deferred`].

use crate::calls::auth::Caller;
use crate::db::Conn;
use crate::store::trail::Pending;
use crate::store::{Objects, Overlay};

/// What a handler sees: the authenticated caller, a database connection inside the
/// transaction the server (or apply) opened, and how it was called (for the audit
/// trail).
pub struct Ctx<'a> {
    pub caller: &'a Caller,
    pub db: &'a Conn,
    pub via: Via<'a>,
}

/// How a module method was called: over HTTP, or by a fleet apply (whose audit records
/// and writes wait for it in `Deferred`).
#[derive(Clone, Copy)]
pub enum Via<'a> {
    Api,
    Apply(&'a Deferred),
}

/// What an apply's calls leave to be written when the apply records itself, in its
/// transaction: their audit records (with the apply's plan hash) and their writes to
/// module objects, many to a statement.
#[derive(Default)]
pub struct Deferred {
    pub audits: Pending,
    pub objects: Overlay,
}

impl Ctx<'_> {
    /// The caller's module objects, as this call reaches them: through the apply's
    /// overlay inside an apply, straight in the database otherwise.
    pub fn objects(&self) -> Objects<'_> {
        let overlay = match self.via {
            Via::Api => None,
            Via::Apply(deferred) => Some(&deferred.objects),
        };
        Objects { db: self.db, tenant: &self.caller.tenant, overlay }
    }
}

impl Via<'_> {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Api => "api",
            Via::Apply(_) => "fleet.apply",
        }
    }
}

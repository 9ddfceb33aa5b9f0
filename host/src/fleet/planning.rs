//! The [`Planning`]: what fleet's methods, the drift reconciler and the demo plan with,
//! and the planner run on a snapshot of a tenant.

use std::sync::Arc;
use std::time::Duration;

use super::{history, state};
use crate::api::ApiError;
use crate::calls::auth::Caller;
use crate::calls::registry::Answer;
use crate::db::{self, Conn, Pool};
use crate::events::Wake;
use crate::metrics::Metrics;
use crate::modules::Modules;
use crate::planner::{ApprovalGate, Entry, Sandbox, Session, Source};
use crate::plugins::Plugins;

/// What fleet's methods, the drift reconciler and the demo plan with: the planner's
/// sandbox, the state it reads, the kinds and plugins of the deployment, where the
/// events it publishes go, and the deployment's settings. Built once by `app.rs`.
pub struct Planning {
    pub db: Pool,
    pub sandbox: Sandbox,
    /// The tenants' states as the planner reads them, cached by generation.
    pub state: Arc<state::Reader>,
    /// The kinds this deployment knows and the modules it runs.
    pub modules: Arc<Modules>,
    pub plugins: Arc<Plugins>,
    pub metrics: Metrics,
    /// Wakes event streams when an apply or a check committed events.
    pub wake: Wake,
    pub drift_interval: Duration,
    /// Reads only: nothing is recorded, not even a check.
    pub read_only: bool,
    /// Every apply of a plan with calls goes through an approved proposal (SPEC §17).
    pub require_approval: bool,
    /// Which revisions an apply keeps (all by default).
    pub retention: history::Retention,
    /// Git sources may fetch over http, git and file URLs (`serve --git-allow-insecure`),
    /// so a revision's `source` may name one.
    pub git_insecure: bool,
}

impl Planning {
    /// Where the planner reads the caller's state: the database, through the cache.
    pub fn source(&self) -> Source {
        Source::Database(self.state.clone())
    }

    /// The planner run as `caller` on a snapshot of the tenant: one read transaction
    /// around the whole guest call, so the tables it reads agree with each other.
    pub fn run(&self, caller: Caller, db: Conn, entry: Entry, request: &str) -> Answer {
        if let Err(error) = db::begin(&db, db::Tx::Read) {
            return Answer::from(Err(error));
        }
        // A plan says when the deployment would refuse to apply it directly.
        let gate = if self.require_approval { ApprovalGate::EveryChange } else { ApprovalGate::Verdicts };
        let session = Session::new(caller, db, self.source()).gated(gate);
        let (session, output) = self.sandbox.call(session, entry, request);
        Answer { output: db::finish(&session.db, output), sandbox: session.sandbox }
    }

    /// [`Planning::run`] on a connection of its own, the output alone.
    pub fn plan(&self, caller: Caller, request: &str) -> Result<String, ApiError> {
        self.run(caller, self.db.get()?, Entry::Plan, request).output
    }
}

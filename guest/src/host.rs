//! What the planner asks of the host that runs it: the module adapters of `wit/` as one
//! trait, which the component glue implements with the WIT imports, the edge with the
//! origin's state, and a [`Snapshot`] for native callers (tests, the benchmark); and
//! the gate an apply passes, which the host sets.

use crate::error::{Error, ErrorCode};
use crate::hash::HostSha256;
use crate::kinds::Catalog;
use crate::plugins;
use crate::state::{Caller, Snapshot};

/// What the planner may ask of the host that runs it: the module adapters of `wit/`.
pub trait Host {
    fn caller(&self) -> Caller;
    /// Everything the planner reads of the caller's tenant, kinds and fields as
    /// `catalog` has them (the caller aside).
    fn state(&self, catalog: &Catalog) -> Result<Snapshot, Error>;
    /// Runs a module method as the caller (apply only). Hosts without composite methods
    /// answer [`ErrorCode::Unsupported`].
    fn invoke(&mut self, method: &str, input: &str) -> Result<String, Error>;
    /// The kinds of the module plugins the host loads: a JSON array of
    /// [`plugins::PluginKind`]s. None by default.
    fn plugin_kinds(&self) -> Result<String, Error> {
        Ok("[]".to_owned())
    }
    /// Runs the check of the plugin that serves `kind` on `subjects` (SPEC §10). Only
    /// called for plugin kinds, so a host without plugins is never asked.
    fn check(&self, kind: &str, _subjects: Vec<plugins::Subject>) -> Result<Vec<plugins::Finding>, Error> {
        Err(Error::new(ErrorCode::Internal, format!("this host runs no plugin for the kind {kind}")))
    }
    /// Told before each policy runs, and `""` once they are done, so that a host whose
    /// budget a policy exhausts can name it (SPEC §14). Nothing by default.
    fn judging(&self, _policy: &str) {}
    /// What an apply must have before it runs its calls (SPEC §17). By default, plans
    /// with binding `require_approval` verdicts are refused.
    fn approval_gate(&self) -> ApprovalGate {
        ApprovalGate::Verdicts
    }
    /// A SHA-256 the host computes faster than the planner can (the CPU's SHA
    /// instructions, which WebAssembly lacks). None by default: the planner computes its
    /// digests itself, and they are the same.
    fn sha256(&self) -> Option<Box<dyn HostSha256>> {
        None
    }
}

impl Host for Snapshot {
    fn caller(&self) -> Caller {
        self.caller.clone()
    }

    fn state(&self, _catalog: &Catalog) -> Result<Snapshot, Error> {
        Ok(self.clone())
    }

    fn invoke(&mut self, method: &str, _input: &str) -> Result<String, Error> {
        Err(Error::new(ErrorCode::Unsupported, format!("this host cannot run {method}: it has no composite methods")))
    }
}

/// What an apply must have before its calls run (SPEC §17), as the host decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalGate {
    /// A plan with binding `require_approval` verdicts needs a proposal.
    Verdicts,
    /// Every plan with calls needs a proposal (`fleet serve --require-approval`).
    EveryChange,
    /// Nothing more: the apply of an approved proposal, or a heal.
    None,
}

//! The fleet planner: FleetConfig documents, export, plan and apply, with no I/O of its own.
//!
//! Everything the planner knows about a tenant comes through [`Host`]: the component glue
//! in `component/glue.rs` implements it with the WIT imports, native callers (tests, the
//! benchmark) with a [`state::Snapshot`].

mod apply;
mod component;
mod document;
pub mod error;
mod estate;
mod export;
/// The golden cases, for the tests that replay them (never compiled into the component).
#[cfg(not(target_arch = "wasm32"))]
pub mod golden;
pub mod grammar;
pub mod grants;
mod hash;
pub mod json;
pub mod kinds;

#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod plan;
pub mod plugins;
pub mod policy;
pub mod state;
mod text;
pub mod value;

pub use error::{Error, ErrorCode, Problem};
pub use kinds::{Catalog, Descriptor};
pub use policy::{Level, Policy};
pub use state::{Binding, Caller, Object, Snapshot};
pub use value::Value;

pub use apply::ApprovalGate;
pub use document::{MOVED, PLAN_HASH_FORM, is_plan_hash};
use estate::Estate;
pub use hash::{HostSha256, idempotency_key};

use std::borrow::Cow;
use std::io::Write;

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

/// The kinds this host serves: the built-in ones and its plugins'.
fn catalog(host: &dyn Host) -> Result<Catalog, Error> {
    let plugin_kinds =
        plugins::parse_kinds(&host.plugin_kinds()?).map_err(|error| Error::new(ErrorCode::Internal, error))?;
    if plugin_kinds.is_empty() {
        return Ok(Catalog::built_in());
    }
    Catalog::with_plugins(&plugin_kinds).map_err(|(kind, reason)| {
        Error::new(ErrorCode::Internal, format!("the plugin kind {kind} cannot be served: {reason}"))
    })
}

/// Reads the caller's tenant once.
fn estate(host: &dyn Host, catalog: Catalog) -> Result<Estate, Error> {
    let mut snapshot = host.state(&catalog)?;
    snapshot.caller = host.caller();
    Ok(Estate::new(catalog, snapshot))
}

/// `{}` -> `{"document": FleetConfig, "missing": [...]}` (SPEC §6.1).
pub fn export(host: &dyn Host, request: &str) -> Result<String, Error> {
    written(|out| export_to(host, request, out))
}

/// `{"document", "prune"?}` -> Plan (SPEC §6.2).
pub fn plan(host: &dyn Host, request: &str) -> Result<String, Error> {
    written(|out| plan_to(host, request, out))
}

/// `{"document", "prune"?, "planHash"?}` -> `{"plan", "applied"}` (SPEC §6.3).
pub fn apply(host: &mut dyn Host, request: &str) -> Result<String, Error> {
    written(|out| apply_to(host, request, out))
}

/// [`export`], its result written to `out` as it is made. After an error, what `out`
/// was given is no result.
pub fn export_to(host: &dyn Host, request: &str, out: impl Write) -> Result<(), Error> {
    document::parse_export(request)?;
    export::export(&estate(host, catalog(host)?)?, out)
}

/// [`plan`], its result written to `out` as it is made: the plan is never held whole
/// as text. A request given as a `String` is let go once it is read. After an error,
/// what `out` was given is no result.
pub fn plan_to<'r>(host: &dyn Host, request: impl Into<Cow<'r, str>>, out: impl Write) -> Result<(), Error> {
    let (plan, _) = planned(host, request.into(), false)?;
    write_json(out, &plan, "plan")
}

/// [`apply`], its result written to `out` once the calls ran. A request given as a
/// `String` is let go once it is read. After an error, what `out` was given is no
/// result.
pub fn apply_to<'r>(host: &mut dyn Host, request: impl Into<Cow<'r, str>>, out: impl Write) -> Result<(), Error> {
    let (plan, request) = planned(&*host, request.into(), true)?;
    let caller = host.caller();
    apply::apply(host, &plan, &request, &caller, out)
}

/// A result written into memory, for callers that take it whole.
fn written(write: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>) -> Result<String, Error> {
    let mut out = Vec::new();
    write(&mut out)?;
    String::from_utf8(out).map_err(|_| Error::new(ErrorCode::Internal, "the planner wrote text that is not UTF-8"))
}

/// Writes `value` as JSON text to `out`, named `what` in the error.
pub(crate) fn write_json(out: impl Write, value: &impl serde::Serialize, what: &str) -> Result<(), Error> {
    json::writer::to_writer(out, value)
        .map_err(|error| Error::new(ErrorCode::Internal, format!("the {what} cannot be written: {error}")))
}

/// Authenticates, parses and validates a plan or apply request, reads the state once
/// and plans. Returns the plan and the request. The request's text is let go once it
/// is read (when it is the planner's to let go): a large document's text is a tenth of
/// what planning it holds.
fn planned(host: &dyn Host, text: Cow<str>, is_apply: bool) -> Result<(plan::Plan, document::PlanRequest), Error> {
    let caller = host.caller();
    if caller.tenant.is_empty() || caller.principal.is_empty() {
        return Err(Error::new(
            ErrorCode::Unauthenticated,
            "planning needs an authenticated caller (a tenant and a principal)",
        ));
    }
    let catalog = catalog(host)?;
    let (request, problems) = document::parse_plan(&catalog, &text, is_apply)?;
    drop(text);
    let mut estate = estate(host, catalog)?;
    let plan = plan::plan(&mut estate, &request, problems, host)?;
    Ok((plan, request))
}

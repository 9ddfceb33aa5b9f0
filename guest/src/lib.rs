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
mod host;
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
pub use state::{Binding, Caller, Level, Object, Policy, Snapshot};
pub use value::Value;

pub use document::{MOVED, PLAN_HASH_FORM, is_plan_hash};
use estate::Estate;
pub use hash::{HostSha256, idempotency_key};
pub use host::{ApprovalGate, Host};

use std::borrow::Cow;
use std::io::Write;

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
    json::writer::write_json(out, &plan, "plan")
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

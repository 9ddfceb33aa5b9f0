//! The wit-bindgen glue, and nothing else: WIT imports become a [`crate::Host`], WIT
//! exports call the pure planner.

wit_bindgen::generate!({ world: "fleet-planner", path: "../wit" });

use std::io::Write;

use compute::fleet::{digest, methods, output, plugins, state, types};
use exports::compute::fleet::planner::Guest;

use crate::plugins::{Finding, Subject};
use crate::{ApprovalGate, Caller, Catalog, Error, ErrorCode, Host, HostSha256, Snapshot};

struct Component;

export!(Component);

impl Guest for Component {
    fn export(request: String) -> Result<(), types::Error> {
        written(|out| crate::export_to(&Imports, &request, out))
    }

    fn plan(request: String) -> Result<(), types::Error> {
        written(|out| crate::plan_to(&Imports, request, out))
    }

    fn apply(request: String) -> Result<(), types::Error> {
        written(|out| crate::apply_to(&mut Imports, request, out))
    }
}

/// Runs an entry point with its result handed to the host through `output.write`, a
/// chunk at a time (the planner's JSON writer gathers them).
fn written(call: impl FnOnce(&mut Output) -> Result<(), Error>) -> Result<(), types::Error> {
    call(&mut Output).map_err(into_wit_error)
}

/// The result of the call in progress, as the host takes it.
struct Output;

impl Write for Output {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        output::write(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The host, reached through the component's imports.
struct Imports;

impl Host for Imports {
    fn caller(&self) -> Caller {
        let caller = state::current_caller();
        Caller { tenant: caller.tenant, principal: caller.principal, grants: caller.grants }
    }

    fn state(&self, catalog: &Catalog) -> Result<Snapshot, Error> {
        crate::state::decode(catalog, &state::snapshot())
    }

    fn invoke(&mut self, method: &str, input: &str) -> Result<String, Error> {
        methods::invoke(method, input).map_err(from_wit_error)
    }

    fn plugin_kinds(&self) -> Result<String, Error> {
        Ok(plugins::kinds())
    }

    fn judging(&self, policy: &str) {
        state::judging(policy);
    }

    fn check(&self, kind: &str, subjects: Vec<Subject>) -> Result<Vec<Finding>, Error> {
        let subjects: Vec<plugins::Subject> = subjects
            .into_iter()
            .map(|Subject { object, previous, references }| plugins::Subject { object, previous, references })
            .collect();
        let problems = plugins::check(kind, &subjects).map_err(from_wit_error)?;
        Ok(problems
            .into_iter()
            .map(|problem| Finding { subject: problem.subject, path: problem.path, message: problem.message })
            .collect())
    }

    fn approval_gate(&self) -> ApprovalGate {
        match state::approval() {
            state::ApprovalGate::Verdicts => ApprovalGate::Verdicts,
            state::ApprovalGate::EveryChange => ApprovalGate::EveryChange,
            state::ApprovalGate::None => ApprovalGate::None,
        }
    }

    fn sha256(&self) -> Option<Box<dyn HostSha256>> {
        digest::has_sha256().then(|| Box::new(ImportedSha256) as Box<dyn HostSha256>)
    }
}

/// The host's running SHA-256 (`digest`).
struct ImportedSha256;

impl HostSha256 for ImportedSha256 {
    fn update(&mut self, bytes: &[u8]) {
        digest::sha256_update(bytes);
    }

    fn finish(&mut self) -> Result<[u8; 32], Error> {
        let digest = digest::sha256_finish();
        digest.try_into().map_err(|digest: Vec<u8>| {
            Error::new(ErrorCode::Internal, format!("the host's SHA-256 digest has {} bytes, not 32", digest.len()))
        })
    }
}

const CODES: [(ErrorCode, types::ErrorCode); 16] = [
    (ErrorCode::InvalidArgument, types::ErrorCode::InvalidArgument),
    (ErrorCode::Unauthenticated, types::ErrorCode::Unauthenticated),
    (ErrorCode::PermissionDenied, types::ErrorCode::PermissionDenied),
    (ErrorCode::NotFound, types::ErrorCode::NotFound),
    (ErrorCode::MethodNotAllowed, types::ErrorCode::MethodNotAllowed),
    (ErrorCode::AlreadyExists, types::ErrorCode::AlreadyExists),
    (ErrorCode::FailedPrecondition, types::ErrorCode::FailedPrecondition),
    (ErrorCode::InvalidState, types::ErrorCode::InvalidState),
    (ErrorCode::ConfigDrift, types::ErrorCode::ConfigDrift),
    (ErrorCode::PolicyDenied, types::ErrorCode::PolicyDenied),
    (ErrorCode::ApprovalRequired, types::ErrorCode::ApprovalRequired),
    (ErrorCode::PayloadTooLarge, types::ErrorCode::PayloadTooLarge),
    (ErrorCode::ResourceExhausted, types::ErrorCode::ResourceExhausted),
    (ErrorCode::Unsupported, types::ErrorCode::Unsupported),
    (ErrorCode::Unavailable, types::ErrorCode::Unavailable),
    (ErrorCode::Internal, types::ErrorCode::Internal),
];

fn into_wit_error(error: Error) -> types::Error {
    let code = CODES.iter().find(|(ours, _)| *ours == error.code).map(|(_, wit)| *wit);
    types::Error {
        code: code.unwrap_or(types::ErrorCode::Internal),
        message: error.message,
        details: error.details.map(|details| details.to_string()).unwrap_or_default(),
    }
}

fn from_wit_error(error: types::Error) -> Error {
    let code = CODES.iter().find(|(_, wit)| *wit == error.code).map(|(ours, _)| *ours);
    Error {
        code: code.unwrap_or(ErrorCode::Internal),
        message: error.message,
        details: serde_json::from_str(&error.details).ok(),
    }
}

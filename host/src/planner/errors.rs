//! What a failed planner call answers: a trap is an exhausted budget or a bug, never
//! bad input; the planner's own errors carry a SPEC §2 code, one to one with the WIT's.

use wasmtime::Trap;

use super::Entry;
use super::compute::fleet::types;
use crate::api::{ApiError, Code};

/// The SPEC §2 codes and the WIT's, one to one: one table read both ways, as the
/// planner's component reads its own (`guest/src/component/glue.rs`).
const CODES: [(Code, types::ErrorCode); 16] = [
    (Code::InvalidArgument, types::ErrorCode::InvalidArgument),
    (Code::Unauthenticated, types::ErrorCode::Unauthenticated),
    (Code::PermissionDenied, types::ErrorCode::PermissionDenied),
    (Code::NotFound, types::ErrorCode::NotFound),
    (Code::MethodNotAllowed, types::ErrorCode::MethodNotAllowed),
    (Code::AlreadyExists, types::ErrorCode::AlreadyExists),
    (Code::FailedPrecondition, types::ErrorCode::FailedPrecondition),
    (Code::InvalidState, types::ErrorCode::InvalidState),
    (Code::ConfigDrift, types::ErrorCode::ConfigDrift),
    (Code::PolicyDenied, types::ErrorCode::PolicyDenied),
    (Code::ApprovalRequired, types::ErrorCode::ApprovalRequired),
    (Code::PayloadTooLarge, types::ErrorCode::PayloadTooLarge),
    (Code::ResourceExhausted, types::ErrorCode::ResourceExhausted),
    (Code::Unsupported, types::ErrorCode::Unsupported),
    (Code::Unavailable, types::ErrorCode::Unavailable),
    (Code::Internal, types::ErrorCode::Internal),
];

/// A trap is never bad input: it is an exhausted budget or a bug.
pub(super) fn trap_error(trap: &wasmtime::Error, memory_exhausted: bool, entry: Entry) -> ApiError {
    if trap.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return ApiError::new(Code::ResourceExhausted, "the planner ran out of its CPU budget");
    }
    if memory_exhausted {
        return ApiError::new(Code::ResourceExhausted, "the planner ran out of its memory budget");
    }
    if let Some(error) = trap.downcast_ref::<ApiError>() {
        return error.clone();
    }
    if trap.downcast_ref::<Trap>() == Some(&Trap::AllocationTooLarge) {
        return ApiError::new(Code::ResourceExhausted, "the sandbox has no room for another planner right now");
    }
    ApiError::internal(format_args!("the planner trapped in {entry:?}: {trap:?}"))
}

/// The planner's error as the API answers it.
pub(super) fn from_wit_error(error: types::Error) -> ApiError {
    let code = CODES.iter().find(|(_, wit)| *wit == error.code).map_or(Code::Internal, |(code, _)| *code);
    let details = match error.details.as_str() {
        "" => None,
        text => serde_json::from_str::<serde_json::Value>(text).ok().filter(serde_json::Value::is_object),
    };
    ApiError { code, message: error.message, details, cause: None, retry_after: None }
}

/// A host import's error as the planner receives it.
pub(super) fn into_wit_error(error: ApiError) -> types::Error {
    let code = CODES.iter().find(|(code, _)| *code == error.code).map_or(types::ErrorCode::Internal, |(_, wit)| *wit);
    types::Error {
        code,
        message: error.message,
        details: error.details.map(|details| details.to_string()).unwrap_or_default(),
    }
}

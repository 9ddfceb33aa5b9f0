//! The FleetConfig parser and validator: any text as a plan request. It never panics,
//! answers the same twice, refuses only with INVALID_ARGUMENT, and its fast reader of
//! valid requests reads whatever it reads as the reader that reports every problem.

#![no_main]

use fleet_guest::{Caller, ErrorCode, Snapshot};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = std::str::from_utf8(data) else { return };
    let state = Snapshot::empty(Caller { tenant: "acme".into(), principal: "alice".into(), grants: None });
    assert!(fleet_guest::fuzzing::streamed_request_agrees(request), "the two readers disagree");
    let first = fleet_guest::plan(&state, request);
    assert_eq!(first, fleet_guest::plan(&state, request), "a plan is deterministic");
    if let Err(error) = first {
        assert_eq!(error.code, ErrorCode::InvalidArgument, "{error}");
        assert!(error.details.is_some_and(|details| details["problems"].as_array().is_some_and(|p| !p.is_empty())));
    }
});

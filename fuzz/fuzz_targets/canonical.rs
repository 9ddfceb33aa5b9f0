//! The canonical-JSON writer behind the plan hash against the RFC 8785 reference
//! crate, both of its paths, and the planner's JSON writer against serde_json's, on any
//! JSON value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    assert_eq!(fleet_guest::fuzzing::written(&value), serde_json::to_vec(&value).unwrap(), "written");
    let Ok(reference) = serde_json_canonicalizer::to_string(&value) else { return };
    assert_eq!(String::from_utf8(fleet_guest::fuzzing::sorted(&value)).unwrap(), reference, "sorted path");
    if let Some(streamed) = fleet_guest::fuzzing::streamed(&value) {
        assert_eq!(String::from_utf8(streamed).unwrap(), reference, "streamed path");
    }
    let expected = format!("sha256:{}", data_encoding::HEXLOWER.encode(&Sha256::digest(reference.as_bytes())));
    assert_eq!(fleet_guest::fuzzing::plan_hash(&value).unwrap(), expected);
});

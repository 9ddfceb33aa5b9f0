//! What the fuzz targets in `fuzz/` reach inside the planner (feature `fuzzing` only):
//! the two paths of the canonical-JSON writer behind the plan hash.

use crate::Error;

/// The plan hash of `value`, by whichever path the planner takes for it.
pub fn plan_hash(value: &serde_json::Value) -> Result<String, Error> {
    crate::hash::plan_hash(value)
}

/// The streamed canonical JSON of `value`, when it is canonical as written.
pub fn streamed(value: &serde_json::Value) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    matches!(crate::hash::write_if_canonical(value, &mut out), Ok(true)).then_some(out)
}

/// The canonical JSON of `value` through the sorted tree.
pub fn sorted(value: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::new();
    crate::hash::canonical(value, &mut out).expect("writing to a Vec cannot fail");
    out
}

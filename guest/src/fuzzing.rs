//! What the fuzz targets in `fuzz/` reach inside the planner (feature `fuzzing` only):
//! the JSON writer, the two paths of the canonical JSON behind the plan hash, and the
//! two readers of a plan request.

use crate::error::Error;

/// The plan hash of `value`, by whichever path the planner takes for it.
pub fn plan_hash(value: &serde_json::Value) -> Result<String, Error> {
    crate::hash::plan_hash(value, None)
}

/// Whether the fast reader of valid plan requests reads `request` as the reader that
/// reports every problem does, whenever it reads it at all.
pub fn streamed_request_agrees(request: &str) -> bool {
    crate::document::streamed_agrees(request)
}

/// The streamed canonical JSON of `value`, when it is canonical as written.
pub fn streamed(value: &serde_json::Value) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    matches!(crate::json::writer::to_writer_if_canonical(&mut out, value), Ok(true)).then_some(out)
}

/// `value` as the planner writes every result (serde_json's compact text, it claims).
pub fn written(value: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::new();
    crate::json::writer::to_writer(&mut out, value).expect("writing to a Vec cannot fail");
    out
}

/// The canonical JSON of `value` through the sorted tree.
pub fn sorted(value: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::new();
    crate::hash::canonical(value, &mut out).expect("writing to a Vec cannot fail");
    out
}

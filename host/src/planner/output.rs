//! A planner call's result, as the guest wrote it.

use crate::api::ApiError;

/// A call's result as the chunks the guest wrote, each kept as the binding handed it
/// over: joined once at the end, at its final size, rather than copied into a buffer
/// that is copied again each time it doubles (a 1M-object plan's is 718 MB).
#[derive(Default)]
pub(crate) struct Output {
    chunks: Vec<Vec<u8>>,
    len: usize,
}

impl Output {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn push(&mut self, chunk: Vec<u8>) {
        self.len += chunk.len();
        self.chunks.push(chunk);
    }

    /// The result whole: a result of one chunk (any small call's) is that chunk, with
    /// no copy.
    pub(super) fn into_bytes(mut self) -> Vec<u8> {
        if self.chunks.len() == 1 {
            return self.chunks.pop().unwrap_or_default();
        }
        let mut bytes = Vec::with_capacity(self.len);
        // Each chunk is freed once copied, so that the result is not held twice.
        for chunk in self.chunks {
            bytes.extend_from_slice(&chunk);
        }
        bytes
    }
}

/// What the guest wrote, if it is JSON text: the host trusts no guest.
pub(super) fn checked_output(output: Output) -> Result<String, ApiError> {
    let output = String::from_utf8(output.into_bytes())
        .map_err(|error| ApiError::internal(format_args!("the planner wrote text that is not UTF-8: {error}")))?;
    match serde_json::from_str::<serde::de::IgnoredAny>(&output) {
        Ok(_) => Ok(output),
        Err(error) => Err(ApiError::internal(format_args!("the planner returned invalid JSON: {error}"))),
    }
}

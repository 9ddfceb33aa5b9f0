//! The envelope: the state encoding and a JSON header of what it leaves out, in one body
//! for another host of the planner (the edge, SPEC §11).

/// The state in one body for another host of the planner (the edge, SPEC §11): a JSON
/// header of what the state encoding leaves out (`{"caller", "plugins"}`), then the
/// encoding. The header's length comes first, 4 bytes little-endian.
pub fn envelope(header: &str, encoding: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 + header.len() + encoding.len());
    body.extend_from_slice(&(header.len() as u32).to_le_bytes());
    body.extend_from_slice(header.as_bytes());
    body.extend_from_slice(encoding);
    body
}

/// The header and the encoding of an [`envelope`], or why it is not one.
pub fn open_envelope(body: &[u8]) -> Result<(&str, &[u8]), String> {
    let (length, rest) = body.split_first_chunk::<4>().ok_or("shorter than its header's length")?;
    let length = u32::from_le_bytes(*length) as usize;
    if rest.len() < length {
        return Err(format!("its header of {length} bytes is cut short"));
    }
    let (header, encoding) = rest.split_at(length);
    let header = std::str::from_utf8(header).map_err(|_| "its header is not UTF-8")?;
    Ok((header, encoding))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_opens_to_what_was_put_in_and_a_cut_one_says_so() {
        let body = envelope(r#"{"caller": {}}"#, &[2, 0, 1]);
        assert_eq!(open_envelope(&body), Ok((r#"{"caller": {}}"#, [2, 0, 1].as_slice())));
        assert!(open_envelope(&body[..10]).unwrap_err().contains("cut short"));
        assert!(open_envelope(&body[..3]).is_err());
    }
}

//! JSON strings out, with serde_json's escapes (which are also RFC 8785's): every
//! string of every result and of the plan hash's input is written here.
//!
//! serde_json looks up every byte of every string in an escape table, one at a time,
//! and its `Formatter` has no hook before that loop; in the sandbox it was a quarter of
//! a create's instructions (each string is written twice: the result and the hash's
//! input). Here strings are searched for what needs escaping and copied eight bytes at
//! a time.

use std::io::{self, Write};

/// Writes `text` as a JSON string, with serde_json's escapes (which are also JCS's):
/// `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u00xx` for the other control characters
/// below U+0020, and nothing else escaped.
pub(crate) fn string(sink: &mut impl Write, text: &str) -> io::Result<()> {
    let mut out = Vec::with_capacity(text.len() + 2);
    push_string(&mut out, text);
    sink.write_all(&out)
}

/// Appends `text` as a JSON string (see [`string`]).
pub(crate) fn push_string(out: &mut Vec<u8>, text: &str) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    push_contents(out, text.as_bytes());
    out.push(b'"');
}

/// Appends the string contents of `text` (UTF-8), escaped. Each word is searched and,
/// clean, copied as one eight-byte store, the last few bytes too (padded, the padding
/// dropped again): a copy of a length only known when it runs is a call to `memcpy`,
/// which in the sandbox is a call out of the guest (`memory.copy`), and a byte at a time
/// costs more than a word; most strings in a plan are a word or two long.
pub(crate) fn push_contents(out: &mut Vec<u8>, text: &[u8]) {
    let (words, rest) = text.as_chunks::<8>();
    for (index, word) in words.iter().enumerate() {
        if let Some(offset) = flagged(u64::from_le_bytes(*word)) {
            return push_escaped(out, &text[index * 8..], offset);
        }
        out.extend_from_slice(word);
    }
    if rest.is_empty() {
        return;
    }
    // The last few bytes, as the low bytes of a word whose others are spaces (which no
    // string escapes).
    let shift = 8 * rest.len() as u32;
    let last = match text.last_chunk::<8>() {
        // The word that ends the string, which begins with bytes already appended.
        Some(ending) => u64::from_le_bytes(*ending) >> (64 - shift),
        None => rest.iter().rev().fold(0, |word, &byte| word << 8 | u64::from(byte)),
    };
    let padded = last | (ONES * u64::from(b' ')) << shift;
    if let Some(offset) = flagged(padded) {
        return push_escaped(out, rest, offset);
    }
    out.extend_from_slice(&padded.to_le_bytes());
    out.truncate(out.len() - (8 - rest.len()));
}

/// Appends `text`, whose first escaped byte is at `at`, escaped: rare in a plan, so
/// apart from the common path.
#[cold]
#[inline(never)]
fn push_escaped(out: &mut Vec<u8>, text: &[u8], at: usize) {
    let (clean, mut rest) = text.split_at(at);
    out.extend_from_slice(clean);
    while let Some((&byte, after)) = rest.split_first() {
        push_escape(out, byte);
        let clean = after.iter().position(|&byte| byte < 0x20 || byte == b'"' || byte == b'\\');
        let (run, next) = after.split_at(clean.unwrap_or(after.len()));
        out.extend_from_slice(run);
        rest = next;
    }
}

const ONES: u64 = u64::from_le_bytes([0x01; 8]);
const HIGHS: u64 = ONES * 0x80;

/// The position of the first byte of `word` (eight bytes, little-endian) that a JSON
/// string escapes: a control character below U+0020, `"` or `\\`. A byte below 0x20
/// borrows when 0x20 is taken from it, a byte equal to `"` is zero once `"` is xored
/// out, and the lowest byte so flagged is always one of them (a borrow only carries
/// upwards).
#[inline(always)]
fn flagged(word: u64) -> Option<usize> {
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let zero = |word: u64| word.wrapping_sub(ONES) & !word;
    let found = (control | zero(quote) | zero(backslash)) & HIGHS;
    (found != 0).then(|| found.trailing_zeros() as usize / 8)
}

/// Appends the escape of one byte that is escaped.
fn push_escape(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x0c => b'f',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        _ => {
            let unicode = [b'\\', b'u', b'0', b'0', HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]];
            return out.extend_from_slice(&unicode);
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte at every position of a word is flagged when JSON escapes it (a later
    /// escaped byte, or a byte just above one, does not hide it), and no other.
    #[test]
    fn the_word_search_finds_the_first_escaped_byte() {
        let escaped = |byte: u8| byte < 0x20 || byte == b'"' || byte == b'\\';
        for position in 0..8 {
            for byte in 0..=255u8 {
                for later in [b'a', b'"', 0x00, 0x20, 0xff] {
                    let mut word = [b'a'; 8];
                    word[position] = byte;
                    word[(position + 1).min(7)..].fill(later);
                    let expected = word.iter().position(|&byte| escaped(byte));
                    assert_eq!(flagged(u64::from_le_bytes(word)), expected, "{word:?}");
                }
            }
        }
    }

    /// Strings of every length around a few words, with one character of every kind at
    /// every position and a quote after it, are written as serde_json writes them.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let characters = (0..=0x7f_u8).map(char::from).chain(['é', '\u{80}', '\u{2028}', '\u{ffff}', '😀']);
        for character in characters {
            for length in 0..20 {
                for position in 0..length {
                    let mut text: Vec<char> = vec!['a'; length];
                    text[position] = character;
                    if position + 2 < length {
                        text[position + 2] = '"';
                    }
                    let text: String = text.into_iter().collect();
                    let mut ours = Vec::new();
                    push_string(&mut ours, &text);
                    assert_eq!(String::from_utf8(ours).unwrap(), serde_json::to_string(&text).unwrap());
                }
            }
        }
    }
}

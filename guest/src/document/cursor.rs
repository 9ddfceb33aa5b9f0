//! JSON text taken apart token by token, for the fast reader (`streamed.rs`): a cursor
//! that reads the structure it expects next and answers `None` to anything else.
//!
//! It reads what a valid request mostly holds, plain strings and counts, itself, eight
//! bytes of a string at a time; what it does not (a string with an escape, a number
//! with a sign, fraction or exponent, a value read whole) it hands to serde_json as the
//! text of that one token, so that what is read is what serde_json reads. serde_json
//! looked at every byte of a string on its own in the component, where a word is four
//! bytes wide: reading a request took a fifth of the component's instructions.
//!
//! Every string it hands over, key or value, is free of control characters (SPEC §2):
//! the one that has one is, like any other problem, `None`.

use std::borrow::Cow;

use crate::json::{MAX_COUNT, has_control};

pub(super) struct Cursor<'t> {
    text: &'t str,
    at: usize,
}

/// Eight bytes of text as one word, the first in its lowest byte.
const ONES: u64 = u64::from_le_bytes([0x01; 8]);
const HIGH_BITS: u64 = ONES * 0x80;

/// The high bit of each byte of `word` that is zero, exact up to the first such byte
/// (a borrow may mark bytes after it).
const fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(ONES) & !word & HIGH_BITS
}

/// The high bit of the first byte of `word` that ends a string's run of printable ASCII
/// (a quote, a backslash, a control character or any byte from 0x7F), if there is one.
const fn run_ends(word: u64) -> u64 {
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGH_BITS;
    // Adding one to the low seven bits carries into the eighth from 0x7F up, never
    // across bytes.
    let from_delete = (((word & !HIGH_BITS) + ONES) | word) & HIGH_BITS;
    below_space | from_delete | zero_bytes(word ^ (ONES * b'"' as u64)) | zero_bytes(word ^ (ONES * b'\\' as u64))
}

const fn ends_run(byte: u8) -> bool {
    byte < 0x20 || byte >= 0x7F || byte == b'"' || byte == b'\\'
}

impl<'t> Cursor<'t> {
    pub(super) fn new(text: &'t str) -> Cursor<'t> {
        Cursor { text, at: 0 }
    }

    fn bytes(&self) -> &'t [u8] {
        self.text.as_bytes()
    }

    /// The next byte that is not whitespace, not consumed.
    pub(super) fn peek(&mut self) -> Option<u8> {
        let bytes = self.bytes();
        while let Some(&byte) = bytes.get(self.at) {
            if !matches!(byte, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(byte);
            }
            self.at += 1;
        }
        None
    }

    /// The next byte that is not whitespace, consumed.
    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn expect(&mut self, expected: u8) -> Option<()> {
        (self.next()? == expected).then_some(())
    }

    /// Nothing but whitespace is left.
    pub(super) fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// An object: `member` reads each member in turn, its key included.
    pub(super) fn members(&mut self, mut member: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            member(self)?;
            match self.next()? {
                b',' => {}
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// An object: `member` reads the value of each key in turn.
    pub(super) fn object(&mut self, mut member: impl FnMut(&mut Self, Cow<'t, str>) -> Option<()>) -> Option<()> {
        self.members(|cursor| {
            let key = cursor.key()?;
            member(cursor, key)
        })
    }

    /// A member's key, and the colon after it.
    pub(super) fn key(&mut self) -> Option<Cow<'t, str>> {
        let key = self.string()?;
        self.expect(b':')?;
        Some(key)
    }

    /// Whether the next member's key is `name` (which has no quote, backslash or control
    /// character), written without escapes and followed by its colon; if it is, both are
    /// read, and otherwise nothing is.
    pub(super) fn key_is(&mut self, name: &str) -> bool {
        if self.peek() != Some(b'"') {
            return false;
        }
        let (start, after) = (self.at, self.at + 1 + name.len());
        let bytes = self.bytes();
        if bytes.get(start + 1..after) != Some(name.as_bytes()) || bytes.get(after) != Some(&b'"') {
            return false;
        }
        self.at = after + 1;
        if self.expect(b':').is_none() {
            self.at = start;
            return false;
        }
        true
    }

    /// A string without a control character, borrowed from the text unless it had an
    /// escape.
    pub(super) fn string(&mut self) -> Option<Cow<'t, str>> {
        self.expect(b'"')?;
        let (text, bytes) = (self.text, self.bytes());
        let start = self.at;
        loop {
            self.at = Self::run_end(bytes, self.at);
            match *bytes.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(Cow::Borrowed(&text[start..self.at - 1]));
                }
                b'\\' => return self.escaped(start - 1),
                byte if byte < 0x80 => return None,
                // A character beyond ASCII: the cursor is at its first byte.
                _ => {
                    let character = text[self.at..].chars().next()?;
                    if character.is_control() {
                        return None;
                    }
                    self.at += character.len_utf8();
                }
            }
        }
    }

    /// Where the run of printable ASCII from `at` ends.
    fn run_end(bytes: &[u8], mut at: usize) -> usize {
        while let Some(word) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
            let ends = run_ends(u64::from_le_bytes(*word));
            if ends != 0 {
                return at + (ends.trailing_zeros() / 8) as usize;
            }
            at += 8;
        }
        while bytes.get(at).is_some_and(|&byte| !ends_run(byte)) {
            at += 1;
        }
        at
    }

    /// The string whose quote is at `quote`, which has an escape: decoded by serde_json.
    fn escaped(&mut self, quote: usize) -> Option<Cow<'t, str>> {
        self.at = quote;
        let token = self.skip_string()?;
        let decoded: String = serde_json::from_str(token).ok()?;
        (!has_control(&decoded)).then_some(Cow::Owned(decoded))
    }

    /// The text of the string at the cursor, quotes and escapes as written: not checked
    /// beyond where it ends.
    fn skip_string(&mut self) -> Option<&'t str> {
        let (text, bytes) = (self.text, self.bytes());
        let start = self.at;
        self.at += 1;
        loop {
            match *bytes.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(&text[start..self.at]);
                }
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
    }

    /// A number that is a count (SPEC §4). Digits alone are read here; a number with a
    /// sign, a fraction or an exponent is read by serde_json, as the reporting reader
    /// reads it (`3.0` and `3e2` are counts).
    pub(super) fn count(&mut self) -> Option<u64> {
        self.peek()?;
        let bytes = self.bytes();
        let start = self.at;
        while bytes.get(self.at).is_some_and(|byte| matches!(byte, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')) {
            self.at += 1;
        }
        let token = &bytes[start..self.at];
        // Up to 16 digits, the first not a zero unless it is the only one (a leading zero
        // is not JSON); 2^53 − 1 has 16.
        let plain = (1..=16).contains(&token.len())
            && token.iter().all(u8::is_ascii_digit)
            && (token[0] != b'0' || token.len() == 1);
        if plain {
            let count = token.iter().fold(0, |count, digit| count * 10 + u64::from(digit - b'0'));
            return (count <= MAX_COUNT).then_some(count);
        }
        let number: serde_json::Number = serde_json::from_str(&self.text[start..self.at]).ok()?;
        crate::json::count_of_number(&number)
    }

    /// `true` or `false`.
    pub(super) fn bool(&mut self) -> Option<bool> {
        self.peek()?;
        let rest = &self.bytes()[self.at..];
        let (flag, length) = if rest.starts_with(b"true") {
            (true, 4)
        } else if rest.starts_with(b"false") {
            (false, 5)
        } else {
            return None;
        };
        self.at += length;
        Some(flag)
    }

    /// The text of the next value, whatever it is, found by its brackets and quotes but
    /// not checked: the caller reads it with serde_json, which checks it. `None` for a
    /// value nested deeper than `depth`.
    pub(super) fn value(&mut self, depth: usize) -> Option<&'t str> {
        self.peek()?;
        let bytes = self.bytes();
        let start = self.at;
        let mut open = 0;
        while let Some(&byte) = bytes.get(self.at) {
            match byte {
                b'"' => {
                    self.skip_string()?;
                }
                b'{' | b'[' if open == depth => return None,
                b'{' | b'[' => {
                    open += 1;
                    self.at += 1;
                }
                b'}' | b']' if open > 0 => {
                    open -= 1;
                    self.at += 1;
                }
                b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t' if open == 0 => break,
                _ => self.at += 1,
            }
            if open == 0 && matches!(byte, b'"' | b'}' | b']') {
                break;
            }
        }
        (self.at > start).then(|| &self.text[start..self.at])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(text: &str) -> Option<Cow<'_, str>> {
        let mut cursor = Cursor::new(text);
        let read = cursor.string()?;
        cursor.end()?;
        Some(read)
    }

    /// Strings of every length around a word, with the byte that ends a run at every
    /// position, read as serde_json reads them, control characters refused.
    #[test]
    fn strings_read_as_serde_json_reads_them() {
        let specials =
            ["\"", "\\", "\\n", "\\u0041", "\\u0007", "\u{7f}", "\u{85}", "é", "€", "\u{1f600}", "\t", "\u{1}"];
        for length in 0..20 {
            for special in specials {
                for at in 0..=length {
                    let inner: String = (0..length).map(|index| if index == at { special } else { "a" }).collect();
                    let text = format!("\"{inner}\"");
                    let expected = serde_json::from_str::<String>(&text).ok().filter(|read| !has_control(read));
                    assert_eq!(string(&text).map(Cow::into_owned), expected, "{text:?}");
                }
            }
        }
        assert!(matches!(string(r#""plain""#), Some(Cow::Borrowed("plain"))));
        assert_eq!(string(r#""unterminated"#), None);
        assert_eq!(string(r#""a\"#), None);
    }

    fn count(text: &str) -> Option<u64> {
        let mut cursor = Cursor::new(text);
        let read = cursor.count()?;
        cursor.end()?;
        Some(read)
    }

    #[test]
    fn counts_read_as_the_reporting_reader_reads_them() {
        for text in [
            "0",
            "7",
            "64",
            "007",
            "01",
            "-0",
            "-1",
            "1.5",
            "64.0",
            "3e2",
            "3E+2",
            "1e-1",
            "1.",
            ".5",
            "-",
            "+1",
            "1e",
            "9007199254740991",
            "9007199254740992",
            "18446744073709551616",
            "99999999999999999999999",
            "1-2",
        ] {
            let expected = serde_json::from_str::<serde_json::Value>(text).ok().as_ref().and_then(crate::json::count);
            assert_eq!(count(text), expected, "{text}");
        }
        assert_eq!(count("9007199254740991"), Some(MAX_COUNT));
    }

    #[test]
    fn a_key_without_its_colon_is_not_read() {
        let mut cursor = Cursor::new(r#" "gpus", "diskGib": 100"#);
        assert!(!cursor.key_is("gpus"));
        assert!(!cursor.key_is("diskGib"), "the cursor moved past the key it did not read");
        assert_eq!(cursor.key(), None);
        let mut cursor = Cursor::new(r#" "gpus" : 1"#);
        assert!(!cursor.key_is("gpu"));
        assert!(cursor.key_is("gpus"));
        assert_eq!(cursor.count(), Some(1));
    }

    #[test]
    fn bools_are_whole_literals() {
        let read = |text| {
            let mut cursor = Cursor::new(text);
            cursor.bool().filter(|_| cursor.end().is_some())
        };
        assert_eq!(read("true"), Some(true));
        assert_eq!(read(" false "), Some(false));
        assert_eq!(read("truex"), None);
        assert_eq!(read("tru"), None);
        assert_eq!(read("null"), None);
    }

    /// A value's text ends where its brackets close, and the value after it is read.
    #[test]
    fn values_are_found_by_their_brackets_and_quotes() {
        let read = |text| {
            let mut cursor = Cursor::new(text);
            let mut values = Vec::new();
            cursor.object(|cursor, key| {
                values.push((key.into_owned(), cursor.value(2)?.to_owned()));
                Some(())
            })?;
            cursor.end()?;
            Some(values)
        };
        let pairs = |pairs: &[(&str, &str)]| {
            Some(pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect::<Vec<_>>())
        };
        assert_eq!(
            read(r#"{"a": [{"b": "}]"}], "c" : true ,"d":-1.5e3,"e":"x\"]"}"#),
            pairs(&[("a", r#"[{"b": "}]"}]"#), ("c", "true"), ("d", "-1.5e3"), ("e", r#""x\"]""#)])
        );
        assert_eq!(read("{}"), pairs(&[]));
        assert_eq!(read(r#"{"a": [[[1]]]}"#), None, "deeper than asked");
        assert_eq!(read(r#"{"a": }"#), None);
        assert_eq!(read(r#"{"a": 1,}"#), None);
        assert_eq!(read(r#"{"a": 1"#), None);
        assert_eq!(read(r#"{"a" 1}"#), None);
    }
}

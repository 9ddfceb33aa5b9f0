//! Whether a value is canonical JSON (RFC 8785, JCS) as it stands, checked while the
//! writer writes it (`writer.rs`): its members in order, its numbers written as JCS
//! writes them. The member order check compares most names as one number.

/// What the serializer checks as it writes: nothing, or that the value is canonical.
pub(crate) trait Check {
    fn begin_object(&mut self);
    fn end_object(&mut self);
    /// The name of the next member of the innermost open object.
    fn name(&mut self, name: &str, first: bool) -> Result<(), NotCanonical>;
    /// An integer of this magnitude is written.
    fn integer(&mut self, magnitude: u128) -> Result<(), NotCanonical>;
    /// A number with a fraction (any float) is written.
    fn fraction(&mut self) -> Result<(), NotCanonical>;
}

/// The value is not canonical JSON as it stands.
pub(crate) struct NotCanonical;

/// No checks: serde_json's compact output.
pub(crate) struct Plain;

impl Check for Plain {
    #[inline(always)]
    fn begin_object(&mut self) {}
    #[inline(always)]
    fn end_object(&mut self) {}
    #[inline(always)]
    fn name(&mut self, _name: &str, _first: bool) -> Result<(), NotCanonical> {
        Ok(())
    }
    #[inline(always)]
    fn integer(&mut self, _magnitude: u128) -> Result<(), NotCanonical> {
        Ok(())
    }
    #[inline(always)]
    fn fraction(&mut self) -> Result<(), NotCanonical> {
        Ok(())
    }
}

/// serde_json's compact output is JCS for strings and integers; what JCS adds is member
/// order by UTF-16 code units and ECMAScript number formatting, which only fractions
/// and integers past 2^53 need. This check stops at the first member out of order and
/// at any such number.
#[derive(Default)]
pub(crate) struct Canonical {
    /// Per open object, outermost first: the name of its last member so far.
    previous: Vec<Name>,
    depth: usize,
}

/// Whether an integer of this magnitude is written by JCS as serde_json writes it: up to
/// 2^53 integers are exact as IEEE doubles, which is how JCS reads every number; larger
/// ones are written as their nearest double (found by the fuzzer).
pub(crate) fn is_exact(magnitude: u128) -> bool {
    magnitude <= 1 << 53
}

impl Check for Canonical {
    fn begin_object(&mut self) {
        self.depth += 1;
        if self.previous.len() < self.depth {
            self.previous.push(Name::default());
        }
    }

    fn end_object(&mut self) {
        self.depth -= 1;
    }

    fn name(&mut self, name: &str, first: bool) -> Result<(), NotCanonical> {
        let previous = &mut self.previous[self.depth - 1];
        let (name, head) = (name.as_bytes(), Name::head(name.as_bytes()));
        if !first && !previous.less(name, head) {
            return Err(NotCanonical);
        }
        previous.set(name, head);
        Ok(())
    }

    fn integer(&mut self, magnitude: u128) -> Result<(), NotCanonical> {
        if is_exact(magnitude) { Ok(()) } else { Err(NotCanonical) }
    }

    fn fraction(&mut self) -> Result<(), NotCanonical> {
        Err(NotCanonical)
    }
}

/// A member's name as the order check keeps it: its first eight bytes as one big-endian
/// word (zeros after a shorter name), so that most names compare as one number, and the
/// bytes after them, copied only for longer names.
#[derive(Default)]
struct Name {
    head: u64,
    length: usize,
    tail: Vec<u8>,
}

impl Name {
    fn head(name: &[u8]) -> u64 {
        match name.first_chunk::<8>() {
            Some(head) => u64::from_be_bytes(*head),
            // Zero bytes after the name; none is a shift by 64, and zero.
            None => {
                let word = name.iter().fold(0, |word: u64, &byte| word << 8 | u64::from(byte));
                word.checked_shl(64 - 8 * name.len() as u32).unwrap_or(0)
            }
        }
    }

    fn set(&mut self, name: &[u8], head: u64) {
        self.head = head;
        self.length = name.len();
        self.tail.clear();
        if let Some(tail) = name.get(8..) {
            self.tail.extend_from_slice(tail);
        }
    }

    /// Whether this name sorts before `name`, whose [`Name::head`] is `head`, as
    /// [`utf16_less`] says. Where the heads differ, a padding zero sorts first as the end
    /// of a shorter name does; where they are equal, a name of eight bytes or fewer is a
    /// beginning of the other or the same.
    fn less(&self, name: &[u8], head: u64) -> bool {
        if self.head != head {
            let shift = 56 - (self.head ^ head).leading_zeros() / 8 * 8;
            return byte_less((self.head >> shift) as u8, (head >> shift) as u8);
        }
        if self.length <= 8 && name.len() <= 8 {
            return self.length < name.len();
        }
        utf16_less(&self.tail, name.get(8..).unwrap_or_default())
    }
}

/// Whether `left` sorts before `right` by UTF-16 code units, as JCS orders names. Their
/// UTF-8 bytes sort the same way, except where the first characters that differ are one
/// above U+FFFF (a surrogate pair in UTF-16, lead byte F0–F4) and one in U+E000–U+FFFF
/// (lead byte EE or EF): there the surrogate sorts first.
fn utf16_less(left: &[u8], right: &[u8]) -> bool {
    let at = mismatch(left, right);
    match (left.get(at), right.get(at)) {
        (Some(&one), Some(&other)) => byte_less(one, other),
        (left, right) => left.is_none() && right.is_some(),
    }
}

/// Whether a name whose first differing byte is `left` sorts before one whose is `right`
/// (see [`utf16_less`]).
fn byte_less(left: u8, right: u8) -> bool {
    if left >= 0xee && right >= 0xee && (left >= 0xf0) != (right >= 0xf0) { left >= 0xf0 } else { left < right }
}

/// The position of the first byte at which `left` and `right` differ, or the length of
/// the shorter when one begins the other; eight bytes at a time.
fn mismatch(left: &[u8], right: &[u8]) -> usize {
    let (left_words, right_words) = (left.as_chunks::<8>().0, right.as_chunks::<8>().0);
    for (index, (one, other)) in left_words.iter().zip(right_words).enumerate() {
        let differ = u64::from_le_bytes(*one) ^ u64::from_le_bytes(*other);
        if differ != 0 {
            return index * 8 + differ.trailing_zeros() as usize / 8;
        }
    }
    let start = left_words.len().min(right_words.len()) * 8;
    let rest = left[start..].iter().zip(&right[start..]).position(|(one, other)| one != other);
    start + rest.unwrap_or(left.len().min(right.len()) - start)
}
#[cfg(test)]
mod tests {
    use super::*;

    /// Names sort as their UTF-16 code units do, wherever they first differ.
    #[test]
    fn names_sort_by_utf16_code_units() {
        let names = [
            "",
            "a",
            "ab",
            "abcdefgh",
            "abcdefghi",
            "abcdefgz",
            "b",
            "é",
            "\u{e000}",
            "\u{ffff}",
            "\u{1f600}",
            "\u{10000}",
            "\u{d7ff}",
            "abcdefgh\u{e000}",
            "abcdefgh\u{1f600}",
            "x\u{e000}y",
            "x\u{1f600}",
        ];
        for left in names {
            for right in names {
                let expected = left.encode_utf16().lt(right.encode_utf16());
                assert_eq!(utf16_less(left.as_bytes(), right.as_bytes()), expected, "{left:?} < {right:?}");
                let mut previous = Name::default();
                previous.set(left.as_bytes(), Name::head(left.as_bytes()));
                let (right, head) = (right.as_bytes(), Name::head(right.as_bytes()));
                assert_eq!(previous.less(right, head), expected, "{left:?} < {right:?} by heads");
            }
        }
    }
}

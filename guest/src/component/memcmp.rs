//! `memcmp` and `bcmp` for the component, eight bytes at a time.
//!
//! On `wasm32-unknown-unknown` these come from the compiler's builtins, which compare
//! one byte per loop iteration. The planner compares strings everywhere (ordered maps of
//! keys and ids that share long prefixes), and that loop was a tenth of a large plan's
//! time in the profile. The definitions here take the place of the builtins' weak ones.

/// Compares two byte strings of the same length as unsigned bytes: negative, zero or
/// positive, like C's `memcmp`. It must not compare slices with `==` or `cmp`: those
/// call `memcmp`.
fn compare(left: &[u8], right: &[u8]) -> i32 {
    let mut left_words = left.chunks_exact(8);
    let mut right_words = right.chunks_exact(8);
    for (a, b) in left_words.by_ref().zip(right_words.by_ref()) {
        // Big-endian, the first byte is the most significant, as in a byte-wise compare.
        let a = u64::from_be_bytes([a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]);
        let b = u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        if a != b {
            return if a < b { -1 } else { 1 };
        }
    }
    for (a, b) in left_words.remainder().iter().zip(right_words.remainder()) {
        if a != b {
            return i32::from(*a) - i32::from(*b);
        }
    }
    0
}

/// C's `memcmp`.
///
/// # Safety
/// Both pointers must be valid for reads of `len` bytes.
#[cfg(all(target_arch = "wasm32", feature = "component"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(left: *const u8, right: *const u8, len: usize) -> i32 {
    // SAFETY: the caller vouches for `len` readable bytes at each pointer.
    let (left, right) = unsafe { (core::slice::from_raw_parts(left, len), core::slice::from_raw_parts(right, len)) };
    compare(left, right)
}

/// C's `bcmp`: zero when the bytes are equal.
///
/// # Safety
/// Both pointers must be valid for reads of `len` bytes.
#[cfg(all(target_arch = "wasm32", feature = "component"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(left: *const u8, right: *const u8, len: usize) -> i32 {
    // SAFETY: as the caller promised.
    unsafe { memcmp(left, right, len) }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::compare;

    fn expected(left: &[u8], right: &[u8]) -> i32 {
        left.cmp(right) as i32
    }

    #[test]
    fn first_difference_decides_as_unsigned_bytes() {
        assert_eq!(compare(b"", b""), 0);
        assert_eq!(compare(b"pool-0001", b"pool-0001"), 0);
        assert!(compare(b"pool-0001-a", b"pool-0002-a") < 0);
        assert!(compare(b"pool-0000-b", b"pool-0000-a") > 0, "a difference in the tail");
        assert!(compare(&[0x80; 9], &[0x7f; 9]) > 0, "bytes are unsigned");
        assert!(compare(&[1, 0, 0, 0, 0, 0, 0, 0], &[0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]) > 0);
    }

    proptest! {
        #[test]
        fn agrees_with_slice_order(left in proptest::collection::vec(0u8..4, 0..40), right in proptest::collection::vec(0u8..4, 0..40)) {
            let len = left.len().min(right.len());
            let (left, right) = (&left[..len], &right[..len]);
            prop_assert_eq!(compare(left, right).signum(), expected(left, right));
        }
    }
}

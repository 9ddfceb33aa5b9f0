//! The grammar of names and ids (SPEC §2, §4), as checks and as the ECMA-262 patterns
//! that schemas print: one statement that the planner, the host's request reader and
//! its OpenAPI document all use. JSON pointers are in [`crate::json::pointer`].

/// Names of objects, owners, providers, classes, tenants and API groups.
pub const NAME_PATTERN: &str = "^[a-z][a-z0-9-]{0,62}$";

/// Strings hold no control characters (SPEC §2).
pub const TEXT_PATTERN: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";

/// A request's id (SPEC §2): 1–128 visible ASCII characters.
pub const REQUEST_ID_PATTERN: &str = "^[!-~]{1,128}$";

/// Whether `id` matches [`REQUEST_ID_PATTERN`]: a client's own request id is kept, by
/// the origin and the edge alike, only then.
pub fn is_request_id(id: &[u8]) -> bool {
    (1..=128).contains(&id.len()) && id.iter().all(|byte| matches!(byte, b'!'..=b'~'))
}

/// Whether `text` matches [`NAME_PATTERN`].
pub fn is_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    match bytes.split_first() {
        Some((first, rest)) => {
            first.is_ascii_lowercase()
                && rest.len() <= 62
                && rest.iter().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || *byte == b'-')
        }
        None => false,
    }
}

/// The longest client text a message quotes whole; a longer one is quoted by its first
/// [`QUOTED_PREFIX`] characters and its length, so that an error never echoes a huge
/// value back (an `owner` of 100,000 characters once made a 200 KB answer).
const QUOTED_WHOLE: usize = 64;
const QUOTED_PREFIX: usize = 32;

/// A client's text as messages quote it: `"gpu-a"`, or `"aaaa…" (100000 characters)`.
pub fn quoted(text: &str) -> String {
    let length = text.chars().count();
    if length <= QUOTED_WHOLE {
        return format!("{text:?}");
    }
    let prefix: String = text.chars().take(QUOTED_PREFIX).collect();
    let quoted = format!("{prefix:?}");
    format!("{}…\" ({length} characters)", &quoted[..quoted.len() - 1])
}

/// Kinds, FleetConfig sections and field names: camelCase (SPEC §10).
pub const CAMEL_PATTERN: &str = "^[a-z][a-zA-Z0-9]{0,62}$";

/// Id prefixes (SPEC §10).
pub const PREFIX_PATTERN: &str = "^[a-z]{2,8}$";

/// Whether `text` matches [`CAMEL_PATTERN`].
pub fn is_camel(text: &str) -> bool {
    let bytes = text.as_bytes();
    match bytes.split_first() {
        Some((first, rest)) => {
            first.is_ascii_lowercase() && rest.len() <= 62 && rest.iter().all(u8::is_ascii_alphanumeric)
        }
        None => false,
    }
}

/// Whether `text` matches [`PREFIX_PATTERN`].
pub fn is_prefix(text: &str) -> bool {
    (2..=8).contains(&text.len()) && text.bytes().all(|byte| byte.is_ascii_lowercase())
}

/// A camelCase name's words in lowercase, joined by `separator`: `memoryMib` is
/// `memory_mib` as a column and `provider account` for people.
pub fn camel_words(name: &str, separator: char) -> String {
    let mut words = String::with_capacity(name.len() + 4);
    for character in name.chars() {
        if character.is_ascii_uppercase() {
            words.push(separator);
        }
        words.push(character.to_ascii_lowercase());
    }
    words
}

/// Whether `text` is an id of the kind with this prefix: `<prefix>_` + 26 characters
/// of lowercase base32.
pub fn is_id(text: &str, prefix: &str) -> bool {
    text.strip_prefix(prefix).and_then(|rest| rest.strip_prefix('_')).is_some_and(is_id_body)
}

/// The part of an id after `<prefix>_`: 26 characters of lowercase base32.
pub fn is_id_body(body: &str) -> bool {
    body.len() == 26 && body.bytes().all(|byte| byte.is_ascii_lowercase() || (b'2'..=b'7').contains(&byte))
}

/// The pattern of the ids with this prefix.
pub fn id_pattern(prefix: &str) -> String {
    format!("^{prefix}_[a-z2-7]{{26}}$")
}

/// The pattern of a document key (and of a reference to the kind): a name, or an id
/// with this prefix; a name only for kinds without ids.
pub fn key_pattern(prefix: Option<&str>) -> String {
    match prefix {
        Some(prefix) => format!("^([a-z][a-z0-9-]{{0,62}}|{prefix}_[a-z2-7]{{26}})$"),
        None => NAME_PATTERN.to_owned(),
    }
}

/// A fresh id from 16 random bytes: `<prefix>_` + their lowercase unpadded base32.
pub fn id_from(prefix: &str, bytes: &[u8; 16]) -> String {
    format!("{prefix}_{}", data_encoding::BASE32_NOPAD.encode(bytes).to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_pattern() {
        assert!(is_name("a"));
        assert!(is_name("gpu-a1"));
        assert!(is_name(&"a".repeat(63)));
        assert!(!is_name(&"a".repeat(64)));
        assert!(!is_name(""));
        assert!(!is_name("1a"));
        assert!(!is_name("A"));
        assert!(!is_name("a_b"));
    }

    #[test]
    fn ids_have_a_prefix_and_26_base32_characters() {
        let id = id_from("pool", &[7; 16]);
        assert!(is_id(&id, "pool"), "{id}");
        assert!(!is_id(&id, "site"));
        assert!(!is_id("pool_ABCDEFGHIJKLMNOPQRSTUVWXYZ", "pool"));
        assert!(!is_id("pool_abc", "pool"));
        assert!(!is_id("pool_abcdefghijklmnopqrstuvwxy1", "pool"));
        assert!(!is_id("poolabcdefghijklmnopqrstuvwxyz", "pool"));
        assert!(is_id("flv_234567abcdefghijklmnopqrst", "flv"));
    }

    #[test]
    fn long_texts_are_quoted_by_a_prefix_and_their_length() {
        assert_eq!(quoted("gpu-a"), "\"gpu-a\"");
        assert_eq!(quoted(&"a".repeat(64)), format!("{:?}", "a".repeat(64)));
        let long = "é".repeat(100_000);
        assert_eq!(quoted(&long), format!("\"{}…\" (100000 characters)", "é".repeat(32)));
        let control = format!("\u{1}{}", "a".repeat(99));
        assert_eq!(quoted(&control), format!("\"\\u{{1}}{}…\" (100 characters)", "a".repeat(31)), "escaped");
    }
}

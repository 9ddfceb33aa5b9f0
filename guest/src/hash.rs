//! Derivations of SPEC §6.2: planned ids, idempotency keys and the plan hash.

use std::io::{BufWriter, Write};
use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorCode};
use crate::json::canonical::is_exact;
use crate::json::{escape, writer};
use crate::kinds::Descriptor;
use crate::state::Caller;

/// The id of a planned create: `<prefix>_` + the first 16 bytes of
/// `SHA-256("fleet-id\0" + tenant + "\0" + principal + "\0" + kind + "\0" + key)` in
/// lowercase unpadded base32. Owner quotas have no ids.
pub(crate) fn planned_id(caller: &Caller, kind: &Descriptor, key: &str) -> Option<String> {
    planned_id_again(caller, kind, key, None)
}

/// The id of a create whose first derivation is taken (SPEC §15: by an object renamed
/// away from `key`): derived again with `"\0" + n` appended to the hashed string.
pub(crate) fn planned_id_again(caller: &Caller, kind: &Descriptor, key: &str, again: Option<u32>) -> Option<String> {
    let prefix = kind.id_prefix()?;
    let mut hasher = Sha256::new();
    for part in ["fleet-id", caller.tenant.as_str(), caller.principal.as_str(), kind.kind] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    hasher.update(key.as_bytes());
    if let Some(n) = again {
        hasher.update([0]);
        hasher.update(n.to_string().as_bytes());
    }
    let digest = hasher.finalize();
    let encoded = data_encoding::BASE32_NOPAD.encode(&digest[..16]);
    Some(format!("{prefix}_{}", encoded.to_ascii_lowercase()))
}

/// The idempotency key of a create: `fleet:<tenant>:<kind>:<key>`.
pub fn idempotency_key(tenant: &str, kind: &str, key: &str) -> String {
    let mut written = String::new();
    // Writing to a String cannot fail.
    let _ = write_idempotency_key(&mut written, tenant, kind, key);
    written
}

fn write_idempotency_key(out: &mut impl std::fmt::Write, tenant: &str, kind: &str, key: &str) -> std::fmt::Result {
    write!(out, "fleet:{tenant}:{kind}:{key}")
}

/// A planned create's [`idempotency_key`], held as its parts (which the plan shares)
/// and written whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IdempotencyKey {
    pub(crate) tenant: Arc<str>,
    pub(crate) kind: &'static str,
    pub(crate) key: Arc<str>,
}

impl std::fmt::Display for IdempotencyKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_idempotency_key(formatter, &self.tenant, self.kind, &self.key)
    }
}

impl Serialize for IdempotencyKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// `sha256:` + the hex SHA-256 of the RFC 8785 canonical JSON of `value`, computed by
/// the host's `sha256` when there is one ([`crate::host::Host::sha256`]).
pub(crate) fn plan_hash<T: Serialize>(value: &T, sha256: Option<Box<dyn HostSha256>>) -> Result<String, Error> {
    let digest = match sha256 {
        Some(sha256) => canonical_digest(value, BufWriter::with_capacity(HOST_CHUNK, ToHost(sha256)))?,
        None => canonical_digest(value, Sha256::new())?,
    };
    Ok(format!("sha256:{}", data_encoding::HEXLOWER.encode(&digest)))
}

/// The digest of `value`'s canonical JSON.
///
/// A value that serializes its members in canonical order (the plan's does) is streamed
/// straight into the hasher, its order checked on the way; any other value, or one with
/// a fractional number, is hashed through a JSON tree, sorted.
fn canonical_digest<T: Serialize>(value: &T, mut hasher: impl Hasher) -> Result<[u8; 32], Error> {
    if !writer::to_writer_if_canonical(&mut hasher, value).map_err(|error| cannot_hash(&error))? {
        // What the hasher was given is garbage: its digest is let go.
        hasher.finish()?;
        let value = serde_json::to_value(value).map_err(|error| cannot_hash(&error))?;
        canonical(&value, &mut hasher).map_err(|error| cannot_hash(&error))?;
    }
    hasher.finish()
}

fn cannot_hash(error: &dyn std::fmt::Display) -> Error {
    Error::new(ErrorCode::Internal, format!("the plan cannot be hashed: {error}"))
}

/// A SHA-256 the host computes: `wit/`'s `digest` interface, for a host that has the
/// CPU's SHA instructions, which WebAssembly lacks. The digest is the planner's own.
pub trait HostSha256 {
    /// Appends `bytes` to the running digest.
    fn update(&mut self, bytes: &[u8]);
    /// The digest of what the running one was given; the next update starts another.
    fn finish(&mut self) -> Result<[u8; 32], Error>;
}

/// A running SHA-256 that JSON is written to. The serializer writes a plan in pieces of
/// a few bytes, so each kind is a type of its own, its writes inlined.
trait Hasher: Write {
    /// The digest of what the hasher was given; what it is given next starts another.
    fn finish(&mut self) -> Result<[u8; 32], Error>;
}

/// SHA-256 computed here (sha2's hashers are writers).
impl Hasher for Sha256 {
    fn finish(&mut self) -> Result<[u8; 32], Error> {
        Ok(self.finalize_reset().into())
    }
}

/// How much the planner gathers before handing it to the host's SHA-256: each import
/// call has its cost. The streamed JSON comes in pieces of this size already; the
/// sorted path writes a few bytes at a time.
const HOST_CHUNK: usize = writer::CHUNK;

/// The host's SHA-256 as a writer, behind a buffer of [`HOST_CHUNK`].
struct ToHost(Box<dyn HostSha256>);

impl Write for ToHost {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Hasher for BufWriter<ToHost> {
    fn finish(&mut self) -> Result<[u8; 32], Error> {
        self.flush().map_err(|error| cannot_hash(&error))?;
        self.get_mut().0.finish()
    }
}

/// Whether `number` is an integer JCS writes as serde_json does.
fn is_exact_integer(number: &serde_json::Number) -> bool {
    match (number.as_u64(), number.as_i64()) {
        (Some(unsigned), _) => is_exact(unsigned.into()),
        (None, Some(signed)) => is_exact(signed.unsigned_abs().into()),
        (None, None) => false,
    }
}

/// Writes `value` as RFC 8785 (JCS) canonical JSON. Strings and integers are written as
/// serde_json writes them, which is JCS's way too (the same escapes, lowercase
/// `\u00xx`, no other escaping); what JCS adds is member order by UTF-16 code units, and
/// ECMAScript number formatting, which only fractional numbers and integers past 2^53
/// need (documents never hold any; the canonicalizer crate writes them all the same).
pub(crate) fn canonical(value: &serde_json::Value, out: &mut impl std::io::Write) -> std::io::Result<()> {
    use serde_json::Value;
    match value {
        Value::Null => out.write_all(b"null"),
        Value::Bool(flag) => out.write_all(if *flag { b"true" } else { b"false" }),
        Value::String(text) => escape::string(out, text),
        Value::Number(number) if !is_exact_integer(number) => {
            let text = serde_json_canonicalizer::to_string(value).map_err(std::io::Error::other)?;
            out.write_all(text.as_bytes())
        }
        Value::Number(number) => write!(out, "{number}"),
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.write_all(b",")?;
                }
                canonical(item, out)?;
            }
            out.write_all(b"]")
        }
        Value::Object(members) => {
            let mut members: Vec<(&String, &Value)> = members.iter().collect();
            // serde_json's map is ordered by UTF-8 bytes, which is UTF-16 order except
            // where characters above U+FFFF meet U+E000..U+FFFF: sort again only then.
            if members.iter().any(|(key, _)| !key.is_ascii()) {
                members.sort_by(|(left, _), (right, _)| left.encode_utf16().cmp(right.encode_utf16()));
            }
            out.write_all(b"{")?;
            for (index, (key, member)) in members.into_iter().enumerate() {
                if index > 0 {
                    out.write_all(b",")?;
                }
                escape::string(out, key)?;
                out.write_all(b":")?;
                canonical(member, out)?;
            }
            out.write_all(b"}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Caller {
        Caller { tenant: "acme".into(), principal: "alice".into(), grants: None }
    }

    #[test]
    fn planned_ids_have_the_prefix_and_26_base32_characters() {
        let id = planned_id(&alice(), &crate::kinds::POOL, "gpu-a").unwrap();
        assert!(crate::grammar::is_id(&id, "pool"), "{id}");
        assert_eq!(planned_id(&alice(), &crate::kinds::OWNER_QUOTA, "team-ml"), None);
        let bob = Caller { tenant: "acme".into(), principal: "bob".into(), grants: None };
        assert_ne!(planned_id(&bob, &crate::kinds::POOL, "gpu-a"), Some(id.clone()));
        assert_ne!(planned_id(&alice(), &crate::kinds::FLAVOR, "gpu-a"), Some(id));
    }

    #[test]
    fn planned_id_matches_an_independent_derivation() {
        // SHA-256("fleet-id\0acme\0alice\0pool\0gpu-a"), first 16 bytes, base32 by hand.
        let digest = Sha256::digest(b"fleet-id\x00acme\x00alice\x00pool\x00gpu-a");
        let alphabet = b"abcdefghijklmnopqrstuvwxyz234567";
        let mut bits = 0u32;
        let mut count = 0;
        let mut encoded = String::new();
        for byte in &digest[..16] {
            bits = ((bits << 8) | u32::from(*byte)) & 0xffff;
            count += 8;
            while count >= 5 {
                count -= 5;
                encoded.push(alphabet[((bits >> count) & 31) as usize] as char);
            }
        }
        encoded.push(alphabet[((bits << (5 - count)) & 31) as usize] as char);
        assert_eq!(encoded.len(), 26);
        assert_eq!(planned_id(&alice(), &crate::kinds::POOL, "gpu-a").unwrap(), format!("pool_{encoded}"));
    }

    #[test]
    fn idempotency_keys_name_tenant_kind_and_key() {
        assert_eq!(
            idempotency_key(&alice().tenant, crate::kinds::PROVIDER_ACCOUNT.kind, "aws-main"),
            "fleet:acme:providerAccount:aws-main"
        );
    }

    /// Our canonical writer agrees with the RFC 8785 implementation on awkward input:
    /// escapes, non-ASCII and astral keys, nesting, big integers.
    #[test]
    fn canonical_json_agrees_with_the_reference_implementation() {
        let value = serde_json::json!({
            "\u{e000}": 1, "\u{1f600}": 2, "é": [true, null, "\u{7f}\u{1f}\n\"\\/<\u{2028}"],
            "b": {"z": 9007199254740991u64, "a": 0, "": -1}, "a": []
        });
        let mut ours = Vec::new();
        canonical(&value, &mut ours).unwrap();
        assert_eq!(String::from_utf8(ours).unwrap(), serde_json_canonicalizer::to_string(&value).unwrap());
    }

    /// Members written out of order, astral names (whose UTF-8 order is not their UTF-16
    /// order) and fractions all leave the streamed path for the sorted one.
    #[test]
    fn plan_hash_streams_only_what_is_already_canonical() {
        #[derive(Serialize)]
        struct Unordered {
            b: u8,
            a: u8,
        }
        let reference = |value: &serde_json::Value| {
            let text = serde_json_canonicalizer::to_string(value).unwrap();
            let hex: String = Sha256::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect();
            format!("sha256:{hex}")
        };
        let cases = [
            serde_json::to_value(Unordered { b: 1, a: 2 }).unwrap(),
            serde_json::json!({"\u{e000}": 1, "\u{1f600}": 2, "x": {"\u{1f600}": [], "\u{ffff}": 1}}),
            serde_json::json!({"a": 0.5, "b": [1e21, -0.0]}),
            serde_json::json!({"a": -11428180000004281_i64, "b": 9007199254740993_u64}),
            serde_json::json!({"a\"b": 1, "a\nb": 2, "a": {"": {}}}),
        ];
        assert!(!writer::to_writer_if_canonical(Vec::new(), &Unordered { b: 1, a: 2 }).unwrap());
        assert_eq!(plan_hash(&Unordered { b: 1, a: 2 }, None).unwrap(), reference(&cases[0]));
        for (index, value) in cases.iter().enumerate() {
            let mut streamed = Vec::new();
            let canonical = writer::to_writer_if_canonical(&mut streamed, value).unwrap();
            assert_eq!(canonical, index == 0 || index == 4, "{value}");
            if canonical {
                assert_eq!(String::from_utf8(streamed).unwrap(), serde_json_canonicalizer::to_string(value).unwrap());
            }
            assert_eq!(plan_hash(value, None).unwrap(), reference(value), "{value}");
        }
    }

    /// A host's SHA-256 as a test has it: sha2, and the size of each piece it is given.
    #[derive(Default)]
    struct HostLike {
        sha256: Sha256,
        pieces: std::rc::Rc<std::cell::RefCell<Vec<usize>>>,
    }

    impl HostSha256 for HostLike {
        fn update(&mut self, bytes: &[u8]) {
            self.pieces.borrow_mut().push(bytes.len());
            self.sha256.update(bytes);
        }

        fn finish(&mut self) -> Result<[u8; 32], Error> {
            Ok(self.sha256.finalize_reset().into())
        }
    }

    /// The host's SHA-256 gives the planner's own digests, by either path (what the
    /// streamed path wrote before it found the order wrong is let go), and is handed
    /// the canonical JSON in pieces of about [`HOST_CHUNK`], not as it is written.
    #[test]
    fn the_hosts_sha256_gives_the_same_hashes() {
        #[derive(Serialize)]
        struct Unordered {
            b: Vec<String>,
            a: u8,
        }
        let large: Vec<String> = (0..20_000).map(|index| format!("pool-{index}")).collect();
        let cases = [
            serde_json::json!({"a": [1, "x"], "b": {"\u{e000}": 1, "\u{1f600}": 2}}),
            serde_json::json!({"a": 0.5, "b": [1e21, -0.0]}),
            serde_json::json!({"pools": large}),
        ];
        for value in &cases {
            let host = HostLike::default();
            let pieces = host.pieces.clone();
            assert_eq!(plan_hash(value, Some(Box::new(host))).unwrap(), plan_hash(value, None).unwrap(), "{value}");
            let pieces = pieces.borrow();
            let (_last, whole) = pieces.split_last().unwrap();
            assert!(whole.iter().all(|&piece| HOST_CHUNK / 2 < piece && piece <= 2 * HOST_CHUNK), "{pieces:?}");
        }
        let pieces = HostLike::default().pieces;
        let host = HostLike { pieces: pieces.clone(), ..Default::default() };
        let unordered = Unordered { b: large, a: 1 };
        assert_eq!(plan_hash(&unordered, Some(Box::new(host))).unwrap(), plan_hash(&unordered, None).unwrap());
        // The large array is written once streamed (and let go) and once sorted.
        assert!(pieces.borrow().len() >= 4, "{:?}", pieces.borrow());
    }

    #[test]
    fn plan_hash_is_canonical() {
        let left = serde_json::json!({"b": 1, "a": [1, "x"]});
        let right: serde_json::Value = serde_json::from_str(r#"{"a":[1,"x"],"b":1}"#).unwrap();
        let hash = plan_hash(&left, None).unwrap();
        assert_eq!(hash, plan_hash(&right, None).unwrap());
        let expected = Sha256::digest(br#"{"a":[1,"x"],"b":1}"#);
        let hex: String = expected.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(hash, format!("sha256:{hex}"));
    }
}

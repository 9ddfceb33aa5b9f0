//! Derivations of SPEC §6.2: planned ids, idempotency keys and the plan hash.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{Caller, Error, ErrorCode, Kind};

/// The id of a planned create: `<prefix>_` + the first 16 bytes of
/// `SHA-256("fleet-id\0" + tenant + "\0" + principal + "\0" + kind + "\0" + key)` in
/// lowercase unpadded base32. Owner quotas have no ids.
pub(crate) fn planned_id(caller: &Caller, kind: Kind, key: &str) -> Option<String> {
    let prefix = kind.id_prefix()?;
    let mut hasher = Sha256::new();
    for part in ["fleet-id", caller.tenant.as_str(), caller.principal.as_str(), kind.name()] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    hasher.update(key.as_bytes());
    let digest = hasher.finalize();
    let encoded = data_encoding::BASE32_NOPAD.encode(&digest[..16]);
    Some(format!("{prefix}_{}", encoded.to_ascii_lowercase()))
}

/// The idempotency key of a create: `fleet:<tenant>:<kind>:<key>`.
pub(crate) fn idempotency_key(caller: &Caller, kind: Kind, key: &str) -> String {
    format!("fleet:{}:{}:{key}", caller.tenant, kind.name())
}

/// `sha256:` + the hex SHA-256 of the RFC 8785 canonical JSON of `value`, streamed into
/// the hasher.
pub(crate) fn plan_hash<T: Serialize>(value: &T) -> Result<String, Error> {
    let failed =
        |error: &dyn std::fmt::Display| Error::new(ErrorCode::Internal, format!("the plan cannot be hashed: {error}"));
    let value = serde_json::to_value(value).map_err(|error| failed(&error))?;
    let mut hasher = Sha256::new();
    canonical(&value, &mut HashWriter(&mut hasher)).map_err(|error| failed(&error))?;
    let digest = hasher.finalize();
    let mut hash = String::with_capacity(7 + 64);
    hash.push_str("sha256:");
    for byte in digest {
        hash.push_str(&format!("{byte:02x}"));
    }
    Ok(hash)
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes `value` as RFC 8785 (JCS) canonical JSON. serde_json already writes strings
/// and integers the way JCS does (the same escapes, lowercase `\u00xx`, no other
/// escaping); what JCS adds is member order by UTF-16 code units, and ECMAScript number
/// formatting, which only fractional numbers need (documents never hold any; the
/// canonicalizer crate writes them all the same).
fn canonical(value: &serde_json::Value, out: &mut impl std::io::Write) -> std::io::Result<()> {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => {
            serde_json::to_writer(&mut *out, value).map_err(std::io::Error::other)
        }
        Value::Number(number) if number.is_f64() => {
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
                serde_json::to_writer(&mut *out, key).map_err(std::io::Error::other)?;
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
        Caller { tenant: "acme".into(), principal: "alice".into() }
    }

    #[test]
    fn planned_ids_have_the_prefix_and_26_base32_characters() {
        let id = planned_id(&alice(), Kind::Pool, "gpu-a").unwrap();
        assert_eq!(crate::document::id_kind(&id), Some(Kind::Pool), "{id}");
        assert_eq!(planned_id(&alice(), Kind::OwnerQuota, "team-ml"), None);
        let bob = Caller { tenant: "acme".into(), principal: "bob".into() };
        assert_ne!(planned_id(&bob, Kind::Pool, "gpu-a"), Some(id.clone()));
        assert_ne!(planned_id(&alice(), Kind::Flavor, "gpu-a"), Some(id));
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
        assert_eq!(planned_id(&alice(), Kind::Pool, "gpu-a").unwrap(), format!("pool_{encoded}"));
    }

    #[test]
    fn idempotency_keys_name_tenant_kind_and_key() {
        assert_eq!(idempotency_key(&alice(), Kind::ProviderAccount, "aws-main"), "fleet:acme:providerAccount:aws-main");
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

    #[test]
    fn plan_hash_is_canonical() {
        let left = serde_json::json!({"b": 1, "a": [1, "x"]});
        let right: serde_json::Value = serde_json::from_str(r#"{"a":[1,"x"],"b":1}"#).unwrap();
        let hash = plan_hash(&left).unwrap();
        assert_eq!(hash, plan_hash(&right).unwrap());
        let expected = Sha256::digest(br#"{"a":[1,"x"],"b":1}"#);
        let hex: String = expected.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(hash, format!("sha256:{hex}"));
    }
}

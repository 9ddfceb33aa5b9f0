//! Signatures as the Standard Webhooks specification makes them: `v1,` and the base64
//! of HMAC-SHA256 over `id.timestamp.body`, keyed with the secret's bytes (the base64
//! after `whsec_`).

use data_encoding::BASE64;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What every secret starts with.
pub const PREFIX: &str = "whsec_";

/// Base64 that ignores the unused bits of its last character, as other implementations
/// of the specification do.
static LENIENT: std::sync::LazyLock<data_encoding::Encoding> = std::sync::LazyLock::new(|| {
    let mut specification = BASE64.specification();
    specification.check_trailing_bits = false;
    specification.encoding().unwrap_or_else(|_| BASE64.clone())
});

/// A new secret: `whsec_` and the base64 of 32 random bytes.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{PREFIX}{}", BASE64.encode(&bytes))
}

/// The key of a secret given by a client, or why it is none: `whsec_` and the base64
/// of 24 to 64 bytes.
pub fn key(secret: &str) -> Result<Vec<u8>, String> {
    let form = "must be whsec_ and the base64 of 24 to 64 random bytes";
    let encoded = secret.strip_prefix(PREFIX).ok_or(form)?;
    let key = LENIENT.decode(encoded.as_bytes()).map_err(|_| form.to_owned())?;
    if !(24..=64).contains(&key.len()) {
        return Err(form.to_owned());
    }
    Ok(key)
}

/// The `webhook-signature` header's value.
pub fn signature(key: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let mac = message_mac(key, id, &timestamp.to_string(), body.as_bytes());
    format!("v1,{}", BASE64.encode(&mac.finalize().into_bytes()))
}

/// HMAC-SHA256 over `id.timestamp.body`, as a message is signed: finalized to sign it,
/// or given the tag sent to verify it in constant time.
pub fn message_mac(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = mac(key);
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    mac
}

/// HMAC-SHA256 keyed with `key`.
pub fn mac(key: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC keys any length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries.
    #[test]
    fn signs_as_the_standard_says() {
        let key = key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signature = signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, r#"{"test": 2432232314}"#);
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn secrets_are_whsec_and_enough_random_bytes() {
        assert_eq!(key(&new_secret()).unwrap().len(), 32);
        assert!(key("whsec_c2hvcnQ=").is_err());
        assert!(key("secret").is_err());
        assert!(key("whsec_!!!").is_err());
    }
}

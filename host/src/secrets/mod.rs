//! Secrets at rest (SPEC §20.4): values the server must read back to use (a webhook's
//! signing secret; a git source's credential next), sealed with AES-256-GCM (`ring`'s
//! AEAD) under the deployment's key before they reach the database.
//!
//! - **The key** is 32 random bytes in a file (`serve --secret-key-file`); a file of any
//!   other length is refused, so that a key written as text or base64 is not taken for
//!   the first 32 bytes of itself.
//! - **A value** is stored as [`PREFIX`] and the base64 of nonce ‖ ciphertext ‖ tag, the
//!   nonce 96 fresh random bits (`ring::rand::SystemRandom`) per value: sealing one value
//!   twice gives two different texts. A text without the prefix is a value stored before
//!   there was a key (legacy plaintext), read as it is.
//! - **The row's identity is the associated data** ([`Place`]: the column and the key
//!   of its row), so a value copied to another row, or to another column, does not open.
//!
//! Nothing here ever puts a value in an error or a log line: the errors say what failed,
//! and the caller names the row.

pub mod at_rest;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

/// What a sealed value starts with: the scheme (AES-256-GCM, the nonce first) and its
/// version, so that a later scheme can be told apart and the legacy plaintext too.
pub const PREFIX: &str = "enc:v1:";
/// A key's length: AES-256's.
pub const KEY_LEN: usize = 32;
/// The tag AES-GCM appends to the ciphertext.
const TAG_LEN: usize = 16;

/// What sealing or opening a value can fail with; never the value itself.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The value is sealed, and this server was given no key.
    #[error("it is encrypted and this server has no key (serve --secret-key-file)")]
    NoKey,
    /// The value does not open with this key: another key sealed it, it was changed, or
    /// it was copied from another row.
    #[error("it does not decrypt with this key (sealed with another key, changed, or copied from another row)")]
    Unopened,
    /// The value has the prefix but is not base64 of a nonce, a ciphertext and a tag.
    #[error("it is not a well-formed encrypted value")]
    Malformed,
    /// The system's random source failed.
    #[error("the system's random source failed")]
    Random,
}

/// Where a value is kept, which the value is bound to: the table and column, and the
/// columns that identify its row, in order (for a webhook, its tenant and name). None
/// of them holds a NUL (names and tenants are checked against the name grammar), so
/// the parts joined by NULs name one place only.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// `table.column`, e.g. `webhooks.secret`.
    pub column: &'static str,
    pub row: &'a [&'a str],
}

impl Place<'_> {
    /// The associated data: `webhooks.secret\0acme\0ops`.
    fn associated(&self) -> Vec<u8> {
        let mut data = self.column.as_bytes().to_vec();
        for part in self.row {
            debug_assert!(!part.contains('\0'), "a row's identity holds no NUL");
            data.push(0);
            data.extend_from_slice(part.as_bytes());
        }
        data
    }
}

/// The deployment's key, ready to seal and open. Cloning shares it; `Debug` never
/// shows it.
#[derive(Clone)]
pub struct Key {
    key: Arc<LessSafeKey>,
    random: SystemRandom,
}

impl fmt::Debug for Key {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("Key(AES-256-GCM, hidden)")
    }
}

impl Key {
    /// A key of exactly [`KEY_LEN`] bytes.
    pub fn new(bytes: &[u8]) -> Result<Key, String> {
        if bytes.len() != KEY_LEN {
            return Err(format!("a key is exactly {KEY_LEN} bytes, not {}", bytes.len()));
        }
        let key = UnboundKey::new(&AES_256_GCM, bytes).map_err(|_| "AES-256-GCM refused the key".to_owned())?;
        Ok(Key { key: Arc::new(LessSafeKey::new(key)), random: SystemRandom::new() })
    }

    /// The key in `file`, which must hold exactly [`KEY_LEN`] bytes (as `fleet admin
    /// secret-key generate` writes them): nothing else is taken for a key.
    pub fn read(file: &Path) -> anyhow::Result<Key> {
        use std::io::Read as _;
        let opened = std::fs::File::open(file)
            .with_context(|| format!("the secret key file {} cannot be read", file.display()))?;
        // One byte more than a key tells a longer file apart without reading it all.
        let mut bytes = Vec::with_capacity(KEY_LEN + 1);
        opened
            .take(KEY_LEN as u64 + 1)
            .read_to_end(&mut bytes)
            .with_context(|| format!("the secret key file {} cannot be read", file.display()))?;
        let key = Key::new(&bytes);
        bytes.fill(0);
        key.map_err(|_| {
            let length = match bytes.len() {
                0 => "is empty".to_owned(),
                length if length > KEY_LEN => format!("holds more than {KEY_LEN} bytes"),
                length => format!("holds {length} bytes"),
            };
            anyhow::anyhow!(
                "the secret key file {} {length}: a key is exactly {KEY_LEN} random bytes (not text or base64); \
                 make one with `fleet admin secret-key generate -o FILE`",
                file.display()
            )
        })
    }

    /// `plaintext` sealed for `place`: [`PREFIX`] and base64 of nonce ‖ ciphertext ‖ tag.
    pub fn seal(&self, plaintext: &str, place: Place<'_>) -> Result<String, Error> {
        let mut nonce = [0u8; NONCE_LEN];
        self.random.fill(&mut nonce).map_err(|_| Error::Random)?;
        let mut sealed = Vec::with_capacity(NONCE_LEN + plaintext.len() + TAG_LEN);
        sealed.extend_from_slice(&nonce);
        let mut in_out = plaintext.as_bytes().to_vec();
        let associated = place.associated();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&associated), &mut in_out)
            .map_err(|_| Error::Random)?;
        sealed.extend_from_slice(&in_out);
        Ok(format!("{PREFIX}{}", data_encoding::BASE64.encode(&sealed)))
    }

    /// The plaintext of a value [`Key::seal`] made for `place` with this key.
    pub fn open(&self, stored: &str, place: Place<'_>) -> Result<String, Error> {
        let encoded = stored.strip_prefix(PREFIX).ok_or(Error::Malformed)?;
        let sealed = data_encoding::BASE64.decode(encoded.as_bytes()).map_err(|_| Error::Malformed)?;
        if sealed.len() < NONCE_LEN + TAG_LEN {
            return Err(Error::Malformed);
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Error::Malformed)?;
        let mut in_out = ciphertext.to_vec();
        let associated = place.associated();
        let plaintext =
            self.key.open_in_place(nonce, Aad::from(&associated), &mut in_out).map_err(|_| Error::Unopened)?;
        String::from_utf8(plaintext.to_vec()).map_err(|_| Error::Malformed)
    }
}

/// Whether a stored text is a sealed value (else it is legacy plaintext).
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(PREFIX)
}

/// What to store for `plaintext` at `place`: sealed under `key`, or the plaintext itself
/// when the deployment has no key.
pub fn store(key: Option<&Key>, plaintext: &str, place: Place<'_>) -> Result<String, Error> {
    match key {
        Some(key) => key.seal(plaintext, place),
        None => Ok(plaintext.to_owned()),
    }
}

/// The plaintext of what is stored at `place`: opened under `key` when it is sealed,
/// as it is when it is legacy plaintext.
pub fn reveal(key: Option<&Key>, stored: &str, place: Place<'_>) -> Result<String, Error> {
    match (is_sealed(stored), key) {
        (false, _) => Ok(stored.to_owned()),
        (true, Some(key)) => key.open(stored, place),
        (true, None) => Err(Error::NoKey),
    }
}

/// 32 bytes from the system's random source: a new key.
pub fn generate() -> Result<[u8; KEY_LEN], Error> {
    let mut bytes = [0u8; KEY_LEN];
    SystemRandom::new().fill(&mut bytes).map_err(|_| Error::Random)?;
    Ok(bytes)
}

/// Writes a new key to `file`, readable and writable by its owner only, and never over
/// a file that exists: a key overwritten is every secret sealed with it lost.
pub fn write_new_key(file: &Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut opened = options.open(file).map_err(|error| match error.kind() {
        std::io::ErrorKind::AlreadyExists => {
            anyhow::anyhow!(
                "{} exists already; a key is never overwritten (secrets sealed with it would be lost)",
                file.display()
            )
        }
        _ => anyhow::Error::new(error).context(format!("{} cannot be created", file.display())),
    })?;
    let mut key = generate()?;
    let written = opened.write_all(&key).and_then(|()| opened.sync_all());
    key.fill(0);
    written.with_context(|| format!("the key cannot be written to {}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPS: Place<'static> = Place { column: "webhooks.secret", row: &["acme", "ops"] };
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn key() -> Key {
        Key::new(&generate().unwrap()).unwrap()
    }

    #[test]
    fn a_sealed_value_opens_with_its_key_at_its_place() {
        let key = key();
        let sealed = key.seal(SECRET, OPS).unwrap();
        assert!(sealed.starts_with(PREFIX) && is_sealed(&sealed), "{sealed}");
        assert!(!sealed.contains(SECRET) && !sealed.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
        assert_eq!(key.open(&sealed, OPS).unwrap(), SECRET);
        assert_eq!(reveal(Some(&key), &sealed, OPS).unwrap(), SECRET);
        // The empty value too: only the tag is there.
        assert_eq!(key.open(&key.seal("", OPS).unwrap(), OPS).unwrap(), "");
    }

    #[test]
    fn two_seals_of_one_value_differ() {
        let key = key();
        assert_ne!(key.seal(SECRET, OPS).unwrap(), key.seal(SECRET, OPS).unwrap());
    }

    #[test]
    fn another_key_another_row_a_flipped_byte_or_a_cut_value_is_refused() {
        let key = key();
        let sealed = key.seal(SECRET, OPS).unwrap();
        assert_eq!(self::key().open(&sealed, OPS), Err(Error::Unopened), "another key");
        let other_row = Place { column: "webhooks.secret", row: &["acme", "chat"] };
        let other_tenant = Place { column: "webhooks.secret", row: &["other", "ops"] };
        let other_column = Place { column: "sources.credential", row: &["acme", "ops"] };
        // The identity's parts are kept apart: `ac` + `meops` is not `acme` + `ops`.
        let shifted = Place { column: "webhooks.secret", row: &["acmeops"] };
        for place in [other_row, other_tenant, other_column, shifted] {
            assert_eq!(key.open(&sealed, place), Err(Error::Unopened), "{place:?}");
        }
        let mut bytes = data_encoding::BASE64.decode(&sealed.as_bytes()[PREFIX.len()..]).unwrap();
        for at in [0, NONCE_LEN, bytes.len() - 1] {
            bytes[at] ^= 1;
            let flipped = format!("{PREFIX}{}", data_encoding::BASE64.encode(&bytes));
            assert_eq!(key.open(&flipped, OPS), Err(Error::Unopened), "byte {at} flipped");
            bytes[at] ^= 1;
        }
        let cut = format!("{PREFIX}{}", data_encoding::BASE64.encode(&bytes[..bytes.len() - 1]));
        assert_eq!(key.open(&cut, OPS), Err(Error::Unopened), "the tag cut short");
        let stub = format!("{PREFIX}{}", data_encoding::BASE64.encode(&bytes[..NONCE_LEN + TAG_LEN - 1]));
        assert_eq!(key.open(&stub, OPS), Err(Error::Malformed), "too short to hold a nonce and a tag");
        assert_eq!(key.open(&sealed[..sealed.len() - 3], OPS), Err(Error::Malformed), "base64 cut");
        assert_eq!(key.open("enc:v1:not base64!", OPS), Err(Error::Malformed));
    }

    #[test]
    fn plaintext_is_read_as_it_is_and_a_sealed_value_needs_the_key() {
        let key = key();
        assert_eq!(reveal(None, SECRET, OPS).unwrap(), SECRET);
        assert_eq!(reveal(Some(&key), SECRET, OPS).unwrap(), SECRET);
        assert_eq!(store(None, SECRET, OPS).unwrap(), SECRET);
        let sealed = store(Some(&key), SECRET, OPS).unwrap();
        assert_eq!(reveal(None, &sealed, OPS), Err(Error::NoKey));
        // No error shows the value.
        for error in [Error::NoKey, Error::Unopened, Error::Malformed, Error::Random] {
            assert!(!error.to_string().contains("whsec_"), "{error}");
        }
    }

    #[test]
    fn a_key_file_is_exactly_32_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret.key");
        write_new_key(&file).unwrap();
        assert_eq!(std::fs::read(&file).unwrap().len(), KEY_LEN);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let key = Key::read(&file).unwrap();
        assert_eq!(format!("{key:?}"), "Key(AES-256-GCM, hidden)");
        let refused = write_new_key(&file).unwrap_err().to_string();
        assert!(refused.contains("exists already"), "{refused}");
        for (bytes, says) in [(0, "is empty"), (31, "holds 31 bytes"), (44, "holds more than 32 bytes")] {
            let wrong = dir.path().join(format!("{bytes}.key"));
            std::fs::write(&wrong, vec![b'a'; bytes]).unwrap();
            let error = Key::read(&wrong).unwrap_err().to_string();
            assert!(error.contains(says) && error.contains("secret-key generate"), "{error}");
        }
        assert!(Key::read(&dir.path().join("missing.key")).is_err());
    }
}

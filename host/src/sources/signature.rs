//! SSH signatures of commits, verified in-process (SPEC §20.3, step 4).
//!
//! A commit made by `git commit -S` with `gpg.format ssh` carries an SSHSIG (OpenSSH's
//! `PROTOCOL.sshsig`, namespace `git`) in its `gpgsig` header, made over the commit
//! without that header. [`verify`] takes the commit as `git cat-file commit` prints it,
//! rebuilds that payload as git does, and checks the signature against the allowed
//! [`Signer`]s — no `ssh-keygen`, no allowed-signers file, no program run per commit.
//!
//! - **Formats from `ssh-key`, signatures from `ring`.** The OpenSSH key line and the
//!   SSHSIG blob are parsed by RustCrypto's `ssh-key` (and its wire format,
//!   `ssh-encoding`), with their default features off: they then hold no signature or
//!   hash code of their own beyond the `sha2` the host already links, which computes a
//!   key's fingerprint. (A parser of our own would be small, but these crates also know
//!   each key type's layout and checks.) The armour around the blob is taken apart here,
//!   as OpenSSH does, with the host's `data-encoding` for the Base64. The signatures, and
//!   the hash of the payload, are `ring`'s, the one crypto library of the host: Ed25519, ECDSA P-256 and P-384, and RSA of 2048 to
//!   8192 bits with `rsa-sha2-256` or `rsa-sha2-512` (never SHA-1's `ssh-rsa`). Other
//!   keys (DSA, P-521, security keys) are refused as signers and fail as signatures.
//! - **A signature is checked before its key is looked up**: it must hold for the key
//!   it carries, so an [`Verdict::UnknownSigner`] names a key that really signed.
//! - **Everything here is untrusted input**: lengths are bounded before anything is
//!   decoded, and every failure is a value, never a panic.

use ring::signature::{self as ring_signature, RsaPublicKeyComponents, UnparsedPublicKey};
use ssh_encoding::{Decode as _, Encode as _};
use ssh_key::public::KeyData;
use ssh_key::{Algorithm, EcdsaCurve, HashAlg, Mpint, PublicKey, SshSig};

/// The longest public key line taken: an 8192-bit RSA key's is about 1.4 KB.
const MAX_KEY_LINE_LEN: usize = 16 * 1024;
/// The longest signature taken: an 8192-bit RSA key's SSHSIG armour is about 3 KB.
const MAX_SIGNATURE_LEN: usize = 64 * 1024;
/// The first line of an SSHSIG's armour.
const SSHSIG_BEGIN: &[u8] = b"-----BEGIN SSH SIGNATURE-----";
/// The last line of an SSHSIG's armour.
const SSHSIG_END: &[u8] = b"-----END SSH SIGNATURE-----";
/// The namespace `git` signs commits in (`ssh-keygen -Y sign -n git`).
const GIT_NAMESPACE: &str = "git";
/// The sizes of RSA modulus `ring` verifies (`RSA_PKCS1_2048_8192_*`).
const RSA_BITS: std::ops::RangeInclusive<usize> = 2048..=8192;

/// An allowed signer: an OpenSSH public key line ("ssh-ed25519 AAAA... comment").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    key: KeyData,
    fingerprint: String,
}

impl Signer {
    /// Parses one OpenSSH public key line; the error says why not, for a person to read.
    pub fn parse(line: &str) -> Result<Signer, String> {
        let line = line.trim();
        if line.is_empty() {
            return Err("an allowed signer is an OpenSSH public key line, and this one is empty".to_owned());
        }
        if line.len() > MAX_KEY_LINE_LEN {
            return Err(format!("a public key line of {} bytes; at most {MAX_KEY_LINE_LEN} are taken", line.len()));
        }
        if line.contains(['\n', '\r']) {
            return Err("one public key a line: this one spans several".to_owned());
        }
        let public_key = PublicKey::from_openssh(line)
            .map_err(|error| format!("not an OpenSSH public key line (\"ssh-ed25519 AAAA… comment\"): {error}"))?;
        let key = public_key.key_data();
        usable(key)?;
        Ok(Signer { key: key.clone(), fingerprint: fingerprint(key) })
    }

    /// The key's SHA-256 fingerprint, "SHA256:…" as `ssh-keygen -lf` prints it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// What a commit's signature says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Signed by the allowed signer with this fingerprint.
    Signed { fingerprint: String },
    /// The commit carries no signature (none for the hash of its repository, as git reads it).
    Unsigned,
    /// A signature that is not an SSH one, or is malformed, or does not hold for the commit.
    BadSignature(String),
    /// A good signature, by a key that is not an allowed signer.
    UnknownSigner { fingerprint: String },
}

/// What `raw` — the commit object exactly as `git cat-file commit <id>` prints it — is
/// signed with, checked against the allowed `signers`.
pub fn verify(raw: &[u8], signers: &[Signer]) -> Verdict {
    let Some(SignedCommit { payload, signature }) = split_signature(raw) else {
        return Verdict::Unsigned;
    };
    let key = match check(&payload, &signature) {
        Ok(key) => key,
        Err(reason) => return Verdict::BadSignature(reason),
    };
    let fingerprint = fingerprint(&key);
    if signers.iter().any(|signer| signer.key == key) {
        Verdict::Signed { fingerprint }
    } else {
        Verdict::UnknownSigner { fingerprint }
    }
}

/// A commit taken apart as git takes it to verify it.
struct SignedCommit {
    /// The commit without its signature headers: what was signed.
    payload: Vec<u8>,
    /// The signature header's value, its continuation lines without their leading space.
    signature: Vec<u8>,
}

/// Splits the signature off a commit, line for line as git's `parse_buffer_signed_by_header`
/// (commit.c) does: the header of the repository's hash (`gpgsig` for SHA-1,
/// `gpgsig-sha256` for SHA-256) is the signature; it and any other `gpgsig…` header
/// (a converted repository's signature for its other hash) are left out of the payload.
/// git knows its repository's hash; here it is the length of the `tree` id, the first
/// header of every commit. `None` when the commit has no signature for that hash.
fn split_signature(raw: &[u8]) -> Option<SignedCommit> {
    let header: &[u8] = if tree_id_len(raw) == Some(64) { b"gpgsig-sha256" } else { b"gpgsig" };
    let mut payload = Vec::with_capacity(raw.len());
    let mut signature = Vec::new();
    let (mut in_signature, mut saw_signature, mut other_signature) = (false, false, false);
    let mut rest = raw;
    while !rest.is_empty() {
        let line_len = rest.iter().position(|&byte| byte == b'\n').map_or(rest.len(), |newline| newline + 1);
        let (line, after) = rest.split_at(line_len);
        rest = after;
        let continuation = if in_signature { line.strip_prefix(b" ") } else { None };
        let signature_part = if continuation.is_some() {
            continuation
        } else if let Some(value) = line.strip_prefix(header).and_then(|after| after.strip_prefix(b" ")) {
            other_signature = false;
            Some(value)
        } else {
            if line.starts_with(b"gpgsig") {
                other_signature = true;
            } else if other_signature && line.first() != Some(&b' ') {
                other_signature = false;
            }
            None
        };
        if let Some(part) = signature_part {
            signature.extend_from_slice(part);
            saw_signature = true;
            in_signature = true;
        } else {
            if !other_signature {
                payload.extend_from_slice(line);
            }
            if line == b"\n" {
                // The headers end here; the message is all payload.
                payload.extend_from_slice(rest);
                break;
            }
            in_signature = false;
        }
    }
    saw_signature.then_some(SignedCommit { payload, signature })
}

/// The length of the hex id on the commit's first line, `tree <id>`.
fn tree_id_len(raw: &[u8]) -> Option<usize> {
    let id = raw.strip_prefix(b"tree ")?;
    id.iter().position(|&byte| byte == b'\n')
}

/// The key that made `armour`, an SSHSIG over `payload` in the `git` namespace, once the
/// signature is seen to hold for it; or why it does not.
fn check(payload: &[u8], armour: &[u8]) -> Result<KeyData, String> {
    if armour.len() > MAX_SIGNATURE_LEN {
        return Err(format!("a signature of {} bytes; at most {MAX_SIGNATURE_LEN} are taken", armour.len()));
    }
    let sshsig = parse_sshsig(armour)?;
    if sshsig.namespace() != GIT_NAMESPACE {
        return Err(format!("an SSH signature for the namespace {:?}, not {GIT_NAMESPACE:?}", sshsig.namespace()));
    }
    let message_hash = match sshsig.hash_alg() {
        HashAlg::Sha256 => ring::digest::digest(&ring::digest::SHA256, payload),
        HashAlg::Sha512 => ring::digest::digest(&ring::digest::SHA512, payload),
        other => return Err(format!("an SSH signature over a {} hash, which is not supported", other.as_str())),
    };
    let signed_data = signed_data(&sshsig, message_hash.as_ref())?;
    let key = sshsig.public_key();
    usable(key)?;
    verify_signature(key, sshsig.signature(), &signed_data)?;
    Ok(key.clone())
}

/// The SSHSIG in `armour`, taken as OpenSSH's `sshsig_dearmor` takes it: the Base64
/// between the begin and end lines, whatever its line breaks. The blob must be exactly
/// what its parse encodes back to: `ssh-key` reads a length-prefixed field without
/// checking that the field was used up, which would let one signature be written in
/// many ways that OpenSSH refuses; and the Base64 must be canonical for the same reason.
fn parse_sshsig(armour: &[u8]) -> Result<SshSig, String> {
    let malformed = |reason: &dyn std::fmt::Display| format!("a malformed SSH signature: {reason}");
    let Some(body) = armour.strip_prefix(SSHSIG_BEGIN) else {
        return Err(format!("{}, not an SSH signature", kind_of_signature(armour)));
    };
    let end = body.windows(SSHSIG_END.len()).position(|window| window == SSHSIG_END);
    let Some((base64, after)) = end.map(|end| (&body[..end], &body[end + SSHSIG_END.len()..])) else {
        return Err(malformed(&"no end line"));
    };
    if !after.iter().all(u8::is_ascii_whitespace) {
        return Err(malformed(&"text after the end line"));
    }
    let base64: Vec<u8> = base64.iter().copied().filter(|byte| !byte.is_ascii_whitespace()).collect();
    let blob = data_encoding::BASE64.decode(&base64).map_err(|error| malformed(&error))?;
    let sshsig = SshSig::decode(&mut blob.as_slice()).map_err(|error| malformed(&error))?;
    let mut reencoded = Vec::with_capacity(blob.len());
    sshsig.encode(&mut reencoded).map_err(|error| malformed(&error))?;
    if reencoded != blob {
        return Err(malformed(&"its fields are not in OpenSSH's encoding"));
    }
    Ok(sshsig)
}

/// What an armoured signature that is not SSH's is, by its first line as git's
/// `get_format_by_sig` tells the formats apart.
fn kind_of_signature(armour: &[u8]) -> &'static str {
    if armour.starts_with(b"-----BEGIN PGP SIGNATURE-----") || armour.starts_with(b"-----BEGIN PGP MESSAGE-----") {
        "a PGP signature"
    } else if armour.starts_with(b"-----BEGIN SIGNED MESSAGE-----") {
        "an X.509 signature"
    } else {
        "an unrecognised signature"
    }
}

/// The bytes an SSHSIG's signature is made over (PROTOCOL.sshsig): the magic, then the
/// namespace, the reserved field, the hash's name and the message's hash as strings.
fn signed_data(sshsig: &SshSig, message_hash: &[u8]) -> Result<Vec<u8>, String> {
    let mut signed = b"SSHSIG".to_vec();
    let fields: [&[u8]; 4] =
        [sshsig.namespace().as_bytes(), sshsig.reserved(), sshsig.hash_alg().as_str().as_bytes(), message_hash];
    for field in fields {
        field.encode(&mut signed).map_err(|error| format!("a malformed SSH signature: {error}"))?;
    }
    Ok(signed)
}

/// Whether `ring` can verify signatures of `key`; why not if it cannot.
fn usable(key: &KeyData) -> Result<(), String> {
    match key {
        KeyData::Ed25519(_) => Ok(()),
        KeyData::Ecdsa(ecdsa) => match ecdsa.curve() {
            EcdsaCurve::NistP256 | EcdsaCurve::NistP384 if ecdsa.as_sec1_bytes().first() == Some(&0x04) => Ok(()),
            EcdsaCurve::NistP256 | EcdsaCurve::NistP384 => {
                Err("an ECDSA key with a compressed point, which OpenSSH does not use".to_owned())
            }
            EcdsaCurve::NistP521 => Err(unsupported(key)),
        },
        KeyData::Rsa(rsa) => {
            let bits = rsa.n.as_positive_bytes().map_or(0, bit_len);
            if RSA_BITS.contains(&bits) {
                Ok(())
            } else {
                Err(format!("an RSA key of {bits} bits; {} to {} are supported", RSA_BITS.start(), RSA_BITS.end()))
            }
        }
        _ => Err(unsupported(key)),
    }
}

/// Why a key of a kind `ring` does not verify is refused.
fn unsupported(key: &KeyData) -> String {
    format!(
        "{} keys are not supported (ssh-ed25519, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384 and ssh-rsa are)",
        key.algorithm()
    )
}

/// The number of bits of a big-endian unsigned integer without leading zero bytes.
fn bit_len(bytes: &[u8]) -> usize {
    let leading_zeros = bytes.first().map_or(0, |first| first.leading_zeros() as usize);
    (bytes.len() * 8).saturating_sub(leading_zeros)
}

/// Checks `signature` over `message` with `key`, which [`usable`] admitted.
fn verify_signature(key: &KeyData, signature: &ssh_key::Signature, message: &[u8]) -> Result<(), String> {
    let algorithm = signature.algorithm();
    let verified = match (key, &algorithm) {
        (KeyData::Ed25519(ed25519), Algorithm::Ed25519) => {
            UnparsedPublicKey::new(&ring_signature::ED25519, ed25519.0).verify(message, signature.as_bytes())
        }
        (KeyData::Ecdsa(ecdsa), Algorithm::Ecdsa { curve }) if *curve == ecdsa.curve() => {
            let (ring_algorithm, field_len) = match curve {
                EcdsaCurve::NistP256 => (&ring_signature::ECDSA_P256_SHA256_FIXED, 32),
                EcdsaCurve::NistP384 => (&ring_signature::ECDSA_P384_SHA384_FIXED, 48),
                EcdsaCurve::NistP521 => return Err(unsupported(key)),
            };
            let fixed = ecdsa_fixed(signature.as_bytes(), field_len)?;
            UnparsedPublicKey::new(ring_algorithm, ecdsa.as_sec1_bytes()).verify(message, &fixed)
        }
        (KeyData::Rsa(rsa), Algorithm::Rsa { hash: Some(hash) }) => {
            let parameters = match hash {
                HashAlg::Sha256 => &ring_signature::RSA_PKCS1_2048_8192_SHA256,
                HashAlg::Sha512 => &ring_signature::RSA_PKCS1_2048_8192_SHA512,
                _ => return Err(format!("an RSA signature of the unsupported algorithm {algorithm}")),
            };
            let (Some(n), Some(e)) = (rsa.n.as_positive_bytes(), rsa.e.as_positive_bytes()) else {
                return Err("an RSA key with a negative modulus or exponent".to_owned());
            };
            // OpenSSH verifies a signature shorter than the modulus by padding it (ssh-rsa.c).
            let padded = left_pad(signature.as_bytes(), n.len())
                .ok_or_else(|| "an RSA signature longer than the key's modulus".to_owned())?;
            RsaPublicKeyComponents { n, e }.verify(parameters, message, &padded)
        }
        _ => return Err(format!("a {algorithm} signature made with a {} key", key.algorithm())),
    };
    verified.map_err(|_| "the signature does not match the commit".to_owned())
}

/// An SSH ECDSA signature — the mpints r and s, as strings — as `ring`'s fixed format:
/// r then s, each big-endian in exactly `field_len` bytes.
fn ecdsa_fixed(blob: &[u8], field_len: usize) -> Result<Vec<u8>, String> {
    let malformed = || "a malformed ECDSA signature".to_owned();
    let mut reader = blob;
    let mut fixed = Vec::with_capacity(2 * field_len);
    for _ in 0..2 {
        let component = Mpint::decode(&mut reader).map_err(|_| malformed())?;
        let positive = component.as_positive_bytes().ok_or_else(malformed)?;
        fixed.extend(left_pad(positive, field_len).ok_or_else(malformed)?);
    }
    if !reader.is_empty() {
        return Err(malformed());
    }
    Ok(fixed)
}

/// `bytes` with zero bytes before them up to `len`; `None` if they are longer.
fn left_pad(bytes: &[u8], len: usize) -> Option<Vec<u8>> {
    let padding = len.checked_sub(bytes.len())?;
    let mut padded = vec![0; padding];
    padded.extend_from_slice(bytes);
    Some(padded)
}

/// A key's SHA-256 fingerprint as `ssh-keygen -lf` prints it.
fn fingerprint(key: &KeyData) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use super::*;

    /// A temporary home with a git repository and SSH keys made by the system's
    /// `ssh-keygen`, committing with the system's `git`.
    struct Scratch {
        dir: tempfile::TempDir,
    }

    /// A key made by `ssh-keygen`: its private key file, its public key line and the
    /// fingerprint `ssh-keygen -lf` prints for it.
    struct Key {
        private: PathBuf,
        public_line: String,
        fingerprint: String,
    }

    impl Scratch {
        /// A scratch home with an empty repository of the given object format.
        fn new(object_format: &str) -> Scratch {
            let scratch = Scratch { dir: tempfile::tempdir().expect("a temporary directory") };
            scratch.git(&["init", "-q", &format!("--object-format={object_format}"), "repo"], None);
            scratch
        }

        fn run(&self, command: &mut Command) -> Vec<u8> {
            let output = command
                .env("HOME", self.dir.path())
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .expect("the command starts");
            assert!(output.status.success(), "{command:?} failed: {}", String::from_utf8_lossy(&output.stderr));
            output.stdout
        }

        /// Runs git in the repository (or, for `init`, in the scratch home).
        fn git(&self, args: &[&str], signing_key: Option<&Path>) -> Vec<u8> {
            let repo = self.dir.path().join("repo");
            let mut command = Command::new("git");
            command.current_dir(if repo.exists() { repo } else { self.dir.path().to_owned() });
            command.args(["-c", "user.name=Test", "-c", "user.email=test@example.com"]);
            if let Some(key) = signing_key {
                command.args(["-c", "gpg.format=ssh", "-c"]).arg(format!("user.signingkey={}", key.display()));
            }
            self.run(command.args(args))
        }

        /// A new key made by `ssh-keygen -t <kind> <extra>`.
        fn key(&self, name: &str, kind: &str, extra: &[&str]) -> Key {
            let private = self.dir.path().join(name);
            self.run(
                Command::new("ssh-keygen")
                    .args(["-q", "-N", "", "-C", name, "-t", kind])
                    .args(extra)
                    .arg("-f")
                    .arg(&private),
            );
            let public_file = private.with_extension("pub");
            let public_line = std::fs::read_to_string(&public_file).expect("the public key file");
            let listed = self.run(Command::new("ssh-keygen").arg("-lf").arg(&public_file));
            let listed = String::from_utf8(listed).expect("ssh-keygen prints text");
            let fingerprint = listed.split_whitespace().nth(1).expect("bits, then the fingerprint").to_owned();
            Key { private, public_line, fingerprint }
        }

        /// A new empty commit, signed with `key` if given, as `git cat-file commit` prints it.
        fn commit(&self, key: Option<&Key>) -> Vec<u8> {
            let mut args = vec!["commit", "-q", "--allow-empty", "-m", "a commit\n\nwith a body"];
            if key.is_some() {
                args.push("-S");
            }
            self.git(&args, key.map(|key| key.private.as_path()));
            self.git(&["cat-file", "commit", "HEAD"], None)
        }

        /// `payload` signed by `ssh-keygen -Y sign` in `namespace`: the SSHSIG armour.
        fn sign(&self, key: &Key, namespace: &str, payload: &[u8]) -> Vec<u8> {
            let message = self.dir.path().join("message");
            std::fs::write(&message, payload).expect("the message file");
            let _ = std::fs::remove_file(message.with_extension("sig"));
            self.run(
                Command::new("ssh-keygen").args(["-Y", "sign", "-n", namespace, "-f"]).arg(&key.private).arg(&message),
            );
            std::fs::read(message.with_extension("sig")).expect("the signature file")
        }
    }

    fn signer(key: &Key) -> Signer {
        Signer::parse(&key.public_line).expect("ssh-keygen's public key parses")
    }

    /// `unsigned` (a commit without a signature) with `armour` as its `gpgsig` header,
    /// placed before the blank line as git places it.
    fn with_signature(unsigned: &[u8], armour: &[u8]) -> Vec<u8> {
        let blank = unsigned.windows(2).position(|pair| pair == b"\n\n").expect("headers, then a message") + 1;
        let armour = String::from_utf8(armour.to_vec()).expect("an armour is text");
        let header = format!("gpgsig {}\n", armour.trim_end().replace('\n', "\n "));
        [&unsigned[..blank], header.as_bytes(), &unsigned[blank..]].concat()
    }

    fn is_bad(verdict: &Verdict) -> bool {
        matches!(verdict, Verdict::BadSignature(_))
    }

    #[test]
    fn each_kind_of_key_signs_a_commit_that_verifies() {
        let scratch = Scratch::new("sha1");
        let keys = [
            scratch.key("ed25519", "ed25519", &[]),
            scratch.key("ecdsa256", "ecdsa", &["-b", "256"]),
            scratch.key("ecdsa384", "ecdsa", &["-b", "384"]),
            scratch.key("rsa", "rsa", &["-b", "3072"]),
        ];
        let signers: Vec<Signer> = keys.iter().map(signer).collect();
        for (key, signer) in keys.iter().zip(&signers) {
            assert_eq!(signer.fingerprint(), key.fingerprint, "{}", key.public_line);
            let raw = scratch.commit(Some(key));
            assert!(raw.windows(8).any(|window| window == b"\ngpgsig "), "git signed with a gpgsig header");
            assert_eq!(
                verify(&raw, &signers),
                Verdict::Signed { fingerprint: key.fingerprint.clone() },
                "{}",
                key.public_line
            );
        }
    }

    #[test]
    fn a_key_not_listed_is_an_unknown_signer() {
        let scratch = Scratch::new("sha1");
        let listed = scratch.key("listed", "ed25519", &[]);
        let other = scratch.key("other", "ecdsa", &["-b", "256"]);
        let raw = scratch.commit(Some(&other));
        assert_eq!(verify(&raw, &[signer(&listed)]), Verdict::UnknownSigner { fingerprint: other.fingerprint.clone() });
        assert_eq!(verify(&raw, &[]), Verdict::UnknownSigner { fingerprint: other.fingerprint });
    }

    #[test]
    fn an_unsigned_commit_is_unsigned() {
        let scratch = Scratch::new("sha1");
        let key = scratch.key("key", "ed25519", &[]);
        let raw = scratch.commit(None);
        assert_eq!(verify(&raw, &[signer(&key)]), Verdict::Unsigned);
    }

    #[test]
    fn a_changed_commit_is_a_bad_signature() {
        let scratch = Scratch::new("sha1");
        let key = scratch.key("key", "ed25519", &[]);
        let signers = [signer(&key)];
        let raw = scratch.commit(Some(&key));
        let mut tampered = raw.clone();
        let body = tampered.windows(4).rposition(|window| window == b"body").expect("the message's body");
        tampered[body] = b'B';
        assert_eq!(
            verify(&tampered, &signers),
            Verdict::BadSignature("the signature does not match the commit".into())
        );

        // Every byte changed, anywhere, and every cut: never signed, never a panic.
        for index in 0..raw.len() {
            let mut flipped = raw.clone();
            flipped[index] ^= 0x01;
            assert!(!matches!(verify(&flipped, &signers), Verdict::Signed { .. }), "byte {index} changed");
            assert!(!matches!(verify(&raw[..index], &signers), Verdict::Signed { .. }), "cut at {index}");
        }
    }

    #[test]
    fn a_sha256_repository_signs_in_gpgsig_sha256() {
        let scratch = Scratch::new("sha256");
        let key = scratch.key("key", "ed25519", &[]);
        let raw = scratch.commit(Some(&key));
        assert!(raw.windows(15).any(|window| window == b"\ngpgsig-sha256 "), "git signed with gpgsig-sha256");
        assert_eq!(verify(&raw, &[signer(&key)]), Verdict::Signed { fingerprint: key.fingerprint });
    }

    #[test]
    fn a_signature_for_another_hash_is_left_out_of_the_payload() {
        // A SHA-1 commit that also carries a `gpgsig-sha256` header (as in a repository
        // converted between hashes): git verifies `gpgsig` and signs neither header.
        let scratch = Scratch::new("sha1");
        let key = scratch.key("key", "ed25519", &[]);
        let unsigned = scratch.commit(None);
        let armour = scratch.sign(&key, "git", &unsigned);
        let other = rename_header(&with_signature(&unsigned, &armour), "gpgsig ", "gpgsig-sha256 ");
        let both = with_signature(&other, &armour);
        assert_eq!(verify(&other, &[signer(&key)]), Verdict::Unsigned);
        assert_eq!(verify(&both, &[signer(&key)]), Verdict::Signed { fingerprint: key.fingerprint });
    }

    #[test]
    fn a_signature_in_another_namespace_is_bad() {
        let scratch = Scratch::new("sha1");
        let key = scratch.key("key", "ed25519", &[]);
        let unsigned = scratch.commit(None);
        let in_git = with_signature(&unsigned, &scratch.sign(&key, "git", &unsigned));
        assert_eq!(verify(&in_git, &[signer(&key)]), Verdict::Signed { fingerprint: key.fingerprint.clone() });
        let in_file = with_signature(&unsigned, &scratch.sign(&key, "file", &unsigned));
        assert_eq!(
            verify(&in_file, &[signer(&key)]),
            Verdict::BadSignature("an SSH signature for the namespace \"file\", not \"git\"".into())
        );
    }

    #[test]
    fn a_signature_that_is_not_ssh_is_bad() {
        let scratch = Scratch::new("sha1");
        let unsigned = scratch.commit(None);
        let pgp = b"-----BEGIN PGP SIGNATURE-----\n\niQEzBAABCAAdFiEE\n=abcd\n-----END PGP SIGNATURE-----\n";
        assert_eq!(
            verify(&with_signature(&unsigned, pgp), &[]),
            Verdict::BadSignature("a PGP signature, not an SSH signature".into())
        );
        let x509 = b"-----BEGIN SIGNED MESSAGE-----\nMIAGCSqGSIb3DQEHAqCAMIACAQEx\n-----END SIGNED MESSAGE-----\n";
        assert_eq!(
            verify(&with_signature(&unsigned, x509), &[]),
            Verdict::BadSignature("an X.509 signature, not an SSH signature".into())
        );
    }

    #[test]
    fn garbage_is_a_bad_signature_or_unsigned_and_never_a_panic() {
        let scratch = Scratch::new("sha1");
        let unsigned = scratch.commit(None);
        let armours: [&[u8]; 6] = [
            b"garbage",
            b"",
            b"-----BEGIN SSH SIGNATURE-----\nnot base64 at all!\n-----END SSH SIGNATURE-----\n",
            b"-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n",
            b"-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAf////8=\n-----END SSH SIGNATURE-----\n",
            b"-----BEGIN SSH SIGNATURE-----\n",
        ];
        for armour in armours {
            let verdict = verify(&with_signature(&unsigned, armour), &[]);
            assert!(is_bad(&verdict), "{:?}: {verdict:?}", String::from_utf8_lossy(armour));
        }
        let huge = [b"-----BEGIN SSH SIGNATURE-----\n".as_slice(), &vec![b'A'; 2 * MAX_SIGNATURE_LEN]].concat();
        assert!(is_bad(&verify(&with_signature(&unsigned, &huge), &[])));
        assert_eq!(verify(b"", &[]), Verdict::Unsigned);
        assert_eq!(verify(b"\xff\x00\n\n\xfe", &[]), Verdict::Unsigned);
        assert!(is_bad(&verify(b"gpgsig \xff\n \x00\n\n", &[])));
    }

    #[test]
    fn the_payload_is_the_commit_without_its_signature() {
        let raw = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor A <a@b> 1 +0000\n\
                    gpgsig -----BEGIN SSH SIGNATURE-----\n abc\n -----END SSH SIGNATURE-----\n\
                    committer C <c@d> 1 +0000\n\nmessage\n gpgsig in the message\n";
        let SignedCommit { payload, signature } = split_signature(raw).expect("a signature header");
        assert_eq!(
            String::from_utf8(payload).expect("text"),
            "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor A <a@b> 1 +0000\n\
             committer C <c@d> 1 +0000\n\nmessage\n gpgsig in the message\n"
        );
        assert_eq!(signature, b"-----BEGIN SSH SIGNATURE-----\nabc\n-----END SSH SIGNATURE-----\n");
    }

    #[test]
    fn a_line_that_is_not_a_key_says_why() {
        let cases = [
            ("", "empty"),
            ("   \n", "empty"),
            ("garbage", "not an OpenSSH public key line"),
            ("ssh-ed25519 not-base64!", "not an OpenSSH public key line"),
            ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA==", "not an OpenSSH public key line"),
            ("ssh-ed25519 AAAA\nssh-ed25519 AAAA", "one public key a line"),
        ];
        for (line, expected) in cases {
            let error = Signer::parse(line).expect_err(line);
            assert!(error.contains(expected), "{line:?}: {error}");
        }
        let long = format!("ssh-rsa {}", "A".repeat(MAX_KEY_LINE_LEN));
        assert!(Signer::parse(&long).expect_err("too long").contains("at most"));
    }

    #[test]
    fn keys_ring_cannot_verify_are_refused_as_signers() {
        let scratch = Scratch::new("sha1");
        let p521 = scratch.key("p521", "ecdsa", &["-b", "521"]);
        let small_rsa = scratch.key("rsa1024", "rsa", &["-b", "1024"]);
        let p521_error = Signer::parse(&p521.public_line).expect_err("P-521");
        assert!(p521_error.contains("ecdsa-sha2-nistp521 keys are not supported"), "{p521_error}");
        let rsa_error = Signer::parse(&small_rsa.public_line).expect_err("RSA 1024");
        assert_eq!(rsa_error, "an RSA key of 1024 bits; 2048 to 8192 are supported");
        // One of them signing is a bad signature, whoever is listed.
        let raw = scratch.commit(Some(&p521));
        assert!(is_bad(&verify(&raw, &[])));
    }

    /// `commit` with its first header that starts with `from` starting with `to` instead.
    fn rename_header(commit: &[u8], from: &str, to: &str) -> Vec<u8> {
        let needle = format!("\n{from}");
        let at = commit.windows(needle.len()).position(|window| window == needle.as_bytes()).expect("the header") + 1;
        [&commit[..at], to.as_bytes(), &commit[at + from.len()..]].concat()
    }
}

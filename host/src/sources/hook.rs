//! A source's inbound hook (SPEC §20.3): `POST /hooks/sources/<id>`, signed as GitHub,
//! GitLab or the Standard Webhooks specification (§18) sign, asks for a refresh of the
//! source — nothing more. The body is never parsed: it is only the signed bytes.
//!
//! - **The signature is the authentication**, checked in constant time against the
//!   source's hook secret (opened with the deployment's key): GitHub's
//!   `X-Hub-Signature-256` (HMAC-SHA256 of the body keyed with the secret's text),
//!   GitLab's `X-Gitlab-Token` (the secret itself), or `webhook-id`, `webhook-timestamp`
//!   and `webhook-signature` (keyed with the secret's bytes, the timestamp within
//!   [`TOLERANCE`]). Without one that holds, nothing is done.
//! - **A delivery is acted on once**: its id (`X-GitHub-Delivery`,
//!   `X-Gitlab-Event-UUID` or `Idempotency-Key`, `webhook-id`) is inserted into
//!   `source_hook_deliveries`, and the replica whose insert took it acts; one seen in
//!   the last [`REMEMBERED`] is ignored. Older ids are deleted as hooks come.
//! - **Hooks are coalesced in the database**, so that replicas agree: the source's
//!   window row (its row of `source_hook_deliveries` with the empty delivery id, which
//!   no delivery has) holds when its last hook refresh runs or ran. A hook joins a
//!   refresh yet to run, comes [`WINDOW`] after one that ran less than that ago, or runs
//!   now ([`refresh_at`]); the source's `due_ms` is brought forward to it, and the
//!   runner's claim runs one cycle for every hook of the window. A hook that comes while
//!   a cycle runs sets `due_ms` after the claim, which the runner keeps when it ends the
//!   cycle: no hook is dropped.
//! - The answer is `202 {"accepted": true, "refreshAt"}` without waiting for the cycle,
//!   or `200 {"ignored": "duplicate delivery"}`. The log names the tenant, the delivery
//!   and the outcome, never the secret or the body.

use std::time::{Duration, SystemTime};

use data_encoding::{BASE64, HEXLOWER_PERMISSIVE};
use hmac::Mac;
use hyper::HeaderMap;
use serde_json::{Value, json};

use super::now_ms;
use crate::api::{ApiError, Code};
use crate::db::{self, Conn, Pool, Tx, params};
use crate::secrets::{self, Key, Place};
use crate::webhooks::sign;

/// Where hooks are served: the source's hook id follows.
pub const PATH: &str = "/hooks/sources/";
/// The largest body a hook may carry.
pub const MAX_BODY: usize = 1 << 20;
/// At most one hook refresh per source in this time; hooks faster than that wait for
/// the end of the window, together.
pub const WINDOW: Duration = Duration::from_secs(10);
/// How long a delivery id is remembered.
pub const REMEMBERED: Duration = Duration::from_secs(24 * 3600);
/// How far a Standard Webhooks `webhook-timestamp` may be from the server's clock.
pub const TOLERANCE: Duration = Duration::from_secs(5 * 60);
/// The longest delivery id kept.
const MAX_DELIVERY: usize = 256;

/// Receives the hooks of every source: the database, the key that opens their
/// secrets, and whether this deployment writes at all.
pub struct Hooks {
    db: Pool,
    key: Option<Key>,
    read_only: bool,
}

/// What a hook was answered, and the tenant of its source when it names one.
pub struct Heard {
    pub tenant: Option<String>,
    pub outcome: Result<Outcome, ApiError>,
}

/// What a signed hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A refresh runs at this time (milliseconds since the epoch).
    Accepted { refresh_at_ms: i64 },
    /// Its delivery id was seen in the last day: nothing done.
    Duplicate,
}

impl Outcome {
    /// The answer's body.
    pub fn body(&self) -> Value {
        match self {
            Outcome::Accepted { refresh_at_ms } => {
                let at = SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(*refresh_at_ms).unwrap_or(0));
                json!({"accepted": true, "refreshAt": humantime::format_rfc3339_millis(at).to_string()})
            }
            Outcome::Duplicate => json!({"ignored": "duplicate delivery"}),
        }
    }
}

impl Hooks {
    pub fn new(db: Pool, key: Option<Key>, read_only: bool) -> Hooks {
        Hooks { db, key, read_only }
    }

    /// Serves the hook of the source `id` with the request's `headers` and `body`. Runs
    /// on a blocking thread.
    pub fn receive(&self, id: &str, headers: &HeaderMap, body: &[u8]) -> Heard {
        let found = match self.source(id) {
            Ok(found) => found,
            Err(error) => return Heard { tenant: None, outcome: Err(error) },
        };
        let Some((tenant, stored_secret)) = found else {
            return Heard { tenant: None, outcome: Err(ApiError::not_found("no source has this hook")) };
        };
        let (delivery, outcome) = self.act(&tenant, id, &stored_secret, headers, body);
        let delivery = delivery.as_deref().unwrap_or("-");
        match &outcome {
            Ok(Outcome::Accepted { .. }) => tracing::info!(%tenant, delivery, outcome = "accepted", "source hook"),
            Ok(Outcome::Duplicate) => tracing::info!(%tenant, delivery, outcome = "duplicate", "source hook"),
            Err(error) => tracing::info!(%tenant, delivery, outcome = error.code.as_str(), "source hook"),
        }
        Heard { tenant: Some(tenant), outcome }
    }

    /// The tenant and stored hook secret of the source whose hook is `id`.
    fn source(&self, id: &str) -> Result<Option<(String, String)>, ApiError> {
        let db = self.db.get()?;
        let found = db.query_opt("SELECT tenant, hook_secret FROM sources WHERE id = ?1", params![id], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
        Ok(found)
    }

    /// Checks the signature, then records the delivery and the refresh; the delivery id
    /// (once the hook is authenticated) and what was done.
    fn act(
        &self,
        tenant: &str,
        id: &str,
        stored_secret: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> (Option<String>, Result<Outcome, ApiError>) {
        let place = Place { column: "sources.hook_secret", row: &[tenant] };
        let secret = match secrets::reveal(self.key.as_ref(), stored_secret, place) {
            Ok(secret) => secret,
            Err(error) => return (None, Err(ApiError::internal(format_args!("the hook secret of a source: {error}")))),
        };
        let Some(verified) = verify(&secret, headers, body, now_ms()) else {
            let message = "the hook's signature is missing or wrong: sign it with the secret the source's put answered";
            return (None, Err(ApiError::new(Code::Unauthenticated, message)));
        };
        let delivery = match delivery_id(verified.delivery) {
            Ok(delivery) => delivery,
            Err(error) => return (None, Err(error)),
        };
        if self.read_only {
            let message = "hooks are not served: this deployment is read-only";
            return (delivery, Err(ApiError::new(Code::Unsupported, message)));
        }
        let recorded = self.db.get().map_err(ApiError::from).and_then(|db| {
            // The tenant's write lock, as every writer of the tenant's rows takes it.
            db::transaction(&db, Tx::Write(tenant), |db| record(db, id, delivery.as_deref(), now_ms()))
        });
        (delivery, recorded)
    }
}

/// Records an authenticated hook at `now`: forgets old delivery ids, takes this one
/// (or finds it taken), and brings the source's next cycle forward to the refresh the
/// hook joins.
fn record(db: &Conn, id: &str, delivery: Option<&str>, now: i64) -> Result<Outcome, ApiError> {
    let remembered = i64::try_from(REMEMBERED.as_millis()).unwrap_or(i64::MAX);
    db.execute("DELETE FROM source_hook_deliveries WHERE at_ms < ?1", params![now.saturating_sub(remembered)])?;
    if let Some(delivery) = delivery {
        let taken = db.execute(
            "INSERT INTO source_hook_deliveries (id, delivery, at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (id, delivery) DO NOTHING",
            params![id, delivery, now],
        )?;
        if taken == 0 {
            return Ok(Outcome::Duplicate);
        }
    }
    let last: Option<i64> =
        db.query_opt("SELECT at_ms FROM source_hook_deliveries WHERE id = ?1 AND delivery = ''", params![id], |row| {
            row.get(0)
        })?;
    let refresh_at_ms = refresh_at(last, now);
    db.execute(
        "INSERT INTO source_hook_deliveries (id, delivery, at_ms) VALUES (?1, '', ?2)
         ON CONFLICT (id, delivery) DO UPDATE SET at_ms = excluded.at_ms",
        params![id, refresh_at_ms],
    )?;
    // A cycle being run may have asked for the head before this hook's push: the next
    // is due at the refresh (after the claim, which the runner keeps). Otherwise the
    // next cycle is brought forward to the refresh, never put off.
    let changed = db.execute(
        "UPDATE sources SET due_ms = CASE
           WHEN holder IS NOT NULL AND claimed_until_ms > ?2 THEN ?3
           WHEN due_ms < ?3 THEN due_ms
           ELSE ?3 END
         WHERE id = ?1",
        params![id, now, refresh_at_ms],
    )?;
    if changed == 0 {
        // The source was deleted or put again (a new id) since it was found.
        return Err(ApiError::not_found("no source has this hook"));
    }
    Ok(Outcome::Accepted { refresh_at_ms })
}

/// When the refresh a hook at `now` asks for runs, given when the source's last hook
/// refresh runs or ran (`last`): the same refresh if it is yet to run; [`WINDOW`] after
/// it if it ran less than that ago; else now.
fn refresh_at(last: Option<i64>, now: i64) -> i64 {
    let window = i64::try_from(WINDOW.as_millis()).unwrap_or(i64::MAX);
    match last {
        Some(last) if last >= now => last,
        Some(last) if now - last < window => last + window,
        _ => now,
    }
}

/// A scheme's signature that holds, and the delivery id its headers name.
#[derive(Debug, PartialEq, Eq)]
struct Verified {
    delivery: Option<String>,
}

/// Whether one of the schemes the hook's headers use holds for `secret`: GitHub's,
/// GitLab's, or the Standard Webhooks specification's.
fn verify(secret: &str, headers: &HeaderMap, body: &[u8], now_ms: i64) -> Option<Verified> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let named = |name: &str| header(name).map(str::to_owned);
    if let Some(signature) = header("x-hub-signature-256")
        && github(secret, signature, body)
    {
        return Some(Verified { delivery: named("x-github-delivery") });
    }
    if let Some(token) = header("x-gitlab-token")
        && same_text(token, secret)
    {
        return Some(Verified { delivery: named("x-gitlab-event-uuid").or_else(|| named("idempotency-key")) });
    }
    if let (Some(id), Some(timestamp), Some(signatures)) =
        (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"))
        && standard(secret, [id, timestamp, signatures], body, now_ms)
    {
        return Some(Verified { delivery: Some(id.to_owned()) });
    }
    None
}

/// `sha256=` and the hex of HMAC-SHA256 over the body, keyed with the secret's text.
fn github(secret: &str, signature: &str, body: &[u8]) -> bool {
    let Some(hex) = signature.strip_prefix("sha256=") else { return false };
    let Ok(tag) = HEXLOWER_PERMISSIVE.decode(hex.as_bytes()) else { return false };
    let mut mac = sign::mac(secret.as_bytes());
    mac.update(body);
    mac.verify_slice(&tag).is_ok()
}

/// Whether two texts are the same, in constant time: their HMACs under one fresh key
/// are compared, so that neither where they first differ nor (beyond hashing) how long
/// the text sent is shows in the time taken.
fn same_text(sent: &str, expected: &str) -> bool {
    let key: [u8; 32] = rand::random();
    let tag = |text: &str| {
        let mut mac = sign::mac(&key);
        mac.update(text.as_bytes());
        mac
    };
    tag(sent).verify_slice(&tag(expected).finalize().into_bytes()).is_ok()
}

/// `webhook-signature` as §18 makes it: one or more `v1,<base64>` (space-separated) of
/// HMAC-SHA256 over `id.timestamp.body`, keyed with the secret's bytes (the base64
/// after `whsec_`, as `put` makes it); the timestamp
/// (Unix seconds) within [`TOLERANCE`] of `now_ms`.
fn standard(secret: &str, [id, timestamp, signatures]: [&str; 3], body: &[u8], now_ms: i64) -> bool {
    let Ok(key) = sign::key(secret) else { return false };
    let Ok(seconds) = timestamp.parse::<i64>() else { return false };
    let tolerance = i64::try_from(TOLERANCE.as_secs()).unwrap_or(i64::MAX);
    if seconds.saturating_sub(now_ms.div_euclid(1000)).saturating_abs() > tolerance {
        return false;
    }
    let signed = sign::message_mac(&key, id, timestamp, body);
    signatures
        .split(' ')
        .filter_map(|signature| signature.strip_prefix("v1,"))
        .any(|encoded| BASE64.decode(encoded.as_bytes()).is_ok_and(|tag| signed.clone().verify_slice(&tag).is_ok()))
}

/// A delivery id as kept: none when the header is absent or empty; at most
/// [`MAX_DELIVERY`] visible ASCII characters.
fn delivery_id(delivery: Option<String>) -> Result<Option<String>, ApiError> {
    let Some(delivery) = delivery.map(|delivery| delivery.trim().to_owned()).filter(|delivery| !delivery.is_empty())
    else {
        return Ok(None);
    };
    if delivery.len() > MAX_DELIVERY || !delivery.bytes().all(|byte| byte.is_ascii_graphic()) {
        let message = format!("a hook's delivery id is at most {MAX_DELIVERY} visible ASCII characters");
        return Err(ApiError::new(Code::InvalidArgument, message));
    }
    Ok(Some(delivery))
}

#[cfg(test)]
mod tests {
    use hyper::header::{HeaderName, HeaderValue};

    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const NOW_MS: i64 = 1_614_265_330_000;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(HeaderName::from_static(name), HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    fn github_signature(secret: &str, body: &[u8]) -> String {
        let mut mac = sign::mac(secret.as_bytes());
        mac.update(body);
        format!("sha256={}", data_encoding::HEXLOWER.encode(&mac.finalize().into_bytes()))
    }

    #[test]
    fn github_signs_the_body_with_the_secrets_text() {
        let body = br#"{"ref": "refs/heads/main"}"#;
        let signature = github_signature(SECRET, body);
        let signed = headers(&[("x-hub-signature-256", &signature), ("x-github-delivery", "d-1")]);
        assert_eq!(verify(SECRET, &signed, body, NOW_MS), Some(Verified { delivery: Some("d-1".into()) }));
        assert_eq!(verify(SECRET, &signed, b"another body", NOW_MS), None);
        assert_eq!(verify("whsec_another", &signed, body, NOW_MS), None);
        let upper = headers(&[("x-hub-signature-256", &signature.to_uppercase().replace("SHA256=", "sha256="))]);
        assert!(verify(SECRET, &upper, body, NOW_MS).is_some(), "hex in either case");
        for wrong in ["", "sha256=", "sha256=zz", "sha1=00", &signature[..signature.len() - 2]] {
            assert_eq!(verify(SECRET, &headers(&[("x-hub-signature-256", wrong)]), body, NOW_MS), None, "{wrong}");
        }
    }

    #[test]
    fn gitlab_sends_the_secret_itself() {
        let sent = headers(&[("x-gitlab-token", SECRET), ("x-gitlab-event-uuid", "u-1")]);
        assert_eq!(verify(SECRET, &sent, b"", NOW_MS), Some(Verified { delivery: Some("u-1".into()) }));
        let keyed = headers(&[("x-gitlab-token", SECRET), ("idempotency-key", "k-1")]);
        assert_eq!(verify(SECRET, &keyed, b"", NOW_MS), Some(Verified { delivery: Some("k-1".into()) }));
        for wrong in ["", "whsec_", &SECRET[..SECRET.len() - 1], &format!("{SECRET}x")] {
            assert_eq!(verify(SECRET, &headers(&[("x-gitlab-token", wrong)]), b"", NOW_MS), None, "{wrong}");
        }
    }

    #[test]
    fn standard_webhooks_sign_id_timestamp_and_body_with_the_secrets_bytes() {
        // The example of the Standard Webhooks specification's reference libraries.
        let body = br#"{"test": 2432232314}"#;
        let good = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        let signed = |timestamp: &str, signature: &str| {
            headers(&[
                ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
                ("webhook-timestamp", timestamp),
                ("webhook-signature", signature),
            ])
        };
        let verified = Some(Verified { delivery: Some("msg_p5jXN8AQM9LWM0D4loKWxJek".into()) });
        assert_eq!(verify(SECRET, &signed("1614265330", good), body, NOW_MS), verified);
        // One of several signatures (a secret being rotated) is enough.
        let several = format!("v1,AAAA v2,xyz {good}");
        assert!(verify(SECRET, &signed("1614265330", &several), body, NOW_MS).is_some());
        // Within five minutes either way, not beyond.
        assert!(verify(SECRET, &signed("1614265330", good), body, NOW_MS + 299_000).is_some());
        assert_eq!(verify(SECRET, &signed("1614265330", good), body, NOW_MS + 301_000), None);
        assert_eq!(verify(SECRET, &signed("1614265330", good), body, NOW_MS - 301_000), None);
        assert_eq!(verify(SECRET, &signed("1614265331", good), body, NOW_MS), None, "the timestamp is signed");
        assert_eq!(verify(SECRET, &signed("soon", good), body, NOW_MS), None);
        assert_eq!(verify(SECRET, &signed("1614265330", good), b"{}", NOW_MS), None);
        assert_eq!(verify(SECRET, &signed("1614265330", &good.replace("v1,", "v2,")), body, NOW_MS), None);
    }

    #[test]
    fn no_signature_is_no_hook() {
        assert_eq!(verify(SECRET, &HeaderMap::new(), b"", NOW_MS), None);
        let unsigned = headers(&[("x-github-delivery", "d-1"), ("webhook-id", "m-1")]);
        assert_eq!(verify(SECRET, &unsigned, b"", NOW_MS), None);
    }

    #[test]
    fn hooks_faster_than_the_window_wait_for_its_end_together() {
        let window = 10_000;
        assert_eq!(refresh_at(None, 1_000), 1_000, "the first hook refreshes now");
        assert_eq!(refresh_at(Some(1_000), 1_000), 1_000, "joins the refresh not run yet");
        assert_eq!(refresh_at(Some(1_000), 3_000), 1_000 + window, "too soon after one: the window's end");
        assert_eq!(refresh_at(Some(11_000), 5_000), 11_000, "joins the refresh at the window's end");
        assert_eq!(refresh_at(Some(11_000), 12_000), 11_000 + window, "the next window");
        assert_eq!(refresh_at(Some(1_000), 1_000 + window), 1_000 + window, "a window on: now");
        assert_eq!(refresh_at(Some(1_000), 60_000), 60_000);
    }

    #[test]
    fn delivery_ids_are_short_visible_text() {
        assert_eq!(delivery_id(None).unwrap(), None);
        assert_eq!(delivery_id(Some("  ".into())).unwrap(), None);
        assert_eq!(delivery_id(Some(" d-1 ".into())).unwrap(), Some("d-1".into()));
        assert!(delivery_id(Some("a b".into())).is_err());
        assert!(delivery_id(Some("x".repeat(MAX_DELIVERY + 1))).is_err());
    }

    /// A source row of tenant `acme` whose hook is `hook-1`, due at `due_ms`.
    fn source(db: &crate::testing::Database, due_ms: i64) {
        db.conn()
            .execute(
                "INSERT INTO sources (tenant, id, url, branch, path, mode, prune, heal, interval_ms, signers,
                   hook_secret, token, principal, state, due_ms, updated_at)
                 VALUES ('acme', 'hook-1', 'git://example', 'main', '.', 'auto', 0, 0, 180000, '[]', ?1, 't', 'p',
                   'synced', ?2, 'now')",
                params![SECRET, due_ms],
            )
            .unwrap();
    }

    fn due_ms(db: &crate::testing::Database) -> i64 {
        db.conn().query_one("SELECT due_ms FROM sources WHERE id = 'hook-1'", &[], |row| row.get(0)).unwrap()
    }

    #[test]
    fn a_delivery_is_taken_once_and_its_refresh_brings_the_cycle_forward() {
        let db = crate::testing::Database::new();
        source(&db, NOW_MS + 180_000);
        let record = |delivery: Option<&str>, now: i64| record(&db.conn(), "hook-1", delivery, now).unwrap();
        assert_eq!(record(Some("d-1"), NOW_MS), Outcome::Accepted { refresh_at_ms: NOW_MS });
        assert_eq!(due_ms(&db), NOW_MS);
        assert_eq!(record(Some("d-1"), NOW_MS + 1), Outcome::Duplicate);
        // Faster than the window: one refresh at its end, which a due cycle is not put off by.
        assert_eq!(record(Some("d-2"), NOW_MS + 2_000), Outcome::Accepted { refresh_at_ms: NOW_MS + 10_000 });
        assert_eq!(record(None, NOW_MS + 3_000), Outcome::Accepted { refresh_at_ms: NOW_MS + 10_000 });
        assert_eq!(due_ms(&db), NOW_MS, "still due now");
        // A day on, the id is forgotten.
        let later = NOW_MS + 24 * 3600 * 1000 + 1;
        assert_eq!(record(Some("d-1"), later), Outcome::Accepted { refresh_at_ms: later });
    }

    #[test]
    fn a_hook_during_a_cycle_asks_for_another_after_it() {
        let db = crate::testing::Database::new();
        source(&db, NOW_MS - 1_000);
        // A replica claimed the cycle due a second ago, and holds it for a while yet.
        db.conn().execute("UPDATE sources SET holder = 'r', claimed_until_ms = ?1", params![NOW_MS + 60_000]).unwrap();
        assert_eq!(
            record(&db.conn(), "hook-1", Some("d-1"), NOW_MS).unwrap(),
            Outcome::Accepted { refresh_at_ms: NOW_MS }
        );
        assert_eq!(due_ms(&db), NOW_MS, "after the claim");
        assert!(record(&db.conn(), "gone", None, NOW_MS).is_err());
    }
}

//! The webhooks' signing secrets at rest (SPEC §20.4): each sealed by `crate::secrets`
//! for its row (`webhooks.secret` of its tenant and name) when the deployment has a key,
//! opened to sign; and what a server does with them at start ([`prepare`]) and `fleet
//! admin secret-key rotate` ([`rotate`]), each of which writes every tenant's rows in one
//! transaction, serialized with migrations and other replicas' starts (`Tx::Schema`).
//!
//! A row is only ever rewritten if it still holds what was read (`AND secret = ?`), so a
//! `put` that wrote it meanwhile is never undone. Errors and log lines name a webhook
//! (`tenant/name`), never its secret.

use anyhow::bail;

use crate::api::ApiError;
use crate::db::{self, Conn, params};
use crate::secrets::{self, Key, Place};

/// The column the secrets are kept in, as their associated data names it.
const COLUMN: &str = "webhooks.secret";
/// How many webhooks an error names before it counts the rest.
const NAMED: usize = 3;

fn place<'a>(identity: &'a [&'a str; 2]) -> Place<'a> {
    Place { column: COLUMN, row: identity }
}

/// What to store for a new secret of webhook `name`: sealed when there is a key.
pub(super) fn store(key: Option<&Key>, tenant: &str, name: &str, secret: &str) -> Result<String, ApiError> {
    secrets::store(key, secret, place(&[tenant, name])).map_err(ApiError::internal)
}

/// What to store for the secret a webhook put again keeps: what is stored already, or
/// sealed now if it was stored before there was a key.
pub(super) fn keep(key: Option<&Key>, tenant: &str, name: &str, stored: String) -> Result<String, ApiError> {
    match key {
        Some(key) if !secrets::is_sealed(&stored) => store(Some(key), tenant, name, &stored),
        _ => Ok(stored),
    }
}

/// The secret that signs webhook `name`'s deliveries.
pub(super) fn reveal(key: Option<&Key>, tenant: &str, name: &str, stored: &str) -> Result<String, secrets::Error> {
    secrets::reveal(key, stored, place(&[tenant, name]))
}

/// One webhook's stored secret.
struct Stored {
    tenant: String,
    name: String,
    secret: String,
}

impl Stored {
    fn named(&self) -> String {
        format!("{}/{}", self.tenant, self.name)
    }
}

fn every_secret(db: &Conn) -> Result<Vec<Stored>, ApiError> {
    Ok(db.query("SELECT tenant, name, secret FROM webhooks ORDER BY tenant, name", &[], |row| {
        Ok(Stored { tenant: row.get(0)?, name: row.get(1)?, secret: row.get(2)? })
    })?)
}

/// `acme/ops, acme/chat and 4 more`.
fn names(webhooks: &[&Stored]) -> String {
    let named: Vec<String> = webhooks.iter().take(NAMED).map(|webhook| webhook.named()).collect();
    match webhooks.len().saturating_sub(NAMED) {
        0 => named.join(", "),
        more => format!("{} and {more} more", named.join(", ")),
    }
}

/// Replaces a row's secret with `new` if it still holds `was`; whether it did.
fn replace(db: &Conn, stored: &Stored, new: &str) -> Result<bool, ApiError> {
    let changed = db.execute(
        "UPDATE webhooks SET secret = ?3 WHERE tenant = ?1 AND name = ?2 AND secret = ?4",
        params![&stored.tenant, &stored.name, new, &stored.secret],
    )?;
    Ok(changed == 1)
}

/// What a server found of the secrets at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Prepared {
    /// Sealed, and opened by the key.
    pub sealed: usize,
    /// Sealed before this start, and not opened by the key: their deliveries fail until
    /// each is put again with a new secret.
    pub unopened: usize,
    /// Stored unencrypted, and sealed now.
    pub encrypted: usize,
    /// Stored unencrypted, and left so (no key, or a read-only server).
    pub plaintext: usize,
}

/// At a server's start, before it serves: with no key, refuses a database whose secrets
/// are sealed (nothing could sign them) unless the server is read-only (it sends
/// nothing), and says that secrets are stored unencrypted; with a key, refuses one that
/// opens none of the sealed secrets (the wrong key), names each one it does not open, and
/// seals every secret stored unencrypted, in one transaction, unless the server is
/// read-only.
pub fn prepare(db: &Conn, key: Option<&Key>, read_only: bool) -> anyhow::Result<Prepared> {
    let stored = every_secret(db)?;
    let (sealed, plaintext): (Vec<&Stored>, Vec<&Stored>) =
        stored.iter().partition(|webhook| secrets::is_sealed(&webhook.secret));
    let mut prepared = Prepared { sealed: sealed.len(), plaintext: plaintext.len(), ..Prepared::default() };
    let Some(key) = key else {
        if !sealed.is_empty() && !read_only {
            bail!(
                "{} webhook secret(s) in the database are encrypted ({}) and this server has no key to sign their \
                 deliveries with: serve with --secret-key-file FILE (or FLEET_SECRET_KEY_FILE), the key they were \
                 encrypted with",
                sealed.len(),
                names(&sealed)
            );
        }
        if !read_only || !plaintext.is_empty() {
            tracing::warn!(
                "webhook secrets are stored unencrypted in the database: make a key with `fleet admin secret-key \
                 generate -o FILE` and serve with --secret-key-file FILE to encrypt them"
            );
        }
        return Ok(prepared);
    };
    let unopened: Vec<(&Stored, secrets::Error)> = sealed
        .iter()
        .filter_map(|webhook| {
            reveal(Some(key), &webhook.tenant, &webhook.name, &webhook.secret).err().map(|error| (*webhook, error))
        })
        .collect();
    if !sealed.is_empty() && unopened.len() == sealed.len() {
        let all: Vec<&Stored> = unopened.iter().map(|(webhook, _)| *webhook).collect();
        bail!(
            "the key of --secret-key-file decrypts none of the {} encrypted webhook secret(s) ({}): it is not the key \
             they were encrypted with",
            sealed.len(),
            names(&all)
        );
    }
    for (webhook, error) in &unopened {
        tracing::error!(tenant = %webhook.tenant, webhook = %webhook.name, %error,
            "a webhook's secret cannot be read, so its deliveries fail until it is put again with a new secret \
             (\"rotate\": true)");
    }
    prepared.unopened = unopened.len();
    prepared.sealed -= unopened.len();
    if plaintext.is_empty() {
        return Ok(prepared);
    }
    if read_only {
        tracing::warn!(
            count = plaintext.len(),
            "webhook secrets are stored unencrypted; a server that writes, given the key, encrypts them as it starts"
        );
        return Ok(prepared);
    }
    // Read again under the lock: another replica starting may have sealed them already.
    let encrypted = db::transaction(db, db::Tx::Schema, |db| {
        let mut encrypted = 0;
        for webhook in every_secret(db)?.iter().filter(|webhook| !secrets::is_sealed(&webhook.secret)) {
            let sealed = store(Some(key), &webhook.tenant, &webhook.name, &webhook.secret)?;
            encrypted += usize::from(replace(db, webhook, &sealed)?);
        }
        Ok(encrypted)
    })?;
    tracing::info!(count = encrypted, "webhook secrets stored unencrypted were encrypted with the key");
    prepared.encrypted = encrypted;
    prepared.plaintext = plaintext.len().saturating_sub(encrypted);
    Ok(prepared)
}

/// What a rotation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rotated {
    /// Opened with the old key and sealed with the new one.
    pub resealed: usize,
    /// Stored unencrypted, and sealed with the new key.
    pub encrypted: usize,
    /// Sealed with the new key already (a rotation run again).
    pub already: usize,
}

/// Every secret sealed again with `new`, in one transaction: those the old key opens,
/// those stored unencrypted, and none again that the new key opens already (so a
/// rotation can be run again, to catch a secret a server still on the old key sealed
/// since). A secret neither key opens changes nothing and is an error naming it.
pub fn rotate(db: &Conn, old: &Key, new: &Key) -> Result<Rotated, ApiError> {
    db::transaction(db, db::Tx::Schema, |db| {
        let mut rotated = Rotated::default();
        let mut unopened = Vec::new();
        let stored = every_secret(db)?;
        for webhook in &stored {
            let secret = match reveal(Some(old), &webhook.tenant, &webhook.name, &webhook.secret) {
                Ok(secret) if secrets::is_sealed(&webhook.secret) => {
                    rotated.resealed += 1;
                    secret
                }
                Ok(secret) => {
                    rotated.encrypted += 1;
                    secret
                }
                Err(_) if reveal(Some(new), &webhook.tenant, &webhook.name, &webhook.secret).is_ok() => {
                    rotated.already += 1;
                    continue;
                }
                Err(_) => {
                    unopened.push(webhook);
                    continue;
                }
            };
            let sealed = store(Some(new), &webhook.tenant, &webhook.name, &secret)?;
            if !replace(db, webhook, &sealed)? {
                return Err(ApiError::failed_precondition(format!(
                    "the secret of webhook {} changed during the rotation; run it again",
                    webhook.named()
                )));
            }
        }
        if !unopened.is_empty() {
            return Err(ApiError::failed_precondition(format!(
                "{} webhook secret(s) decrypt with neither the old key nor the new one ({}); nothing was changed",
                unopened.len(),
                names(&unopened)
            )));
        }
        Ok(rotated)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Database;

    fn key() -> Key {
        Key::new(&secrets::generate().unwrap()).unwrap()
    }

    fn webhook(db: &Conn, tenant: &str, name: &str, secret: &str) {
        db.execute(
            "INSERT INTO webhooks (tenant, name, url, events, secret, enabled, disabled, updated_at, updated_by)
             VALUES (?1, ?2, 'https://example.com/', ',*,', ?3, 1, NULL, '2026-12-07T00:00:00Z', 'alice')",
            params![tenant, name, secret],
        )
        .unwrap();
    }

    fn secret(db: &Conn, tenant: &str, name: &str) -> String {
        db.query_one("SELECT secret FROM webhooks WHERE tenant = ?1 AND name = ?2", params![tenant, name], |row| {
            row.get(0)
        })
        .unwrap()
    }

    #[test]
    fn a_first_key_seals_what_was_plaintext_and_a_read_only_server_leaves_it() {
        let database = Database::new();
        let db = database.conn();
        webhook(&db, "acme", "ops", "whsec_one");
        webhook(&db, "other", "ops", "whsec_two");
        assert_eq!(prepare(&db, None, false).unwrap(), Prepared { plaintext: 2, ..Prepared::default() });
        let key = key();
        assert_eq!(prepare(&db, Some(&key), true).unwrap(), Prepared { plaintext: 2, ..Prepared::default() });
        assert_eq!(secret(&db, "acme", "ops"), "whsec_one");
        assert_eq!(prepare(&db, Some(&key), false).unwrap(), Prepared { encrypted: 2, ..Prepared::default() });
        let sealed = secret(&db, "acme", "ops");
        assert!(secrets::is_sealed(&sealed) && !sealed.contains("whsec_one"), "{sealed}");
        assert_eq!(reveal(Some(&key), "acme", "ops", &sealed).unwrap(), "whsec_one");
        assert_eq!(reveal(Some(&key), "other", "ops", &sealed), Err(secrets::Error::Unopened));
        assert_eq!(prepare(&db, Some(&key), false).unwrap(), Prepared { sealed: 2, ..Prepared::default() });
    }

    #[test]
    fn no_key_or_the_wrong_key_refuses_sealed_secrets() {
        let database = Database::new();
        let db = database.conn();
        let key = key();
        webhook(&db, "acme", "ops", &store(Some(&key), "acme", "ops", "whsec_one").unwrap());
        let refused = prepare(&db, None, false).unwrap_err().to_string();
        assert!(refused.contains("acme/ops") && refused.contains("--secret-key-file"), "{refused}");
        // A read-only server sends nothing, and needs no key.
        assert_eq!(prepare(&db, None, true).unwrap(), Prepared { sealed: 1, ..Prepared::default() });
        let refused = prepare(&db, Some(&self::key()), false).unwrap_err().to_string();
        assert!(refused.contains("decrypts none") && refused.contains("acme/ops"), "{refused}");
        assert!(!refused.contains("whsec_"), "{refused}");
        // A row the key does not open (copied from another) beside one it does: named in
        // the log, and the server starts.
        let copied = secret(&db, "acme", "ops");
        webhook(&db, "acme", "copy", &copied);
        assert_eq!(
            prepare(&db, Some(&key), false).unwrap(),
            Prepared { sealed: 1, unopened: 1, ..Prepared::default() }
        );
    }

    #[test]
    fn a_rotation_reseals_every_secret_once_and_refuses_what_neither_key_opens() {
        let database = Database::new();
        let db = database.conn();
        let (old, new) = (key(), key());
        webhook(&db, "acme", "ops", &store(Some(&old), "acme", "ops", "whsec_one").unwrap());
        webhook(&db, "other", "chat", "whsec_two");
        assert_eq!(rotate(&db, &old, &new).unwrap(), Rotated { resealed: 1, encrypted: 1, already: 0 });
        assert_eq!(reveal(Some(&new), "acme", "ops", &secret(&db, "acme", "ops")).unwrap(), "whsec_one");
        assert_eq!(reveal(Some(&new), "other", "chat", &secret(&db, "other", "chat")).unwrap(), "whsec_two");
        assert!(reveal(Some(&old), "acme", "ops", &secret(&db, "acme", "ops")).is_err());
        // Run again: nothing left to do.
        assert_eq!(rotate(&db, &old, &new).unwrap(), Rotated { already: 2, ..Rotated::default() });
        // A secret of a third key: refused, naming it, and nothing changed.
        webhook(&db, "acme", "stray", &store(Some(&key()), "acme", "stray", "whsec_three").unwrap());
        let before = secret(&db, "acme", "ops");
        let refused = rotate(&db, &new, &old).unwrap_err();
        assert!(refused.message.contains("acme/stray") && !refused.message.contains("whsec_"), "{refused}");
        assert_eq!(secret(&db, "acme", "ops"), before, "rolled back");
    }
}

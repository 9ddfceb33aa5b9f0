//! Every secret sealed at rest (SPEC §20.4) — webhooks' signing secrets, git sources'
//! hook secrets and credentials — as a server finds them at start ([`prepare`]) and as
//! `fleet admin secret-key rotate` re-seals them ([`rotate`]), each writing every
//! tenant's rows in one transaction, serialized with migrations and other replicas'
//! starts (`Tx::Schema`).
//!
//! A row is only ever rewritten if it still holds what was read (`AND <column> = ?`),
//! so a `put` that wrote it meanwhile is never undone. Errors and log lines name a
//! secret by its kind and row (`webhook secret acme/ops`), never by its value.

use anyhow::bail;

use super::{Key, Place};
use crate::api::ApiError;
use crate::db::{self, Conn, Param};

/// A column that holds sealed secrets: its place (the associated data's first part),
/// its table, and the columns that identify a row, in the order the place names them.
pub struct Column {
    pub place: &'static str,
    table: &'static str,
    value: &'static str,
    keys: &'static [&'static str],
    /// What people call one of its values.
    what: &'static str,
}

/// Every column of the schema that holds sealed secrets.
pub const COLUMNS: [Column; 3] = [
    Column {
        place: "webhooks.secret",
        table: "webhooks",
        value: "secret",
        keys: &["tenant", "name"],
        what: "webhook secret",
    },
    Column {
        place: "sources.hook_secret",
        table: "sources",
        value: "hook_secret",
        keys: &["tenant"],
        what: "source hook secret",
    },
    Column {
        place: "sources.credential",
        table: "sources",
        value: "credential",
        keys: &["tenant"],
        what: "source credential",
    },
];

/// How many secrets an error names before it counts the rest.
const NAMED: usize = 3;

/// One stored secret, and where.
struct Stored {
    column: &'static Column,
    row: Vec<String>,
    secret: String,
}

impl Stored {
    fn named(&self) -> String {
        format!("{} {}", self.column.what, self.row.join("/"))
    }

    fn reveal(&self, key: &Key) -> Result<String, super::Error> {
        let row: Vec<&str> = self.row.iter().map(String::as_str).collect();
        super::reveal(Some(key), &self.secret, Place { column: self.column.place, row: &row })
    }

    fn seal(&self, key: &Key, secret: &str) -> Result<String, ApiError> {
        let row: Vec<&str> = self.row.iter().map(String::as_str).collect();
        key.seal(secret, Place { column: self.column.place, row: &row }).map_err(ApiError::internal)
    }
}

fn every_secret(db: &Conn) -> Result<Vec<Stored>, ApiError> {
    let mut every = Vec::new();
    for column in &COLUMNS {
        let keys = column.keys.join(", ");
        let sql = format!(
            "SELECT {keys}, {value} FROM {table} WHERE {value} IS NOT NULL ORDER BY {keys}",
            value = column.value,
            table = column.table
        );
        let rows = db.query(&sql, &[], |row| {
            let mut identity = Vec::with_capacity(column.keys.len());
            for index in 0..column.keys.len() {
                identity.push(row.get::<String>(index)?);
            }
            Ok(Stored { column, row: identity, secret: row.get(column.keys.len())? })
        })?;
        every.extend(rows);
    }
    Ok(every)
}

/// `webhook secret acme/ops, source credential acme and 4 more`.
fn names(secrets: &[&Stored]) -> String {
    let named: Vec<String> = secrets.iter().take(NAMED).map(|stored| stored.named()).collect();
    match secrets.len().saturating_sub(NAMED) {
        0 => named.join(", "),
        more => format!("{} and {more} more", named.join(", ")),
    }
}

/// Replaces a row's secret with `new` if it still holds what was read; whether it did.
fn replace(db: &Conn, stored: &Stored, new: &str) -> Result<bool, ApiError> {
    let column = stored.column;
    let matched: Vec<String> =
        column.keys.iter().enumerate().map(|(index, key)| format!("{key} = ?{}", index + 3)).collect();
    let sql = format!(
        "UPDATE {table} SET {value} = ?1 WHERE {value} = ?2 AND {matched}",
        table = column.table,
        value = column.value,
        matched = matched.join(" AND ")
    );
    let mut params = vec![Param::from(new), Param::from(stored.secret.as_str())];
    params.extend(stored.row.iter().map(|part| Param::from(part.as_str())));
    Ok(db.execute(&sql, &params)? == 1)
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
        stored.iter().partition(|stored| super::is_sealed(&stored.secret));
    let mut prepared = Prepared { sealed: sealed.len(), plaintext: plaintext.len(), ..Prepared::default() };
    let Some(key) = key else {
        if !sealed.is_empty() && !read_only {
            bail!(
                "{} secret(s) in the database are encrypted ({}) and this server has no key to read them with: \
                 serve with --secret-key-file FILE (or FLEET_SECRET_KEY_FILE), the key they were encrypted with",
                sealed.len(),
                names(&sealed)
            );
        }
        if !read_only || !plaintext.is_empty() {
            tracing::warn!(
                "secrets (webhook signing secrets, git source credentials and hook secrets) are stored unencrypted \
                 in the database: make a key with `fleet admin secret-key generate -o FILE` and serve with \
                 --secret-key-file FILE to encrypt them"
            );
        }
        return Ok(prepared);
    };
    let unopened: Vec<(&Stored, super::Error)> =
        sealed.iter().filter_map(|stored| stored.reveal(key).err().map(|error| (*stored, error))).collect();
    if !sealed.is_empty() && unopened.len() == sealed.len() {
        let all: Vec<&Stored> = unopened.iter().map(|(stored, _)| *stored).collect();
        bail!(
            "the key of --secret-key-file decrypts none of the {} encrypted secret(s) ({}): it is not the key they \
             were encrypted with",
            sealed.len(),
            names(&all)
        );
    }
    for (stored, error) in &unopened {
        tracing::error!(secret = %stored.named(), %error,
            "a secret cannot be read: a webhook's deliveries fail until it is put again with a new secret \
             (\"rotate\": true), a source's cycles until it is put again");
    }
    prepared.unopened = unopened.len();
    prepared.sealed -= unopened.len();
    if plaintext.is_empty() {
        return Ok(prepared);
    }
    if read_only {
        tracing::warn!(
            count = plaintext.len(),
            "secrets are stored unencrypted; a server that writes, given the key, encrypts them as it starts"
        );
        return Ok(prepared);
    }
    // Read again under the lock: another replica starting may have sealed them already.
    let encrypted = db::transaction(db, db::Tx::Schema, |db| {
        let mut encrypted = 0;
        for stored in every_secret(db)?.iter().filter(|stored| !super::is_sealed(&stored.secret)) {
            let sealed = stored.seal(key, &stored.secret)?;
            encrypted += usize::from(replace(db, stored, &sealed)?);
        }
        Ok(encrypted)
    })?;
    tracing::info!(count = encrypted, "secrets stored unencrypted were encrypted with the key");
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
        for stored in &stored {
            let secret = match stored.reveal(old) {
                Ok(secret) if super::is_sealed(&stored.secret) => {
                    rotated.resealed += 1;
                    secret
                }
                Ok(secret) => {
                    rotated.encrypted += 1;
                    secret
                }
                Err(_) if stored.reveal(new).is_ok() => {
                    rotated.already += 1;
                    continue;
                }
                Err(_) => {
                    unopened.push(stored);
                    continue;
                }
            };
            let sealed = stored.seal(new, &secret)?;
            if !replace(db, stored, &sealed)? {
                return Err(ApiError::failed_precondition(format!(
                    "the {} changed during the rotation; run it again",
                    stored.named()
                )));
            }
        }
        if !unopened.is_empty() {
            return Err(ApiError::failed_precondition(format!(
                "{} secret(s) decrypt with neither the old key nor the new one ({}); nothing was changed",
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
    use crate::db::params;
    use crate::secrets::{self, Key, Place};
    use crate::testing::Database;

    fn store(key: Option<&Key>, tenant: &str, name: &str, secret: &str) -> Result<String, secrets::Error> {
        secrets::store(key, secret, Place { column: "webhooks.secret", row: &[tenant, name] })
    }

    fn reveal(key: Option<&Key>, tenant: &str, name: &str, stored: &str) -> Result<String, secrets::Error> {
        secrets::reveal(key, stored, Place { column: "webhooks.secret", row: &[tenant, name] })
    }

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

    #[test]
    fn a_sources_credential_and_hook_secret_are_sealed_and_rotated_with_the_rest() {
        let database = Database::new();
        let db = database.conn();
        db.execute(
            "INSERT INTO sources (tenant, id, url, branch, path, mode, prune, heal, interval_ms, credential, signers,
               hook_secret, token, principal, state, due_ms, updated_at)
             VALUES ('acme', 'h1', 'https://example.com/r.git', 'main', '.', 'auto', 0, 0, 60000,
               '{\"token\":\"t0ken\"}', '[]', 'whsec_hook', 'tok', 'alice', 'outOfSync', 0, 'now')",
            &[],
        )
        .unwrap();
        webhook(&db, "acme", "ops", "whsec_one");
        let key = key();
        assert_eq!(prepare(&db, Some(&key), false).unwrap(), Prepared { encrypted: 3, ..Prepared::default() });
        let stored = |column: &str| -> String {
            db.query_one(&format!("SELECT {column} FROM sources"), &[], |row| row.get(0)).unwrap()
        };
        let (credential, hook) = (stored("credential"), stored("hook_secret"));
        assert!(secrets::is_sealed(&credential) && !credential.contains("t0ken"), "{credential}");
        let place = |column| Place { column, row: &["acme"] };
        assert_eq!(secrets::reveal(Some(&key), &hook, place("sources.hook_secret")).unwrap(), "whsec_hook");
        // Sealed for its column: the credential does not open as the hook secret.
        assert!(secrets::reveal(Some(&key), &credential, place("sources.hook_secret")).is_err());

        let new = self::key();
        assert_eq!(rotate(&db, &key, &new).unwrap(), Rotated { resealed: 3, ..Rotated::default() });
        let credential = stored("credential");
        assert_eq!(
            secrets::reveal(Some(&new), &credential, place("sources.credential")).unwrap(),
            "{\"token\":\"t0ken\"}"
        );
    }
}

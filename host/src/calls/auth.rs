//! Bearer tokens, grants and the authorization decision of SPEC §3.
//!
//! Tokens are random, shown once, and stored only as SHA-256 hashes. A grant is
//! `PERMISSION @ SCOPE`; any segment may be `*`.

use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::api::{ApiError, Code};
use crate::cache::{Scope, generation};
use crate::calls::input::is_name;
use crate::db::Conn;
use crate::db::params;

/// Who is calling: one tenant, one principal, and what they may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant: String,
    pub principal: String,
    pub grants: Vec<Grant>,
    /// The id of the token the caller authenticated with; none for the server's own
    /// callers (the drift check, tests).
    pub token: Option<String>,
    /// A git source's cycle and plans only: the source and commit its document comes
    /// from, the policies' `input.source` (SPEC §20.3) as JSON text. Never a request's.
    pub git_source: Option<String>,
}

impl Caller {
    /// The caller as the planner sees it: who, and what they may do (SPEC §14).
    pub fn for_planner(&self) -> fleet_guest::Caller {
        fleet_guest::Caller {
            tenant: self.tenant.clone(),
            principal: self.principal.clone(),
            grants: Some(self.grants.iter().map(Grant::to_string).collect()),
        }
    }
}

/// `PERMISSION @ SCOPE`, e.g. `compute:fleet:admin @ compute-fleet`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    permission: [String; 3],
    scope: String,
}

impl Grant {
    pub fn parse(text: &str) -> Result<Grant, String> {
        let (permission, scope) = text
            .split_once('@')
            .ok_or_else(|| format!("grant {} is not PERMISSION@SCOPE", fleet_guest::grammar::quoted(text)))?;
        let segments: Vec<&str> = permission.trim().split(':').collect();
        let [service, module, action] = segments.as_slice() else {
            return Err(format!("permission {:?} must have three ':'-separated segments", permission.trim()));
        };
        let scope = scope.trim();
        for part in [*service, *module, *action, scope] {
            if part != "*" && !is_name(part) {
                return Err(format!(
                    "{} in grant {} is neither a name nor *",
                    fleet_guest::grammar::quoted(part),
                    fleet_guest::grammar::quoted(text)
                ));
            }
        }
        Ok(Grant { permission: [service.to_string(), module.to_string(), action.to_string()], scope: scope.into() })
    }

    /// Whether this grant allows `permission` (three segments, no wildcards) at `scope`.
    pub fn allows(&self, permission: &str, scope: &str) -> bool {
        let wanted = permission.split(':');
        let segments_match = self.permission.iter().zip(wanted).all(|(have, want)| have == "*" || have == want)
            && permission.split(':').count() == 3;
        segments_match && (self.scope == "*" || self.scope == scope)
    }
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} @ {}", self.permission.join(":"), self.scope)
    }
}

pub fn hash_token(token: &str) -> String {
    data_encoding::HEXLOWER.encode(&Sha256::digest(token.as_bytes()))
}

/// Looks the bearer token up by its hash.
pub fn authenticate(db: &Conn, authorization: Option<&str>) -> Result<Caller, ApiError> {
    authenticate_with(db, authorization, None)
}

/// A token as it was authenticated: what the token cache keeps.
pub struct Authenticated {
    caller: Caller,
    expires_at: Option<String>,
}

/// Authenticated tokens by the SHA-256 of the token (docs/decisions/0010).
pub type TokenCache = crate::cache::Cache<Authenticated>;

/// [`authenticate`], with the tokens authenticated before kept in `cache`: a kept token
/// is taken only while its tenant's tokens are at the generation it was read at, so a
/// revocation (or any other change to them, by any process) is seen at once; its
/// expiry is checked on every request.
pub fn authenticate_with(
    db: &Conn,
    authorization: Option<&str>,
    cache: Option<&TokenCache>,
) -> Result<Caller, ApiError> {
    let unauthenticated = |message: &str| ApiError::new(Code::Unauthenticated, message);
    let header = authorization.ok_or_else(|| unauthenticated("a bearer token is required"))?;
    // The scheme is case-insensitive (RFC 7235 §2.1).
    let token = header
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty())
        .ok_or_else(|| unauthenticated("the Authorization header must be `Bearer <token>`"))?;
    let hash = hash_token(token);
    let now = crate::db::now();
    let expired = |expires_at: &Option<String>| expires_at.as_ref().is_some_and(|at| at.as_str() <= now.as_str());
    if let Some(cache) = cache {
        let current = |kept: &Authenticated| generation(db, &kept.caller.tenant, Scope::Tokens);
        if let Some(kept) = cache.get_current(&hash, current)? {
            if expired(&kept.expires_at) {
                return Err(unauthenticated("the token expired"));
            }
            return Ok(kept.caller.clone());
        }
    }
    // One statement, so the generation is the one the row was read at.
    let row = db.query_opt(
        "SELECT tokens.tenant, principal, grants, expires_at, revoked_at, coalesce(generation, 0)
         FROM tokens LEFT JOIN generations ON generations.tenant = tokens.tenant AND what = 'tokens'
         WHERE token_hash = ?1",
        params![&hash],
        |row| {
            let texts: (String, String, String) = (row.get(0)?, row.get(1)?, row.get(2)?);
            let times: (Option<String>, Option<String>) = (row.get(3)?, row.get(4)?);
            Ok((texts.0, texts.1, texts.2, times.0, times.1, row.get::<i64>(5)?))
        },
    )?;
    let (tenant, principal, grants, expires_at, revoked_at, generation) =
        row.ok_or_else(|| unauthenticated("unknown token"))?;
    // Read in the request's own query: a revocation or expiry is seen by the very next
    // request of every process on the database.
    if revoked_at.is_some() {
        return Err(unauthenticated("the token was revoked"));
    }
    if expired(&expires_at) {
        return Err(unauthenticated("the token expired"));
    }
    let grants: Vec<String> = serde_json::from_str(&grants).map_err(ApiError::internal)?;
    let grants =
        grants.iter().map(|grant| Grant::parse(grant)).collect::<Result<_, _>>().map_err(ApiError::internal)?;
    let caller = Caller { tenant, principal, grants, token: Some(token_id(&hash)), git_source: None };
    if let Some(cache) = cache {
        let bytes = hash.len() + caller.tenant.len() + caller.principal.len() + 64 * (caller.grants.len() + 2);
        cache.put(&hash, generation, Authenticated { caller: caller.clone(), expires_at }, bytes);
    }
    Ok(caller)
}

/// The caller a token makes now, by its id: for work done later with the authority of
/// the token that asked for it (a heal, SPEC §15). Refused, saying why, when the token
/// is gone, revoked or expired, or belongs to another tenant.
pub fn caller_of_token(db: &Conn, tenant: &str, id: &str) -> Result<Result<Caller, String>, ApiError> {
    let row = db.query_opt(
        "SELECT tenant, principal, grants, expires_at, revoked_at FROM tokens WHERE id = ?1",
        params![id],
        |row| {
            let texts: (String, String, String) = (row.get(0)?, row.get(1)?, row.get(2)?);
            let times: (Option<String>, Option<String>) = (row.get(3)?, row.get(4)?);
            Ok((texts, times))
        },
    )?;
    let Some(((owner, principal, grants), (expires_at, revoked_at))) = row.filter(|((owner, ..), _)| owner == tenant)
    else {
        return Ok(Err(format!("the token {id} no longer exists")));
    };
    if let Some(at) = revoked_at {
        return Ok(Err(format!("the token {id} was revoked at {at}")));
    }
    if let Some(at) = expires_at.filter(|at| at.as_str() <= crate::db::now().as_str()) {
        return Ok(Err(format!("the token {id} expired at {at}")));
    }
    let grants: Vec<String> = serde_json::from_str(&grants).map_err(ApiError::internal)?;
    let grants =
        grants.iter().map(|grant| Grant::parse(grant)).collect::<Result<_, _>>().map_err(ApiError::internal)?;
    Ok(Ok(Caller { tenant: owner, principal, grants, token: Some(id.to_owned()), git_source: None }))
}

/// Why a tenant or token could not be created from the command line.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0:?} is not a valid name (^[a-z][a-z0-9-]{{0,62}}$)")]
    BadName(String),
    #[error("{0}")]
    BadGrant(String),
    #[error("tenant {0:?} already exists")]
    TenantExists(String),
    #[error("tenant {0:?} does not exist; create it with `fleet admin tenant create`")]
    NoTenant(String),
    #[error("no token has the id {0:?}; `fleet admin token list --tenant <t>` lists them")]
    NoToken(String),
    #[error("database: {0}")]
    Database(#[from] crate::db::Error),
}

pub fn create_tenant(db: &Conn, tenant: &str, now: &str) -> Result<(), AdminError> {
    if !is_name(tenant) {
        return Err(AdminError::BadName(tenant.into()));
    }
    let inserted = db.execute(
        "INSERT INTO tenants (name, created_at) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
        params![tenant, now],
    )?;
    if inserted == 0 {
        return Err(AdminError::TenantExists(tenant.into()));
    }
    Ok(())
}

/// The id a token is named by: derived from its stored hash, never the secret.
fn token_id(token_hash: &str) -> String {
    format!("tok_{}", &token_hash[..16])
}

/// Creates a token, valid until `expires_at` if given, and returns it; only its hash is
/// stored.
pub fn create_token(
    db: &Conn,
    tenant: &str,
    principal: &str,
    grants: &[String],
    now: &str,
    expires_at: Option<&str>,
) -> Result<String, AdminError> {
    if !is_name(principal) {
        return Err(AdminError::BadName(principal.into()));
    }
    let grants: Vec<String> = grants
        .iter()
        .map(|grant| Grant::parse(grant).map(|grant| grant.to_string()))
        .collect::<Result<_, _>>()
        .map_err(AdminError::BadGrant)?;
    let exists: bool =
        db.query_one("SELECT EXISTS (SELECT 1 FROM tenants WHERE name = ?1)", params![tenant], |row| row.get(0))?;
    if !exists {
        return Err(AdminError::NoTenant(tenant.into()));
    }
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let token = format!("fleet_{}", data_encoding::BASE32_NOPAD.encode(&secret).to_lowercase());
    let grants = serde_json::to_string(&grants).map_err(|error| AdminError::BadGrant(error.to_string()))?;
    let token_hash = hash_token(&token);
    db.execute(
        "INSERT INTO tokens (token_hash, id, tenant, principal, grants, created_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![&token_hash, &token_id(&token_hash), tenant, principal, &grants, now, expires_at],
    )?;
    Ok(token)
}

/// A token as `fleet admin token list` shows it: everything but the secret.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenInfo {
    pub id: String,
    pub principal: String,
    pub grants: Vec<String>,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// A tenant's tokens, oldest first.
pub fn list_tokens(db: &Conn, tenant: &str) -> Result<Vec<TokenInfo>, AdminError> {
    let exists: bool =
        db.query_one("SELECT EXISTS (SELECT 1 FROM tenants WHERE name = ?1)", params![tenant], |row| row.get(0))?;
    if !exists {
        return Err(AdminError::NoTenant(tenant.into()));
    }
    let tokens = db.query(
        "SELECT id, principal, grants, created_at, expires_at, revoked_at FROM tokens
         WHERE tenant = ?1 ORDER BY created_at, id",
        params![tenant],
        |row| {
            let grants: String = row.get(2)?;
            Ok(TokenInfo {
                id: row.get(0)?,
                principal: row.get(1)?,
                grants: serde_json::from_str(&grants).unwrap_or_default(),
                created_at: row.get(3)?,
                expires_at: row.get(4)?,
                revoked_at: row.get(5)?,
            })
        },
    )?;
    Ok(tokens)
}

/// Revokes a token by id, at once: every server process reads tokens per request.
pub fn revoke_token(db: &Conn, id: &str, now: &str) -> Result<(), AdminError> {
    let revoked =
        db.execute("UPDATE tokens SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1", params![id, now])?;
    if revoked == 0 {
        return Err(AdminError::NoToken(id.into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(text: &str) -> Grant {
        Grant::parse(text).unwrap()
    }

    #[test]
    fn grants_match_segments_and_scope() {
        assert!(grant("compute:fleet:admin @ compute-fleet").allows("compute:fleet:admin", "compute-fleet"));
        assert!(grant("compute:*:*@*").allows("compute:pools:write", "compute-pools"));
        assert!(grant("compute:*:* @ *").allows("compute:fleet:admin", "compute-fleet"));
        assert!(grant("*:*:read @ compute-pools").allows("compute:pools:read", "compute-pools"));
        assert!(!grant("compute:pools:read @ compute-pools").allows("compute:pools:write", "compute-pools"));
        assert!(!grant("compute:fleet:admin @ compute-fleet").allows("compute:pools:write", "compute-pools"));
        assert!(!grant("compute:pools:write @ compute-sites").allows("compute:pools:write", "compute-pools"));
    }

    #[test]
    fn malformed_grants_are_refused() {
        assert!(Grant::parse("compute:fleet:admin").is_err());
        assert!(Grant::parse("compute:fleet @ x").is_err());
        assert!(Grant::parse("compute:fleet:admin:x @ x").is_err());
        assert!(Grant::parse("Compute:fleet:admin @ x").is_err());
        assert_eq!(grant("compute:*:*@*").to_string(), "compute:*:* @ *");
    }
}

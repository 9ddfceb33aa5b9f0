//! The webhooks' signing secrets at rest (SPEC §20.4): each sealed by `crate::secrets`
//! for its row (`webhooks.secret` of its tenant and name) when the deployment has a key,
//! and opened to sign. What a server does with every sealed secret at start, and a
//! rotation, is `crate::secrets::at_rest`'s.

use crate::api::ApiError;
use crate::secrets::{self, Key, Place};

/// The column the secrets are kept in, as their associated data names it.
const COLUMN: &str = "webhooks.secret";

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

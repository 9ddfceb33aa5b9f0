//! Provider accounts: a provider and a reference to its credentials (never a secret).

use fleet_guest::Kind;
use rusqlite::OptionalExtension;

use super::{Field, FieldType, Module, Object, no_rule};
use crate::api::ApiError;
use crate::registry::Ctx;

pub static MODULE: Module = Module {
    kind: Kind::ProviderAccount,
    table: "accounts",
    fields: &[
        Field::new("provider", "provider", FieldType::Name).required().immutable(),
        Field::new("credentialsRef", "credentials_ref", FieldType::Text),
        Field::new("settings", "settings", FieldType::Map),
    ],
    keyed_by_owner: false,
    deletable: true,
    archivable: false,
    check: no_rule,
    before_delete: refuse_while_used,
};

/// An account stays while a live pool uses it; archived pools do not count.
fn refuse_while_used(ctx: &Ctx, account: &Object) -> Result<(), ApiError> {
    let user: Option<String> = ctx
        .db
        .prepare_cached("SELECT id FROM pools WHERE tenant = ?1 AND account = ?2 AND archived = 0 ORDER BY id LIMIT 1")?
        .query_row([&ctx.caller.tenant, &account.key], |row| row.get(0))
        .optional()?;
    match user {
        Some(pool) => Err(ApiError::failed_precondition(format!(
            "providerAccount {:?} is used by the live pool {pool:?}; archive the pool first",
            account.key
        ))),
        None => Ok(()),
    }
}

//! Provider accounts: a provider and a reference to its credentials (never a secret).

use fleet_guest::Kind;
use serde_json::json;

use super::{Field, FieldType, Module, Object, no_problems};
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
    validate: no_problems,
    before_delete: refuse_while_used,
};

/// An account stays while a live pool uses it; archived pools do not count.
fn refuse_while_used(ctx: &Ctx, account: &Object) -> Result<(), ApiError> {
    let pools = ctx
        .db
        .prepare_cached("SELECT id FROM pools WHERE tenant = ?1 AND account = ?2 AND archived = 0 ORDER BY id")?
        .query_map([&ctx.caller.tenant, &account.key], |row| row.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    if pools.is_empty() {
        return Ok(());
    }
    Err(ApiError::failed_precondition(format!(
        "providerAccount {:?} is used by the live pools {pools:?}; archive them or move them to another account first",
        account.key
    ))
    .with_details(json!({ "pools": pools })))
}

//! Pools: capacity of one class at one site, bought through one account, owned by one owner.

use fleet_guest::Kind;
use serde_json::json;

use super::{Field, FieldType, Module, Object, no_problems, no_rule};
use crate::api::ApiError;
use crate::registry::Ctx;

pub static MODULE: Module = Module {
    kind: Kind::Pool,
    table: "pools",
    fields: &[
        Field::new("site", "site", FieldType::Ref(Kind::Site)).required().immutable(),
        Field::new("account", "account", FieldType::Ref(Kind::ProviderAccount)).required(),
        Field::new("class", "class", FieldType::Name).required().immutable(),
        Field::new("owner", "owner", FieldType::Name).required(),
        Field::new("vcpus", "vcpus", FieldType::Count),
        Field::new("memoryMib", "memory_mib", FieldType::Count),
        Field::new("gpus", "gpus", FieldType::Count),
        Field::new("labels", "labels", FieldType::Map),
    ],
    keyed_by_owner: false,
    deletable: false,
    archivable: true,
    validate: no_problems,
    check: owner_is_not_offered_to,
    before_delete: no_rule,
};

/// A pool cannot pass to an owner its own offers give capacity to: that would make
/// them offers to their pool's owner, which SPEC §4 forbids. The offers are other
/// objects' state, so this is `FAILED_PRECONDITION`; change or delete them first.
fn owner_is_not_offered_to(ctx: &Ctx, stored: Option<&Object>, pool: &Object) -> Result<(), ApiError> {
    let owner = pool.text("owner");
    if stored.is_none_or(|stored| stored.text("owner") == owner) {
        return Ok(());
    }
    let offers = ctx
        .db
        .prepare_cached("SELECT id FROM offers WHERE tenant = ?1 AND pool = ?2 AND to_owner = ?3 ORDER BY id")?
        .query_map([&ctx.caller.tenant, &pool.key, owner], |row| row.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    if offers.is_empty() {
        return Ok(());
    }
    Err(ApiError::failed_precondition(format!(
        "pool {:?} cannot pass to owner {owner:?}: its offers {offers:?} give capacity to that owner",
        pool.key
    ))
    .with_details(json!({ "offers": offers })))
}

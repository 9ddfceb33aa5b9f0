//! Offers: capacity of a pool offered to another owner.

use fleet_guest::Kind;

use super::{Field, FieldType, Module, Object, load, no_rule, pools};
use crate::api::{ApiError, Problem};
use crate::registry::Ctx;

pub static MODULE: Module = Module {
    kind: Kind::Offer,
    table: "offers",
    fields: &[
        Field::new("pool", "pool", FieldType::Ref(Kind::Pool)).required().immutable(),
        Field::new("to", "to_owner", FieldType::Name).required(),
        Field::new("vcpus", "vcpus", FieldType::Count),
        Field::new("memoryMib", "memory_mib", FieldType::Count),
        Field::new("gpus", "gpus", FieldType::Count),
    ],
    keyed_by_owner: false,
    deletable: true,
    archivable: false,
    validate: not_to_the_pool_owner,
    before_delete: no_rule,
};

/// An offer gives capacity to someone else: `to` must differ from the pool's owner
/// (SPEC §4: `INVALID_ARGUMENT`). A pool the tenant does not have is left to the
/// reference check.
fn not_to_the_pool_owner(ctx: &Ctx, offer: &Object) -> Result<Vec<Problem>, ApiError> {
    let (pool, to) = (offer.text("pool"), offer.text("to"));
    if pool.is_empty() || to.is_empty() {
        return Ok(Vec::new());
    }
    let Some(pool) = load(ctx.db, &pools::MODULE, &ctx.caller.tenant, pool)? else {
        return Ok(Vec::new());
    };
    if pool.text("owner") != to {
        return Ok(Vec::new());
    }
    Ok(vec![Problem { path: "/to".into(), message: format!("an offer cannot go to its pool's own owner {to:?}") }])
}

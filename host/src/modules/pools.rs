//! Pools: capacity of one class at one site, bought through one account, owned by one owner.

use fleet_guest::Kind;

use super::{Field, FieldType, Module, no_problems, no_rule};

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
    before_delete: no_rule,
};

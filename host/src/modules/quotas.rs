//! Owner quotas: the limits of one owner, keyed by the owner itself (no id).

use fleet_guest::Kind;

use super::{Field, FieldType, Module, no_problems, no_rule};

pub static MODULE: Module = Module {
    kind: Kind::OwnerQuota,
    table: "quotas",
    fields: &[
        Field::new("owner", "owner", FieldType::Name).required(),
        Field::new("vcpus", "vcpus", FieldType::Count),
        Field::new("memoryMib", "memory_mib", FieldType::Count),
        Field::new("gpus", "gpus", FieldType::Count),
        Field::new("instances", "instances", FieldType::Count),
    ],
    keyed_by_owner: true,
    deletable: true,
    archivable: false,
    validate: no_problems,
    before_delete: no_rule,
};

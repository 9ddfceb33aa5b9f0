//! Flavors: the instance sizes a pool sells.

use fleet_guest::Kind;

use super::{Field, FieldType, Module, no_problems, no_rule};

pub static MODULE: Module = Module {
    kind: Kind::Flavor,
    table: "flavors",
    fields: &[
        Field::new("pool", "pool", FieldType::Ref(Kind::Pool)).required().immutable(),
        Field::new("vcpus", "vcpus", FieldType::Count),
        Field::new("memoryMib", "memory_mib", FieldType::Count),
        Field::new("gpus", "gpus", FieldType::Count),
        Field::new("diskGib", "disk_gib", FieldType::Count),
    ],
    keyed_by_owner: false,
    deletable: true,
    archivable: true,
    validate: no_problems,
    before_delete: no_rule,
};

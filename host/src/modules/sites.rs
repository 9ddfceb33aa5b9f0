//! Sites: where capacity lives. Never deleted, and never changed through fleet.

use fleet_guest::Kind;

use super::{Field, FieldType, Module, no_problems, no_rule};

pub static MODULE: Module = Module {
    kind: Kind::Site,
    table: "sites",
    fields: &[
        Field::new("region", "region", FieldType::NonEmpty).required(),
        Field::new("description", "description", FieldType::Text),
        Field::new("labels", "labels", FieldType::Map),
    ],
    keyed_by_owner: false,
    deletable: false,
    archivable: false,
    validate: no_problems,
    before_delete: no_rule,
};

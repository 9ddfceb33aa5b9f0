//! The pieces of the methods' JSON Schemas that several groups share: a text, and a
//! field's value by its type (SPEC §4, §10), as the descriptors state them.

use fleet_guest::Catalog;
use fleet_guest::grammar::{self, NAME_PATTERN, TEXT_PATTERN};
use fleet_guest::json::MAX_COUNT;
use fleet_guest::kinds::FieldType;
use serde_json::{Value, json};

/// Any string without control characters.
pub fn text_schema() -> Value {
    json!({"type": "string", "pattern": TEXT_PATTERN})
}

/// The request schema of a field's value.
pub fn field_schema(ty: FieldType, required: bool, catalog: &Catalog) -> Value {
    match ty {
        FieldType::Count => json!({"type": "integer", "minimum": 0, "maximum": MAX_COUNT}),
        FieldType::Bool => json!({"type": "boolean"}),
        FieldType::Map => json!({"type": "object", "propertyNames": text_schema(),
                                 "additionalProperties": text_schema()}),
        FieldType::Name => json!({"type": "string", "pattern": NAME_PATTERN}),
        FieldType::String if required => json!({"type": "string", "minLength": 1, "pattern": TEXT_PATTERN}),
        FieldType::String => text_schema(),
        FieldType::Ref(kind) => {
            let prefix = catalog.by_kind(kind).and_then(|position| catalog.get(position).id_prefix());
            json!({"type": "string", "pattern": grammar::id_pattern(prefix.unwrap_or_default()),
                   "description": format!("the id of a live {kind} of the tenant")})
        }
    }
}

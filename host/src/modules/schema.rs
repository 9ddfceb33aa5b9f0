//! The schemas of a module's methods, from its kind's descriptor.

use fleet_guest::Catalog;
use fleet_guest::grammar::{self, NAME_PATTERN, TEXT_PATTERN};
use fleet_guest::kinds::Descriptor;
use serde_json::{Map, Value, json};

use super::MAX_IDEMPOTENCY_KEY;
use crate::calls::schema::field_schema;

pub(super) fn key_property(kind: &Descriptor) -> Value {
    match kind.id_prefix() {
        Some(prefix) => json!({"type": "string", "pattern": grammar::id_pattern(prefix)}),
        None => json!({"type": "string", "pattern": NAME_PATTERN}),
    }
}

pub(super) fn object_schema(kind: &Descriptor, catalog: &Catalog) -> Value {
    let mut properties: Map<String, Value> = kind
        .fields
        .iter()
        .map(|field| (field.name.to_string(), field_schema(field.ty, field.required, catalog)))
        .collect();
    properties.insert(kind.identity_name().into(), key_property(kind));
    if kind.archives() {
        properties.insert("archived".into(), json!({"type": "boolean"}));
    }
    properties.insert("createdAt".into(), json!({"type": "string", "format": "date-time"}));
    properties.insert("updatedAt".into(), json!({"type": "string", "format": "date-time"}));
    json!({"type": "object", "properties": properties})
}

pub(super) fn key_schema(kind: &Descriptor) -> Value {
    let identity = kind.identity_name();
    json!({"type": "object", "required": [identity], "additionalProperties": false,
           "properties": {identity: key_property(kind)}})
}

pub(super) fn input_schema(kind: &Descriptor, catalog: &Catalog, create: bool) -> Value {
    let mut properties: Map<String, Value> = kind
        .fields
        .iter()
        .map(|field| (field.name.to_string(), field_schema(field.ty, field.required, catalog)))
        .collect();
    let identity = kind.identity_name();
    properties.insert(identity.into(), key_property(kind));
    let mut required: Vec<&str> = Vec::new();
    if create && !kind.upserted() {
        properties.insert(
            "idempotencyKey".into(),
            json!({"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY, "pattern": TEXT_PATTERN}),
        );
        required.extend(kind.fields.iter().filter(|field| field.required).map(|field| field.name));
    } else {
        required.push(identity);
    }
    json!({"type": "object", "additionalProperties": false, "required": required, "properties": properties})
}

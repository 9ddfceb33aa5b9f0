//! The schemas of fleet's methods: the FleetConfig document of SPEC §5 from the kinds'
//! descriptors, the plan and apply requests, and a plan.

use fleet_guest::Catalog;
use fleet_guest::grammar;
use fleet_guest::json::MAX_COUNT;
use fleet_guest::kinds::FieldType;
use serde_json::{Map, Value, json};

use super::plan_source;
use crate::calls::schema::{field_schema, text_schema};

/// The FleetConfig document of SPEC §5, from the kinds' descriptors: references are
/// keys of the same document or ids; nothing read-only appears.
pub(super) fn fleet_config_schema(catalog: &Catalog) -> Value {
    let mut sections = Map::new();
    for (_, kind) in catalog.iter() {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for field in kind.fields {
            let schema = match field.ty {
                FieldType::Ref(target) => {
                    let prefix = catalog.by_kind(target).and_then(|position| catalog.get(position).id_prefix());
                    json!({"type": "string", "pattern": grammar::key_pattern(prefix),
                           "description": format!("the key of a {target} in this document, or its id")})
                }
                _ => field_schema(field.ty, field.required, catalog),
            };
            properties.insert(field.name.into(), schema);
            if field.required {
                required.push(field.name);
            }
        }
        let object =
            json!({"type": "object", "additionalProperties": false, "required": required, "properties": properties});
        sections.insert(
            kind.section.into(),
            json!({"type": "object", "propertyNames": {"pattern": grammar::key_pattern(kind.id_prefix())},
                   "additionalProperties": object}),
        );
    }
    // Renames (SPEC §15), of the kinds named by bindings.
    let named: Vec<&str> = catalog.iter().filter(|(_, kind)| !kind.upserted()).map(|(_, kind)| kind.kind).collect();
    let name = json!({"type": "string", "pattern": grammar::NAME_PATTERN});
    sections.insert(
        fleet_guest::MOVED.into(),
        json!({"type": "array", "items": {"type": "object", "additionalProperties": false,
            "required": ["kind", "from", "to"],
            "properties": {"kind": {"type": "string", "enum": named}, "from": name, "to": name}}}),
    );
    json!({"type": "object", "additionalProperties": false, "properties": sections})
}

pub(super) fn request_schema(catalog: &Catalog, apply: bool, insecure: bool) -> Value {
    let mut schema = json!({"type": "object", "additionalProperties": false, "required": ["document"], "properties": {
        "document": fleet_config_schema(catalog), "prune": {"type": "boolean", "default": false}}});
    if apply {
        schema["properties"]["planHash"] = json!({"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"});
        schema["properties"]["heal"] = json!({"type": "boolean", "default": false,
            "description": "Restore this revision whenever fleet.drift finds drift, with this token's authority."});
        schema["properties"]["rollbackOf"] = json!({"type": "integer", "minimum": 1, "maximum": MAX_COUNT,
            "description": "The revision whose document this is, put back (fleet rollback): kept on the revision the apply makes."});
        schema["properties"]["source"] = plan_source::schema(insecure);
        schema["properties"]["overrides"] = json!({"type": "array", "items": {"type": "object",
            "additionalProperties": false, "required": ["policy", "reason"], "properties": {
                "policy": {"type": "string", "pattern": grammar::NAME_PATTERN},
                "reason": {"type": "string", "minLength": 1, "maxLength": 1000,
                           "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$"}}}});
        schema["properties"]["proposal"] = json!({"type": "integer", "minimum": 1, "maximum": MAX_COUNT,
            "description": "Apply this approved proposal's document exactly as it was planned (SPEC §17); with `overrides` alone, instead of `document`."});
        // A document's apply, or a proposal's: `{"proposal", "overrides"?}` and nothing else.
        if let Some(members) = schema.as_object_mut() {
            members.remove("required");
        }
        let planned_here: Vec<Value> = ["document", "prune", "planHash", "heal", "rollbackOf", "source"]
            .iter()
            .map(|name| json!({"required": [name]}))
            .collect();
        schema["oneOf"] = json!([
            {"required": ["document"], "not": {"required": ["proposal"]}},
            {"required": ["proposal"], "not": {"anyOf": planned_here}},
        ]);
    } else {
        // A review as a proposal answers it; its time is the host's to write, any text here.
        let mut review = review_schema();
        review["properties"]["at"] = text_schema();
        schema["properties"]["proposal"] = json!({"type": "object", "additionalProperties": false,
            "required": ["number", "author"],
            "description": "Report whether this proposal is approved (`approval`), by the policies' approve and reject rules or the default rule (SPEC §17).",
            "properties": {"number": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT}, "author": text_schema(),
                "title": text_schema(), "reviews": {"type": "array", "items": review}}});
    }
    schema
}

/// A proposal's review (SPEC §17).
pub(super) fn review_schema() -> Value {
    json!({"type": "object", "additionalProperties": false, "required": ["principal", "verdict"], "properties": {
        "principal": text_schema(), "verdict": {"type": "string", "enum": ["approve", "reject"]},
        "comment": text_schema(), "at": {"type": "string", "format": "date-time"}}})
}

/// A plan's `approval`, with a proposal in its request.
fn approval_schema() -> Value {
    json!({"type": "object", "required": ["approved", "rejected", "rule", "pending", "rejections"], "properties": {
        "approved": {"type": "boolean"}, "rejected": {"type": "boolean"},
        "rule": {"type": "string", "enum": ["policies", "default"]},
        "pending": {"type": "array", "items": {"type": "object", "required": ["policy"], "properties": {
            "policy": {"type": "string"}, "message": {"type": "string"}}}},
        "rejections": {"type": "array", "items": {"type": "object", "required": ["message"], "properties": {
            "policy": {"type": "string"}, "principal": {"type": "string"}, "message": {"type": "string"}}}}}})
}

pub(super) fn plan_schema() -> Value {
    let counts: Map<String, Value> = [
        "create",
        "update",
        "delete",
        "archive",
        "restore",
        "unchanged",
        "blocked",
        "rename",
        "denied",
        "warnings",
        "approvalRequired",
    ]
    .into_iter()
    .map(|name| (name.to_owned(), json!({"type": "integer", "minimum": 0})))
    .collect();
    json!({"type": "object", "properties": {
        "changes": {"type": "array", "items": {"type": "object", "properties": {
            "action": {"type": "string", "enum": ["create", "update", "delete", "archive", "restore", "rename"]},
            "kind": {"type": "string"}, "key": {"type": "string"}, "from": {"type": "string"}, "id": {"type": "string"},
            "fields": {"type": "array", "items": {"type": "object", "properties": {
                "field": {"type": "string"}, "from": {}, "to": {}}}},
            "text": {"type": "string"}}}},
        "calls": {"type": "array", "items": {"type": "object", "properties": {
            "method": {"type": "string"}, "input": {"type": "object"}, "idempotencyKey": {"type": "string"}}}},
        "summary": {"type": "object", "properties": counts},
        "blocked": {"type": "array", "items": {"type": "object", "properties": {
            "kind": {"type": "string"}, "key": {"type": "string"}, "field": {"type": "string"}, "reason": {"type": "string"}}}},
        "leftAlone": {"type": "array", "items": {"type": "object", "required": ["kind", "key", "action"], "properties": {
            "kind": {"type": "string"}, "key": {"type": "string"}, "id": {"type": "string"},
            "action": {"type": "string", "enum": ["delete", "archive"]}}}},
        "policy": {"type": "object", "required": ["digest", "verdicts"], "properties": {
            "digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            "verdicts": {"type": "array", "items": {"type": "object", "required": ["policy", "level", "rule", "message"],
                "properties": {"policy": {"type": "string"}, "level": {"type": "string", "enum": ["advisory", "mandatory", "enforced"]},
                    "rule": {"type": "string", "enum": ["deny", "warn", "require_approval"]}, "kind": {"type": "string"},
                    "key": {"type": "string"}, "message": {"type": "string"}}}}}},
        "approval": approval_schema(),
        "approvalRequired": {"type": "string", "enum": ["deployment"],
            "description": "The deployment applies changes only through approved proposals (serve --require-approval): a direct apply of this plan is APPROVAL_REQUIRED."},
        "planHash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}}})
}

/// The request and answer schemas of export.
pub(super) fn export_schemas(catalog: &Catalog) -> (Value, Value) {
    (
        json!({"type": "object", "additionalProperties": false}),
        json!({"type": "object", "properties": {
        "document": fleet_config_schema(catalog),
        "missing": {"type": "array", "items": {"type": "string"}}}}),
    )
}

/// The request and answer schemas of apply.
pub(super) fn apply_schemas(catalog: &Catalog, insecure: bool) -> (Value, Value) {
    (
        request_schema(catalog, true, insecure),
        json!({"type": "object", "properties": {"plan": plan_schema(), "applied": {"type": "integer", "minimum": 0}}}),
    )
}

/// The request and answer schemas of status.
pub(super) fn status_schemas(insecure: bool) -> (Value, Value) {
    (
        json!({"type": "object", "additionalProperties": false, "properties": {
        "refresh": {"type": "boolean", "default": false}}}),
        json!({"type": "object", "properties": {
        "checkedAt": {"type": "string", "format": "date-time"},
        "applied": {"type": "object", "properties": {
            "revision": {"type": "integer", "minimum": 1}, "planHash": {"type": "string"}, "appliedBy": {"type": "string"},
            "appliedAt": {"type": "string", "format": "date-time"},
            "calls": {"type": "integer"}, "prune": {"type": "boolean"}, "heal": {"type": "boolean"},
            "source": plan_source::schema(insecure),
            "lastHeal": {"type": "object", "required": ["at", "calls"], "description": "The last time fleet.drift healed this revision.",
                "properties": {"at": {"type": "string", "format": "date-time"}, "calls": {"type": "integer", "minimum": 0}}}}},
        "drift": {"type": "object", "properties": {
            "checkedAt": {"type": "string", "format": "date-time"}, "planHash": {"type": "string"},
            "summary": {"type": "object"}, "changes": {"type": "array", "items": {"type": "object"}}}}}}),
    )
}

/// The request and answer schemas of snapshot.
pub(super) fn snapshot_schemas() -> (Value, Value) {
    (
        json!({"type": "object", "additionalProperties": false}),
        json!({"type": "object", "required": ["caller", "modules", "bindings", "plugins"], "properties": {
        "caller": {"type": "object"}, "modules": {"type": "array", "items": {"type": "string"}},
        "bindings": {"type": "array", "items": {"type": "object"}},
        "plugins": {"type": "array", "items": {"type": "object", "required": ["descriptor", "digest"],
            "properties": {"descriptor": {"type": "object"}, "digest": {"type": "string"}}}}}}),
    )
}

/// The request and answer schemas of check.
pub(super) fn check_schemas() -> (Value, Value) {
    (
        json!({"type": "object", "additionalProperties": false, "required": ["kind", "subjects"], "properties": {
        "kind": text_schema(),
        "subjects": {"type": "array", "items": {"type": "object", "additionalProperties": false,
            "required": ["object"], "properties": {
                "object": {"type": "object"}, "previous": {"type": ["object", "null"]},
                "references": {"type": "array", "items": {"type": "object", "additionalProperties": false,
                    "required": ["field", "object"],
                    "properties": {"field": text_schema(), "object": {"type": "object"}}}}}}}}}),
        json!({"type": "object", "required": ["problems"], "properties": {
        "problems": {"type": "array", "items": {"type": "object", "properties": {
            "subject": {"type": "integer"}, "path": {"type": "string"}, "message": {"type": "string"}}}}}}),
    )
}

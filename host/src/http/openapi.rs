//! The OpenAPI 3.1 description of `GET /api/openapi.json` (SPEC §8), assembled here in
//! one place: every method of the registry with its schemas, and the routes the server
//! answers besides (health, metrics, the catalogue, the event stream, the console).

use fleet_guest::grammar;
use serde_json::{Value, json};

use super::{console, sse};
use crate::api::Code;
use crate::calls::input::MAX_COUNT;
use crate::calls::registry::Registry;

/// The OpenAPI description: the registry's methods, and the routes served here besides.
pub fn openapi(registry: &Registry) -> Value {
    let mut description = methods(registry);
    let error = json!({"description": "an error (SPEC §2)",
                       "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    let text = |summary: &str, media: &str, schema: Value| {
        json!({"get": {"summary": summary, "responses": {
            "200": {"description": "success", "content": {media: {"schema": schema}}}, "default": error}}})
    };
    let routes = [
        ("/metrics", text("Prometheus text exposition (SPEC §13).", "text/plain", json!({"type": "string"}))),
        (
            "/healthz",
            text("Answers `ok` while the server serves.", "text/plain", json!({"type": "string", "enum": ["ok"]})),
        ),
        (
            "/api/methods",
            text(
                "The method catalogue of the registry.",
                "application/json",
                json!({"type": "object", "required": ["methods"],
            "properties": {"methods": {"type": "array", "items": {"type": "object"}}}}),
            ),
        ),
        ("/api/openapi.json", text("This description.", "application/json", json!({"type": "object"}))),
        (console::PAGE_PATH, text("The console (SPEC §16).", "text/html", json!({"type": "string"}))),
        (
            console::OLD_PATH,
            json!({"get": {"summary": "The console's old address: redirects to /console.",
                "responses": {"308": {"description": "to /console",
                    "headers": {"Location": {"schema": {"type": "string", "enum": [console::PAGE_PATH]}}}}}}}),
        ),
    ];
    let file = |summary: &str, name: &str| {
        let string = json!({"schema": {"type": "string"}});
        json!({"get": {"summary": summary,
            "parameters": [{"name": name, "in": "path", "required": true, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "the file", "content": {
                "text/javascript": string, "text/css": string, "application/wasm": string}}, "default": error}}})
    };
    let paths = description["paths"].as_object_mut().expect("the registry describes paths");
    for (path, item) in routes {
        paths.insert(path.to_owned(), item);
    }
    paths.insert(
        "/console/{file}".to_owned(),
        file("A file of the console page (its scripts and style sheet).", "file"),
    );
    paths.insert(
        "/console/assets/{asset}".to_owned(),
        file("The planner transpiled by jco for the console (built by console/build.sh).", "asset"),
    );
    paths.insert(
        sse::STREAM_PATH.to_owned(),
        json!({"get": {
            "operationId": "compute.events.stream",
            "summary": "The tenant's events as Server-Sent Events, live; authorized like compute.events.list.",
            "security": [{"bearer": []}],
            "parameters": [
                {"name": "after", "in": "query", "required": false,
                 "description": "resume after this sequence number",
                 "schema": {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}},
                {"name": "Last-Event-ID", "in": "header", "required": false,
                 "description": "resume after this sequence number (sent by a reconnecting EventSource)",
                 "schema": {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}}],
            "responses": {
                // The schema of one event, as OpenAPI 3.1 tools read `text/event-stream`
                // (3.2 names it `itemSchema`): its fields, `data` the event's JSON.
                "200": {"description": "an endless stream of `id`, `event` and `data` frames",
                        "content": {"text/event-stream": {"schema": {
                            "type": "object",
                            "required": ["id", "event", "data"],
                            "properties": {
                                "id": {"type": "string", "pattern": "^[0-9]+$",
                                       "description": "the event's sequence number"},
                                "event": {"type": "string", "description": "the event's type"},
                                "data": {"type": "string", "contentMediaType": "application/json",
                                         "description": "the event, as compute.events.list returns it"}}}}}},
                "default": error}}}),
    );
    name_requests(&mut description);
    description
}

/// Every answer carries an `X-Request-Id` (SPEC §2). A client may send its own, which
/// is kept when it is an id and replaced when not: any value is taken, so it is told in
/// the header's description rather than as a parameter, whose schema a fuzzer would
/// read as a promise to refuse what it does not match.
fn name_requests(description: &mut Value) {
    let Some(paths) = description["paths"].as_object_mut() else { return };
    for operation in paths.values_mut().filter_map(Value::as_object_mut).flat_map(|item| item.values_mut()) {
        let Some(responses) = operation["responses"].as_object_mut() else { continue };
        for response in responses.values_mut() {
            response["headers"]["X-Request-Id"] = json!({"$ref": "#/components/headers/RequestId"});
        }
    }
    description["components"]["headers"] = json!({"RequestId": {
        "schema": {"type": "string", "pattern": grammar::REQUEST_ID_PATTERN},
        "description": "The request's id: the client's own X-Request-Id when it sent one of 1–128 visible ASCII \
            characters, else a new one. The error envelope's requestId and every log line of the request name it."}});
}

/// The registry's methods as OpenAPI paths, with the error envelope as a component.
fn methods(registry: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    for method in registry.methods() {
        let object = json!({"type": "object"});
        let input = method.input.clone().unwrap_or_else(|| object.clone());
        let output = method.output.clone().unwrap_or(object);
        // An empty body means `{}`: it may be left out exactly when `{}` is valid (a
        // choice of shapes, `oneOf`, each names what it requires).
        let body_required =
            input["required"].as_array().is_some_and(|required| !required.is_empty()) || input.get("oneOf").is_some();
        paths.insert(
            method.path.clone(),
            json!({ "post": {
                "operationId": method.name,
                "summary": method.summary,
                "tags": [method.module],
                "x-fleet-kind": method.kind.as_str(),
                "x-fleet-permission": method.permission,
                "x-fleet-scope": method.scope,
                "x-fleet-phase": method.phase,
                "security": [{"bearer": []}],
                "requestBody": {"required": body_required, "content": {"application/json": {"schema": input}}},
                "responses": {
                    "200": {"description": "success", "content": {"application/json": {"schema": output}}},
                    "default": {"description": "an error (SPEC §2)",
                                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
                }
            }}),
        );
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "fleet", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {
                    "type": "object",
                    "required": ["code", "message", "requestId"],
                    "properties": {
                        "code": {"type": "string", "enum": Code::ALL.map(Code::as_str)},
                        "message": {"type": "string"},
                        "details": {"type": "object"},
                        "requestId": {"type": "string", "pattern": grammar::REQUEST_ID_PATTERN,
                                      "description": "The request's id, as its answer's `X-Request-Id` says it."}
                    }
                }}
            }}
        }
    })
}

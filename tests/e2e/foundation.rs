//! The foundation: health, the catalogue, OpenAPI, authentication, authorization and
//! the error envelope, against the real binary.

use serde_json::{Value, json};

use crate::support::{ALL, Server, code, postgres};

#[test]
fn health_catalogue_and_openapi_need_no_token() {
    let server = Server::start(&[]);
    assert_eq!(server.get("/healthz"), (200, "ok".to_owned()));

    let (status, catalogue) = server.get("/api/methods");
    assert_eq!(status, 200);
    let catalogue: Value = serde_json::from_str(&catalogue).unwrap();
    let methods = catalogue["methods"].as_array().unwrap();
    for name in ["export", "plan", "apply", "status"] {
        let method = methods.iter().find(|method| method["name"] == format!("compute.fleet.{name}")).unwrap();
        assert_eq!(method["permission"], "compute:fleet:admin");
        assert_eq!(method["scope"], "compute-fleet");
        assert_eq!(method["module"], "fleet");
        assert_eq!(method["phase"], "v0.2");
        assert_eq!(method["path"], format!("/api/compute/fleet/{name}"));
        assert_eq!(method["kind"], if name == "apply" { "mutation" } else { "read" });
    }
    let create = methods.iter().find(|method| method["name"] == "compute.pools.create").unwrap();
    assert_eq!(create["permission"], "compute:pools:write");
    assert_eq!(create["scope"], "compute-pools");
    assert_eq!(create["kind"], "mutation");
    assert!(methods.iter().any(|method| method["name"] == "compute.events.list"));

    let (status, openapi) = server.get("/api/openapi.json");
    assert_eq!(status, 200);
    let openapi: Value = serde_json::from_str(&openapi).unwrap();
    assert!(openapi["openapi"].as_str().unwrap().starts_with("3."));
    let create = &openapi["paths"]["/api/compute/pools/create"]["post"];
    assert_eq!(create["operationId"], "compute.pools.create");
    assert!(create["requestBody"]["content"]["application/json"]["schema"]["properties"]["class"].is_object());
    let paths = openapi["paths"].as_object().unwrap();
    for method in methods {
        assert!(paths.contains_key(method["path"].as_str().unwrap()), "{method}");
    }
    for route in ["/healthz", "/metrics", "/api/methods", "/api/openapi.json", "/api/compute/events/stream", "/console"]
    {
        assert!(paths[route]["get"]["responses"]["200"].is_object(), "{route} is described");
    }
    assert!(paths["/preview"]["get"]["responses"]["308"].is_object(), "the old address redirects");
    assert_eq!(paths.len(), methods.len() + 9, "every method and every GET route, nothing else");
    let plan = &openapi["paths"]["/api/compute/fleet/plan"]["post"];
    let document = &plan["requestBody"]["content"]["application/json"]["schema"]["properties"]["document"];
    assert_eq!(
        document["properties"]["pools"]["additionalProperties"]["required"],
        json!(["site", "account", "class", "owner"])
    );
    let answer = &plan["responses"]["200"]["content"]["application/json"]["schema"];
    assert!(answer["properties"]["planHash"]["pattern"].is_string());

    // Strings never hold control characters (SPEC §2): every string a request may
    // hold says so, or says exactly what it may be, so that a client (or a fuzzer)
    // that follows the description is never refused for it.
    let mut unbounded = Vec::new();
    for (path, operations) in paths {
        for (verb, operation) in operations.as_object().unwrap() {
            let schema = &operation["requestBody"]["content"]["application/json"]["schema"];
            unbounded_strings(schema, &format!("{verb} {path}"), &mut unbounded);
        }
    }
    assert_eq!(unbounded, Vec::<String>::new(), "request strings described without what they may hold");
}

/// Where in `schema` a string may be anything, control characters included.
fn unbounded_strings(schema: &Value, at: &str, found: &mut Vec<String>) {
    match schema {
        Value::Object(members) => {
            let string = match &members.get("type") {
                Some(Value::String(kind)) => kind == "string",
                Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == "string"),
                _ => false,
            };
            if string && !["pattern", "enum", "const", "format"].iter().any(|bound| members.contains_key(*bound)) {
                found.push(at.to_owned());
            }
            for (name, member) in members {
                unbounded_strings(member, &format!("{at}/{name}"), found);
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                unbounded_strings(item, &format!("{at}/{index}"), found);
            }
        }
        _ => {}
    }
}

#[test]
fn missing_or_unknown_tokens_are_unauthenticated() {
    let server = Server::start(&[]);
    let (status, body) = server.raw(None, "/api/compute/fleet/export", "{}");
    assert_eq!((status, code(&body)), (401, "UNAUTHENTICATED"));
    let (status, body) = server.raw(Some("fleet_not-a-token"), "/api/compute/fleet/export", "{}");
    assert_eq!((status, code(&body)), (401, "UNAUTHENTICATED"));
    assert!(body["error"]["message"].is_string());
}

#[test]
fn a_missing_grant_is_permission_denied_naming_permission_and_scope() {
    let server = Server::start(&[]);
    server.tenant("acme");
    let reader = server.token("acme", "reader", &["compute:pools:read @ compute-pools"]);
    let (status, body) = server.call(&reader, "fleet/export", json!({}));
    assert_eq!((status, code(&body)), (403, "PERMISSION_DENIED"));
    assert_eq!(body["error"]["details"]["permission"], "compute:fleet:admin");
    assert_eq!(body["error"]["details"]["scope"], "compute-fleet");
    let (status, body) = server.call(&reader, "pools/create", json!({}));
    assert_eq!((status, code(&body)), (403, "PERMISSION_DENIED"));
    assert_eq!(body["error"]["details"]["permission"], "compute:pools:write");
    let (status, _) = server.call(&reader, "pools/list", json!({}));
    assert_eq!(status, 200);
}

#[test]
fn bad_requests_get_the_spec_errors() {
    let server = Server::start(&["--body-limit", "1024"]);
    let token = server.tenant_with_token("acme");

    let (status, body) = server.raw(Some(&token), "/api/compute/sites/list", "{not json");
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"));
    assert!(body["error"]["details"]["problems"].is_array());

    let (status, body) = server.raw(Some(&token), "/api/compute/sites/frobnicate", "{}");
    assert_eq!((status, code(&body)), (404, "NOT_FOUND"));
    let (status, body) = server.raw(Some(&token), "/api/compute/nothing/list", "{}");
    assert_eq!((status, code(&body)), (404, "NOT_FOUND"));

    let (status, body) = server.raw(Some(&token), "/api/compute/sites/list", "x".repeat(4096));
    assert_eq!((status, code(&body)), (413, "PAYLOAD_TOO_LARGE"));

    // An empty body means {}.
    let (status, body) = server.raw(Some(&token), "/api/compute/sites/list", "");
    assert_eq!((status, body), (200, json!({"items": []})));

    // The server is still fine.
    assert_eq!(server.get("/healthz").0, 200);
}

#[test]
fn the_default_body_limit_is_16_mib() {
    use std::io::{Read, Write};
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    // Announce one byte more than 16 MiB and send only the start: the server answers from
    // the announced length without reading the rest.
    let address = server.base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    let head = format!(
        "POST /api/compute/sites/list HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        (16 << 20) + 1
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&[b' '; 1024]).unwrap();
    let mut answer = vec![0; 4096];
    let read = stream.read(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("PAYLOAD_TOO_LARGE"), "{answer}");

    // Exactly at the limit is fine: `{}` with spaces inside.
    let mut body = vec![b' '; 16 << 20];
    body[0] = b'{';
    body[(16 << 20) - 1] = b'}';
    let (status, _) = server.raw(Some(&token), "/api/compute/sites/list", body);
    assert_eq!(status, 200);
}

#[test]
fn tokens_are_stored_only_as_hashes() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "sites/create", json!({"region": "eu-west-1"}));
    drop(server.token("acme", "bob", &[ALL]));
    let secret = token.trim_start_matches("fleet_");
    if postgres() {
        let stored = server.sql().text("SELECT string_agg(tokens::text, ' ') FROM tokens").unwrap_or_default();
        assert!(stored.contains("tok_") && !stored.contains(secret), "the tokens table holds a secret: {stored}");
        return;
    }
    let mut files = vec![server.db_path()];
    files.push(server.db_path().with_extension("db-wal"));
    for file in files {
        if let Ok(bytes) = std::fs::read(&file) {
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(&token), "{} holds the raw token", file.display());
            assert!(!text.contains(secret), "{} holds the token's secret", file.display());
        }
    }
}

#[test]
fn admin_refuses_bad_input() {
    let server = Server::start(&[]);
    let output = std::process::Command::new(crate::support::FLEET)
        .arg("--db")
        .arg(server.db_path())
        .args(["admin", "tenant", "create", "Not_A_Name"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    server.tenant("acme");
    let output = std::process::Command::new(crate::support::FLEET)
        .arg("--db")
        .arg(server.db_path())
        .args(["admin", "token", "create", "--tenant", "acme", "--principal", "bob", "--grant", "compute:fleet"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("grant"));
}

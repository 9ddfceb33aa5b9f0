//! The wire conventions and the registry (SPEC §2, §8) against the real binary: health,
//! the catalogue and an exact OpenAPI description, the error envelope and its codes,
//! strict JSON, control characters, 405 with `Allow`, heads and bodies too large.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::raw::{body_of, exchange, get_request};
use crate::support::{Server, code, problem_paths};

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
fn a_wrong_http_method_is_405_with_allow() {
    let server = Server::start(&[]);
    let answer = exchange(&server, get_request(&server, "/api/compute/fleet/plan").as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("\r\nallow: post\r\n"), "{answer}");
    assert_eq!(code(&body_of(&answer)), "METHOD_NOT_ALLOWED");

    let post = format!("POST /healthz HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\n\r\n", server.address());
    let answer = exchange(&server, post.as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("\r\nallow: get\r\n"), "{answer}");
    assert_eq!(code(&body_of(&answer)), "METHOD_NOT_ALLOWED");

    // An unknown path is still 404.
    let answer =
        exchange(&server, get_request(&server, "/api/compute/nothing/here").as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert_eq!(code(&body_of(&answer)), "NOT_FOUND");
}

#[test]
fn oversized_heads_get_the_error_envelope_and_framing_errors_are_refused() {
    let server = Server::start(&[]);
    let big =
        format!("GET /healthz HTTP/1.1\r\nHost: {}\r\nX-Padding: {}\r\n\r\n", server.address(), "a".repeat(100 << 10));
    let answer = exchange(&server, big.as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 431"), "{}", &answer[..answer.len().min(200)]);
    assert_eq!(code(&body_of(&answer)), "PAYLOAD_TOO_LARGE", "431 carries its code (docs/decisions/0021)");

    // A head past hyper's read buffer, and two Content-Length headers: hyper refuses the
    // request before any of our code runs, and its answer carries the envelope too.
    let huge =
        format!("GET /healthz HTTP/1.1\r\nHost: {}\r\nX-Padding: {}\r\n\r\n", server.address(), "a".repeat(1 << 20));
    let answer = exchange(&server, huge.as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 431"), "{}", &answer[..answer.len().min(200)]);
    assert_eq!(code(&body_of(&answer)), "PAYLOAD_TOO_LARGE", "{answer}");
    let smuggled = format!(
        "POST /api/compute/sites/list HTTP/1.1\r\nHost: {}\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{{}}",
        server.address()
    );
    let answer = exchange(&server, smuggled.as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(code(&body_of(&answer)), "INVALID_ARGUMENT", "{answer}");
    assert!(answer.to_ascii_lowercase().contains("content-type: application/json"), "{answer}");
    assert_eq!(server.get("/healthz"), (200, "ok".to_owned()));
}

#[test]
fn a_long_bad_value_is_quoted_by_a_prefix_and_its_length() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let owner = "x".repeat(100_000);
    let (status, body) = server.call(&token, "quotas/set", json!({ "owner": format!("A{owner}") }));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{}", &body.to_string()[..200]);
    let answer = body.to_string();
    assert!(answer.len() < 1000, "a short answer, not the value twice: {} bytes", answer.len());
    assert!(answer.contains("(100001 characters)"), "{answer}");
}

#[test]
fn duplicate_keys_are_refused_in_bodies_and_documents() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let (status, body) =
        server.raw(Some(&token), "/api/compute/sites/create", r#"{"region": "eu-1", "region": "eu-2"}"#);
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert_eq!(problem_paths(&body), ["/region"]);

    let plan = r#"{"document": {"pools": {"gpu-a": {"site": "s", "account": "a", "class": "gpu",
                   "owner": "team", "gpus": 1, "gpus": 2}}}}"#;
    let (status, body) = server.raw(Some(&token), "/api/compute/fleet/plan", plan);
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert_eq!(problem_paths(&body), ["/document/pools/gpu-a/gpus"]);
    let (status, _) = server.raw(Some(&token), "/api/compute/fleet/apply", plan);
    assert_eq!(status, 400);
    assert_eq!(server.ok(&token, "sites/list", json!({}))["items"], json!([]));
}

#[test]
fn control_characters_are_refused_with_their_path() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let (status, body) = server.call(
        &token,
        "sites/create",
        json!({"region": "\u{1b}[31meu\u{7}", "description": "ok", "labels": {"k\u{85}": "v", "tier": "\u{0}"}}),
    );
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    let mut paths = problem_paths(&body);
    paths.sort();
    assert_eq!(paths, ["/labels/k\u{85}", "/labels/tier", "/region"]);

    let document = json!({"sites": {"eu": {"region": "eu-1", "description": "Lab\u{9b}31m"}}});
    let (status, body) = server.call(&token, "fleet/plan", json!({ "document": document }));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert_eq!(problem_paths(&body), ["/document/sites/eu/description"]);
    // Unicode beyond the control characters is fine.
    server.ok(&token, "sites/create", json!({"region": "eu-1", "description": "Labor in Zürich — ünïcödé"}));
}

/// The resident memory `pid` has held at its peak, in bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() << 10
}

/// Issue 62 (SPEC §2 amended): an error lists at most 100 problems and counts the rest
/// in `details.more`, on every method; and the probe's body — 16 MiB of unknown keys,
/// which made a 73 MB answer and took 2.9 GiB to read — is answered with a small error
/// and bounded memory, eight at once.
#[test]
fn problem_lists_stop_at_a_hundred_and_no_body_shape_exhausts_the_server() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let (_, catalogue) = server.get("/api/methods");
    let catalogue: Value = serde_json::from_str(&catalogue).unwrap();
    let keys: Vec<String> = (0..1000).map(|index| format!(r#""k{index}":1"#)).collect();
    let thousand = format!("{{{}}}", keys.join(","));
    for method in catalogue["methods"].as_array().unwrap() {
        let path = method["path"].as_str().unwrap();
        let (status, body) = server.raw(Some(&token), path, thousand.clone());
        assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{path}: {body}");
        let details = &body["error"]["details"];
        let listed = details["problems"].as_array().unwrap().len();
        // The thousand unknown keys, and whatever else the method misses.
        assert_eq!(listed, 100, "{path}: {listed} problems listed");
        assert!(details["more"].as_u64().unwrap_or(0) >= 900, "{path}: {}", details["more"]);
    }

    // The probe's body (unknown keys, `"a1":1,`): a small answer from every method,
    // whatever it is; at 2 MiB each, the shape is the probe's. Reading it does not
    // depend on the database: the PostgreSQL run leaves it to this one.
    if crate::support::postgres() {
        return;
    }
    let probe = |size: usize| {
        let mut probe = String::with_capacity(size);
        probe.push('{');
        let mut index = 0;
        while probe.len() < size - 32 {
            probe.push_str(&format!(r#""a{index}":1,"#));
            index += 1;
        }
        probe.push_str(r#""last":1}"#);
        probe
    };
    let smaller = probe(2 << 20);
    for method in catalogue["methods"].as_array().unwrap() {
        let path = method["path"].as_str().unwrap();
        let (status, body) = server.raw(Some(&token), path, smaller.clone());
        let refused = matches!(code(&body), "INVALID_ARGUMENT" | "PAYLOAD_TOO_LARGE" | "RESOURCE_EXHAUSTED");
        assert!(refused, "{path}: {status} {}", body.to_string().chars().take(300).collect::<String>());
        assert!(body.to_string().len() < 64 << 10, "{path}: a small answer");
    }
    // Eight of the probe's own 16 MiB bodies at once hold what the total admits.
    let probe = probe(16 << 20);
    let before = peak_memory(server.pid());
    let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let sent: Vec<_> = (0..8).map(|_| scope.spawn(|| server.raw(Some(&token), "/api/compute/sites/list", probe.clone()))).collect();
        sent.into_iter().map(|answer| answer.join().unwrap()).collect()
    });
    for (status, body) in &answers {
        assert!(matches!(code(body), "INVALID_ARGUMENT" | "PAYLOAD_TOO_LARGE" | "RESOURCE_EXHAUSTED"), "{status}: {body}");
        assert!(body.to_string().len() < 64 << 10, "a small answer");
    }
    let grown = peak_memory(server.pid()).saturating_sub(before);
    assert!(grown < 2 << 30, "eight probes grew the server's peak memory by {} MiB", grown >> 20);
    // It still serves.
    server.ok(&token, "sites/list", json!({}));
}

/// SPEC §2: a key named twice in one object is `INVALID_ARGUMENT`, on every method and
/// for every member its request takes — never the last one silently kept.
#[test]
fn every_method_refuses_a_key_named_twice() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let (_, description) = server.get("/api/openapi.json");
    let description: Value = serde_json::from_str(&description).unwrap();
    let (mut methods, mut sent) = (0, 0);
    for (path, item) in description["paths"].as_object().unwrap() {
        let Some(schema) = item["post"]["requestBody"]["content"]["application/json"].get("schema") else { continue };
        methods += 1;
        let mut members: Vec<&str> = schema["properties"].as_object().map_or(Vec::new(), |properties| {
            properties.keys().map(String::as_str).collect()
        });
        if members.is_empty() {
            members.push("anything");
        }
        for member in members {
            let (status, body) = server.raw(Some(&token), path, format!(r#"{{"{member}": null, "{member}": null}}"#));
            assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{path} /{member}: {body}");
            let twice = format!(r#"the key "{member}" appears twice in one object"#);
            let problems = body["error"]["details"]["problems"].as_array().unwrap();
            assert!(
                problems.iter().any(|problem| problem["path"] == format!("/{member}") && problem["message"] == twice),
                "{path} /{member}: {body}"
            );
            sent += 1;
        }
    }
    assert!(methods > 50 && sent > methods, "every member of {methods} methods: {sent}");
}

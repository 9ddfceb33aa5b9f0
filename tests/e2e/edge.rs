//! The planner at the edge (SPEC §11): `fleet-edge.wasm` served by wasmtime-wasi-http in
//! front of a real origin `fleet serve`, both on loopback. Export and plan answer with
//! the origin's exact bytes; the origin decides who may plan; the rest is 501; an origin
//! that is down, silent or speaking nonsense is 503, in bounded time.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::edge_host::{EDGE_WASM, EdgeServer};
use crate::support::{Server, code};

/// POSTs `body` to `base` + `path` with the token; the status and the exact bytes.
/// The request id every request here names itself with: the edge and the origin answer
/// alike, byte for byte, only when they name the request alike.
const REQUEST_ID: &str = "edge-test/1";

fn post(base: &str, path: &str, token: Option<&str>, body: &str) -> (u16, Vec<u8>, Option<String>) {
    let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    let mut request = http.post(format!("{base}{path}")).header("X-Request-Id", REQUEST_ID).body(body.to_owned());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().unwrap();
    assert_eq!(response.headers()["x-request-id"], REQUEST_ID, "{base}{path}");
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").map(|value| value.to_str().unwrap().to_owned());
    (status, response.bytes().unwrap().to_vec(), retry_after)
}

fn edge(origin: &str) -> EdgeServer {
    EdgeServer::start(Path::new(EDGE_WASM), origin).unwrap()
}

fn estate() -> Value {
    json!({
        "sites": {"eu-west": {"region": "eu-west-1", "labels": {"tier": "prod"}}},
        "providerAccounts": {"aws-main": {"provider": "aws", "credentialsRef": "vault:aws/main"}},
        "pools": {"gpu-a": {"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml",
                            "vcpus": 512, "gpus": 64}},
        "ownerQuotas": {"team-ml": {"vcpus": 256, "gpus": 32, "instances": 100}},
        "offers": {"ml-to-research": {"pool": "gpu-a", "to": "team-research", "vcpus": 64}},
        "flavors": {"g1-large": {"pool": "gpu-a", "vcpus": 8, "memoryMib": 65536, "gpus": 1}}
    })
}

#[test]
fn export_and_plan_at_the_edge_are_the_origins_bytes() {
    let origin = Server::start(&[]);
    let token = origin.tenant_with_token("acme");
    origin.ok(&token, "fleet/apply", json!({"document": estate()}));
    let edge = edge(&format!("http://{}", origin.address()));
    let base = format!("http://{}", origin.address());

    let mut changed = estate();
    changed["pools"]["gpu-a"]["gpus"] = json!(96);
    changed["flavors"]["g2-huge"] = json!({"pool": "gpu-a", "gpus": 8});
    let requests = [
        ("/api/compute/fleet/export", String::new()),
        ("/api/compute/fleet/plan", json!({"document": changed}).to_string()),
        ("/api/compute/fleet/plan", json!({"document": {}, "prune": true}).to_string()),
        ("/api/compute/fleet/plan", json!({"document": {"pools": {"Bad": {}}}}).to_string()),
        ("/api/compute/fleet/plan", "{\"document\": {}, \"document\": {}}".to_owned()),
    ];
    for (path, body) in &requests {
        let at_origin = post(&base, path, Some(&token), body);
        let at_edge = post(&edge.base, path, Some(&token), body);
        assert_eq!(at_edge.0, at_origin.0, "{path} {body}");
        assert_eq!(
            String::from_utf8_lossy(&at_edge.1),
            String::from_utf8_lossy(&at_origin.1),
            "{path} {body}: the edge's bytes are the origin's"
        );
    }
    // The origin's state read: export or plan, with a state's media type.
    let http = reqwest::blocking::Client::new();
    let read_state = |method: &str, accept: &str| {
        let state = http
            .post(format!("{base}/api/compute/fleet/{method}"))
            .bearer_auth(&token)
            .header("accept", accept)
            .body("{}")
            .send()
            .unwrap();
        let content_type = state.headers()["content-type"].to_str().unwrap().to_owned();
        assert_eq!((state.status().as_u16(), content_type.as_str()), (200, accept), "{method}");
        state
    };
    let state = read_state("plan", "application/vnd.fleet.state+json");
    let state: Value = state.json().unwrap();
    assert_eq!(state, origin.ok(&token, "preview/snapshot", json!({})), "one read, two doors");
    assert_eq!(state["caller"]["tenant"], "acme");
    // The edge's own read: the same state as the planner's encoding, in its envelope.
    let encoded = read_state("export", "application/vnd.fleet.state").bytes().unwrap();
    let (header, encoding) = fleet_guest::state::open_envelope(&encoded).unwrap();
    let header: Value = serde_json::from_str(header).unwrap();
    assert_eq!((&header["caller"], &header["plugins"]), (&state["caller"], &state["plugins"]));
    let catalog = fleet_guest::Catalog::built_in();
    let decoded = fleet_guest::state::decode(&catalog, encoding).unwrap();
    let from_json = fleet_guest::Snapshot::from_json(&catalog, &state).unwrap();
    assert_eq!(fleet_guest::Snapshot { caller: from_json.caller.clone(), ..decoded }, from_json);

    let (status, body, _) = post(&edge.base, "/api/compute/fleet/plan", Some(&token), &requests[1].1);
    assert_eq!(status, 200);
    let plan: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(plan["summary"]["create"], 1, "{plan}");
    assert_eq!(plan["summary"]["update"], 1, "{plan}");
}

#[test]
fn the_origin_decides_who_may_plan_and_the_edge_never_applies() {
    let origin = Server::start(&[]);
    let token = origin.tenant_with_token("acme");
    let reader = origin.token("acme", "bob", &["compute:pools:read @ compute-pools"]);
    let edge = edge(&format!("http://{}", origin.address()));
    let base = format!("http://{}", origin.address());
    let plan = json!({"document": estate()}).to_string();
    for token in [Some("no-such-token"), Some(reader.as_str()), None] {
        let at_origin = post(&base, "/api/compute/fleet/plan", token, &plan);
        let at_edge = post(&edge.base, "/api/compute/fleet/plan", token, &plan);
        assert!(matches!(at_origin.0, 401 | 403), "{}", at_origin.0);
        assert_eq!((at_edge.0, at_edge.1), (at_origin.0, at_origin.1), "{token:?}");
    }
    // Without an id of its own, the request gets one from the edge, which the origin's
    // refusal passing through names too: the edge sent it on.
    let unnamed = reqwest::blocking::Client::new()
        .post(format!("{}/api/compute/fleet/plan", edge.base))
        .bearer_auth("no-such-token")
        .body(plan.clone())
        .send()
        .unwrap();
    let id = unnamed.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(id.len() == 32 && id.bytes().all(|byte| byte.is_ascii_hexdigit()), "{id}");
    let refusal: Value = unnamed.json().unwrap();
    assert_eq!(refusal["error"]["requestId"], id.as_str(), "{refusal}");
    for path in ["/api/compute/fleet/apply", "/api/compute/fleet/status", "/api/compute/pools/list"] {
        let (status, body, _) = post(&edge.base, path, Some(&token), &plan);
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((status, code(&body)), (501, "UNSUPPORTED"), "{path}");
    }
    assert_eq!(origin.call(&token, "pools/list", json!({})).1["items"], json!([]), "nothing was applied");
    let health = reqwest::blocking::get(format!("{}/healthz", edge.base)).unwrap();
    assert_eq!(health.text().unwrap(), "ok");
}

/// A loopback port that nothing listens on.
fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{address}")
}

/// A loopback origin that answers every connection with `reply` (or, with `None`,
/// accepts and says nothing).
fn fake_origin(reply: Option<&'static str>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0; 4096];
            let _ = stream.read(&mut request);
            if let Some(reply) = reply {
                let _ = stream.write_all(reply.as_bytes());
            } else {
                open.push(stream);
            }
        }
    });
    format!("http://{address}")
}

#[test]
fn an_origin_that_is_down_silent_or_speaking_nonsense_is_unavailable() {
    let not_a_state =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 13\r\n\r\n{\"not\": \"it\"}";
    let failing = "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 2\r\n\r\n{}";
    let origins = [
        ("down", closed_port(), Duration::from_secs(10)),
        ("not a state", fake_origin(Some(not_a_state)), Duration::from_secs(10)),
        ("not HTTP", fake_origin(Some("hello\r\n\r\n")), Duration::from_secs(10)),
        ("failing", fake_origin(Some(failing)), Duration::from_secs(10)),
        ("silent", fake_origin(None), Duration::from_secs(45)),
    ];
    for (what, origin, bound) in origins {
        let edge = edge(&origin);
        let started = Instant::now();
        let (status, body, retry_after) = post(&edge.base, "/api/compute/fleet/plan", Some("t"), "{\"document\": {}}");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((status, code(&body)), (503, "UNAVAILABLE"), "{what}: {body}");
        assert_eq!(retry_after.as_deref(), Some("1"), "{what}");
        assert!(started.elapsed() < bound, "{what} took {:?}", started.elapsed());
        // The edge serves on.
        let health = reqwest::blocking::get(format!("{}/healthz", edge.base)).unwrap();
        assert_eq!(health.status(), 200, "{what}");
    }
}

/// SPEC §11 and §14: a document with a plugin's section, and the policies in force,
/// plan at the edge to the origin's bytes; the plugin's checks run at the origin.
#[test]
fn plugin_sections_and_policies_plan_at_the_edge_as_at_the_origin() {
    let plugin = std::path::Path::new(env!("FLEET_PLUGINS_DIR")).join("reservations.wasm");
    let policy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/gpus-per-pool.rego");
    let origin = Server::start(&[
        "--plugin",
        plugin.to_str().unwrap(),
        "--policy",
        &format!("mandatory:{}", policy.display()),
    ]);
    let token = origin.tenant_with_token("acme");
    origin.ok(&token, "fleet/apply", json!({"document": estate()}));
    let warn = "package fleet.big_offers\n\nwarn contains {\"msg\": \"a big offer\", \"kind\": \"offer\", \"key\": c.key} if {\n  some c in input.changes\n  c.kind == \"offer\"\n  c.after.vcpus > 32\n}\n";
    origin.ok(&token, "policies/put", json!({"name": "big-offers", "level": "advisory", "source": warn}));
    let admin_only = origin.token("acme", "carol", &["compute:fleet:admin @ compute-fleet"]);
    let edge = edge(&format!("http://{}", origin.address()));
    let base = format!("http://{}", origin.address());

    let reservation = |starts: &str, ends: &str, vcpus: u64| {
        json!({"pool": "gpu-a", "owner": "team-research", "vcpus": vcpus, "gpus": 1, "startsAt": starts, "endsAt": ends})
    };
    let mut with_reservations = estate();
    with_reservations["pools"]["gpu-a"]["gpus"] = json!(96);
    with_reservations["offers"]["ml-to-research"]["vcpus"] = json!(96);
    with_reservations["reservations"] = json!({
        "ml-week": reservation("2026-12-01T00:00:00Z", "2026-12-08T00:00:00Z", 64),
        "backwards": reservation("2026-12-08T00:00:00Z", "2026-12-01T00:00:00Z", 8),
    });
    let plan = json!({"document": with_reservations}).to_string();
    for (token, path, body) in [
        (&token, "/api/compute/fleet/plan", plan.as_str()),
        (&token, "/api/compute/fleet/export", ""),
        (&admin_only, "/api/compute/fleet/plan", plan.as_str()),
    ] {
        let at_origin = post(&base, path, Some(token), body);
        let at_edge = post(&edge.base, path, Some(token), body);
        assert_eq!(at_edge.0, at_origin.0, "{path}");
        assert_eq!(String::from_utf8_lossy(&at_edge.1), String::from_utf8_lossy(&at_origin.1), "{path}");
    }
    let (_, body, _) = post(&edge.base, "/api/compute/fleet/plan", Some(&token), &plan);
    let plan: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(plan["blocked"][0]["reason"], "endsAt must be later than startsAt", "{plan}");
    assert_eq!((plan["summary"]["denied"].as_u64(), plan["summary"]["warnings"].as_u64()), (Some(1), Some(1)));
}

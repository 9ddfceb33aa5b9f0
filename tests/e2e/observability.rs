//! Audit and observability (SPEC §13) against the real binary: the audit trail, the
//! metrics without tenant labels, one structured log event per request.

use serde_json::{Value, json};

use crate::fleet::estate;
use crate::support::{Launch, Server, code};

#[test]
fn the_audit_trail_records_api_and_apply_calls_with_field_changes_per_tenant() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let other = server.tenant_with_token("other");
    let applied = server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let plan_hash = applied["plan"]["planHash"].clone();
    let pool = server.ok(&token, "pools/list", json!({}))["items"][0]["id"].clone();
    server.ok(&token, "pools/update", json!({"id": pool, "gpus": 48}));

    let records = server.ok(&token, "audit/list", json!({}))["records"].as_array().unwrap().clone();
    assert_eq!(records.len(), 7, "six apply calls and one update: {records:?}");
    let by_apply: Vec<&Value> = records.iter().filter(|record| record["via"] == "fleet.apply").collect();
    assert_eq!(by_apply.len(), 6);
    assert!(by_apply.iter().all(|record| record["planHash"] == plan_hash && record["principal"] == "alice"));
    let created = by_apply.iter().find(|record| record["method"] == "compute.pools.create").unwrap();
    assert_eq!(created["kind"], "pool");
    assert_eq!(created["id"], pool);
    assert!(created["changes"].as_array().unwrap().contains(&json!({"field": "gpus", "from": null, "to": 64})));

    let update = records.last().unwrap();
    assert_eq!(update["via"], "api");
    assert!(update.get("planHash").is_none());
    assert_eq!(update["method"], "compute.pools.update");
    assert_eq!(update["changes"], json!([{"field": "gpus", "from": 64, "to": 48}]));
    assert!(update["seq"].as_i64() > created["seq"].as_i64());

    // Filters, and a delete's record.
    let of_pool = server.ok(&token, "audit/list", json!({"id": pool}))["records"].as_array().unwrap().len();
    assert_eq!(of_pool, 2);
    let flavor = server.ok(&token, "flavors/list", json!({}))["items"][0]["id"].clone();
    server.ok(&token, "flavors/delete", json!({"id": flavor}));
    let deleted = server.ok(&token, "audit/list", json!({"kind": "flavor", "after": update["seq"]}))["records"].clone();
    assert_eq!(deleted[0]["method"], "compute.flavors.delete");
    assert!(deleted[0]["changes"].as_array().unwrap().contains(&json!({"field": "diskGib", "from": 100, "to": null})));

    // A failed mutation leaves no record; another tenant sees none of these.
    let (status, _) = server.call(&token, "pools/update", json!({"id": pool, "class": "cpu"}));
    assert_eq!(status, 400);
    assert_eq!(server.ok(&token, "audit/list", json!({}))["records"].as_array().unwrap().len(), 8);
    assert_eq!(server.ok(&other, "audit/list", json!({}))["records"], json!([]));
    let (status, body) =
        server.call(&server.token("acme", "eve", &["compute:pools:read @ compute-pools"]), "audit/list", json!({}));
    assert_eq!((status, code(&body)), (403, "PERMISSION_DENIED"));
}

/// The value of one sample of the exposition, by metric name and labels.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let lines = text.lines().map(|line| Ok(line.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    scrape
        .samples
        .iter()
        .filter(|sample| sample.metric == name)
        .find(|sample| labels.iter().all(|(label, value)| sample.labels.get(label) == Some(*value)))
        .map(|sample| match sample.value {
            prometheus_parse::Value::Counter(value) | prometheus_parse::Value::Gauge(value) => value,
            prometheus_parse::Value::Untyped(value) => value,
            _ => f64::NAN,
        })
        .unwrap_or(0.0)
}

#[test]
fn metrics_count_requests_sandboxes_applies_and_drift_without_tenant_labels() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let (status, before) = server.get("/metrics");
    assert_eq!(status, 200);
    let plans =
        |text: &str| sample(text, "fleet_http_requests_total", &[("method", "compute.fleet.plan"), ("code", "200")]);
    let instances = |text: &str| sample(text, "fleet_sandbox_instances_total", &[]);

    server.ok(&token, "fleet/plan", json!({"document": estate()}));
    server.ok(&token, "fleet/plan", json!({"document": estate()}));
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let _ = server.call(&token, "pools/get", json!({"id": "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa"}));
    let _ = server.get("/no/such/route");
    let (_, after) = server.get("/metrics");
    assert_eq!(plans(&after) - plans(&before), 2.0, "{after}");
    assert!(instances(&after) - instances(&before) >= 3.0, "two plans and an apply, each one instance");
    assert_eq!(sample(&after, "fleet_apply_calls_total", &[]), 6.0);
    assert_eq!(sample(&after, "fleet_http_requests_total", &[("method", "compute.pools.get"), ("code", "404")]), 1.0);
    assert_eq!(sample(&after, "fleet_http_requests_total", &[("method", "other"), ("code", "404")]), 1.0);
    assert!(sample(&after, "fleet_http_request_duration_seconds_count", &[("method", "compute.fleet.plan")]) >= 2.0);
    assert_eq!(sample(&after, "fleet_drift_tenants", &[("state", "converged")]), 1.0);
    assert_eq!(sample(&after, "fleet_drift_tenants", &[("state", "drifted")]), 0.0);
    assert!(!after.contains("acme") && !after.contains("alice"), "no tenant or principal labels");
    for name in ["fleet_sandbox_exhausted_total", "fleet_sandbox_traps_total", "fleet_events_published_total"] {
        assert!(after.contains(&format!("# TYPE {name} counter")), "{name} is exported");
    }
}

#[test]
fn every_request_is_one_structured_log_event() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("server.log");
    let launch =
        Launch { open_files: None, stderr: Some(log.clone()), env: vec![("RUST_LOG", "fleet=info")], db: None };
    let server = Server::launch(tempfile::tempdir().unwrap(), &["--log-format", "json"], &launch);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/plan", json!({"document": estate()}));
    let (status, _) = server.call(&token, "pools/get", json!({"id": "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa"}));
    assert_eq!(status, 404);
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    let requests: Vec<Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["target"] == "fleet::request")
        .collect();
    let plan = requests.iter().find(|event| event["method"] == "compute.fleet.plan").expect("the plan's event");
    assert_eq!(plan["tenant"], "acme");
    assert_eq!(plan["principal"], "alice");
    assert_eq!(plan["status"], 200);
    assert!(plan["duration_ms"].as_f64().unwrap() > 0.0);
    assert!(plan["sandbox_ms"].as_f64().unwrap() > 0.0, "{plan}");
    let missing = requests.iter().find(|event| event["method"] == "compute.pools.get").expect("the get's event");
    assert_eq!(missing["status"], 404);
    assert_eq!(missing["code"], "NOT_FOUND");
}

/// SPEC §2: every answer names its request in `X-Request-Id` (the client's own when it
/// is 1–128 visible ASCII characters), an error's envelope carries the same id, and so
/// does every log line of the request's span, the handler's own lines too.
#[test]
fn every_answer_its_error_and_its_log_lines_name_the_request() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("server.log");
    let launch =
        Launch { open_files: None, stderr: Some(log.clone()), env: vec![("RUST_LOG", "fleet=debug")], db: None };
    let server = Server::launch(tempfile::tempdir().unwrap(), &["--log-format", "json"], &launch);
    let token = server.tenant_with_token("acme");
    let http = reqwest::blocking::Client::new();
    let send = |path: &str, id: Option<&str>, body: Value| {
        let mut request = http.post(format!("{}{path}", server.base)).bearer_auth(&token).body(body.to_string());
        if let Some(id) = id {
            request = request.header("X-Request-Id", id);
        }
        let response = request.send().unwrap();
        let header = response.headers().get("x-request-id").map(|id| id.to_str().unwrap().to_owned());
        let header = header.unwrap_or_else(|| panic!("{path} answered without X-Request-Id"));
        (response.status().as_u16(), header, response.json::<Value>().unwrap_or(Value::Null))
    };
    let is_new = |id: &str| id.len() == 32 && id.bytes().all(|byte| byte.is_ascii_hexdigit());

    // A client's own id is kept, on a success and on an error alike.
    let (status, id, _) = send("/api/compute/fleet/plan", Some("plan-7/retry:1"), json!({"document": estate()}));
    assert_eq!((status, id.as_str()), (200, "plan-7/retry:1"));
    let missing = json!({"id": "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa"});
    let (status, id, body) = send("/api/compute/pools/get", Some("get-1"), missing.clone());
    assert_eq!((status, id.as_str(), &body["error"]["requestId"]), (404, "get-1", &json!("get-1")), "{body}");
    // Any other is replaced by a new one, which the envelope names too.
    for refused in [Some("two words"), Some(&*"x".repeat(129)), None] {
        let (status, id, body) = send("/api/compute/pools/get", refused, missing.clone());
        assert_eq!(status, 404);
        assert!(is_new(&id), "{refused:?} -> {id}");
        assert_eq!(body["error"]["requestId"], id.as_str());
    }
    let (_, first, _) = send("/api/compute/pools/get", None, missing.clone());
    let (_, second, _) = send("/api/compute/pools/get", None, missing.clone());
    assert_ne!(first, second, "each request its own id");
    // Routes besides the methods, and a request hyper refuses before any route runs.
    let health = http.get(format!("{}/healthz", server.base)).header("X-Request-Id", "hc").send().unwrap();
    assert_eq!(health.headers()["x-request-id"], "hc");
    let (status, id, body) = send("/api/compute/no/such", Some("lost"), json!({}));
    assert_eq!((status, id.as_str(), &body["error"]["requestId"]), (404, "lost", &json!("lost")));
    let mut raw = std::net::TcpStream::connect(server.base.trim_start_matches("http://")).unwrap();
    std::io::Write::write_all(&mut raw, b"POST /api/compute/pools/get HTTP/1.1\r\nHost: x\r\nX-Request-Id: mine\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut raw, &mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let body: Value = serde_json::from_str(body).unwrap();
    let id = body["error"]["requestId"].as_str().unwrap();
    assert!(head.starts_with("HTTP/1.1 400") && is_new(id) && head.contains(&format!("x-request-id: {id}")), "{answer}");
    drop(server);

    // Every log line of a request's span names its id: the request's own event, and the
    // lines of the handler that ran the planner on a blocking thread.
    let text = std::fs::read_to_string(&log).unwrap();
    let events: Vec<Value> = text.lines().filter_map(|line| serde_json::from_str::<Value>(line).ok()).collect();
    let in_request = |event: &&Value| {
        event["spans"].as_array().is_some_and(|spans| spans.iter().any(|span| span["name"] == "request"))
    };
    let of_plan: Vec<&Value> =
        events.iter().filter(in_request).filter(|event| event["span"]["request_id"] == "plan-7/retry:1").collect();
    assert!(of_plan.iter().any(|event| event["target"] == "fleet::request"), "the request's event: {text}");
    assert!(of_plan.iter().any(|event| event["message"] == "the planner ran"), "the handler's line: {text}");
    for event in events.iter().filter(in_request) {
        assert!(event["span"]["request_id"].as_str().is_some_and(|id| !id.is_empty()), "{event}");
    }
}

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

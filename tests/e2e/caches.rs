//! Caches never serve stale data (docs/decisions/0010): a write by anyone — another
//! server on the same database file, `fleet admin`, plain SQL — is seen by the very next
//! request, however warm the caches of the server that answers it.

use serde_json::{Value, json};

use crate::support::{ALL, Launch, Server, admin, code};

fn estate() -> Value {
    json!({
        "sites": {"eu-west": {"region": "eu-west-1"}},
        "providerAccounts": {"aws-main": {"provider": "aws"}},
        "pools": {"gpu-a": {"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml", "gpus": 8}}
    })
}

fn calls(plan: &Value) -> Vec<String> {
    plan["calls"].as_array().unwrap().iter().map(|call| call["method"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn every_write_is_seen_by_the_very_next_plan_whoever_writes() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let launch = Launch { db: Some(server.db_path()), ..Launch::default() };
    let other = Server::launch(tempfile::tempdir().unwrap(), &[], &launch);
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let plan = || server.ok(&token, "fleet/plan", json!({"document": estate()}));
    // Warm: the same state twice.
    assert_eq!(calls(&plan()), Vec::<String>::new());
    assert_eq!(calls(&plan()), Vec::<String>::new());
    let pool = server.ok(&token, "pools/list", json!({}))["items"][0]["id"].as_str().unwrap().to_owned();
    let (_, metrics) = server.get("/metrics");
    for cache in ["state", "tokens"] {
        let hits = metrics
            .lines()
            .find_map(|line| line.strip_prefix(&format!("fleet_cache_hits_total{{cache=\"{cache}\"}} ")))
            .and_then(|count| count.trim().parse::<f64>().ok());
        assert!(hits.is_some_and(|hits| hits >= 1.0), "the {cache} cache answered: {metrics}");
    }

    // Another server on the same database changes the pool.
    other.ok(&token, "pools/update", json!({"id": pool, "gpus": 16}));
    let planned = plan();
    assert_eq!(calls(&planned), ["compute.pools.update"]);
    assert_eq!(planned["changes"][0]["text"], "~ pool gpu-a: update (gpus 16 -> 8)");

    // Plain SQL from another connection: the database's triggers count it too.
    let mut db = server.sql();
    db.run("UPDATE pools SET gpus = 8, vcpus = 4 WHERE tenant = 'acme'");
    let planned = plan();
    assert_eq!(planned["changes"][0]["text"], "~ pool gpu-a: update (vcpus 4 -> 0)");
    db.run(
        "INSERT INTO sites (tenant, id, region, description, labels, created_at, updated_at)
         VALUES ('acme', 'site_plain', 'us-east-1', '', '{}', '2026-12-01T00:00:00Z', '2026-12-01T00:00:00Z')",
    );
    let exported = server.ok(&token, "fleet/export", json!({}));
    assert_eq!(exported["document"]["sites"]["site_plain"]["region"], "us-east-1", "{exported}");
    db.run("DELETE FROM fleet_bindings WHERE tenant = 'acme' AND kind = 'pool'");
    let exported = server.ok(&token, "fleet/export", json!({}));
    assert!(exported["document"]["pools"].get(&pool).is_some(), "export keys the unbound pool by id: {exported}");
}

#[test]
fn a_token_revoked_by_another_process_is_refused_by_the_very_next_request() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let plan = json!({"document": estate()});
    server.ok(&token, "fleet/plan", plan.clone());
    server.ok(&token, "fleet/plan", plan.clone());
    let listed = admin(&server.db_path(), &["token", "list", "--tenant", "acme", "--json"]);
    let tokens: Value = serde_json::from_str(&listed).unwrap();
    let id = tokens[0]["id"].as_str().unwrap();
    admin(&server.db_path(), &["token", "revoke", id]);
    let (status, body) = server.call(&token, "fleet/plan", plan.clone());
    assert_eq!((status, code(&body)), (401, "UNAUTHENTICATED"), "{body}");
    // A new token of the same tenant is good at once, the revoked one stays refused.
    let fresh = server.token("acme", "alice", &[ALL]);
    server.ok(&fresh, "fleet/plan", plan.clone());
    assert_eq!(server.call(&token, "fleet/plan", plan).0, 401);
}

#[test]
fn a_cache_that_cannot_be_written_is_named_in_the_warning() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-directory");
    std::fs::write(&blocker, "a file where the cache directory would be").unwrap();
    let cache = blocker.join("fleet");
    let log = dir.path().join("server.log");
    let launch = Launch { open_files: None, stderr: Some(log.clone()), env: Vec::new(), db: None };
    let server = Server::launch(tempfile::tempdir().unwrap(), &["--cache-dir", cache.to_str().unwrap()], &launch);
    assert_eq!(server.get("/healthz"), (200, "ok".to_owned()));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("cannot cache the compiled planner"), "{logged}");
    assert!(logged.contains(cache.to_str().unwrap()), "the warning names the directory: {logged}");
}

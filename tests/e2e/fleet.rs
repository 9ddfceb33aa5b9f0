//! The fleet group end to end: export, plan, apply, status, drift and events, against
//! the real binary.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{ALL, Server, Sql, code, database_of, eventually, postgres};

const ADMIN: &str = "compute:fleet:admin @ compute-fleet";

pub fn estate() -> Value {
    json!({
        "sites": {"eu-west": {"region": "eu-west-1", "labels": {"tier": "prod"}}},
        "providerAccounts": {"aws-main": {"provider": "aws", "credentialsRef": "vault:aws/main"}},
        "pools": {"gpu-a": {"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml",
                            "vcpus": 512, "memoryMib": 2097152, "gpus": 64}},
        "ownerQuotas": {"team-ml": {"vcpus": 256, "memoryMib": 1048576, "gpus": 32, "instances": 100}},
        "offers": {"ml-to-research": {"pool": "gpu-a", "to": "team-research", "vcpus": 64, "gpus": 8}},
        "flavors": {"g1-large": {"pool": "gpu-a", "vcpus": 8, "memoryMib": 65536, "gpus": 1, "diskGib": 100}}
    })
}

/// A document with `pools` pools, each with a flavor and an offer, on a few sites.
pub fn large_estate(pools: usize) -> Value {
    fleet::demo::large_document(pools)
}

fn count(server: &Server, token: &str, group: &str) -> usize {
    server.ok(token, &format!("{group}/list"), json!({}))["items"].as_array().unwrap().len()
}

fn counts(server: &Server, token: &str) -> Vec<usize> {
    ["sites", "accounts", "pools", "quotas", "offers", "flavors"]
        .iter()
        .map(|group| count(server, token, group))
        .collect()
}

#[test]
fn apply_then_export_status_and_reapply() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");

    let plan = server.ok(&token, "fleet/plan", json!({"document": estate()}));
    assert_eq!(plan["summary"]["create"], 6);
    assert_eq!(plan["calls"].as_array().unwrap().len(), 6);
    assert!(plan["planHash"].as_str().unwrap().starts_with("sha256:"));
    // Planning changes nothing and is deterministic.
    assert_eq!(counts(&server, &token), [0; 6]);
    assert_eq!(server.ok(&token, "fleet/plan", json!({"document": estate()})), plan);

    let applied = server.ok(&token, "fleet/apply", json!({"document": estate(), "planHash": plan["planHash"]}));
    assert_eq!(applied["applied"], 6);
    assert_eq!(applied["plan"], plan);
    assert_eq!(counts(&server, &token), [1; 6]);
    let pool = &server.ok(&token, "pools/list", json!({}))["items"][0];
    assert_eq!(pool["id"], plan["calls"][2]["input"]["id"]);

    let status = server.ok(&token, "fleet/status", json!({}));
    assert_eq!(status["applied"]["planHash"], plan["planHash"]);
    assert_eq!(status["applied"]["appliedBy"], "alice");
    assert_eq!(status["applied"]["calls"], 6);
    assert_eq!(status["applied"]["prune"], false);
    assert!(status["applied"]["appliedAt"].as_str().unwrap().ends_with('Z'));
    assert!(status.get("drift").is_none());

    let exported = server.ok(&token, "fleet/export", json!({}));
    assert_eq!(exported["missing"], json!([]));
    assert_eq!(exported["document"]["pools"]["gpu-a"]["site"], "eu-west");
    let replanned = server.ok(&token, "fleet/plan", json!({"document": exported["document"]}));
    assert_eq!(replanned["calls"], json!([]));

    let again = server.ok(&token, "fleet/apply", json!({"document": estate()}));
    assert_eq!(again["applied"], 0);
    assert_eq!(counts(&server, &token), [1; 6]);
}

/// Text with what a bulk write must escape (PostgreSQL's `COPY` text format reads
/// `\N` as NULL and a backslash as an escape) and more comes back from an apply as it
/// went in:
/// in the object, its labels and its audit record.
#[test]
fn text_of_any_characters_survives_an_apply() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    // Control characters are refused at the door; backslashes are what `COPY` reads.
    let awkward = r#"back\slash \N \t \n \. \\ 'quote" é 🚀"#;
    let document = json!({
        "sites": {"eu-west": {"region": "eu-west-1", "description": awkward, "labels": {"note": awkward}}}
    });
    server.ok(&token, "fleet/apply", json!({"document": document}));
    let site = &server.ok(&token, "sites/list", json!({}))["items"][0];
    assert_eq!(site["description"], awkward);
    assert_eq!(site["labels"]["note"], awkward);
    let replanned = server.ok(&token, "fleet/plan", json!({"document": document}));
    assert_eq!(replanned["calls"], json!([]), "nothing changed in the round trip");
    let audit = server.ok(&token, "audit/list", json!({}));
    let written = serde_json::to_string(awkward).unwrap();
    assert!(audit["records"][0]["changes"].to_string().contains(&written), "{audit}");
}

#[test]
fn a_wrong_hash_is_config_drift_and_changes_nothing() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let wrong = format!("sha256:{}", "0".repeat(64));
    let (status, body) = server.call(&token, "fleet/apply", json!({"document": estate(), "planHash": wrong}));
    assert_eq!((status, code(&body)), (409, "CONFIG_DRIFT"));
    assert_eq!(body["error"]["details"]["expected"], wrong);
    assert!(body["error"]["details"]["actual"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(counts(&server, &token), [0; 6]);
    assert!(server.ok(&token, "fleet/status", json!({})).get("applied").is_none());
}

#[test]
fn apply_authorizes_every_call_as_the_caller() {
    let server = Server::start(&[]);
    server.tenant("acme");
    let admin_only = server.token("acme", "ci-bot", &[ADMIN]);
    // The plan says what the caller may not do (SPEC §14), and apply refuses it.
    let plan = server.ok(&admin_only, "fleet/plan", json!({"document": estate()}));
    assert_eq!((plan["summary"]["create"].as_u64(), plan["summary"]["blocked"].as_u64()), (Some(0), Some(6)));
    assert_eq!(plan["blocked"][0]["reason"], "not permitted: compute:sites:write @ compute-sites");
    let (status, body) = server.call(&admin_only, "fleet/apply", json!({"document": estate()}));
    assert_eq!((status, code(&body)), (409, "INVALID_STATE"));
    assert_eq!(body["error"]["details"]["blocked"], plan["blocked"]);
    // One module's grant lets that module's changes through, and only them.
    let sites = server.token("acme", "sites", &[ADMIN, "compute:sites:write @ compute-sites"]);
    let plan = server.ok(&sites, "fleet/plan", json!({"document": estate()}));
    assert_eq!((plan["summary"]["create"].as_u64(), plan["summary"]["blocked"].as_u64()), (Some(1), Some(5)));

    let reader = server.token("acme", "reader", &["compute:*:read @ *"]);
    assert_eq!(counts(&server, &reader), [0; 6]);
    // With write grants on every module it goes through.
    let writer = server.token("acme", "writer", &[ADMIN, "compute:*:write @ *"]);
    assert_eq!(server.ok(&writer, "fleet/apply", json!({"document": estate()}))["applied"], 6);
}

#[test]
fn blocked_plans_are_refused_with_invalid_state() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let mut document = estate();
    document["pools"]["gpu-a"]["site"] = json!("nowhere");
    let (status, body) = server.call(&token, "fleet/apply", json!({"document": document}));
    assert_eq!((status, code(&body)), (409, "INVALID_STATE"));
    let blocked = body["error"]["details"]["blocked"].as_array().unwrap();
    assert_eq!(blocked[0]["kind"], "pool");
    assert_eq!(blocked[0]["key"], "gpu-a");
    assert_eq!(blocked[0]["field"], "site");
    assert_eq!(counts(&server, &token), [0; 6]);

    // Changing an immutable field after an apply is blocked too.
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let mut document = estate();
    document["pools"]["gpu-a"]["class"] = json!("cpu");
    let (status, body) = server.call(&token, "fleet/apply", json!({"document": document}));
    assert_eq!((status, code(&body)), (409, "INVALID_STATE"));
    assert_eq!(body["error"]["details"]["blocked"][0]["field"], "class");
}

#[test]
fn invalid_documents_list_every_problem() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let document = json!({"pools": {"gpu-a": {"site": "eu-west", "vcpus": -1, "extra": 1}}, "nonsense": {}});
    let (status, body) = server.call(&token, "fleet/plan", json!({"document": document}));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"));
    let paths = crate::support::problem_paths(&body);
    for path in ["/pools/gpu-a/vcpus", "/pools/gpu-a/extra", "/pools/gpu-a/account", "/nonsense"] {
        assert!(paths.iter().any(|found| found == path), "{path} missing from {paths:?}");
    }
    let (status, body) = server.call(&token, "fleet/plan", json!({"document": {}, "bogus": true}));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"));
}

#[test]
fn prune_then_re_add() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));

    let mut smaller = estate();
    smaller["flavors"] = json!({});
    smaller["offers"] = json!({});
    let kept = server.ok(&token, "fleet/apply", json!({"document": smaller}));
    assert_eq!(kept["applied"], 0, "without prune nothing is removed");

    let pruned = server.ok(&token, "fleet/apply", json!({"document": smaller, "prune": true}));
    assert_eq!(pruned["plan"]["summary"]["delete"], 2);
    assert_eq!(counts(&server, &token), [1, 1, 1, 1, 0, 0]);
    assert_eq!(server.ok(&token, "fleet/status", json!({}))["applied"]["prune"], true);

    let readded = server.ok(&token, "fleet/apply", json!({"document": estate(), "prune": true}));
    assert_eq!(readded["plan"]["summary"]["create"], 2);
    assert_eq!(counts(&server, &token), [1; 6]);

    // Pruning the pools archives them; naming them again restores them.
    let archived = server.ok(&token, "fleet/apply", json!({"document": {"sites": estate()["sites"]}, "prune": true}));
    assert_eq!(archived["plan"]["summary"]["archive"], 1);
    assert_eq!(server.ok(&token, "pools/list", json!({}))["items"][0]["archived"], true);
    let restored = server.ok(&token, "fleet/apply", json!({"document": estate()}));
    assert_eq!(restored["plan"]["summary"]["restore"], 1);
    assert_eq!(server.ok(&token, "pools/list", json!({}))["items"][0]["archived"], false);
}

#[test]
fn read_only_hosts_answer_apply_with_unsupported() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let dir = server.stop();

    let server = Server::start_in(dir, &["--read-only"]);
    let (status, body) = server.call(&token, "fleet/apply", json!({"document": estate()}));
    assert_eq!((status, code(&body)), (501, "UNSUPPORTED"));
    let (status, body) = server.call(&token, "sites/create", json!({"region": "x"}));
    assert_eq!((status, code(&body)), (501, "UNSUPPORTED"));
    assert_eq!(server.ok(&token, "fleet/plan", json!({"document": estate()}))["calls"], json!([]));
    assert!(server.ok(&token, "fleet/export", json!({}))["document"]["pools"]["gpu-a"].is_object());
    assert_eq!(server.ok(&token, "fleet/status", json!({}))["applied"]["calls"], 6);
}

#[test]
fn modules_not_run_are_missing_and_blocked() {
    let server = Server::start(&["--modules", "sites,accounts,pools"]);
    let token = server.tenant_with_token("acme");
    let exported = server.ok(&token, "fleet/export", json!({}));
    assert_eq!(exported["missing"], json!(["ownerQuotas", "offers", "flavors"]));
    let (status, body) = server.call(&token, "offers/list", json!({}));
    assert_eq!((status, code(&body)), (404, "NOT_FOUND"));
    let plan = server.ok(&token, "fleet/plan", json!({"document": estate()}));
    assert_eq!(plan["summary"]["create"], 3);
    assert_eq!(plan["summary"]["blocked"], 3);
    let (status, _) = server.call(&token, "fleet/apply", json!({"document": estate()}));
    assert_eq!(status, 409);
}

/// Unpinned applies of two documents at once, by two principals: every one succeeds (an
/// apply without a plan hash applies the plan made in its transaction, SPEC §6.3), no
/// object is made twice, and the estate is the latest revision's document exactly.
#[test]
fn concurrent_applies_never_duplicate() {
    let server = Server::start(&[]);
    server.tenant("acme");
    let alice = server.token("acme", "alice", &[ALL]);
    let bob = server.token("acme", "bob", &[ALL]);
    let mut other = estate();
    other["pools"]["gpu-a"]["gpus"] = json!(32);
    other["flavors"]["g1-small"] = json!({"pool": "gpu-a", "vcpus": 2});
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..6)
            .map(|index| {
                let (server, token) = (&server, if index % 2 == 0 { &alice } else { &bob });
                let document = if index % 3 == 0 { other.clone() } else { estate() };
                scope.spawn(move || server.call(token, "fleet/apply", json!({"document": document})))
            })
            .collect();
        for run in runs {
            let (status, body) = run.join().unwrap();
            assert_eq!(status, 200, "{body}");
        }
    });
    let token = &alice;
    assert_eq!(count(&server, token, "sites"), 1);
    assert_eq!(count(&server, token, "accounts"), 1);
    assert_eq!(count(&server, token, "pools"), 1);
    assert_eq!(count(&server, token, "offers"), 1);
    let flavors = count(&server, token, "flavors");
    assert!(flavors == 1 || flavors == 2, "{flavors} flavors");
    // Whatever won, the estate is the latest revision's document: it plans to nothing,
    // and it is one of the two.
    // Every apply that changed the estate or the document made a revision; one that
    // found its document applied already and nothing to do made none.
    let history = server.ok(token, "fleet/history", json!({"limit": 1}));
    let newest = history["revisions"][0]["revision"].as_u64().unwrap();
    assert!((2..=6).contains(&newest), "{history}");
    let latest = server.ok(token, "fleet/revision", json!({"revision": newest}))["document"].clone();
    assert!(latest == estate() || latest == other, "{latest}");
    let plan = server.ok(token, "fleet/plan", json!({"document": latest}));
    assert_eq!((plan["calls"].clone(), plan["blocked"].clone()), (json!([]), json!([])), "{plan}");
    let exported = server.ok(token, "fleet/export", json!({}))["document"].clone();
    assert_eq!(exported["pools"]["gpu-a"]["gpus"], latest["pools"]["gpu-a"]["gpus"]);
}

/// The tenant's events but its applies' own (`fleet.applied`), after `after`.
fn drift_events(server: &Server, token: &str, after: &Value) -> Vec<Value> {
    let events = server.ok(token, "events/list", json!({"after": after}))["events"].as_array().unwrap().clone();
    events.into_iter().filter(|event| event["type"] != "fleet.applied").collect()
}

/// Waits (up to 60 s) until the tenant has `count` events but its applies' own; returns
/// them all.
fn wait_for_events(server: &Server, token: &str, count: usize) -> Vec<Value> {
    assert!(
        eventually(Duration::from_secs(60), || drift_events(server, token, &json!(0)).len() >= count),
        "{count} drift event(s) within 60 s: {:?}",
        drift_events(server, token, &json!(0))
    );
    drift_events(server, token, &json!(0))
}

/// Waits until the tenant's drift has been checked `checks` more times: status's
/// `checkedAt` (whole seconds) moves on once a second for each. What a check publishes
/// is published in the transaction that records its time, so an event those checks
/// would have published is there by then.
pub fn wait_for_checks(server: &Server, token: &str, checks: usize) {
    let checked_at = || server.ok(token, "fleet/status", json!({}))["checkedAt"].clone();
    for check in 1..=checks {
        let before = checked_at();
        assert!(before.is_string(), "the tenant has an applied document: {before}");
        assert!(
            eventually(Duration::from_secs(30), || checked_at() != before),
            "drift check {check} of {checks} after the one at {before} within 30 s"
        );
    }
}

#[test]
fn drift_is_detected_and_converges_with_one_event_each() {
    let server = Server::start(&["--drift-interval", "300ms"]);
    let token = server.tenant_with_token("acme");
    let neighbour = server.tenant_with_token("neighbour");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let pool = server.ok(&token, "pools/list", json!({}))["items"][0].clone();

    server.ok(&token, "pools/update", json!({"id": pool["id"], "gpus": 63}));
    let events = wait_for_events(&server, &token, 1);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "fleet.drifted");
    assert_eq!(events[0]["tenant"], "acme");
    assert!(events[0]["data"]["planHash"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(events[0]["data"]["summary"]["update"], 1);
    let status = server.ok(&token, "fleet/status", json!({}));
    assert_eq!(status["drift"]["summary"]["update"], 1);
    assert!(status["drift"]["checkedAt"].is_string());

    // Still drifted the same way: two more checks publish no second event.
    wait_for_checks(&server, &token, 2);
    assert_eq!(drift_events(&server, &token, &json!(0)).len(), 1, "no second event for the same drift");

    server.ok(&token, "pools/update", json!({"id": pool["id"], "gpus": 64}));
    let events = wait_for_events(&server, &token, 2);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[1]["type"], "fleet.converged");
    assert!(events[1]["seq"].as_i64() > events[0]["seq"].as_i64());
    assert!(server.ok(&token, "fleet/status", json!({})).get("drift").is_none());

    assert_eq!(drift_events(&server, &token, &events[0]["seq"]).len(), 1);
    assert_eq!(server.ok(&neighbour, "events/list", json!({}))["events"], json!([]));
}

#[test]
fn an_apply_resets_drift_to_converged() {
    let server = Server::start(&["--drift-interval", "300ms"]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let pool = server.ok(&token, "pools/list", json!({}))["items"][0].clone();
    server.ok(&token, "pools/update", json!({"id": pool["id"], "vcpus": 1}));
    assert_eq!(wait_for_events(&server, &token, 1)[0]["type"], "fleet.drifted");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let events = drift_events(&server, &token, &json!(0));
    assert_eq!(events[1]["type"], "fleet.converged", "{events:?}");
    assert!(server.ok(&token, "fleet/status", json!({})).get("drift").is_none());
}

#[test]
fn a_10k_object_document_plans_over_http() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let document = large_estate(3300);
    let plan = server.ok(&token, "fleet/plan", json!({"document": document}));
    let objects = 4 + 3 * 3300 + 50;
    assert_eq!(plan["summary"]["create"], objects);
    assert_eq!(plan["calls"].as_array().unwrap().len(), objects);
    assert_eq!(plan["blocked"], json!([]));
}

#[test]
fn a_killed_apply_leaves_all_or_nothing() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let document = large_estate(1500);
    let body = json!({"document": document}).to_string();
    let base = server.base.clone();
    let sender = {
        let token = token.clone();
        std::thread::spawn(move || {
            let client = reqwest::blocking::Client::new();
            let _ = client.post(format!("{base}/api/compute/fleet/apply")).bearer_auth(token).body(body).send();
        })
    };
    // Let the apply get going (its transaction has held the database a while, or it was
    // quick and answered already), then kill the server mid-flight.
    assert!(
        eventually(Duration::from_secs(60), || server.writing_for(Duration::from_millis(200)) || sender.is_finished()),
        "the apply began within 60 s"
    );
    let pid = server.pid();
    let killed = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    assert!(killed.success());
    let _ = sender.join();
    let dir = server.stop();

    let server = Server::start_in(dir, &[]);
    let pools = count(&server, &token, "pools");
    let status = server.ok(&token, "fleet/status", json!({}));
    if pools == 0 {
        assert_eq!(counts(&server, &token), [0; 6]);
        assert!(status.get("applied").is_none(), "{status}");
    } else {
        assert_eq!(counts(&server, &token), [2, 2, 1500, 50, 1500, 1500]);
        assert_eq!(status["applied"]["calls"], 4 + 3 * 1500 + 50);
    }
}

#[test]
fn the_demo_serves_a_token_and_an_estate() {
    let server = Server::start(&["--demo"]);
    let token_line = server.banner.iter().find(|line| line.contains("FLEET_TOKEN=")).expect("a token line");
    let token = token_line.split('=').nth(1).unwrap().trim();
    let exported = server.ok(token, "fleet/export", json!({}));
    assert!(exported["document"]["pools"]["gpu-a"].is_object(), "{exported}");
    assert_eq!(
        server.ok(token, "fleet/plan", json!({"document": exported["document"], "prune": true}))["calls"],
        json!([])
    );
    assert_eq!(server.ok(token, "fleet/status", json!({}))["applied"]["appliedBy"], "demo-admin");

    // Started again, it prints a new token and revokes the one before: one all-powerful
    // token at a time, however often the demo starts.
    let first = token.to_owned();
    let dir = server.stop();
    let again = Server::start_in(dir, &["--demo"]);
    let token_line = again.banner.iter().find(|line| line.contains("FLEET_TOKEN=")).expect("a token line");
    let second = token_line.split('=').nth(1).unwrap().trim();
    assert_ne!(second, first);
    again.ok(second, "fleet/status", json!({}));
    let (status, body) = again.call(&first, "fleet/status", json!({}));
    assert_eq!((status, code(&body)), (401, "UNAUTHENTICATED"), "{body}");
    let live = again.sql().number("SELECT count(*) FROM tokens WHERE principal = 'demo-admin' AND revoked_at IS NULL");
    assert_eq!(live, 1);
}

#[test]
fn the_banner_says_where_the_console_is_or_exactly_how_to_build_it() {
    let empty = tempfile::tempdir().unwrap();
    let assets = empty.path().to_str().unwrap();
    let server = Server::start(&["--demo", "--console-dir", assets]);
    let console = server.banner.iter().find(|line| line.starts_with("console: ")).expect("a console line");
    assert!(console.starts_with("console: not built"), "{console}");
    assert!(console.contains(&format!("CONSOLE_OUT={assets} ")) && console.ends_with("console/build.sh"), "{console}");
    assert!(!console.contains("fleet_"), "no token in the line: {console}");

    std::fs::write(empty.path().join("fleet_planner.js"), "// built").unwrap();
    let dir = server.stop();
    // `--preview-dir`, the flag's old name, still works.
    let server = Server::start_in(dir, &["--demo", "--preview-dir", assets]);
    let console = server.banner.iter().find(|line| line.starts_with("console: ")).expect("a console line");
    assert_eq!(console, &format!("console: http://{}/console (sign in with a token)", server.address()));
}

#[test]
fn the_preview_snapshot_lets_another_host_plan_byte_for_byte() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let snapshot = server.ok(&token, "preview/snapshot", json!({}));
    // The caller's grants come with it: another host blocks what the caller may not do.
    assert_eq!(snapshot["caller"], json!({"tenant": "acme", "principal": "alice", "grants": ["compute:*:* @ *"]}));
    assert_eq!(snapshot["pools"].as_array().unwrap().len(), 1);
    assert_eq!(snapshot["bindings"].as_array().unwrap().len(), 5);

    let mut changed = estate();
    changed["pools"]["gpu-a"]["gpus"] = json!(128);
    let request = json!({"document": changed, "prune": true}).to_string();
    let snapshot: fleet_guest::Snapshot = serde_json::from_value(snapshot).unwrap();
    let elsewhere = fleet_guest::plan(&snapshot, &request).unwrap();
    let here = reqwest::blocking::Client::new()
        .post(format!("{}/api/compute/fleet/plan", server.base))
        .bearer_auth(&token)
        .body(request)
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(elsewhere, here);

    let (status, _) =
        server.call(&server.token("acme", "reader", &["compute:*:read @ *"]), "preview/snapshot", json!({}));
    assert_eq!(status, 403);
}

#[test]
fn drift_events_stream_as_server_sent_events() {
    use std::io::{BufRead, BufReader};
    let server = Server::start(&["--drift-interval", "300ms"]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));

    let (status, _) = server.get("/api/compute/events/stream");
    assert_eq!(status, 401);
    let stream = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
        .get(format!("{}/api/compute/events/stream", server.base))
        .bearer_auth(&token)
        .send()
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");

    let pool = server.ok(&token, "pools/list", json!({}))["items"][0]["id"].clone();
    server.ok(&token, "pools/update", json!({"id": pool, "gpus": 1}));
    let mut lines = BufReader::new(stream).lines();
    // The apply's own event first (the stream replays it), then the drift.
    let event = lines.by_ref().map(Result::unwrap).find(|line| line.starts_with("event: ")).unwrap();
    assert_eq!(event, "event: fleet.applied");
    let event = lines.by_ref().map(Result::unwrap).find(|line| line.starts_with("event: ")).unwrap();
    assert_eq!(event, "event: fleet.drifted");
    let data = lines.next().unwrap().unwrap();
    let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(data["tenant"], "acme");
    assert_eq!(data["type"], "fleet.drifted");
}

#[test]
fn identical_unpinned_applies_all_converge() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let applied: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let runs: Vec<_> =
            (0..8).map(|_| scope.spawn(|| server.call(&token, "fleet/apply", json!({"document": estate()})))).collect();
        runs.into_iter().map(|run| run.join().unwrap()).collect()
    });
    for (status, body) in &applied {
        assert_eq!(*status, 200, "{body}");
    }
    let calls: u64 = applied.iter().map(|(_, body)| body["applied"].as_u64().unwrap()).sum();
    assert_eq!(calls, 6, "the first applies every call, the others none");
    for group in ["sites", "accounts", "pools", "quotas", "offers", "flavors"] {
        assert_eq!(server.ok(&token, &format!("{group}/list"), json!({}))["items"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn a_read_only_server_writes_nothing() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let pool = server.ok(&token, "pools/list", json!({}))["items"][0]["id"].clone();
    server.ok(&token, "pools/update", json!({"id": pool, "gpus": 1}));
    let dir = server.stop();

    // The apply's own event (fleet.applied) is the only one.
    let rows = |db: &std::path::Path| -> (i64, i64) {
        let mut db = Sql::open(db);
        (db.number("SELECT count(*) FROM events"), db.number("SELECT count(*) FROM fleet_drift"))
    };
    assert_eq!(rows(&database_of(dir.path())), (1, 0));
    let server = Server::start_in(dir, &["--read-only", "--drift-interval", "200ms"]);
    // Kept as a fixed wait: what it asserts is that nothing is written in seven intervals
    // (a read-only server runs no checks, so there is no check to wait for).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(rows(&server.db_path()), (1, 0), "no drift recorded, no event published");
    let (status, body) = server.call(&token, "pools/update", json!({"id": pool, "gpus": 2}));
    assert_eq!((status, code(&body)), (501, "UNSUPPORTED"));
    // A status that checks now finds the drift, and records nothing.
    let refreshed = server.ok(&token, "fleet/status", json!({"refresh": true}));
    assert_eq!(refreshed["drift"]["summary"]["update"], 1, "{refreshed}");
    assert_eq!(rows(&server.db_path()), (1, 0));
    assert_eq!(server.ok(&token, "fleet/export", json!({}))["document"]["pools"]["gpu-a"]["gpus"], 1);

    // A read-only server never creates or migrates a database.
    let empty = tempfile::tempdir().unwrap();
    let db = match postgres() {
        true => database_of(empty.path()),
        false => empty.path().join("none.db"),
    };
    let output = std::process::Command::new(crate::support::FLEET)
        .arg("--db")
        .arg(&db)
        .args(["serve", "--read-only", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    match postgres() {
        true => {
            assert!(stderr.contains("migration(s) behind this fleet; a read-only server does not migrate"), "{stderr}");
            let tables = Sql::open(&db).number("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'");
            assert_eq!(tables, 0, "the empty database stays empty");
        }
        false => {
            assert!(stderr.contains("existing database"), "{stderr}");
            assert!(!db.exists());
        }
    }
}

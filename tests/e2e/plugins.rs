//! Module plugins (SPEC §10) end to end: the example plugins served as API groups and
//! planned as FleetConfig sections, every load failure, and a hostile plugin contained.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{FLEET, Server, code, problem_paths};

const PLUGINS_DIR: &str = env!("FLEET_PLUGINS_DIR");
const HOSTILE: &str = env!("FLEET_HOSTILE_PLUGIN_WASM");
/// What precedes the hostile plugin's descriptor in its file, and the room it has
/// (`test-programs/hostile-plugin`).
const MARKER: &[u8] = b"FLEET-TEST-DESCRIPTOR:";
const ROOM: usize = 2048;

fn example(name: &str) -> String {
    let path = Path::new(PLUGINS_DIR).join(format!("{name}.wasm"));
    assert!(path.is_file(), "{} is built by the workspace (see host/build.rs)", path.display());
    path.display().to_string()
}

fn reservations() -> String {
    example("reservations")
}

fn estate() -> Value {
    json!({
        "sites": {"eu-west": {"region": "eu-west-1"}},
        "providerAccounts": {"aws-main": {"provider": "aws"}},
        "pools": {"gpu-a": {"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml",
                            "vcpus": 64, "gpus": 8}}
    })
}

fn reservation(pool: &str, starts: &str, ends: &str, vcpus: u64) -> Value {
    json!({"pool": pool, "owner": "team-research", "vcpus": vcpus, "gpus": 1, "startsAt": starts, "endsAt": ends})
}

fn with_reservations(reservations: Value) -> Value {
    let mut document = estate();
    document["reservations"] = reservations;
    document
}

fn methods(plan: &Value) -> Vec<&str> {
    plan["calls"].as_array().unwrap().iter().map(|call| call["method"].as_str().unwrap()).collect()
}

#[test]
fn reservations_are_a_module_like_the_built_in_ones() {
    let plugin = reservations();
    let server = Server::start(&["--plugin", &plugin]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let pool = server.ok(&token, "pools/list", json!({}))["items"][0]["id"].as_str().unwrap().to_owned();

    // The plugin's rules, each at its field.
    let (status, body) = server.call(
        &token,
        "reservations/create",
        reservation(&pool, "2026-12-02T00:00:00Z", "2026-12-01T00:00:00Z", 8),
    );
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert_eq!(problem_paths(&body), ["/endsAt"]);
    assert!(body["error"]["message"].as_str().unwrap().contains("endsAt must be later than startsAt"), "{body}");
    let (_, body) = server.call(&token, "reservations/create", reservation(&pool, "soon", "2026-12-01T00:00:00Z", 65));
    assert_eq!(problem_paths(&body), ["/startsAt", "/vcpus"], "{body}");
    // The host's own validation from the descriptor comes first: types, required fields.
    let (status, body) = server.call(&token, "reservations/create", json!({"pool": pool, "vcpus": -1}));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"));
    assert_eq!(problem_paths(&body), ["/owner", "/vcpus", "/startsAt", "/endsAt"], "{body}");
    // References name live objects of the tenant.
    let nowhere = "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    let (status, body) = server.call(
        &token,
        "reservations/create",
        reservation(nowhere, "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", 1),
    );
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "{body}");

    let mut good = reservation(&pool, "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", 64);
    good["idempotencyKey"] = json!("once");
    let created = server.ok(&token, "reservations/create", good.clone());
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("rsv_") && id.len() == 30, "{id}");
    assert_eq!(created["note"], "");
    assert!(created["createdAt"].is_string());
    assert_eq!(server.ok(&token, "reservations/create", good)["id"], id.as_str(), "the idempotency key holds");
    assert_eq!(server.ok(&token, "reservations/get", json!({"id": id}))["owner"], "team-research");
    assert_eq!(server.ok(&token, "reservations/list", json!({}))["items"].as_array().unwrap().len(), 1);

    // Updates: the rules judge the object as it would be; immutable fields stay.
    let (_, body) = server.call(&token, "reservations/update", json!({"id": id, "endsAt": "2026-11-30T00:00:00Z"}));
    assert_eq!(problem_paths(&body), ["/endsAt"], "{body}");
    let (status, body) = server.call(&token, "reservations/update", json!({"id": id, "pool": nowhere}));
    assert_eq!((status, problem_paths(&body)), (400, vec!["/pool".to_owned()]), "{body}");
    let updated = server.ok(&token, "reservations/update", json!({"id": id, "note": "quarter end"}));
    assert_eq!(updated["note"], "quarter end");
    // A pool in use by a reservation is not deleted under it; archiving it is refused
    // by nothing, as for every kind that archives.
    let (status, body) = server.call(&token, "pools/update", json!({"id": pool, "vcpus": 8}));
    assert_eq!(status, 200, "a pool's own update is not the reservation's check: {body}");

    // The catalogue, OpenAPI and permissions come from the descriptor.
    let (_, catalogue) = server.get("/api/methods");
    let catalogue: Value = serde_json::from_str(&catalogue).unwrap();
    let create = catalogue["methods"].as_array().unwrap().iter().find(|m| m["name"] == "compute.reservations.create");
    let create = create.expect("the plugin's methods are in the catalogue");
    assert_eq!(
        (create["permission"].as_str(), create["scope"].as_str()),
        (Some("compute:reservations:write"), Some("compute-reservations"))
    );
    let (_, openapi) = server.get("/api/openapi.json");
    let openapi: Value = serde_json::from_str(&openapi).unwrap();
    let schema = &openapi["paths"]["/api/compute/reservations/create"];
    assert!(schema.is_object(), "OpenAPI has the plugin's methods");
    assert!(openapi.to_string().contains("^rsv_[a-z2-7]{26}$"), "ids have the plugin's prefix");
    let pools_only = server.token("acme", "pool-admin", &["compute:pools:* @ *"]);
    let (status, body) = server.call(&pools_only, "reservations/list", json!({}));
    assert_eq!((status, code(&body)), (403, "PERMISSION_DENIED"));

    let deleted = server.ok(&token, "reservations/delete", json!({"id": id}));
    assert_eq!(deleted["id"], id.as_str());
    let (status, _) = server.call(&token, "reservations/get", json!({"id": id}));
    assert_eq!(status, 404);
}

#[test]
fn a_fleet_config_with_plugin_sections_is_planned_applied_pruned_and_drift_checked() {
    let plugin = reservations();
    let server = Server::start(&["--plugin", &plugin, "--drift-interval", "1h"]);
    let token = server.tenant_with_token("acme");

    // A rule the plugin refuses is a blocked change with the plugin's reason, and the
    // referenced pool is the document's, as it will be.
    let backwards = with_reservations(json!({
        "ml-week": reservation("gpu-a", "2026-12-08T00:00:00Z", "2026-12-01T00:00:00Z", 64),
        "too-big": reservation("gpu-a", "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", 65),
    }));
    let plan = server.ok(&token, "fleet/plan", json!({"document": backwards}));
    assert_eq!(plan["summary"]["blocked"], 2, "{plan}");
    assert_eq!(
        plan["blocked"][0],
        json!({"kind": "reservation", "key": "ml-week", "field": "endsAt", "reason": "endsAt must be later than startsAt"})
    );
    assert_eq!(plan["blocked"][1]["field"], "vcpus");
    assert!(
        plan["blocked"][1]["reason"].as_str().unwrap().contains("vcpus 65 is more than the 64 vcpus of pool pool_")
    );
    let (status, body) = server.call(&token, "fleet/apply", json!({"document": backwards}));
    assert_eq!((status, code(&body)), (409, "INVALID_STATE"), "{body}");

    let document = with_reservations(json!({
        "ml-week": reservation("gpu-a", "2026-12-01T00:00:00Z", "2026-12-08T00:00:00Z", 64),
    }));
    let plan = server.ok(&token, "fleet/plan", json!({"document": document}));
    assert_eq!(plan["summary"]["blocked"], 0, "{plan}");
    assert_eq!(
        methods(&plan),
        ["compute.sites.create", "compute.accounts.create", "compute.pools.create", "compute.reservations.create"]
    );
    let call = &plan["calls"][3];
    assert_eq!(call["idempotencyKey"], "fleet:acme:reservation:ml-week");
    let planned = call["input"]["id"].as_str().unwrap().to_owned();
    assert!(planned.starts_with("rsv_"));
    assert_eq!(call["input"]["pool"], plan["calls"][2]["input"]["id"], "references are resolved ids");
    let change = plan["changes"].as_array().unwrap().iter().find(|change| change["kind"] == "reservation").unwrap();
    assert_eq!(change["id"], planned.as_str());
    assert!(
        change["text"].as_str().unwrap().starts_with("+ reservation ml-week: create (pool gpu-a, owner team-research")
    );

    let applied = server.ok(&token, "fleet/apply", json!({"document": document, "planHash": plan["planHash"]}));
    assert_eq!(applied["applied"], 4);
    let stored = server.ok(&token, "reservations/get", json!({"id": planned}));
    assert_eq!(stored["vcpus"], 64);
    let again = server.ok(&token, "fleet/plan", json!({"document": document}));
    assert_eq!(methods(&again), Vec::<&str>::new(), "{again}");
    assert_eq!(server.ok(&token, "fleet/apply", json!({"document": document}))["applied"], 0);

    // Export names the reservation by its bound name, its pool by key.
    let exported = server.ok(&token, "fleet/export", json!({}));
    assert_eq!(exported["document"]["reservations"]["ml-week"]["pool"], "gpu-a", "{exported}");
    assert_eq!(exported["missing"], json!([]));
    let replanned = server.ok(&token, "fleet/plan", json!({"document": exported["document"]}));
    assert_eq!(methods(&replanned), Vec::<&str>::new());

    // Drift: an out-of-band change to a plugin object.
    server.ok(&token, "reservations/update", json!({"id": planned, "note": "moved by hand"}));
    let status = server.ok(&token, "fleet/status", json!({"refresh": true}));
    assert_eq!(status["drift"]["summary"]["update"], 1, "{status}");
    server.ok(&token, "fleet/apply", json!({"document": document}));
    assert!(server.ok(&token, "fleet/status", json!({"refresh": true})).get("drift").is_none());

    // Prune removes the reservation as its removal says, before the pool it uses.
    let without = estate();
    let plan = server.ok(&token, "fleet/plan", json!({"document": without}));
    assert_eq!(
        plan["leftAlone"],
        json!([{"kind": "reservation", "key": "ml-week", "id": planned, "action": "delete"}])
    );
    let mut pruned = without.clone();
    pruned["pools"] = json!({});
    let plan = server.ok(&token, "fleet/plan", json!({"document": pruned, "prune": true}));
    assert_eq!(methods(&plan), ["compute.reservations.delete", "compute.pools.archive"]);
    server.ok(&token, "fleet/apply", json!({"document": pruned, "prune": true}));
    assert_eq!(server.ok(&token, "reservations/list", json!({}))["items"], json!([]));

    // A section no loaded plugin serves is an unknown section.
    let (status, body) = server.call(&token, "fleet/plan", json!({"document": {"gizmos": {}}}));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"));
}

#[test]
fn tenants_never_see_each_others_plugin_objects() {
    let plugin = reservations();
    let server = Server::start(&["--plugin", &plugin]);
    let acme = server.tenant_with_token("acme");
    let other = server.tenant_with_token("other");
    let document = with_reservations(json!({
        "ml-week": reservation("gpu-a", "2026-12-01T00:00:00Z", "2026-12-08T00:00:00Z", 8),
    }));
    server.ok(&acme, "fleet/apply", json!({"document": document}));
    let theirs = server.ok(&acme, "reservations/list", json!({}))["items"][0].clone();
    let their_pool = server.ok(&acme, "pools/list", json!({}))["items"][0]["id"].clone();

    assert_eq!(server.ok(&other, "reservations/list", json!({}))["items"], json!([]));
    let (status, _) = server.call(&other, "reservations/get", json!({"id": theirs["id"]}));
    assert_eq!(status, 404);
    let (status, _) = server.call(&other, "reservations/delete", json!({"id": theirs["id"]}));
    assert_eq!(status, 404);
    let mut stolen = reservation(their_pool.as_str().unwrap(), "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", 1);
    stolen["id"] = theirs["id"].clone();
    let (status, body) = server.call(&other, "reservations/create", stolen);
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "another tenant's pool is no pool: {body}");
    assert!(
        server.ok(&other, "fleet/export", json!({}))["document"].get("reservations").is_none_or(|r| r == &json!({}))
    );
    // The same document in the other tenant plans creates of its own.
    let plan = server.ok(&other, "fleet/plan", json!({"document": document}));
    assert_eq!(plan["summary"]["create"], 4);
}

/// Starts `fleet serve` with these flags and expects it to refuse before listening:
/// exit code 1 and a message on stderr.
fn refused(flags: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(FLEET)
        .arg("--db")
        .arg(dir.path().join("fleet.db"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(flags)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("listening"), "it listened: {stdout}");
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The hostile plugin with another descriptor, written into its file.
fn hostile_with(dir: &Path, name: &str, descriptor: Value) -> String {
    let mut bytes = std::fs::read(HOSTILE).unwrap();
    let at = bytes.windows(MARKER.len()).position(|window| window == MARKER).expect("the marker") + MARKER.len();
    let text = descriptor.to_string();
    let room = ROOM - MARKER.len();
    assert!(text.len() <= room);
    bytes[at..at + room].copy_from_slice(format!("{text:room$}").as_bytes());
    write(dir, name, &bytes)
}

/// The hostile plugin as if built against another version of the plugin package.
fn hostile_of_version(version: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(HOSTILE).unwrap();
    let mut replaced = 0;
    for interface in ["plugin", "types"] {
        let from = format!("compute:module/{interface}@0.1.0");
        let to = format!("compute:module/{interface}@{version}");
        assert_eq!(from.len(), to.len());
        while let Some(at) = bytes.windows(from.len()).position(|window| window == from.as_bytes()) {
            bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
            replaced += 1;
        }
    }
    assert!(replaced > 0);
    bytes
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

fn hazard(changes: Value) -> Value {
    let mut descriptor = json!({"group": "hazards", "kind": "hazard", "section": "hazards", "idPrefix": "hz",
        "removal": "delete", "fields": [{"name": "mode", "type": "name", "required": true, "immutable": false}]});
    for (key, value) in changes.as_object().unwrap() {
        descriptor[key] = value.clone();
    }
    descriptor
}

#[test]
fn a_plugin_that_cannot_be_loaded_stops_serve_naming_the_file_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let text = write(dir, "notes.wasm", b"not wasm at all");
    let core = write(dir, "core.wasm", b"\0asm\x01\0\0\0");
    let planner = dir.join("planner.wasm");
    let status = Command::new(FLEET).arg("component").arg("-o").arg(&planner).status().unwrap();
    assert!(status.success());
    let planner = planner.display().to_string();
    let newer = write(dir, "newer.wasm", &hostile_of_version("0.2.0"));
    let camel = hostile_with(dir, "camel.wasm", hazard(json!({"kind": "Hazard", "idPrefix": "h"})));
    let reserved = hostile_with(
        dir,
        "reserved.wasm",
        hazard(json!({"fields": [{"name": "createdAt", "type": "string", "required": false, "immutable": false}]})),
    );
    let built_in = hostile_with(dir, "pools.wasm", hazard(json!({"group": "pools"})));
    let unknown = hostile_with(
        dir,
        "gizmo.wasm",
        hazard(
            json!({"fields": [{"name": "gizmo", "type": "ref", "ref": "gizmo", "required": true, "immutable": false}]}),
        ),
    );
    let copy = write(dir, "copy.wasm", &std::fs::read(reservations()).unwrap());
    let missing = dir.join("missing.wasm").display().to_string();

    let cases: [(&[&str], &str, &str); 10] = [
        (&[&text], &text, "is not a WebAssembly component"),
        (&[&core], &core, "is a core WebAssembly module, not a component"),
        (&[&planner], &planner, "it is not a module plugin: it exports compute:fleet/planner@0.9.0"),
        (&[&newer], &newer, "it is a plugin of compute:module@0.2.0, and this host loads compute:module@0.1.x"),
        (&[&camel], &camel, "its descriptor is invalid: kind \"Hazard\" does not match ^[a-z][a-zA-Z0-9]{0,62}$"),
        (&[&reserved], &reserved, "field \"createdAt\" is reserved"),
        (&[&built_in], &built_in, "its group is that of the built-in kind pool"),
        (&[&unknown], &unknown, "its field gizmo references gizmo, a kind no module serves"),
        (&[&reservations(), &copy], &copy, "its kind is that of the plugin kind reservation"),
        (&[&missing], &missing, "cannot read it"),
    ];
    let without_pools = refused(&["--plugin", &reservations(), "--modules", "sites,accounts"]);
    assert!(
        without_pools.contains("its field pool references pool, a kind no module of this deployment serves"),
        "{without_pools}"
    );
    for (plugins, file, reason) in cases {
        let flags: Vec<&str> = plugins.iter().flat_map(|plugin| ["--plugin", plugin]).collect();
        let stderr = refused(&flags);
        assert!(stderr.contains(&format!("plugin {file}: ")), "{file}: {stderr}");
        assert!(stderr.contains(reason), "{file}: {stderr}");
    }

    // `fleet plugin inspect` tells the same, and prints a valid plugin's descriptor.
    let output = Command::new(FLEET).args(["plugin", "inspect", &camel]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("kind \"Hazard\" does not match"));
    let output = Command::new(FLEET).args(["plugin", "inspect", &reservations()]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let descriptor: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (
            &descriptor["group"],
            &descriptor["kind"],
            &descriptor["section"],
            &descriptor["idPrefix"],
            &descriptor["removal"]
        ),
        (&json!("reservations"), &json!("reservation"), &json!("reservations"), &json!("rsv"), &json!("delete"))
    );
    let fields: Vec<&str> =
        descriptor["fields"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(fields, ["pool", "owner", "vcpus", "gpus", "startsAt", "endsAt", "note"]);
    assert_eq!(
        descriptor["fields"][0],
        json!({"name": "pool", "type": "ref", "ref": "pool", "required": true, "immutable": true})
    );
}

#[test]
fn a_hostile_plugin_costs_one_request_an_error_and_nothing_else() {
    let server = Server::start(&["--plugin", HOSTILE, "--plugin-cpu", "300ms", "--plugin-memory-mib", "32"]);
    let token = server.tenant_with_token("acme");
    let cases = [
        ("loop", 429, "RESOURCE_EXHAUSTED", "CPU budget"),
        ("allocate", 429, "RESOURCE_EXHAUSTED", "memory budget"),
        // The cause of an internal error is in the server's log, not the answer.
        ("trap", 500, "INTERNAL", ""),
        ("garbage", 500, "INTERNAL", ""),
        ("flood", 0, "", ""),
    ];
    for (mode, status, error, message) in cases {
        let (got, body) = server.call(&token, "hazards/create", json!({"mode": mode}));
        if mode == "flood" {
            // Refused for its size, by the host or by the plugin's own memory budget.
            assert!(matches!(code(&body), "INTERNAL" | "RESOURCE_EXHAUSTED"), "{body}");
            continue;
        }
        assert_eq!((got, code(&body)), (status, error), "{mode}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(message), "{mode}: {body}");
        // And the same at plan time: the plan fails, the server serves on.
        let (_, body) = server.call(&token, "fleet/plan", json!({"document": {"hazards": {"h": {"mode": mode}}}}));
        assert_eq!(code(&body), error, "{mode}: {body}");
    }
    let (status, body) = server.call(&token, "hazards/create", json!({"mode": "refuse"}));
    assert_eq!((status, problem_paths(&body)), (400, vec!["/mode".to_owned()]), "{body}");
    assert_eq!(server.ok(&token, "hazards/create", json!({"mode": "calm"}))["mode"], "calm");
    assert_eq!(server.ok(&token, "hazards/list", json!({}))["items"].as_array().unwrap().len(), 1);
    assert_eq!(server.ok(&token, "fleet/export", json!({}))["document"]["hazards"].as_object().unwrap().len(), 1);
    let (status, _) = server.get("/healthz");
    assert_eq!(status, 200);
    // Plugin sandboxes count as sandboxes.
    let (_, metrics) = server.get("/metrics");
    for line in ["fleet_sandbox_exhausted_total{budget=\"cpu\"}", "fleet_sandbox_exhausted_total{budget=\"memory\"}"] {
        let count =
            metrics.lines().find_map(|found| found.strip_prefix(line)).and_then(|n| n.trim().parse::<f64>().ok());
        assert!(count.is_some_and(|count| count >= 2.0), "{line}: {metrics}");
    }
}

/// The example in Python (componentize-py) next to the one in Rust: the contract is the
/// WIT world, whatever the language. Compiling CPython's component takes a while the
/// first time; the compiled artifact is cached like the planner's.
#[test]
fn both_example_plugins_load_together_and_the_python_one_checks_its_rules() {
    let (rust, python) = (reservations(), example("maintenance-windows"));
    let server = Server::start(&["--plugin", &rust, "--plugin", &python]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let site = server.ok(&token, "sites/list", json!({}))["items"][0]["id"].as_str().unwrap().to_owned();

    let window =
        |starts: &str, ends: &str| json!({"site": site, "startsAt": starts, "endsAt": ends, "reason": "kernel"});
    let (status, body) =
        server.call(&token, "maintenance/create", window("2026-12-01T02:00:00Z", "2026-12-09T02:00:00Z"));
    assert_eq!((status, problem_paths(&body)), (400, vec!["/endsAt".to_owned()]), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("at most 7 days"), "{body}");
    let (_, body) = server.call(&token, "maintenance/create", window("2026-02-30T02:00:00Z", "2026-12-01T02:00:00Z"));
    assert_eq!(problem_paths(&body), ["/startsAt"], "{body}");
    let created = server.ok(&token, "maintenance/create", window("2026-12-01T02:00:00Z", "2026-12-01T06:00:00Z"));
    assert!(created["id"].as_str().unwrap().starts_with("mw_"));
    assert_eq!(created["drain"], false);

    // Both plugin sections in one document: planned with each plugin's reasons, applied.
    let mut document = with_reservations(json!({
        "ml-week": reservation("gpu-a", "2026-12-01T00:00:00Z", "2026-12-08T00:00:00Z", 8),
    }));
    document["maintenanceWindows"] = json!({
        "patching": {"site": "eu-west", "startsAt": "2026-12-05T00:00:00Z", "endsAt": "2026-12-04T00:00:00Z"},
    });
    let plan = server.ok(&token, "fleet/plan", json!({"document": document}));
    assert_eq!(plan["blocked"][0]["kind"], "maintenanceWindow", "{plan}");
    assert_eq!(plan["blocked"][0]["field"], "endsAt");
    document["maintenanceWindows"]["patching"]["endsAt"] = json!("2026-12-05T04:00:00Z");
    let applied = server.ok(&token, "fleet/apply", json!({"document": document}));
    assert_eq!(applied["applied"], 2, "{applied}");
    let exported = server.ok(&token, "fleet/export", json!({}))["document"].clone();
    assert_eq!(exported["maintenanceWindows"]["patching"]["site"], "eu-west");
    assert_eq!(exported["reservations"]["ml-week"]["pool"], "gpu-a");
    assert_eq!(methods(&server.ok(&token, "fleet/plan", json!({"document": exported}))), Vec::<&str>::new());
}

#[test]
fn a_plugin_kind_that_archives_is_archived_restored_and_pruned_by_archiving() {
    let dir = tempfile::tempdir().unwrap();
    let archiving = hostile_with(dir.path(), "archiving.wasm", hazard(json!({"removal": "archive"})));
    let server = Server::start(&["--plugin", &archiving]);
    let token = server.tenant_with_token("acme");
    let created = server.ok(&token, "hazards/create", json!({"mode": "calm"}));
    assert_eq!(created["archived"], false);
    let (status, _) = server.call(&token, "hazards/delete", json!({"id": created["id"]}));
    assert_eq!(status, 404, "a kind that archives has no delete");
    assert_eq!(server.ok(&token, "hazards/archive", json!({"id": created["id"]}))["archived"], true);
    assert_eq!(server.ok(&token, "hazards/restore", json!({"id": created["id"]}))["archived"], false);
    let plan = server.ok(&token, "fleet/plan", json!({"document": {}, "prune": true}));
    assert_eq!(methods(&plan), ["compute.hazards.archive"], "{plan}");
    server.ok(&token, "fleet/apply", json!({"document": {}, "prune": true}));
    assert_eq!(server.ok(&token, "hazards/get", json!({"id": created["id"]}))["archived"], true);
    assert!(server.ok(&token, "fleet/export", json!({}))["document"]["hazards"].as_object().unwrap().is_empty());
}

#[test]
fn a_plugin_of_a_later_patch_release_of_the_package_loads() {
    let dir = tempfile::tempdir().unwrap();
    let patched = write(dir.path(), "patch.wasm", &hostile_of_version("0.1.7"));
    let server = Server::start(&["--plugin", &patched]);
    let token = server.tenant_with_token("acme");
    assert_eq!(server.ok(&token, "hazards/create", json!({"mode": "calm"}))["mode"], "calm");
    let (status, body) = server.call(&token, "hazards/create", json!({"mode": "refuse"}));
    assert_eq!((status, problem_paths(&body)), (400, vec!["/mode".to_owned()]), "its check runs: {body}");
}

/// Issue 30: a long value a plugin refuses is the user's bad input, never a 500: the
/// example plugin quotes a short prefix of it, and the host cuts any plugin message
/// longer than 1,024 bytes (SPEC §2, `wit/module/plugin.wit`).
#[test]
fn long_values_and_long_plugin_messages_are_clear_bounded_errors() {
    let server = Server::start(&["--plugin", &reservations(), "--plugin", HOSTILE]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let pool = server.ok(&token, "pools/list", json!({}))["items"][0]["id"].as_str().unwrap().to_owned();
    for length in [900, 1_000, 100_000] {
        let long = "2".repeat(length);
        let (status, body) =
            server.call(&token, "reservations/create", reservation(&pool, &long, "2026-12-01T00:00:00Z", 1));
        assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{length}: {body}");
        assert_eq!(problem_paths(&body), ["/startsAt"]);
        let document = with_reservations(json!({"r": reservation("gpu-a", &long, "2026-12-01T00:00:00Z", 1)}));
        let (status, plan) = server.call(&token, "fleet/plan", json!({"document": document}));
        assert_eq!(status, 200, "{length}: {plan}");
        assert_eq!(plan["blocked"][0]["field"], "startsAt", "{plan}");
        let (status, body) = server.call(&token, "fleet/apply", json!({"document": document}));
        assert_eq!((status, code(&body)), (409, "INVALID_STATE"), "{length}: {body}");

        // A plugin whose own message is that long: cut, with an ellipsis.
        let (status, body) = server.call(&token, "hazards/create", json!({"mode": "verbose", "size": length}));
        assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{length}: {body}");
        let message = body["error"]["details"]["problems"][0]["message"].as_str().unwrap();
        assert!(message.len() <= 1024, "{length}: {} bytes", message.len());
        assert_eq!(message.ends_with('…'), length > 1024, "{length}");
        let (status, plan) =
            server.call(&token, "fleet/plan", json!({"document": {"hazards": {"h": {"mode": "verbose", "size": length}}}}));
        assert_eq!(status, 200, "{length}: {plan}");
        assert!(plan["blocked"][0]["reason"].as_str().unwrap().len() <= 1024, "{length}");
    }
}

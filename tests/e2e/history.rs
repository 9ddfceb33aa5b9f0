//! History and rollback end to end (SPEC §15): every apply is a revision, listed newest
//! first, given back exactly as applied, kept to its tenant; the command line lists,
//! prints, compares and rolls back.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::cli::fleet as cli;
use crate::fleet::estate;
use crate::support::{Launch, Server, code};

fn revisions(server: &Server, token: &str, body: Value) -> Vec<Value> {
    server.ok(token, "fleet/history", body)["revisions"].as_array().expect("revisions").clone()
}

fn numbers(revisions: &[Value]) -> Vec<u64> {
    revisions.iter().map(|revision| revision["revision"].as_u64().expect("a number")).collect()
}

/// The answer to `method` as the text the server sent.
fn text(server: &Server, token: &str, method: &str, body: &str) -> String {
    let response = reqwest::blocking::Client::new()
        .post(format!("{}/api/compute/{method}", server.base))
        .bearer_auth(token)
        .body(body.to_owned())
        .send()
        .expect("the server answers");
    assert_eq!(response.status(), 200);
    response.text().expect("a body")
}

#[test]
fn every_apply_is_a_revision_listed_newest_first_and_given_back_exactly() {
    let policy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policies/gpus-per-pool.rego");
    let server = Server::start(&["--policy", &format!("mandatory:{}", policy.display())]);
    let token = server.tenant_with_token("acme");
    assert_eq!(revisions(&server, &token, json!({})), Vec::<Value>::new());

    // Sent with its own spacing and member order, which the revision keeps.
    let first = r#"{"providerAccounts": {"aws-main": {"provider": "aws"}},
        "sites":   {"eu-west": {"region": "eu-west-1", "labels": {"tier": "prod"}}}}"#;
    let applied = text(&server, &token, "fleet/apply", &format!(r#"{{"document": {first}}}"#));
    let applied: Value = serde_json::from_str(&applied).unwrap();
    let mut second = estate();
    second["pools"]["gpu-a"]["gpus"] = json!(96);
    let overrides = json!([{"policy": "gpus-per-pool", "reason": "the new racks"}]);
    server.ok(&token, "fleet/apply", json!({"document": second, "prune": true, "overrides": overrides}));

    let listed = revisions(&server, &token, json!({}));
    assert_eq!(numbers(&listed), [2, 1]);
    let newest = &listed[0];
    assert_eq!((newest["appliedBy"].as_str(), newest["prune"].as_bool()), (Some("alice"), Some(true)));
    assert_eq!(newest["calls"], 5, "{newest}");
    assert_eq!(listed[1]["planHash"], applied["plan"]["planHash"]);
    assert_eq!(listed[1]["calls"], 2);
    assert!(newest.get("document").is_none(), "history lists no documents: {newest}");
    let status = server.ok(&token, "fleet/status", json!({}));
    assert_eq!(status["applied"]["revision"], 2, "{status}");
    assert_eq!(status["applied"]["planHash"], newest["planHash"]);

    // A page at a time, older ones after the last seen.
    assert_eq!(numbers(&revisions(&server, &token, json!({"limit": 1}))), [2]);
    assert_eq!(numbers(&revisions(&server, &token, json!({"after": 2}))), [1]);
    assert_eq!(numbers(&revisions(&server, &token, json!({"after": 1}))), Vec::<u64>::new());

    // Revision 1's document exactly as it was sent; revision 2's overrides with it.
    let one = text(&server, &token, "fleet/revision", r#"{"revision": 1}"#);
    assert!(one.contains(first), "{one}");
    let one: Value = serde_json::from_str(&one).unwrap();
    assert_eq!((one["revision"].as_u64(), one["overrides"].clone()), (Some(1), json!([])));
    let two = server.ok(&token, "fleet/revision", json!({"revision": 2}));
    assert_eq!(two["document"], second);
    assert_eq!(two["overrides"], overrides);
    assert_eq!(two["planHash"], newest["planHash"]);

    // Bad input, and another tenant, see nothing.
    for (body, expected) in [
        (json!({"revision": 3}), "NOT_FOUND"),
        (json!({"revision": 0}), "NOT_FOUND"),
        (json!({}), "INVALID_ARGUMENT"),
        (json!({"revision": "1"}), "INVALID_ARGUMENT"),
    ] {
        assert_eq!(code(&server.call(&token, "fleet/revision", body.clone()).1), expected, "{body}");
    }
    for body in [json!({"after": 0}), json!({"limit": 0}), json!({"limit": 1001}), json!({"before": 1})] {
        assert_eq!(code(&server.call(&token, "fleet/history", body.clone()).1), "INVALID_ARGUMENT", "{body}");
    }
    let other = server.tenant_with_token("globex");
    assert_eq!(revisions(&server, &other, json!({})), Vec::<Value>::new());
    assert_eq!(code(&server.call(&other, "fleet/revision", json!({"revision": 1})).1), "NOT_FOUND");
}

#[test]
fn the_command_line_lists_prints_compares_and_rolls_back() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let dir = server.dir.path();
    let mut bigger = estate();
    bigger["pools"]["gpu-a"]["gpus"] = json!(128);
    bigger["flavors"]["g1-small"] = json!({"pool": "gpu-a", "vcpus": 2, "memoryMib": 8192, "diskGib": 20});
    for document in [estate(), bigger.clone()] {
        std::fs::write(dir.join("fleet.json"), document.to_string()).unwrap();
        let applied = cli(&server, &token, &["apply", "fleet.json", "--yes"]);
        assert!(applied.status.success(), "{applied:?}");
    }

    let history = cli(&server, &token, &["history"]);
    let listed = String::from_utf8_lossy(&history.stdout);
    assert!(history.status.success(), "{history:?}");
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(lines[0].trim_start().starts_with("2 ") && lines[0].contains("by alice, 2 calls, prune off"), "{listed}");
    assert!(lines[1].trim_start().starts_with("1 ") && lines[1].contains("6 calls"), "{listed}");

    let printed = cli(&server, &token, &["revision", "1", "-o", "one.yaml"]);
    assert!(printed.status.success(), "{printed:?}");
    let one: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("one.yaml")).unwrap()).unwrap();
    assert_eq!(one, estate());

    // What changed from 1 to 2, as a plan words it; exit code 2 for a difference.
    let diff = cli(&server, &token, &["diff", "1", "2"]);
    let shown = String::from_utf8_lossy(&diff.stdout);
    assert_eq!(diff.status.code(), Some(2), "{diff:?}");
    assert!(shown.contains("~ pool gpu-a: update (gpus 64 -> 128)"), "{shown}");
    assert!(shown.contains("+ flavor g1-small: create (pool gpu-a, vcpus 2, memoryMib 8192, diskGib 20)"), "{shown}");
    assert!(shown.contains("1 created, 1 updated, 0 no longer in the document"), "{shown}");
    let backwards = cli(&server, &token, &["diff", "2", "1", "--json"]);
    let backwards: Value = serde_json::from_slice(&backwards.stdout).unwrap();
    let actions: Vec<&str> = backwards["changes"].as_array().unwrap().iter().map(|c| c["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["remove", "update"], "{backwards}");
    assert_eq!(cli(&server, &token, &["diff", "1", "9"]).status.code(), Some(1));

    // Without a terminal a rollback asks and cannot, so changes nothing.
    let refused = cli(&server, &token, &["rollback", "1"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert_eq!(numbers(&revisions(&server, &token, json!({}))), [2, 1]);
    // With --yes it is an apply of revision 1's document: a new revision, history kept.
    let rolled = cli(&server, &token, &["rollback", "1", "--yes"]);
    let said = String::from_utf8_lossy(&rolled.stdout);
    assert!(rolled.status.success(), "{rolled:?}");
    assert!(said.contains("~ pool gpu-a: update (gpus 128 -> 64)") && said.contains("Applied 1 call."), "{said}");
    assert_eq!(numbers(&revisions(&server, &token, json!({}))), [3, 2, 1]);
    let same = cli(&server, &token, &["diff", "1", "3"]);
    assert_eq!(same.status.code(), Some(0), "{same:?}");
    let exported = server.ok(&token, "fleet/export", json!({}));
    assert_eq!(exported["document"]["pools"]["gpu-a"]["gpus"], 64);
    // The flavor the rollback's document no longer names is left alone (no prune), and
    // the plan says what --prune would do; the revision says what it put back.
    assert!(exported["document"]["flavors"].get("g1-small").is_some());
    assert!(said.contains("--prune would delete it"), "{said}");
    let listed = String::from_utf8_lossy(&cli(&server, &token, &["history"]).stdout).into_owned();
    assert!(listed.lines().next().unwrap().contains("rollback of 1"), "{listed}");
    // `rollback --prune` removes what was made since.
    let pruned = cli(&server, &token, &["rollback", "1", "--prune", "--yes"]);
    let said = String::from_utf8_lossy(&pruned.stdout);
    assert!(pruned.status.success(), "{pruned:?}");
    assert!(said.contains("- flavor g1-small: delete") && said.contains("Applied 1 call."), "{said}");
    assert!(server.ok(&token, "fleet/export", json!({}))["document"]["flavors"].get("g1-small").is_none());
    let newest = &revisions(&server, &token, json!({}))[0];
    assert_eq!((newest["rollbackOf"].as_u64(), newest["prune"].as_bool()), (Some(1), Some(true)), "{newest}");

    // `--heal` asks fleet.drift to restore the revision; status says so.
    let healing = cli(&server, &token, &["apply", "fleet.json", "--yes", "--heal"]);
    assert!(healing.status.success(), "{healing:?}");
    let status = cli(&server, &token, &["status"]);
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(said.contains("revision 5, which fleet.drift heals."), "{said}");
    assert_eq!(server.ok(&token, "fleet/status", json!({}))["applied"]["heal"], true);

    // A count written `2.0` is the count 2, as JSON Schema reads it (found by API fuzzing:
    // the apply was refused).
    let document = server.ok(&token, "fleet/revision", json!({"revision": 2}))["document"].clone();
    let body = format!(r#"{{"document": {document}, "rollbackOf": 2.0, "prune": true}}"#);
    let (status, answer) = server.raw(Some(&token), "/api/compute/fleet/apply", body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(revisions(&server, &token, json!({}))[0]["rollbackOf"], 2);
}

/// `fleet diff` compares the documents as the planner reads them: after `serve --demo`
/// (whose first revision leaves defaults out) and an apply of the exported document with
/// three real changes, it shows those three and nothing else. Output for a pipe or a log
/// file has no colour codes; `NO_COLOR` wins over a forced colour.
#[test]
fn diff_shows_only_real_changes_and_colours_only_a_terminal() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let launch = Launch {
        stderr: Some(log.path().to_owned()),
        env: vec![("RUST_LOG", "fleet=info,warn")],
        ..Launch::default()
    };
    let server = Server::launch(tempfile::tempdir().unwrap(), &["--demo"], &launch);
    let token_line = server.banner.iter().find(|line| line.contains("FLEET_TOKEN=")).expect("a token line");
    let token = token_line.split('=').nth(1).unwrap().trim().to_owned();
    let mut exported = server.ok(&token, "fleet/export", json!({}))["document"].clone();
    exported["pools"]["gpu-a"]["gpus"] = json!(96);
    exported["ownerQuotas"]["team-ml"]["instances"] = json!(120);
    exported["flavors"]["g1-large"]["diskGib"] = json!(200);
    server.ok(&token, "fleet/apply", json!({ "document": exported }));

    let diff = cli(&server, &token, &["diff", "1", "2"]);
    let shown = String::from_utf8_lossy(&diff.stdout).into_owned();
    assert_eq!(diff.status.code(), Some(2), "{diff:?}");
    let changed: Vec<&str> = shown.lines().filter(|line| line.trim_start().starts_with(['~', '+', '-'])).collect();
    assert_eq!(changed.len(), 3, "{shown}");
    assert!(shown.contains("~ pool gpu-a: update (gpus 64 -> 96)"), "{shown}");
    assert!(shown.contains("0 created, 3 updated, 0 no longer in the document"), "{shown}");
    assert!(!shown.contains("(none)") && !shown.contains('\u{1b}'), "no colour for a pipe: {shown:?}");

    let forced = |no_color: bool| {
        let mut command = std::process::Command::new(crate::support::FLEET);
        command.args(["diff", "1", "2"]).env("FLEET_SERVER", &server.base).env("FLEET_TOKEN", &token);
        command.env("CLICOLOR_FORCE", "1");
        if no_color {
            command.env("NO_COLOR", "1");
        }
        String::from_utf8_lossy(&command.output().unwrap().stdout).into_owned()
    };
    assert!(forced(false).contains("\u{1b}["), "colour when asked for");
    assert!(!forced(true).contains('\u{1b}'), "NO_COLOR wins");

    // The server's text log went to a file: no colour codes in it either.
    let logged = std::fs::read_to_string(log.path()).unwrap();
    assert!(logged.contains("request"), "{logged}");
    assert!(!logged.contains('\u{1b}'), "{logged}");
}

/// A revision applied with an override says so in `history`, API and command line:
/// which policy, by whom (the applier) and why.
#[test]
fn history_shows_which_revisions_overrode_a_policy() {
    let policy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policies/gpus-per-pool.rego");
    let flag = format!("mandatory:{}", policy.display());
    let server = Server::start(&["--policy", &flag]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({ "document": estate() }));
    let mut bigger = estate();
    bigger["pools"]["gpu-a"]["gpus"] = json!(96);
    let overrides = json!([{"policy": "gpus-per-pool", "reason": "the training run of week 49"}]);
    server.ok(&token, "fleet/apply", json!({ "document": bigger, "overrides": overrides }));

    let listed = revisions(&server, &token, json!({}));
    assert_eq!(listed[0]["overrides"], overrides, "{listed:?}");
    assert_eq!(listed[1]["overrides"], json!([]), "{listed:?}");
    let history = cli(&server, &token, &["history"]);
    let shown = String::from_utf8_lossy(&history.stdout);
    assert!(
        shown.contains("overrode policy gpus-per-pool (alice): the training run of week 49"),
        "{shown}"
    );
}

fn ids(server: &Server, token: &str, group: &str) -> Vec<String> {
    let items = server.ok(token, &format!("{group}/list"), json!({}))["items"].as_array().expect("items").clone();
    items.iter().map(|item| item["id"].as_str().expect("an id").to_owned()).collect()
}

/// `estate()` with its pool named `name`, and what references it following.
fn with_pool_named(name: &str) -> Value {
    let mut document = estate();
    let pool = document["pools"]["gpu-a"].take();
    document["pools"] = json!({ name: pool });
    document["offers"]["ml-to-research"]["pool"] = json!(name);
    document["flavors"]["g1-large"]["pool"] = json!(name);
    document
}

#[test]
fn a_rename_keeps_the_object_and_frees_its_old_name() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let pool = ids(&server, &token, "pools");

    // Renamed with a change under its new name: no call but the update, the same id.
    let mut renamed = with_pool_named("gpu-main");
    renamed["pools"]["gpu-main"]["gpus"] = json!(96);
    renamed["moved"] = json!([{"kind": "pool", "from": "gpu-a", "to": "gpu-main"}]);
    let plan = server.ok(&token, "fleet/plan", json!({"document": renamed}));
    let rename = &plan["changes"][0];
    assert_eq!(rename["action"], "rename", "{plan}");
    assert_eq!((rename["from"].as_str(), rename["key"].as_str()), (Some("gpu-a"), Some("gpu-main")));
    assert_eq!(rename["id"], pool[0].as_str());
    assert_eq!(rename["text"], "~ pool gpu-a → gpu-main: rename");
    assert_eq!(plan["summary"]["rename"], 1);
    assert_eq!(methods(&plan), ["compute.pools.update"]);
    let applied = server.ok(&token, "fleet/apply", json!({"document": renamed, "planHash": plan["planHash"]}));
    assert_eq!(applied["applied"], 1);
    assert_eq!(ids(&server, &token, "pools"), pool);
    let exported = server.ok(&token, "fleet/export", json!({}))["document"].clone();
    assert_eq!(exported["pools"]["gpu-main"]["gpus"], 96, "{exported}");
    assert!(exported["pools"].get("gpu-a").is_none(), "{exported}");
    assert_eq!(exported["flavors"]["g1-large"]["pool"], "gpu-main");

    // The move left in the document is no change at all.
    let again = server.ok(&token, "fleet/plan", json!({"document": renamed}));
    assert_eq!((again["changes"].as_array().unwrap().len(), again["summary"]["rename"].as_u64()), (0, Some(0)));

    // The old name is free: a pool created under it is a new object, with another id.
    let mut both = renamed.clone();
    both["pools"]["gpu-a"] = json!({"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml"});
    let plan = server.ok(&token, "fleet/apply", json!({"document": both}))["plan"].clone();
    let created = plan["changes"].as_array().unwrap().iter().find(|change| change["action"] == "create").unwrap();
    assert_eq!(created["key"], "gpu-a");
    assert_ne!(created["id"], pool[0].as_str());
    let now = ids(&server, &token, "pools");
    assert_eq!(now.len(), 2, "a new pool, not the renamed one again: {now:?}");

    // Blocked renames change nothing; bad ones are refused with their path.
    let mut nothing = both.clone();
    nothing["moved"] = json!([{"kind": "pool", "from": "gpu-x", "to": "gpu-y"}]);
    let (status, body) = server.call(&token, "fleet/apply", json!({"document": nothing}));
    assert_eq!((status, code(&body)), (409, "INVALID_STATE"), "{body}");
    assert_eq!(body["error"]["details"]["blocked"][0]["reason"], "nothing is named gpu-x");
    // gpu-main renamed onto gpu-a, which names the new pool.
    let mut taken = with_pool_named("gpu-a");
    taken["moved"] = json!([{"kind": "pool", "from": "gpu-main", "to": "gpu-a"}]);
    let (_, body) = server.call(&token, "fleet/apply", json!({"document": taken}));
    assert_eq!(body["error"]["details"]["blocked"][0]["reason"], "gpu-a already names another pool", "{body}");
    for (moved, path) in [
        (json!([{"kind": "nonsense", "from": "a", "to": "b"}]), "/moved/0/kind"),
        (json!([{"kind": "pool", "from": "gpu-a", "to": "gpu-a"}]), "/moved/0/to"),
        (json!({"kind": "pool"}), "/moved"),
    ] {
        let mut bad = both.clone();
        bad["moved"] = moved;
        let (status, body) = server.call(&token, "fleet/plan", json!({"document": bad}));
        assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
        assert!(crate::support::problem_paths(&body).contains(&path.to_owned()), "{body}");
    }
    assert_eq!(ids(&server, &token, "pools").len(), 2);

    // The command line shows it.
    std::fs::write(server.dir.path().join("back.json"), {
        let mut back = both.clone();
        back["pools"]["gpu-old"] = back["pools"]["gpu-main"].take();
        back["pools"].as_object_mut().unwrap().remove("gpu-main");
        back["offers"]["ml-to-research"]["pool"] = json!("gpu-old");
        back["flavors"]["g1-large"]["pool"] = json!("gpu-old");
        back["moved"] = json!([{"kind": "pool", "from": "gpu-main", "to": "gpu-old"}]);
        back.to_string()
    })
    .unwrap();
    let shown = cli(&server, &token, &["plan", "back.json"]);
    let said = String::from_utf8_lossy(&shown.stdout);
    assert!(said.contains("~ pool gpu-main → gpu-old: rename") && said.contains("0 to restore, 1 to rename;"), "{said}");
}

fn methods(plan: &Value) -> Vec<&str> {
    plan["calls"].as_array().unwrap().iter().map(|call| call["method"].as_str().unwrap()).collect()
}

#[test]
fn a_plugin_kind_is_renamed_like_a_built_in_one() {
    let plugin = std::path::Path::new(env!("FLEET_PLUGINS_DIR")).join("reservations.wasm");
    let server = Server::start(&["--plugin", plugin.to_str().unwrap()]);
    let token = server.tenant_with_token("acme");
    let mut document = json!({
        "sites": {"eu-west": {"region": "eu-west-1"}},
        "providerAccounts": {"aws-main": {"provider": "aws"}},
        "pools": {"gpu-a": {"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml",
                            "vcpus": 64, "gpus": 8}},
        "reservations": {"ml-week": {"pool": "gpu-a", "owner": "team-research", "vcpus": 8, "gpus": 1,
                                     "startsAt": "2026-12-01T00:00:00Z", "endsAt": "2026-12-08T00:00:00Z"}}
    });
    server.ok(&token, "fleet/apply", json!({"document": document}));
    let before = ids(&server, &token, "reservations");
    let reservation = document["reservations"]["ml-week"].take();
    document["reservations"] = json!({"ml-first-week": reservation});
    document["moved"] = json!([{"kind": "reservation", "from": "ml-week", "to": "ml-first-week"}]);
    let applied = server.ok(&token, "fleet/apply", json!({"document": document}));
    assert_eq!(applied["plan"]["changes"][0]["text"], "~ reservation ml-week → ml-first-week: rename", "{applied}");
    assert_eq!(applied["applied"], 0);
    assert_eq!(ids(&server, &token, "reservations"), before);
    let exported = server.ok(&token, "fleet/export", json!({}))["document"].clone();
    assert!(exported["reservations"].get("ml-first-week").is_some(), "{exported}");
}

/// `estate()` with its pool's gpus at `gpus`: a document of its own revision.
fn with_gpus(gpus: u64) -> Value {
    let mut document = estate();
    document["pools"]["gpu-a"]["gpus"] = json!(gpus);
    document
}

/// Revisions do not grow forever (issue 54): `--keep-revisions` keeps the newest N,
/// `--revisions-max-age` those applied within a while; the applied one always stays,
/// history says from where it keeps them, and a pruned revision says it was.
#[test]
fn a_server_keeps_the_revisions_it_is_told_and_always_the_applied_one() {
    let server = Server::start(&["--keep-revisions", "3"]);
    let token = server.tenant_with_token("acme");
    for gpus in 1..=5 {
        server.ok(&token, "fleet/apply", json!({"document": with_gpus(gpus)}));
    }
    let history = server.ok(&token, "fleet/history", json!({}));
    assert_eq!(numbers(history["revisions"].as_array().unwrap()), [5, 4, 3]);
    assert_eq!(history["oldest"], 3);
    let (status, body) = server.call(&token, "fleet/revision", json!({"revision": 1}));
    assert_eq!((status, code(&body)), (404, "NOT_FOUND"));
    assert!(body["error"]["message"].as_str().unwrap().contains("was pruned"), "{body}");
    let listed = cli(&server, &token, &["history"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("revisions before 3 were pruned"), "{listed:?}");
    // A rollback to a kept revision is a new one; the window moves on.
    assert_eq!(cli(&server, &token, &["rollback", "3", "--yes"]).status.code(), Some(0));
    assert_eq!(numbers(&revisions(&server, &token, json!({}))), [6, 5, 4]);

    // Ages are counted in whole seconds: two seconds on, a revision is over one old.
    let aging = Server::start(&["--revisions-max-age", "1s"]);
    let token = aging.tenant_with_token("acme");
    aging.ok(&token, "fleet/apply", json!({"document": with_gpus(1)}));
    aging.ok(&token, "fleet/apply", json!({"document": with_gpus(2)}));
    // Kept as a fixed wait: the revisions' age is what is asserted, and only an apply,
    // which would change the history, shows it.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    // Both are older than a second now; the next apply removes them.
    aging.ok(&token, "fleet/apply", json!({"document": with_gpus(3)}));
    aging.ok(&token, "fleet/apply", json!({"document": with_gpus(4)}));
    assert_eq!(numbers(&revisions(&aging, &token, json!({}))), [4, 3]);
    // The applied revision stays however old: a self-heal restores it. An apply of the
    // applied document with nothing to do records nothing, so prunes nothing either.
    // Kept as a fixed wait: that the applied revision outlives its age is what is asserted.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let applied_events = || {
        let events = aging.ok(&token, "events/list", json!({}))["events"].as_array().unwrap().clone();
        events.iter().filter(|event| event["type"] == "fleet.applied").count()
    };
    let before = applied_events();
    let unchanged = aging.ok(&token, "fleet/apply", json!({"document": with_gpus(4)}));
    assert_eq!(unchanged["applied"], 0);
    assert_eq!(numbers(&revisions(&aging, &token, json!({}))), [4, 3]);
    assert_eq!(applied_events(), before, "no fleet.applied for an apply that changed nothing");
    aging.ok(&token, "fleet/apply", json!({"document": with_gpus(5)}));
    assert_eq!(aging.ok(&token, "fleet/history", json!({}))["oldest"], 5);
}

//! Where a plan came from end to end (SPEC §20.2): the `source` of an apply or a
//! proposal is kept on the revision or the proposal, shown by history, revision, status,
//! the proposals and the command line, and told by `fleet.applied`; a proposal's apply
//! and a heal carry the source of what they apply; it is no part of the plan hash; and
//! every bad source is refused at its path, changing nothing.

use serde_json::{Value, json};

use crate::cli::fleet as cli;
use crate::fleet::estate;
use crate::support::{Server, code, eventually, problem_paths};

const COMMIT: &str = "3f786850e387550fdab836ed7e6dc881de23001b";

/// A source from GitHub Actions, every member given.
fn from_github() -> Value {
    json!({"repo": "https://github.com/acme/infra", "commit": COMMIT, "ref": "refs/heads/main",
           "path": "fleet/estate.json"})
}

/// A source from a scp-like ssh address, only what is required.
fn from_ssh() -> Value {
    json!({"repo": "git@gitlab.example.com:acme/infra.git", "commit": "89e6c98d"})
}

fn revisions(server: &Server, token: &str) -> Vec<Value> {
    server.ok(token, "fleet/history", json!({}))["revisions"].as_array().unwrap().clone()
}

/// The data of the tenant's `fleet.applied` events, oldest first.
fn applied_events(server: &Server, token: &str) -> Vec<Value> {
    let events = server.ok(token, "events/list", json!({}))["events"].as_array().unwrap().clone();
    events.into_iter().filter(|event| event["type"] == "fleet.applied").map(|event| event["data"].clone()).collect()
}

fn stdout(output: &std::process::Output) -> String {
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn an_applys_source_is_kept_on_its_revision_and_shown_everywhere() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let planned = server.ok(&token, "fleet/plan", json!({"document": estate()}));
    let hash = planned["planHash"].clone();

    // Pinned to the hash planned without a source: the source changes no plan.
    let body = json!({"document": estate(), "planHash": hash, "source": from_github()});
    let applied = server.ok(&token, "fleet/apply", body);
    assert_eq!(applied["plan"]["planHash"], hash);
    assert!(applied["plan"].get("source").is_none(), "{}", applied["plan"]);

    let listed = revisions(&server, &token);
    assert_eq!(listed[0]["source"], from_github(), "{listed:?}");
    let revision = server.ok(&token, "fleet/revision", json!({"revision": 1}));
    assert_eq!(revision["source"], from_github());
    assert_eq!(revision["document"], estate(), "the document is kept without it");
    let status = server.ok(&token, "fleet/status", json!({}));
    assert_eq!(status["applied"]["source"], from_github(), "{status}");
    let told = applied_events(&server, &token);
    assert_eq!((told.len(), &told[0]["source"]), (1, &from_github()), "{told:?}");

    // The command line: the short commit in history, the whole source in status.
    let history = stdout(&cli(&server, &token, &["history"]));
    assert!(history.contains("prune off, commit 3f78685\n"), "{history}");
    let said = stdout(&cli(&server, &token, &["status"]));
    assert!(
        said.contains("From https://github.com/acme/infra @ 3f78685 (refs/heads/main, fleet/estate.json).\n"),
        "{said}"
    );

    // An apply without a source records none; status follows the applied revision.
    let mut changed = estate();
    changed["pools"]["gpu-a"]["gpus"] = json!(48);
    server.ok(&token, "fleet/apply", json!({"document": changed}));
    let listed = revisions(&server, &token);
    assert!(listed[0].get("source").is_none(), "{:?}", listed[0]);
    assert!(server.ok(&token, "fleet/status", json!({}))["applied"].get("source").is_none());
    assert!(applied_events(&server, &token)[1].get("source").is_none());
    assert!(!stdout(&cli(&server, &token, &["status"])).contains("From "));

    // A rollback records what its own request gives, not the source of what it puts back.
    let rollback = json!({"document": estate(), "rollbackOf": 1, "source": from_ssh()});
    server.ok(&token, "fleet/apply", rollback);
    let newest = &revisions(&server, &token)[0];
    assert_eq!((&newest["rollbackOf"], &newest["source"]), (&json!(1), &from_ssh()), "{newest}");
    let two = server.ok(&token, "fleet/revision", json!({"revision": 2}));
    server.ok(&token, "fleet/apply", json!({"document": two["document"], "rollbackOf": 2}));
    let newest = &revisions(&server, &token)[0];
    assert_eq!(newest["rollbackOf"], 2, "{newest}");
    assert!(newest.get("source").is_none(), "{newest}");

    // An apply that changes nothing records no revision, so no source either.
    server.ok(&token, "fleet/apply", json!({"document": changed, "source": from_github()}));
    assert_eq!(revisions(&server, &token).len(), 4);
}

#[test]
fn a_proposals_source_is_shown_with_it_and_recorded_by_its_apply() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let reviewer = server.token(
        "acme",
        "bob",
        &["compute:proposals:review @ compute-proposals", "compute:proposals:read @ compute-proposals"],
    );
    let plain = server.ok(&token, "proposals/create", json!({"document": estate()}));
    let created = server.ok(&token, "proposals/create", json!({"document": estate(), "source": from_ssh()}));
    assert_eq!(created["proposal"]["source"], from_ssh(), "{created}");
    assert_eq!(created["proposal"]["planHash"], plain["proposal"]["planHash"], "the source is no part of the plan");
    assert!(plain["proposal"].get("source").is_none());
    let whole = server.ok(&token, "proposals/get", json!({"number": 2}));
    assert_eq!(whole["proposal"]["source"], from_ssh());
    assert!(whole["plan"].get("source").is_none());
    let listed = server.ok(&token, "proposals/list", json!({}))["proposals"].clone();
    assert_eq!((&listed[0]["source"], listed[1].get("source")), (&from_ssh(), None), "{listed}");
    let said = stdout(&cli(&server, &token, &["proposals"]));
    assert!(said.lines().next().is_some_and(|line| line.ends_with(", commit 89e6c98")), "{said}");
    let said = stdout(&cli(&server, &token, &["proposal", "2"]));
    assert!(said.contains("\nFrom git@gitlab.example.com:acme/infra.git @ 89e6c98\n"), "{said}");

    server.ok(&reviewer, "proposals/review", json!({"number": 2, "verdict": "approve"}));
    // What its reviewers saw is what its apply records: no other source beside it.
    let (status, body) = server.call(&token, "fleet/apply", json!({"proposal": 2, "source": from_github()}));
    assert_eq!((status, code(&body), problem_paths(&body)), (400, "INVALID_ARGUMENT", vec!["/source".to_owned()]));
    assert!(revisions(&server, &token).is_empty(), "nothing applied");
    server.ok(&token, "fleet/apply", json!({"proposal": 2}));
    let newest = &revisions(&server, &token)[0];
    assert_eq!((&newest["proposal"], &newest["source"]), (&json!(2), &from_ssh()), "{newest}");
    let told = &applied_events(&server, &token)[0];
    assert_eq!((&told["proposal"], &told["source"]), (&json!(2), &from_ssh()), "{told}");
    assert_eq!(server.ok(&token, "fleet/status", json!({}))["applied"]["source"], from_ssh());
}

#[test]
fn a_heal_tells_the_source_of_the_revision_it_restores() {
    let server = Server::start(&["--drift-interval", "1s"]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate(), "heal": true, "source": from_github()}));
    let pools = || server.ok(&token, "pools/list", json!({}))["items"].as_array().unwrap().clone();
    let pool = pools()[0]["id"].as_str().unwrap().to_owned();
    server.ok(&token, "pools/update", json!({"id": pool, "gpus": 2}));
    let healed = eventually(std::time::Duration::from_secs(15), || pools()[0]["gpus"] == 64);
    assert!(healed, "fleet.drift heals within 15 s");
    let told = applied_events(&server, &token);
    let heal = told.iter().find(|data| data["via"] == "fleet.heal").expect("the heal's fleet.applied");
    assert_eq!((&heal["revision"], &heal["source"]), (&json!(1), &from_github()), "{heal}");
}

#[test]
fn a_bad_source_is_refused_at_its_path_and_changes_nothing() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let with = |member: &str, value: Value| {
        let mut source = from_github();
        source[member] = value;
        source
    };
    let credentials = "credentials do not belong in the URL";
    let not_a_url = "must be an https or ssh URL";
    let not_a_commit = "must be a commit's name: 7 to 64 hex digits";
    let cases = [
        (with("repo", json!("https://user:secret@github.com/acme/infra")), "/source/repo", credentials),
        (with("repo", json!("https://ghp_secret@github.com/acme/infra")), "/source/repo", credentials),
        (with("repo", json!("ssh://git:secret@github.com/acme/infra")), "/source/repo", credentials),
        (with("repo", json!("github.com/acme/infra")), "/source/repo", not_a_url),
        (with("repo", json!("http://github.com/acme/infra")), "/source/repo", not_a_url),
        (with("repo", json!(format!("https://github.com/{}", "a".repeat(512)))), "/source/repo", "must be at most 512"),
        (with("commit", json!("3f78685z")), "/source/commit", not_a_commit),
        (with("commit", json!("3f7868")), "/source/commit", not_a_commit),
        (with("commit", json!("a".repeat(65))), "/source/commit", not_a_commit),
        (with("commit", json!(3)), "/source/commit", "must be a string"),
        (with("ref", json!("r".repeat(513))), "/source/ref", "must be at most 512 characters"),
        (with("path", json!("")), "/source/path", "must not be empty"),
        (with("branch", json!("main")), "/source/branch", "is not a known field"),
        (json!({"repo": "https://github.com/acme/infra"}), "/source/commit", "is required"),
        (json!("https://github.com/acme/infra"), "/source", "must be an object"),
    ];
    for (source, path, message) in cases {
        for (method, body) in [
            ("fleet/apply", json!({"document": estate(), "source": source})),
            ("proposals/create", json!({"document": estate(), "source": source})),
        ] {
            let (status, refused) = server.call(&token, method, body);
            assert_eq!((status, code(&refused)), (400, "INVALID_ARGUMENT"), "{method} {source}: {refused}");
            let problems = refused["error"]["details"]["problems"].as_array().unwrap();
            assert_eq!(problem_paths(&refused), [path], "{method} {source}: {refused}");
            let said = problems[0]["message"].as_str().unwrap();
            assert!(said.starts_with(message), "{method} {source}: {said}");
            assert!(!refused.to_string().contains("secret"), "a credential is never said back: {refused}");
        }
    }
    // A control character, as JSON escapes it: refused where it is, as in any string.
    let body = format!(
        r#"{{"document": {}, "source": {{"repo": "https://h/r", "commit": "{COMMIT}", "ref": "a\u0007"}}}}"#,
        estate()
    );
    for method in ["fleet/apply", "proposals/create"] {
        let (status, refused) = server.raw(Some(&token), &format!("/api/compute/{method}"), body.clone());
        assert_eq!((status, code(&refused)), (400, "INVALID_ARGUMENT"), "{method}: {refused}");
        assert_eq!(problem_paths(&refused), ["/source/ref"], "{method}: {refused}");
    }
    // Nothing was applied, proposed or planned.
    assert!(revisions(&server, &token).is_empty());
    assert!(server.ok(&token, "fleet/status", json!({})).get("applied").is_none());
    assert_eq!(server.ok(&token, "proposals/list", json!({}))["proposals"], json!([]));
    assert_eq!(server.ok(&token, "sites/list", json!({}))["items"], json!([]));
    // `fleet/plan` plans a document, wherever it came from: it takes no source.
    let (status, refused) = server.call(&token, "fleet/plan", json!({"document": estate(), "source": from_github()}));
    assert_eq!((status, problem_paths(&refused)), (400, vec!["/source".to_owned()]), "{refused}");

    // The description says so: the one schema of a source in the requests that take one
    // and the answers that show it.
    let (_, description) = server.get("/api/openapi.json");
    let description: Value = serde_json::from_str(&description).unwrap();
    let request = |path: &str| {
        description["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]
            ["source"]
            .clone()
    };
    let answer = |path: &str| {
        description["paths"][path]["post"]["responses"]["200"]["content"]["application/json"]["schema"].clone()
    };
    let source = request("/api/compute/fleet/apply");
    assert_eq!(source["required"], json!(["repo", "commit"]), "{source}");
    assert_eq!(source["additionalProperties"], false);
    assert_eq!(request("/api/compute/proposals/create"), source);
    assert_eq!(request("/api/compute/fleet/plan"), Value::Null);
    assert_eq!(answer("/api/compute/fleet/revision")["properties"]["source"], source);
    assert_eq!(
        answer("/api/compute/fleet/history")["properties"]["revisions"]["items"]["properties"]["source"],
        source
    );
    assert_eq!(answer("/api/compute/fleet/status")["properties"]["applied"]["properties"]["source"], source);
    assert_eq!(answer("/api/compute/proposals/get")["properties"]["proposal"]["properties"]["source"], source);
}

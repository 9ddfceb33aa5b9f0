//! Approvals end to end (SPEC §17): proposals made, reviewed by others and applied
//! exactly as reviewed; approval rules in Rego; the gate on direct applies; bad input
//! and races (two servers on one database applying one proposal); plugin kinds; the
//! command line.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{FLEET, Launch, Server, code, database_of, eventually, problem_paths};

const WRITE: &str = "compute:proposals:write @ compute-proposals";
const READ: &str = "compute:proposals:read @ compute-proposals";
const REVIEW: &str = "compute:proposals:review @ compute-proposals";
const ADMIN: &str = "compute:fleet:admin @ compute-fleet";

fn example(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policies").join(format!("{name}.rego"));
    path.to_str().expect("a UTF-8 path").to_owned()
}

fn estate(gpus: u64) -> Value {
    json!({
        "sites": {"eu-west": {"region": "eu-west-1"}},
        "providerAccounts": {"aws-main": {"provider": "aws"}},
        "pools": {"gpu-a": {"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml", "gpus": gpus}}
    })
}

/// A tenant with an author (alice: may do anything), two reviewers and a reader.
struct Team {
    alice: String,
    bob: String,
    dana: String,
    reader: String,
}

fn team(server: &Server) -> Team {
    server.tenant("acme");
    Team {
        alice: server.token("acme", "alice", &["compute:*:* @ *"]),
        bob: server.token("acme", "bob", &[REVIEW, READ]),
        dana: server.token("acme", "capacity-dana", &[REVIEW, READ]),
        reader: server.token("acme", "rita", &[READ]),
    }
}

fn events(server: &Server, token: &str, prefix: &str) -> Vec<Value> {
    let all = server.ok(token, "events/list", json!({}))["events"].as_array().unwrap().clone();
    all.into_iter().filter(|event| event["type"].as_str().unwrap().starts_with(prefix)).collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|event| event["type"].as_str().unwrap()).collect()
}

fn pools(server: &Server, token: &str) -> Vec<Value> {
    server.ok(token, "pools/list", json!({}))["items"].as_array().unwrap().clone()
}

#[test]
fn a_proposal_is_reviewed_by_others_and_applied_exactly_as_planned() {
    let server = Server::start(&[]);
    let team = team(&server);
    let admin = server.token("acme", "root", &["compute:*:* @ *"]);

    let created = server.ok(&team.alice, "proposals/create", json!({"document": estate(8), "title": "gpu-a"}));
    let proposal = &created["proposal"];
    assert_eq!(proposal["number"], 1, "{created}");
    assert_eq!((proposal["state"].as_str(), proposal["approved"].as_bool()), (Some("open"), Some(false)));
    assert_eq!(proposal["author"], "alice");
    assert_eq!(proposal["summary"]["create"], 3);
    // The stored plan is the plan fleet/plan answers, byte for byte.
    let (_, plan_text) = server.call_text(&team.alice, "fleet/plan", json!({"document": estate(8)}));
    let got = server.call_text(&team.bob, "proposals/get", json!({"number": 1})).1;
    assert!(got.contains(&format!(r#""plan":{plan_text}"#)), "{got}");
    let got: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(got["document"], estate(8));
    assert_eq!(got["plan"]["planHash"], proposal["planHash"]);
    assert!(got["plan"].get("approval").is_none(), "{got}");
    assert!(pools(&server, &admin).is_empty(), "nothing is applied by proposing");

    // Not approved yet: the apply is refused and nothing applied.
    let (status, body) = server.call(&team.alice, "fleet/apply", json!({"proposal": 1}));
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "{body}");
    // The author's own review, and the reader's, are refused.
    let (status, body) = server.call(&team.alice, "proposals/review", json!({"number": 1, "verdict": "approve"}));
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "{body}");
    let (status, body) = server.call(&team.reader, "proposals/review", json!({"number": 1, "verdict": "approve"}));
    assert_eq!((status, code(&body)), (403, "PERMISSION_DENIED"), "{body}");

    // Another principal approves; the reviewer needs no fleet permission.
    let reviewed = server.ok(&team.bob, "proposals/review", json!({"number": 1, "verdict": "approve", "comment": "ok"}));
    assert_eq!(reviewed["proposal"]["approved"], true, "{reviewed}");
    assert_eq!(reviewed["proposal"]["reviews"][0]["principal"], "bob");
    assert_eq!(reviewed["proposal"]["reviews"][0]["comment"], "ok");

    // Fleet admin alone may not apply calls it may not make; the proposal stays open.
    let admin_only = server.token("acme", "adam", &[ADMIN]);
    let (status, body) = server.call(&admin_only, "fleet/apply", json!({"proposal": 1}));
    assert_eq!((status, code(&body)), (403, "PERMISSION_DENIED"), "{body}");
    assert_eq!(server.ok(&team.reader, "proposals/get", json!({"number": 1}))["proposal"]["state"], "open");

    // Applied by someone with fleet admin other than its author, exactly its plan: the
    // creates keep the ids the reviewers saw. The revision names it and its applier.
    let applied = server.ok(&admin, "fleet/apply", json!({"proposal": 1}));
    assert_eq!(applied["applied"], 3, "{applied}");
    assert_eq!(applied["plan"]["planHash"], proposal["planHash"]);
    let ids = |plan: &Value| plan["changes"].as_array().unwrap().iter().map(|c| c["id"].clone()).collect::<Vec<_>>();
    assert_eq!(ids(&applied["plan"]), ids(&got["plan"]), "{applied}");
    assert_eq!(pools(&server, &admin)[0]["id"], got["plan"]["changes"][2]["id"], "{got}");
    let history = server.ok(&team.alice, "fleet/history", json!({}));
    assert_eq!(history["revisions"][0]["proposal"], 1, "{history}");
    assert_eq!(history["revisions"][0]["appliedBy"], "root", "{history}");
    let revision = server.ok(&team.alice, "fleet/revision", json!({"revision": 1}));
    assert_eq!(revision["document"], estate(8));
    let got = server.ok(&team.reader, "proposals/get", json!({"number": 1}));
    assert_eq!((got["proposal"]["state"].as_str(), got["proposal"]["revision"].as_u64()), (Some("applied"), Some(1)));

    // Applied once: again is refused, reviews too, and nothing is applied twice.
    let (status, body) = server.call(&team.alice, "fleet/apply", json!({"proposal": 1}));
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "{body}");
    let (status, body) = server.call(&team.dana, "proposals/review", json!({"number": 1, "verdict": "reject"}));
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "{body}");
    assert_eq!(pools(&server, &admin).len(), 1);

    // Events and audit: opened, reviewed, approved, applied.
    let published = events(&server, &admin, "proposal.");
    assert_eq!(types(&published), ["proposal.opened", "proposal.reviewed", "proposal.approved", "proposal.applied"]);
    assert_eq!(published[1]["data"]["review"]["verdict"], "approve");
    assert_eq!(published[3]["data"]["planHash"], proposal["planHash"]);
    let audit = server.ok(&admin, "audit/list", json!({"kind": "proposal"}))["records"].as_array().unwrap().clone();
    let methods: Vec<&str> = audit.iter().map(|record| record["method"].as_str().unwrap()).collect();
    assert_eq!(methods, ["compute.proposals.create", "compute.proposals.review", "compute.fleet.apply"], "{audit:?}");
}

#[test]
fn a_proposal_whose_estate_moved_is_stale_and_applies_nothing() {
    let server = Server::start(&[]);
    let team = team(&server);
    server.ok(&team.alice, "fleet/apply", json!({"document": estate(8)}));
    server.ok(&team.alice, "proposals/create", json!({"document": estate(16)}));
    server.ok(&team.bob, "proposals/review", json!({"number": 1, "verdict": "approve"}));
    // The estate moves under the proposal.
    server.ok(&team.alice, "fleet/apply", json!({"document": estate(12)}));

    let (status, body) = server.call(&team.alice, "fleet/apply", json!({"proposal": 1}));
    assert_eq!((status, code(&body)), (409, "CONFIG_DRIFT"), "{body}");
    assert_eq!(pools(&server, &team.alice)[0]["gpus"], 12, "nothing applied");
    let got = server.ok(&team.reader, "proposals/get", json!({"number": 1}));
    assert_eq!(got["proposal"]["state"], "stale");
    let (status, body) = server.call(&team.bob, "proposals/review", json!({"number": 1, "verdict": "approve"}));
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "{body}");
    assert_eq!(types(&events(&server, &team.alice, "proposal.")).last(), Some(&"proposal.stale"));
    assert_eq!(server.ok(&team.alice, "proposals/list", json!({"state": "stale"}))["proposals"][0]["number"], 1);

    // The command line says so, and what moved.
    server.ok(&team.alice, "proposals/create", json!({"document": estate(20)}));
    server.ok(&team.bob, "proposals/review", json!({"number": 2, "verdict": "approve"}));
    server.ok(&team.alice, "fleet/apply", json!({"document": estate(14)}));
    let output = crate::cli::fleet(&server, &team.alice, &["apply", "--proposal", "2"]);
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(said.contains("proposal 2 was planned, so it was not applied and is stale now"), "{said}");
    assert!(said.contains("planned: ~ pool gpu-a: update (gpus 12 -> 20)") && said.contains("now:     ~ pool gpu-a: update (gpus 14 -> 20)"), "{said}");
    assert!(said.contains("Propose the document again"), "{said}");
}

#[test]
fn rejections_withdrawals_and_bad_input_change_nothing() {
    let server = Server::start(&[]);
    let team = team(&server);
    server.ok(&team.alice, "proposals/create", json!({"document": estate(8), "title": "one"}));
    server.ok(&team.alice, "proposals/create", json!({"document": estate(9), "title": "two"}));

    // A rejecting review rejects at once; a later review of the same principal would
    // replace it, but a rejected proposal takes no more reviews.
    let reviewed = server.ok(&team.bob, "proposals/review", json!({"number": 1, "verdict": "reject", "comment": "no"}));
    assert_eq!(reviewed["proposal"]["state"], "rejected", "{reviewed}");
    let (status, body) = server.call(&team.bob, "proposals/review", json!({"number": 1, "verdict": "approve"}));
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "{body}");

    // A later review replaces the earlier one.
    server.ok(&team.bob, "proposals/review", json!({"number": 2, "verdict": "approve"}));
    let again = server.ok(&team.bob, "proposals/review", json!({"number": 2, "verdict": "approve", "comment": "sure"}));
    assert_eq!(again["proposal"]["reviews"].as_array().unwrap().len(), 1, "{again}");
    assert_eq!(again["proposal"]["reviews"][0]["comment"], "sure");

    // Withdrawn by its author only, once.
    let (status, body) = server.call(&team.dana, "proposals/withdraw", json!({"number": 2}));
    assert_eq!((status, code(&body)), (403, "PERMISSION_DENIED"), "{body}");
    let other_writer = server.token("acme", "eve", &[WRITE]);
    let (status, body) = server.call(&other_writer, "proposals/withdraw", json!({"number": 2}));
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "{body}");
    let withdrawn = server.ok(&team.alice, "proposals/withdraw", json!({"number": 2}));
    assert_eq!(withdrawn["proposal"]["state"], "withdrawn");
    let (status, body) = server.call(&team.alice, "fleet/apply", json!({"proposal": 2}));
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "{body}");

    // Numbers that do not exist, and malformed requests.
    for (method, body) in [
        ("proposals/get", json!({"number": 9})),
        ("proposals/review", json!({"number": 9, "verdict": "approve"})),
        ("fleet/apply", json!({"proposal": 9})),
    ] {
        let token = if method == "proposals/review" { &team.bob } else { &team.alice };
        let (status, answer) = server.call(token, method, body);
        assert_eq!((status, code(&answer)), (404, "NOT_FOUND"), "{method}: {answer}");
    }
    let (status, body) = server.call(&team.bob, "proposals/review", json!({"number": 0, "verdict": "approve"}));
    assert_eq!((status, problem_paths(&body)), (400, vec!["/number".to_owned()]), "{body}");
    let (status, body) = server.call(&team.bob, "proposals/review", json!({"number": 2, "verdict": "maybe"}));
    assert_eq!((status, problem_paths(&body)), (400, vec!["/verdict".to_owned()]), "{body}");
    let (_, body) = server.call(&team.alice, "proposals/create", json!({"title": "x".repeat(201), "extra": 1}));
    assert_eq!(problem_paths(&body), ["/title", "/document", "/extra"], "{body}");
    let (_, body) = server.call(&team.alice, "proposals/create", json!({"document": estate(8), "title": "a\u{1b}[2J"}));
    assert_eq!(problem_paths(&body), ["/title"], "{body}");
    // A key twice is refused, not read as its last (SPEC §2): no pruning plan slips in.
    let twice = format!(r#"{{"document": {}, "prune": false, "prune": true}}"#, estate(8));
    let (status, body) = server.raw(Some(&team.alice), "/api/compute/proposals/create", twice);
    assert_eq!((status, problem_paths(&body)), (400, vec!["/prune".to_owned()]), "{body}");
    let (_, body) = server.call(&team.alice, "fleet/apply", json!({"proposal": 1, "document": estate(1)}));
    assert_eq!(problem_paths(&body), ["/document"], "{body}");
    let (_, body) = server.call(&team.alice, "proposals/list", json!({"state": "closed"}));
    assert_eq!(problem_paths(&body), ["/state"], "{body}");
    // A blocked plan cannot be proposed.
    let mut blocked = estate(8);
    blocked["pools"]["gpu-a"]["site"] = json!("nowhere");
    let (status, body) = server.call(&team.alice, "proposals/create", json!({"document": blocked}));
    assert_eq!((status, code(&body)), (409, "INVALID_STATE"), "{body}");

    assert!(pools(&server, &team.alice).is_empty(), "nothing was applied");
    let listed = server.ok(&team.reader, "proposals/list", json!({}));
    let numbers: Vec<u64> = listed["proposals"].as_array().unwrap().iter().map(|p| p["number"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [2, 1], "newest first");
    let published = events(&server, &team.alice, "proposal.");
    let types = types(&published)
        .into_iter()
        .filter(|kind| !matches!(*kind, "proposal.opened" | "proposal.reviewed"))
        .collect::<Vec<_>>();
    assert_eq!(types, ["proposal.rejected", "proposal.approved", "proposal.withdrawn"]);
}

#[test]
fn approval_rules_and_require_approval_decide_with_the_policies() {
    let gpus = format!("mandatory:{}", example("capacity-approves-gpus"));
    let prune = format!("mandatory:{}", example("two-approvals-for-prune"));
    let server = Server::start(&["--policy", &gpus, "--policy", &prune]);
    let team = team(&server);
    let carol = server.token("acme", "carol", &[REVIEW, READ]);

    // A GPU change requires approval: planned with `=` verdicts, refused directly.
    let plan = server.ok(&team.alice, "fleet/plan", json!({"document": estate(8)}));
    assert_eq!(plan["summary"]["approvalRequired"], 1, "{plan}");
    let verdict = &plan["policy"]["verdicts"][0];
    assert_eq!((verdict["rule"].as_str(), verdict["policy"].as_str()), (Some("require_approval"), Some("capacity-approves-gpus")));
    let (status, body) = server.call(&team.alice, "fleet/apply", json!({"document": estate(8)}));
    assert_eq!((status, code(&body)), (409, "APPROVAL_REQUIRED"), "{body}");
    assert_eq!(body["error"]["details"]["verdicts"][0]["policy"], "capacity-approves-gpus");
    assert!(pools(&server, &team.alice).is_empty());

    // bob's approval is not enough; the capacity team's is.
    server.ok(&team.alice, "proposals/create", json!({"document": estate(8)}));
    let reviewed = server.ok(&team.bob, "proposals/review", json!({"number": 1, "verdict": "approve"}));
    assert_eq!(reviewed["proposal"]["approved"], false, "{reviewed}");
    let judged = server.ok(&team.alice, "fleet/plan", json!({"document": estate(8), "proposal": {
        "number": 1, "author": "alice", "reviews": [{"principal": "bob", "verdict": "approve"}]}}));
    assert_eq!(judged["approval"]["rule"], "policies", "{judged}");
    assert_eq!(judged["approval"]["pending"], json!([{"policy": "capacity-approves-gpus"}]));
    assert_eq!(judged["planHash"], plan["planHash"], "the proposal is not in the hash");
    let reviewed = server.ok(&team.dana, "proposals/review", json!({"number": 1, "verdict": "approve"}));
    assert_eq!(reviewed["proposal"]["approved"], true, "{reviewed}");
    server.ok(&team.alice, "fleet/apply", json!({"proposal": 1}));
    assert_eq!(pools(&server, &team.alice).len(), 1);

    // A prune of a GPU pool needs two approvers, one of them of the capacity team.
    let pruned = json!({"sites": estate(8)["sites"], "providerAccounts": estate(8)["providerAccounts"]});
    let created = server.ok(&team.alice, "proposals/create", json!({"document": pruned, "prune": true}));
    assert_eq!(created["proposal"]["number"], 2);
    let approved = |token: &str| {
        server.ok(token, "proposals/review", json!({"number": 2, "verdict": "approve"}))["proposal"]["approved"].clone()
    };
    assert_eq!(approved(&team.bob), false);
    assert_eq!(approved(&carol), false, "two approvers, none of the capacity team");
    assert_eq!(approved(&team.dana), true);
    server.ok(&team.alice, "fleet/apply", json!({"proposal": 2}));
    assert_eq!(pools(&server, &team.alice)[0]["archived"], true);
}

#[test]
fn serve_require_approval_gates_every_change_but_not_a_heal_or_a_plan_without_calls() {
    let server = Server::start(&["--require-approval", "--drift-interval", "1s"]);
    let team = team(&server);
    let (status, body) = server.call(&team.alice, "fleet/apply", json!({"document": estate(8)}));
    assert_eq!((status, code(&body)), (409, "APPROVAL_REQUIRED"), "{body}");
    assert_eq!(body["error"]["details"]["reason"], "deployment", "{body}");
    server.ok(&team.alice, "proposals/create", json!({"document": estate(8)}));
    server.ok(&team.bob, "proposals/review", json!({"number": 1, "verdict": "approve"}));
    server.ok(&team.alice, "fleet/apply", json!({"proposal": 1}));
    // Nothing to do is no change to approve.
    assert_eq!(server.ok(&team.alice, "fleet/apply", json!({"document": estate(8)}))["applied"], 0);

    // A heal restores what was applied, without a new approval.
    // Heal is asked for by an apply with nothing to do, so none to approve.
    server.ok(&team.alice, "fleet/apply", json!({"document": estate(8), "heal": true}));
    let pool = pools(&server, &team.alice)[0]["id"].as_str().unwrap().to_owned();
    let admin = server.token("acme", "root", &["compute:*:* @ *"]);
    server.ok(&admin, "pools/update", json!({"id": pool, "gpus": 2}));
    let healed = eventually(std::time::Duration::from_secs(15), || pools(&server, &team.alice)[0]["gpus"] == 8);
    assert!(healed, "fleet.drift heals under --require-approval (within 15 s)");
    // Not silently: the drift and who made it, the heal, and status says when.
    let fleet_events = events(&server, &team.alice, "fleet.");
    let told = types(&fleet_events);
    assert!(told.ends_with(&["fleet.drifted", "fleet.healed", "fleet.applied"]), "{told:?}");
    let drifted = events(&server, &team.alice, "fleet.drifted").pop().unwrap();
    assert_eq!(drifted["data"]["changes"][0]["changedBy"], "root", "{drifted}");
    let status = crate::cli::fleet(&server, &team.alice, &["status"]);
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(said.contains("Last healed at") && said.contains("(1 call)"), "{said}");
}

#[test]
fn two_servers_applying_one_proposal_apply_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let launch = Launch { db: Some(database_of(dir.path())), ..Launch::default() };
    let servers: Vec<Server> = (0..2).map(|_| Server::launch(tempfile::tempdir().unwrap(), &[], &launch)).collect();
    let team = team(&servers[0]);
    servers[0].ok(&team.alice, "proposals/create", json!({"document": estate(8)}));
    servers[1].ok(&team.bob, "proposals/review", json!({"number": 1, "verdict": "approve"}));

    let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let runs: Vec<_> = servers
            .iter()
            .map(|server| scope.spawn(|| server.call(&team.alice, "fleet/apply", json!({"proposal": 1}))))
            .collect();
        runs.into_iter().map(|run| run.join().unwrap()).collect()
    });
    let mut statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{answers:?}");
    let refused = answers.iter().find(|(status, _)| *status == 409).unwrap();
    assert_eq!(code(&refused.1), "FAILED_PRECONDITION", "{answers:?}");
    assert_eq!(pools(&servers[1], &team.alice).len(), 1);
    assert_eq!(servers[0].ok(&team.alice, "fleet/history", json!({}))["revisions"].as_array().unwrap().len(), 1);
}

#[test]
fn a_proposal_may_name_plugin_kinds() {
    let plugin = Path::new(env!("FLEET_PLUGINS_DIR")).join("reservations.wasm");
    let server = Server::start(&["--plugin", plugin.to_str().unwrap()]);
    let team = team(&server);
    server.ok(&team.alice, "fleet/apply", json!({"document": estate(8)}));
    let mut document = estate(8);
    document["reservations"] = json!({"r1": {"pool": "gpu-a", "owner": "team-research", "vcpus": 0, "gpus": 1,
        "startsAt": "2026-12-01T00:00:00Z", "endsAt": "2026-12-02T00:00:00Z"}});
    let created = server.ok(&team.alice, "proposals/create", json!({"document": document}));
    assert_eq!(created["proposal"]["summary"]["create"], 1, "{created}");
    server.ok(&team.bob, "proposals/review", json!({"number": 1, "verdict": "approve"}));
    let applied = server.ok(&team.alice, "fleet/apply", json!({"proposal": 1}));
    assert_eq!(applied["applied"], 1, "{applied}");
    assert_eq!(server.ok(&team.alice, "reservations/list", json!({}))["items"].as_array().unwrap().len(), 1);
}

#[test]
fn the_command_line_proposes_reviews_and_applies() {
    let server = Server::start(&["--require-approval"]);
    let team = team(&server);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("estate.json");
    std::fs::write(&file, estate(8).to_string()).unwrap();
    let run = |token: &str, args: &[&str]| {
        let output = crate::cli::fleet(&server, token, args);
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (output.status.code(), text(&output.stdout), text(&output.stderr))
    };
    // The plan says a direct apply would be refused, and what to do instead.
    let (status, out, _) = run(&team.alice, &["plan", file.to_str().unwrap()]);
    assert_eq!(status, Some(2), "{out}");
    assert!(out.contains("Approval required: this deployment applies changes only through approved proposals"), "{out}");
    let (_, out, _) = run(&team.alice, &["plan", file.to_str().unwrap(), "--json"]);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["approvalRequired"], "deployment", "{out}");
    let (status, out, err) = run(&team.alice, &["propose", file.to_str().unwrap(), "--title", "first pools"]);
    assert_eq!(status, Some(0), "{out}{err}");
    assert!(out.contains("+ pool gpu-a"), "{out}");
    assert!(!out.contains("propose it"), "a proposal is not told to be proposed: {out}");
    assert!(out.contains("Proposal #1 open, not approved: \"first pools\" by alice"), "{out}");
    let (status, out, _) = run(&team.bob, &["review", "1", "approve", "--comment", "fine"]);
    assert_eq!(status, Some(0));
    assert!(out.contains("approved"), "{out}");
    assert!(out.contains("bob approved at"), "{out}");
    let (status, out, _) = run(&team.reader, &["proposals", "--state", "open"]);
    assert_eq!(status, Some(0));
    assert!(out.contains("Proposal #1 open, approved"), "{out}");
    let (status, out, err) = run(&team.alice, &["apply", "--proposal", "1"]);
    assert_eq!(status, Some(0), "{out}{err}");
    assert!(out.contains("Applied 3 calls."), "{out}");
    assert!(!out.contains("refuses"), "{out}");
    let (_, out, _) = run(&team.alice, &["history"]);
    assert!(out.contains("3 calls, prune off, proposal #1"), "the revision names its proposal: {out}");
    let (status, out, _) = run(&team.reader, &["proposal", "1"]);
    assert_eq!(status, Some(0));
    assert!(out.contains("Proposal #1 applied as revision 1"), "{out}");
    let (status, _, err) = run(&team.alice, &["withdraw", "1"]);
    assert_eq!(status, Some(1));
    assert!(err.contains("FAILED_PRECONDITION"), "{err}");
}

#[test]
fn the_example_approval_policies_pass_their_tests() {
    let files: Vec<String> =
        ["two-approvals-for-prune", "capacity-approves-gpus", "flavors-apply-directly"].iter().map(|name| example(name)).collect();
    let output = Command::new(FLEET).args(["policy", "test"]).args(&files).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("6 passed, 0 failed"), "{output:?}");
}

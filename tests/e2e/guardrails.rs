//! Guardrails end to end (SPEC §14): deployment and tenant policies judging plans,
//! denials refusing applies, overrides of mandatory policies only, policies that fail
//! or exhaust the sandbox, permissions at plan time, and the command line.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use crate::cli::fleet as cli;
use crate::support::{FLEET, Server, code, problem_paths};

/// The example policies of `policies/`.
fn example(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policies").join(format!("{name}.rego"));
    path.to_str().expect("a UTF-8 path").to_owned()
}

const ADMIN: &str = "compute:fleet:admin @ compute-fleet";

/// A pool with `gpus` GPUs, labelled `labels`, and what it needs.
fn estate(gpus: u64, labels: Value) -> Value {
    json!({
        "sites": {"eu-west": {"region": "eu-west-1"}},
        "providerAccounts": {"aws-main": {"provider": "aws"}},
        "pools": {"gpu-a": {"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml",
                            "gpus": gpus, "labels": labels}}
    })
}

fn pools(server: &Server, token: &str) -> usize {
    server.ok(token, "pools/list", json!({}))["items"].as_array().expect("items").len()
}

fn audit(server: &Server, token: &str, method: &str) -> Vec<Value> {
    let records = server.ok(token, "audit/list", json!({}))["records"].as_array().expect("records").clone();
    records.into_iter().filter(|record| record["method"] == method).collect()
}

#[test]
fn mandatory_denials_refuse_an_apply_until_overridden_by_a_permitted_caller() {
    let policy = format!("mandatory:{}", example("gpus-per-pool"));
    let server = Server::start(&["--policy", &policy]);
    let token = server.tenant_with_token("acme");
    let document = estate(96, json!({}));

    let plan = server.ok(&token, "fleet/plan", json!({"document": document}));
    let verdicts = plan["policy"]["verdicts"].as_array().expect("verdicts");
    assert_eq!(verdicts.len(), 1, "{plan}");
    assert_eq!(verdicts[0]["policy"], "gpus-per-pool");
    assert_eq!(verdicts[0]["level"], "mandatory");
    assert_eq!(verdicts[0]["rule"], "deny");
    assert_eq!(verdicts[0]["kind"], "pool");
    assert_eq!(verdicts[0]["key"], "gpu-a");
    assert_eq!(verdicts[0]["message"], "asks for 96 GPUs; a pool has at most 64");
    assert_eq!((plan["summary"]["denied"].as_u64(), plan["summary"]["warnings"].as_u64()), (Some(1), Some(0)));
    assert!(plan["policy"]["digest"].as_str().expect("a digest").starts_with("sha256:"));

    // Refused, with the denials, and nothing applied.
    let (status, body) = server.call(&token, "fleet/apply", json!({"document": document}));
    assert_eq!((status, code(&body)), (409, "POLICY_DENIED"), "{body}");
    assert_eq!(body["error"]["details"]["verdicts"], plan["policy"]["verdicts"]);
    assert_eq!(pools(&server, &token), 0);

    // An override needs the permission: fleet admin alone is not enough.
    let writer = server.token(
        "acme",
        "bob",
        &[ADMIN, "compute:pools:write @ compute-pools", "compute:accounts:write @ compute-accounts",
          "compute:sites:write @ compute-sites"],
    );
    let overrides = json!([{"policy": "gpus-per-pool", "reason": "the h100 cluster is one pool"}]);
    let (status, body) = server.call(&writer, "fleet/apply", json!({"document": document, "overrides": overrides}));
    assert_eq!((status, code(&body)), (409, "POLICY_DENIED"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("compute:fleet:override"), "{body}");
    assert_eq!(pools(&server, &token), 0);

    // A policy not in force is a bad request.
    let unknown = json!([{"policy": "no-such-policy", "reason": "x"}]);
    let (status, body) = server.call(&token, "fleet/apply", json!({"document": document, "overrides": unknown}));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");

    // The permitted caller overrides it, pinned to the plan it reviewed, and the audit
    // trail keeps the override with the plan hash, principal and reason.
    let request = json!({"document": document, "overrides": overrides, "planHash": plan["planHash"]});
    let applied = server.ok(&token, "fleet/apply", request);
    assert_eq!(applied["plan"], plan);
    assert_eq!(applied["overrides"], overrides);
    assert_eq!(pools(&server, &token), 1);
    let records = audit(&server, &token, "compute.fleet.override");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["principal"], "alice");
    assert_eq!(records[0]["id"], "gpus-per-pool");
    assert_eq!(records[0]["planHash"], plan["planHash"]);
    assert_eq!(records[0]["changes"][0]["to"], "the h100 cluster is one pool");
}

#[test]
fn nothing_overrides_an_enforced_policy() {
    let policy = format!("enforced:{}", example("protected-pools"));
    let server = Server::start(&["--policy", &policy]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate(8, json!({"protected": "true"}))}));
    let pruned = json!({"document": {"sites": {"eu-west": {"region": "eu-west-1"}}}, "prune": true});

    let plan = server.ok(&token, "fleet/plan", pruned.clone());
    assert_eq!(plan["summary"]["denied"], 1, "{plan}");
    assert_eq!(plan["policy"]["verdicts"][0]["level"], "enforced");
    let overrides = json!([{"policy": "protected-pools", "reason": "I really mean it"}]);
    let attempts = [
        json!({"document": pruned["document"], "prune": true}),
        json!({"document": pruned["document"], "prune": true, "overrides": overrides}),
        json!({"document": pruned["document"], "prune": true, "overrides": overrides, "planHash": plan["planHash"]}),
    ];
    // A token with every permission, with and without the override list and the hash.
    for attempt in attempts {
        let (status, body) = server.call(&token, "fleet/apply", attempt);
        assert_eq!((status, code(&body)), (409, "POLICY_DENIED"), "{body}");
    }
    // The command line, with --override and with a saved plan.
    std::fs::write(server.dir.path().join("pruned.json"), pruned["document"].to_string()).unwrap();
    let cli = |args: &[&str]| cli(&server, &token, args);
    let output = cli(&["apply", "pruned.json", "--prune", "--yes", "--override", "protected-pools=I really mean it"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("! policy protected-pools:"), "{output:?}");
    let output = cli(&["plan", "pruned.json", "--prune", "--out", "plan.json"]);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("! policy protected-pools: is labelled protected and is never archived (pool gpu-a)"), "{stdout}");
    let output = cli(&["apply", "--plan", "plan.json", "--override", "protected-pools=still no"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(pools(&server, &token), 1);
    assert_eq!(server.ok(&token, "pools/list", json!({}))["items"][0]["archived"], false);
}

#[test]
fn tenant_policies_are_checked_audited_kept_to_their_tenant_and_judge_its_plans() {
    let policy = format!("mandatory:{}", example("gpus-per-pool"));
    let server = Server::start(&["--policy", &policy]);
    let token = server.tenant_with_token("acme");
    let other = server.tenant_with_token("globex");

    // Sources that do not compile, or read the clock, say where.
    let broken = "package p\n\ndeny contains msg if {\n  msg := \n}\n";
    let (status, body) = server.call(&token, "policies/put", json!({"name": "p", "level": "advisory", "source": broken}));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert_eq!(problem_paths(&body), ["/source"]);
    assert!(body["error"]["details"]["problems"][0]["message"].as_str().unwrap().starts_with("line "), "{body}");
    let clock = "package p\n\ndeny contains \"late\" if {\n  time.now_ns() > 0\n}\n";
    let (status, body) = server.call(&token, "policies/put", json!({"name": "p", "level": "advisory", "source": clock}));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert!(body["error"]["details"]["problems"][0]["message"].as_str().unwrap().contains("line 4, column 3"), "{body}");
    let huge = format!("package p\n# {}\n", "x".repeat(70_000));
    let (status, body) = server.call(&token, "policies/put", json!({"name": "p", "level": "advisory", "source": huge}));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");

    // Deployment policies are read, not changed.
    let (status, body) = server.call(&token, "policies/put", json!({"name": "gpus-per-pool", "level": "advisory",
        "source": "package p\n"}));
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "{body}");
    let (status, body) = server.call(&token, "policies/delete", json!({"name": "gpus-per-pool"}));
    assert_eq!((status, code(&body)), (409, "FAILED_PRECONDITION"), "{body}");

    let warn = "package fleet.small\n\nwarn contains {\"msg\": \"a small pool\", \"kind\": \"pool\", \"key\": c.key} if {\n  some c in input.changes\n  c.kind == \"pool\"\n  c.after.gpus < 16\n}\n";
    let put = server.ok(&token, "policies/put", json!({"name": "small-pools", "level": "advisory", "source": warn}));
    assert_eq!(put["scope"], "tenant");
    let listed = server.ok(&token, "policies/list", json!({}));
    let scopes: Vec<(&str, &str)> = listed["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|policy| (policy["name"].as_str().unwrap(), policy["scope"].as_str().unwrap()))
        .collect();
    assert_eq!(scopes, [("gpus-per-pool", "deployment"), ("small-pools", "tenant")]);
    assert_eq!(server.ok(&token, "policies/get", json!({"name": "gpus-per-pool"}))["source"],
               std::fs::read_to_string(example("gpus-per-pool")).unwrap());
    let records = audit(&server, &token, "compute.policies.put");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["changes"][1]["field"], "sha256");
    assert_eq!(records[0]["changes"][1]["to"], put["sha256"]);

    // Its warning shows in the tenant's plan and does not block it; another tenant
    // neither sees the policy nor is judged by it.
    let plan = server.ok(&token, "fleet/plan", json!({"document": estate(8, json!({}))}));
    assert_eq!((plan["summary"]["denied"].as_u64(), plan["summary"]["warnings"].as_u64()), (Some(0), Some(1)));
    assert_eq!(plan["policy"]["verdicts"][0]["rule"], "warn");
    let theirs = server.ok(&other, "fleet/plan", json!({"document": estate(8, json!({}))}));
    assert_eq!(theirs["summary"]["warnings"], 0, "{theirs}");
    assert_ne!(theirs["policy"]["digest"], plan["policy"]["digest"]);
    let (status, _) = server.call(&other, "policies/get", json!({"name": "small-pools"}));
    assert_eq!(status, 404);
    server.ok(&token, "fleet/apply", json!({"document": estate(8, json!({}))}));

    // A policy changed since a plan was made makes that plan another one.
    let plan = server.ok(&token, "fleet/plan", json!({"document": estate(9, json!({}))}));
    server.ok(&token, "policies/put", json!({"name": "small-pools", "level": "mandatory", "source": warn}));
    let (status, body) =
        server.call(&token, "fleet/apply", json!({"document": estate(9, json!({})), "planHash": plan["planHash"]}));
    assert_eq!((status, code(&body)), (409, "CONFIG_DRIFT"), "{body}");
    server.ok(&token, "policies/delete", json!({"name": "small-pools"}));
    assert_eq!(audit(&server, &token, "compute.policies.delete").len(), 1);
}

#[test]
fn a_policy_that_fails_denies_and_one_that_exhausts_the_sandbox_is_named() {
    let server = Server::start(&["--sandbox-cpu", "2s", "--sandbox-memory-mib", "128"]);
    let token = server.tenant_with_token("acme");
    let failing = "package p\n\ndeny contains \"never\" if {\n  to_number(input.summary.create) == to_number(\"x\")\n}\n";
    server.ok(&token, "policies/put", json!({"name": "failing", "level": "advisory", "source": failing}));
    let plan = server.ok(&token, "fleet/plan", json!({"document": estate(8, json!({}))}));
    let verdict = &plan["policy"]["verdicts"][0];
    assert_eq!(verdict["rule"], "deny", "{plan}");
    assert!(verdict["message"].as_str().unwrap().starts_with("the policy failed at line 4"), "{plan}");
    server.ok(&token, "policies/delete", json!({"name": "failing"}));

    let endless = "package p\n\ndeny contains \"x\" if {\n  count([1 | some a in numbers.range(1, 100000); some b in numbers.range(1, 100000)]) > 0\n}\n";
    server.ok(&token, "policies/put", json!({"name": "endless", "level": "mandatory", "source": endless}));
    let (status, body) = server.call(&token, "fleet/plan", json!({"document": estate(8, json!({}))}));
    assert_eq!((status, code(&body)), (429, "RESOURCE_EXHAUSTED"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("the policy endless"), "{body}");
    assert_eq!(body["error"]["details"]["policy"], "endless");
    // The server serves on.
    assert_eq!(server.get("/healthz").0, 200);
    server.ok(&token, "policies/delete", json!({"name": "endless"}));
    server.ok(&token, "fleet/plan", json!({"document": estate(8, json!({}))}));
}

#[test]
fn a_plan_blocks_what_its_caller_may_not_do() {
    let server = Server::start(&[]);
    server.tenant("acme");
    let admin_only = server.token("acme", "carol", &[ADMIN]);
    let plan = server.ok(&admin_only, "fleet/plan", json!({"document": estate(8, json!({}))}));
    let reasons: Vec<&str> =
        plan["blocked"].as_array().unwrap().iter().map(|blocked| blocked["reason"].as_str().unwrap()).collect();
    assert_eq!(
        reasons,
        [
            "not permitted: compute:sites:write @ compute-sites",
            "not permitted: compute:accounts:write @ compute-accounts",
            "not permitted: compute:pools:write @ compute-pools",
        ]
    );
    assert!(plan.get("policy").is_none(), "no policy is in force: {plan}");
    let (status, body) = server.call(&admin_only, "fleet/apply", json!({"document": estate(8, json!({}))}));
    assert_eq!((status, code(&body)), (409, "INVALID_STATE"), "{body}");
}

#[test]
fn the_example_policies_pass_their_tests_and_a_failing_test_fails() {
    let files: Vec<String> = ["gpus-per-pool", "prune-limit", "protected-pools", "offers-within-capacity", "no-prune-by-ci"]
        .iter()
        .map(|name| example(name))
        .collect();
    let output = Command::new(FLEET).args(["policy", "test"]).args(&files).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("11 passed, 0 failed"), "{output:?}");

    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong.rego");
    std::fs::write(&wrong, "package wrong\n\ntest_arithmetic if { 1 + 1 == 3 }\n").unwrap();
    let output = Command::new(FLEET).args(["policy", "test"]).arg(&wrong).output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("FAIL"), "{output:?}");
}

#[test]
fn serve_refuses_a_policy_that_does_not_compile_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("clock.rego");
    std::fs::write(&file, "package clock\n\ndeny contains \"x\" if { time.now_ns() > 0 }\n").unwrap();
    let output = Command::new(FLEET)
        .arg("--db")
        .arg(dir.path().join("fleet.db"))
        .args(["serve", "--listen", "127.0.0.1:0", "--policy"])
        .arg(format!("mandatory:{}", file.display()))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("clock.rego") && stderr.contains("line 3"), "{stderr}");
}

#[test]
fn the_ci_recipe_runs_with_a_deployment_and_a_tenant_policy_in_force() {
    // docs/guide/cli-and-ci.md: plan --out, policy eval --plan, apply --plan. The saved
    // plan carries the policies' sources, text with line breaks, and reads them back.
    let server = Server::start(&["--policy", &format!("mandatory:{}", example("prune-limit"))]);
    let token = server.tenant_with_token("acme");
    let source = std::fs::read_to_string(example("protected-pools")).unwrap();
    server.ok(&token, "policies/put", json!({"name": "protected-pools", "level": "mandatory", "source": source}));
    let dir = server.dir.path();
    std::fs::write(dir.join("estate.json"), estate(8, json!({})).to_string()).unwrap();
    let cli = |args: &[&str]| cli(&server, &token, args);

    for saved in ["plan.json", "plan.yaml"] {
        let planned = cli(&["plan", "estate.json", "--out", saved]);
        assert_eq!(planned.status.code(), Some(2), "{planned:?}");
        let judged = cli(&["policy", "eval", &example("gpus-per-pool"), "--plan", saved]);
        assert_eq!(judged.status.code(), Some(0), "{saved}: {judged:?}");
    }
    let applied = cli(&["apply", "--plan", "plan.json"]);
    assert_eq!(applied.status.code(), Some(0), "{applied:?}");
    assert!(String::from_utf8_lossy(&applied.stdout).contains("Applied 3 calls."), "{applied:?}");
    assert_eq!(pools(&server, &token), 1);
}

#[test]
fn policy_eval_judges_a_saved_plan_offline() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate(8, json!({}))}));
    let dir = server.dir.path();
    std::fs::write(dir.join("estate.json"), estate(96, json!({})).to_string()).unwrap();
    let cli = |args: &[&str]| cli(&server, &token, args);
    assert_eq!(cli(&["plan", "estate.json", "--out", "plan.json"]).status.code(), Some(2));
    // No server is asked: the plan file has the state it was planned on.
    let offline = |args: &[&str]| Command::new(FLEET).args(args).current_dir(dir).output().expect("fleet runs");
    let denied = offline(&["policy", "eval", &example("gpus-per-pool"), "--plan", "plan.json"]);
    assert_eq!(denied.status.code(), Some(3), "{denied:?}");
    let stdout = String::from_utf8_lossy(&denied.stdout);
    assert!(stdout.contains("! policy gpus-per-pool: asks for 96 GPUs; a pool has at most 64 (pool gpu-a)"), "{stdout}");
    let passed = offline(&["policy", "eval", &example("protected-pools"), "--plan", "plan.json", "--json"]);
    assert_eq!(passed.status.code(), Some(0), "{passed:?}");
    let policy: Value = serde_json::from_slice(&passed.stdout).unwrap();
    assert_eq!(policy["verdicts"], json!([]));
}

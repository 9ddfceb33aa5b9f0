//! The operator's command line, run as a process against a live server.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::fleet::estate;
use crate::support::{FLEET, Server};

/// The `fleet` client against `server` as `token`, in the server's directory.
pub fn fleet(server: &Server, token: &str, args: &[&str]) -> Output {
    Command::new(FLEET)
        .args(args)
        .env("FLEET_SERVER", &server.base)
        .env("FLEET_TOKEN", token)
        .current_dir(server.dir.path())
        .output()
        .expect("fleet runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

const ESTATE_YAML: &str = r#"
sites:
  eu-west: {region: eu-west-1, labels: {tier: prod}}
providerAccounts:
  aws-main: {provider: aws, credentialsRef: "vault:aws/main"}
pools:
  gpu-a:
    site: eu-west
    account: aws-main
    class: gpu
    owner: team-ml
    vcpus: 512
    memoryMib: 2097152
    gpus: 64
ownerQuotas:
  team-ml: {vcpus: 256, memoryMib: 1048576, gpus: 32, instances: 100}
offers:
  ml-to-research: {pool: gpu-a, to: team-research, vcpus: 64, gpus: 8}
flavors:
  g1-large: {pool: gpu-a, vcpus: 8, memoryMib: 65536, gpus: 1, diskGib: 100}
"#;

#[test]
fn plan_apply_status_and_export_with_ci_exit_codes() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let dir = server.dir.path();
    let document = write(dir, "estate.yaml", ESTATE_YAML);

    let planned = fleet(&server, &token, &["plan", &document]);
    assert_eq!(planned.status.code(), Some(2), "{}", stderr(&planned));
    let text = stdout(&planned);
    assert!(text.contains("+ pool gpu-a: create"), "{text}");
    assert!(text.contains("Plan: 6 to create, 0 to update"), "{text}");
    assert!(text.contains("Plan hash: sha256:"), "{text}");
    // Headings for people, as the preview has them.
    for heading in ["Sites", "Provider accounts", "Pools", "Owner quotas", "Offers", "Flavors"] {
        assert!(text.lines().any(|line| line == heading), "{heading}: {text}");
    }
    assert!(!text.contains('\u{1b}'), "no colour when stdout is not a terminal: {text}");

    let raw = fleet(&server, &token, &["plan", &document, "--json"]);
    let raw: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(raw["summary"]["create"], 6);
    // YAML and JSON documents are the same document.
    let json_document = write(dir, "estate.json", &estate().to_string());
    let from_json: Value =
        serde_json::from_slice(&fleet(&server, &token, &["plan", &json_document, "--json"]).stdout).unwrap();
    assert_eq!(from_json["planHash"], raw["planHash"]);

    let applied = fleet(&server, &token, &["apply", &document, "--plan-hash", raw["planHash"].as_str().unwrap()]);
    assert_eq!(applied.status.code(), Some(0), "{}", stderr(&applied));
    assert!(stdout(&applied).contains("Applied 6 calls."), "{}", stdout(&applied));

    let again = fleet(&server, &token, &["plan", &document]);
    assert_eq!(again.status.code(), Some(0));
    assert!(stdout(&again).contains("No changes"), "{}", stdout(&again));

    let status = fleet(&server, &token, &["status"]);
    assert_eq!(status.status.code(), Some(0));
    assert!(
        stdout(&status).contains(&format!("Applied {} by alice", raw["planHash"].as_str().unwrap())),
        "{}",
        stdout(&status)
    );
    assert!(stdout(&status).contains("In sync"), "{}", stdout(&status));

    let exported = fleet(&server, &token, &["export", "-o", "exported.yaml"]);
    assert_eq!(exported.status.code(), Some(0), "{}", stderr(&exported));
    let roundtrip = fleet(&server, &token, &["plan", "exported.yaml", "--prune"]);
    assert_eq!(roundtrip.status.code(), Some(0), "{}{}", stdout(&roundtrip), stderr(&roundtrip));
    let exported = fleet(&server, &token, &["export"]);
    let exported: Value = serde_json::from_slice(&exported.stdout).unwrap();
    assert_eq!(exported["pools"]["gpu-a"]["gpus"], 64);
}

#[test]
fn updates_show_field_changes_and_blocked_plans_exit_3() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let dir = server.dir.path();
    server.ok(&token, "fleet/apply", json!({"document": estate()}));

    let mut changed = estate();
    changed["pools"]["gpu-a"]["gpus"] = json!(32);
    let file = write(dir, "changed.json", &changed.to_string());
    let planned = fleet(&server, &token, &["plan", &file]);
    assert_eq!(planned.status.code(), Some(2));
    // Each change is one line: the fields are in it, not repeated below.
    assert_eq!(stdout(&planned).matches("64 -> 32").count(), 1, "{}", stdout(&planned));
    assert!(stdout(&planned).contains("~ pool gpu-a: update (gpus 64 -> 32)"), "{}", stdout(&planned));
    assert!(!stdout(&planned).contains('→'), "{}", stdout(&planned));

    changed["pools"]["gpu-a"]["class"] = json!("cpu");
    let file = write(dir, "blocked.json", &changed.to_string());
    let planned = fleet(&server, &token, &["plan", &file]);
    assert_eq!(planned.status.code(), Some(3));
    assert_eq!(stdout(&planned).matches("class is immutable").count(), 1, "{}", stdout(&planned));
    let applied = fleet(&server, &token, &["apply", &file]);
    assert_eq!(applied.status.code(), Some(1));
    assert!(stderr(&applied).contains("INVALID_STATE"), "{}", stderr(&applied));
}

#[test]
fn errors_name_the_file_and_the_field() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let file = write(server.dir.path(), "bad.yaml", "pools:\n  gpu-a:\n    site: eu-west\n    vcpus: -4\n");
    let planned = fleet(&server, &token, &["plan", &file]);
    assert_eq!(planned.status.code(), Some(1));
    let errors = stderr(&planned);
    assert!(errors.contains("INVALID_ARGUMENT"), "{errors}");
    assert!(errors.contains(&format!("{file}: /pools/gpu-a/vcpus")), "{errors}");

    let broken = write(server.dir.path(), "broken.yaml", "pools: [unclosed\n");
    let planned = fleet(&server, &token, &["plan", &broken]);
    assert_eq!(planned.status.code(), Some(1));
    assert!(stderr(&planned).contains(&broken), "{}", stderr(&planned));

    let unauthenticated = fleet(&server, "fleet_wrong", &["status"]);
    assert_eq!(unauthenticated.status.code(), Some(1));
    assert!(stderr(&unauthenticated).contains("UNAUTHENTICATED"));
}

#[test]
fn a_saved_plan_applies_exactly_or_fails_with_config_drift() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let dir = server.dir.path();
    let document = write(dir, "estate.yaml", ESTATE_YAML);
    let planned = fleet(&server, &token, &["plan", &document, "--out", "plan.json"]);
    assert_eq!(planned.status.code(), Some(2));

    // The estate moves after the plan was saved.
    server.ok(&token, "sites/create", json!({"region": "ap-south-1"}));
    server.ok(&token, "fleet/apply", json!({"document": {"sites": estate()["sites"]}}));
    let applied = fleet(&server, &token, &["apply", "--plan", "plan.json"]);
    assert_eq!(applied.status.code(), Some(1));
    assert!(stderr(&applied).contains("CONFIG_DRIFT"), "{}", stderr(&applied));
    assert_eq!(server.ok(&token, "pools/list", json!({}))["items"], json!([]));

    let planned = fleet(&server, &token, &["plan", &document, "--out", "plan.json"]);
    assert_eq!(planned.status.code(), Some(2));
    let applied = fleet(&server, &token, &["apply", "--plan", "plan.json"]);
    assert_eq!(applied.status.code(), Some(0), "{}", stderr(&applied));
    assert!(stdout(&applied).contains("Applied 5 calls."), "{}", stdout(&applied));
}

#[test]
fn control_characters_never_reach_the_terminal_raw() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let dir = server.dir.path();
    // In JSON the CLI refuses it itself; in YAML the server does, naming the key.
    let json_file = write(dir, "evil.json", r#"{"sites": {"eu": {"region": "\u001b[31mred\u0007"}}}"#);
    let yaml_file = write(dir, "evil.yaml", "sites:\n  \"e\\e[2Ju\": {region: \"x\\e]0;owned\\a\"}\n");
    for file in [&json_file, &yaml_file] {
        let planned = fleet(&server, &token, &["plan", file]);
        assert_eq!(planned.status.code(), Some(1), "{}", stderr(&planned));
        let shown = format!("{}{}", stdout(&planned), stderr(&planned));
        assert!(!shown.contains(|character: char| character.is_control() && character != '\n'), "{shown:?}");
        assert!(shown.contains("\\u{1b}") || shown.contains("U+001B"), "the escape is named: {shown}");
    }
    // Duplicate keys in a JSON file are refused, not silently merged.
    let duplicate = write(dir, "twice.json", r#"{"sites": {"eu": {"region": "a", "region": "b"}}}"#);
    let planned = fleet(&server, &token, &["plan", &duplicate]);
    assert_eq!(planned.status.code(), Some(1));
    assert!(stderr(&planned).contains("/sites/eu/region"), "{}", stderr(&planned));
}

#[test]
fn usage_errors_exit_1_and_client_commands_refuse_db() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    for args in [&["plan"][..], &["plan", "x.yaml", "--bogus"], &["frobnicate"], &["status", "--db", "other.db"]] {
        let output = fleet(&server, &token, args);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {}", stderr(&output));
    }
    assert!(stderr(&fleet(&server, &token, &["--db", "x.db", "status"])).contains("--db is for `serve` and `admin`"));
    // Only the commands that take it offer it.
    assert!(!stdout(&fleet(&server, &token, &["plan", "--help"])).contains("--db"));
    assert!(stdout(&fleet(&server, &token, &["serve", "--help"])).contains("--db"));
    assert!(stdout(&fleet(&server, &token, &["admin", "backup", "--help"])).contains("--db"));
    assert_eq!(fleet(&server, &token, &["--help"]).status.code(), Some(0));
    assert_eq!(fleet(&server, &token, &["plan", "--help"]).status.code(), Some(0));
    let missing = fleet(&server, &token, &["plan", "missing.yaml"]);
    assert_eq!(missing.status.code(), Some(1));
    let help = stdout(&fleet(&server, &token, &["apply", "--help"]));
    for flag in ["--prune", "--json", "--yes", "--plan-hash"] {
        let line = help.lines().find(|line| line.contains(&format!("{flag} ")) || line.ends_with(flag));
        let text = line.and_then(|line| line.split_once(flag)).map(|(_, text)| text.trim()).unwrap_or_default();
        assert!(text.len() > 10, "{flag} has help text: {help}");
    }
}

#[test]
fn apply_asks_first_and_refuses_without_a_terminal() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let document = write(server.dir.path(), "estate.yaml", ESTATE_YAML);
    // No terminal here (stdin is not one): refused, nothing applied.
    let refused = fleet(&server, &token, &["apply", &document]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("--yes"), "{}", stderr(&refused));
    assert_eq!(server.ok(&token, "sites/list", json!({}))["items"], json!([]));

    let applied = fleet(&server, &token, &["apply", &document, "--yes"]);
    assert_eq!(applied.status.code(), Some(0), "{}", stderr(&applied));
    assert!(stdout(&applied).contains("Applied 6 calls."), "{}", stdout(&applied));

    // One call is "1 call".
    let mut changed: Value = serde_yaml_ng::from_str(ESTATE_YAML).unwrap();
    changed["pools"]["gpu-a"]["gpus"] = json!(32);
    let file = write(server.dir.path(), "changed.json", &changed.to_string());
    let applied = fleet(&server, &token, &["apply", &file, "-y"]);
    assert!(stdout(&applied).contains("Applied 1 call."), "{}", stdout(&applied));
    let status = fleet(&server, &token, &["status"]);
    assert!(stdout(&status).contains("(1 call, prune off)"), "{}", stdout(&status));
}

/// `fleet apply` on a terminal (a pseudo-terminal from util-linux's `script`), answering
/// `answer` to its question.
fn apply_on_a_terminal(server: &Server, token: &str, file: &str, answer: &str) -> String {
    let mut child = Command::new("script")
        .args(["-qec", &format!("{FLEET} apply {file} --prune"), "/dev/null"])
        .env("FLEET_SERVER", &server.base)
        .env("FLEET_TOKEN", token)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(format!("{answer}\n").as_bytes()).unwrap();
    String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout).into_owned()
}

/// A server whose tenant applied `estate()`, a token, and a document file of the same
/// estate without its flavors.
fn applied_then_without_flavors() -> (Server, String, String) {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let mut without = estate();
    without["flavors"] = json!({});
    let file = write(server.dir.path(), "without.json", &without.to_string());
    (server, token, file)
}

#[test]
fn apply_on_a_terminal_shows_the_plan_and_asks() {
    let (server, token, file) = applied_then_without_flavors();

    let declined = apply_on_a_terminal(&server, &token, &file, "no");
    assert!(declined.contains("- flavor g1-large: delete"), "{declined}");
    assert!(declined.contains("This plan deletes 1 object and archives 0 objects."), "{declined}");
    assert!(declined.contains("Only 'yes' applies"), "{declined}");
    assert!(declined.contains("cancelled"), "{declined}");
    assert_eq!(server.ok(&token, "flavors/list", json!({}))["items"].as_array().unwrap().len(), 1);

    let accepted = apply_on_a_terminal(&server, &token, &file, "yes");
    assert!(accepted.contains("Applied 1 call."), "{accepted}");
    assert_eq!(accepted.matches("- flavor g1-large: delete").count(), 1, "the plan is shown once: {accepted}");
    assert_eq!(server.ok(&token, "flavors/list", json!({}))["items"], json!([]));
}

#[test]
fn plans_say_what_they_leave_alone() {
    let (server, token, file) = applied_then_without_flavors();
    let planned = fleet(&server, &token, &["plan", &file]);
    assert_eq!(planned.status.code(), Some(0));
    let text = stdout(&planned);
    assert!(!text.contains("matches the document"), "{text}");
    assert!(text.contains("1 live flavor not in the document is left alone; --prune would delete it."), "{text}");
    let pruned = stdout(&fleet(&server, &token, &["plan", &file, "--prune"]));
    assert!(pruned.contains("- flavor g1-large: delete"), "{pruned}");
    assert!(!pruned.contains("left alone"), "{pruned}");
}

#[test]
fn a_stale_saved_plan_says_what_moved_and_a_wrong_hash_says_it_does_not_match() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let mut raised = estate();
    raised["ownerQuotas"]["team-ml"]["instances"] = json!(70);
    let file = write(server.dir.path(), "raised.json", &raised.to_string());
    assert_eq!(fleet(&server, &token, &["plan", &file, "--out", "plan.json"]).status.code(), Some(2));

    // Someone sets 80 behind the plan's back: the same call, from another value.
    server.ok(
        &token,
        "quotas/set",
        json!({"owner": "team-ml", "vcpus": 256, "memoryMib": 1048576, "gpus": 32,
                                            "instances": 80}),
    );
    let applied = fleet(&server, &token, &["apply", "--plan", "plan.json"]);
    assert_eq!(applied.status.code(), Some(1));
    let said = stderr(&applied);
    assert!(said.contains("instances 100 -> 70"), "{said}");
    assert!(said.contains("instances 80 -> 70"), "{said}");
    assert_eq!(server.ok(&token, "quotas/get", json!({"owner": "team-ml"}))["instances"], 80);

    let malformed = fleet(&server, &token, &["apply", &file, "--plan-hash", "sha256:deadbeef"]);
    assert_eq!(malformed.status.code(), Some(1));
    assert!(stderr(&malformed).contains("INVALID_ARGUMENT"), "{}", stderr(&malformed));
    let wrong = format!("sha256:{}", "0".repeat(64));
    let mismatched = fleet(&server, &token, &["apply", &file, "--plan-hash", &wrong]);
    assert_eq!(mismatched.status.code(), Some(1));
    assert!(stderr(&mismatched).contains("the plan hash does not match"), "{}", stderr(&mismatched));
}

#[test]
fn status_says_when_it_checked_and_exits_2_when_drifted_and_audit_says_who() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let status = fleet(&server, &token, &["status"]);
    assert_eq!(status.status.code(), Some(0));
    assert!(stdout(&status).contains("In sync with the applied document at the last check, 20"), "{}", stdout(&status));

    let pool = server.ok(&token, "pools/list", json!({}))["items"][0]["id"].clone();
    server.ok(&token, "pools/update", json!({"id": pool, "gpus": 48}));
    // The background check (every 15 minutes) has not run: only --refresh sees it now.
    assert_eq!(fleet(&server, &token, &["status"]).status.code(), Some(0));
    let refreshed = fleet(&server, &token, &["status", "--refresh"]);
    assert_eq!(refreshed.status.code(), Some(2), "{}", stdout(&refreshed));
    // What happened, as it happened: applied -> actual, who and how.
    assert!(
        stdout(&refreshed).contains("pool gpu-a: gpus 64 -> 48 by alice via compute.pools.update at 20"),
        "{}",
        stdout(&refreshed)
    );
    assert!(stdout(&refreshed).contains("Drifted since 20"), "{}", stdout(&refreshed));
    // The check was recorded: plain status now says so too, with when.
    let status = fleet(&server, &token, &["status", "--json"]);
    assert_eq!(status.status.code(), Some(2));
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(status["checkedAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(status["drift"]["summary"]["update"], 1);
    let change = &status["drift"]["changes"][0];
    assert_eq!(change["text"], "pool gpu-a: gpus 64 -> 48 by alice via compute.pools.update", "{change}");
    assert_eq!(change["repair"], "~ pool gpu-a: update (gpus 48 -> 64)", "the plan line that undoes it: {change}");
    let events = server.ok(&token, "events/list", json!({}))["events"].clone();
    let types: Vec<&str> = events.as_array().unwrap().iter().map(|event| event["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["fleet.applied", "fleet.drifted"]);

    // The audit trail says the same, newest first, names beside ids, and which apply
    // made what.
    let audit = fleet(&server, &token, &["audit", "--kind", "pool"]);
    assert_eq!(audit.status.code(), Some(0), "{}", stderr(&audit));
    let lines: Vec<String> = stdout(&audit).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let update =
        format!("pool gpu-a ({}): gpus 64 -> 48 by alice via compute.pools.update at 20", pool.as_str().unwrap());
    assert!(lines[0].contains(&update) && !lines[0].contains("fleet.apply"), "{lines:?}");
    assert!(lines[1].contains("via compute.pools.create at 20") && lines[1].contains("(fleet.apply of sha256:"));
    assert!(lines[1].contains("site (none) -> eu-west (site_"), "a reference is named too: {lines:?}");
    let by_key = stdout(&fleet(&server, &token, &["audit", "--key", "gpu-a"]));
    assert_eq!(by_key.lines().count(), 2, "{by_key}");
    let oldest = fleet(&server, &token, &["audit", "--after", "0", "--limit", "1", "--json"]);
    let oldest: Value = serde_json::from_slice(&oldest.stdout).unwrap();
    let page = fleet(&server, &token, &["audit", "--limit", "1", "--json"]);
    let page: Value = serde_json::from_slice(&page.stdout).unwrap();
    assert!(page["records"][0]["seq"].as_u64() > oldest["records"][0]["seq"].as_u64(), "newest first by default");
    let first = oldest["records"][0]["seq"].as_u64().unwrap();
    let next =
        stdout(&fleet(&server, &token, &["audit", "--after", &first.to_string(), "--id", pool.as_str().unwrap()]));
    assert!(next.lines().all(|line| line.contains(pool.as_str().unwrap())), "{next}");

    // Put back by hand, then the applied document applied again: nothing to do and no
    // revision to make, but the drift it finds gone ends, as any apply ends it.
    server.ok(&token, "pools/update", json!({"id": pool, "gpus": 64}));
    let again = server.ok(&token, "fleet/apply", json!({"document": estate()}));
    assert_eq!(again["applied"], 0);
    let status = server.ok(&token, "fleet/status", json!({}));
    assert!(status.get("drift").is_none(), "{status}");
    assert_eq!(status["applied"]["revision"], 1, "no revision for an apply that changed nothing");
    let events = server.ok(&token, "events/list", json!({}))["events"].clone();
    let types: Vec<&str> = events.as_array().unwrap().iter().map(|event| event["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["fleet.applied", "fleet.drifted", "fleet.converged"]);
}

#[test]
fn export_writes_yaml_or_json_and_says_where() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let yaml = fleet(&server, &token, &["export", "--format", "yaml"]);
    let parsed: Value = serde_yaml_ng::from_slice(&yaml.stdout).unwrap();
    assert_eq!(parsed["pools"]["gpu-a"]["gpus"], 64);
    assert!(!stdout(&yaml).trim_start().starts_with('{'));
    let written = fleet(&server, &token, &["export", "-o", "estate.yml"]);
    assert!(stderr(&written).contains("Wrote the estate (6 objects) to estate.yml as YAML."), "{}", stderr(&written));
    let written = fleet(&server, &token, &["export", "-o", "estate.txt", "--format", "json"]);
    assert!(stderr(&written).contains("as JSON"), "{}", stderr(&written));
}

#[test]
fn mistakes_get_a_hint() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let wrapped = write(server.dir.path(), "wrapped.json", &json!({"document": estate()}).to_string());
    let planned = fleet(&server, &token, &["plan", &wrapped]);
    assert_eq!(planned.status.code(), Some(1));
    assert!(stderr(&planned).contains("a FleetConfig file is the document itself"), "{}", stderr(&planned));

    let refused = fleet(&server, "fleet_not-a-token", &["status"]);
    assert!(stderr(&refused).contains(&format!("refused by {}", server.base)), "{}", stderr(&refused));

    let directory = Command::new(FLEET).args(["--db", "/tmp", "admin", "tenant", "create", "x"]).output().unwrap();
    assert_eq!(directory.status.code(), Some(1));
    assert!(stderr(&directory).contains("is a directory"), "{}", stderr(&directory));
    let orphan =
        Command::new(FLEET).args(["--db", "/no/such/dir/f.db", "admin", "tenant", "create", "x"]).output().unwrap();
    assert!(stderr(&orphan).contains("its directory /no/such/dir does not exist"), "{}", stderr(&orphan));
}

/// Issue 30: every duration and size flag refuses what it cannot represent (a huge
/// value, zero, garbage) with exit code 1 and the flag's name, before anything runs.
#[test]
fn duration_and_size_flags_refuse_what_they_cannot_represent() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let run = |args: &[&str]| Command::new(FLEET).arg("--db").arg(&db).args(args).output().expect("fleet runs");
    let serve_flags = [
        "--drift-interval",
        "--head-timeout",
        "--idle-timeout",
        "--body-timeout",
        "--busy-timeout",
        "--sandbox-cpu",
        "--plugin-cpu",
        "--request-timeout",
    ];
    let token = ["admin", "token", "create", "--tenant", "acme", "--principal", "p", "--grant", "compute:*:*@*"];
    for value in ["1000000000d", "0s", "soon", "99999999999999999999999d"] {
        let mut cases: Vec<(Vec<&str>, &str)> =
            serve_flags.iter().map(|flag| (vec!["serve", "--listen", "127.0.0.1:0", flag, value], *flag)).collect();
        cases.push(([&token[..], &["--expires", value]].concat(), "--expires"));
        for (args, flag) in cases {
            let output = run(&args);
            assert_eq!(output.status.code(), Some(1), "{args:?}: {}", stderr(&output));
            assert!(stderr(&output).contains(flag), "{args:?}: {}", stderr(&output));
            assert!(!stderr(&output).contains("panicked"), "{args:?}: {}", stderr(&output));
        }
    }
    for (flag, values) in [
        ("--sandbox-memory-mib", ["0", "4097", "99999999999999999999"]),
        ("--plugin-memory-mib", ["0", "4097", "-1"]),
        ("--body-limit", ["0", "99999999999", "lots"]),
        ("--max-connections", ["0", "-1", "many"]),
        ("--webhooks-per-tenant", ["0", "65536", "some"]),
        ("--request-memory-total-mib", ["0", "1048577", "16"]),
    ] {
        for value in values {
            let output = run(&["serve", "--listen", "127.0.0.1:0", &format!("{flag}={value}")]);
            assert_eq!(output.status.code(), Some(1), "{flag} {value}: {}", stderr(&output));
            assert!(stderr(&output).contains(flag), "{flag} {value}: {}", stderr(&output));
        }
    }
    let output = run(&["serve", "--listen", "127.0.0.1:0", "--drift-interval", "31d"]);
    assert!(stderr(&output).contains("must be at most 30 days"), "{}", stderr(&output));
    // The longest values they do take work.
    let server = Server::start(&["--drift-interval", "30d", "--sandbox-memory-mib", "1024"]);
    server.tenant("acme");
    let mut args = token[1..].to_vec();
    args.extend(["--expires", "36500d"]);
    let created = server.admin(&args);
    assert!(created.contains("valid until 21"), "{created}");
}

/// A reader that goes away early (`| head`) ends the output quietly: exit 0, no panic,
/// no error.
#[test]
fn output_to_a_reader_that_left_ends_quietly() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    for args in [&["completions", "bash"][..], &["man"], &["history", "--json"], &["export"]] {
        let mut child = Command::new(FLEET)
            .args(args)
            .env("FLEET_SERVER", &server.base)
            .env("FLEET_TOKEN", &token)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("fleet runs");
        // The reading end closes before anything is written: every write is a broken pipe.
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{args:?}: {}", stderr(&output));
        assert_eq!(stderr(&output), "", "{args:?}");
    }
}

/// A directory of `files` (name, text) under the server's directory, made afresh; its path.
fn directory(server: &Server, name: &str, files: &[(&str, &str)]) -> String {
    let dir = server.dir.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, text) in files {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir.display().to_string()
}

/// `fleet history --json`: what has been applied, to tell that nothing was.
fn history(server: &Server, token: &str) -> Value {
    let history = fleet(server, token, &["history", "--json"]);
    assert_eq!(history.status.code(), Some(0), "{}", stderr(&history));
    serde_json::from_slice(&history.stdout).unwrap()
}

/// SPEC §20.1: a directory's `*.yaml`, `*.yml` and `*.json` files are one document, the
/// very one a single file with the same sections and keys is: the same plan hash, and
/// applying one leaves the other nothing to do. Hidden files, other extensions and
/// subdirectories (one named like a document file too) are not read: each would fail.
#[test]
fn a_directory_is_the_document_its_files_merge_into() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let mut whole = estate();
    whole["pools"]["gpu-b"] = json!({"site": "eu-west", "account": "aws-main", "class": "cpu", "owner": "team-ml"});
    let part = |sections: &[&str], pools: &[&str]| {
        let mut part = json!({});
        for section in sections {
            part[*section] = whole[*section].clone();
        }
        for pool in pools {
            part["pools"][*pool] = whole["pools"][*pool].clone();
        }
        part
    };
    let yaml = |value: Value| serde_yaml_ng::to_string(&value).unwrap();
    let broken = "pools: [unclosed\n";
    let estate_dir = directory(
        &server,
        "estate",
        &[
            ("10-sites.yaml", &yaml(part(&["sites", "providerAccounts"], &[]))),
            ("20-pools.yml", &yaml(part(&["ownerQuotas"], &["gpu-a"]))),
            ("30-more.json", &part(&["offers", "flavors"], &["gpu-b"]).to_string()),
            (".hidden.yaml", broken),
            ("README.md", "# The estate\n\nEach file holds some of its sections.\n"),
            ("20-pools.yml.orig", broken),
            ("sub/40-pools.yaml", broken),
            ("archive.yaml/old.yaml", broken),
        ],
    );
    let single = write(server.dir.path(), "whole.json", &whole.to_string());

    let plan_of = |document: &str| {
        let planned = fleet(&server, &token, &["plan", document, "--json"]);
        assert_eq!(planned.status.code(), Some(2), "{document}: {}", stderr(&planned));
        serde_json::from_slice::<Value>(&planned.stdout).unwrap()
    };
    let from_directory = plan_of(&estate_dir);
    let from_file = plan_of(&single);
    assert_eq!(from_directory["summary"]["create"], 7, "{from_directory}");
    assert_eq!(from_directory["planHash"], from_file["planHash"]);

    // The directory's apply, pinned to the single file's plan.
    let hash = from_file["planHash"].as_str().unwrap();
    let applied = fleet(&server, &token, &["apply", &estate_dir, "--plan-hash", hash, "--yes"]);
    assert_eq!(applied.status.code(), Some(0), "{}", stderr(&applied));
    assert!(stdout(&applied).contains("Applied 7 calls."), "{}", stdout(&applied));
    let again = fleet(&server, &token, &["plan", &single]);
    assert_eq!(again.status.code(), Some(0), "{}{}", stdout(&again), stderr(&again));
    assert!(stdout(&again).contains("No changes"), "{}", stdout(&again));
    let status = fleet(&server, &token, &["status"]);
    assert!(stdout(&status).contains(&format!("Applied {hash} by alice")), "{}", stdout(&status));
}

/// A key in two files, or a section of two shapes, is refused naming both files and the
/// key, before anything is sent: nothing is planned or applied.
#[test]
fn a_key_in_two_files_is_refused_naming_both_and_nothing_is_applied() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": {"sites": estate()["sites"]}}));
    let before = history(&server, &token);
    assert_eq!(before["revisions"].as_array().map(Vec::len), Some(1), "{before}");

    let pools = serde_yaml_ng::to_string(&json!({"sites": estate()["sites"], "pools": estate()["pools"]})).unwrap();
    let clash = directory(
        &server,
        "clash",
        &[("10-pools.yaml", &pools), ("20-more.yaml", "pools:\n  gpu-a: {site: eu-west, class: cpu}\n")],
    );
    for command in [&["plan", &clash][..], &["apply", &clash, "--yes"], &["propose", &clash]] {
        let refused = fleet(&server, &token, command);
        assert_eq!(refused.status.code(), Some(1), "{command:?}: {}", stdout(&refused));
        let errors = stderr(&refused);
        for named in [&clash, "10-pools.yaml", "20-more.yaml", "/pools/gpu-a: is in both"] {
            assert!(errors.contains(named), "{command:?}: {named}: {errors}");
        }
    }

    let shapes = directory(
        &server,
        "shapes",
        &[("a.json", r#"{"moved": [{"kind": "pool", "from": "a", "to": "b"}]}"#), ("b.yaml", "moved:\n  a: b\n")],
    );
    let refused = fleet(&server, &token, &["apply", &shapes, "--yes"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("/moved: is a list in "), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("a.json but an object in ") && stderr(&refused).contains("b.yaml"));

    assert_eq!(history(&server, &token), before);
    assert_eq!(server.ok(&token, "pools/list", json!({}))["items"], json!([]));
    assert_eq!(server.ok(&token, "proposals/list", json!({}))["proposals"], json!([]));
}

/// What is no document is refused naming the directory or the file, with exit code 1
/// and nothing applied: a directory without document files, and a file that holds two
/// YAML documents, nothing, no object, a wrapped document, or cannot be read.
#[test]
fn a_directory_that_is_no_document_says_which_file_is_wrong() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let sites = r#"{"sites": {"eu-west": {"region": "eu-west-1"}}}"#;
    let refused = |dir: &str, said: &[&str]| {
        let applied = fleet(&server, &token, &["apply", dir, "--yes"]);
        assert_eq!(applied.status.code(), Some(1), "{dir}: {}", stdout(&applied));
        for said in said {
            assert!(stderr(&applied).contains(said), "{dir}: {said}: {}", stderr(&applied));
        }
    };

    let empty = directory(&server, "empty", &[]);
    refused(&empty, &[&format!("{empty}: no document file in this directory")]);
    let only_others =
        directory(&server, "others", &[(".estate.yaml", sites), ("estate.txt", sites), ("a/b.json", sites)]);
    refused(&only_others, &[&format!("{only_others}: no document file in this directory")]);

    let two =
        directory(&server, "two", &[("10-sites.json", sites), ("20-pools.yaml", "pools: {}\n---\nflavors: {}\n")]);
    refused(&two, &["20-pools.yaml: holds more than one YAML document"]);
    let blank = directory(&server, "blank", &[("10-sites.json", sites), ("20-pools.yaml", "# pools come later\n")]);
    refused(&blank, &["20-pools.yaml: holds no document"]);
    let list = directory(&server, "list", &[("10-sites.json", sites), ("20-pools.json", "[]")]);
    refused(&list, &["20-pools.json is a list, not an object of sections"]);
    let wrapped = directory(&server, "wrapped", &[("10-sites.json", &format!(r#"{{"document": {sites}}}"#))]);
    refused(&wrapped, &["10-sites.json: the file wraps its document"]);

    let locked = directory(&server, "locked", &[("10-sites.json", sites), ("20-pools.yaml", "pools: {}\n")]);
    let file = Path::new(&locked).join("20-pools.yaml");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root (or a process with CAP_DAC_OVERRIDE), as tests may run in a container, reads
    // the file all the same: there is no unreadable file to refuse then.
    if std::fs::read(&file).is_err() {
        refused(&locked, &[&format!("{}: Permission denied", file.display())]);
    }

    assert_eq!(history(&server, &token)["revisions"], json!([]));
    assert_eq!(server.ok(&token, "sites/list", json!({}))["items"], json!([]));
}

/// A file over 16 MiB (a default server's whole body) is refused naming it, unread past
/// that; files under it that merge into more are sent, with a warning naming the
/// directory first, since what the server answers names none.
#[test]
fn sizes_past_a_default_servers_limit_are_named() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let site =
        |name: &str, note: usize| json!({"sites": {name: {"region": "r", "labels": {"note": "n".repeat(note)}}}});
    let large = directory(&server, "large", &[("estate.json", &site("eu", 17 << 20).to_string())]);
    let file = format!("{large}/estate.json");
    let refused = fleet(&server, &token, &["plan", &file]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains(&format!("{file}: larger than 16 MiB")), "{}", stderr(&refused));
    let refused = fleet(&server, &token, &["plan", &large]);
    assert!(stderr(&refused).contains(&format!("{file}: larger than 16 MiB")), "{}", stderr(&refused));

    let halves = directory(
        &server,
        "halves",
        &[("a.json", &site("eu", 9 << 20).to_string()), ("b.json", &site("us", 9 << 20).to_string())],
    );
    let refused = fleet(&server, &token, &["plan", &halves]);
    assert_eq!(refused.status.code(), Some(1));
    let errors = stderr(&refused);
    assert!(errors.contains(&format!("warning: {halves}: the document is ")), "{errors}");
    // The server answers PAYLOAD_TOO_LARGE as soon as the body passes its limit and closes
    // the connection, which the client, still writing, may see as a failed write only.
    assert!(errors.contains("PAYLOAD_TOO_LARGE") || errors.contains("error writing a body"), "{errors}");
    assert_eq!(server.ok(&token, "sites/list", json!({}))["items"], json!([]));
}

//! The operator's command line, run as a process against a live server.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::fleet::estate;
use crate::support::{FLEET, Server};

fn fleet(server: &Server, token: &str, args: &[&str]) -> Output {
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
    assert!(stdout(&planned).contains("gpus: 64 → 32"), "{}", stdout(&planned));

    changed["pools"]["gpu-a"]["class"] = json!("cpu");
    let file = write(dir, "blocked.json", &changed.to_string());
    let planned = fleet(&server, &token, &["plan", &file]);
    assert_eq!(planned.status.code(), Some(3));
    assert!(stdout(&planned).contains("class is immutable"), "{}", stdout(&planned));
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

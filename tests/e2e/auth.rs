//! Tenancy, identity and authorization (SPEC §3, §9's admin commands) against the real
//! binary: tokens stored hashed, refused when unknown, expired or revoked, grants decided
//! by the registry, the bearer scheme read as RFC 7235 says.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::raw::{body_of, exchange};
use crate::support::{ALL, FLEET, Server, code, eventually, postgres};

#[test]
fn missing_or_unknown_tokens_are_unauthenticated() {
    let server = Server::start(&[]);
    let (status, body) = server.raw(None, "/api/compute/fleet/export", "{}");
    assert_eq!((status, code(&body)), (401, "UNAUTHENTICATED"));
    let (status, body) = server.raw(Some("fleet_not-a-token"), "/api/compute/fleet/export", "{}");
    assert_eq!((status, code(&body)), (401, "UNAUTHENTICATED"));
    assert!(body["error"]["message"].is_string());
}

#[test]
fn a_missing_grant_is_permission_denied_naming_permission_and_scope() {
    let server = Server::start(&[]);
    server.tenant("acme");
    let reader = server.token("acme", "reader", &["compute:pools:read @ compute-pools"]);
    let (status, body) = server.call(&reader, "fleet/export", json!({}));
    assert_eq!((status, code(&body)), (403, "PERMISSION_DENIED"));
    assert_eq!(body["error"]["details"]["permission"], "compute:fleet:admin");
    assert_eq!(body["error"]["details"]["scope"], "compute-fleet");
    let (status, body) = server.call(&reader, "pools/create", json!({}));
    assert_eq!((status, code(&body)), (403, "PERMISSION_DENIED"));
    assert_eq!(body["error"]["details"]["permission"], "compute:pools:write");
    let (status, _) = server.call(&reader, "pools/list", json!({}));
    assert_eq!(status, 200);
}

#[test]
fn tokens_are_stored_only_as_hashes() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "sites/create", json!({"region": "eu-west-1"}));
    drop(server.token("acme", "bob", &[ALL]));
    let secret = token.trim_start_matches("fleet_");
    if postgres() {
        let stored = server.sql().text("SELECT string_agg(tokens::text, ' ') FROM tokens").unwrap_or_default();
        assert!(stored.contains("tok_") && !stored.contains(secret), "the tokens table holds a secret: {stored}");
        return;
    }
    let mut files = vec![server.db_path()];
    files.push(server.db_path().with_extension("db-wal"));
    for file in files {
        if let Ok(bytes) = std::fs::read(&file) {
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(&token), "{} holds the raw token", file.display());
            assert!(!text.contains(secret), "{} holds the token's secret", file.display());
        }
    }
}

#[test]
fn admin_refuses_bad_input() {
    let server = Server::start(&[]);
    let output = std::process::Command::new(crate::support::FLEET)
        .arg("--db")
        .arg(server.db_path())
        .args(["admin", "tenant", "create", "Not_A_Name"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    server.tenant("acme");
    let output = std::process::Command::new(crate::support::FLEET)
        .arg("--db")
        .arg(server.db_path())
        .args(["admin", "token", "create", "--tenant", "acme", "--principal", "bob", "--grant", "compute:fleet"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("grant"));
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let request = format!(
            "POST /api/compute/sites/list HTTP/1.1\r\nHost: {}\r\nAuthorization: {scheme} {token}\r\n\
             Content-Length: 2\r\nConnection: close\r\n\r\n{{}}",
            server.address()
        );
        let answer = exchange(&server, request.as_bytes(), Duration::from_secs(5));
        assert!(answer.starts_with("HTTP/1.1 200"), "{scheme}: {answer}");
    }
    let request = format!(
        "POST /api/compute/sites/list HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {token}\r\n\
         Content-Length: 2\r\nConnection: close\r\n\r\n{{}}",
        server.address()
    );
    let answer = exchange(&server, request.as_bytes(), Duration::from_secs(5));
    assert_eq!(code(&body_of(&answer)), "UNAUTHENTICATED");
}

fn admin(server: &Server, args: &[&str]) -> std::process::Output {
    Command::new(FLEET).arg("--db").arg(server.db_path()).arg("admin").args(args).output().unwrap()
}

#[test]
fn tokens_expire_and_are_revoked_at_once_and_are_listed_without_secrets() {
    let server = Server::start(&[]);
    server.tenant("acme");
    let output = admin(
        &server,
        &["token", "create", "--tenant", "acme", "--principal", "ci-bot", "--grant", ALL, "--expires", "2s"],
    );
    assert!(output.status.success());
    let short = String::from_utf8_lossy(&output.stdout).lines().last().unwrap().trim().to_owned();
    let long = server.token("acme", "alice", &[ALL]);
    server.ok(&short, "sites/list", json!({}));
    server.ok(&long, "sites/list", json!({}));

    let listed = admin(&server, &["token", "list", "--tenant", "acme", "--json"]);
    let tokens: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(tokens.as_array().unwrap().len(), 2);
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(!text.contains(&short) && !text.contains(&long), "never the secret");
    let alice = tokens.as_array().unwrap().iter().find(|token| token["principal"] == "alice").unwrap();
    assert!(alice["id"].as_str().unwrap().starts_with("tok_"));
    assert_eq!(alice["expiresAt"], Value::Null);
    let bot = tokens.as_array().unwrap().iter().find(|token| token["principal"] == "ci-bot").unwrap();
    assert!(bot["expiresAt"].as_str().unwrap().ends_with('Z'));
    let table = String::from_utf8_lossy(&admin(&server, &["token", "list", "--tenant", "acme"]).stdout).into_owned();
    assert!(table.contains("ci-bot") && table.contains("never"), "{table}");

    // Revoked: refused by the running server from the very next request.
    let revoked = admin(&server, &["token", "revoke", alice["id"].as_str().unwrap()]);
    assert!(revoked.status.success(), "{}", String::from_utf8_lossy(&revoked.stderr));
    let (status, body) = server.call(&long, "sites/list", json!({}));
    assert_eq!((status, code(&body)), (401, "UNAUTHENTICATED"));
    assert!(body["error"]["message"].as_str().unwrap().contains("revoked"));
    assert!(!admin(&server, &["token", "revoke", "tok_nosuchtoken00000"]).status.success());

    // Expired: refused once its time has passed.
    assert!(
        eventually(Duration::from_secs(10), || server.call(&short, "sites/list", json!({})).0 == 401),
        "the 2 s token is refused within 10 s"
    );
    let (status, body) = server.call(&short, "sites/list", json!({}));
    assert_eq!((status, code(&body)), (401, "UNAUTHENTICATED"));
    assert!(body["error"]["message"].as_str().unwrap().contains("expired"));
}

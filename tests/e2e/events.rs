//! Drift and its events (SPEC §6.5) against the real binary: a drift event says what
//! moved, who moved it and when; the event stream resumes where it is told and ends when
//! its token no longer answers for it.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fleet::{estate, wait_for_checks};
use crate::support::raw::{body_of, exchange};
use crate::support::{ALL, Server, code, eventually};

/// The tenant's events but its applies' own (`fleet.applied`).
fn events(server: &Server, token: &str) -> Vec<Value> {
    let events = server.ok(token, "events/list", json!({}))["events"].as_array().unwrap().clone();
    events.into_iter().filter(|event| event["type"] != "fleet.applied").collect()
}

#[test]
fn a_drift_event_names_the_field_the_values_and_who_changed_it() {
    let server = Server::start(&["--drift-interval", "300ms"]);
    server.tenant("acme");
    let alice = server.token("acme", "alice", &[ALL]);
    let bob =
        server.token("acme", "bob", &["compute:pools:write @ compute-pools", "compute:pools:read @ compute-pools"]);
    server.ok(&alice, "fleet/apply", json!({"document": estate()}));
    let pool = server.ok(&alice, "pools/list", json!({}))["items"][0]["id"].clone();

    server.ok(&bob, "pools/update", json!({"id": pool, "gpus": 48}));
    assert!(
        eventually(Duration::from_secs(30), || !events(&server, &alice).is_empty()),
        "a drift event within 30 s of bob's change"
    );
    // Two more checks find the same drift and publish nothing.
    wait_for_checks(&server, &alice, 2);
    let events = events(&server, &alice);
    assert_eq!(events.len(), 1, "one event while the drift stays the same: {events:?}");
    let data = &events[0]["data"];
    assert_eq!(events[0]["type"], "fleet.drifted");
    let change = &data["changes"][0];
    assert_eq!(change["kind"], "pool");
    assert_eq!(change["key"], "gpu-a");
    assert_eq!(change["id"], pool);
    assert_eq!(change["action"], "update");
    assert_eq!(change["fields"], json!([{"field": "gpus", "applied": 64, "actual": 48}]));
    assert_eq!(change["changedBy"], "bob");
    assert_eq!(change["method"], "compute.pools.update");
    let changed_at = change["changedAt"].as_str().unwrap();
    assert!(changed_at.ends_with('Z'));
    assert_eq!(data["since"], changed_at, "drifted since bob's change");
    assert!(data["planHash"].as_str().unwrap().starts_with("sha256:"));

    let status = server.ok(&alice, "fleet/status", json!({}));
    assert_eq!(status["drift"]["changes"][0]["changedBy"], "bob");
    assert_eq!(status["drift"]["since"], changed_at);
}

#[test]
fn an_event_stream_refuses_a_resume_point_it_cannot_read() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let stream = |query: &str, last_event_id: Option<&str>| {
        let header = last_event_id.map(|id| format!("Last-Event-ID: {id}\r\n")).unwrap_or_default();
        let request = format!(
            "GET /api/compute/events/stream{query} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n{header}\r\n",
            server.address()
        );
        exchange(&server, request.as_bytes(), Duration::from_millis(1500))
    };
    for (query, header) in [
        ("?after=9007199254740992", None),
        ("?after=-1", None),
        ("?after=abc", None),
        ("", Some("-1")),
        ("", Some("x")),
    ] {
        let answer = stream(query, header);
        assert!(answer.starts_with("HTTP/1.1 400"), "{query} {header:?}: {answer}");
        assert_eq!(code(&body_of(&answer)), "INVALID_ARGUMENT");
    }
    assert!(stream("?after=9007199254740991", None).starts_with("HTTP/1.1 200"));
    assert!(stream("", Some("3")).starts_with("HTTP/1.1 200"));
}

/// Opens the tenant's event stream with `token`, read line by line.
fn open_stream(server: &Server, token: &str) -> std::io::Lines<std::io::BufReader<reqwest::blocking::Response>> {
    use std::io::BufRead;
    let stream = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
        .get(format!("{}/api/compute/events/stream", server.base))
        .bearer_auth(token)
        .send()
        .unwrap();
    assert_eq!(stream.status(), 200);
    std::io::BufReader::new(stream).lines()
}

/// Makes the tenant drift: a pool changed outside fleet, which the next check (every
/// 300 ms in these servers) announces as `fleet.drifted`.
fn drift(server: &Server, token: &str, gpus: u64) {
    let pool = server.ok(token, "pools/list", json!({}))["items"][0]["id"].clone();
    server.ok(token, "pools/update", json!({"id": pool, "gpus": gpus}));
}

/// Reads a stream to its end, which must come within 20 s; returns the events it
/// delivered on the way.
fn events_until_closed(lines: std::io::Lines<std::io::BufReader<reqwest::blocking::Response>>) -> Vec<String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let events: Vec<String> =
            lines.map_while(Result::ok).filter(|line| line.starts_with("event: ")).collect();
        let _ = sender.send(events);
    });
    receiver.recv_timeout(Duration::from_secs(20)).expect("the stream is closed")
}

/// SPEC §9: a revocation ends a token at once for every server process; an event
/// stream opened with it delivers nothing after the revocation, and ends.
#[test]
fn a_revoked_tokens_event_stream_delivers_nothing_more_and_ends() {
    let server = Server::start(&["--drift-interval", "300ms"]);
    let token = server.tenant_with_token("acme");
    let other = server.token("acme", "bob", &[crate::support::ALL]);
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let lines = open_stream(&server, &token);
    let listed: Value =
        serde_json::from_str(&server.admin(&["token", "list", "--tenant", "acme", "--json"])).unwrap();
    let id = listed.as_array().unwrap().iter().find(|token| token["principal"] == "alice").unwrap()["id"].clone();
    server.admin(&["token", "revoke", id.as_str().unwrap()]);
    drift(&server, &other, 1);
    // The drift is announced, to a stream whose token still answers for it.
    let mut live = open_stream(&server, &other);
    assert!(live.any(|line| line.unwrap() == "event: fleet.drifted"));
    assert_eq!(events_after_the_apply(lines), Vec::<String>::new());
}

/// What a stream opened after the apply delivered until it closed, but the apply's own
/// event, which it replays at once.
fn events_after_the_apply(lines: std::io::Lines<std::io::BufReader<reqwest::blocking::Response>>) -> Vec<String> {
    events_until_closed(lines).into_iter().filter(|event| event != "event: fleet.applied").collect()
}

/// The same for a token that expires while its stream is open.
#[test]
fn an_expired_tokens_event_stream_delivers_nothing_more_and_ends() {
    let server = Server::start(&["--drift-interval", "300ms"]);
    server.tenant("acme");
    let token = server.admin(&[
        "token", "create", "--tenant", "acme", "--principal", "alice", "--grant", crate::support::ALL,
        "--expires", "4s",
    ]);
    let token = token.lines().last().unwrap().trim().to_owned();
    let other = server.token("acme", "bob", &[crate::support::ALL]);
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let lines = open_stream(&server, &token);
    assert!(
        eventually(Duration::from_secs(20), || server.call(&token, "fleet/status", json!({})).0 == 401),
        "the 4 s token has expired within 20 s"
    );
    drift(&server, &other, 1);
    let mut live = open_stream(&server, &other);
    assert!(live.any(|line| line.unwrap() == "event: fleet.drifted"));
    assert_eq!(events_after_the_apply(lines), Vec::<String>::new());
}

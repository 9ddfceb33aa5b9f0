//! What one client may hold (SPEC §7a) against the real binary: slow heads, idle
//! connections and trickled bodies end, a flood of connections under a low descriptor
//! limit leaves the server serving, a terminated server ends its streams, and a
//! database locked by another process is an outage with `Retry-After`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::raw::{body_of, closed_within, exchange, get_request, open_event_stream};
use crate::support::{Launch, Server, code, eventually, postgres};

#[test]
fn slow_heads_and_idle_connections_are_closed_by_their_timeouts() {
    let server = Server::start(&["--head-timeout", "1s", "--idle-timeout", "2s", "--body-timeout", "1s"]);
    let token = server.tenant_with_token("acme");

    // Half a head, then nothing: closed after the head timeout.
    let mut slow = TcpStream::connect(server.address()).unwrap();
    slow.write_all(b"GET /heal").unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut slow, Duration::from_secs(5)), "a slow head is cut off");
    assert!(started.elapsed() >= Duration::from_millis(900), "not before the head timeout");

    // A connection that sends nothing at all is a slow head too.
    let mut silent = TcpStream::connect(server.address()).unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(5)));

    // Keep-alive: served, then closed after the idle timeout, not the head timeout.
    let mut idle = TcpStream::connect(server.address()).unwrap();
    idle.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", server.address()).as_bytes()).unwrap();
    let mut answer = [0; 1024];
    let read = idle.read(&mut answer).unwrap();
    assert!(String::from_utf8_lossy(&answer[..read]).starts_with("HTTP/1.1 200"));
    let started = Instant::now();
    assert!(closed_within(&mut idle, Duration::from_secs(6)));
    assert!(started.elapsed() >= Duration::from_millis(1800), "idle for the idle timeout: {:?}", started.elapsed());

    // A body that stops arriving ends its request with the error envelope.
    let head = format!(
        "POST /api/compute/sites/list HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Length: 10\r\n\r\n{{",
        server.address()
    );
    let answer = exchange(&server, head.as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(body_of(&answer)["error"]["message"].as_str().unwrap().contains("stopped arriving"), "{answer}");

    // A request in flight is never cut off by these timeouts: an event stream outlives them.
    let mut stream = open_event_stream(&server, &token);
    assert!(!closed_within(&mut stream, Duration::from_secs(4)), "the stream stays open past both timeouts");
}

#[test]
fn a_body_trickled_in_ends_within_the_body_timeout() {
    let server = Server::start(&["--body-timeout", "2s"]);
    let token = server.tenant_with_token("acme");
    let mut stream = TcpStream::connect(server.address()).unwrap();
    let head = format!(
        "POST /api/compute/sites/list HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 1000\r\n\r\n",
        server.address()
    );
    stream.write_all(head.as_bytes()).unwrap();
    // A byte every half second: never a pause of the body timeout, and never the end.
    let started = Instant::now();
    let trickle = {
        let mut stream = stream.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..60 {
                std::thread::sleep(Duration::from_millis(500));
                if stream.write_all(b" ").is_err() {
                    return;
                }
            }
        })
    };
    stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut answer = vec![0; 4096];
    let read = stream.read(&mut answer).expect("an answer before the trickle ends");
    let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
    assert!(started.elapsed() < Duration::from_secs(10), "ended near the body timeout: {:?}", started.elapsed());
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(body_of(&answer)["error"]["message"].as_str().unwrap().contains("arrived too slowly"), "{answer}");
    drop(stream);
    trickle.join().unwrap();
    assert_eq!(server.get("/healthz"), (200, "ok".to_owned()));
}

#[test]
fn a_terminated_server_ends_its_event_streams_and_exits() {
    let mut server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    // An open event stream (a console left open) must not hold the shutdown.
    let mut stream = open_event_stream(&server, &token);
    let terminated = std::process::Command::new("kill").args(["-TERM", &server.pid().to_string()]).status().unwrap();
    assert!(terminated.success());
    assert!(
        eventually(Duration::from_secs(10), || server.exited().is_some()),
        "the server exited within 10 s of SIGTERM"
    );
    let status = server.exited().unwrap();
    assert!(status.success(), "{status}");
    assert!(closed_within(&mut stream, Duration::from_secs(1)), "the stream ended with the server");
}

#[test]
fn a_flood_of_idle_connections_under_a_low_descriptor_limit_leaves_the_server_serving_and_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let launch = Launch { open_files: Some(256), stderr: Some(log.clone()), env: Vec::new(), db: None };
    let server = Server::launch(dir, &["--head-timeout", "2s"], &launch);

    // 300 connections that never finish their head: more than the server has descriptors.
    let flood: Vec<TcpStream> = (0..300)
        .filter_map(|_| {
            let mut stream = TcpStream::connect(server.address()).ok()?;
            stream.write_all(b"GET /heal").ok()?;
            Some(stream)
        })
        .collect();
    assert!(flood.len() >= 250, "the backlog takes the flood: {}", flood.len());

    // Normal requests keep being served while the flood is held (each within the head
    // timeout that frees descriptors, plus the accept backoff).
    for _ in 0..5 {
        let started = Instant::now();
        let answer = exchange(&server, get_request(&server, "/healthz").as_bytes(), Duration::from_secs(15));
        assert!(answer.starts_with("HTTP/1.1 200"), "healthz answered: {answer:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "healthz took {:?}", started.elapsed());
    }
    drop(flood);

    // Running out of descriptors is logged once per run of failures, not in a loop.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.len() < 16 << 10,
        "the log stays quiet: {} bytes\n{}",
        logged.len(),
        &logged[..2000.min(logged.len())]
    );
}

#[test]
fn a_database_locked_past_the_busy_timeout_is_unavailable_with_retry_after() {
    let server = Server::start(&["--busy-timeout", "200ms"]);
    let token = server.tenant_with_token("acme");
    let mut other = server.sql();
    // Another writer holds what a create needs: SQLite's one write lock, PostgreSQL's
    // lock of the table.
    other.run(match postgres() {
        true => "BEGIN; LOCK TABLE sites IN ACCESS EXCLUSIVE MODE",
        false => "BEGIN IMMEDIATE",
    });

    let body = r#"{"region": "eu-1"}"#;
    let request = format!(
        "POST /api/compute/sites/create HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        server.address(),
        body.len()
    );
    let answer = exchange(&server, request.as_bytes(), Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("\r\nretry-after: "), "{answer}");
    assert_eq!(code(&body_of(&answer)), "UNAVAILABLE");

    other.run("ROLLBACK");
    server.ok(&token, "sites/create", json!({"region": "eu-1"}));
}

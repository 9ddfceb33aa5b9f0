//! What an attacker or an API fuzzer meets (SPEC §2, §6.3, §7a): connection limits,
//! strict input, methods and headers hyper sees first, a locked database, read-only
//! deployments and concurrent applies, against the real binary.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fleet::estate;
use crate::support::{Launch, Server, Sql, code, database_of, postgres, problem_paths};

/// Sends raw bytes on a new connection and reads until the server closes it or
/// `patience` passes; returns what came back.
fn exchange(server: &Server, request: &[u8], patience: Duration) -> String {
    let mut stream = TcpStream::connect(server.address()).unwrap();
    stream.set_read_timeout(Some(patience)).unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// The JSON body of a raw HTTP/1.1 answer.
fn body_of(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or_default();
    serde_json::from_str(body).unwrap_or(Value::Null)
}

/// Whether the server closes `stream` within `within` (a read sees the end).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buffer = [0; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// An event stream of `token`'s tenant, its head read (a 200).
fn open_event_stream(server: &Server, token: &str) -> TcpStream {
    let mut stream = TcpStream::connect(server.address()).unwrap();
    let request = format!(
        "GET /api/compute/events/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        server.address()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = [0; 1024];
    let read = stream.read(&mut head).unwrap();
    assert!(String::from_utf8_lossy(&head[..read]).starts_with("HTTP/1.1 200"));
    stream
}

/// A GET that asks the server to close the connection after answering.
fn get_request(server: &Server, path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", server.address())
}

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
    let started = Instant::now();
    let status = loop {
        if let Some(status) = server.exited() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the server still runs 10 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
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
fn a_wrong_http_method_is_405_with_allow() {
    let server = Server::start(&[]);
    let answer = exchange(&server, get_request(&server, "/api/compute/fleet/plan").as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("\r\nallow: post\r\n"), "{answer}");
    assert_eq!(code(&body_of(&answer)), "METHOD_NOT_ALLOWED");

    let post = format!("POST /healthz HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\n\r\n", server.address());
    let answer = exchange(&server, post.as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("\r\nallow: get\r\n"), "{answer}");
    assert_eq!(code(&body_of(&answer)), "METHOD_NOT_ALLOWED");

    // An unknown path is still 404.
    let answer =
        exchange(&server, get_request(&server, "/api/compute/nothing/here").as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert_eq!(code(&body_of(&answer)), "NOT_FOUND");
}

#[test]
fn oversized_heads_get_the_error_envelope_and_framing_errors_are_refused() {
    let server = Server::start(&[]);
    let big =
        format!("GET /healthz HTTP/1.1\r\nHost: {}\r\nX-Padding: {}\r\n\r\n", server.address(), "a".repeat(100 << 10));
    let answer = exchange(&server, big.as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 431"), "{}", &answer[..answer.len().min(200)]);
    assert_eq!(code(&body_of(&answer)), "PAYLOAD_TOO_LARGE", "431 carries its code (docs/decisions/0021)");

    // A head past hyper's read buffer, and two Content-Length headers: hyper refuses the
    // request before any of our code runs, and its answer carries the envelope too.
    let huge =
        format!("GET /healthz HTTP/1.1\r\nHost: {}\r\nX-Padding: {}\r\n\r\n", server.address(), "a".repeat(1 << 20));
    let answer = exchange(&server, huge.as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 431"), "{}", &answer[..answer.len().min(200)]);
    assert_eq!(code(&body_of(&answer)), "PAYLOAD_TOO_LARGE", "{answer}");
    let smuggled = format!(
        "POST /api/compute/sites/list HTTP/1.1\r\nHost: {}\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{{}}",
        server.address()
    );
    let answer = exchange(&server, smuggled.as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(code(&body_of(&answer)), "INVALID_ARGUMENT", "{answer}");
    assert!(answer.to_ascii_lowercase().contains("content-type: application/json"), "{answer}");
    assert_eq!(server.get("/healthz"), (200, "ok".to_owned()));
}

/// SPEC §7: the CPU budget is the planner's own work. Many large plans at once, several
/// times the cores, each well within its budget alone: every one answers 200 (the calls
/// wait their turn for a core), and none is charged for the time it waited.
#[test]
fn concurrent_large_plans_are_charged_only_their_own_cpu() {
    let mut launch = Launch::default();
    let log = tempfile::NamedTempFile::new().unwrap();
    launch.stderr = Some(log.path().to_owned());
    launch.env = vec![("RUST_LOG", "fleet::request=info,warn")];
    let server = Server::launch(tempfile::tempdir().unwrap(), &["--sandbox-cpu", "2s", "--log-format", "json"], &launch);
    let token = server.tenant_with_token("acme");
    let document = json!({ "document": crate::fleet::large_estate(3_000) }).to_string();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let plans = 6 * cores;
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let running: Vec<_> = (0..plans)
            .map(|_| {
                scope.spawn(|| {
                    let (status, body) = server.raw(Some(&token), "/api/compute/fleet/plan", document.clone());
                    (status, if status == 200 { String::new() } else { body.to_string() })
                })
            })
            .collect();
        running.into_iter().map(|plan| plan.join().unwrap()).collect()
    });
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{plans} plans on {cores} cores: {body}");
    }
    // Each plan's logged sandbox time is its own CPU: far below the time it took in all,
    // most of which the later ones spent waiting.
    let records: Vec<Value> = std::fs::read_to_string(log.path())
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["method"] == "compute.fleet.plan")
        .collect();
    assert_eq!(records.len(), plans);
    let slowest = records.iter().map(|record| record["duration_ms"].as_f64().unwrap()).fold(0.0, f64::max);
    let charged = records.iter().map(|record| record["sandbox_ms"].as_f64().unwrap()).fold(0.0, f64::max);
    assert!(charged < slowest / 2.0, "the most charged {charged} ms, the slowest took {slowest} ms");
}

#[test]
fn a_long_bad_value_is_quoted_by_a_prefix_and_its_length() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let owner = "x".repeat(100_000);
    let (status, body) = server.call(&token, "quotas/set", json!({ "owner": format!("A{owner}") }));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{}", &body.to_string()[..200]);
    let answer = body.to_string();
    assert!(answer.len() < 1000, "a short answer, not the value twice: {} bytes", answer.len());
    assert!(answer.contains("(100001 characters)"), "{answer}");
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

#[test]
fn duplicate_keys_are_refused_in_bodies_and_documents() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let (status, body) =
        server.raw(Some(&token), "/api/compute/sites/create", r#"{"region": "eu-1", "region": "eu-2"}"#);
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert_eq!(problem_paths(&body), ["/region"]);

    let plan = r#"{"document": {"pools": {"gpu-a": {"site": "s", "account": "a", "class": "gpu",
                   "owner": "team", "gpus": 1, "gpus": 2}}}}"#;
    let (status, body) = server.raw(Some(&token), "/api/compute/fleet/plan", plan);
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert_eq!(problem_paths(&body), ["/document/pools/gpu-a/gpus"]);
    let (status, _) = server.raw(Some(&token), "/api/compute/fleet/apply", plan);
    assert_eq!(status, 400);
    assert_eq!(server.ok(&token, "sites/list", json!({}))["items"], json!([]));
}

#[test]
fn control_characters_are_refused_with_their_path() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let (status, body) = server.call(
        &token,
        "sites/create",
        json!({"region": "\u{1b}[31meu\u{7}", "description": "ok", "labels": {"k\u{85}": "v", "tier": "\u{0}"}}),
    );
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    let mut paths = problem_paths(&body);
    paths.sort();
    assert_eq!(paths, ["/labels/k\u{85}", "/labels/tier", "/region"]);

    let document = json!({"sites": {"eu": {"region": "eu-1", "description": "Lab\u{9b}31m"}}});
    let (status, body) = server.call(&token, "fleet/plan", json!({ "document": document }));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert_eq!(problem_paths(&body), ["/document/sites/eu/description"]);
    // Unicode beyond the control characters is fine.
    server.ok(&token, "sites/create", json!({"region": "eu-1", "description": "Labor in Zürich — ünïcödé"}));
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

#[test]
fn identical_unpinned_applies_all_converge() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    let applied: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let runs: Vec<_> =
            (0..8).map(|_| scope.spawn(|| server.call(&token, "fleet/apply", json!({"document": estate()})))).collect();
        runs.into_iter().map(|run| run.join().unwrap()).collect()
    });
    for (status, body) in &applied {
        assert_eq!(*status, 200, "{body}");
    }
    let calls: u64 = applied.iter().map(|(_, body)| body["applied"].as_u64().unwrap()).sum();
    assert_eq!(calls, 6, "the first applies every call, the others none");
    for group in ["sites", "accounts", "pools", "quotas", "offers", "flavors"] {
        assert_eq!(server.ok(&token, &format!("{group}/list"), json!({}))["items"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn a_read_only_server_writes_nothing() {
    let server = Server::start(&[]);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": estate()}));
    let pool = server.ok(&token, "pools/list", json!({}))["items"][0]["id"].clone();
    server.ok(&token, "pools/update", json!({"id": pool, "gpus": 1}));
    let dir = server.stop();

    let rows = |db: &std::path::Path| -> (i64, i64) {
        let mut db = Sql::open(db);
        (db.number("SELECT count(*) FROM events"), db.number("SELECT count(*) FROM fleet_drift"))
    };
    assert_eq!(rows(&database_of(dir.path())), (0, 0));
    let server = Server::start_in(dir, &["--read-only", "--drift-interval", "200ms"]);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(rows(&server.db_path()), (0, 0), "no drift recorded, no event published");
    let (status, body) = server.call(&token, "pools/update", json!({"id": pool, "gpus": 2}));
    assert_eq!((status, code(&body)), (501, "UNSUPPORTED"));
    // A status that checks now finds the drift, and records nothing.
    let refreshed = server.ok(&token, "fleet/status", json!({"refresh": true}));
    assert_eq!(refreshed["drift"]["summary"]["update"], 1, "{refreshed}");
    assert_eq!(rows(&server.db_path()), (0, 0));
    assert_eq!(server.ok(&token, "fleet/export", json!({}))["document"]["pools"]["gpu-a"]["gpus"], 1);

    // A read-only server never creates or migrates a database.
    let empty = tempfile::tempdir().unwrap();
    let db = match postgres() {
        true => database_of(empty.path()),
        false => empty.path().join("none.db"),
    };
    let output = std::process::Command::new(crate::support::FLEET)
        .arg("--db")
        .arg(&db)
        .args(["serve", "--read-only", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    match postgres() {
        true => {
            assert!(stderr.contains("migration(s) behind this fleet; a read-only server does not migrate"), "{stderr}");
            let tables = Sql::open(&db).number("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'");
            assert_eq!(tables, 0, "the empty database stays empty");
        }
        false => {
            assert!(stderr.contains("existing database"), "{stderr}");
            assert!(!db.exists());
        }
    }
}

#[test]
fn a_cache_that_cannot_be_written_is_named_in_the_warning() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-directory");
    std::fs::write(&blocker, "a file where the cache directory would be").unwrap();
    let cache = blocker.join("fleet");
    let log = dir.path().join("server.log");
    let launch = Launch { open_files: None, stderr: Some(log.clone()), env: Vec::new(), db: None };
    let server = Server::launch(tempfile::tempdir().unwrap(), &["--cache-dir", cache.to_str().unwrap()], &launch);
    assert_eq!(server.get("/healthz"), (200, "ok".to_owned()));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("cannot cache the compiled planner"), "{logged}");
    assert!(logged.contains(cache.to_str().unwrap()), "the warning names the directory: {logged}");
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
    assert_eq!(events_until_closed(lines), Vec::<String>::new());
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
    std::thread::sleep(Duration::from_millis(5100));
    assert_eq!(server.call(&token, "fleet/status", json!({})).0, 401, "the token has expired");
    drift(&server, &other, 1);
    let mut live = open_stream(&server, &other);
    assert!(live.any(|line| line.unwrap() == "event: fleet.drifted"));
    assert_eq!(events_until_closed(lines), Vec::<String>::new());
}

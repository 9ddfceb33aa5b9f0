//! Failover (SPEC §12, amendment "Failover"): fleet on a primary and its synchronous
//! standby, named together in one URL with `target_session_attrs=read-write`, made with
//! PostgreSQL's own tools. The primary is killed under clients applying in a loop and
//! the standby promoted, three times over (each time a new standby is made where the
//! dead primary was): every apply that answered 200 is there once, with its revision
//! and audit record; an event stream opened at the start receives every event, once;
//! the drift reconciler goes on; the server is never restarted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::replicas::subscribe;
use crate::support::cluster::Restartable;
use crate::support::{Launch, Server, code, eventually};

const CLIENTS: usize = 4;
const FAILOVERS: usize = 3;

/// What one client's apply of a new pool ended as: its pool's key, and the 200 answer
/// (after however many retries the failover cost).
struct Applied {
    key: String,
    answer: Value,
    /// Whether an attempt before the answer was answered 503 "may or may not have been
    /// made": the commit's own answer was lost with the primary.
    unknown: bool,
}

/// A document of the shared site and account and one pool of its own: an apply of it
/// creates that pool (and, the first time, the site and account).
fn with_pool(key: &str) -> Value {
    json!({"sites": {"eu-west": {"region": "eu-west-1"}}, "providerAccounts": {"aws-main": {"provider": "aws"}},
           "pools": {key: {"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml"}}})
}

/// Applies `key`'s document until it is answered 200, as a client that never got an
/// answer retries: through 503s and connections cut by the failover. Any other answer
/// fails the test.
fn apply_until_answered(http: &reqwest::blocking::Client, base: &str, token: &str, key: &str) -> Applied {
    let mut unknown = false;
    loop {
        let response = http
            .post(format!("{base}/api/compute/fleet/apply"))
            .bearer_auth(token)
            .body(json!({"document": with_pool(key)}).to_string())
            .send();
        match response {
            Ok(response) if response.status() == 200 => {
                return Applied { key: key.to_owned(), answer: response.json().unwrap(), unknown };
            }
            Ok(response) => {
                let status = response.status().as_u16();
                let retry = response.headers().contains_key("retry-after");
                let body: Value = response.json().unwrap_or(Value::Null);
                assert!(status == 503 && retry && code(&body) == "UNAVAILABLE", "{key}: {status} {body}");
                unknown |= body["error"]["message"].as_str().unwrap().contains("may or may not have been made");
            }
            // No answer: the server is never restarted, but a connection may be cut.
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every item of a list, page by page: each page continues `after` the last item's
/// `cursor`.
fn all(server: &Server, token: &str, method: &str, mut body: Value, items: &str, cursor: &str) -> Vec<Value> {
    let mut all: Vec<Value> = Vec::new();
    loop {
        body["limit"] = json!(1000);
        let page = server.ok(token, method, body.clone())[items].as_array().unwrap().clone();
        let Some(last) = page.last() else { return all };
        body["after"] = last[cursor].clone();
        all.extend(page);
    }
}

#[test]
fn applies_through_three_failovers_are_all_there_once_and_streams_miss_nothing() {
    let mut primary = Restartable::new();
    let mut standby = Restartable::standby_of(&primary, None);
    primary.require_synchronous_standby();
    let url = format!(
        "postgres://fleet@127.0.0.1:{},127.0.0.1:{}/fleet?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let launch = Launch { db: Some(url.into()), ..Launch::default() };
    let mut server =
        Server::launch(tempfile::tempdir().unwrap(), &["--busy-timeout", "2s", "--drift-interval", "1s"], &launch);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": with_pool("first")}));
    let stream = subscribe(&server, &token);
    let before = all(&server, &token, "events/list", json!({}), "events", "seq").last().unwrap()["seq"].clone();

    let stop = Arc::new(AtomicBool::new(false));
    let applied: Arc<Mutex<Vec<Applied>>> = Arc::default();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (stop, applied, base, token) = (stop.clone(), applied.clone(), server.base.clone(), token.clone());
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
                for round in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let done = apply_until_answered(&http, &base, &token, &format!("c{client}-{round}"));
                    applied.lock().unwrap().push(done);
                }
            })
        })
        .collect();

    let mut unavailable = Vec::new();
    // Applies go on on a primary before it is killed: as many more answered as there
    // are clients.
    let applies_go_on = |when: &str| {
        let before = applied.lock().unwrap().len();
        assert!(
            eventually(Duration::from_secs(60), || applied.lock().unwrap().len() >= before + CLIENTS),
            "{CLIENTS} more applies answered {when} within 60 s"
        );
    };
    for failover in 0..FAILOVERS {
        applies_go_on(format!("before failover {failover}").as_str());
        let answered = applied.lock().unwrap().len();
        let killed = Instant::now();
        primary.stop();
        standby.promote();
        // The first apply answered after the promotion ends the outage.
        assert!(
            eventually(Duration::from_secs(60), || applied.lock().unwrap().len() > answered + CLIENTS),
            "no apply answered after failover {failover}"
        );
        unavailable.push(killed.elapsed().as_secs_f64());
        assert!(server.exited().is_none(), "the server is never restarted");
        // The dead primary's place gets a new standby of the new primary.
        let port = primary.port();
        drop(primary);
        primary = standby;
        standby = Restartable::standby_of(&primary, Some(port));
        primary.require_synchronous_standby();
    }
    applies_go_on("after the last failover");
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    unavailable.sort_by(f64::total_cmp);
    eprintln!("failover_unavailable_s: {:.2} (median of {FAILOVERS}: {unavailable:.2?})", unavailable[FAILOVERS / 2]);

    // Every apply answered 200 is there, once: its pool, its revision, its audit record.
    let applied = applied.lock().unwrap();
    let unknown: Vec<_> = applied.iter().filter(|done| done.unknown).collect();
    let committed = unknown.iter().filter(|done| done.answer["applied"] == 0).count();
    eprintln!(
        "{} applies answered; {} lost their commit's answer and were sent again, {committed} of them had committed",
        applied.len(),
        unknown.len()
    );
    let exported = server.ok(&token, "fleet/export", json!({}))["document"]["pools"].clone();
    let pools = server.ok(&token, "pools/list", json!({}))["items"].as_array().unwrap().len();
    assert_eq!(pools, applied.len() + 1, "one pool per apply answered, none twice");
    let revisions: BTreeSet<String> = all(&server, &token, "fleet/history", json!({}), "revisions", "revision")
        .iter()
        .map(|revision| revision["planHash"].as_str().unwrap().to_owned())
        .collect();
    let audit = all(&server, &token, "audit/list", json!({"kind": "pool"}), "records", "seq");
    let mut created: BTreeMap<String, usize> = BTreeMap::new();
    for record in audit.iter().filter(|record| record["method"] == "compute.pools.create") {
        *created.entry(record["id"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    for done in applied.iter() {
        assert!(exported.get(&done.key).is_some(), "{} answered 200 and is there", done.key);
        // A retry that found its first attempt committed planned nothing: the first
        // attempt's revision is counted below.
        if done.answer["applied"] == 0 {
            assert!(done.unknown, "{} answered 200 with nothing applied, yet never lost an answer", done.key);
            continue;
        }
        let hash = done.answer["plan"]["planHash"].as_str().unwrap();
        assert!(revisions.contains(hash), "{}'s revision ({hash}) is in the history", done.key);
    }
    // Such a retry records a revision of its own only when another client's document was
    // applied in between (an apply that changes nothing records none only when its
    // document is the applied one, decision 0027).
    let retried = applied.iter().filter(|done| done.answer["applied"] == 0).count();
    assert!(
        (pools..=pools + retried).contains(&revisions.len()),
        "one revision per apply that created a pool (the first one's too), and at most one per retry that found \
         its apply committed: {} revisions, {pools} pools, {retried} such retries",
        revisions.len()
    );
    assert_eq!(created.len(), pools, "one audit record per pool created");
    assert!(created.values().all(|count| *count == 1), "none created twice: {created:?}");

    // The stream opened before the first failover received every event after it, once.
    let listed = all(&server, &token, "events/list", json!({"after": before}), "events", "seq");
    let ids: Vec<u64> = listed.iter().map(|event| event["seq"].as_u64().unwrap()).collect();
    assert!(!ids.is_empty());
    assert!(
        eventually(Duration::from_secs(10), || stream
            .lock()
            .unwrap()
            .contains(&format!("id: {}\n", ids.last().unwrap()))),
        "the stream received the last event {:?}: {}",
        ids.last(),
        stream.lock().unwrap()
    );
    let received = stream.lock().unwrap().clone();
    for id in &ids {
        assert_eq!(received.matches(&format!("id: {id}\n")).count(), 1, "event {id} once: {received}");
    }

    // The drift reconciler's claims resumed on the last primary: a change made outside
    // the document is found and streamed.
    let last = server.ok(&token, "fleet/apply", json!({"document": with_pool("last")}));
    let pool =
        last["plan"]["changes"].as_array().unwrap().iter().find(|change| change["kind"] == "pool").unwrap()["id"]
            .clone();
    server.ok(&token, "pools/update", json!({"id": pool, "gpus": 3}));
    assert!(
        eventually(Duration::from_secs(15), || stream.lock().unwrap().contains("event: fleet.drifted")),
        "the drift was found after the failovers"
    );
}

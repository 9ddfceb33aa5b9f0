//! PostgreSQL beyond the replicas (SPEC §12), run only in the PostgreSQL suite: the
//! database going away is an outage the server recovers from by itself, an apply cut off
//! by it or by its replica's SIGKILL leaves nothing behind, and connections to it are
//! verified against the CA given.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::cluster::Restartable;
use crate::support::{FLEET, Launch, Server, code, eventually};

use crate::tls::pki;

/// A document of `pools` pools, each with a flavor: an apply of some size.
fn large(pools: usize) -> Value {
    let mut document = json!({"sites": {"eu-west": {"region": "eu-west-1"}},
                              "providerAccounts": {"aws-main": {"provider": "aws"}}, "pools": {}, "flavors": {}});
    for index in 0..pools {
        document["pools"][format!("pool-{index}")] =
            json!({"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml", "gpus": 8});
        document["flavors"][format!("flavor-{index}")] = json!({"pool": format!("pool-{index}"), "gpus": 1});
    }
    document
}

/// How many pools and flavors the tenant has: an apply's objects are all there or none.
fn objects(server: &Server, token: &str) -> (usize, usize) {
    let count = |group: &str| server.ok(token, &format!("{group}/list"), json!({}))["items"].as_array().unwrap().len();
    (count("pools"), count("flavors"))
}

#[test]
fn a_database_that_goes_away_is_an_outage_and_the_server_recovers_by_itself() {
    let cluster = Restartable::new();
    let launch = Launch { db: Some(cluster.url().into()), ..Launch::default() };
    let mut server = Server::launch(tempfile::tempdir().unwrap(), &["--busy-timeout", "2s"], &launch);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "sites/create", json!({"region": "eu-west-1"}));

    // Traffic from two clients while the database stops and starts again: every answer
    // is a 200 or a 503 with Retry-After, each within a bound.
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Vec<(u16, String, Duration)>>> = Arc::default();
    // How many 200s each client was answered.
    let served: Arc<[AtomicUsize; 2]> = Arc::default();
    let clients: Vec<_> = ["sites/list", "sites/create"]
        .into_iter()
        .enumerate()
        .map(|(client, method)| {
            let (stop, seen, base, token) = (stop.clone(), seen.clone(), server.base.clone(), token.clone());
            let served = served.clone();
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let response = http
                        .post(format!("{base}/api/compute/{method}"))
                        .bearer_auth(&token)
                        .body(if method == "sites/list" {
                            "{}".to_owned()
                        } else {
                            json!({"region": "eu-west-1"}).to_string()
                        })
                        .send();
                    // A connection the server drops is seen as status 0, which fails below.
                    let response = match response {
                        Ok(response) => response,
                        Err(error) => {
                            seen.lock().unwrap().push((0, error.to_string(), started.elapsed()));
                            std::thread::sleep(Duration::from_millis(200));
                            continue;
                        }
                    };
                    let status = response.status().as_u16();
                    let retry = response.headers().get("retry-after").map(|value| value.to_str().unwrap().to_owned());
                    let body: Value = response.json().unwrap_or(Value::Null);
                    let detail = format!("{} retry-after={retry:?}", code(&body));
                    seen.lock().unwrap().push((status, detail, started.elapsed()));
                    if status == 200 {
                        served[client].fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    // A large apply in flight when the database stops.
    let applying = {
        let (base, token) = (server.base.clone(), token.clone());
        std::thread::spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap()
                .post(format!("{base}/api/compute/fleet/apply"))
                .bearer_auth(token)
                .body(json!({"document": large(1500)}).to_string())
                .send()
                .map(|response| response.status().as_u16())
        })
    };
    // The database stops once the apply's transaction has been open a while (or, if it
    // was quick, once it was answered).
    assert!(
        eventually(Duration::from_secs(30), || {
            server.writing_for(Duration::from_millis(200)) || applying.is_finished()
        }),
        "the apply began within 30 s"
    );
    cluster.stop();
    // Kept as a fixed wait: the outage's length is the scenario, longer than the 2 s busy
    // timeout, so that requests caught in it wait that out and must still be answered.
    std::thread::sleep(Duration::from_secs(3));
    cluster.start();
    // Recovered by itself: a request succeeds again within a bound.
    let recovered = eventually(Duration::from_secs(30), || {
        assert!(server.exited().is_none(), "the server exited: {:?}", seen.lock().unwrap());
        server.call(&token, "sites/list", json!({})).0 == 200
    });
    assert!(recovered, "the server did not recover within 30 s: {:?}", seen.lock().unwrap());
    // Both clients are served again before they stop.
    let before: Vec<usize> = served.iter().map(|count| count.load(Ordering::Relaxed)).collect();
    assert!(
        eventually(Duration::from_secs(30), || {
            served.iter().zip(&before).all(|(count, before)| count.load(Ordering::Relaxed) > *before)
        }),
        "each client answered 200 after the recovery within 30 s: {:?}",
        seen.lock().unwrap()
    );
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let applied = applying.join().unwrap().expect("the apply was answered");

    let seen = seen.lock().unwrap();
    let outage: Vec<_> = seen.iter().filter(|(status, _, _)| *status != 200).collect();
    assert!(!outage.is_empty(), "the outage was seen: {seen:?}");
    for (status, detail, took) in seen.iter() {
        assert!(
            *status == 200 || (*status == 503 && detail.starts_with("UNAVAILABLE retry-after=Some")),
            "{status} {detail}"
        );
        assert!(*took < Duration::from_secs(15), "answered within a bound: {took:?} ({status} {detail})");
    }
    // The apply was all or nothing: if it was answered 200 everything is there, else
    // nothing of it is; applying it now makes it whole.
    let (pools, flavors) = objects(&server, &token);
    match applied {
        200 => assert_eq!((pools, flavors), (1500, 1500)),
        _ => assert_eq!((pools, flavors), (0, 0), "an apply cut off by the outage left nothing ({applied})"),
    }
    server.ok(&token, "fleet/apply", json!({"document": large(1500)}));
    assert_eq!(objects(&server, &token), (1500, 1500));
}

#[test]
fn a_replica_killed_mid_apply_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let launch = Launch { db: Some(crate::support::database_of(dir.path())), ..Launch::default() };
    let survivor = Server::launch(tempfile::tempdir().unwrap(), &[], &launch);
    let mut doomed = Server::launch(tempfile::tempdir().unwrap(), &[], &launch);
    let token = survivor.tenant_with_token("acme");
    let applying = {
        let (base, token) = (doomed.base.clone(), token.clone());
        std::thread::spawn(move || {
            reqwest::blocking::Client::new()
                .post(format!("{base}/api/compute/fleet/apply"))
                .bearer_auth(token)
                .body(json!({"document": large(2000)}).to_string())
                .send()
                .map(|response| response.status().as_u16())
        })
    };
    // Killed once the apply's transaction has been open a while (or it was answered).
    assert!(
        eventually(Duration::from_secs(30), || {
            survivor.writing_for(Duration::from_millis(200)) || applying.is_finished()
        }),
        "the apply began within 30 s"
    );
    doomed.kill();
    let answered = applying.join().unwrap();
    let (pools, flavors) = objects(&survivor, &token);
    match answered {
        Ok(200) => assert_eq!((pools, flavors), (2000, 2000)),
        _ => assert_eq!((pools, flavors), (0, 0), "a killed apply left nothing ({answered:?})"),
    }
    // The tenant's lock died with the replica's session: the survivor applies at once.
    survivor.ok(&token, "fleet/apply", json!({"document": large(2000)}));
    assert_eq!(objects(&survivor, &token), (2000, 2000));
}

/// PostgreSQL's own tools back a deployment up and put it back (issue 54): a server on
/// the restored database answers what the source did.
#[test]
fn pg_dump_and_pg_restore_carry_a_deployment() {
    let cluster = Restartable::new();
    let launch = Launch { db: Some(cluster.url().into()), ..Launch::default() };
    let source = Server::launch(tempfile::tempdir().unwrap(), &[], &launch);
    let token = source.tenant_with_token("acme");
    source.ok(&token, "fleet/apply", json!({"document": large(2)}));
    let pool = source.ok(&token, "pools/list", json!({}))["items"][0]["id"].clone();
    source.ok(&token, "pools/update", json!({"id": pool, "gpus": 2}));
    source.ok(&token, "fleet/apply", json!({"document": large(3)}));

    let dump = cluster.tool("pg_dump", &["--format=custom", "fleet"], &[]);
    let restored_url = cluster.new_database("restored");
    cluster.tool("pg_restore", &["--no-owner", "--dbname=restored"], &dump);
    let launch = Launch { db: Some(restored_url.into()), ..Launch::default() };
    let restored = Server::launch(tempfile::tempdir().unwrap(), &[], &launch);
    for (method, body) in [
        ("fleet/export", json!({})),
        ("fleet/history", json!({})),
        ("fleet/status", json!({})),
        ("audit/list", json!({})),
        ("events/list", json!({})),
    ] {
        assert_eq!(restored.ok(&token, method, body.clone()), source.ok(&token, method, body), "{method}");
    }
    // It goes on from there: sequences were carried too.
    restored.ok(&token, "fleet/apply", json!({"document": large(4)}));
    assert_eq!(objects(&restored, &token), (4, 4));
}

/// `sslmode=verify-full` with the cluster's CA connects (and the suite's cluster
/// serves TLS); another CA, or `verify-full` without `sslrootcert`, stops serve.
#[test]
fn postgres_connections_are_verified_against_the_ca_given() {
    let url = crate::support::cluster::new_database();
    let ca = crate::support::cluster::ca();
    let verified = format!("{url}?sslmode=verify-full&sslrootcert={}", ca.display());
    let dir = tempfile::tempdir().unwrap();
    let launch = crate::support::Launch { db: Some(verified.clone().into()), ..Default::default() };
    let server = Server::launch(dir, &[], &launch);
    let token = server.tenant_with_token("acme");
    server.ok(&token, "fleet/apply", json!({"document": crate::fleet::estate()}));
    let mut sql = crate::support::Sql::open(Path::new(&url));
    // This test's own connection is plain: those over TLS on this database are the server's.
    let encrypted = "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid)
                     WHERE ssl AND datname = current_database()";
    assert!(sql.number(encrypted) >= 1, "the server's connections use TLS");

    let other = tempfile::tempdir().unwrap();
    let stranger = self::pki(other.path());
    for (db, why) in [
        (format!("{url}?sslmode=verify-full&sslrootcert={}", stranger.ca.display()), "certificate"),
        (format!("{url}?sslmode=verify-full"), "sslrootcert"),
    ] {
        let output =
            std::process::Command::new(FLEET).args(["--db", &db, "serve", "--listen", "127.0.0.1:0"]).output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{db}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(why), "{db}: {stderr}");
    }
}

//! Backups of a SQLite deployment (issue 54): `fleet admin backup` copies the database
//! while the server applies, and a server started on `fleet admin restore`'s copy
//! answers what the source answered at the backup's revision. (PostgreSQL's
//! `pg_dump`/`pg_restore` are tried in `postgres.rs`.)

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{FLEET, Launch, Server, eventually};

/// A document of one site and account and `pools` pools: each apply adds one.
pub fn pools(pools: usize) -> Value {
    let mut document = json!({"sites": {"eu-west": {"region": "eu-west-1"}},
                              "providerAccounts": {"aws-main": {"provider": "aws"}}, "pools": {}});
    for index in 0..pools {
        document["pools"][format!("pool-{index}")] =
            json!({"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml"});
    }
    document
}

fn history(server: &Server, token: &str) -> Vec<Value> {
    server.ok(token, "fleet/history", json!({"limit": 1000}))["revisions"].as_array().unwrap().clone()
}

#[test]
fn a_backup_taken_during_applies_restores_to_the_same_answers_at_its_revision() {
    let source = Server::start(&[]);
    let token = source.tenant_with_token("acme");

    // One client applies in a loop, noting the export each revision leaves.
    let stop = Arc::new(AtomicBool::new(false));
    let exports: Arc<Mutex<BTreeMap<u64, Value>>> = Arc::default();
    let applying = {
        let (stop, exports, base, token) = (stop.clone(), exports.clone(), source.base.clone(), token.clone());
        std::thread::spawn(move || {
            let http = reqwest::blocking::Client::new();
            let post = |method: &str, body: Value| -> Value {
                let response = http.post(format!("{base}/api/compute/{method}")).bearer_auth(&token).json(&body);
                let response = response.send().unwrap();
                assert_eq!(response.status(), 200);
                response.json().unwrap()
            };
            for count in 1.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                post("fleet/apply", json!({"document": pools(count)}));
                let revision = post("fleet/status", json!({}))["applied"]["revision"].as_u64().unwrap();
                exports.lock().unwrap().insert(revision, post("fleet/export", json!({}))["document"].clone());
            }
        })
    };
    assert!(
        eventually(Duration::from_secs(60), || exports.lock().unwrap().len() >= 5 || applying.is_finished()),
        "five revisions applied within 60 s"
    );
    assert!(!applying.is_finished(), "the applying client ended early (its panic is above)");
    let backup = source.dir.path().join("backup.db");
    let said = source.admin(&["backup", backup.to_str().unwrap()]);
    assert!(said.contains("schema version") && said.contains("1 tenant(s)"), "{said}");
    // The backup is one file: nothing of its making is left beside it.
    let beside: Vec<String> = std::fs::read_dir(source.dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("backup.db"))
        .collect();
    assert_eq!(beside, ["backup.db"]);
    assert!(
        eventually(Duration::from_secs(60), || exports.lock().unwrap().len() >= 10 || applying.is_finished()),
        "ten revisions applied within 60 s"
    );
    assert!(!applying.is_finished(), "the applying client ended early (its panic is above)");
    stop.store(true, Ordering::Relaxed);
    applying.join().unwrap();

    // Restored into a new file, served: the same token, export and history as the
    // source at the backup's revision.
    let dir = tempfile::tempdir().unwrap();
    let restored_db = dir.path().join("restored.db");
    crate::support::admin(&restored_db, &["restore", backup.to_str().unwrap()]);
    let restored = Server::launch(dir, &[], &Launch { db: Some(restored_db.clone()), ..Launch::default() });
    let restored_history = history(&restored, &token);
    let revision = restored_history[0]["revision"].as_u64().unwrap();
    let source_history: Vec<Value> = history(&source, &token)
        .into_iter()
        .filter(|listed| listed["revision"].as_u64().unwrap() <= revision)
        .collect();
    assert_eq!(restored_history, source_history);
    let exports = exports.lock().unwrap();
    assert!(revision < *exports.keys().last().unwrap(), "the backup was taken while applies went on");
    assert_eq!(restored.ok(&token, "fleet/export", json!({}))["document"], exports[&revision]);

    // What is not a fleet database is refused, and an existing database is kept.
    let notes = restored.dir.path().join("notes.txt");
    std::fs::write(&notes, "not a database").unwrap();
    for (args, expected) in [
        (vec!["restore", notes.to_str().unwrap()], "is not a fleet database"),
        (vec!["restore", backup.to_str().unwrap()], "--replace"),
        // Not under a running server: what it writes after would be lost.
        (vec!["restore", backup.to_str().unwrap(), "--replace"], &format!("is open in process {}", restored.pid())),
        (vec!["backup", backup.to_str().unwrap()], "never overwrites"),
    ] {
        let output = Command::new(FLEET).arg("--db").arg(&restored_db).arg("admin").args(&args).output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains(expected), "{args:?}: {output:?}");
    }
}

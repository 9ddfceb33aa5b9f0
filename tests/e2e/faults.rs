//! Faults stay outages (SPEC §12, issue 26): an apply cut off by its replica's SIGKILL
//! leaves nothing behind. (The test that stops PostgreSQL under traffic is not here
//! yet: it found the server dying in some runs, which is open in issue 26.)

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Launch, Server, postgres};

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
fn a_replica_killed_mid_apply_leaves_nothing_behind() {
    if !postgres() {
        return;
    }
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
    std::thread::sleep(Duration::from_millis(400));
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

//! The estates the instruction counts plan (`guest/examples/instructions.rs`, and the
//! component's in `host/examples/component_instructions.rs`).

use fleet_guest::{Caller, Snapshot};
use serde_json::{Map, Value, json};

/// Pools in the small estate: with their flavors, a site and an account, 20 objects.
pub const SMALL_POOLS: usize = 9;

/// The request of a plan of `objects` creates against an empty tenant.
pub fn creates(objects: usize) -> String {
    json!({"document": document(objects / 2)}).to_string()
}

/// The request of a plan of `pools` pools and their flavors with one pool in a hundred
/// changed (and at least one), against [`applied`]`(pools)`.
pub fn changes(pools: usize) -> String {
    let mut changed = document(pools);
    for index in (3..pools).step_by(100) {
        changed["pools"][format!("pool-{index}")]["gpus"] = json!(16);
    }
    json!({"document": changed}).to_string()
}

/// `pools` pools on one site and account, each with a flavor.
fn document(pools: usize) -> Value {
    let mut pool_section = Map::new();
    let mut flavors = Map::new();
    for index in 0..pools {
        let pool = format!("pool-{index}");
        flavors.insert(format!("flavor-{index}"), json!({"pool": pool, "vcpus": 8, "memoryMib": 32768, "gpus": 1}));
        pool_section.insert(
            pool,
            json!({"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": format!("team-{}", index % 50),
                   "vcpus": 64, "memoryMib": 262_144, "gpus": 8}),
        );
    }
    json!({"sites": {"eu-west": {"region": "eu-west-1"}}, "providerAccounts": {"aws-main": {"provider": "aws"}},
           "pools": pool_section, "flavors": flavors})
}

/// An id: the prefix and 26 characters of base32, unique per number.
fn id(prefix: &str, number: usize) -> String {
    let alphabet = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut rest = number;
    let text: String = (0..26)
        .map(|_| {
            let character = alphabet[rest % 32] as char;
            rest /= 32;
            character
        })
        .collect();
    format!("{prefix}_{text}")
}

/// The tenant that applying [`document`] of `pools` pools leaves: its objects, their
/// references as ids, and the names bound to the ids.
pub fn applied(pools: usize) -> Snapshot {
    let mut bindings = vec![
        json!({"kind": "site", "name": "eu-west", "id": id("site", 0)}),
        json!({"kind": "providerAccount", "name": "aws-main", "id": id("acct", 0)}),
    ];
    let mut pool_objects = Vec::new();
    let mut flavors = Vec::new();
    for index in 0..pools {
        bindings.push(json!({"kind": "pool", "name": format!("pool-{index}"), "id": id("pool", index)}));
        bindings.push(json!({"kind": "flavor", "name": format!("flavor-{index}"), "id": id("flv", index)}));
        pool_objects.push(json!({"id": id("pool", index), "site": id("site", 0), "account": id("acct", 0),
                                 "class": "gpu", "owner": format!("team-{}", index % 50), "vcpus": 64,
                                 "memoryMib": 262_144, "gpus": 8}));
        flavors.push(json!({"id": id("flv", index), "pool": id("pool", index), "vcpus": 8, "memoryMib": 32768,
                            "gpus": 1}));
    }
    let state = json!({
        "caller": {"tenant": "bench", "principal": "alice"},
        "sites": [{"id": id("site", 0), "region": "eu-west-1"}],
        "providerAccounts": [{"id": id("acct", 0), "provider": "aws"}],
        "pools": pool_objects,
        "flavors": flavors,
        "bindings": bindings,
    });
    serde_json::from_value(state).expect("a snapshot")
}

/// Who plans: a caller with every permission, as the server hands the planner one.
pub fn caller() -> Caller {
    Caller { tenant: "bench".into(), principal: "alice".into(), grants: Some(vec![EVERY_GRANT.into()]) }
}

/// Every permission in every scope.
pub const EVERY_GRANT: &str = "compute:*:* @ *";

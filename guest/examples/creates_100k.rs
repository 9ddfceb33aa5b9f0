use std::time::Instant;
use serde_json::json;
fn main() {
    let n: usize = std::env::args().nth(1).and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let reps: usize = std::env::args().nth(2).and_then(|v| v.parse().ok()).unwrap_or(5);
    let mut pools = serde_json::Map::new();
    let mut flavors = serde_json::Map::new();
    for index in 0..n / 2 {
        let pool = format!("pool-{index}");
        flavors.insert(format!("flavor-{index}"), json!({"pool": pool, "vcpus": 8, "memoryMib": 32768, "gpus": 1}));
        pools.insert(pool, json!({"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": format!("team-{}", index % 50), "vcpus": 64, "memoryMib": 262144, "gpus": 8}));
    }
    let request = json!({"document": {"sites": {"eu-west": {"region": "eu-west-1"}}, "providerAccounts": {"aws-main": {"provider": "aws"}}, "pools": pools, "flavors": flavors}}).to_string();
    let snapshot = fleet_guest::Snapshot::empty(fleet_guest::Caller { tenant: "bench".into(), principal: "alice".into() });
    for _ in 0..reps {
        let started = Instant::now();
        let plan = fleet_guest::plan(&snapshot, &request).unwrap();
        println!("{} objects: {:?}, {} bytes", n, started.elapsed(), plan.len());
    }
}

//! The sandbox (SPEC §7) against the real binary: its CPU budget is the planner's own
//! work, so many large plans at once each get their turn and the budget they use.

use serde_json::{Value, json};

use crate::support::{Launch, Server};

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

//! The planner's golden cases (`guest/tests/plans/*`) run through the component in
//! this host's sandbox: the component must answer exactly what the native build
//! answers, byte for byte, and what the case expects. Also the planner's own limits:
//! its stack and its allocator at the memory budget.

use std::time::Duration;

use fleet_guest::Snapshot;
use serde_json::Value;

use super::super::*;
use crate::calls::auth::Grant;
use crate::testing::{Database, planner_cache};

fn as_body(result: Result<String, ApiError>) -> (Value, Option<String>) {
    match result {
        Ok(text) => (serde_json::from_str(&text).unwrap(), Some(text)),
        Err(error) => (error.body(), None),
    }
}

#[test]
fn golden_plans_match_through_the_component() {
    let database = Database::new();
    let sandbox = planner(Budget::default());
    let cases = fleet_guest::golden::cases();
    let mut failures = Vec::new();
    for case in &cases {
        let request = std::fs::read_to_string(case.join("request.json")).unwrap();
        let snapshot: Snapshot =
            serde_json::from_str(&std::fs::read_to_string(case.join("state.json")).unwrap()).unwrap();
        let expected: Value =
            serde_json::from_str(&std::fs::read_to_string(case.join("expected.json")).unwrap()).unwrap();
        let caller = Caller {
            tenant: snapshot.caller.tenant.clone(),
            principal: snapshot.caller.principal.clone(),
            grants: match &snapshot.caller.grants {
                Some(grants) => grants.iter().map(|grant| Grant::parse(grant).expect("a grant")).collect(),
                None => every_grant(),
            },
            token: None,
            git_source: None,
        };
        let native = fleet_guest::plan(&snapshot, &request);
        let session = Session::new(caller, database.conn(), Source::snapshot(&snapshot));
        let (_, through_component) = sandbox.call(session, Entry::Plan, &request);
        let (actual, text) = as_body(through_component);
        if actual != expected {
            failures.push(format!("{}: the component answered {actual}", case.display()));
        }
        if let (Some(text), Ok(native)) = (text, native)
            && text != native
        {
            failures.push(format!("{}: the component's bytes differ from the native build's", case.display()));
        }
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The component's shadow stack is 256 KiB (`guest/build.rs`): JSON nested as deep as
/// serde_json parses (128), and deeper, is bad input with a clear error, never a trap.
#[test]
fn deeply_nested_json_is_invalid_input_not_a_trap() {
    let database = Database::new();
    let sandbox = planner(Budget::default());
    for depth in [120, 127, 1_000, 100_000] {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let request = format!(r#"{{"document": {{"pools": {{"gpu-a": {{"labels": {nested}}}}}}}}}"#);
        let caller = Caller {
            tenant: "acme".into(),
            principal: "alice".into(),
            grants: every_grant(),
            token: None,
            git_source: None,
        };
        let state = Source::snapshot(&Snapshot::empty(fleet_guest::Caller {
            tenant: caller.tenant.clone(),
            principal: caller.principal.clone(),
            grants: None,
        }));
        let (_, result) = sandbox.call(Session::new(caller, database.conn(), state), Entry::Plan, &request);
        let error = result.unwrap_err();
        assert_eq!(error.code, Code::InvalidArgument, "depth {depth}: {error}");
    }
}

/// The planner's own allocator gives up cleanly at the memory budget: a document too
/// large for it ends the request with RESOURCE_EXHAUSTED, and the sandbox plans on.
#[test]
fn the_planner_runs_out_of_memory_cleanly() {
    let database = Database::new();
    let sandbox = planner(Budget { cpu: Duration::from_secs(30), memory_bytes: 4 << 20 });
    let plan = |document: Value| {
        let caller = fleet_guest::Caller { tenant: "acme".into(), principal: "alice".into(), grants: None };
        let session = Session::new(
            Caller {
                tenant: "acme".into(),
                principal: "alice".into(),
                grants: every_grant(),
                token: None,
                git_source: None,
            },
            database.conn(),
            Source::snapshot(&Snapshot::empty(caller)),
        );
        sandbox.call(session, Entry::Plan, &serde_json::json!({ "document": document }).to_string()).1
    };
    let error = plan(crate::demo::large_document(3_000)).unwrap_err();
    assert_eq!(error.code, Code::ResourceExhausted, "{error}");
    assert!(error.message.contains("memory"), "{error}");
    let small = plan(crate::demo::document()).unwrap();
    assert!(small.contains("planHash"), "{small}");
}

/// The planner in a sandbox of `budget`, compiled once for every test (the cache of
/// `testing::planner_cache`).
fn planner(budget: Budget) -> Sandbox {
    Sandbox::new(PLANNER, budget, Some(&planner_cache()), crate::metrics::Metrics::new()).unwrap()
}

/// What a golden case's caller may do when its state says nothing: everything, as the
/// native planner plans without grants.
fn every_grant() -> Vec<Grant> {
    vec![Grant::parse("compute:*:* @ *").expect("a grant")]
}

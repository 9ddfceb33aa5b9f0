//! Apply and export through the public API: hash and blocked checks, calls with their
//! idempotency keys, errors passed through unchanged, and export's request rules.

mod common;

use common::{Model, empty_snapshot};
use fleet_guest::{ErrorCode, Snapshot};
use serde_json::{Value, json};

fn document() -> Value {
    json!({
        "sites": {"eu-west": {"region": "eu-west-1"}},
        "providerAccounts": {"aws-main": {"provider": "aws"}},
        "pools": {"gpu-a": {"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml", "gpus": 8}},
        "ownerQuotas": {"team-ml": {"gpus": 8}}
    })
}

fn plan_of(state: &Snapshot, request: &Value) -> Value {
    serde_json::from_str(&fleet_guest::plan(state, &request.to_string()).expect("plans")).expect("JSON")
}

#[test]
fn apply_runs_every_call_with_idempotency_keys_and_then_nothing() {
    let mut model = Model::new(empty_snapshot());
    let request = json!({"document": document()});
    let planned = plan_of(&model.state, &request);
    let result = model.apply(&request.to_string()).expect("applies");
    assert_eq!(result["applied"], 4);
    assert_eq!(result["plan"], planned);
    let methods: Vec<&str> = model.log.iter().map(|(method, _)| method.as_str()).collect();
    assert_eq!(
        methods,
        ["compute.sites.create", "compute.accounts.create", "compute.pools.create", "compute.quotas.set"]
    );
    assert_eq!(model.log[2].1["idempotencyKey"], "fleet:acme:pool:gpu-a");
    assert_eq!(model.log[2].1["site"], planned["calls"][0]["input"]["id"]);
    assert!(model.log[3].1.get("idempotencyKey").is_none(), "quotas have no idempotency key");

    let again = model.apply(&request.to_string()).expect("applies again");
    assert_eq!(again["applied"], 0);
    assert_eq!(model.log.len(), 4);
}

#[test]
fn apply_checks_the_plan_hash() {
    let mut model = Model::new(empty_snapshot());
    let planned = plan_of(&model.state, &json!({"document": document()}));
    let stale_hash = format!("sha256:{}", "0".repeat(64));
    let stale = json!({"document": document(), "planHash": stale_hash});
    let error = model.apply(&stale.to_string()).expect_err("the hash differs");
    assert_eq!(error.code, ErrorCode::ConfigDrift);
    assert_eq!(error.details, Some(json!({"expected": stale_hash, "actual": planned["planHash"]})));
    assert!(model.log.is_empty());

    let current = json!({"document": document(), "planHash": planned["planHash"]});
    assert_eq!(model.apply(&current.to_string()).expect("the hash matches")["applied"], 4);
}

#[test]
fn apply_refuses_blocked_plans() {
    let mut model = Model::new(empty_snapshot());
    let mut document = document();
    document["offers"] = json!({"to-self": {"pool": "gpu-a", "to": "team-ml"}});
    let request = json!({"document": document, "prune": true});
    let planned = plan_of(&model.state, &request);
    let error = model.apply(&request.to_string()).expect_err("blocked");
    assert_eq!(error.code, ErrorCode::InvalidState);
    assert_eq!(error.details, Some(json!({"blocked": planned["blocked"]})));
    assert_eq!(planned["blocked"][0]["field"], "to");
    assert!(model.log.is_empty());
}

#[test]
fn apply_returns_the_first_host_error_unchanged() {
    // A snapshot host has no composite methods.
    let mut state = empty_snapshot();
    let error = fleet_guest::apply(&mut state, &json!({"document": document()}).to_string()).expect_err("unsupported");
    assert_eq!(error.code, ErrorCode::Unsupported);
    assert_eq!(error.message, "this host cannot run compute.sites.create: it has no composite methods");
    // With no calls, nothing is invoked.
    let result = fleet_guest::apply(&mut state, r#"{"document": {}}"#).expect("nothing to do");
    assert_eq!(serde_json::from_str::<Value>(&result).expect("JSON")["applied"], 0);
}

#[test]
fn plan_and_apply_need_a_caller() {
    let mut state = empty_snapshot();
    state.caller.tenant.clear();
    assert_eq!(
        fleet_guest::plan(&state, r#"{"document": {}}"#).expect_err("no caller").code,
        ErrorCode::Unauthenticated
    );
    let error = fleet_guest::apply(&mut state, r#"{"document": {}}"#).expect_err("no caller");
    assert_eq!(error.code, ErrorCode::Unauthenticated);
    assert!(fleet_guest::export(&state, "").is_ok(), "export does not derive ids");
}

#[test]
fn apply_accepts_plan_hash_and_plan_does_not() {
    let state = empty_snapshot();
    let error = fleet_guest::plan(&state, r#"{"document": {}, "planHash": "sha256:00"}"#).expect_err("unknown field");
    assert_eq!(error.code, ErrorCode::InvalidArgument);
    assert_eq!(error.details, Some(json!({"problems": [{"path": "/planHash", "message": "unknown field"}]})));
}

#[test]
fn export_takes_an_empty_request() {
    let state = empty_snapshot();
    let empty = json!({"document": {"sites": {}, "providerAccounts": {}, "pools": {}, "ownerQuotas": {}, "offers": {}, "flavors": {}}, "missing": []});
    for request in ["", "{}", " { } "] {
        let exported: Value =
            serde_json::from_str(&fleet_guest::export(&state, request).expect("exports")).expect("JSON");
        assert_eq!(exported, empty);
    }
    let error = fleet_guest::export(&state, r#"{"document": {}}"#).expect_err("no input");
    assert_eq!(error.code, ErrorCode::InvalidArgument);
    assert_eq!(error.details.expect("details")["problems"][0]["path"], "/document");
    let error = fleet_guest::export(&state, "[]").expect_err("not an object");
    assert_eq!(error.details.expect("details")["problems"][0]["path"], "");
}

/// SPEC §14: denials refuse the apply; a mandatory policy's are let through by an
/// override naming it, when the caller may override; an enforced one's never; an
/// override of a policy not in force is a bad request, wherever it is in the list.
#[test]
fn policies_deny_and_only_mandatory_denials_are_overridden() {
    let policy = |name: &str, level| fleet_guest::Policy {
        name: name.into(),
        level,
        source: format!(
            "package {}\n\ndeny contains \"no pools\" if {{\n  some c in input.changes\n  c.kind == \"pool\"\n}}\n",
            name.replace('-', "_")
        ),
    };
    let quiet = fleet_guest::Policy {
        name: "quiet".into(),
        level: fleet_guest::Level::Enforced,
        source: "package quiet\n".into(),
    };
    let with = |policies: Vec<fleet_guest::Policy>, grants: Option<Vec<String>>| {
        let mut state = empty_snapshot();
        state.policies = policies;
        state.caller.grants = grants;
        Model::new(state)
    };
    let apply = |model: &mut Model, overrides: Value| {
        model.apply(&json!({"document": document(), "overrides": overrides}).to_string())
    };
    let denied = |result: Result<Value, fleet_guest::Error>| match result {
        Err(error) => (error.code, error.details.map(|details| details["verdicts"].clone())),
        Ok(applied) => panic!("applied: {applied}"),
    };
    let mandatory = vec![policy("no-pools", fleet_guest::Level::Mandatory), quiet.clone()];
    let reason = json!([{"policy": "no-pools", "reason": "a test"}]);

    let (code, verdicts) = denied(apply(&mut with(mandatory.clone(), None), json!([])));
    assert_eq!(code, ErrorCode::PolicyDenied);
    assert_eq!(verdicts.unwrap()[0]["message"], "no pools");
    // Named, and the caller may override: applied, the override reported for the audit.
    let applied = apply(&mut with(mandatory.clone(), None), reason.clone()).expect("overridden");
    assert_eq!(applied["overrides"], reason);
    // Named, by a caller who may not override.
    let admin = Some(vec!["compute:*:write @ *".to_owned(), "compute:fleet:admin @ compute-fleet".to_owned()]);
    assert_eq!(denied(apply(&mut with(mandatory.clone(), admin), reason.clone())).0, ErrorCode::PolicyDenied);
    // A policy not in force, after one that is.
    let unknown = json!([{"policy": "quiet", "reason": "x"}, {"policy": "nowhere", "reason": "x"}]);
    assert_eq!(denied(apply(&mut with(mandatory, None), unknown)).0, ErrorCode::InvalidArgument);
    // Enforced: nothing overrides it.
    let enforced = vec![policy("no-pools", fleet_guest::Level::Enforced)];
    assert_eq!(denied(apply(&mut with(enforced, None), reason)).0, ErrorCode::PolicyDenied);
}

/// SPEC §15: a rename keeps the object and makes no call; the old name is free again,
/// and a create under it is a new object with an id derived again, not a replay.
#[test]
fn a_rename_keeps_the_object_and_a_create_under_the_old_name_is_new() {
    let mut model = Model::new(empty_snapshot());
    model.apply(&json!({"document": document()}).to_string()).expect("applies");
    let pool = model.log[2].1["id"].clone();
    let mut renamed = document();
    renamed["pools"]["gpu-main"] = renamed["pools"]["gpu-a"].take();
    renamed["pools"].as_object_mut().expect("pools").remove("gpu-a");
    renamed["moved"] = json!([{"kind": "pool", "from": "gpu-a", "to": "gpu-main"}]);
    let result = model.apply(&json!({"document": renamed}).to_string()).expect("renames");
    assert_eq!(result["applied"], 0);
    assert_eq!(result["plan"]["changes"][0]["id"], pool);
    assert_eq!(model.log.len(), 4, "no call for a rename");

    let mut both = renamed.clone();
    both["pools"]["gpu-a"] = json!({"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml"});
    let result = model.apply(&json!({"document": both}).to_string()).expect("creates anew");
    assert_eq!(result["applied"], 1);
    let (method, input) = &model.log[4];
    assert_eq!((method.as_str(), &input["idempotencyKey"]), ("compute.pools.create", &json!("fleet:acme:pool:gpu-a")));
    assert_ne!(input["id"], pool, "a new object, with an id derived again");
    let again = model.apply(&json!({"document": both}).to_string()).expect("converges");
    assert_eq!((again["applied"].as_u64(), again["plan"]["changes"].as_array().map(Vec::len)), (Some(0), Some(0)));
}

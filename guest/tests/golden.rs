//! Golden plans: every folder of `tests/plans/` is a case with `request.json` (a plan
//! request), `state.json` (a `Snapshot`) and `expected.json` (what `plan` returns,
//! pretty-printed; an error as `{"error": {...}}`), and optionally `export.json` (what
//! `export` returns for that state). `BLESS=1 cargo test` rewrites the expected files.

use std::path::Path;

use fleet_guest::{Error, Snapshot};
use serde_json::{Value, json};

/// The JSON a result stands for: the output, or `{"error": {...}}`.
fn as_json(result: Result<String, Error>) -> Value {
    match result {
        Ok(text) => serde_json::from_str(&text).expect("the planner writes JSON"),
        Err(error) => {
            let mut body = json!({"code": error.code.as_str(), "message": error.message});
            if let Some(details) = error.details {
                body["details"] = details;
            }
            json!({ "error": body })
        }
    }
}

/// Compares `actual` with the file, or rewrites the file when `BLESS` is set.
fn compare(path: &Path, actual: &Value, failures: &mut Vec<String>) {
    let pretty = serde_json::to_string_pretty(actual).expect("JSON prints") + "\n";
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(path, pretty).expect("expected files are writable");
        return;
    }
    let expected: Option<Value> = std::fs::read_to_string(path).ok().and_then(|text| serde_json::from_str(&text).ok());
    if expected.as_ref() != Some(actual) {
        failures.push(format!("{} differs; actual:\n{pretty}", path.display()));
    }
}

fn check(case: &Path, failures: &mut Vec<String>) {
    let request = std::fs::read_to_string(case.join("request.json")).expect("request.json");
    let state: Snapshot = serde_json::from_str(&std::fs::read_to_string(case.join("state.json")).expect("state.json"))
        .expect("state.json is a Snapshot");
    let first = fleet_guest::plan(&state, &request);
    let second = fleet_guest::plan(&state, &request);
    if first != second {
        failures.push(format!("{}: two plans differ", case.display()));
    }
    compare(&case.join("expected.json"), &as_json(first), failures);
    let export = case.join("export.json");
    if export.exists() {
        compare(&export, &as_json(fleet_guest::export(&state, "{}")), failures);
    }
}

#[test]
fn golden_plans() {
    let mut failures = Vec::new();
    let cases = fleet_guest::golden::cases();
    for case in &cases {
        check(case, &mut failures);
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The planned id of the `create-all` case's pool, derived here independently.
#[test]
fn planned_ids_derive_from_the_caller() {
    use sha2::{Digest, Sha256};
    let case = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plans/create-all");
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("expected.json")).expect("expected.json"))
            .expect("JSON");
    let digest = Sha256::digest(b"fleet-id\0acme\0alice\0pool\0gpu-a");
    let id = format!("pool_{}", data_encoding::BASE32_NOPAD.encode(&digest[..16]).to_lowercase());
    let change = expected["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|change| change["key"] == "gpu-a")
        .expect("gpu-a is planned");
    assert_eq!(change["id"], json!(id));
    let call = expected["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|call| call["input"]["id"] == json!(id))
        .expect("its create call");
    assert_eq!(call["idempotencyKey"], "fleet:acme:pool:gpu-a");
    assert_eq!(call["method"], "compute.pools.create");
}

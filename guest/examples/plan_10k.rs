//! Times export and plan of a 10,000-object fleet natively, then the plan with each
//! example policy of `policies/` in force alone, all five, and each form of
//! `examples/policy-forms/` alone (SPEC §14; the guide's "Writing fast policies"):
//! `cargo run -p fleet-guest --release --example plan_10k`.

use std::time::Instant;

use fleet_guest::Snapshot;
use serde_json::{Value, json};

fn id(prefix: &str, number: usize) -> String {
    // 26 characters of the base32 alphabet, unique per number.
    let alphabet = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut text = String::new();
    let mut rest = number;
    for _ in 0..26 {
        text.push(alphabet[rest % 32] as char);
        rest /= 32;
    }
    format!("{prefix}_{text}")
}

/// How many objects of each kind the tenant has.
const SITES: usize = 50;
const ACCOUNTS: usize = 50;
const POOLS: usize = 2_000;
const QUOTAS: usize = 900;
const OFFERS: usize = 3_000;
const FLAVORS: usize = 4_000;

fn main() {
    let state = tenant();
    let objects = SITES + ACCOUNTS + POOLS + QUOTAS + OFFERS + FLAVORS;
    let (request, export_time) = changed_export(&state);

    let mut best = std::time::Duration::MAX;
    let mut plan = String::new();
    for _ in 0..5 {
        let started = Instant::now();
        plan = fleet_guest::plan(&state, &request).expect("plan");
        best = best.min(started.elapsed());
    }
    time_policies(&state, &request);
    let plan: serde_json::Value = serde_json::from_str(&plan).expect("JSON");
    println!("objects: {objects}, request: {} bytes", request.len());
    println!("export: {export_time:?}");
    println!(
        "plan (best of 5): {best:?}, calls: {}, summary: {}",
        plan["calls"].as_array().map_or(0, Vec::len),
        plan["summary"]
    );
}

/// The tenant: every kind's objects, each (but owner quotas) bound to a name.
fn tenant() -> Snapshot {
    let (sites, accounts, pools) = (SITES, ACCOUNTS, POOLS);
    let mut tables: serde_json::Map<String, Value> = serde_json::Map::new();
    let mut bindings = Vec::new();
    // Objects of a section, named `<name>-<n>` and bound to their ids.
    let mut add = |section: &str, kind: &str, prefix: &str, count: usize, object: &dyn Fn(usize) -> Value| {
        let objects: Vec<Value> = (0..count)
            .map(|number| {
                let mut object = object(number);
                if !prefix.is_empty() {
                    object["id"] = json!(id(prefix, number));
                    let name = format!("{}-{number}", kind.to_lowercase());
                    bindings.push(json!({"kind": kind, "name": name, "id": id(prefix, number)}));
                }
                object
            })
            .collect();
        tables.insert(section.into(), Value::Array(objects));
    };
    add("sites", "site", "site", sites, &|number| json!({"region": format!("region-{number}")}));
    add(
        "providerAccounts",
        "providerAccount",
        "acct",
        accounts,
        &|number| json!({"provider": "aws", "credentialsRef": format!("vault:{number}")}),
    );
    add("pools", "pool", "pool", pools, &|number| {
        json!({"site": id("site", number % sites), "account": id("acct", number % accounts), "class": "gpu",
               "owner": format!("owner-{}", number % 100), "vcpus": 64, "memoryMib": 262_144, "gpus": 8,
               "labels": {"tier": "prod"}})
    });
    add(
        "ownerQuotas",
        "ownerQuota",
        "",
        QUOTAS,
        &|number| json!({"owner": format!("owner-{number}"), "vcpus": 64, "gpus": 8, "instances": 10}),
    );
    add("offers", "offer", "offer", OFFERS, &|number| {
        json!({"pool": id("pool", number % pools), "to": format!("owner-{}", (number % 100) + 100), "vcpus": 8,
               "gpus": 1})
    });
    add(
        "flavors",
        "flavor",
        "flv",
        FLAVORS,
        &|number| json!({"pool": id("pool", number % pools), "vcpus": 4, "memoryMib": 16_384, "diskGib": 100}),
    );
    tables.insert("caller".into(), json!({"tenant": "acme", "principal": "alice"}));
    tables.insert("bindings".into(), Value::Array(bindings));
    serde_json::from_value(Value::Object(tables)).expect("a snapshot")
}

/// The tenant's export, timed, changed into a plan request: a tenth of the pools and
/// flavors changed, new offers, some flavors left out (and pruned).
fn changed_export(state: &Snapshot) -> (String, std::time::Duration) {
    let (pools, flavors) = (POOLS, FLAVORS);
    let started = Instant::now();
    let exported = fleet_guest::export(state, "{}").expect("export");
    let export_time = started.elapsed();
    let mut exported: serde_json::Value = serde_json::from_str(&exported).expect("JSON");
    let document = &mut exported["document"];
    // Change a tenth of the pools and flavors, add new offers, leave out some flavors.
    for number in (0..pools).step_by(10) {
        document["pools"][format!("pool-{number}")]["gpus"] = 16.into();
    }
    for number in (0..flavors).step_by(10) {
        document["flavors"][format!("flavor-{number}")]["diskGib"] = 200.into();
    }
    for number in 0..500 {
        document["offers"][format!("new-offer-{number}")] =
            serde_json::json!({"pool": format!("pool-{number}"), "to": "someone-else", "vcpus": 1});
    }
    for number in (5..flavors).step_by(50) {
        document["flavors"].as_object_mut().expect("flavors").remove(&format!("flavor-{number}"));
    }
    (serde_json::json!({"document": exported["document"], "prune": true}).to_string(), export_time)
}

/// The plan timed with each example policy of `policies/` in force alone, with all
/// five, and with each form of `examples/policy-forms/` alone.
fn time_policies(state: &Snapshot, request: &str) {
    let best_of_5 = |state: &Snapshot| {
        (0..5)
            .map(|_| {
                let started = Instant::now();
                fleet_guest::plan(state, request).expect("plan");
                started.elapsed()
            })
            .min()
            .unwrap_or_default()
    };
    let policies = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let examples = ["gpus-per-pool", "prune-limit", "protected-pools", "offers-within-capacity", "no-prune-by-ci"];
    let policy = |name: &str| fleet_guest::Policy {
        name: name.to_owned(),
        level: fleet_guest::Level::Mandatory,
        source: std::fs::read_to_string(policies.join(format!("{name}.rego"))).expect("an example policy"),
    };
    let mut judged = state.clone();
    for name in examples {
        judged.policies = vec![policy(name)];
        println!("plan with {name}: {:?}", best_of_5(&judged));
    }
    judged.policies = examples.iter().map(|name| policy(name)).collect();
    println!("plan with all five: {:?}", best_of_5(&judged));
    let forms = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/policy-forms");
    let mut forms: Vec<_> =
        std::fs::read_dir(forms).expect("policy-forms").flatten().map(|entry| entry.path()).collect();
    forms.sort();
    for form in forms {
        let name = form.file_stem().and_then(|stem| stem.to_str()).unwrap_or_default().to_owned();
        let source = std::fs::read_to_string(&form).expect("a form");
        judged.policies =
            vec![fleet_guest::Policy { name: name.clone(), level: fleet_guest::Level::Mandatory, source }];
        let plan: Value = serde_json::from_str(&fleet_guest::plan(&judged, request).expect("plan")).expect("JSON");
        let verdicts = plan["policy"]["verdicts"].as_array().map_or(0, Vec::len);
        println!("plan with the form {name}: {:?} ({verdicts} verdicts)", best_of_5(&judged));
    }
}

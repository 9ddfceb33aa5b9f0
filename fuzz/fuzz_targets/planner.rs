//! The planner on arbitrary documents and states: `{"state": Snapshot, "document":
//! FleetConfig, "prune": bool}`. It never panics; a plan without blocked changes,
//! applied through a model of the module methods, converges: planning again makes no
//! calls.

#![no_main]

#[path = "../../guest/tests/common/mod.rs"]
#[allow(dead_code, clippy::all)]
mod common;

use std::collections::HashSet;
use std::hash::Hash;

use fleet_guest::Snapshot;
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Case {
    state: Snapshot,
    document: Value,
    #[serde(default)]
    prune: bool,
}

/// What the host's tables guarantee of every state it hands the planner: one object per
/// id in each table (their primary keys), archived objects only of the kinds that
/// archive (the others have no such column), and bindings of valid names, one per name
/// and one per id of a kind (fleet binds only names, and an id derives from its name).
/// States that break these cannot occur, and plan nothing meaningful.
fn well_formed(state: &Snapshot) -> bool {
    fn unique<T: Eq + Hash>(items: impl Iterator<Item = T>) -> bool {
        let mut seen = HashSet::new();
        items.into_iter().all(|item| seen.insert(item))
    }
    let catalog = fleet_guest::Catalog::built_in();
    let archives = |kind: &str| catalog.by_kind(kind).is_some_and(|position| catalog.get(position).archives());
    state.tables.values().all(|objects| unique(objects.iter().map(|object| &object.key)))
        && state.tables.iter().all(|(kind, objects)| archives(kind) || objects.iter().all(|object| !object.archived))
        && state.bindings.iter().all(|binding| fleet_guest::grammar::is_name(&binding.name))
        && unique(state.bindings.iter().map(|binding| (&binding.kind, &binding.name)))
        && unique(state.bindings.iter().map(|binding| (&binding.kind, &binding.id)))
}

fuzz_target!(|data: &[u8]| {
    let Ok(case) = serde_json::from_slice::<Case>(data) else { return };
    if !well_formed(&case.state) {
        return;
    }
    let request = json!({"document": case.document, "prune": case.prune}).to_string();
    let Ok(plan) = fleet_guest::plan(&case.state, &request) else { return };
    let plan: Value = serde_json::from_str(&plan).expect("a plan is JSON");
    if plan["blocked"].as_array().is_some_and(|blocked| !blocked.is_empty()) {
        return;
    }
    let mut model = common::Model::new(case.state);
    // A state that breaks the module rules (a dangling reference, say) can refuse a
    // call; convergence is asked only of the applies that went through.
    if model.apply(&request).is_err() {
        return;
    }
    let again: Value =
        serde_json::from_str(&fleet_guest::plan(&model.state, &request).expect("plans again")).expect("a plan is JSON");
    assert_eq!(again["calls"], json!([]), "plan -> apply -> plan converges: {again}");
});

//! The plan (SPEC §6.2): resolving a document's keys and references against the state,
//! diffing, blocking, pruning, judging by the policies in force, ordering the changes and
//! calls, and hashing the result.
//!
//! [`plan`] runs the steps in order. `output.rs` holds what a plan says and how it is
//! written, `hashed.rs` the form its hash covers; the planner (`planner.rs`, what each
//! key names) plans the renames (`rename.rs`), runs plugin kinds' checks
//! (`plugin_checks.rs`), plans each object (`entry.rs`) and prunes (`prune.rs`); then
//! the policies in force judge the plan (`judge.rs`, the input they read).

mod entry;
mod hashed;
mod judge;
pub(crate) mod output;
mod planner;
mod plugin_checks;
mod prune;
mod rename;

pub(crate) use output::Plan;

use crate::document::{PlanRequest, Problems};
use crate::error::Error;
use crate::estate::{Estate, Renamed};
use crate::hash;
use crate::host::Host;
use hashed::Hashed;
use planner::{Planner, Target};

/// Plans a validated request against the state. `problems` are those validation found
/// so far; key problems found here join them, and any problem fails the plan. The host
/// runs the checks of plugin kinds.
pub(crate) fn plan(
    estate: &mut Estate,
    request: &PlanRequest,
    mut problems: Problems,
    host: &dyn Host,
) -> Result<Plan, Error> {
    // The document's renames first: the rest is planned under the new names.
    let renames: Vec<Renamed> = request
        .document
        .moved
        .iter()
        .map(|moved| {
            let listed = request.document.section(moved.kind).contains_key(moved.from.as_str());
            estate.rename(moved.kind, &moved.from, &moved.to, listed)
        })
        .collect();
    let estate = &*estate;
    let mut planner = Planner::new(estate);
    planner.resolve_keys(request, &mut problems);
    problems.into_result()?;
    let mut plan = Plan::default();
    // Every create is a change and a call: room for those at once, so that a large plan
    // is not copied as it grows, nor left with a growth's slack.
    let creates = planner.entries.iter().flatten().filter(|entry| matches!(entry.target, Target::Create(_))).count();
    plan.changes.reserve(creates);
    plan.calls.reserve(creates);
    if !request.document.moved.is_empty() {
        plan.summary.rename = Some(0);
    }
    for kind in 0..estate.catalog.len() {
        for (moved, renamed) in request.document.moved.iter().zip(&renames).filter(|(moved, _)| moved.kind == kind) {
            planner.plan_rename(&mut plan, moved, renamed);
        }
        if estate.kind(kind).plugin {
            planner.check_plugin_kind(kind, host)?;
        }
        for position in 0..planner.entries[kind].len() {
            planner.plan_entry(&mut plan, kind, position);
        }
    }
    planner.prune(&mut plan, request.prune);
    plan.summary.blocked = plan.blocked.len();
    (plan.policy, plan.approval) = judge::judge(estate, request, &plan, &|policy| host.judging(policy))?;
    if let Some(judgement) = &plan.policy {
        plan.summary.denied = Some(judgement.denied());
        plan.summary.warnings = Some(judgement.warnings());
        plan.summary.approval_required = Some(judgement.approval_required());
    }
    if host.approval_gate() == crate::host::ApprovalGate::EveryChange && !plan.calls.is_empty() {
        plan.approval_required = Some("deployment");
    }
    plan.plan_hash = hash::plan_hash(&Hashed::of(estate, request, &plan), host.sha256())?;
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::parse_plan;
    use crate::json::writer;
    use crate::kinds::Catalog;
    use crate::state::{Caller, Snapshot};
    use crate::value::Value;
    use output::Summary;
    use serde_json::json;

    const SITE: &str = "site_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const ACCOUNT: &str = "acct_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const POOL: &str = "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn snapshot(modules: serde_json::Value, archived: bool) -> Snapshot {
        serde_json::from_value(json!({
            "caller": {"tenant": "acme", "principal": "alice"},
            "modules": modules,
            "sites": [{"id": SITE, "region": "r"}],
            "providerAccounts": [{"id": ACCOUNT, "provider": "aws"}],
            "pools": [{"id": POOL, "site": SITE, "account": ACCOUNT, "class": "cpu", "owner": "o", "archived": archived}],
            "flavors": [{"id": "flv_aaaaaaaaaaaaaaaaaaaaaaaaaa", "pool": POOL}],
            "bindings": [{"kind": "pool", "name": "old", "id": POOL}]
        }))
        .unwrap()
    }

    /// The hash covers what a plan changes *from*: the same calls against an estate that
    /// moved are another plan (SPEC §6.2).
    #[test]
    fn the_hash_covers_the_values_changed_from() {
        let planned = |vcpus: u64| {
            let mut state =
                snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), false);
            state.objects_mut("pool")[0].values[4] = Value::Count(vcpus);
            let document = json!({"pools": {"old": {"site": SITE, "account": ACCOUNT, "class": "cpu", "owner": "o",
                                                     "vcpus": 70}}});
            plan_of(state, document, false)
        };
        let (from_60, from_80) = (planned(60), planned(80));
        assert_eq!(from_60.calls, from_80.calls);
        assert_ne!(from_60.plan_hash, from_80.plan_hash);
    }

    /// Every golden case's plan is hashed on the streamed path, not through a JSON tree.
    #[test]
    fn plans_hash_without_a_json_tree() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plans");
        let mut planned = 0;
        for case in std::fs::read_dir(root).unwrap() {
            let case = case.unwrap().path();
            let read = |name: &str| std::fs::read_to_string(case.join(name)).unwrap();
            let snapshot: Snapshot = serde_json::from_str(&read("state.json")).unwrap();
            let Ok((request, problems)) = parse_plan(&Catalog::built_in(), &read("request.json"), false) else {
                continue;
            };
            let mut estate = Estate::new(Catalog::built_in(), snapshot);
            let Ok(plan) = plan(&mut estate, &request, problems, &Snapshot::empty(Caller::default())) else {
                continue;
            };
            let hashed = Hashed::of(&estate, &request, &plan);
            assert!(writer::to_writer_if_canonical(std::io::sink(), &hashed).unwrap(), "{case:?}");
            planned += 1;
        }
        assert!(planned >= 15, "{planned} golden cases plan");
    }

    fn plan_of(snapshot: Snapshot, document: serde_json::Value, prune: bool) -> Plan {
        let (request, problems) =
            parse_plan(&Catalog::built_in(), &json!({"document": document, "prune": prune}).to_string(), false)
                .unwrap();
        let mut estate = Estate::new(Catalog::built_in(), snapshot.clone());
        plan(&mut estate, &request, problems, &snapshot).unwrap()
    }

    fn methods(plan: &Plan) -> Vec<String> {
        plan.calls.iter().map(|call| call.method.to_string()).collect()
    }

    #[test]
    fn creates_and_updates_go_by_kind_then_removals_in_reverse() {
        let document = json!({
            "flavors": {"b": {"pool": "new"}, "a": {"pool": "new"}},
            "pools": {"new": {"site": SITE, "account": "acct", "class": "gpu", "owner": "o"}},
            "providerAccounts": {"acct": {"provider": "aws"}}
        });
        let plan = plan_of(
            snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), false),
            document,
            true,
        );
        assert_eq!(
            methods(&plan),
            [
                "compute.accounts.create",
                "compute.pools.create",
                "compute.flavors.create",
                "compute.flavors.create",
                "compute.flavors.delete",
                "compute.pools.archive",
                "compute.accounts.delete",
            ]
        );
        let keys: Vec<&str> = plan.changes.iter().map(|change| &*change.key).collect();
        assert_eq!(keys, ["acct", "new", "a", "b", "flv_aaaaaaaaaaaaaaaaaaaaaaaaaa", "old", ACCOUNT]);
        assert_eq!(plan.summary, Summary { create: 4, delete: 2, archive: 1, ..Summary::default() });
    }

    #[test]
    fn prune_keeps_accounts_of_pools_that_stay_live() {
        // The pools module does not run: its pool stays live, so its account stays.
        let modules = json!(["site", "providerAccount", "ownerQuota", "offer", "flavor"]);
        let plan = plan_of(snapshot(modules, false), json!({}), true);
        assert_eq!(methods(&plan), ["compute.flavors.delete"]);
        // An archived pool does not keep its account.
        let plan = plan_of(
            snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), true),
            json!({}),
            true,
        );
        assert_eq!(methods(&plan), ["compute.flavors.delete", "compute.accounts.delete"]);
        // A pool of the document does.
        let document = json!({"pools": {"old": {"site": SITE, "account": ACCOUNT, "class": "cpu", "owner": "o"}}});
        let plan = plan_of(
            snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), false),
            document,
            true,
        );
        assert_eq!(methods(&plan), ["compute.flavors.delete"]);
    }

    #[test]
    fn restore_comes_before_update_and_archived_objects_are_not_pruned_again() {
        let document =
            json!({"pools": {"old": {"site": SITE, "account": ACCOUNT, "class": "cpu", "owner": "o", "gpus": 1}}});
        let plan = plan_of(
            snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), true),
            document,
            false,
        );
        assert_eq!(methods(&plan), ["compute.pools.restore", "compute.pools.update"]);
        assert_eq!(plan.changes[1].text().to_string(), "~ pool old: update (gpus 0 -> 1)");
        let plan = plan_of(
            snapshot(json!(["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"]), true),
            json!({"flavors": {}}),
            true,
        );
        assert!(!methods(&plan).contains(&"compute.pools.archive".to_owned()));
    }
}

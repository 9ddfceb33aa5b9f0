//! Property tests: plans are deterministic; applying a plan converges (planning the
//! same document again gives no calls); export planned back gives no calls.

mod common;

use common::{Model, empty_snapshot};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const SITES: [(&str, &str); 2] = [("s1", "r1"), ("s2", "r2")];
const ACCOUNTS: [(&str, &str); 2] = [("a1", "aws"), ("a2", "gcp")];
/// Pools with their fixed site and class (immutable fields never change here, so that
/// most documents plan without blocked changes).
const POOLS: [(&str, &str, &str); 3] = [("p1", "s1", "cpu"), ("p2", "s2", "gpu"), ("p3", "s1", "gpu")];
const OWNERS: [&str; 3] = ["o1", "o2", "o3"];
const OFFERS: [(&str, &str); 2] = [("f1", "p1"), ("f2", "p2")];
const FLAVORS: [(&str, &str); 2] = [("v1", "p2"), ("v2", "p3")];

fn labels() -> impl Strategy<Value = Value> {
    prop_oneof![Just(json!({})), Just(json!({"k": "v1"})), Just(json!({"k": "v2", "x": ""}))]
}

fn number() -> impl Strategy<Value = Value> {
    (0u64..3).prop_map(|number| json!(number))
}

/// An optional object per name of the universe, with random mutable fields.
fn document() -> impl Strategy<Value = Value> {
    let sites = proptest::collection::vec(any::<bool>(), SITES.len());
    let accounts = proptest::collection::vec(
        proptest::option::of((prop_oneof![Just(""), Just("vault:x")], labels())),
        ACCOUNTS.len(),
    );
    let pools = proptest::collection::vec(
        proptest::option::of((0..ACCOUNTS.len(), 0..OWNERS.len(), number(), number(), labels())),
        POOLS.len(),
    );
    let quotas = proptest::collection::vec(proptest::option::of((number(), number())), OWNERS.len());
    let offers = proptest::collection::vec(proptest::option::of((0..OWNERS.len(), number())), OFFERS.len());
    let flavors = proptest::collection::vec(proptest::option::of((number(), number())), FLAVORS.len());
    (sites, accounts, pools, quotas, offers, flavors).prop_map(|(sites, accounts, pools, quotas, offers, flavors)| {
        let mut document =
            json!({"sites": {}, "providerAccounts": {}, "pools": {}, "ownerQuotas": {}, "offers": {}, "flavors": {}});
        for ((name, region), included) in SITES.iter().zip(sites) {
            if included {
                document["sites"][name] = json!({"region": region});
            }
        }
        for ((name, provider), account) in ACCOUNTS.iter().zip(accounts) {
            if let Some((credentials, settings)) = account {
                document["providerAccounts"][name] =
                    json!({"provider": provider, "credentialsRef": credentials, "settings": settings});
            }
        }
        for ((name, site, class), pool) in POOLS.iter().zip(pools) {
            let Some((account, owner, vcpus, gpus, labels)) = pool else { continue };
            let account = ACCOUNTS[account];
            // A document names what its pools use: add the site and account if left out.
            let region = SITES.iter().find(|(candidate, _)| candidate == site).map_or("r", |(_, region)| region);
            document["sites"].as_object_mut().map(|sites| sites.entry(*site).or_insert(json!({"region": region})));
            document["providerAccounts"]
                .as_object_mut()
                .map(|accounts| accounts.entry(account.0).or_insert(json!({"provider": account.1})));
            document["pools"][name] = json!({"site": site, "account": account.0, "class": class,
                "owner": OWNERS[owner], "vcpus": vcpus, "gpus": gpus, "labels": labels});
        }
        for (owner, quota) in OWNERS.iter().zip(quotas) {
            if let Some((vcpus, instances)) = quota {
                document["ownerQuotas"][owner] = json!({"vcpus": vcpus, "instances": instances});
            }
        }
        for ((name, pool), offer) in OFFERS.iter().zip(offers) {
            let Some((to, vcpus)) = offer else { continue };
            let Some(owner) = document["pools"][pool]["owner"].as_str().map(str::to_owned) else { continue };
            // Never to the pool's own owner.
            let to = if OWNERS[to] == owner { OWNERS[(to + 1) % OWNERS.len()] } else { OWNERS[to] };
            document["offers"][name] = json!({"pool": pool, "to": to, "vcpus": vcpus});
        }
        for ((name, pool), flavor) in FLAVORS.iter().zip(flavors) {
            let Some((vcpus, disk)) = flavor else { continue };
            if document["pools"].get(pool).is_some() {
                document["flavors"][name] = json!({"pool": pool, "vcpus": vcpus, "diskGib": disk});
            }
        }
        document
    })
}

fn request(document: &Value, prune: bool) -> String {
    json!({"document": document, "prune": prune}).to_string()
}

fn plan(model: &Model, request: &str) -> Value {
    serde_json::from_str(&fleet_guest::plan(&model.state, request).expect("the document is valid")).expect("JSON")
}

fn settled(plan: &Value) -> bool {
    plan["calls"].as_array().is_some_and(Vec::is_empty) && plan["blocked"].as_array().is_some_and(Vec::is_empty)
}

/// A state made by applying a first document, then archiving some pools and flavors
/// behind fleet's back and adding objects fleet never named.
fn state(first: &Value, prune: bool, archive: &[bool], foreign: bool) -> Result<Model, TestCaseError> {
    let mut model = Model::new(empty_snapshot());
    let applied = model.apply(&request(first, prune));
    prop_assume!(applied.is_ok(), "the first document applies: {:?}", applied);
    let pools: Vec<String> = model.state.objects("pool").iter().map(|pool| pool.key.clone()).collect();
    let flavors: Vec<String> = model.state.objects("flavor").iter().map(|flavor| flavor.key.clone()).collect();
    use fleet_guest::Host;
    for (id, archive) in flavors.iter().chain(&pools).zip(archive) {
        if *archive {
            let method = if id.starts_with("pool_") { "compute.pools.archive" } else { "compute.flavors.archive" };
            // Archiving a pool with live flavors may be refused by the model; that is fine.
            let _ = model.invoke(method, &json!({"id": id}).to_string());
        }
    }
    if foreign
        && let (Some(site), Some(account)) =
            (model.state.objects("site").first(), model.state.objects("providerAccount").first())
    {
        let (site, account) = (site.key.clone(), account.key.clone());
        let input = json!({"id": "acct_foreignaaaaaaaaaaaaaaaaaaa", "provider": "aws"});
        model.invoke("compute.accounts.create", &input.to_string()).expect("a foreign account");
        let input = json!({"id": "pool_foreignaaaaaaaaaaaaaaaaaaa", "site": site, "account": account,
            "class": "cpu", "owner": "o9", "vcpus": 1});
        model.invoke("compute.pools.create", &input.to_string()).expect("a foreign pool");
        let input = json!({"id": "offer_foreignaaaaaaaaaaaaaaaaaaa", "pool": "pool_foreignaaaaaaaaaaaaaaaaaaa",
            "to": "o1"});
        model.invoke("compute.offers.create", &input.to_string()).expect("a foreign offer");
    }
    Ok(model)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn plans_are_deterministic(first in document(), second in document(), prune in any::<bool>(),
                               archive in proptest::collection::vec(any::<bool>(), 5), foreign in any::<bool>()) {
        let model = state(&first, false, &archive, foreign)?;
        let request = request(&second, prune);
        let once = fleet_guest::plan(&model.state, &request).expect("valid");
        let twice = fleet_guest::plan(&model.state.clone(), &request).expect("valid");
        prop_assert_eq!(&once, &twice);
        // The hash covers the document with defaults filled in, not its spelling.
        let mut spelled: Map<String, Value> = serde_json::from_str(&request).expect("JSON");
        spelled.insert("prune".into(), json!(prune));
        let respelled = fleet_guest::plan(&model.state, &Value::Object(spelled).to_string()).expect("valid");
        let hash = |plan: &str| serde_json::from_str::<Value>(plan).expect("JSON")["planHash"].clone();
        prop_assert_eq!(hash(&once), hash(&respelled));
    }

    #[test]
    fn applying_a_plan_converges(first in document(), first_prune in any::<bool>(), second in document(),
                                 prune in any::<bool>(), archive in proptest::collection::vec(any::<bool>(), 5),
                                 foreign in any::<bool>()) {
        let mut model = state(&first, first_prune, &archive, foreign)?;
        let request = request(&second, prune);
        let planned = plan(&model, &request);
        prop_assume!(planned["blocked"].as_array().is_some_and(Vec::is_empty), "no blocked changes");
        let applied = model.apply(&request);
        prop_assert!(applied.is_ok(), "apply failed: {:?}\nplan: {}", applied, planned);
        let again = plan(&model, &request);
        prop_assert!(settled(&again), "not converged:\nfirst plan: {}\nsecond plan: {}", planned, again);
    }

    #[test]
    fn left_alone_is_what_prune_would_remove(first in document(), second in document(),
                                             archive in proptest::collection::vec(any::<bool>(), 5),
                                             foreign in any::<bool>()) {
        let model = state(&first, false, &archive, foreign)?;
        let kept = plan(&model, &request(&second, false));
        let pruned = plan(&model, &request(&second, true));
        let removals: Vec<Value> = pruned["changes"]
            .as_array()
            .expect("changes")
            .iter()
            .filter(|change| change["action"] == "delete" || change["action"] == "archive")
            .map(|change| {
                let mut entry = json!({"kind": change["kind"], "key": change["key"], "action": change["action"]});
                if let Some(id) = change.get("id") {
                    entry["id"] = id.clone();
                }
                entry
            })
            .collect();
        prop_assert_eq!(&kept["leftAlone"], &Value::Array(removals), "plan: {}", kept);
        prop_assert_eq!(&pruned["leftAlone"], &json!([]));
        prop_assert!(kept["leftAlone"].as_array().expect("a list").iter().all(|entry| entry["kind"] != "site"));
    }

    #[test]
    fn export_plans_back_to_nothing(first in document(), first_prune in any::<bool>(),
                                    archive in proptest::collection::vec(any::<bool>(), 5), foreign in any::<bool>()) {
        let model = state(&first, first_prune, &archive, foreign)?;
        let exported: Value = serde_json::from_str(&fleet_guest::export(&model.state, "{}").expect("export"))
            .expect("JSON");
        for prune in [false, true] {
            let planned = plan(&model, &request(&exported["document"], prune));
            prop_assert!(settled(&planned), "export planned back (prune {}): {}", prune, planned);
        }
    }
}

#[test]
fn a_fresh_document_applies_and_converges() {
    let mut model = Model::new(empty_snapshot());
    let document = json!({
        "sites": {"s1": {"region": "r1"}},
        "providerAccounts": {"a1": {"provider": "aws"}},
        "pools": {"p1": {"site": "s1", "account": "a1", "class": "cpu", "owner": "o1", "vcpus": 4}},
        "offers": {"f1": {"pool": "p1", "to": "o2"}},
        "flavors": {"v1": {"pool": "p1", "vcpus": 1}}
    });
    let result = model.apply(&request(&document, true)).expect("applies");
    assert_eq!(result["applied"], 5);
    assert!(settled(&plan(&model, &request(&document, true))));
}

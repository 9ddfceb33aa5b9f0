//! Times export and plan of a 10,000-object fleet natively:
//! `cargo run -p fleet-guest --release --example plan_10k`.

use std::time::Instant;

use fleet_guest::{Binding, Caller, Flavor, Kind, Offer, OwnerQuota, Pool, ProviderAccount, Site, Snapshot};

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

fn main() {
    let (sites, accounts, pools, quotas, offers, flavors) = (50, 50, 2_000, 900, 3_000, 4_000);
    let mut state = Snapshot::empty(Caller { tenant: "acme".into(), principal: "alice".into() });
    let mut bind = |kind: Kind, name: String, id: String| state.bindings.push(Binding { kind, name, id });
    let mut site_list = Vec::new();
    for number in 0..sites {
        bind(Kind::Site, format!("site-{number}"), id("site", number));
        site_list.push(Site {
            id: id("site", number),
            region: format!("region-{number}"),
            description: String::new(),
            labels: Default::default(),
        });
    }
    let mut account_list = Vec::new();
    for number in 0..accounts {
        bind(Kind::ProviderAccount, format!("account-{number}"), id("acct", number));
        account_list.push(ProviderAccount {
            id: id("acct", number),
            provider: "aws".into(),
            credentials_ref: format!("vault:{number}"),
            settings: Default::default(),
        });
    }
    let mut pool_list = Vec::new();
    for number in 0..pools {
        bind(Kind::Pool, format!("pool-{number}"), id("pool", number));
        pool_list.push(Pool {
            id: id("pool", number),
            site: id("site", number % sites),
            account: id("acct", number % accounts),
            class: "gpu".into(),
            owner: format!("owner-{}", number % 100),
            vcpus: 64,
            memory_mib: 262_144,
            gpus: 8,
            labels: [("tier".to_owned(), "prod".to_owned())].into(),
            archived: false,
        });
    }
    let quota_list: Vec<OwnerQuota> = (0..quotas)
        .map(|number| OwnerQuota { owner: format!("owner-{number}"), vcpus: 64, memory_mib: 0, gpus: 8, instances: 10 })
        .collect();
    let mut offer_list = Vec::new();
    for number in 0..offers {
        bind(Kind::Offer, format!("offer-{number}"), id("offer", number));
        offer_list.push(Offer {
            id: id("offer", number),
            pool: id("pool", number % pools),
            to: format!("owner-{}", (number % 100) + 100),
            vcpus: 8,
            memory_mib: 0,
            gpus: 1,
        });
    }
    let mut flavor_list = Vec::new();
    for number in 0..flavors {
        bind(Kind::Flavor, format!("flavor-{number}"), id("flv", number));
        flavor_list.push(Flavor {
            id: id("flv", number),
            pool: id("pool", number % pools),
            vcpus: 4,
            memory_mib: 16_384,
            gpus: 0,
            disk_gib: 100,
            archived: false,
        });
    }
    (state.sites, state.provider_accounts, state.pools, state.owner_quotas, state.offers, state.flavors) =
        (site_list, account_list, pool_list, quota_list, offer_list, flavor_list);
    let objects = sites + accounts + pools + quotas + offers + flavors;

    let started = Instant::now();
    let exported = fleet_guest::export(&state, "{}").expect("export");
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
    let request = serde_json::json!({"document": exported["document"], "prune": true}).to_string();

    let mut best = std::time::Duration::MAX;
    let mut plan = String::new();
    for _ in 0..5 {
        let started = Instant::now();
        plan = fleet_guest::plan(&state, &request).expect("plan");
        best = best.min(started.elapsed());
    }
    let plan: serde_json::Value = serde_json::from_str(&plan).expect("JSON");
    println!("objects: {objects}, request: {} bytes", request.len());
    println!("export: {export_time:?}");
    println!(
        "plan (best of 5): {best:?}, calls: {}, summary: {}",
        plan["calls"].as_array().map_or(0, Vec::len),
        plan["summary"]
    );
}

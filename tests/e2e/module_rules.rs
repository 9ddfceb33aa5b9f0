//! The modules' validation (SPEC §2, §4) against the real binary: references name live
//! objects of the caller's tenant, idempotent creates, caller-chosen ids, every problem
//! reported with its path, tenants isolated, hostile requests answered.

use serde_json::{Value, json};

use crate::modules::{Client, id, unknown};
use crate::support::{Server, code};

#[test]
fn references_must_name_live_objects_of_the_tenant() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");
    let world = acme.world();

    // Well-formed ids that name nothing.
    acme.refused(
        "pools/create",
        json!({"site": unknown("site"), "account": unknown("acct"), "class": "gpu", "owner": "team-ml"}),
        &["/site", "/account"],
    );
    acme.refused("pools/update", json!({"id": world.pool, "account": unknown("acct")}), &["/account"]);
    acme.refused("offers/create", json!({"pool": unknown("pool"), "to": "team-web"}), &["/pool"]);
    acme.refused("flavors/create", json!({"pool": unknown("pool")}), &["/pool"]);

    // An archived pool is not live: no new offers or flavors on it, and flavors on it
    // stay archived.
    let offer = id(&acme.ok("offers/create", json!({"pool": world.pool, "to": "team-web"})));
    let flavor = id(&acme.ok("flavors/create", json!({"pool": world.pool})));
    acme.ok("flavors/archive", json!({"id": flavor}));
    acme.ok("pools/archive", json!({"id": world.pool}));
    acme.refused("offers/create", json!({"pool": world.pool, "to": "team-web"}), &["/pool"]);
    acme.refused("flavors/create", json!({"pool": world.pool}), &["/pool"]);
    acme.refused("flavors/restore", json!({"id": flavor}), &["/pool"]);
    assert_eq!(acme.ok("flavors/get", json!({"id": flavor}))["archived"], true);
    // What already exists on it may still change.
    assert_eq!(acme.ok("offers/update", json!({"id": offer, "gpus": 2}))["gpus"], 2);

    // An archived pool may change (and stays archived); its references must be live.
    let archived = acme.ok("pools/update", json!({"id": world.pool, "vcpus": 7}));
    assert_eq!((&archived["vcpus"], &archived["archived"]), (&json!(7), &json!(true)));
    acme.refused("pools/update", json!({"id": world.pool, "account": unknown("acct")}), &["/account"]);

    // A pool whose account was deleted while it was archived is restored only once it
    // has a live account again.
    acme.ok("accounts/delete", json!({"id": world.account}));
    acme.refused("pools/restore", json!({"id": world.pool}), &["/account"]);
    assert_eq!(acme.ok("pools/get", json!({"id": world.pool}))["archived"], true);
    let account = acme.account();
    acme.ok("pools/update", json!({"id": world.pool, "account": account}));
    assert_eq!(acme.ok("pools/restore", json!({"id": world.pool}))["archived"], false);
    assert_eq!(acme.ok("flavors/restore", json!({"id": flavor}))["archived"], false);
}

#[test]
fn idempotent_creates_return_the_live_object_and_delete_frees_the_key() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");
    let world = acme.world();

    // A replay returns the object as it is and creates nothing, whatever else it says.
    let site = acme.ok("sites/create", json!({"region": "eu-west-1", "idempotencyKey": "k-site"}));
    let replay =
        acme.ok("sites/create", json!({"region": "us-east-1", "idempotencyKey": "k-site", "id": unknown("site")}));
    assert_eq!(replay, site);
    acme.fails("sites/get", json!({"id": unknown("site")}), "NOT_FOUND");
    assert_eq!(acme.items("sites").len(), 2);
    // The key also finds the object after it changed.
    let changed = acme.ok("sites/update", json!({"id": id(&site), "description": "changed"}));
    assert_eq!(acme.ok("sites/create", json!({"region": "eu-west-1", "idempotencyKey": "k-site"})), changed);

    // Keys are per kind: the same key makes one object of each.
    let creates = [
        ("accounts", json!({"provider": "aws"})),
        ("offers", json!({"pool": world.pool, "to": "team-web"})),
        ("flavors", json!({"pool": world.pool})),
    ];
    for (group, body) in creates {
        let mut keyed = body.clone();
        keyed["idempotencyKey"] = json!("k-same");
        let create = format!("{group}/create");
        let first = acme.ok(&create, keyed.clone());
        assert_eq!(acme.ok(&create, keyed.clone()), first, "{group}");
        let before = acme.items(group).len();
        assert_eq!(acme.ok(&format!("{group}/delete"), json!({"id": id(&first)})), first);
        let second = acme.ok(&create, keyed.clone());
        assert_ne!(id(&second), id(&first), "{group}: delete frees the key");
        assert_eq!(acme.ok(&create, keyed), second);
        assert_eq!(acme.items(group).len(), before, "{group}");
        // A create without a key always creates.
        assert_ne!(id(&acme.ok(&create, body.clone())), id(&acme.ok(&create, body)), "{group}");
    }

    // An archived object is not live: a create with its key makes a new object, which
    // takes the key over.
    let pool_body = json!({"site": world.site, "account": world.account, "class": "gpu", "owner": "team-ml", "idempotencyKey": "k-pool"});
    let first = acme.ok("pools/create", pool_body.clone());
    assert_eq!(acme.ok("pools/create", pool_body.clone()), first);
    acme.ok("pools/archive", json!({"id": id(&first)}));
    let second = acme.ok("pools/create", pool_body.clone());
    assert_ne!(id(&second), id(&first));
    assert_eq!(second["archived"], false);
    assert_eq!(acme.ok("pools/create", pool_body.clone()), second);
    acme.ok("pools/restore", json!({"id": id(&first)}));
    assert_eq!(acme.ok("pools/create", pool_body), second);
}

#[test]
fn caller_chosen_ids_are_kept_and_a_taken_id_is_already_exists() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");
    let world = acme.world();

    let creates = [
        ("sites", "site", json!({"region": "eu-west-1"})),
        ("accounts", "acct", json!({"provider": "aws"})),
        ("pools", "pool", json!({"site": world.site, "account": world.account, "class": "gpu", "owner": "team-ml"})),
        ("offers", "offer", json!({"pool": world.pool, "to": "team-web"})),
        ("flavors", "flv", json!({"pool": world.pool})),
    ];
    for (group, prefix, mut body) in creates {
        let chosen = format!("{prefix}_abcdefghijklmnopqrstuvwxyz");
        body["id"] = json!(chosen);
        let create = format!("{group}/create");
        assert_eq!(id(&acme.ok(&create, body.clone())), chosen, "{group}");
        acme.fails(&create, body.clone(), "ALREADY_EXISTS");
        // Taken also when the request would be refused for another reason, or when archived.
        if group == "pools" || group == "flavors" {
            acme.ok(&format!("{group}/archive"), json!({"id": chosen}));
            acme.fails(&create, body.clone(), "ALREADY_EXISTS");
        }
        if group != "sites" && group != "pools" {
            acme.ok(&format!("{group}/delete"), json!({"id": chosen}));
            assert_eq!(id(&acme.ok(&create, body)), chosen, "{group}: a deleted id can be used again");
        }
    }
}

#[test]
fn validation_reports_every_problem_with_its_path() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");
    let world = acme.world();
    let too_big = 9_007_199_254_740_992_u64;

    // Wrong types, empty and invalid values, unknown fields, missing required fields.
    acme.invalid(
        "sites/create",
        json!({"region": "", "description": 5, "labels": {"a": 1, "b": "ok", "c/d": null}, "extra": true}),
        &["/region", "/description", "/labels/a", "/labels/c~1d", "/extra"],
    );
    acme.invalid("sites/create", json!({"labels": []}), &["/region", "/labels"]);
    acme.invalid(
        "accounts/create",
        json!({"provider": "AWS", "credentialsRef": null, "settings": "x", "archived": false}),
        &["/provider", "/credentialsRef", "/settings", "/archived"],
    );
    acme.invalid(
        "pools/create",
        json!({"site": "eu-west", "account": world.site, "class": "GPU", "owner": "-ml",
               "vcpus": -1, "memoryMib": too_big, "gpus": 1.5, "labels": {"k": 1}}),
        &["/site", "/account", "/class", "/owner", "/vcpus", "/memoryMib", "/gpus", "/labels/k"],
    );
    acme.invalid("pools/create", json!({}), &["/site", "/account", "/class", "/owner"]);
    acme.invalid(
        "quotas/set",
        json!({"owner": "Team", "vcpus": "1", "instances": -5, "memoryMib": 2.5, "bogus": 1}),
        &["/owner", "/vcpus", "/instances", "/memoryMib", "/bogus"],
    );
    acme.invalid("quotas/set", json!({"vcpus": 1}), &["/owner"]);
    acme.invalid("offers/create", json!({"pool": world.pool, "to": "team-ml", "gpus": -1}), &["/to", "/gpus"]);
    acme.invalid("offers/create", json!({"pool": world.account, "to": "x".repeat(64)}), &["/pool", "/to"]);
    acme.invalid(
        "flavors/create",
        json!({"pool": 7, "diskGib": "big", "archived": true}),
        &["/pool", "/diskGib", "/archived"],
    );

    // Ids and idempotency keys of creates.
    acme.invalid(
        "sites/create",
        json!({"region": "x", "id": "site_TOOSHORT", "idempotencyKey": ""}),
        &["/id", "/idempotencyKey"],
    );
    acme.invalid("sites/create", json!({"region": "x", "id": unknown("pool")}), &["/id"]);
    acme.invalid("sites/create", json!({"region": "x", "idempotencyKey": "k".repeat(513)}), &["/idempotencyKey"]);
    acme.invalid("quotas/set", json!({"owner": "team-ml", "idempotencyKey": "k"}), &["/idempotencyKey"]);

    // Keys of reads and changes; update problems come together with immutable changes.
    acme.invalid("pools/get", json!({"id": "gpu-a"}), &["/id"]);
    acme.invalid("pools/get", json!({}), &["/id"]);
    acme.invalid("pools/archive", json!({"id": 1}), &["/id"]);
    acme.invalid("flavors/restore", json!({"id": world.pool}), &["/id"]);
    acme.invalid("accounts/delete", json!({"id": world.account, "force": true}), &["/force"]);
    acme.invalid("quotas/get", json!({"owner": world.pool}), &["/owner"]);
    acme.invalid("sites/list", json!({"archived": true}), &["/archived"]);
    acme.invalid(
        "sites/update",
        json!({"id": world.site, "region": "", "createdAt": "now"}),
        &["/region", "/createdAt"],
    );
    acme.invalid("sites/update", json!({"id": unknown("site"), "labels": 1}), &["/labels"]);
    acme.invalid(
        "pools/update",
        json!({"id": world.pool, "class": "cpu", "owner": "Bad", "account": "acct_x", "idempotencyKey": "k"}),
        &["/class", "/owner", "/account", "/idempotencyKey"],
    );

    // Bodies that are not objects.
    for body in ["[]", "null", "\"x\"", "7", "{\"a\":"] {
        let (status, value) = server.raw(Some(&acme.token), "/api/compute/sites/create", body);
        assert_eq!((status, code(&value)), (400, "INVALID_ARGUMENT"), "{body}: {value}");
    }

    // Bounds: 2^53 - 1 and 63-character names are fine.
    let max = too_big - 1;
    let name = "a".repeat(63);
    let quota = acme.ok("quotas/set", json!({"owner": name, "vcpus": max, "memoryMib": 0}));
    assert_eq!((&quota["owner"], &quota["vcpus"]), (&json!(name), &json!(max)));

    // Nothing invalid was stored.
    assert_eq!(acme.items("sites").len(), 1);
    assert_eq!(acme.items("pools").len(), 1);
    assert_eq!(acme.items("quotas").len(), 1);
    assert_eq!(acme.items("offers").len() + acme.items("flavors").len(), 0);
    let pool = acme.ok("pools/get", json!({"id": world.pool}));
    assert_eq!((&pool["class"], &pool["owner"]), (&json!("gpu"), &json!("team-ml")));
}

#[test]
fn tenants_never_see_or_touch_each_others_objects() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");
    let globex = Client::new(&server, "globex");
    let world = acme.world();
    let offer = id(&acme.ok("offers/create", json!({"pool": world.pool, "to": "team-web", "idempotencyKey": "k"})));
    let flavor = id(&acme.ok("flavors/create", json!({"pool": world.pool})));
    acme.ok("quotas/set", json!({"owner": "team-ml", "vcpus": 8}));
    // Each object with a change its update would accept.
    let objects = [
        ("sites", world.site.as_str(), json!({"description": "x"})),
        ("accounts", world.account.as_str(), json!({"credentialsRef": "x"})),
        ("pools", world.pool.as_str(), json!({"vcpus": 1})),
        ("offers", offer.as_str(), json!({"vcpus": 1})),
        ("flavors", flavor.as_str(), json!({"vcpus": 1})),
    ];
    let snapshot = |client: &Client| -> Vec<Vec<Value>> {
        ["sites", "accounts", "pools", "quotas", "offers", "flavors"].iter().map(|group| client.items(group)).collect()
    };
    let before = snapshot(&acme);

    // Nothing to list, get, change or remove.
    assert!(snapshot(&globex).iter().all(Vec::is_empty));
    for (group, object, mut change) in objects {
        let key = json!({"id": object});
        globex.fails(&format!("{group}/get"), key.clone(), "NOT_FOUND");
        globex.fails(&format!("{group}/update"), key.clone(), "NOT_FOUND");
        change["id"] = json!(object);
        globex.fails(&format!("{group}/update"), change, "NOT_FOUND");
        let removals: &[&str] = match group {
            "accounts" | "offers" => &["delete"],
            "pools" => &["archive", "restore"],
            "flavors" => &["delete", "archive", "restore"],
            _ => &[],
        };
        for removal in removals {
            globex.fails(&format!("{group}/{removal}"), key.clone(), "NOT_FOUND");
        }
    }
    globex.fails("quotas/get", json!({"owner": "team-ml"}), "NOT_FOUND");
    globex.fails("quotas/delete", json!({"owner": "team-ml"}), "NOT_FOUND");

    // Nothing to reference.
    globex.refused(
        "pools/create",
        json!({"site": world.site, "account": world.account, "class": "gpu", "owner": "team-ml"}),
        &["/site", "/account"],
    );
    globex.refused("offers/create", json!({"pool": world.pool, "to": "team-ml"}), &["/pool"]);
    globex.refused("flavors/create", json!({"pool": world.pool}), &["/pool"]);

    // The same ids, keys and owners make globex's own objects, and reveal nothing.
    let site = globex.ok("sites/create", json!({"id": world.site, "region": "mars-1"}));
    assert_eq!((id(&site), &site["region"]), (world.site.clone(), &json!("mars-1")));
    let account = globex.ok("accounts/create", json!({"id": world.account, "provider": "gcp"}));
    let pool = globex.ok(
        "pools/create",
        json!({"id": world.pool, "site": world.site, "account": world.account, "class": "cpu", "owner": "team-web"}),
    );
    assert_eq!((&account["provider"], &pool["class"]), (&json!("gcp"), &json!("cpu")));
    let keyed = globex.ok("offers/create", json!({"pool": world.pool, "to": "team-ml", "idempotencyKey": "k"}));
    assert_ne!(id(&keyed), offer);
    assert_eq!(keyed["to"], "team-ml");
    let quota = globex.ok("quotas/set", json!({"owner": "team-ml", "vcpus": 1}));
    assert_eq!(quota["vcpus"], 1);

    // globex's changes to its namesakes leave acme's objects alone.
    globex.ok("pools/archive", json!({"id": world.pool}));
    globex.ok("accounts/delete", json!({"id": world.account}));
    globex.ok("quotas/delete", json!({"owner": "team-ml"}));
    assert_eq!(snapshot(&acme), before);
    assert_eq!(acme.ok("quotas/get", json!({"owner": "team-ml"}))["vcpus"], 8);
}

#[test]
fn hostile_requests_never_crash_the_server() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");
    let world = acme.world();
    let deep = "[".repeat(100_000);
    let bodies = [
        deep.as_str(),
        "{\"region\": 1e999}",
        "{\"region\": \"\\ud800\"}",
        "{\"region\": \"x\", \"labels\": {\"\": \"\"}}",
        "{\"region\": \"\\u0000\", \"description\": \"é🚀\"}",
        "{\"region\": -0, \"labels\": {\"a\": {\"b\": []}}}",
        "\u{feff}{}",
        "{\"region\": \"x\", \"region\": 5}",
    ];
    for body in bodies {
        for method in ["sites/create", "sites/update", "pools/update", "quotas/set", "flavors/archive"] {
            let (status, value) = server.raw(Some(&acme.token), &format!("/api/compute/{method}"), body.to_owned());
            assert!(status < 500, "{method} {body:.40}: {status} {value}");
        }
    }
    let huge = json!({"id": world.pool, "vcpus": u64::MAX, "gpus": i64::MIN, "memoryMib": f64::MAX});
    acme.invalid("pools/update", huge, &["/vcpus", "/gpus", "/memoryMib"]);
    assert_eq!(server.get("/healthz"), (200, "ok".to_owned()));
    assert_eq!(acme.items("pools").len(), 1);
}

//! The six platform modules (SPEC §4) against the real binary: each method, each
//! validation rule, each error code, idempotent creates, archive and restore,
//! references, and tenant isolation.

use serde_json::{Value, json};

use crate::support::{Server, code, problem_paths};

/// One tenant's all-powerful client of a server.
pub struct Client<'a> {
    server: &'a Server,
    pub token: String,
}

/// The objects most tests need: a site, an account, and a pool owned by `team-ml`.
pub struct World {
    pub site: String,
    pub account: String,
    pub pool: String,
}

impl Client<'_> {
    pub fn new<'a>(server: &'a Server, tenant: &str) -> Client<'a> {
        Client { server, token: server.tenant_with_token(tenant) }
    }

    pub fn ok(&self, method: &str, body: Value) -> Value {
        self.server.ok(&self.token, method, body)
    }

    /// Expects the error `code` (with its HTTP status) and returns the body.
    pub fn fails(&self, method: &str, body: Value, code: &str) -> Value {
        let (status, value) = self.server.call(&self.token, method, body);
        assert_eq!((status, crate::support::code(&value)), (status_of(code), code), "{method}: {value}");
        assert!(value["error"]["message"].as_str().is_some_and(|message| !message.is_empty()), "{value}");
        value
    }

    /// Expects `INVALID_ARGUMENT` listing exactly the problems at `paths`.
    pub fn invalid(&self, method: &str, body: Value, paths: &[&str]) {
        let value = self.fails(method, body, "INVALID_ARGUMENT");
        assert_paths(&value, paths);
    }

    /// Expects `FAILED_PRECONDITION`; `paths` are the references it names, if any.
    pub fn refused(&self, method: &str, body: Value, paths: &[&str]) {
        let value = self.fails(method, body, "FAILED_PRECONDITION");
        assert_paths(&value, paths);
    }

    pub fn items(&self, group: &str) -> Vec<Value> {
        let list = self.ok(&format!("{group}/list"), json!({}));
        list["items"].as_array().expect("list answers items").clone()
    }

    pub fn site(&self) -> String {
        id(&self.ok("sites/create", json!({"region": "eu-west-1"})))
    }

    pub fn account(&self) -> String {
        id(&self.ok("accounts/create", json!({"provider": "aws"})))
    }

    pub fn pool(&self, site: &str, account: &str, owner: &str) -> String {
        id(&self.ok("pools/create", json!({"site": site, "account": account, "class": "gpu", "owner": owner})))
    }

    pub fn world(&self) -> World {
        let (site, account) = (self.site(), self.account());
        let pool = self.pool(&site, &account, "team-ml");
        World { site, account, pool }
    }
}

pub fn status_of(code: &str) -> u16 {
    match code {
        "INVALID_ARGUMENT" => 400,
        "PERMISSION_DENIED" => 403,
        "NOT_FOUND" => 404,
        "ALREADY_EXISTS" | "FAILED_PRECONDITION" => 409,
        other => panic!("no status for {other}"),
    }
}

pub fn assert_paths(body: &Value, paths: &[&str]) {
    let mut found = problem_paths(body);
    found.sort();
    let mut expected: Vec<String> = paths.iter().map(|path| (*path).to_owned()).collect();
    expected.sort();
    assert_eq!(found, expected, "{body}");
}

pub fn id(object: &Value) -> String {
    object["id"].as_str().unwrap_or_else(|| panic!("no id in {object}")).to_owned()
}

/// A well-formed id that no object has.
pub fn unknown(prefix: &str) -> String {
    format!("{prefix}_{}", "a".repeat(26))
}

/// `<prefix>_` + 26 lowercase base32 characters.
pub fn is_id(text: &str, prefix: &str) -> bool {
    text.strip_prefix(prefix).and_then(|rest| rest.strip_prefix('_')).is_some_and(|body| {
        body.len() == 26 && body.bytes().all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
    })
}

/// `createdAt` and `updatedAt` are RFC 3339 UTC (`2026-11-29T12:00:00Z`).
fn assert_timestamps(object: &Value) {
    for field in ["createdAt", "updatedAt"] {
        let text = object[field].as_str().unwrap_or_else(|| panic!("no {field} in {object}"));
        let shape = text.len() == 20
            && text.ends_with('Z')
            && text.char_indices().all(|(at, c)| match at {
                4 | 7 => c == '-',
                10 => c == 'T',
                13 | 16 => c == ':',
                19 => c == 'Z',
                _ => c.is_ascii_digit(),
            });
        assert!(shape, "{field} {text:?} is not RFC 3339 UTC");
    }
    assert!(object["updatedAt"].as_str() >= object["createdAt"].as_str(), "{object}");
}

/// `object` without its timestamps, to compare what a call changed.
fn without_times(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(fields) = object.as_object_mut() {
        fields.remove("updatedAt");
    }
    object
}

#[test]
fn sites_are_created_read_listed_and_updated_but_never_removed() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");

    let site = acme.ok("sites/create", json!({"region": "eu-west-1"}));
    let site_id = id(&site);
    assert!(is_id(&site_id, "site"), "{site_id}");
    assert_eq!(site["region"], "eu-west-1");
    assert_eq!(site["description"], "");
    assert_eq!(site["labels"], json!({}));
    assert!(site.get("archived").is_none(), "sites are not archivable: {site}");
    assert_timestamps(&site);
    assert_eq!(acme.ok("sites/get", json!({"id": site_id})), site);

    let other = acme.ok(
        "sites/create",
        json!({"region": "us-east-1", "description": "Virginia", "labels": {"tier": "prod", "a/b~c": "x"}}),
    );
    assert_eq!(other["labels"], json!({"tier": "prod", "a/b~c": "x"}));
    let items = acme.items("sites");
    assert_eq!(items.len(), 2);
    assert!(items.contains(&site) && items.contains(&other), "{items:?}");

    let updated = acme.ok("sites/update", json!({"id": site_id, "description": "Dublin", "labels": {"tier": "dev"}}));
    assert_eq!(updated["region"], "eu-west-1");
    assert_eq!(updated["description"], "Dublin");
    assert_eq!(updated["labels"], json!({"tier": "dev"}));
    assert_eq!(updated["createdAt"], site["createdAt"]);
    assert_timestamps(&updated);
    assert_eq!(acme.ok("sites/get", json!({"id": site_id})), updated);
    // Stating the values a site has changes nothing.
    assert_eq!(acme.ok("sites/update", json!({"id": site_id, "region": "eu-west-1"})), updated);
    assert_eq!(acme.ok("sites/update", json!({"id": site_id})), updated);

    for method in ["sites/delete", "sites/archive", "sites/restore"] {
        acme.fails(method, json!({"id": site_id}), "NOT_FOUND");
    }
    assert_eq!(acme.items("sites").len(), 2);
}

#[test]
fn accounts_are_deleted_only_while_no_live_pool_uses_them() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");

    let account = acme
        .ok("accounts/create", json!({"provider": "aws", "credentialsRef": "vault:aws/main", "settings": {"x": "1"}}));
    let account_id = id(&account);
    assert!(is_id(&account_id, "acct"), "{account_id}");
    assert_eq!(account["provider"], "aws");
    assert_eq!(account["credentialsRef"], "vault:aws/main");
    assert_eq!(account["settings"], json!({"x": "1"}));
    assert_timestamps(&account);
    assert_eq!(acme.ok("accounts/get", json!({"id": account_id})), account);
    assert_eq!(acme.items("accounts"), std::slice::from_ref(&account));

    let updated =
        acme.ok("accounts/update", json!({"id": account_id, "credentialsRef": "vault:aws/new", "provider": "aws"}));
    assert_eq!(updated["credentialsRef"], "vault:aws/new");
    assert_eq!(updated["settings"], json!({"x": "1"}));
    acme.invalid("accounts/update", json!({"id": account_id, "provider": "gcp"}), &["/provider"]);
    assert_eq!(acme.ok("accounts/get", json!({"id": account_id})), updated);

    // A live pool holds the account; an archived one does not.
    let site = acme.site();
    let pool = acme.pool(&site, &account_id, "team-ml");
    let body = acme.fails("accounts/delete", json!({"id": account_id}), "FAILED_PRECONDITION");
    assert_eq!(body["error"]["details"]["pools"], json!([pool]));
    assert_eq!(acme.ok("accounts/get", json!({"id": account_id})), updated);
    acme.ok("pools/archive", json!({"id": pool}));
    assert_eq!(acme.ok("accounts/delete", json!({"id": account_id})), updated);
    acme.fails("accounts/get", json!({"id": account_id}), "NOT_FOUND");
    acme.fails("accounts/delete", json!({"id": account_id}), "NOT_FOUND");
    assert_eq!(acme.items("accounts"), Vec::<Value>::new());

    // Moving a pool to another account frees the first one.
    let first = acme.account();
    let second = acme.account();
    let pool = acme.pool(&site, &first, "team-ml");
    acme.fails("accounts/delete", json!({"id": first}), "FAILED_PRECONDITION");
    acme.ok("pools/update", json!({"id": pool, "account": second}));
    acme.ok("accounts/delete", json!({"id": first}));
    acme.fails("accounts/delete", json!({"id": second}), "FAILED_PRECONDITION");

    for method in ["accounts/archive", "accounts/restore"] {
        acme.fails(method, json!({"id": second}), "NOT_FOUND");
    }
}

#[test]
fn pools_are_updated_archived_and_restored_but_never_deleted() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");
    let World { site, account, pool: _ } = acme.world();

    let pool = acme.ok(
        "pools/create",
        json!({"site": site, "account": account, "class": "gpu", "owner": "team-ml",
               "vcpus": 512, "memoryMib": 2097152, "gpus": 64, "labels": {"zone": "a"}}),
    );
    let pool_id = id(&pool);
    assert!(is_id(&pool_id, "pool"), "{pool_id}");
    for (field, value) in [
        ("site", json!(site)),
        ("account", json!(account)),
        ("class", json!("gpu")),
        ("owner", json!("team-ml")),
        ("vcpus", json!(512)),
        ("memoryMib", json!(2097152)),
        ("gpus", json!(64)),
        ("labels", json!({"zone": "a"})),
        ("archived", json!(false)),
    ] {
        assert_eq!(pool[field], value, "{field} in {pool}");
    }
    assert_timestamps(&pool);
    assert_eq!(acme.ok("pools/get", json!({"id": pool_id})), pool);
    let small = acme.ok("pools/create", json!({"site": site, "account": account, "class": "cpu", "owner": "team-web"}));
    assert_eq!((&small["vcpus"], &small["memoryMib"], &small["gpus"]), (&json!(0), &json!(0), &json!(0)));
    assert_eq!(small["labels"], json!({}));
    assert_eq!(acme.items("pools").len(), 3);

    let other_account = acme.account();
    let updated = acme.ok(
        "pools/update",
        json!({"id": pool_id, "vcpus": 256, "owner": "team-research", "account": other_account,
               "class": "gpu", "site": site}),
    );
    assert_eq!((&updated["vcpus"], &updated["owner"]), (&json!(256), &json!("team-research")));
    assert_eq!(updated["account"], json!(other_account));
    assert_eq!(updated["gpus"], 64);
    assert_eq!(updated["createdAt"], pool["createdAt"]);

    // class and site are immutable; every problem is listed at once.
    let other_site = acme.site();
    acme.invalid(
        "pools/update",
        json!({"id": pool_id, "class": "cpu", "site": other_site, "vcpus": -1, "archived": true}),
        &["/class", "/site", "/vcpus", "/archived"],
    );
    assert_eq!(acme.ok("pools/get", json!({"id": pool_id})), updated);

    // Archive and restore, each idempotent.
    let archived = acme.ok("pools/archive", json!({"id": pool_id}));
    assert_eq!(archived["archived"], true);
    let mut expected = updated.clone();
    expected["archived"] = json!(true);
    assert_eq!(without_times(&archived), without_times(&expected));
    assert_eq!(acme.ok("pools/archive", json!({"id": pool_id})), archived);
    assert_eq!(acme.ok("pools/get", json!({"id": pool_id})), archived);
    let listed = acme.items("pools");
    assert!(listed.contains(&archived), "archived pools are listed: {listed:?}");
    let restored = acme.ok("pools/restore", json!({"id": pool_id}));
    assert_eq!(restored["archived"], false);
    assert_eq!(acme.ok("pools/restore", json!({"id": pool_id})), restored);

    acme.fails("pools/delete", json!({"id": pool_id}), "NOT_FOUND");
    assert_eq!(acme.items("pools").len(), 3);
}

#[test]
fn quotas_are_set_by_owner_read_and_deleted() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");

    let quota = acme.ok("quotas/set", json!({"owner": "team-ml", "vcpus": 256, "gpus": 32}));
    assert_eq!(quota, {
        let mut expected = json!({"owner": "team-ml", "vcpus": 256, "memoryMib": 0, "gpus": 32, "instances": 0});
        expected["createdAt"] = quota["createdAt"].clone();
        expected["updatedAt"] = quota["updatedAt"].clone();
        expected
    });
    assert!(quota.get("id").is_none(), "quotas have no id: {quota}");
    assert_timestamps(&quota);
    assert_eq!(acme.ok("quotas/get", json!({"owner": "team-ml"})), quota);

    // set is an upsert that states the whole quota: absent limits become 0.
    let replaced = acme.ok("quotas/set", json!({"owner": "team-ml", "instances": 100}));
    assert_eq!((&replaced["vcpus"], &replaced["gpus"], &replaced["instances"]), (&json!(0), &json!(0), &json!(100)));
    assert_eq!(replaced["createdAt"], quota["createdAt"]);
    assert_eq!(acme.ok("quotas/set", json!({"owner": "team-ml", "instances": 100})), replaced);
    let other = acme.ok("quotas/set", json!({"owner": "team-web"}));
    assert_eq!(acme.items("quotas"), [replaced.clone(), other]);

    assert_eq!(acme.ok("quotas/delete", json!({"owner": "team-ml"})), replaced);
    acme.fails("quotas/get", json!({"owner": "team-ml"}), "NOT_FOUND");
    acme.fails("quotas/delete", json!({"owner": "team-ml"}), "NOT_FOUND");
    assert_eq!(acme.items("quotas").len(), 1);

    for method in ["quotas/create", "quotas/update", "quotas/archive", "quotas/restore"] {
        acme.fails(method, json!({"owner": "team-web"}), "NOT_FOUND");
    }
}

#[test]
fn offers_give_a_pools_capacity_to_another_owner() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");
    let world = acme.world();

    let offer = acme.ok("offers/create", json!({"pool": world.pool, "to": "team-research", "vcpus": 64, "gpus": 8}));
    let offer_id = id(&offer);
    assert!(is_id(&offer_id, "offer"), "{offer_id}");
    assert_eq!((&offer["pool"], &offer["to"]), (&json!(world.pool), &json!("team-research")));
    assert_eq!((&offer["vcpus"], &offer["memoryMib"], &offer["gpus"]), (&json!(64), &json!(0), &json!(8)));
    assert!(offer.get("archived").is_none(), "offers are not archivable: {offer}");
    assert_timestamps(&offer);
    assert_eq!(acme.ok("offers/get", json!({"id": offer_id})), offer);
    assert_eq!(acme.items("offers"), std::slice::from_ref(&offer));

    let updated = acme.ok("offers/update", json!({"id": offer_id, "to": "team-web", "memoryMib": 1024}));
    assert_eq!(
        (&updated["to"], &updated["memoryMib"], &updated["vcpus"]),
        (&json!("team-web"), &json!(1024), &json!(64))
    );

    // Not to the pool's own owner, on create or update; the pool is immutable.
    acme.invalid("offers/create", json!({"pool": world.pool, "to": "team-ml"}), &["/to"]);
    acme.invalid("offers/update", json!({"id": offer_id, "to": "team-ml"}), &["/to"]);
    let other_pool = acme.pool(&world.site, &world.account, "team-other");
    acme.invalid("offers/update", json!({"id": offer_id, "pool": other_pool}), &["/pool"]);
    acme.ok("offers/update", json!({"id": offer_id, "pool": world.pool}));
    assert_eq!(acme.ok("offers/get", json!({"id": offer_id})), updated);

    // A pool may pass to the owner one of its offers goes to (apply changes pools
    // before offers, so a document that swaps them must get through); the planner
    // blocks every offer of a document that would end up going to its pool's owner.
    acme.ok("pools/update", json!({"id": world.pool, "owner": "team-web"}));
    acme.ok("pools/update", json!({"id": world.pool, "owner": "team-research"}));

    assert_eq!(acme.ok("offers/delete", json!({"id": offer_id})), updated);
    acme.fails("offers/get", json!({"id": offer_id}), "NOT_FOUND");
    acme.fails("offers/delete", json!({"id": offer_id}), "NOT_FOUND");
    acme.ok("pools/update", json!({"id": world.pool, "owner": "team-web"}));
    for method in ["offers/archive", "offers/restore"] {
        acme.fails(method, json!({"id": offer_id}), "NOT_FOUND");
    }
}

#[test]
fn flavors_are_deleted_or_archived_and_restored() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");
    let world = acme.world();

    let flavor = acme
        .ok("flavors/create", json!({"pool": world.pool, "vcpus": 8, "memoryMib": 65536, "gpus": 1, "diskGib": 100}));
    let flavor_id = id(&flavor);
    assert!(is_id(&flavor_id, "flv"), "{flavor_id}");
    assert_eq!(flavor["pool"], json!(world.pool));
    assert_eq!((&flavor["diskGib"], &flavor["archived"]), (&json!(100), &json!(false)));
    assert_timestamps(&flavor);
    assert_eq!(acme.ok("flavors/get", json!({"id": flavor_id})), flavor);

    let updated = acme.ok("flavors/update", json!({"id": flavor_id, "diskGib": 200, "pool": world.pool}));
    assert_eq!((&updated["diskGib"], &updated["vcpus"]), (&json!(200), &json!(8)));
    let other_pool = acme.pool(&world.site, &world.account, "team-other");
    acme.invalid("flavors/update", json!({"id": flavor_id, "pool": other_pool, "gpus": "2"}), &["/pool", "/gpus"]);

    let archived = acme.ok("flavors/archive", json!({"id": flavor_id}));
    assert_eq!(archived["archived"], true);
    assert_eq!(acme.ok("flavors/archive", json!({"id": flavor_id})), archived);
    assert!(acme.items("flavors").contains(&archived));
    let restored = acme.ok("flavors/restore", json!({"id": flavor_id}));
    assert_eq!(restored["archived"], false);
    assert_eq!(acme.ok("flavors/restore", json!({"id": flavor_id})), restored);

    assert_eq!(acme.ok("flavors/delete", json!({"id": flavor_id})), restored);
    acme.fails("flavors/get", json!({"id": flavor_id}), "NOT_FOUND");
    // An archived flavor can be deleted too.
    let flavor = id(&acme.ok("flavors/create", json!({"pool": world.pool})));
    acme.ok("flavors/archive", json!({"id": flavor}));
    acme.ok("flavors/delete", json!({"id": flavor}));
    assert_eq!(acme.items("flavors"), Vec::<Value>::new());
}

#[test]
fn unknown_objects_are_not_found() {
    let server = Server::start(&[]);
    let acme = Client::new(&server, "acme");
    let methods: [(&str, &str, &[&str]); 5] = [
        ("sites", "site", &["get", "update"]),
        ("accounts", "acct", &["get", "update", "delete"]),
        ("pools", "pool", &["get", "update", "archive", "restore"]),
        ("offers", "offer", &["get", "update", "delete"]),
        ("flavors", "flv", &["get", "update", "delete", "archive", "restore"]),
    ];
    for (group, prefix, methods) in methods {
        for method in methods {
            acme.fails(&format!("{group}/{method}"), json!({"id": unknown(prefix)}), "NOT_FOUND");
        }
    }
    acme.fails("pools/update", json!({"id": unknown("pool"), "vcpus": 1}), "NOT_FOUND");
    for method in ["get", "delete"] {
        acme.fails(&format!("quotas/{method}"), json!({"owner": "nobody"}), "NOT_FOUND");
    }
}

#[test]
fn each_module_serves_the_methods_of_spec_4_with_its_permission() {
    let server = Server::start(&[]);
    let (status, catalogue) = server.get("/api/methods");
    assert_eq!(status, 200);
    let catalogue: Value = serde_json::from_str(&catalogue).expect("the catalogue is JSON");
    let expected: [(&str, &[&str]); 6] = [
        ("sites", &["list", "get", "create", "update"]),
        ("accounts", &["list", "get", "create", "update", "delete"]),
        ("pools", &["list", "get", "create", "update", "archive", "restore"]),
        ("quotas", &["list", "get", "set", "delete"]),
        ("offers", &["list", "get", "create", "update", "delete"]),
        ("flavors", &["list", "get", "create", "update", "delete", "archive", "restore"]),
    ];
    server.tenant("acme");
    for (group, methods) in expected {
        let mut served: Vec<&str> = catalogue["methods"]
            .as_array()
            .expect("methods")
            .iter()
            .filter(|method| method["module"] == group)
            .map(|method| {
                let name = method["name"].as_str().expect("a name");
                let read = name.ends_with(".list") || name.ends_with(".get");
                let action = if read { "read" } else { "write" };
                assert_eq!(method["permission"], format!("compute:{group}:{action}"), "{method}");
                assert_eq!(method["scope"], format!("compute-{group}"), "{method}");
                assert_eq!(method["kind"], if read { "read" } else { "mutation" }, "{method}");
                name.strip_prefix(&format!("compute.{group}.")).expect("named after its group")
            })
            .collect();
        served.sort();
        let mut methods = methods.to_vec();
        methods.sort();
        assert_eq!(served, methods, "{group}");

        // A reader reads and writes nothing.
        let reader = server.token("acme", "reader", &[&format!("compute:{group}:read @ compute-{group}")]);
        let (status, _) = server.call(&reader, &format!("{group}/list"), json!({}));
        assert_eq!(status, 200, "{group}");
        let write = if group == "quotas" { "set" } else { "create" };
        let (status, body) = server.call(&reader, &format!("{group}/{write}"), json!({}));
        assert_eq!((status, code(&body)), (403, "PERMISSION_DENIED"), "{group}");
        assert_eq!(body["error"]["details"]["permission"], format!("compute:{group}:write"));
        assert_eq!(body["error"]["details"]["scope"], format!("compute-{group}"));
    }
}

#[test]
fn a_module_that_is_not_run_serves_no_methods() {
    let server = Server::start(&["--modules", "sites,accounts"]);
    let acme = Client::new(&server, "acme");
    acme.site();
    acme.account();
    for group in ["pools", "quotas", "offers", "flavors"] {
        acme.fails(&format!("{group}/list"), json!({}), "NOT_FOUND");
    }
    let (_, catalogue) = server.get("/api/methods");
    let catalogue: Value = serde_json::from_str(&catalogue).expect("the catalogue is JSON");
    let modules: Vec<&str> = catalogue["methods"]
        .as_array()
        .expect("methods")
        .iter()
        .filter_map(|method| method["module"].as_str())
        .collect();
    assert!(modules.contains(&"sites") && modules.contains(&"accounts"));
    assert!(!modules.iter().any(|module| ["pools", "quotas", "offers", "flavors"].contains(module)), "{modules:?}");
}

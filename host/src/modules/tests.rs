//! In-process tests of the module handlers: ids, and that a handler's changes belong to
//! the transaction around it (apply relies on this to roll back a failed call list).

use fleet_guest::grammar::is_id;
use serde_json::{Value, json};

use super::new_id;
use crate::api::{ApiError, Code};
use crate::calls::auth::Caller;
use crate::calls::context::{Ctx, Via};
use crate::calls::registry::Registry;
use crate::db::{self, Tx};
use crate::testing::{Database, module_registry};

/// A fresh id is one of its kind (the grammar itself is tested in `fleet_guest::grammar`).
#[test]
fn fresh_ids_are_ids_of_their_prefix() {
    let id = new_id("pool");
    assert!(is_id(&id, "pool"), "{id}");
    assert_ne!(id, new_id("pool"));
}

/// The built-in modules' methods on a temp database with the tenant `acme`.
struct Fixture {
    database: Database,
    registry: Registry,
    caller: Caller,
}

impl Fixture {
    fn new() -> Fixture {
        let caller = Caller {
            tenant: "acme".into(),
            principal: "alice".into(),
            grants: Vec::new(),
            token: None,
            git_source: None,
        };
        Fixture { database: Database::new(), registry: module_registry(), caller }
    }

    /// Runs `work` in a write transaction, with a `call(method, input)` that runs a
    /// registered module method inside it, as apply does.
    fn transaction<T>(
        &self,
        work: impl FnOnce(&dyn Fn(&str, Value) -> Result<Value, ApiError>) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let db = self.database.conn();
        db::transaction(&db, Tx::Write(&self.caller.tenant), |db| {
            let ctx = Ctx { caller: &self.caller, db, via: Via::Api };
            let call = |name: &str, input: Value| {
                let method = self.registry.by_name(name).expect("the method is registered");
                let output = method.run_in(&ctx, input)?;
                Ok(serde_json::from_str(&output).expect("JSON"))
            };
            work(&call)
        })
    }

    fn count(&self, table: &str) -> i64 {
        let db = self.database.conn();
        db.query_one(&format!("SELECT count(*) FROM {table}"), &[], |row| row.get(0)).expect("a count")
    }
}

#[test]
fn handler_changes_roll_back_with_the_surrounding_transaction() {
    let fixture = Fixture::new();

    // Every call succeeds, and then the transaction fails: nothing stays.
    let aborted = fixture.transaction(|call| {
        let site = call("compute.sites.create", json!({"region": "eu-west-1"}))?;
        let account = call("compute.accounts.create", json!({"provider": "aws", "idempotencyKey": "k"}))?;
        call(
            "compute.pools.create",
            json!({"site": site["id"], "account": account["id"], "class": "gpu", "owner": "team-ml"}),
        )?;
        call("compute.quotas.set", json!({"owner": "team-ml", "vcpus": 8}))?;
        let listed = call("compute.pools.list", json!({}))?;
        assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "the transaction sees its own writes");
        Err::<(), _>(ApiError::new(Code::Internal, "abort"))
    });
    assert_eq!(aborted.map_err(|error| error.message), Err("abort".to_owned()));
    for table in ["sites", "accounts", "pools", "quotas"] {
        assert_eq!(fixture.count(table), 0, "{table}");
    }

    // A later call fails, as an apply call can: the earlier calls roll back with it.
    let failed = fixture.transaction(|call| {
        call("compute.sites.create", json!({"region": "eu-west-1"}))?;
        call("compute.offers.create", json!({"pool": format!("pool_{}", "a".repeat(26)), "to": "team-web"}))
    });
    assert_eq!(failed.map_err(|error| error.code), Err(Code::FailedPrecondition));
    assert_eq!(fixture.count("sites"), 0);

    // The same calls in a transaction that commits stay, and a key freed by the
    // rollback is free.
    let account = fixture
        .transaction(|call| {
            call("compute.sites.create", json!({"region": "eu-west-1"}))?;
            call("compute.accounts.create", json!({"provider": "aws", "idempotencyKey": "k"}))
        })
        .expect("the transaction commits");
    assert_eq!(fixture.count("sites"), 1);
    let replay = fixture
        .transaction(|call| call("compute.accounts.create", json!({"provider": "aws", "idempotencyKey": "k"})))
        .expect("a replay");
    assert_eq!(replay, account);
    assert_eq!(fixture.count("accounts"), 1);
}

//! Test support: a small model of the module methods over a `Snapshot`, so that tests
//! can apply a plan's calls and plan again (SPEC §4 semantics, including validation).

#![allow(dead_code, reason = "each test binary uses a different part of the support")]

use std::collections::HashMap;

use fleet_guest::Snapshot;
use fleet_guest::{
    Binding, Caller, Error, ErrorCode, Flavor, Host, Kind, Offer, OwnerQuota, Pool, ProviderAccount, Site,
};
use serde_json::{Map, Value, json};

pub fn caller() -> Caller {
    Caller { tenant: "acme".into(), principal: "alice".into() }
}

pub fn empty_snapshot() -> Snapshot {
    Snapshot::empty(caller())
}

/// The module methods of SPEC §4 over a snapshot, with their validation and
/// idempotency; every call is logged as `(method, input)`.
pub struct Model {
    pub state: Snapshot,
    /// idempotency key -> (table, id)
    keys: HashMap<String, (String, String)>,
    pub log: Vec<(String, Value)>,
}

fn error(code: ErrorCode, message: impl Into<String>) -> Error {
    Error::new(code, message)
}

fn table_of(group: &str) -> Option<&'static str> {
    Some(match group {
        "sites" => "sites",
        "accounts" => "providerAccounts",
        "pools" => "pools",
        "quotas" => "ownerQuotas",
        "offers" => "offers",
        "flavors" => "flavors",
        _ => return None,
    })
}

fn immutable(table: &str) -> &'static [&'static str] {
    match table {
        "providerAccounts" => &["provider"],
        "pools" => &["site", "class"],
        "offers" | "flavors" => &["pool"],
        _ => &[],
    }
}

impl Model {
    pub fn new(state: Snapshot) -> Model {
        Model { state, keys: HashMap::new(), log: Vec::new() }
    }

    /// Records the name bindings of a plan's create changes, as the host does.
    pub fn record_bindings(&mut self, plan: &Value) {
        for change in plan["changes"].as_array().into_iter().flatten() {
            let key = change["key"].as_str().unwrap_or_default();
            if change["action"] != "create" || change["kind"] == "ownerQuota" || key.contains('_') {
                continue;
            }
            let kind: Kind = serde_json::from_value(change["kind"].clone()).expect("a kind");
            let id = change["id"].as_str().expect("creates have ids").to_owned();
            self.state.bindings.push(Binding { kind, name: key.to_owned(), id });
        }
    }

    /// Applies a request through the planner and records the bindings; returns the
    /// apply result.
    pub fn apply(&mut self, request: &str) -> Result<Value, Error> {
        let result = fleet_guest::apply(self, request)?;
        let result: Value = serde_json::from_str(&result).expect("apply writes JSON");
        self.record_bindings(&result["plan"]);
        Ok(result)
    }

    fn run(&mut self, method: &str, input: &str) -> Result<Value, Error> {
        let mut input: Map<String, Value> =
            serde_json::from_str(input).map_err(|_| error(ErrorCode::InvalidArgument, "input is not an object"))?;
        let (group, verb) = method
            .strip_prefix("compute.")
            .and_then(|rest| rest.split_once('.'))
            .ok_or_else(|| error(ErrorCode::NotFound, format!("no method {method}")))?;
        let table = table_of(group).ok_or_else(|| error(ErrorCode::NotFound, format!("no method {method}")))?;
        let mut tables = serde_json::to_value(&self.state).expect("a snapshot is JSON");
        let id_field = if table == "ownerQuotas" { "owner" } else { "id" };
        let id = input.get(id_field).and_then(Value::as_str).unwrap_or_default().to_owned();
        let rows = tables[table].as_array_mut().expect("tables are arrays");
        let position = rows.iter().position(|row| row[id_field] == id.as_str());
        let output = match verb {
            "create" | "set" => {
                let idempotency_key = input.remove("idempotencyKey").and_then(|key| key.as_str().map(str::to_owned));
                if let Some(key) = &idempotency_key
                    && let Some((_, existing)) = self.keys.get(key)
                    && let Some(row) = rows.iter().find(|row| row["id"] == existing.as_str())
                {
                    return Ok(row.clone());
                }
                match (verb, position) {
                    ("create", Some(_)) => return Err(error(ErrorCode::AlreadyExists, format!("{id} exists"))),
                    ("set", Some(position)) => rows[position] = Value::Object(input.clone()),
                    _ => rows.push(Value::Object(input.clone())),
                }
                if let Some(key) = idempotency_key {
                    self.keys.insert(key, (table.to_owned(), id.clone()));
                }
                Value::Object(input)
            }
            "update" => {
                let position = position.ok_or_else(|| error(ErrorCode::NotFound, format!("no {id}")))?;
                let row = rows[position].as_object_mut().expect("rows are objects");
                for (field, value) in input {
                    if immutable(table).contains(&field.as_str()) && row.get(&field) != Some(&value) {
                        return Err(error(ErrorCode::InvalidArgument, format!("{field} is immutable")));
                    }
                    if !row.contains_key(&field) {
                        return Err(error(ErrorCode::InvalidArgument, format!("unknown field {field}")));
                    }
                    row.insert(field, value);
                }
                Value::Object(row.clone())
            }
            "delete" => {
                let position = position.ok_or_else(|| error(ErrorCode::NotFound, format!("no {id}")))?;
                rows.remove(position);
                self.keys.retain(|_, (key_table, key_id)| !(key_table == table && *key_id == id));
                json!({})
            }
            "archive" | "restore" if matches!(table, "pools" | "flavors") => {
                let position = position.ok_or_else(|| error(ErrorCode::NotFound, format!("no {id}")))?;
                rows[position]["archived"] = json!(verb == "archive");
                rows[position].clone()
            }
            _ => return Err(error(ErrorCode::NotFound, format!("no method {method}"))),
        };
        let state: Snapshot = serde_json::from_value(tables)
            .map_err(|problem| error(ErrorCode::InvalidArgument, format!("{method}: {problem}")))?;
        validate(&state, table, &id)?;
        self.state = state;
        Ok(output)
    }
}

/// The module validation of SPEC §4 for the object just written.
fn validate(state: &Snapshot, table: &str, id: &str) -> Result<(), Error> {
    let precondition = |message: String| Err(error(ErrorCode::FailedPrecondition, message));
    let live_pool = |pool: &str| state.pools.iter().find(|candidate| candidate.id == pool && !candidate.archived);
    match table {
        // A deleted account: no live pool may use it.
        "providerAccounts"
            if !state.provider_accounts.iter().any(|account| account.id == id)
                && state.pools.iter().any(|pool| pool.account == id && !pool.archived) =>
        {
            return precondition(format!("a live pool uses {id}"));
        }
        "pools" => {
            if let Some(pool) = state.pools.iter().find(|pool| pool.id == id) {
                if !state.sites.iter().any(|site| site.id == pool.site) {
                    return precondition(format!("no site {}", pool.site));
                }
                if !state.provider_accounts.iter().any(|account| account.id == pool.account) {
                    return precondition(format!("no account {}", pool.account));
                }
            }
        }
        "offers" => {
            if let Some(offer) = state.offers.iter().find(|offer| offer.id == id) {
                let Some(pool) = live_pool(&offer.pool) else {
                    return precondition(format!("no live pool {}", offer.pool));
                };
                if pool.owner == offer.to {
                    return Err(error(ErrorCode::InvalidArgument, "an offer must go to another owner"));
                }
            }
        }
        "flavors" => {
            if let Some(flavor) = state.flavors.iter().find(|flavor| flavor.id == id)
                && !flavor.archived
                && live_pool(&flavor.pool).is_none()
            {
                return precondition(format!("no live pool {}", flavor.pool));
            }
        }
        _ => {}
    }
    Ok(())
}

impl Host for Model {
    fn caller(&self) -> Caller {
        self.state.caller.clone()
    }
    fn modules(&self) -> Vec<Kind> {
        self.state.modules.clone()
    }
    fn sites(&self) -> Vec<Site> {
        self.state.sites.clone()
    }
    fn provider_accounts(&self) -> Vec<ProviderAccount> {
        self.state.provider_accounts.clone()
    }
    fn pools(&self) -> Vec<Pool> {
        self.state.pools.clone()
    }
    fn owner_quotas(&self) -> Vec<OwnerQuota> {
        self.state.owner_quotas.clone()
    }
    fn offers(&self) -> Vec<Offer> {
        self.state.offers.clone()
    }
    fn flavors(&self) -> Vec<Flavor> {
        self.state.flavors.clone()
    }
    fn bindings(&self) -> Vec<Binding> {
        self.state.bindings.clone()
    }
    fn invoke(&mut self, method: &str, input: &str) -> Result<String, Error> {
        self.log.push((method.to_owned(), serde_json::from_str(input).unwrap_or(Value::Null)));
        self.run(method, input).map(|output| output.to_string())
    }
}

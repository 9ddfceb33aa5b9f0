//! Test support: a small model of the module methods over a `Snapshot`, so that tests
//! can apply a plan's calls and plan again (SPEC §4 semantics, including validation).

#![allow(dead_code, reason = "each test binary uses a different part of the support")]

use std::collections::HashMap;

use fleet_guest::kinds::{BUILT_IN, Descriptor, FieldType, Removal, Rule};
use fleet_guest::{Binding, Caller, Catalog, Error, ErrorCode, Host, Snapshot};
use serde_json::{Map, Value, json};

pub fn caller() -> Caller {
    Caller { tenant: "acme".into(), principal: "alice".into(), grants: None }
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

/// The kind a module group serves.
fn kind_of(group: &str) -> Option<&'static Descriptor> {
    BUILT_IN.iter().copied().find(|kind| kind.group == group)
}

impl Model {
    pub fn new(state: Snapshot) -> Model {
        Model { state, keys: HashMap::new(), log: Vec::new() }
    }

    /// Records the name bindings of a plan's create changes, and moves those and the
    /// idempotency keys of its renames (SPEC §15), as the host does.
    pub fn record_bindings(&mut self, plan: &Value) {
        for change in plan["changes"].as_array().into_iter().flatten() {
            let key = change["key"].as_str().unwrap_or_default();
            if change["action"] == "rename" {
                let (kind, from) = (change["kind"].as_str().expect("a kind"), change["from"].as_str().expect("from"));
                let id = change["id"].as_str().expect("a rename names its object").to_owned();
                self.state.bindings.retain(|binding| binding.kind != kind || binding.name != from);
                self.state.bindings.push(Binding { kind: kind.to_owned(), name: key.to_owned(), id });
                let tenant = &self.state.caller.tenant;
                if let Some(made) = self.keys.remove(&fleet_guest::idempotency_key(tenant, kind, from)) {
                    self.keys.insert(fleet_guest::idempotency_key(tenant, kind, key), made);
                }
                continue;
            }
            if change["action"] != "create" || change["kind"] == "ownerQuota" || key.contains('_') {
                continue;
            }
            let kind = change["kind"].as_str().expect("a kind").to_owned();
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
        let kind = kind_of(group).ok_or_else(|| error(ErrorCode::NotFound, format!("no method {method}")))?;
        let table = kind.section;
        let mut tables = serde_json::to_value(&self.state).expect("a snapshot is JSON");
        if tables.get(table).is_none() {
            tables[table] = json!([]);
        }
        let id_field = kind.identity_name();
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
                    let immutable = kind.fields.iter().any(|spec| spec.immutable && spec.name == field);
                    if immutable && row.get(&field) != Some(&value) {
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
            "archive" | "restore" if kind.archives() => {
                let position = position.ok_or_else(|| error(ErrorCode::NotFound, format!("no {id}")))?;
                rows[position]["archived"] = json!(verb == "archive");
                rows[position].clone()
            }
            _ => return Err(error(ErrorCode::NotFound, format!("no method {method}"))),
        };
        let state: Snapshot = serde_json::from_value(tables)
            .map_err(|problem| error(ErrorCode::InvalidArgument, format!("{method}: {problem}")))?;
        validate(&state, kind, &id)?;
        self.state = state;
        Ok(output)
    }
}

/// The module validation of SPEC §4 for the object just written, from the descriptors:
/// references name live objects, a deleted object is referenced by no live object, and
/// the kinds' rules hold.
fn validate(state: &Snapshot, kind: &Descriptor, id: &str) -> Result<(), Error> {
    let precondition = |message: String| Err(error(ErrorCode::FailedPrecondition, message));
    let position = |kind: &Descriptor, name: &str| kind.position(name).expect("a field of the kind");
    let find = |kind: &Descriptor, key: &str| state.objects(kind.kind).iter().find(|object| object.key == key).cloned();
    let live = |kind: &Descriptor, key: &str| find(kind, key).filter(|object| !object.archived);
    let target = |name: &str| BUILT_IN.iter().copied().find(|kind| kind.kind == name).expect("a built-in kind");
    let Some(object) = find(kind, id) else {
        if kind.removal == Removal::Delete {
            for referrer in BUILT_IN {
                for (index, field) in referrer.fields.iter().enumerate() {
                    let FieldType::Ref(name) = field.ty else { continue };
                    let used = state
                        .objects(referrer.kind)
                        .iter()
                        .any(|object| name == kind.kind && !object.archived && object.values[index].as_text() == id);
                    if used {
                        return precondition(format!("a live {} uses {id}", referrer.kind));
                    }
                }
            }
        }
        return Ok(());
    };
    if object.archived {
        return Ok(());
    }
    for (index, field) in kind.fields.iter().enumerate() {
        let FieldType::Ref(name) = field.ty else { continue };
        let reference = object.values[index].as_text();
        if live(target(name), reference).is_none() {
            return precondition(format!("no live {name} {reference}"));
        }
    }
    for rule in kind.rules {
        let Rule::Differs { field, via, other } = *rule;
        let FieldType::Ref(name) = kind.fields[position(kind, via)].ty else { continue };
        let referenced = target(name);
        if let Some(theirs) = live(referenced, object.values[position(kind, via)].as_text())
            && theirs.values[position(referenced, other)] == object.values[position(kind, field)]
        {
            return Err(error(ErrorCode::InvalidArgument, format!("{field} must differ from the {via}'s {other}")));
        }
    }
    Ok(())
}

impl Host for Model {
    fn caller(&self) -> Caller {
        self.state.caller.clone()
    }
    fn state(&self, catalog: &Catalog) -> Result<Snapshot, Error> {
        self.state.state(catalog)
    }
    fn invoke(&mut self, method: &str, input: &str) -> Result<String, Error> {
        self.log.push((method.to_owned(), serde_json::from_str(input).unwrap_or(Value::Null)));
        self.run(method, input).map(|output| output.to_string())
    }
}

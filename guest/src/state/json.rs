//! The state's JSON form (`compute.preview.snapshot`, the golden cases' `state.json`).
//! It is read by writing the state encoding and decoding that, so one reader checks
//! both forms.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value as Json};

use super::decode::{decode, malformed};
use super::encode::StateWriter;
use super::snapshot::{Binding, Caller, Object, Policy, Snapshot};
use crate::error::Error;
use crate::kinds::{Catalog, Descriptor};
use crate::value::Value;

impl Snapshot {
    /// Reads the JSON form, kinds and fields as `catalog` has them.
    pub fn from_json(catalog: &Catalog, json: &Json) -> Result<Snapshot, Error> {
        let Json::Object(members) = json else {
            return Err(malformed("the state must be a JSON object"));
        };
        let caller: Caller = match members.get("caller") {
            Some(caller) => serde_json::from_value(caller.clone()).map_err(|error| malformed(&error))?,
            None => return Err(malformed("the state has no caller")),
        };
        let mut writer = StateWriter::new();
        let modules: Vec<String> = match members.get("modules") {
            Some(modules) => serde_json::from_value(modules.clone()).map_err(|error| malformed(&error))?,
            None => catalog.iter().map(|(_, kind)| kind.kind.to_owned()).collect(),
        };
        writer.modules(modules.iter().map(String::as_str));
        for (section, objects) in members {
            if matches!(section.as_str(), "caller" | "modules" | "bindings" | "plugins" | "policies") {
                continue;
            }
            let Json::Array(objects) = objects else {
                return Err(malformed(format_args!("section {section} must be an array of objects")));
            };
            let mut names: Vec<&str> = Vec::new();
            for object in objects {
                let Json::Object(object) = object else {
                    return Err(malformed(format_args!("section {section} must be an array of objects")));
                };
                for name in object.keys() {
                    if !names.contains(&name.as_str()) {
                        names.push(name);
                    }
                }
            }
            let mut table = writer.table(section, &names);
            for object in objects.iter().filter_map(Json::as_object) {
                let mut row = table.row(object.len());
                for (name, value) in object {
                    let field = names.iter().position(|candidate| candidate == name).unwrap_or_default();
                    let value = Value::from_json(value)
                        .ok_or_else(|| malformed(format_args!("{section}: {name} has a value of no field type")))?;
                    row.value(field, &value);
                }
            }
        }
        let bindings: Vec<Binding> = match members.get("bindings") {
            Some(bindings) => serde_json::from_value(bindings.clone()).map_err(|error| malformed(&error))?,
            None => Vec::new(),
        };
        writer.bindings(bindings.iter().map(|binding| (&*binding.kind, &*binding.name, &*binding.id)));
        let policies: Vec<Policy> = match members.get("policies") {
            Some(policies) => serde_json::from_value(policies.clone()).map_err(|error| malformed(&error))?,
            None => Vec::new(),
        };
        writer.policies(&policies);
        let mut snapshot = decode(catalog, &writer.finish())?;
        snapshot.caller = caller;
        Ok(snapshot)
    }

    /// The JSON form: every field written, objects as the API writes them.
    pub fn to_json(&self, catalog: &Catalog) -> Json {
        let mut members = Map::new();
        members.insert("caller".into(), serde_json::to_value(&self.caller).unwrap_or_default());
        members.insert("modules".into(), serde_json::to_value(&self.modules).unwrap_or_default());
        for (_, kind) in catalog.iter() {
            let objects: Vec<Json> = self.objects(kind.kind).iter().map(|object| object_json(kind, object)).collect();
            if !objects.is_empty() {
                members.insert(kind.section.into(), Json::Array(objects));
            }
        }
        members.insert("bindings".into(), serde_json::to_value(&self.bindings).unwrap_or_default());
        if !self.policies.is_empty() {
            members.insert("policies".into(), serde_json::to_value(&self.policies).unwrap_or_default());
        }
        Json::Object(members)
    }
}

fn object_json(kind: &Descriptor, object: &Object) -> Json {
    let mut members = Map::new();
    members.insert(kind.identity_name().into(), Json::String(object.key.clone()));
    for (field, value) in kind.fields.iter().zip(&object.values) {
        members.insert(field.name.into(), serde_json::to_value(value).unwrap_or_default());
    }
    if kind.archives() {
        members.insert("archived".into(), Json::Bool(object.archived));
    }
    Json::Object(members)
}

/// The built-in kinds' JSON form, for fixtures and tests.
impl<'de> Deserialize<'de> for Snapshot {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Snapshot, D::Error> {
        let json = Json::deserialize(deserializer)?;
        Snapshot::from_json(&Catalog::built_in(), &json).map_err(|error| serde::de::Error::custom(error.message))
    }
}

impl Serialize for Snapshot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json(&Catalog::built_in()).serialize(serializer)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::json;

    use super::*;

    /// A state of sites, pools and owner quotas, one pool archived, for the state's tests.
    pub(in crate::state) fn fixture() -> Json {
        json!({
            "caller": {"tenant": "acme", "principal": "alice"},
            "modules": ["site", "pool"],
            "sites": [{"id": "site_aaaaaaaaaaaaaaaaaaaaaaaaaa", "region": "r", "labels": {"b": "2", "a": "1"}}],
            "pools": [{"id": "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa", "site": "site_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                       "account": "acct_aaaaaaaaaaaaaaaaaaaaaaaaaa", "class": "cpu", "owner": "o", "gpus": 3,
                       "archived": true}],
            "ownerQuotas": [{"owner": "o", "instances": 4}],
            "bindings": [{"kind": "pool", "name": "p", "id": "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa"}]
        })
    }

    #[test]
    fn json_and_the_encoding_carry_the_same_state() {
        let catalog = Catalog::built_in();
        let snapshot = Snapshot::from_json(&catalog, &fixture()).unwrap();
        let pool = &snapshot.objects("pool")[0];
        assert!(pool.archived);
        assert_eq!(pool.values[6], Value::Count(3));
        assert_eq!(pool.values[4], Value::Count(0), "defaults fill absent fields");
        assert_eq!(snapshot.objects("ownerQuota")[0].key, "o");
        let mut decoded = decode(&catalog, &snapshot.encode(&catalog)).unwrap();
        decoded.caller = snapshot.caller.clone();
        assert_eq!(decoded, snapshot);
        let again = Snapshot::from_json(&catalog, &snapshot.to_json(&catalog)).unwrap();
        assert_eq!(again, snapshot);
    }
}

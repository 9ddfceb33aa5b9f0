//! The state as one value, [`Snapshot`]: the caller, the kinds whose modules run, the
//! objects per kind, fleet's name bindings and the policies in force.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::value::Value;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Caller {
    pub tenant: String,
    pub principal: String,
    /// The caller's grants (`PERMISSION @ SCOPE`), when the host says them: a plan then
    /// blocks the changes whose calls the caller may not make (SPEC §14). `None` (golden
    /// cases, benchmarks) plans as if every call were allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<Vec<String>>,
}

/// One object as the state reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// The id; the identity field's value for kinds identified by a field.
    pub key: String,
    /// Every field of the kind, in descriptor order (references are ids).
    pub values: Vec<Value>,
    pub archived: bool,
}

/// A name fleet gave an object it created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// The kind name.
    pub kind: String,
    pub name: String,
    pub id: String,
}

/// How binding a policy's denials are (SPEC §14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Its denials are warnings.
    Advisory,
    /// Its denials block the plan unless overridden.
    Mandatory,
    /// Its denials block the plan, and nothing overrides them.
    Enforced,
}

impl Level {
    pub const NAMES: [&'static str; 3] = ["advisory", "mandatory", "enforced"];

    pub fn parse(text: &str) -> Option<Level> {
        match text {
            "advisory" => Some(Level::Advisory),
            "mandatory" => Some(Level::Mandatory),
            "enforced" => Some(Level::Enforced),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        Level::NAMES[self as usize]
    }
}

/// A policy in force: its name, level and Rego source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub name: String,
    pub level: Level,
    pub source: String,
}

/// Everything the planner reads of a tenant, in one value: what a host reports, or a
/// fixture of the golden tests (`state.json`). As a [`crate::host::Host`] it cannot invoke
/// methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub caller: Caller,
    /// The kinds (by name) whose modules this deployment runs.
    pub modules: Vec<String>,
    /// Objects per kind name. A kind whose module does not run has none.
    pub tables: BTreeMap<String, Vec<Object>>,
    pub bindings: Vec<Binding>,
    /// The policies in force, the deployment's and the tenant's (SPEC §14).
    pub policies: Vec<Policy>,
}

impl Snapshot {
    /// A tenant with nothing in it, every built-in module run.
    pub fn empty(caller: Caller) -> Snapshot {
        let modules = crate::kinds::BUILT_IN.iter().map(|kind| kind.kind.to_owned()).collect();
        Snapshot { caller, modules, tables: BTreeMap::new(), bindings: Vec::new(), policies: Vec::new() }
    }

    /// The objects of a kind.
    pub fn objects(&self, kind: &str) -> &[Object] {
        self.tables.get(kind).map_or(&[], Vec::as_slice)
    }

    /// The objects of a kind, to change.
    pub fn objects_mut(&mut self, kind: &str) -> &mut Vec<Object> {
        self.tables.entry(kind.to_owned()).or_default()
    }
}

//! The modules (SPEC §4): one API group, one table and one FleetConfig section per kind,
//! all served by the same code from the kinds' descriptors (`fleet_guest::kinds`).
//!
//! A descriptor drives validation, storage (`store`), the method schemas and the
//! planner's state. What is not a field type is a rule of the descriptor (an offer's
//! `to` differs from its pool's owner) or holds for every kind (a reference names a live
//! object of the tenant; a deleted object is referenced by no live object). The
//! handlers here are the single code path for every change to module objects: the
//! HTTP methods and fleet's apply both call them, inside whatever transaction the
//! caller opened.

mod handlers;
mod rules;
mod schema;

use std::sync::Arc;

use fleet_guest::Catalog;
use fleet_guest::kinds::{Descriptor, Removal, with_article};
use serde_json::{Value, json};

use crate::api::ApiError;
use crate::calls::context::Ctx;
use crate::calls::registry::{Method, MethodKind, Registry, handler};
use crate::plugins::{Plugin, Plugins};
use handlers::{archive, create, delete, get, list, restore, set, update};
use schema::{input_schema, key_schema, object_schema};

pub use rules::{new_id, read_fields};

/// The longest idempotency key a create accepts, in characters (as JSON Schema's
/// `maxLength` counts).
pub const MAX_IDEMPOTENCY_KEY: usize = 512;

/// One kind served as a module: its descriptor, and the catalogue its references name
/// kinds of.
#[derive(Clone)]
pub struct Module {
    pub kind: &'static Descriptor,
    pub(super) catalog: Arc<Catalog>,
    /// The plugin that serves the kind, whose check judges every create and update.
    pub(super) plugin: Option<Arc<Plugin>>,
}

impl Module {
    /// The module of the kind at `kind` in `catalog`, served by `plugin` if a plugin's.
    pub fn new(catalog: Arc<Catalog>, kind: usize, plugin: Option<Arc<Plugin>>) -> Module {
        Module { kind: catalog.get(kind), catalog, plugin }
    }

    /// The descriptor of the kind a reference names.
    pub(super) fn target(&self, kind: &str) -> Option<&'static Descriptor> {
        self.catalog.by_kind(kind).map(|position| self.catalog.get(position))
    }

    /// Registers the module's methods.
    pub fn register(&self, registry: &mut Registry) {
        type Op = fn(&Module, &Ctx, Value) -> Result<Value, ApiError>;
        let kind = self.kind;
        let name = kind.kind;
        let object = object_schema(kind, &self.catalog);
        let key = key_schema(kind);
        let mut add = |verb: &str, method_kind: MethodKind, op: Op, summary: String, input: Value, output: &Value| {
            let module = self.clone();
            let handler = handler(move |ctx: &Ctx, body: Value| op(&module, ctx, body));
            let method = Method::new(kind.group, verb, method_kind, handler).summary(summary);
            registry.register(method.schemas(input, output.clone()));
        };
        let archived = if kind.archives() { ", archived ones included" } else { "" };
        add(
            "list",
            MethodKind::Read,
            list,
            format!("Lists the tenant's {name} objects{archived}."),
            json!({"type": "object", "additionalProperties": false}),
            &json!({"type": "object", "properties": {"items": {"type": "array", "items": object}}}),
        );
        add("get", MethodKind::Read, get, format!("Reads one {name}."), key.clone(), &object);
        if kind.upserted() {
            let summary = format!("Creates or replaces the {name} of {}.", with_article(kind.identity_name()));
            add("set", MethodKind::Mutation, set, summary, input_schema(kind, &self.catalog, true), &object);
        } else {
            let summary = format!("Creates {}; an idempotencyKey of a live object returns that object.", kind.a());
            add("create", MethodKind::Mutation, create, summary, input_schema(kind, &self.catalog, true), &object);
            let summary = format!("Changes fields of {}; immutable fields cannot change.", kind.a());
            add("update", MethodKind::Mutation, update, summary, input_schema(kind, &self.catalog, false), &object);
        }
        if kind.removal == Removal::Delete {
            let summary = format!("Deletes {}; refused while a live object references it.", kind.a());
            add("delete", MethodKind::Mutation, delete, summary, key.clone(), &object);
        }
        if kind.archives() {
            add("archive", MethodKind::Mutation, archive, format!("Archives {}.", kind.a()), key.clone(), &object);
            add("restore", MethodKind::Mutation, restore, format!("Restores an archived {name}."), key, &object);
        }
    }
}

/// The kinds this deployment knows (its catalogue) and those whose modules it runs.
pub struct Modules {
    pub catalog: Arc<Catalog>,
    runs: Vec<bool>,
    /// Per kind, the plugin that serves it.
    plugins: Vec<Option<Arc<Plugin>>>,
}

impl Modules {
    /// The modules of `catalog` whose kinds `runs` names, and those of every plugin.
    pub fn new(catalog: Arc<Catalog>, runs: impl Fn(&str) -> bool, plugins: &Plugins) -> Modules {
        let plugins: Vec<Option<Arc<Plugin>>> =
            catalog.iter().map(|(_, kind)| plugins.by_kind(kind.kind).cloned()).collect();
        let runs = catalog.iter().map(|(position, kind)| plugins[position].is_some() || runs(kind.kind)).collect();
        Modules { catalog, runs, plugins }
    }

    /// Whether this deployment runs the module of the kind named `kind`.
    pub fn runs(&self, kind: &str) -> bool {
        self.catalog.by_kind(kind).is_some_and(|position| self.runs[position])
    }

    /// The kinds whose modules run, in dependency order.
    pub fn running(&self) -> impl Iterator<Item = &'static Descriptor> + '_ {
        self.catalog.iter().filter(|(position, _)| self.runs[*position]).map(|(_, kind)| kind)
    }

    /// Refuses a plugin whose fields reference a kind no module of this deployment serves.
    pub fn check_plugin_references(&self, plugins: &Plugins) -> anyhow::Result<()> {
        for plugin in plugins.iter() {
            if let Some((field, kind)) = plugin.kind.references().find(|(_, kind)| !self.runs(kind)) {
                anyhow::bail!(
                    "plugin {}: its field {field} references {kind}, a kind no module of this deployment serves \
                     (see --modules)",
                    plugin.path.display()
                );
            }
        }
        Ok(())
    }

    /// Registers the methods of every module that runs.
    pub fn register(&self, registry: &mut Registry) {
        for (position, _) in self.catalog.iter().filter(|(position, _)| self.runs[*position]) {
            Module::new(self.catalog.clone(), position, self.plugins[position].clone()).register(registry);
        }
    }
}

#[cfg(test)]
mod tests;

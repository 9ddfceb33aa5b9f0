//! Module plugins (SPEC §10): components of `wit/module` that add a kind of object.
//!
//! A plugin is loaded once, before the server listens: read, compiled (and cached like
//! the planner), checked to be a component that imports nothing and exports the
//! `compute:module/plugin` interface of a version this host supports, and asked for its
//! descriptor, which must be valid and fit with the built-in kinds and the other
//! plugins. From then on the plugin's kind is one more kind of the catalogue: the
//! modules serve it, the planner plans it. The plugin itself only ever runs its check,
//! each time in a fresh instance with its own CPU and memory budget; a plugin that
//! loops, allocates without end, traps or answers garbage costs that one request an
//! error. The plugin is never trusted: its answers are bounded and checked here.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fleet_guest::Catalog;
use fleet_guest::kinds::{Descriptor, Removal};
use fleet_guest::plugins::{DeclaredType, Finding, PluginField, PluginKind, Subject};
use wasmtime::component::Linker;
use wasmtime::{Config, Engine, Store, Trap};

use crate::api::{ApiError, Code};
use crate::metrics::{Exhausted, Metrics};
use crate::sandbox::{Budget, Limits, Ticker, compile, sha256_hex, thread_cpu, ticks};

wasmtime::component::bindgen!({ world: "module-plugin", path: "../wit/module" });

use compute::module::types;

/// The interface a plugin exports, without its version.
const INTERFACE: &str = "compute:module/plugin";
/// The plugin package's interface of types, which a plugin may import.
const TYPES: &str = "compute:module/types@";
/// The versions of the plugin package this host loads: every `0.1.x`.
pub const SUPPORTED: &str = "0.1";

/// API groups that serve no kind: a plugin cannot take them.
const FLEET_GROUPS: [&str; 4] = ["fleet", "preview", "audit", "events"];

/// The most objects one run of a check judges: a plan with more checks them in
/// batches, each in a fresh instance with the whole budget, so that a plugin's budget
/// bounds a batch, not the size of the estate.
const BATCH: usize = 256;

/// The largest plugin file.
const MAX_FILE: u64 = 256 << 20;
/// The most problems a check may answer per subject, and the longest path and message.
const MAX_PROBLEMS_PER_SUBJECT: usize = 64;
const MAX_PATH: usize = 256;
/// A longer message is cut to this many bytes, `…` included (`wit/module/plugin.wit`):
/// a plugin that echoes a user's long value gives a long message, which is the user's
/// input, not the plugin's fault.
const MAX_MESSAGE: usize = 1024;

/// A plugin's budget unless the server is told otherwise: a check judges a batch of
/// objects, so it gets a second of CPU; 128 MiB leave room for an interpreter.
pub fn default_budget() -> Budget {
    Budget { cpu: Duration::from_secs(1), memory_bytes: 128 << 20 }
}

/// One loaded plugin.
pub struct Plugin {
    /// The file it was loaded from.
    pub path: PathBuf,
    pub kind: &'static Descriptor,
    /// The hex SHA-256 of the file: the name of its transpiled copy for the console.
    pub digest: String,
    pre: ModulePluginPre<Limits>,
    budget: Budget,
    /// Its instances, exhausted budgets and traps count as the planner's (SPEC §13).
    metrics: Metrics,
}

/// The plugins of a deployment, in the order they were given.
pub struct Plugins {
    plugins: Vec<Arc<Plugin>>,
    /// The built-in kinds and the plugins', in planning order.
    catalog: Catalog,
    /// Their descriptors, in the JSON form of the planner's `plugins.kinds`.
    kinds_json: String,
    _ticker: Option<Ticker>,
}

impl Default for Plugins {
    /// No plugins.
    fn default() -> Plugins {
        Plugins { plugins: Vec::new(), catalog: Catalog::built_in(), kinds_json: "[]".into(), _ticker: None }
    }
}

impl Plugins {
    /// Loads every plugin at `paths`: the first that cannot be loaded is the error,
    /// naming its file and the reason.
    pub fn load(
        paths: &[PathBuf],
        budget: Budget,
        cache_dir: Option<&Path>,
        metrics: &Metrics,
    ) -> anyhow::Result<Plugins> {
        if paths.is_empty() {
            return Ok(Plugins::default());
        }
        let engine = engine()?;
        let _ticker = Some(Ticker::start(&engine)?);
        let mut plugins = Vec::with_capacity(paths.len());
        for path in paths {
            let plugin = Plugin::load(&engine, path, budget, cache_dir, metrics)
                .map_err(|reason| anyhow::anyhow!("plugin {}: {reason}", path.display()))?;
            plugins.push(Arc::new(plugin));
        }
        let kinds: Vec<&'static Descriptor> = plugins.iter().map(|plugin| plugin.kind).collect();
        let catalog = Catalog::with_plugins(&kinds).map_err(|(kind, reason)| {
            // Of two plugins of one kind, the later file is the one that does not fit.
            let path = plugins.iter().rev().find(|plugin| plugin.kind.kind == kind).map(|plugin| plugin.path.display());
            anyhow::anyhow!("plugin {}: {reason}", path.map(|path| path.to_string()).unwrap_or_default())
        })?;
        let forms: Vec<PluginKind> = kinds.iter().map(|kind| PluginKind::of(kind)).collect();
        let kinds_json = serde_json::to_string(&forms)?;
        Ok(Plugins { plugins, catalog, kinds_json, _ticker })
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Plugin>> {
        self.plugins.iter()
    }

    /// The plugin that serves `kind`.
    pub fn by_kind(&self, kind: &str) -> Option<&Arc<Plugin>> {
        self.plugins.iter().find(|plugin| plugin.kind.kind == kind)
    }

    /// The kinds, for the planner.
    pub fn kinds_json(&self) -> &str {
        &self.kinds_json
    }

    /// The catalogue of a deployment with these plugins.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }
}

/// Plugins run with epoch interruption for their CPU budget and a store limiter for
/// their memory, each instance allocated on demand (a plugin may hold several core
/// instances and memories, which a pooling slot would have to be sized for).
fn engine() -> anyhow::Result<Engine> {
    let mut config = Config::new();
    config.epoch_interruption(true);
    Ok(Engine::new(&config)?)
}

impl Plugin {
    fn load(
        engine: &Engine,
        path: &Path,
        budget: Budget,
        cache_dir: Option<&Path>,
        metrics: &Metrics,
    ) -> Result<Plugin, String> {
        let size = std::fs::metadata(path).map_err(|error| format!("cannot read it: {error}"))?.len();
        if size > MAX_FILE {
            return Err(format!("it is {size} bytes; a plugin is at most {} MiB", MAX_FILE >> 20));
        }
        let bytes = std::fs::read(path).map_err(|error| format!("cannot read it: {error}"))?;
        match bytes.get(..8) {
            Some([0, b'a', b's', b'm', 0x0d, 0, 1, 0]) => {}
            Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => {
                return Err("it is a core WebAssembly module, not a component: encode it as a component of the \
                            compute:module world (wit-component, cargo-component, componentize-py)"
                    .into());
            }
            _ => return Err("it is not a WebAssembly component".into()),
        }
        let component = compile(engine, &bytes, cache_dir, "plugin")
            .map_err(|error| format!("it is not a valid WebAssembly component: {error:#}"))?;
        let shape = component.component_type();
        let exports: Vec<&str> = shape.exports(engine).map(|(name, _)| name).collect();
        let version = exports.iter().find_map(|name| name.strip_prefix(INTERFACE)?.strip_prefix('@'));
        match version {
            Some(version) if version.split('.').take(2).eq(SUPPORTED.split('.')) => {}
            Some(version) => {
                return Err(format!(
                    "it is a plugin of compute:module@{version}, and this host loads compute:module@{SUPPORTED}.x"
                ));
            }
            None => {
                let exported = if exports.is_empty() { "nothing".to_owned() } else { exports.join(", ") };
                return Err(format!(
                    "it is not a module plugin: it exports {exported}, not {INTERFACE}@{SUPPORTED}.x (the \
                     module-plugin world of wit/module)"
                ));
            }
        }
        // The world's own `types` interface holds types only; toolchains import it.
        let imports: Vec<&str> =
            shape.imports(engine).map(|(name, _)| name).filter(|name| !name.starts_with(TYPES)).collect();
        if !imports.is_empty() {
            return Err(format!(
                "it imports {}; a plugin imports nothing (no WASI, clock, randomness, files or network)",
                imports.join(", ")
            ));
        }
        let pre = Linker::new(engine)
            .instantiate_pre(&component)
            .and_then(ModulePluginPre::new)
            .map_err(|error| format!("its exports do not match {INTERFACE}@{SUPPORTED}: {error:#}"))?;
        let digest = sha256_hex(&bytes);
        let name = path.file_name().unwrap_or(path.as_os_str()).to_string_lossy();
        let described =
            run(&pre, budget, &name, metrics, |plugin, store| plugin.compute_module_plugin().call_describe(store))
                .map_err(|error| format!("its describe failed: {}", error.message))?;
        let kind =
            form(described).into_descriptor().map_err(|reason| format!("its descriptor is invalid: {reason}"))?;
        if FLEET_GROUPS.contains(&kind.group) {
            return Err(format!("its group {:?} is one of fleet's own API groups", kind.group));
        }
        Ok(Plugin { path: path.to_owned(), kind, digest, pre, budget, metrics: metrics.clone() })
    }

    /// The file's name, for messages.
    fn name(&self) -> String {
        self.path.file_name().unwrap_or(self.path.as_os_str()).to_string_lossy().into_owned()
    }

    /// Runs the plugin's check on `subjects`, [`BATCH`] at a time, each batch in a fresh
    /// instance with the whole budget, and checks every answer.
    pub fn check(&self, subjects: impl IntoIterator<Item = Subject>) -> Result<Vec<Finding>, ApiError> {
        let mut subjects = subjects.into_iter().map(|Subject { object, previous, references }| {
            let references = references.into_iter().map(|(field, object)| types::Reference { field, object }).collect();
            types::Subject { object, previous, references }
        });
        let mut findings = Vec::new();
        let mut offset = 0;
        loop {
            let batch: Vec<types::Subject> = subjects.by_ref().take(BATCH).collect();
            if batch.is_empty() {
                return Ok(findings);
            }
            let found = self.check_batch(&batch)?;
            findings.extend(found.into_iter().map(|finding| Finding { subject: finding.subject + offset, ..finding }));
            offset += batch.len() as u32;
        }
    }

    fn check_batch(&self, subjects: &[types::Subject]) -> Result<Vec<Finding>, ApiError> {
        let name = self.name();
        let problems = run(&self.pre, self.budget, &name, &self.metrics, |plugin, store| {
            plugin.compute_module_plugin().call_check(store, subjects)
        })?;
        let garbage = |what: String| ApiError::internal(format_args!("plugin {name} answered its check with {what}"));
        if problems.len() > MAX_PROBLEMS_PER_SUBJECT * subjects.len().max(1) {
            return Err(garbage(format!("{} problems for {} objects", problems.len(), subjects.len())));
        }
        problems
            .into_iter()
            .map(|problem| {
                if problem.subject as usize >= subjects.len() {
                    return Err(garbage(format!("a problem of object {} of {}", problem.subject, subjects.len())));
                }
                let pointer = problem.path.is_empty() || problem.path.starts_with('/');
                if !pointer || problem.path.len() > MAX_PATH || has_control(&problem.path) {
                    return Err(garbage(format!(
                        "the path {:?}, which is not a JSON pointer",
                        truncated(&problem.path)
                    )));
                }
                if problem.message.is_empty() || has_control(&problem.message) {
                    return Err(garbage(format!(
                        "the message {:?}, which is not text of at least one character",
                        truncated(&problem.message)
                    )));
                }
                Ok(Finding { subject: problem.subject, path: problem.path, message: bounded(problem.message) })
            })
            .collect()
    }
}

fn has_control(text: &str) -> bool {
    text.chars().any(char::is_control)
}

/// A message of at most [`MAX_MESSAGE`] bytes: a longer one cut at a character
/// boundary, ending with `…`.
fn bounded(mut message: String) -> String {
    const ELLIPSIS: &str = "…";
    if message.len() <= MAX_MESSAGE {
        return message;
    }
    let mut end = MAX_MESSAGE - ELLIPSIS.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(ELLIPSIS);
    message
}

fn truncated(text: &str) -> String {
    text.chars().take(64).collect()
}

/// Calls into a fresh instance of a plugin within its budget. Whatever goes wrong is an
/// error of this call alone: out of budget is `RESOURCE_EXHAUSTED`, a trap `INTERNAL`.
fn run<T>(
    pre: &ModulePluginPre<Limits>,
    budget: Budget,
    name: &str,
    metrics: &Metrics,
    call: impl FnOnce(&ModulePlugin, &mut Store<Limits>) -> wasmtime::Result<T>,
) -> Result<T, ApiError> {
    metrics.sandbox_instances.inc();
    let mut store = Store::new(pre.engine(), Limits::new(budget.memory_bytes));
    store.limiter(|limits| limits);
    // The budget is the thread's CPU time, as the planner's (`planner::thread_cpu`).
    let cpu_started = thread_cpu();
    store.set_epoch_deadline(ticks(budget.cpu));
    store.epoch_deadline_callback(move |_| {
        let used = thread_cpu().saturating_sub(cpu_started);
        match budget.cpu.checked_sub(used).filter(|left| !left.is_zero()) {
            Some(left) => Ok(wasmtime::UpdateDeadline::Continue(ticks(left))),
            None => Err(Trap::Interrupt.into()),
        }
    });
    let result = pre.instantiate(&mut store).and_then(|plugin| call(&plugin, &mut store));
    result.map_err(|trap| {
        if trap.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            metrics.exhausted(Exhausted::Cpu);
            ApiError::new(Code::ResourceExhausted, format!("plugin {name} ran out of its CPU budget"))
        } else if store.data().exhausted {
            metrics.exhausted(Exhausted::Memory);
            ApiError::new(Code::ResourceExhausted, format!("plugin {name} ran out of its memory budget"))
        } else {
            metrics.sandbox_traps.inc();
            ApiError::internal(format_args!("plugin {name} failed: {trap:#}"))
        }
    })
}

/// The JSON form of a descriptor a plugin gave, to be checked.
fn form(descriptor: types::Descriptor) -> PluginKind {
    let fields = descriptor
        .fields
        .into_iter()
        .map(|field| {
            let ty = match &field.type_ {
                types::FieldType::String => DeclaredType::String,
                types::FieldType::Name => DeclaredType::Name,
                types::FieldType::Count => DeclaredType::Count,
                types::FieldType::Bool => DeclaredType::Bool,
                types::FieldType::Map => DeclaredType::Map,
                types::FieldType::Ref(kind) => DeclaredType::Ref(kind),
            };
            PluginField::new(field.name, ty, field.required, field.immutable)
        })
        .collect();
    PluginKind {
        group: descriptor.group,
        kind: descriptor.kind,
        section: descriptor.section,
        id_prefix: descriptor.id_prefix,
        removal: match descriptor.removal {
            types::Removal::Delete => Removal::Delete,
            types::Removal::Archive => Removal::Archive,
            types::Removal::Never => Removal::Never,
        },
        fields,
    }
}

/// `fleet plugin inspect`: loads one plugin as `serve` would, alone (compiled into
/// `cache_dir`, where `serve` finds it), and gives its descriptor's JSON form.
pub fn inspect(path: &Path, cache_dir: Option<&Path>) -> anyhow::Result<PluginKind> {
    let plugins = Plugins::load(&[path.to_owned()], default_budget(), cache_dir, &Metrics::new())?;
    let plugin = plugins.iter().next().ok_or_else(|| anyhow::anyhow!("no plugin"))?;
    Ok(PluginKind::of(plugin.kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        assert_eq!(bounded("short".into()), "short");
        let exact = "x".repeat(MAX_MESSAGE);
        assert_eq!(bounded(exact.clone()), exact);
        for long in ["x".repeat(MAX_MESSAGE + 1), "é".repeat(MAX_MESSAGE), "x".repeat(100_000)] {
            let cut = bounded(long.clone());
            assert!(cut.len() <= MAX_MESSAGE, "{}", cut.len());
            assert!(cut.ends_with('…'));
            assert!(long.starts_with(cut.trim_end_matches('…')));
        }
    }
}

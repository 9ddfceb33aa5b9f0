//! The planner sandbox: the component compiled once, pre-linked into an `InstancePre`,
//! and a fresh `Store` per request with a CPU budget (epoch deadline), a memory cap, and
//! the caller it serves. Host imports only ever see that caller's tenant.

use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fleet_guest::{Kind, Snapshot};
use serde_json::Value;
use sha2::Digest;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store, Trap};

use crate::api::{ApiError, Code};
use crate::app::App;
use crate::auth::{self, Caller};
use crate::db::Conn;
use crate::metrics::Exhausted;
use crate::registry::{Ctx, MethodKind, Via};

wasmtime::component::bindgen!({
    world: "fleet-planner",
    path: "../wit",
    imports: { default: trappable },
});

use compute::fleet::{methods, state, types};

/// The planner component built by `build.rs`.
pub const PLANNER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fleet_planner.wasm"));

/// A hostile guest of the same world (`test-programs/hostile`), for the sandbox tests.
#[cfg(test)]
pub const HOSTILE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fleet_hostile.wasm"));

/// The largest result a guest may hand back.
const MAX_OUTPUT: usize = 64 << 20;

/// How often the epoch advances; the CPU budget is counted in these ticks.
const TICK: Duration = Duration::from_millis(10);
/// The most planner instances alive at once with the pooling allocator.
const MAX_INSTANCES: u32 = 128;
/// How much of a pooled slot's memory (and table) stays resident between requests.
/// Every resident page is reset with memset on every reuse, touched or not, so this is
/// a trade: 128 KiB measured best for an almost empty call and for small plans alike
/// (`BENCHMARKS.md`); more costs small requests what it saves large ones.
const KEEP_RESIDENT: usize = 128 << 10;

#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub cpu: Duration,
    pub memory_bytes: usize,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget { cpu: Duration::from_secs(5), memory_bytes: 256 << 20 }
    }
}

pub struct Sandbox {
    engine: Engine,
    planner: FleetPlannerPre<Guest>,
    budget: Budget,
    stop_ticker: Arc<AtomicBool>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

/// What a planner call needs from the host while it runs.
pub struct Session {
    pub app: Arc<App>,
    pub caller: Caller,
    pub db: Conn,
    pub source: Source,
    /// Whether `methods.invoke` may run mutations (only inside apply's transaction).
    pub composite: bool,
}

/// The data of one store: the session and the memory limiter.
pub struct Guest {
    session: Session,
    limits: Limits,
}

struct Limits {
    memory_bytes: usize,
    exhausted: bool,
}

impl ResourceLimiter for Limits {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.exhausted = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

/// An entry point of the planner interface.
#[derive(Debug, Clone, Copy)]
pub enum Entry {
    Export,
    Plan,
    Apply,
}

impl Sandbox {
    /// Compiles `component` (or loads the artifact this host compiled before from
    /// `cache_dir`) and pre-links it.
    pub fn new(component: &[u8], budget: Budget, cache_dir: Option<&Path>) -> anyhow::Result<Sandbox> {
        let engine = engine(budget)?;
        let component = compile(&engine, component, cache_dir)?;
        let mut linker = Linker::new(&engine);
        FleetPlanner::add_to_linker::<Guest, HasSelf<Guest>>(&mut linker, |guest| guest)?;
        let planner = FleetPlannerPre::new(linker.instantiate_pre(&component)?)?;
        let stop_ticker = Arc::new(AtomicBool::new(false));
        let ticker_engine = engine.clone();
        let stop = stop_ticker.clone();
        std::thread::Builder::new().name("fleet-epoch".into()).spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(TICK);
                ticker_engine.increment_epoch();
            }
        })?;
        Ok(Sandbox { engine, planner, budget, stop_ticker })
    }

    /// Runs one entry point in a fresh instance and returns the session (so the caller
    /// gets its connection back) with the result.
    pub fn call(&self, session: Session, entry: Entry, request: &str) -> (Session, Result<String, ApiError>) {
        let started = std::time::Instant::now();
        let app = session.app.clone();
        app.metrics.sandbox_instances.inc();
        let guest = Guest { session, limits: Limits { memory_bytes: self.budget.memory_bytes, exhausted: false } };
        let mut store = Store::new(&self.engine, guest);
        store.limiter(|guest| &mut guest.limits);
        let ticks = (self.budget.cpu.as_millis() / TICK.as_millis()).max(1) as u64;
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();

        let result = self.planner.instantiate(&mut store).and_then(|planner| {
            let planner = planner.compute_fleet_planner();
            match entry {
                Entry::Export => planner.call_export(&mut store, request),
                Entry::Plan => planner.call_plan(&mut store, request),
                Entry::Apply => planner.call_apply(&mut store, request),
            }
        });
        let exhausted = store.data().limits.exhausted;
        let session = store.into_data().session;
        let result = match result {
            Ok(Ok(output)) if output.len() > MAX_OUTPUT => Err(ApiError::new(
                Code::ResourceExhausted,
                format!("the planner's result is larger than {} MiB", MAX_OUTPUT >> 20),
            )),
            Ok(Ok(output)) => match serde_json::from_str::<serde::de::IgnoredAny>(&output) {
                Ok(_) => Ok(output),
                Err(error) => Err(ApiError::internal(format_args!("the planner returned invalid JSON: {error}"))),
            },
            Ok(Err(error)) => Err(from_wit_error(error)),
            Err(trap) => {
                let error = trap_error(&trap, exhausted, entry);
                match (error.code, exhausted) {
                    (_, true) => app.metrics.exhausted(Exhausted::Memory),
                    (Code::ResourceExhausted, false) if trap.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => {
                        app.metrics.exhausted(Exhausted::Cpu);
                    }
                    (Code::Internal, false) => app.metrics.sandbox_traps.inc(),
                    _ => {}
                }
                Err(error)
            }
        };
        crate::metrics::add_sandbox_time(started.elapsed());
        (session, result)
    }
}

fn engine(budget: Budget) -> anyhow::Result<Engine> {
    let mut config = Config::new();
    config.epoch_interruption(true);
    let mut pooling = PoolingAllocationConfig::default();
    pooling
        .total_component_instances(MAX_INSTANCES)
        .total_core_instances(MAX_INSTANCES)
        .total_memories(MAX_INSTANCES)
        .total_tables(MAX_INSTANCES)
        .max_memory_size(budget.memory_bytes);
    // Between requests up to this much of a slot's resident memory (found with Linux's
    // PAGEMAP_SCAN where the kernel has it, else its lowest pages) is reset with memset
    // rather than released: the next request takes no page faults there, and no
    // TLB-flushing madvise.
    pooling
        .pagemap_scan(wasmtime::Enabled::Auto)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
    match Engine::new(&config) {
        Ok(engine) => Ok(engine),
        Err(error) => {
            tracing::warn!(%error, "the pooling allocator is unavailable here; using on-demand allocation");
            config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
            Ok(Engine::new(&config)?)
        }
    }
}

/// Compiling costs tens of milliseconds in release and seconds in debug builds, so the
/// artifact is kept on disk, named by the component's hash and the engine's
/// compatibility hash, with a checksum beside it. Only artifacts this host wrote, for
/// this exact component and engine configuration, are ever loaded.
fn compile(engine: &Engine, component: &[u8], cache_dir: Option<&Path>) -> anyhow::Result<Component> {
    let Some(cache_dir) = cache_dir else {
        return Ok(Component::new(engine, component)?);
    };
    let mut hasher = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let key = format!("{}-{:016x}", &sha256_hex(component)[..32], hasher.finish());
    let artifact = cache_dir.join(format!("planner-{key}.cwasm"));
    let checksum = artifact.with_extension("sha256");
    if let (Ok(bytes), Ok(expected)) = (std::fs::read(&artifact), std::fs::read_to_string(&checksum))
        && sha256_hex(&bytes) == expected.trim()
    {
        // SAFETY: wasmtime runs deserialized code as is. These bytes are an artifact
        // this host serialized itself for this component and engine configuration (the
        // file name), and they match the checksum it wrote beside them.
        #[expect(unsafe_code, reason = "loading our own precompiled artifact")]
        match unsafe { Component::deserialize(engine, &bytes) } {
            Ok(component) => return Ok(component),
            Err(error) => tracing::warn!(%error, path = %artifact.display(), "ignoring an unusable cached artifact"),
        }
    }
    let compiled = Component::new(engine, component)?;
    if let Err(error) = write_artifact(cache_dir, &artifact, &checksum, &compiled) {
        tracing::warn!(%error, dir = %cache_dir.display(), "cannot cache the compiled planner");
    }
    Ok(compiled)
}

fn write_artifact(cache_dir: &Path, artifact: &Path, checksum: &Path, component: &Component) -> anyhow::Result<()> {
    std::fs::create_dir_all(cache_dir)?;
    let bytes = component.serialize()?;
    let unique = format!("{}.{}", std::process::id(), rand::random::<u64>());
    let temporary = artifact.with_extension(format!("cwasm.{unique}"));
    std::fs::write(&temporary, &bytes)?;
    std::fs::rename(&temporary, artifact)?;
    let temporary = checksum.with_extension(format!("sha256.{unique}"));
    std::fs::write(&temporary, sha256_hex(&bytes))?;
    std::fs::rename(&temporary, checksum)?;
    Ok(())
}

fn sha256_hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(&sha2::Sha256::digest(bytes))
}

/// A trap is never bad input: it is an exhausted budget or a bug.
fn trap_error(trap: &wasmtime::Error, memory_exhausted: bool, entry: Entry) -> ApiError {
    if trap.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return ApiError::new(Code::ResourceExhausted, "the planner ran out of its CPU budget");
    }
    if memory_exhausted {
        return ApiError::new(Code::ResourceExhausted, "the planner ran out of its memory budget");
    }
    if let Some(error) = trap.downcast_ref::<ApiError>() {
        return error.clone();
    }
    if trap.downcast_ref::<Trap>() == Some(&Trap::AllocationTooLarge) {
        return ApiError::new(Code::ResourceExhausted, "the sandbox has no room for another planner right now");
    }
    ApiError::internal(format_args!("the planner trapped in {entry:?}: {trap:?}"))
}

fn from_wit_error(error: types::Error) -> ApiError {
    use types::ErrorCode as W;
    let code = match error.code {
        W::InvalidArgument => Code::InvalidArgument,
        W::Unauthenticated => Code::Unauthenticated,
        W::PermissionDenied => Code::PermissionDenied,
        W::NotFound => Code::NotFound,
        W::AlreadyExists => Code::AlreadyExists,
        W::FailedPrecondition => Code::FailedPrecondition,
        W::InvalidState => Code::InvalidState,
        W::ConfigDrift => Code::ConfigDrift,
        W::PayloadTooLarge => Code::PayloadTooLarge,
        W::ResourceExhausted => Code::ResourceExhausted,
        W::Unsupported => Code::Unsupported,
        W::Unavailable => Code::Unavailable,
        W::Internal => Code::Internal,
    };
    let details = match error.details.as_str() {
        "" => None,
        text => serde_json::from_str::<Value>(text).ok().filter(Value::is_object),
    };
    ApiError { code, message: error.message, details, cause: None }
}

fn into_wit_error(error: ApiError) -> types::Error {
    use types::ErrorCode as W;
    let code = match error.code {
        Code::InvalidArgument => W::InvalidArgument,
        Code::Unauthenticated => W::Unauthenticated,
        Code::PermissionDenied => W::PermissionDenied,
        Code::NotFound => W::NotFound,
        Code::AlreadyExists => W::AlreadyExists,
        Code::FailedPrecondition => W::FailedPrecondition,
        Code::InvalidState => W::InvalidState,
        Code::ConfigDrift => W::ConfigDrift,
        Code::PayloadTooLarge => W::PayloadTooLarge,
        Code::ResourceExhausted => W::ResourceExhausted,
        Code::Unsupported => W::Unsupported,
        Code::Unavailable => W::Unavailable,
        Code::Internal => W::Internal,
    };
    types::Error {
        code,
        message: error.message,
        details: error.details.map(|details| details.to_string()).unwrap_or_default(),
    }
}

// ---- the module adapters -------------------------------------------------------------

/// Where the state the guest reads comes from.
pub enum Source {
    /// The caller's tenant in the database, one table per import call.
    Database,
    /// A fixed snapshot (golden cases, benchmarks); each table is handed over once.
    Snapshot(Box<Snapshot>),
}

impl Guest {
    /// Reads one table: from the snapshot, or from the database as the caller's tenant.
    fn read<T>(
        &mut self,
        from_snapshot: impl FnOnce(&mut Snapshot) -> Vec<T>,
        from_database: impl FnOnce(&App, &rusqlite::Connection, &str) -> Result<Vec<T>, ApiError>,
    ) -> wasmtime::Result<Vec<T>> {
        let session = &mut self.session;
        match &mut session.source {
            Source::Snapshot(snapshot) => Ok(from_snapshot(snapshot)),
            Source::Database => Ok(from_database(&session.app, &session.db, &session.caller.tenant)?),
        }
    }
}

fn wit_kind(kind: Kind) -> types::Kind {
    match kind {
        Kind::Site => types::Kind::Site,
        Kind::ProviderAccount => types::Kind::ProviderAccount,
        Kind::Pool => types::Kind::Pool,
        Kind::OwnerQuota => types::Kind::OwnerQuota,
        Kind::Offer => types::Kind::Offer,
        Kind::Flavor => types::Kind::Flavor,
    }
}

fn pairs(map: fleet_guest::state::StringMap) -> Vec<(String, String)> {
    map.into_iter().collect()
}

impl types::Host for Guest {}

impl state::Host for Guest {
    fn current_caller(&mut self) -> wasmtime::Result<types::Caller> {
        let caller = &self.session.caller;
        Ok(types::Caller { tenant: caller.tenant.clone(), principal: caller.principal.clone() })
    }

    fn modules(&mut self) -> wasmtime::Result<Vec<types::Kind>> {
        let kinds = match &self.session.source {
            Source::Snapshot(snapshot) => snapshot.modules.clone(),
            Source::Database => Kind::ALL.into_iter().filter(|kind| self.session.app.runs(*kind)).collect(),
        };
        Ok(kinds.into_iter().map(wit_kind).collect())
    }

    fn sites(&mut self) -> wasmtime::Result<Vec<state::Site>> {
        let rows = self.read(|snapshot| std::mem::take(&mut snapshot.sites), crate::state::sites)?;
        Ok(rows
            .into_iter()
            .map(|site| state::Site {
                id: site.id,
                region: site.region,
                description: site.description,
                labels: pairs(site.labels),
            })
            .collect())
    }

    fn provider_accounts(&mut self) -> wasmtime::Result<Vec<state::ProviderAccount>> {
        let rows =
            self.read(|snapshot| std::mem::take(&mut snapshot.provider_accounts), crate::state::provider_accounts)?;
        Ok(rows
            .into_iter()
            .map(|account| state::ProviderAccount {
                id: account.id,
                provider: account.provider,
                credentials_ref: account.credentials_ref,
                settings: pairs(account.settings),
            })
            .collect())
    }

    fn pools(&mut self) -> wasmtime::Result<Vec<state::Pool>> {
        let rows = self.read(|snapshot| std::mem::take(&mut snapshot.pools), crate::state::pools)?;
        Ok(rows
            .into_iter()
            .map(|pool| state::Pool {
                id: pool.id,
                site: pool.site,
                account: pool.account,
                class: pool.class,
                owner: pool.owner,
                vcpus: pool.vcpus,
                memory_mib: pool.memory_mib,
                gpus: pool.gpus,
                labels: pairs(pool.labels),
                archived: pool.archived,
            })
            .collect())
    }

    fn owner_quotas(&mut self) -> wasmtime::Result<Vec<state::OwnerQuota>> {
        let rows = self.read(|snapshot| std::mem::take(&mut snapshot.owner_quotas), crate::state::owner_quotas)?;
        Ok(rows
            .into_iter()
            .map(|quota| state::OwnerQuota {
                owner: quota.owner,
                vcpus: quota.vcpus,
                memory_mib: quota.memory_mib,
                gpus: quota.gpus,
                instances: quota.instances,
            })
            .collect())
    }

    fn offers(&mut self) -> wasmtime::Result<Vec<state::Offer>> {
        let rows = self.read(|snapshot| std::mem::take(&mut snapshot.offers), crate::state::offers)?;
        Ok(rows
            .into_iter()
            .map(|offer| state::Offer {
                id: offer.id,
                pool: offer.pool,
                to_owner: offer.to,
                vcpus: offer.vcpus,
                memory_mib: offer.memory_mib,
                gpus: offer.gpus,
            })
            .collect())
    }

    fn flavors(&mut self) -> wasmtime::Result<Vec<state::Flavor>> {
        let rows = self.read(|snapshot| std::mem::take(&mut snapshot.flavors), crate::state::flavors)?;
        Ok(rows
            .into_iter()
            .map(|flavor| state::Flavor {
                id: flavor.id,
                pool: flavor.pool,
                vcpus: flavor.vcpus,
                memory_mib: flavor.memory_mib,
                gpus: flavor.gpus,
                disk_gib: flavor.disk_gib,
                archived: flavor.archived,
            })
            .collect())
    }

    fn bindings(&mut self) -> wasmtime::Result<Vec<state::Binding>> {
        let rows = self.read(
            |snapshot| std::mem::take(&mut snapshot.bindings),
            |_, db, tenant| crate::fleet::bindings(db, tenant),
        )?;
        Ok(rows
            .into_iter()
            .map(|binding| state::Binding { kind: wit_kind(binding.kind), name: binding.name, id: binding.id })
            .collect())
    }
}

/// The largest method input the guest may hand back.
const MAX_INVOKE_INPUT: usize = 1 << 20;

impl methods::Host for Guest {
    /// Everything the guest passes is checked: the method must be a registered module
    /// mutation of this deployment, the input a JSON object of bounded size, and the call
    /// is authorized as the caller, like any HTTP call. The tenant is the store's.
    fn invoke(&mut self, method: String, input: String) -> wasmtime::Result<Result<String, types::Error>> {
        Ok(self.invoke_checked(&method, &input).map(|output| output.to_string()).map_err(into_wit_error))
    }
}

impl Guest {
    fn invoke_checked(&mut self, name: &str, input: &str) -> Result<Value, ApiError> {
        let session = &self.session;
        if !session.composite {
            return Err(ApiError::new(Code::Unsupported, "this host runs no composite methods"));
        }
        let method = session
            .app
            .registry
            .by_name(name)
            .filter(|method| method.kind == MethodKind::Mutation && method.module != "fleet")
            .ok_or_else(|| ApiError::not_found(format!("no module method {name:?}")))?;
        if input.len() > MAX_INVOKE_INPUT {
            return Err(ApiError::new(Code::InvalidArgument, "the method input is too large"));
        }
        let input = fleet_guest::json::parse(input).map_err(ApiError::invalid)?;
        auth::authorize(&session.caller, method)?;
        let ctx = Ctx { app: &session.app, caller: &session.caller, db: &session.db, via: Via::Apply };
        method.run_in(&ctx, input)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod golden;

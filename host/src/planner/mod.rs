//! The planner sandbox: the component compiled once, pre-linked into an `InstancePre`,
//! and a fresh `Store` per request with a CPU budget, a memory cap, a deadline, and the
//! caller it serves. Host imports only ever see that caller's tenant.
//!
//! The CPU budget is the planner's own work (SPEC §7, §12): the CPU time of the thread
//! that runs the guest, read where the epoch ticks, less what the host spends in its
//! imports on the guest's behalf (reading the state, running an apply's calls on the
//! database, plugins' checks). Neither waiting for a core nor the size of an apply or
//! the database's latency makes a call `RESOURCE_EXHAUSTED`. No more calls run at once
//! than the machine has cores ([`admission`]); the others wait in order. The whole call,
//! its wait included, is bounded by a deadline of its own (`--request-timeout`).

pub mod admission;
pub mod state;

use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use sha2::Digest;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store, Trap};

use crate::api::{ApiError, Code};
use crate::calls::auth::Caller;
use crate::calls::registry::Registry;
use crate::db::Conn;
use crate::metrics::{Exhausted, Metrics};
use crate::plugins::Plugins;

wasmtime::component::bindgen!({
    world: "fleet-planner",
    path: "../wit",
    imports: { default: trappable },
});

use compute::fleet::types;

/// The planner component built by `build.rs`.
pub const PLANNER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fleet_planner.wasm"));

/// A hostile guest of the same world (`test-programs/hostile`), for the sandbox tests.
#[cfg(test)]
pub const HOSTILE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fleet_hostile.wasm"));

/// How often the epoch advances; the CPU budget is counted in these ticks.
const TICK: Duration = Duration::from_millis(10);
/// How long a planner call may take in all, host time included, unless the server is
/// told otherwise (`--request-timeout`).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(5 * 60);
/// The most planner instances alive at once with the pooling allocator: 128 calls, and
/// the finished stores waiting to be dropped ([`RETIRING`]).
const MAX_INSTANCES: u32 = 128 + RETIRING as u32;
/// How much of a pooled slot's memory (and table) stays resident between requests: all
/// an almost empty call or a small plan touches, so that they take no page faults. The
/// pages a request wrote are found with `PAGEMAP_SCAN` and only those are reset, so
/// untouched resident pages cost nothing (`BENCHMARKS.md`: 128 KiB → 1 MiB took an
/// empty call from ~15.5 to ~12.6 µs; 4 and 64 MiB measured no better).
const KEEP_RESIDENT: usize = 1 << 20;
/// A call takes a free slot its module used before. When there is none, it takes a
/// never-used slot while fewer than this many slots are unused, and else evicts the
/// least recently used one. Unused slots are never released: wasmtime 48 keeps each
/// one's resident pages, so what idle slots hold is bounded only by the pool, at most
/// `MAX_INSTANCES × KEEP_RESIDENT` (136 MiB). That is why `KEEP_RESIDENT` stays small
/// although 64 MiB spares a 10k-object plan its page faults (`BENCHMARKS.md`, "Tried
/// and dropped").
const WARM_SLOTS: u32 = 32;
/// Finished stores [`Retirer`]'s thread drops at a time; while that many wait, a call
/// drops its store itself. Each holds a pooled slot until it is dropped.
const RETIRING: usize = 8;
/// The longest a finished store waits for the rest of its batch.
const LINGER: Duration = Duration::from_millis(50);

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
    planner: FleetPlannerPre<Slot>,
    budget: Budget,
    /// How long one call may take, host time and the wait for a core included.
    deadline: Duration,
    /// The calls that may run at once: one per core.
    admission: admission::Admission,
    metrics: Metrics,
    /// The module plugins whose kinds and checks the planner's `plugins` import serves.
    plugins: Arc<Plugins>,
    /// The most linear memory one call has grown to: how near calls come to the memory
    /// budget (the benchmark's figure of memory per planned object).
    largest_memory: AtomicUsize,
    retirer: Retirer,
    _ticker: Ticker,
}

/// What a store holds: the call's [`Guest`] while it runs. The call takes it back when
/// the guest returns, and the store is then only a pooled slot to reset.
type Slot = Option<Guest>;

/// A store's guest is taken back only once its call has ended.
const HELD: &str = "a store holds its guest until its call ends";

/// The guest of a store whose call is running.
fn live(slot: &mut Slot) -> &mut Guest {
    slot.as_mut().expect(HELD)
}

/// Drops finished stores on a thread of its own. Dropping a store resets its pooled
/// slot (the pages the guest wrote are zeroed, or copied again from the component's
/// image): two fifths of an almost empty call, which no answer needs to wait for. The
/// thread is woken once per [`RETIRING`] stores, since waking it costs about what a
/// reset does, or after [`LINGER`], so that a quiet server's slots are reset soon too.
/// Only small stores wait (see [`Retirer::retire`]), so what waits holds little memory.
/// It ends with the sandbox.
struct Retirer(Arc<Retiring>);

#[derive(Default)]
struct Retiring {
    stores: Mutex<Vec<Store<Slot>>>,
    batch_full: Condvar,
    closed: AtomicBool,
}

impl Retirer {
    fn start() -> anyhow::Result<Retirer> {
        let retiring = Arc::new(Retiring::default());
        let shared = retiring.clone();
        std::thread::Builder::new().name("fleet-sandbox-reset".into()).spawn(move || {
            while !shared.closed.load(Ordering::Relaxed) {
                let batch = {
                    let stores = shared.stores.lock().unwrap_or_else(PoisonError::into_inner);
                    let waiting =
                        |stores: &mut Vec<_>| stores.len() < RETIRING && !shared.closed.load(Ordering::Relaxed);
                    let (mut stores, _) = shared
                        .batch_full
                        .wait_timeout_while(stores, LINGER, waiting)
                        .unwrap_or_else(PoisonError::into_inner);
                    std::mem::take(&mut *stores)
                };
                drop(batch);
            }
        })?;
        Ok(Retirer(retiring))
    }

    /// Drops `store` on the retiring thread, or here when a batch is already waiting or
    /// when the guest's memory grew to `grown_to` past what a slot keeps resident: such a
    /// call was long beside its reset, and its memory is given back at once.
    fn retire(&self, store: Store<Slot>, grown_to: usize) {
        if grown_to > KEEP_RESIDENT {
            return drop(store);
        }
        let mut stores = self.0.stores.lock().unwrap_or_else(PoisonError::into_inner);
        if stores.len() >= RETIRING {
            drop(stores);
            return drop(store);
        }
        stores.push(store);
        if stores.len() == RETIRING {
            self.0.batch_full.notify_one();
        }
    }
}

impl Drop for Retirer {
    fn drop(&mut self) {
        // Under the lock, so that the thread cannot miss it between a look and a wait.
        let _stores = self.0.stores.lock().unwrap_or_else(PoisonError::into_inner);
        self.0.closed.store(true, Ordering::Relaxed);
        self.0.batch_full.notify_one();
    }
}

/// Advances an engine's epoch every [`TICK`] until dropped: the clock of CPU budgets.
pub(crate) struct Ticker(Arc<AtomicBool>);

impl Ticker {
    pub(crate) fn start(engine: &Engine) -> anyhow::Result<Ticker> {
        let stop = Arc::new(AtomicBool::new(false));
        let (engine, stopped) = (engine.clone(), stop.clone());
        std::thread::Builder::new().name("fleet-epoch".into()).spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(TICK);
                engine.increment_epoch();
            }
        })?;
        Ok(Ticker(stop))
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The cores this machine gives the process: how many planner calls run at once.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// The epoch ticks a CPU budget lasts.
pub(crate) fn ticks(cpu: Duration) -> u64 {
    (cpu.as_millis() / TICK.as_millis()).max(1) as u64
}

/// What a planner call needs from the host while it runs.
pub struct Session {
    pub caller: Caller,
    pub db: Conn,
    pub source: Source,
    /// What `methods.invoke` needs inside apply's transaction: the methods it may run,
    /// and where their audit records wait; none for export and plan.
    pub methods: Option<Apply>,
}

/// The calls of an apply: the methods they may run, and what they leave to be written
/// when the apply records itself (audit records with its plan hash, module objects).
pub struct Apply {
    pub registry: Arc<Registry>,
    pub deferred: crate::calls::registry::Deferred,
}

impl Apply {
    pub fn new(registry: Arc<Registry>) -> Apply {
        Apply { registry, deferred: Default::default() }
    }
}

/// The data of one store: the session, the memory limiter and the clock of the call.
pub struct Guest {
    session: Session,
    limits: Limits,
    plugins: Arc<Plugins>,
    clock: Clock,
    /// The policy the planner said it runs (SPEC §14): a budget exhausted now is its.
    judging: Option<String>,
    /// The result of the call so far, as the guest wrote it (`output.write`); at most
    /// [`Limits::memory_bytes`], as when a result had to fit in the guest's memory.
    output: Output,
    /// The call's running SHA-256 (`digest`): with the CPU's SHA instructions where it
    /// has them, which the guest's WebAssembly lacks.
    sha256: sha2::Sha256,
}

/// Where a call's time goes: the CPU budget counts the thread's CPU time that is not
/// spent in host imports; the deadline counts the time on the wall since the call came.
struct Clock {
    /// When the call came (before it waited for a core).
    started: std::time::Instant,
    /// The thread's CPU time when the guest started.
    cpu_started: Duration,
    /// The thread's CPU time spent in host imports so far.
    host: Duration,
    cpu: Duration,
    deadline: Duration,
}

/// The CPU time the calling thread has used: what the guest's budget counts. A thread
/// that waits for a core uses none.
pub(crate) fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(u64::try_from(now.tv_sec).unwrap_or_default(), u32::try_from(now.tv_nsec).unwrap_or_default())
}

/// How a call ran out of time.
enum OutOfTime {
    /// The planner's own work passed its CPU budget.
    Cpu,
    /// The call, host time included, passed its deadline.
    Deadline,
}

impl Clock {
    /// The planner's own work so far: the thread's CPU time since the guest started,
    /// less the host's.
    fn guest(&self) -> Duration {
        thread_cpu().saturating_sub(self.cpu_started).saturating_sub(self.host)
    }

    /// What is left of the budget, or how the call ran out of time.
    fn remaining(&self) -> Result<Duration, OutOfTime> {
        if self.started.elapsed() >= self.deadline {
            return Err(OutOfTime::Deadline);
        }
        self.cpu.checked_sub(self.guest()).filter(|left| !left.is_zero()).ok_or(OutOfTime::Cpu)
    }
}

/// The error a call that passed its deadline ends with (a host import's, or the epoch
/// callback's).
fn past_deadline(deadline: Duration) -> ApiError {
    ApiError::new(
        Code::ResourceExhausted,
        format!("the request ran past its deadline of {} (--request-timeout)", humantime::format_duration(deadline)),
    )
}

impl Guest {
    /// Runs a host import, its CPU time counted as the host's. An import that starts
    /// past the call's deadline fails at once.
    fn host_work<T>(&mut self, work: impl FnOnce(&mut Guest) -> wasmtime::Result<T>) -> wasmtime::Result<T> {
        if self.clock.started.elapsed() >= self.clock.deadline {
            return Err(past_deadline(self.clock.deadline).into());
        }
        let started = thread_cpu();
        let result = work(self);
        self.clock.host += thread_cpu().saturating_sub(started);
        result
    }
}

/// A store's memory cap, whether a guest hit it, and how far its memory grew.
#[derive(Default)]
pub(crate) struct Limits {
    pub(crate) memory_bytes: usize,
    pub(crate) exhausted: bool,
    /// The size the guest's memory grew to (linear memory never shrinks).
    pub(crate) grown_to: usize,
}

impl Limits {
    pub(crate) fn new(memory_bytes: usize) -> Limits {
        Limits { memory_bytes, ..Limits::default() }
    }
}

impl ResourceLimiter for Limits {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.exhausted = true;
            return Ok(false);
        }
        self.grown_to = self.grown_to.max(desired);
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
    pub fn new(
        component: &[u8],
        budget: Budget,
        cache_dir: Option<&Path>,
        metrics: Metrics,
    ) -> anyhow::Result<Sandbox> {
        let engine = engine(budget)?;
        let component = compile(&engine, component, cache_dir, "planner")?;
        let mut linker = Linker::new(&engine);
        FleetPlanner::add_to_linker::<Slot, HasSelf<Guest>>(&mut linker, live)?;
        let planner = FleetPlannerPre::new(linker.instantiate_pre(&component)?)?;
        let _ticker = Ticker::start(&engine)?;
        let plugins = Arc::new(Plugins::default());
        Ok(Sandbox {
            engine,
            planner,
            budget,
            deadline: DEFAULT_DEADLINE,
            admission: admission::Admission::new(cores()),
            metrics,
            plugins,
            largest_memory: AtomicUsize::new(0),
            retirer: Retirer::start()?,
            _ticker,
        })
    }

    /// The sandbox, with calls bounded by `deadline` in all (host time included).
    pub fn with_deadline(self, deadline: Duration) -> Sandbox {
        Sandbox { deadline, ..self }
    }

    /// The sandbox, with at most `calls` running at once (one per core unless told).
    pub fn with_concurrency(self, calls: usize) -> Sandbox {
        Sandbox { admission: admission::Admission::new(calls), ..self }
    }

    /// The sandbox, with the module plugins the planner plans.
    pub fn with_plugins(self, plugins: Arc<Plugins>) -> Sandbox {
        Sandbox { plugins, ..self }
    }

    /// The most linear memory one call of this sandbox has grown to, in bytes. A call's
    /// memory starts at the component's own (its data, stack and first heap).
    pub fn largest_memory(&self) -> usize {
        self.largest_memory.load(Ordering::Relaxed)
    }

    /// Runs one entry point in a fresh instance and returns the session (so the caller
    /// gets its connection back) with the result.
    pub fn call(&self, session: Session, entry: Entry, request: &str) -> (Session, Result<String, ApiError>) {
        let started = std::time::Instant::now();
        let Some(_admitted) = self.admission.enter(started + self.deadline) else {
            let waited = humantime::format_duration(self.deadline);
            let message = format!(
                "the request waited for a free core past its deadline of {waited} (--request-timeout); \
                 {} planner calls run at once here",
                self.admission.capacity()
            );
            return (session, Err(ApiError::new(Code::ResourceExhausted, message)));
        };
        let metrics = &self.metrics;
        metrics.sandbox_instances.inc();
        let limits = Limits::new(self.budget.memory_bytes);
        let clock = Clock {
            started,
            cpu_started: thread_cpu(),
            host: Duration::ZERO,
            cpu: self.budget.cpu,
            deadline: self.deadline,
        };
        let guest = Guest {
            session,
            limits,
            plugins: self.plugins.clone(),
            clock,
            judging: None,
            output: Output::default(),
            sha256: Default::default(),
        };
        let mut store = Store::new(&self.engine, Some(guest));
        store.limiter(|slot| &mut live(slot).limits);
        // The epoch also advances while the host works in an import: when the deadline
        // comes, the budget is what the guest itself used, and the rest is given again.
        store.set_epoch_deadline(ticks(self.budget.cpu));
        store.epoch_deadline_callback(|mut store| {
            let clock = &live(store.data_mut()).clock;
            match clock.remaining() {
                Ok(left) => Ok(wasmtime::UpdateDeadline::Continue(ticks(left))),
                Err(OutOfTime::Cpu) => Err(Trap::Interrupt.into()),
                Err(OutOfTime::Deadline) => Err(past_deadline(clock.deadline).into()),
            }
        });

        let result = self.planner.instantiate(&mut store).and_then(|planner| {
            let planner = planner.compute_fleet_planner();
            match entry {
                Entry::Export => planner.call_export(&mut store, request),
                Entry::Plan => planner.call_plan(&mut store, request),
                Entry::Apply => planner.call_apply(&mut store, request),
            }
        });
        let Guest { session, output, limits, judging, clock, .. } = store.data_mut().take().expect(HELD);
        self.retirer.retire(store, limits.grown_to);
        let exhausted = limits.exhausted;
        self.largest_memory.fetch_max(limits.grown_to, Ordering::Relaxed);
        let guest_time = clock.guest();
        let result = match result {
            Ok(Ok(())) => checked_output(output),
            Ok(Err(error)) => Err(from_wit_error(error)),
            Err(trap) => {
                let mut error = trap_error(&trap, exhausted, entry);
                if let (Code::ResourceExhausted, Some(policy)) = (error.code, &judging) {
                    error.message = format!("{} while the policy {policy} ran", error.message);
                    error.details = Some(serde_json::json!({ "policy": policy }));
                }
                match (error.code, exhausted) {
                    (_, true) => metrics.exhausted(Exhausted::Memory),
                    (Code::ResourceExhausted, false) if trap.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => {
                        metrics.exhausted(Exhausted::Cpu);
                    }
                    (Code::Internal, false) => metrics.sandbox_traps.inc(),
                    _ => {}
                }
                Err(error)
            }
        };
        crate::metrics::add_sandbox_time(guest_time);
        (session, result)
    }
}

/// A call's result as the chunks the guest wrote, each kept as the binding handed it
/// over: joined once at the end, at its final size, rather than copied into a buffer
/// that is copied again each time it doubles (a 1M-object plan's is 718 MB).
#[derive(Default)]
pub(crate) struct Output {
    chunks: Vec<Vec<u8>>,
    len: usize,
}

impl Output {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn push(&mut self, chunk: Vec<u8>) {
        self.len += chunk.len();
        self.chunks.push(chunk);
    }

    /// The result whole: a result of one chunk (any small call's) is that chunk, with
    /// no copy.
    fn into_bytes(mut self) -> Vec<u8> {
        if self.chunks.len() == 1 {
            return self.chunks.pop().unwrap_or_default();
        }
        let mut bytes = Vec::with_capacity(self.len);
        // Each chunk is freed once copied, so that the result is not held twice.
        for chunk in self.chunks {
            bytes.extend_from_slice(&chunk);
        }
        bytes
    }
}

/// What the guest wrote, if it is JSON text: the host trusts no guest.
fn checked_output(output: Output) -> Result<String, ApiError> {
    let output = String::from_utf8(output.into_bytes())
        .map_err(|error| ApiError::internal(format_args!("the planner wrote text that is not UTF-8: {error}")))?;
    match serde_json::from_str::<serde::de::IgnoredAny>(&output) {
        Ok(_) => Ok(output),
        Err(error) => Err(ApiError::internal(format_args!("the planner returned invalid JSON: {error}"))),
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
        .table_keep_resident(KEEP_RESIDENT)
        .max_unused_warm_slots(WARM_SLOTS);
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
pub(crate) fn compile(
    engine: &Engine,
    component: &[u8],
    cache_dir: Option<&Path>,
    label: &str,
) -> anyhow::Result<Component> {
    let Some(cache_dir) = cache_dir else {
        return Ok(Component::new(engine, component)?);
    };
    let mut hasher = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let key = format!("{}-{:016x}", &sha256_hex(component)[..32], hasher.finish());
    let artifact = cache_dir.join(format!("{label}-{key}.cwasm"));
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
        tracing::warn!(%error, dir = %cache_dir.display(), "cannot cache the compiled {label}");
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

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
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
        W::MethodNotAllowed => Code::MethodNotAllowed,
        W::AlreadyExists => Code::AlreadyExists,
        W::FailedPrecondition => Code::FailedPrecondition,
        W::InvalidState => Code::InvalidState,
        W::ConfigDrift => Code::ConfigDrift,
        W::PolicyDenied => Code::PolicyDenied,
        W::PayloadTooLarge => Code::PayloadTooLarge,
        W::ResourceExhausted => Code::ResourceExhausted,
        W::Unsupported => Code::Unsupported,
        W::Unavailable => Code::Unavailable,
        W::Internal => Code::Internal,
    };
    let details = match error.details.as_str() {
        "" => None,
        text => serde_json::from_str::<serde_json::Value>(text).ok().filter(serde_json::Value::is_object),
    };
    ApiError { code, message: error.message, details, cause: None }
}

pub(crate) fn into_wit_error(error: ApiError) -> types::Error {
    use types::ErrorCode as W;
    let code = match error.code {
        Code::InvalidArgument => W::InvalidArgument,
        Code::Unauthenticated => W::Unauthenticated,
        Code::PermissionDenied => W::PermissionDenied,
        Code::NotFound => W::NotFound,
        Code::MethodNotAllowed => W::MethodNotAllowed,
        Code::AlreadyExists => W::AlreadyExists,
        Code::FailedPrecondition => W::FailedPrecondition,
        Code::InvalidState => W::InvalidState,
        Code::ConfigDrift => W::ConfigDrift,
        Code::PolicyDenied => W::PolicyDenied,
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

mod imports;
pub use imports::Source;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod golden;

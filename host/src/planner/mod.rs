//! The planner sandbox: the component compiled once, pre-linked into an `InstancePre`,
//! and a fresh `Store` per request with a CPU budget, a memory cap, a deadline, and the
//! caller it serves. Host imports only ever see that caller's tenant.
//!
//! The CPU budget is the planner's own work (SPEC §7, §12): the CPU time of the thread
//! that runs the guest, read where the epoch ticks, less what the host spends in its
//! imports on the guest's behalf (reading the state, running an apply's calls on the
//! database, plugins' checks). Neither waiting for a core nor the size of an apply or
//! the database's latency makes a call `RESOURCE_EXHAUSTED`. No more calls run at once
//! than the machine has cores, nor than the sandboxes' memory total holds at their caps
//! (`sandbox::admission`); the others wait in order, small calls in a lane of their own.
//! The whole call, its wait included, is bounded by a deadline of its own
//! (`--request-timeout`).

mod errors;
mod imports;
mod output;
mod retire;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};

use crate::api::{ApiError, Code};
use crate::calls::auth::Caller;
use crate::calls::context::Deferred;
use crate::calls::registry::Registry;
use crate::db::Conn;
use crate::metrics::{Exhausted, Metrics};
use crate::plugins::Plugins;
use crate::sandbox::admission::{Admission, Gauges, Need};
use crate::sandbox::{Budget, Clock, Limits, OutOfTime, Ticker, compile, cores, past_deadline, ticks};
use output::{Output, checked_output};
use retire::{RETIRING, Retirer};

pub use fleet_guest::ApprovalGate;
pub use imports::{Source, StateSource};

wasmtime::component::bindgen!({
    world: "fleet-planner",
    path: "../wit",
    imports: { default: trappable },
});

/// The planner component built by `build.rs`.
pub static PLANNER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fleet_planner.wasm"));

/// A hostile guest of the same world (`test-programs/hostile`), for the sandbox tests.
#[cfg(test)]
pub const HOSTILE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fleet_hostile.wasm"));

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

pub struct Sandbox {
    engine: Engine,
    planner: FleetPlannerPre<Slot>,
    budget: Budget,
    /// How long one call may take, host time and the wait for a core included.
    deadline: Duration,
    /// The calls that may run at once: one per core.
    admission: Admission,
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

/// What a planner call needs from the host while it runs, and what it leaves: the
/// connection comes back, and the guest's CPU time of the session's calls so far.
pub struct Session {
    pub caller: Caller,
    /// The principal the planner plans as, when not the caller: a proposal's author,
    /// whose principal its creates' ids derive from (SPEC §6.2, §17). Every call is
    /// still authorized as the caller.
    pub planned_as: Option<String>,
    pub db: Conn,
    pub source: Source,
    /// What `methods.invoke` needs inside apply's transaction: the methods it may run,
    /// and where their audit records wait; none for export and plan.
    pub methods: Option<Apply>,
    /// What an apply must have before it runs its calls (SPEC §17).
    pub gate: ApprovalGate,
    /// The guest's own CPU time in this session's calls: what the request log reports
    /// as its sandbox time.
    pub sandbox: Duration,
}

impl Session {
    /// A session of `caller` on `db`, reading its state from `source`.
    pub fn new(caller: Caller, db: Conn, source: Source) -> Session {
        Session {
            caller,
            planned_as: None,
            db,
            source,
            methods: None,
            gate: ApprovalGate::Verdicts,
            sandbox: Duration::ZERO,
        }
    }

    /// The session, planning as `principal` (a proposal's author) for the caller.
    pub fn planned_as(self, principal: Option<String>) -> Session {
        Session { planned_as: principal, ..self }
    }

    /// The session, its apply held back by `gate`.
    pub fn gated(self, gate: ApprovalGate) -> Session {
        Session { gate, ..self }
    }

    /// The session, with the methods an apply's calls run.
    pub fn applying(self, registry: Arc<Registry>) -> Session {
        Session { methods: Some(Apply { registry, deferred: Deferred::default() }), ..self }
    }
}

/// The calls of an apply: the methods they may run, and what they leave to be written
/// when the apply records itself (audit records with its plan hash, module objects).
pub struct Apply {
    pub registry: Arc<Registry>,
    pub deferred: Deferred,
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

impl Guest {
    /// Runs a host import, its CPU time counted as the host's. An import that starts
    /// past the call's deadline fails at once.
    fn host_work<T>(&mut self, work: impl FnOnce(&mut Guest) -> wasmtime::Result<T>) -> wasmtime::Result<T> {
        if let Some(deadline) = self.clock.past_deadline() {
            return Err(past_deadline(deadline).into());
        }
        let started = crate::sandbox::thread_cpu();
        let result = work(self);
        self.clock.add_host(crate::sandbox::thread_cpu().saturating_sub(started));
        result
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
        Ok(Sandbox {
            engine,
            planner,
            budget,
            deadline: DEFAULT_DEADLINE,
            admission: Admission::new(cores(), crate::sandbox::default_memory_total().max(budget.memory_bytes))
                .reporting(gauges(&metrics)),
            metrics,
            plugins: Arc::new(Plugins::default()),
            largest_memory: AtomicUsize::new(0),
            retirer: Retirer::start()?,
            _ticker,
        })
    }

    /// The sandbox, with calls bounded by `deadline` in all (host time included).
    pub fn with_deadline(self, deadline: Duration) -> Sandbox {
        Sandbox { deadline, ..self }
    }

    /// The sandbox, its calls together holding at most `bytes` of memory at their caps
    /// (`--sandbox-memory-total-mib`), and always room for one.
    pub fn with_memory_total(self, bytes: usize) -> Sandbox {
        let bytes = bytes.max(self.budget.memory_bytes);
        let admission = Admission::new(self.admission.places(), bytes).reporting(gauges(&self.metrics));
        Sandbox { admission, ..self }
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
    /// gets its connection back, and the guest's time added to its sandbox time) with
    /// the result.
    pub fn call(&self, session: Session, entry: Entry, request: &str) -> (Session, Result<String, ApiError>) {
        let started = Instant::now();
        let need = Need { memory: self.budget.memory_bytes, small: small(&session, request) };
        let Some(_admitted) = self.admission.enter(need, started + self.deadline) else {
            let message = format!(
                "the request waited past its deadline of {} (--request-timeout) for a core or for sandbox memory: \
                 {} planner calls run at once here, holding at most {} MiB (--sandbox-memory-total-mib); try again",
                humantime::format_duration(self.deadline),
                self.admission.places(),
                self.admission.memory() >> 20
            );
            let busy = ApiError::new(Code::ResourceExhausted, message).retry_after(RETRY_AFTER_BUSY);
            return (session, Err(busy));
        };
        self.metrics.sandbox_instances.inc();
        let guest = Guest {
            session,
            limits: Limits::new(self.budget.memory_bytes),
            plugins: self.plugins.clone(),
            clock: Clock::start(started, self.budget.cpu, self.deadline),
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
                Err(OutOfTime::Deadline) => Err(past_deadline(clock.past_deadline().unwrap_or_default()).into()),
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
        let Guest { mut session, output, limits, judging, clock, .. } = store.data_mut().take().expect(HELD);
        self.retirer.retire(store, limits.grown_to);
        self.largest_memory.fetch_max(limits.grown_to, Ordering::Relaxed);
        session.sandbox += clock.guest();
        tracing::debug!(
            ?entry,
            guest_ms = clock.guest().as_secs_f64() * 1e3,
            memory_kib = limits.grown_to >> 10,
            output_bytes = output.len(),
            "the planner ran"
        );
        let result = match result {
            Ok(Ok(())) => checked_output(output),
            Ok(Err(error)) => Err(errors::from_wit_error(error)),
            Err(trap) => Err(self.trapped(&trap, limits.exhausted, entry, judging.as_deref())),
        };
        (session, result)
    }

    /// The error of a call that trapped, counted in the metrics; a budget exhausted
    /// while a policy ran names it.
    fn trapped(&self, trap: &wasmtime::Error, memory_exhausted: bool, entry: Entry, policy: Option<&str>) -> ApiError {
        let mut error = errors::trap_error(trap, memory_exhausted, entry);
        if let (Code::ResourceExhausted, Some(policy)) = (error.code, policy) {
            error.message = format!("{} while the policy {policy} ran", error.message);
            error.details = Some(serde_json::json!({ "policy": policy }));
        }
        match (error.code, memory_exhausted) {
            (_, true) => self.metrics.exhausted(Exhausted::Memory),
            (Code::ResourceExhausted, false) if trap.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => {
                self.metrics.exhausted(Exhausted::Cpu);
            }
            (Code::Internal, false) => self.metrics.sandbox_traps.inc(),
            _ => {}
        }
        error
    }
}

/// A request this long or shorter, on a state this large or smaller (as last read), is
/// a small call (`sandbox::admission`): a small plan, an export of a small estate.
const SMALL_REQUEST: usize = 64 << 10;
const SMALL_STATE: usize = 4 << 20;
/// When a call that waited in vain for a place may try again, in seconds.
const RETRY_AFTER_BUSY: u32 = 5;

fn gauges(metrics: &Metrics) -> Gauges {
    Gauges { waiting: metrics.sandbox_waiting.clone(), held: metrics.sandbox_memory_held.clone() }
}

/// Whether the call takes the small calls' lane: a small request on a state last read
/// small, or not read yet (a tenant's first call after a start).
fn small(session: &Session, request: &str) -> bool {
    let state = match &session.source {
        Source::Database(reader) => reader.last_size(&session.caller.tenant),
        Source::Encoded(state) => Some(state.len()),
    };
    request.len() <= SMALL_REQUEST && state.is_none_or(|bytes| bytes <= SMALL_STATE)
}

/// The engine: epoch interruption for the CPU budget, and a pool of instance slots.
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

#[cfg(test)]
mod tests;

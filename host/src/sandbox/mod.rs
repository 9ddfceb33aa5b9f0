//! The sandbox runtime that the planner and the module plugins share: what a call may
//! use (its [`Budget`]), the epoch [`Ticker`] its CPU budget is counted in, the
//! [`Clock`] that counts the guest's own CPU time, the memory [`Limits`] of a store,
//! the [`admission`] of calls to the machine's cores, and the on-disk cache of compiled
//! components ([`compile`]). Each component host (`planner`, `plugins`) builds its own
//! engine and stores from these.

pub mod admission;
mod compile;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use wasmtime::{Engine, ResourceLimiter};

use crate::api::{ApiError, Code};

pub use compile::{compile, sha256_hex};

/// What one call of a component may use.
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

/// How often the epoch advances; CPU budgets are checked at these ticks.
const TICK: Duration = Duration::from_millis(10);

/// Advances an engine's epoch every [`TICK`] until dropped: the clock of CPU budgets.
pub struct Ticker(Arc<AtomicBool>);

impl Ticker {
    pub fn start(engine: &Engine) -> anyhow::Result<Ticker> {
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

/// The epoch ticks a CPU budget lasts.
pub fn ticks(cpu: Duration) -> u64 {
    (cpu.as_millis() / TICK.as_millis()).max(1) as u64
}

/// The CPU time the calling thread has used: what a guest's budget counts. A thread
/// that waits for a core uses none.
pub fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(u64::try_from(now.tv_sec).unwrap_or_default(), u32::try_from(now.tv_nsec).unwrap_or_default())
}

/// The memory all planner calls may hold at once unless told: a quarter of the
/// machine's memory, at most 4 GiB (and 1 GiB when the machine's is unknown).
pub fn default_memory_total() -> usize {
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|meminfo| {
        let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
        let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    });
    machine.map_or(1 << 30, |bytes| (bytes / 4).min(4 << 30))
}

/// The cores this machine gives the process: how many calls run at once.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Where a call's time goes: the CPU budget counts the thread's CPU time that is not
/// spent in host imports; the deadline counts the time on the wall since the call came.
/// A call runs on one thread from instantiation to its end, so that thread's clock is
/// the guest's.
pub struct Clock {
    /// When the call came (before it waited for a core).
    started: Instant,
    /// The thread's CPU time when the guest started.
    cpu_started: Duration,
    /// The thread's CPU time spent in host imports so far.
    host: Duration,
    cpu: Duration,
    deadline: Duration,
}

/// How a call ran out of time.
pub enum OutOfTime {
    /// The guest's own work passed its CPU budget.
    Cpu,
    /// The call, host time included, passed its deadline.
    Deadline,
}

impl Clock {
    /// A call that came at `started`, whose guest starts now.
    pub fn start(started: Instant, cpu: Duration, deadline: Duration) -> Clock {
        Clock { started, cpu_started: thread_cpu(), host: Duration::ZERO, cpu, deadline }
    }

    /// The guest's own work so far: the thread's CPU time since it started, less the
    /// host's.
    pub fn guest(&self) -> Duration {
        thread_cpu().saturating_sub(self.cpu_started).saturating_sub(self.host)
    }

    /// What is left of the CPU budget, or how the call ran out of time.
    pub fn remaining(&self) -> Result<Duration, OutOfTime> {
        if self.started.elapsed() >= self.deadline {
            return Err(OutOfTime::Deadline);
        }
        self.cpu.checked_sub(self.guest()).filter(|left| !left.is_zero()).ok_or(OutOfTime::Cpu)
    }

    /// The deadline, when the call is past it.
    pub fn past_deadline(&self) -> Option<Duration> {
        (self.started.elapsed() >= self.deadline).then_some(self.deadline)
    }

    /// Counts `cpu` as the host's: the CPU time of a host import.
    pub fn add_host(&mut self, cpu: Duration) {
        self.host += cpu;
    }
}

/// The error a call that passed its deadline ends with.
pub fn past_deadline(deadline: Duration) -> ApiError {
    ApiError::new(
        Code::ResourceExhausted,
        format!("the request ran past its deadline of {} (--request-timeout)", humantime::format_duration(deadline)),
    )
}

/// A store's memory cap, whether a guest hit it, and how far its memory grew.
#[derive(Default)]
pub struct Limits {
    pub memory_bytes: usize,
    pub exhausted: bool,
    /// The size the guest's memory grew to (linear memory never shrinks).
    pub grown_to: usize,
}

impl Limits {
    pub fn new(memory_bytes: usize) -> Limits {
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

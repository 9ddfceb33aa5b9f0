//! The memory requests hold, counted against one total (`serve
//! --request-memory-total-mib`): a request's body as its bytes arrive, from its first
//! byte until its answer is made, and what reading it as JSON takes, held when a method
//! reads it. The sandboxes' total covers what planners take; this covers what the host
//! takes for them before and around a planner (a plan waiting for a core holds its
//! body) and for every other method. A request that would pass the total is refused at
//! once with `Retry-After`, not queued; what it held is given back when it is dropped,
//! on every path (an error, a client gone, a panic).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fleet_guest::json::Reading;

use crate::api::{ApiError, Code};

/// What a request of `length` bytes holds while a method reads it: its body, and the
/// most reading it as JSON may take ([`Reading::bounded`]).
pub fn held_for(length: usize) -> usize {
    length.saturating_add(Reading::bounded(&[], length).budget)
}

/// One total, shared by the requests being served.
#[derive(Debug)]
pub struct RequestMemory {
    total: usize,
    used: AtomicUsize,
}

/// What one request holds; given back when it is dropped.
#[derive(Debug)]
pub struct Held {
    memory: Arc<RequestMemory>,
    bytes: usize,
}

impl RequestMemory {
    pub fn new(total: usize) -> Arc<RequestMemory> {
        Arc::new(RequestMemory { total, used: AtomicUsize::new(0) })
    }

    /// What the requests being served hold now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Holds `bytes` for a request, or `RESOURCE_EXHAUSTED` when the total has no room.
    pub fn hold(self: &Arc<Self>, bytes: usize) -> Result<Held, ApiError> {
        let mut held = Held { memory: self.clone(), bytes: 0 };
        held.grow_to(bytes)?;
        Ok(held)
    }

    fn take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|after| *after <= self.total)
            })
            .is_ok()
    }
}

impl Held {
    /// Holds `bytes` in all, if that is more than held already.
    pub fn grow_to(&mut self, bytes: usize) -> Result<(), ApiError> {
        let more = bytes.saturating_sub(self.bytes);
        if more == 0 {
            return Ok(());
        }
        if !self.memory.take(more) {
            return Err(ApiError::new(
                Code::ResourceExhausted,
                format!(
                    "the server holds as much request memory as it may ({} MiB, serve --request-memory-total-mib); \
                     try again shortly",
                    self.memory.total >> 20
                ),
            )
            .retry_after(1));
        }
        self.bytes = bytes;
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.memory.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_hold_memory_until_dropped_and_none_passes_the_total() {
        let memory = RequestMemory::new(10 << 20);
        let mut first = memory.hold(4 << 20).expect("room");
        let second = memory.hold(4 << 20).expect("room");
        let refused = memory.hold(4 << 20).expect_err("no room");
        assert_eq!((refused.code, refused.retry_after), (Code::ResourceExhausted, Some(1)));
        assert!(first.grow_to(7 << 20).is_err(), "growing past the total is refused too");
        first.grow_to(6 << 20).expect("room to grow");
        assert_eq!(memory.used(), 10 << 20);
        drop(second);
        drop(first);
        assert_eq!(memory.used(), 0);
        assert!(held_for(16 << 20) > 17 * (16 << 20), "a body and sixteen times it to read");
    }
}

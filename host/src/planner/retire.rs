//! Finished stores are dropped off the call's path: dropping one resets its pooled slot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use wasmtime::Store;

use super::Slot;

/// Finished stores [`Retirer`]'s thread drops at a time; while that many wait, a call
/// drops its store itself. Each holds a pooled slot until it is dropped.
pub(super) const RETIRING: usize = 8;
/// The longest a finished store waits for the rest of its batch.
pub(super) const LINGER: Duration = Duration::from_millis(50);

/// Drops finished stores on a thread of its own. Dropping a store resets its pooled
/// slot (the pages the guest wrote are zeroed, or copied again from the component's
/// image): two fifths of an almost empty call, which no answer needs to wait for. The
/// thread is woken once per [`RETIRING`] stores, since waking it costs about what a
/// reset does, or after [`LINGER`], so that a quiet server's slots are reset soon too.
/// Only small stores wait (see [`Retirer::retire`]), so what waits holds little memory.
/// It ends with the sandbox.
pub(super) struct Retirer(Arc<Retiring>);

#[derive(Default)]
struct Retiring {
    stores: Mutex<Vec<Store<Slot>>>,
    batch_full: Condvar,
    closed: AtomicBool,
}

impl Retirer {
    pub(super) fn start() -> anyhow::Result<Retirer> {
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
    pub(super) fn retire(&self, store: Store<Slot>, grown_to: usize) {
        if grown_to > super::KEEP_RESIDENT {
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

#[cfg(test)]
impl Retirer {
    /// The finished stores waiting to be dropped.
    pub(super) fn waiting(&self) -> usize {
        self.0.stores.lock().unwrap_or_else(PoisonError::into_inner).len()
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

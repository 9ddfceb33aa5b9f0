//! Admission of sandboxed calls: no more run at once than the machine has cores, so
//! that a call's CPU budget is spent on its own work, not on waiting for a core. The
//! others wait in the order they came, each until its deadline (issue 50: twelve
//! concurrent large plans on two cores all ran out of a budget counted in wall time,
//! each having used a third of it).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Thread;
use std::time::Instant;

/// A first-come, first-served gate of `capacity` places. A place that frees is handed
/// straight to the call first in line, which alone is woken.
pub struct Admission {
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    running: usize,
    /// The calls waiting, oldest first.
    waiting: VecDeque<Arc<Waiter>>,
}

/// A call waiting for a place: its thread, and whether a place was handed to it.
struct Waiter {
    thread: Thread,
    admitted: AtomicBool,
}

/// A place taken; handed on, or given back, when dropped.
pub struct Admitted<'a>(&'a Admission);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.waiting.pop_front() {
            // The place passes to the next in line: `running` stays as it is.
            Some(next) => {
                next.admitted.store(true, Ordering::Release);
                drop(state);
                next.thread.unpark();
            }
            None => state.running -= 1,
        }
    }
}

impl Admission {
    /// A gate of `capacity` places (at least one).
    pub fn new(capacity: usize) -> Admission {
        Admission { capacity: capacity.max(1), state: Mutex::default() }
    }

    /// The number of places.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Waits for a place, behind every call that came earlier, until `deadline`;
    /// `None` when the deadline came first.
    pub fn enter(&self, deadline: Instant) -> Option<Admitted<'_>> {
        let waiter = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.waiting.is_empty() && state.running < self.capacity {
                state.running += 1;
                return Some(Admitted(self));
            }
            let waiter = Arc::new(Waiter { thread: std::thread::current(), admitted: AtomicBool::new(false) });
            state.waiting.push_back(waiter.clone());
            waiter
        };
        loop {
            if waiter.admitted.load(Ordering::Acquire) {
                return Some(Admitted(self));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                // A place handed over as the deadline came is taken after all.
                if waiter.admitted.load(Ordering::Acquire) {
                    return Some(Admitted(self));
                }
                state.waiting.retain(|waiting| !Arc::ptr_eq(waiting, &waiter));
                return None;
            }
            std::thread::park_timeout(left);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn no_more_than_its_places_run_at_once_and_the_rest_enter_in_order() {
        let pair = Admission::new(2);
        let (first, second) = (pair.enter(Instant::now()), pair.enter(Instant::now()));
        assert!(first.is_some() && second.is_some(), "two places");
        assert!(pair.enter(Instant::now() + Duration::from_millis(20)).is_none(), "full until the deadline");

        // One place, so that the order in which the waiters run is the order they
        // were let in.
        let admission = Arc::new(Admission::new(1));
        let first = admission.enter(Instant::now()).expect("a free place");

        let order = Arc::new(Mutex::new(Vec::new()));
        let waiters: Vec<_> = (0..4)
            .map(|n| {
                let (shared, order) = (admission.clone(), order.clone());
                let waiter = std::thread::spawn(move || {
                    let admission = shared;
                    let admitted = admission.enter(Instant::now() + Duration::from_secs(30)).expect("admitted in time");
                    order.lock().unwrap().push(n);
                    std::thread::sleep(Duration::from_millis(5));
                    drop(admitted);
                });
                // Each queues before the next comes.
                while admission.state.lock().unwrap().waiting.len() < n + 1 {
                    std::thread::yield_now();
                }
                waiter
            })
            .collect();
        drop(first);
        for waiter in waiters {
            waiter.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3], "first come, first served");
        assert_eq!(admission.state.lock().unwrap().running, 0);
    }

    #[test]
    fn a_call_that_gives_up_leaves_the_line_to_those_behind_it() {
        let admission = Arc::new(Admission::new(1));
        let held = admission.enter(Instant::now()).unwrap();
        let impatient = {
            let admission = admission.clone();
            std::thread::spawn(move || admission.enter(Instant::now() + Duration::from_millis(30)).is_some())
        };
        while admission.state.lock().unwrap().waiting.is_empty() {
            std::thread::yield_now();
        }
        let patient = {
            let admission = admission.clone();
            std::thread::spawn(move || admission.enter(Instant::now() + Duration::from_secs(30)).is_some())
        };
        assert!(!impatient.join().unwrap(), "its deadline came first");
        drop(held);
        assert!(patient.join().unwrap(), "the one behind it is not stuck behind a ticket that left");
    }
}

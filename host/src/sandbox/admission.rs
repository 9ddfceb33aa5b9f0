//! Admission of sandboxed calls. No more run at once than the machine has cores, so
//! that a call's CPU budget is spent on its own work, not on waiting for a core (issue
//! 50: twelve concurrent large plans on two cores all ran out of a budget counted in
//! wall time, each having used a third of it); and no more than the sandboxes' memory
//! total holds, each call counted at its memory cap (issue 54: twelve concurrent
//! 200k-object plans took 2.97 GB). The others wait in the order they came, each until
//! its deadline. Small calls (a small request on a small state) have a lane of their
//! own: one place beyond the cores and one cap of memory that large calls leave free,
//! so a small plan never waits behind large ones.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Thread;
use std::time::Instant;

/// What a call needs to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// Its memory cap, in bytes: the most its sandbox may grow to.
    pub memory: usize,
    /// Whether it takes the small calls' lane.
    pub small: bool,
}

/// A first-come, first-served gate of `places` places (one more for small calls) and
/// `memory` bytes. A place that frees is handed straight to the calls first in line
/// that now fit, which alone are woken.
pub struct Admission {
    places: usize,
    memory: usize,
    state: Mutex<State>,
    /// Where the calls waiting and the memory held are reported, if anywhere.
    gauges: Option<Gauges>,
}

/// The gauges an admission keeps current: calls waiting, and bytes held.
#[derive(Clone)]
pub struct Gauges {
    pub waiting: prometheus::IntGauge,
    pub held: prometheus::IntGauge,
}

#[derive(Default)]
struct State {
    running: usize,
    /// The memory of the calls running: the sum of their caps.
    used: usize,
    /// The calls waiting, oldest first.
    waiting: VecDeque<Arc<Waiter>>,
}

/// A call waiting for a place: its thread, its need, and whether it was let in.
struct Waiter {
    thread: Thread,
    need: Need,
    admitted: AtomicBool,
}

/// A place taken; handed on, or given back, when dropped.
pub struct Admitted<'a> {
    admission: &'a Admission,
    need: Need,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let admission = self.admission;
        let mut state = admission.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.running -= 1;
        state.used -= self.need.memory;
        // Those first in line of each lane that now fit, in the order they came.
        let mut woken = Vec::new();
        let mut blocked = [false; 2];
        let mut index = 0;
        while index < state.waiting.len() {
            let need = state.waiting[index].need;
            if blocked[usize::from(need.small)] || !admission.fits(&state, need) {
                blocked[usize::from(need.small)] = true;
                index += 1;
                continue;
            }
            let waiter = state.waiting.remove(index).expect("an index within the line");
            state.running += 1;
            state.used += need.memory;
            waiter.admitted.store(true, Ordering::Release);
            woken.push(waiter);
        }
        admission.report(&state);
        drop(state);
        for waiter in woken {
            waiter.thread.unpark();
        }
    }
}

impl Admission {
    /// A gate of `places` places (at least one) and `memory` bytes.
    pub fn new(places: usize, memory: usize) -> Admission {
        Admission { places: places.max(1), memory, state: Mutex::default(), gauges: None }
    }

    /// The gate, reporting to `gauges`.
    pub fn reporting(self, gauges: Gauges) -> Admission {
        Admission { gauges: Some(gauges), ..self }
    }

    fn report(&self, state: &State) {
        if let Some(gauges) = &self.gauges {
            gauges.waiting.set(i64::try_from(state.waiting.len()).unwrap_or(i64::MAX));
            gauges.held.set(i64::try_from(state.used).unwrap_or(i64::MAX));
        }
    }

    /// The number of places of large calls.
    pub fn places(&self) -> usize {
        self.places
    }

    /// The memory all calls may hold at once, in bytes.
    pub fn memory(&self) -> usize {
        self.memory
    }

    /// Whether a call of `need` may run beside those running: a small call may take one
    /// place more, and the memory large calls leave for one small call (when the total
    /// holds two calls' caps, or else no large call would ever run).
    fn fits(&self, state: &State, need: Need) -> bool {
        let (places, reserved) = match need.small {
            true => (self.places + 1, 0),
            false if self.memory >= 2 * need.memory => (self.places, need.memory),
            false => (self.places, 0),
        };
        state.running < places && state.used + need.memory + reserved <= self.memory
    }

    /// Waits for a place for `need`, behind every call of its lane that came earlier,
    /// until `deadline`; `None` when the deadline came first.
    pub fn enter(&self, need: Need, deadline: Instant) -> Option<Admitted<'_>> {
        let admitted = || Some(Admitted { admission: self, need });
        let waiter = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let lane_waiting = state.waiting.iter().any(|waiting| waiting.need.small == need.small);
            if !lane_waiting && self.fits(&state, need) {
                state.running += 1;
                state.used += need.memory;
                self.report(&state);
                return admitted();
            }
            let waiter = Arc::new(Waiter { thread: std::thread::current(), need, admitted: AtomicBool::new(false) });
            state.waiting.push_back(waiter.clone());
            self.report(&state);
            waiter
        };
        loop {
            if waiter.admitted.load(Ordering::Acquire) {
                return admitted();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                // A place handed over as the deadline came is taken after all.
                if waiter.admitted.load(Ordering::Acquire) {
                    return admitted();
                }
                state.waiting.retain(|waiting| !Arc::ptr_eq(waiting, &waiter));
                self.report(&state);
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

    const LARGE: Need = Need { memory: 100, small: false };
    const SMALL: Need = Need { memory: 100, small: true };

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(20)
    }

    #[test]
    fn no_more_than_its_places_run_at_once_and_the_rest_enter_in_order() {
        let pair = Admission::new(2, usize::MAX);
        let (first, second) = (pair.enter(LARGE, Instant::now()), pair.enter(LARGE, Instant::now()));
        assert!(first.is_some() && second.is_some(), "two places");
        assert!(pair.enter(LARGE, soon()).is_none(), "full until the deadline");

        // One place, so that the order in which the waiters run is the order they
        // were let in.
        let admission = Arc::new(Admission::new(1, usize::MAX));
        let first = admission.enter(LARGE, Instant::now()).expect("a free place");

        let order = Arc::new(Mutex::new(Vec::new()));
        let waiters: Vec<_> = (0..4)
            .map(|n| {
                let (shared, order) = (admission.clone(), order.clone());
                let waiter = std::thread::spawn(move || {
                    let admission = shared;
                    let admitted = admission.enter(LARGE, Instant::now() + Duration::from_secs(30)).expect("in time");
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
        let state = admission.state.lock().unwrap();
        assert_eq!((state.running, state.used), (0, 0));
    }

    #[test]
    fn a_call_that_gives_up_leaves_the_line_to_those_behind_it() {
        let admission = Arc::new(Admission::new(1, usize::MAX));
        let held = admission.enter(LARGE, Instant::now()).unwrap();
        let impatient = {
            let admission = admission.clone();
            std::thread::spawn(move || admission.enter(LARGE, Instant::now() + Duration::from_millis(30)).is_some())
        };
        while admission.state.lock().unwrap().waiting.is_empty() {
            std::thread::yield_now();
        }
        let patient = {
            let admission = admission.clone();
            std::thread::spawn(move || admission.enter(LARGE, Instant::now() + Duration::from_secs(30)).is_some())
        };
        assert!(!impatient.join().unwrap(), "its deadline came first");
        drop(held);
        assert!(patient.join().unwrap(), "the one behind it is not stuck behind a ticket that left");
    }

    #[test]
    fn calls_hold_no_more_memory_than_the_total_and_large_ones_leave_a_small_ones_share() {
        // Places enough; memory for three caps: two large calls and one small, or three
        // small ones.
        let admission = Admission::new(8, 300);
        let first = admission.enter(LARGE, Instant::now()).expect("room");
        let second = admission.enter(LARGE, Instant::now()).expect("room beside the share kept for small calls");
        assert!(admission.enter(LARGE, soon()).is_none(), "a third would take the small calls' share");
        let small = admission.enter(SMALL, Instant::now()).expect("the small calls' share");
        assert!(admission.enter(SMALL, soon()).is_none(), "the memory is all held");
        drop((first, second, small));
        let smalls: Vec<_> = (0..3).map(|_| admission.enter(SMALL, Instant::now())).collect();
        assert!(smalls.iter().all(Option::is_some), "small calls may use it all");

        // A total of less than two caps: large calls take it all, one at a time.
        let tight = Admission::new(8, 150);
        let only = tight.enter(LARGE, Instant::now()).expect("room for one");
        assert!(tight.enter(SMALL, soon()).is_none());
        drop(only);
    }

    #[test]
    fn a_small_call_passes_large_ones_waiting_for_a_core() {
        let admission = Arc::new(Admission::new(1, usize::MAX));
        let running = admission.enter(LARGE, Instant::now()).unwrap();
        let waiting_large = {
            let admission = admission.clone();
            std::thread::spawn(move || admission.enter(LARGE, Instant::now() + Duration::from_secs(30)).is_some())
        };
        while admission.state.lock().unwrap().waiting.is_empty() {
            std::thread::yield_now();
        }
        // The large one waits; a small one takes the lane's own place at once.
        let small = admission.enter(SMALL, soon()).expect("the small lane's place");
        assert!(admission.enter(SMALL, soon()).is_none(), "one place beyond the cores");
        drop((running, small));
        assert!(waiting_large.join().unwrap(), "the large one ran when a core freed");
    }
}

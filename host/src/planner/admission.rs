//! Admission of sandboxed calls: no more run at once than the machine has cores, so
//! that a call's CPU budget is spent on its own work, not on waiting for a core. The
//! others wait in the order they came, each until its deadline (issue 50: twelve
//! concurrent large plans on two cores all ran out of a budget counted in wall time,
//! each having used a third of it).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Instant;

/// A first-come, first-served gate of `capacity` places.
pub struct Admission {
    capacity: usize,
    state: Mutex<State>,
    turn: Condvar,
}

#[derive(Default)]
struct State {
    running: usize,
    /// The tickets of the calls waiting, oldest first.
    waiting: VecDeque<u64>,
    next_ticket: u64,
}

/// A place taken; given back when dropped.
pub struct Admitted<'a>(&'a Admission);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.running -= 1;
        drop(state);
        self.0.turn.notify_all();
    }
}

impl Admission {
    /// A gate of `capacity` places (at least one).
    pub fn new(capacity: usize) -> Admission {
        Admission { capacity: capacity.max(1), state: Mutex::default(), turn: Condvar::new() }
    }

    /// The number of places.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Waits for a place, behind every call that came earlier, until `deadline`;
    /// `None` when the deadline came first.
    pub fn enter(&self, deadline: Instant) -> Option<Admitted<'_>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.waiting.is_empty() && state.running < self.capacity {
            state.running += 1;
            return Some(Admitted(self));
        }
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.push_back(ticket);
        loop {
            if state.waiting.front() == Some(&ticket) && state.running < self.capacity {
                state.waiting.pop_front();
                state.running += 1;
                drop(state);
                // The next in line may have a place too.
                self.turn.notify_all();
                return Some(Admitted(self));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                state.waiting.retain(|waiting| *waiting != ticket);
                drop(state);
                self.turn.notify_all();
                return None;
            }
            state = self.turn.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn no_more_than_its_places_run_at_once_and_the_rest_enter_in_order() {
        let admission = Arc::new(Admission::new(2));
        let first = admission.enter(Instant::now()).expect("a free place");
        let second = admission.enter(Instant::now()).expect("a free place");
        assert!(admission.enter(Instant::now() + Duration::from_millis(20)).is_none(), "full until the deadline");

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
        drop(second);
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

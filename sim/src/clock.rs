//! `SimClock`: virtual time for the simulator, shared by every component of
//! one run.
//!
//! **Invariant:** time moves only when the harness says so (`advance_ms`,
//! `jump_to`); nothing in a simulated run reads the wall clock, so a seed
//! replays identically however fast the host is.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use actum::Clock;

/// A virtual millisecond clock. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct SimClock {
    now_ms: Arc<AtomicU64>,
}

impl SimClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        SimClock {
            now_ms: Arc::new(AtomicU64::new(start_ms)),
        }
    }

    /// Moves time forward by `delta_ms`; returns the new time.
    pub fn advance_ms(&self, delta_ms: u64) -> u64 {
        let before_ms = self.now_ms.fetch_add(delta_ms, Ordering::SeqCst);
        before_ms
            .checked_add(delta_ms)
            .expect("virtual time overflowed u64 milliseconds")
    }

    /// Sets the clock to `now_ms`, forwards or backwards: real clocks jump
    /// (NTP steps, VM migration), and leases must survive it.
    pub fn jump_to(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_time_which_moves_only_when_told() {
        let clock = SimClock::new(1_000);
        let shared = clock.clone();
        assert_eq!(shared.now_ms(), 1_000);
        assert_eq!(clock.advance_ms(500), 1_500);
        assert_eq!(shared.now_ms(), 1_500);
        shared.jump_to(10);
        assert_eq!(clock.now_ms(), 10);
    }

    #[test]
    fn is_usable_as_a_dyn_clock() {
        let clock: Arc<dyn Clock> = Arc::new(SimClock::new(7));
        assert_eq!(clock.now_ms(), 7);
    }
}

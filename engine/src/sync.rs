//! Synchronisation primitives, switched to loom's under the `loom` feature so the
//! concurrency kernels (group commit, command combining) can be
//! model-checked exhaustively.

#[cfg(feature = "loom")]
#[allow(unused_imports, reason = "not every kernel uses every primitive")]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(feature = "loom")]
pub(crate) use loom::thread::{Thread, current, park};

#[cfg(not(feature = "loom"))]
#[allow(unused_imports, reason = "not every kernel uses every primitive")]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(feature = "loom"))]
pub(crate) use std::thread::{Thread, current, park};

/// Work a caller's thread does for the engine as a whole (a checkpoint
/// replaying its records onto the state store and writing their rows)
/// gives way to the commit path: every [`GiveWay::EVERY`] units it yields
/// its core, so that when callers outnumber cores the commit path's
/// one-at-a-time stages (deciding under the engine lock, the group commit's
/// leader) do not wait behind it for the scheduler (docs/PERFORMANCE.md,
/// "A checkpoint that gives way"). A hint to the scheduler only: no lock
/// is held across a yield that the commit path takes, and nothing it
/// decides depends on it.
#[derive(Debug, Default)]
pub(crate) struct GiveWay {
    units: u32,
}

impl GiveWay {
    /// Units of work between two yields: a yield is a system call of well
    /// under a microsecond, a unit (one op applied, one row written) some
    /// microseconds.
    pub(crate) const EVERY: u32 = 8;

    /// One unit done; yields the core at every [`GiveWay::EVERY`]th.
    /// Returns whether it yielded.
    pub(crate) fn unit(&mut self) -> bool {
        self.units = self.units.wrapping_add(1);
        let turn = self.units.is_multiple_of(Self::EVERY);
        if turn {
            std::thread::yield_now();
        }
        turn
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::GiveWay;

    #[test]
    fn work_gives_way_once_every_so_many_units() {
        let mut give_way = GiveWay::default();
        let yielded: Vec<u32> = (1..=3 * GiveWay::EVERY)
            .filter(|_| give_way.unit())
            .collect();
        assert_eq!(
            yielded,
            vec![GiveWay::EVERY, 2 * GiveWay::EVERY, 3 * GiveWay::EVERY]
        );
    }
}

//! [`TickingClock`]: virtual time that moves a little on every read, and
//! now and then a lot, so that time passes *inside* the runtime's calls
//! (between an intent and its act, between a renewal and a send) and not
//! only between them, where a harness that moves time by hand would put it.
//!
//! **Invariant:** every step of time is drawn from the seed's generator,
//! one draw per read; the simulation is one thread, so the reads come in
//! the same order on every replay and so do the times they see.

use std::sync::{Mutex, PoisonError};

use actum::Clock;

use crate::clock::SimClock;
use crate::rng::Rng;

/// The most a read moves time by, outside a jump, in ms.
const TICK_MS_MAX: u64 = 3;

/// A clock that ticks when read.
#[derive(Debug)]
pub struct TickingClock {
    time: SimClock,
    drift: Mutex<Drift>,
}

#[derive(Debug)]
struct Drift {
    rng: Rng,
    /// Chance per read of a jump, in parts per million.
    jump_ppm: u32,
    /// How far a jump goes: at least `jump_ms.0`, below `jump_ms.1`.
    jump_ms: (u64, u64),
    jumps: u64,
}

impl TickingClock {
    /// Reads `time`, ticking by draws from `rng`; a jump moves it by
    /// `jump_ms.0 ..jump_ms.1` with chance `jump_ppm` per read.
    pub fn new(time: SimClock, rng: Rng, jump_ppm: u32, jump_ms: (u64, u64)) -> TickingClock {
        assert!(jump_ms.0 < jump_ms.1, "a jump range must not be empty");
        TickingClock {
            time,
            drift: Mutex::new(Drift {
                rng,
                jump_ppm,
                jump_ms,
                jumps: 0,
            }),
        }
    }

    /// The time, without moving it: what an observer outside the process
    /// (the harness's checks) sees.
    pub fn peek(&self) -> u64 {
        self.time.now_ms()
    }

    /// Moves time forward by `delta_ms` (a call that takes that long).
    pub fn advance_ms(&self, delta_ms: u64) -> u64 {
        self.time.advance_ms(delta_ms)
    }

    /// Stops the jumps (the faults are over); reads still tick.
    pub fn calm(&self) {
        self.drift().jump_ppm = 0;
    }

    /// Jumps taken so far.
    pub fn jumps(&self) -> u64 {
        self.drift().jumps
    }

    fn drift(&self) -> std::sync::MutexGuard<'_, Drift> {
        self.drift.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Clock for TickingClock {
    fn now_ms(&self) -> u64 {
        let delta = {
            let mut drift = self.drift();
            let mut delta = drift.rng.below(TICK_MS_MAX + 1);
            let ppm = drift.jump_ppm;
            if ppm > 0 && drift.rng.chance_ppm(ppm) {
                let (low, high) = drift.jump_ms;
                delta += low + drift.rng.below(high - low);
                drift.jumps += 1;
            }
            delta
        };
        self.time.advance_ms(delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tick_and_jump_as_the_seed_says_and_peek_does_not_move_time() {
        let read = |seed| {
            let clock =
                TickingClock::new(SimClock::new(0), Rng::new(seed), 100_000, (1_000, 2_000));
            let times: Vec<u64> = (0..100).map(|_| clock.now_ms()).collect();
            let peeked = clock.peek();
            assert_eq!(clock.peek(), peeked, "a peek moves nothing");
            assert_eq!(*times.last().expect("read"), peeked);
            assert!(
                times.windows(2).all(|w| w[0] <= w[1]),
                "time never goes back"
            );
            (times, clock.jumps())
        };
        let (times, jumps) = read(7);
        assert_eq!(read(7), (times.clone(), jumps), "one seed, one history");
        assert!(jumps > 0 && *times.last().expect("read") >= 1_000 * jumps);
        let clock = TickingClock::new(SimClock::new(0), Rng::new(7), 100_000, (1_000, 2_000));
        clock.calm();
        let calm: Vec<u64> = (0..100).map(|_| clock.now_ms()).collect();
        assert!(*calm.last().expect("read") <= 100 * TICK_MS_MAX);
        assert_eq!(clock.jumps(), 0);
    }
}

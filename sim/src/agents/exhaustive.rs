//! The exhaustive mode: the shop workflow (charge, ship) run by one worker,
//! in two families of schedules, each held to the same invariants as a
//! seed:
//!
//! 1. every combination of a fate for each of its two tool calls
//!    (delivered, ack dropped, request lost, declined), a crash point (none,
//!    or a crash before any step at which the worker acts) and a lease
//!    expiry (none, or a clock jump past the lease before any such step).
//!    The steps are found by a probe run of each fate pair, so every
//!    boundary is enumerated once and no combination is spent on a worker
//!    that is only waiting;
//! 2. a power cut at every I/O call of the clean run (both calls delivered),
//!    one schedule per call: inside every commit, fsync, segment rotation,
//!    automatic checkpoint and manifest update the run makes.
//!
//! **Invariant:** the enumeration is a fixed function of the engine and
//! the workflow: the same list every time, in the same order, so a failing
//! index replays.

use super::failure::AgentFailure;
use super::run::probe;
use super::schedule::{AgentSchedule, Event};
use super::workflow::Workflow;
use crate::disk::FaultConfig;
use crate::world::Fate;

/// Worker step slots of each schedule: enough for the shop to finish in the
/// fault phase under the worst pair of fates (two timeouts, a resend and a
/// query, a lease lost while waiting and reclaimed).
const SLOTS: usize = 120;
/// Virtual time before each slot: short against the 30 s lease, so a
/// working worker heartbeats only every few steps, while a worker waiting
/// out a lost reply (90 s) loses its lease.
const SLOT_TICK_MS: u16 = 4_000;
/// The jump that expires a lease.
const EXPIRY_JUMP_MS: u32 = 45_000;

const FATES: [Fate; 4] = [
    Fate::Delivered,
    Fate::AckDropped,
    Fate::RequestLost,
    Fate::Declined,
];

/// Every exhaustive schedule, in a fixed order; `Err` if a probe run (no
/// crash, no expiry) already breaks an invariant.
pub fn exhaustive_schedules() -> Result<Vec<AgentSchedule>, AgentFailure> {
    let mut schedules = Vec::new();
    for charge in FATES {
        for ship in FATES {
            let fates = [charge, ship];
            let clean = shop(0, fates, None, None);
            let points: Vec<Option<usize>> = std::iter::once(None)
                .chain(probe(&clean)?.acting_events.into_iter().map(Some))
                .collect();
            for crash in &points {
                for expiry in &points {
                    let seed = schedules.len() as u64;
                    schedules.push(shop(seed, fates, *crash, *expiry));
                }
            }
        }
    }
    let delivered = [Fate::Delivered, Fate::Delivered];
    let io_calls = probe(&shop(0, delivered, None, None))?.io_calls;
    let last = u16::try_from(io_calls).expect("a shop run makes fewer than 65,536 I/O calls");
    for call in 1..=last {
        let mut schedule = shop(schedules.len() as u64, delivered, None, None);
        schedule.events.insert(0, Event::ArmIoCrash(call));
        schedules.push(schedule);
    }
    Ok(schedules)
}

/// The shop schedule with these fates, a crash before event `crash` and a
/// lease expiry before event `expiry` (indexes into the clean schedule's
/// events).
fn shop(seed: u64, fates: [Fate; 2], crash: Option<usize>, expiry: Option<usize>) -> AgentSchedule {
    let mut events = Vec::with_capacity(2 * SLOTS + 2);
    for slot in 0..SLOTS {
        let pair = [
            (2 * slot, Event::Tick(SLOT_TICK_MS)),
            (2 * slot + 1, Event::Advance(0)),
        ];
        for (index, event) in pair {
            if expiry == Some(index) {
                events.push(Event::Jump(EXPIRY_JUMP_MS));
            }
            if crash == Some(index) {
                events.push(Event::Crash);
            }
            events.push(event);
        }
    }
    AgentSchedule {
        seed,
        runs: vec![Workflow::Shop],
        workers: 1,
        faults: FaultConfig::crash_only(),
        events,
        fates: fates.to_vec(),
        checkpoint_every_records: 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fate_pair_finishes_within_the_slots_and_crashes_fall_on_acting_steps() {
        for charge in FATES {
            for ship in FATES {
                let clean = shop(0, [charge, ship], None, None);
                let acting = probe(&clean).expect("a probe passes").acting_events;
                assert!(acting.len() >= 10, "{charge:?} {ship:?}: {acting:?}");
                let last = *acting.last().expect("the worker acts");
                assert!(
                    last < 2 * SLOTS - 4,
                    "{charge:?} {ship:?}: no slack after {last}"
                );
                assert!(acting.iter().all(|i| i % 2 == 1), "only advances act");
            }
        }
    }

    #[test]
    fn a_cut_at_the_first_a_middle_and_the_last_io_call_of_a_clean_run_lands() {
        let delivered = [Fate::Delivered, Fate::Delivered];
        let calls = probe(&shop(0, delivered, None, None))
            .expect("a probe passes")
            .io_calls;
        // Claims, transitions, intents, outcomes, checkpoints and the
        // automatic state checkpoints each make a few calls.
        assert!(calls >= 50, "{calls} I/O calls");
        for call in [1, calls / 2, calls] {
            let mut cut = shop(0, delivered, None, None);
            let at = u16::try_from(call).expect("fits");
            cut.events.insert(0, Event::ArmIoCrash(at));
            let report =
                crate::agents::run_agent_schedule(&cut, &crate::agents::AgentConfig::default())
                    .unwrap_or_else(|f| panic!("{f}"));
            assert!(
                report.crashes >= 1,
                "the cut at call {call} landed: {report:?}"
            );
        }
    }
}

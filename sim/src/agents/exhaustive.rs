//! The exhaustive mode: the shop workflow (charge, ship) run by one worker,
//! under every combination of a fate for each of its two tool calls
//! (delivered, ack dropped, request lost, declined), a crash point (none,
//! or a crash before any step at which the worker acts) and a lease expiry
//! (none, or a clock jump past the lease before any such step). The steps
//! a crash can fall before are found by a probe run of each fate pair, so
//! every boundary is enumerated once and no combination is spent on a
//! worker that is only waiting. Each combination is an ordinary schedule,
//! held to the same invariants as a seed.
//!
//! **Invariant:** the enumeration is a fixed function of the engine and
//! the workflow: the same list every time, in the same order, so a failing
//! index replays.

use super::failure::AgentFailure;
use super::run::acting_events;
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
            let probe = schedule(0, fates, None, None);
            let points: Vec<Option<usize>> = std::iter::once(None)
                .chain(acting_events(&probe)?.into_iter().map(Some))
                .collect();
            for crash in &points {
                for expiry in &points {
                    let seed = schedules.len() as u64;
                    schedules.push(schedule(seed, fates, *crash, *expiry));
                }
            }
        }
    }
    Ok(schedules)
}

/// The shop schedule with these fates, a crash before event `crash` and a
/// lease expiry before event `expiry` (indexes into the probe's events).
fn schedule(
    seed: u64,
    fates: [Fate; 2],
    crash: Option<usize>,
    expiry: Option<usize>,
) -> AgentSchedule {
    let mut events = Vec::with_capacity(2 * SLOTS + 2);
    for slot in 0..SLOTS {
        for (index, event) in [
            (2 * slot, Event::Tick(SLOT_TICK_MS)),
            (2 * slot + 1, Event::Advance(0)),
        ] {
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
                let probe = schedule(0, [charge, ship], None, None);
                let acting = acting_events(&probe).expect("a probe passes");
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
}

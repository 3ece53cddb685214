//! Fuzz target `agents`: the fuzzer's bytes are a whole agent schedule
//! (runs, workers, crash faults, call fates, events), decoded structurally
//! so a mutation changes one choice, and run through the agent campaign
//! with every invariant checked.
//!
//! Layout: seed (8 bytes); run count byte, then one workflow byte per run;
//! worker count byte; five crash-fault bytes (quarters: lost, torn,
//! garbage, size change lost, directory flushed); checkpoint interval
//! byte; fate count byte, then one byte per fate (two for a slow one);
//! then events, one opcode byte each plus its argument (two bytes for a
//! tick or an armed cut, four for a jump, one for a worker).
//!
//! **Invariant:** every input decodes to a valid schedule, and every
//! schedule keeps every invariant; a failure panics with its description.

use actum::books::OperatorAction;

use super::bytes::Bytes;
use crate::agents::run_agent_schedule;
use crate::agents::{AgentConfig, AgentSchedule, Event, RUNS_MAX, WORKERS_MAX, Workflow};
use crate::disk::FaultConfig;
use crate::rng::PPM_ONE;
use crate::world::{Fate, REQUEST_LIFETIME_MS_MAX};

/// Most events an input may hold.
const EVENTS_MAX: usize = 400;
/// Most fates an input may hold.
const FATES_MAX: usize = 64;

/// Runs the `agents` target on `data`.
pub fn agents(data: &[u8]) {
    let schedule = decode(data);
    if let Err(failure) = run_agent_schedule(&schedule, &AgentConfig::default()) {
        panic!("agents failed: {failure}");
    }
}

/// The schedule `data` stands for.
pub fn decode(data: &[u8]) -> AgentSchedule {
    let mut b = Bytes::new(data);
    let seed = b.u64();
    let run_count = 1 + usize::from(b.u8()) % RUNS_MAX;
    let runs = (0..run_count)
        .map(|_| Workflow::ALL[usize::from(b.u8()) % Workflow::ALL.len()])
        .collect();
    let workers = 1 + b.u8() % WORKERS_MAX;
    let mut quarter = || u32::from(b.u8() % 5) * (PPM_ONE / 4);
    let (lost, torn, garbage, size, dir) = (quarter(), quarter(), quarter(), quarter(), quarter());
    let faults = FaultConfig {
        crash_write_lost_ppm: lost,
        crash_write_torn_ppm: torn.min(PPM_ONE - lost),
        torn_sector_garbage_ppm: garbage,
        crash_size_change_lost_ppm: size,
        crash_dir_flushed_ppm: dir,
        ..FaultConfig::none()
    };
    let checkpoint_every_records = [4, 16, 64][usize::from(b.u8()) % 3];
    let fate_count = usize::from(b.u8()) % (FATES_MAX + 1);
    let fates = (0..fate_count).map(|_| fate(&mut b)).collect();
    let mut events = Vec::new();
    while !b.is_empty() && events.len() < EVENTS_MAX {
        events.push(event(&mut b));
    }
    AgentSchedule {
        seed,
        runs,
        workers,
        faults,
        events,
        fates,
        checkpoint_every_records,
    }
}

fn fate(b: &mut Bytes<'_>) -> Fate {
    match b.u8() % 5 {
        0 => Fate::Delivered,
        1 => Fate::AckDropped,
        2 => Fate::RequestLost,
        3 => Fate::Declined,
        _ => {
            let unit = (REQUEST_LIFETIME_MS_MAX / 255) as u32;
            Fate::Slow {
                delay_ms: 1 + u32::from(b.u8()) * unit,
            }
        }
    }
}

fn event(b: &mut Bytes<'_>) -> Event {
    match b.u8() % 13 {
        0 => Event::Tick(1 + b.u16() % 3_000),
        1 => Event::Jump(30_000 + b.u32() % 570_000),
        2 => Event::Crash,
        3 => Event::ArmIoCrash(1 + b.u16() % 2_000),
        4 => Event::Pause(b.u8()),
        5 => Event::Resume(b.u8()),
        6 => Event::Checkpoint,
        7 => Event::Advance(b.u8()),
        8 => Event::Approve(b.u8(), b.u8()),
        9 => Event::Signal(b.u8(), b.u8()),
        11 => Event::MixGuard(b.u8()),
        12 => Event::EdgeJump(b.u8()),
        _ => {
            let action = match b.u8() % 4 {
                0 => OperatorAction::Pause,
                1 => OperatorAction::Resume,
                3 => OperatorAction::Abandon,
                _ => OperatorAction::Cancel,
            };
            Event::Operate(action, b.u8())
        }
    }
}

/// Bytes that decode to `schedule`, as far as the layout can say it (fault
/// rates are rounded down to quarters, long lists cut).
pub fn encode(schedule: &AgentSchedule) -> Vec<u8> {
    let mut out = schedule.seed.to_le_bytes().to_vec();
    out.push((schedule.runs.len().clamp(1, RUNS_MAX) - 1) as u8);
    for run in schedule.runs.iter().take(RUNS_MAX) {
        out.push(Workflow::ALL.iter().position(|w| w == run).unwrap_or(0) as u8);
    }
    out.push(schedule.workers.clamp(1, WORKERS_MAX) - 1);
    let f = &schedule.faults;
    for ppm in [
        f.crash_write_lost_ppm,
        f.crash_write_torn_ppm,
        f.torn_sector_garbage_ppm,
        f.crash_size_change_lost_ppm,
        f.crash_dir_flushed_ppm,
    ] {
        out.push((ppm / (PPM_ONE / 4)) as u8);
    }
    out.push(match schedule.checkpoint_every_records {
        0..=4 => 0,
        5..=16 => 1,
        _ => 2,
    });
    let fates = &schedule.fates[..schedule.fates.len().min(FATES_MAX)];
    out.push(fates.len() as u8);
    for fate in fates {
        match fate {
            Fate::Delivered => out.push(0),
            Fate::AckDropped => out.push(1),
            Fate::RequestLost => out.push(2),
            Fate::Declined => out.push(3),
            Fate::Slow { delay_ms } => {
                let unit = (REQUEST_LIFETIME_MS_MAX / 255) as u32;
                out.extend_from_slice(&[4, (delay_ms.saturating_sub(1) / unit).min(255) as u8]);
            }
        }
    }
    for event in schedule.events.iter().take(EVENTS_MAX) {
        match *event {
            Event::Tick(ms) => {
                out.push(0);
                out.extend_from_slice(&(ms.saturating_sub(1)).to_le_bytes());
            }
            Event::Jump(ms) => {
                out.push(1);
                out.extend_from_slice(&(ms.saturating_sub(30_000)).to_le_bytes());
            }
            Event::Crash => out.push(2),
            Event::ArmIoCrash(n) => {
                out.push(3);
                out.extend_from_slice(&(n.saturating_sub(1)).to_le_bytes());
            }
            Event::Pause(w) => out.extend_from_slice(&[4, w]),
            Event::Resume(w) => out.extend_from_slice(&[5, w]),
            Event::Checkpoint => out.push(6),
            Event::Advance(w) => out.extend_from_slice(&[7, w]),
            Event::Operate(action, run) => {
                let code = match action {
                    OperatorAction::Pause => 0,
                    OperatorAction::Resume => 1,
                    OperatorAction::Cancel => 2,
                    OperatorAction::Abandon => 3,
                };
                out.extend_from_slice(&[10, code, run]);
            }
            Event::Approve(code, run) => out.extend_from_slice(&[8, code, run]),
            Event::Signal(code, run) => out.extend_from_slice(&[9, code, run]),
            Event::MixGuard(run) => out.extend_from_slice(&[11, run]),
            Event::EdgeJump(code) => out.extend_from_slice(&[12, code]),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_schedules_survive_an_encode_decode_round_trip() {
        for seed in 0..20 {
            let mut schedule = AgentSchedule::from_seed(seed, 120);
            let decoded = decode(&encode(&schedule));
            assert_eq!(decoded.events, schedule.events, "seed {seed}");
            assert_eq!(decoded.runs, schedule.runs);
            assert_eq!(decoded.workers, schedule.workers);
            schedule.fates.truncate(FATES_MAX);
            assert_eq!(decoded.fates.len(), schedule.fates.len());
            // Fault rates round to quarters; everything else is exact.
            assert_eq!(decode(&encode(&decoded)), decoded);
        }
    }

    #[test]
    fn any_bytes_decode_to_a_bounded_schedule() {
        for len in [0, 1, 7, 30, 2_000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            let s = decode(&data);
            assert!(!s.runs.is_empty() && s.events.len() <= EVENTS_MAX);
            assert!((1..=WORKERS_MAX).contains(&s.workers));
        }
    }
}

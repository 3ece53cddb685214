//! An agent run's script: which runs exist, how many workers serve them,
//! the disk's faults, the events of the fault phase (worker steps, clock
//! ticks and jumps, jumps to the end of a tool's dedup window, crashes at
//! step boundaries and at I/O calls, pauses
//! that make zombies, checkpoints) and the fate of each tool call. Drawn
//! from a seed (swarm: each seed picks its own fault rates), generated and
//! shrunk by proptest, decoded from fuzzer bytes, or enumerated.
//!
//! **Invariant:** a schedule plus its seed determines the whole run; the
//! seed only supplies what the schedule leaves open (crash outcomes).

use actum::books::OperatorAction;

use super::workflow::Workflow;
use crate::disk::FaultConfig;
use crate::rng::{PPM_ONE, Rng};
use crate::world::{Fate, REQUEST_LIFETIME_MS_MAX};

/// Most workers a schedule runs.
pub const WORKERS_MAX: u8 = 3;
/// Most runs a schedule creates.
pub const RUNS_MAX: usize = 4;
/// The longest clock tick, in ms.
pub const TICK_MS_MAX: u16 = 3_000;
/// The longest clock jump, in ms (twenty leases).
pub const JUMP_MS_MAX: u32 = 600_000;
/// The furthest ahead (in I/O calls) a power cut is armed.
pub const CRASH_AFTER_OPS_MAX: u16 = 60;

/// One event of the fault phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Worker `n` (modulo the worker count) takes its next step.
    Advance(u8),
    /// The clock moves on by this many ms.
    Tick(u16),
    /// The clock jumps forward by this many ms: leases expire.
    Jump(u32),
    /// The clock jumps to the end of an idempotent tool's dedup window,
    /// as seen from an act whose outcome is open (an intent, or an unknown
    /// outcome), so that its resend is decided at the edge: the field's
    /// `/ 5` picks the act (modulo the open acts on deduplicating tools of
    /// runs not over), its `% 5` the age the act's intent reaches
    /// ([`EdgeAge::of`]). Nothing if there is no such act, or if its
    /// intent is that old already.
    EdgeJump(u8),
    /// The process crashes here, at a step boundary: the engine is dropped
    /// and power is cut, losing unsynced writes.
    Crash,
    /// Power is cut during the n-th I/O call from now.
    ArmIoCrash(u16),
    /// Worker `n` stops being scheduled (paused past its lease: a zombie).
    Pause(u8),
    /// Worker `n` is scheduled again, with whatever lease it thinks it has.
    Resume(u8),
    /// The engine checkpoints its state store (an armed cut lands in it).
    Checkpoint,
    /// An operator pauses, resumes or cancels run `n` (modulo the run
    /// count), holding no lease.
    Operate(OperatorAction, u8),
    /// An approver decides the approval of run `n` (second field, modulo
    /// the run count), holding no lease; the first field picks how
    /// ([`ApproverMove::of`]).
    Approve(u8, u8),
    /// A webhook signals run `n` (second field), or replies to its
    /// requests, holding no lease; the first picks what
    /// ([`SignalMove::of`]).
    Signal(u8, u8),
    /// A worker's code mixes up two runs: for the `n`-th run leased live
    /// (modulo their count), a lease renewal under the holder's worker and
    /// token but a guard granted on another run. Tokens count per run, so
    /// only the run named in the guard tells them apart; the engine must
    /// refuse it, as the model does.
    MixGuard(u8),
}

/// What an approver's event does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApproverMove {
    /// Approves the payment as the workflow will make it.
    Approve,
    /// Rejects it.
    Reject,
    /// Approves from a stale screen: another amount (another digest),
    /// which the engine must refuse.
    ApproveOther,
}

impl ApproverMove {
    /// The move an event's first field stands for.
    pub fn of(code: u8) -> ApproverMove {
        match code % 4 {
            0 | 1 => ApproverMove::Approve,
            2 => ApproverMove::Reject,
            _ => ApproverMove::ApproveOther,
        }
    }
}

/// The age an [`Event::EdgeJump`] gives an open act's intent, relative to
/// its tool's resend horizon (the dedup window less the resend margin,
/// `ToolClass::resend_horizon_ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeAge {
    /// The horizon less 1 ms: the last age at which the engine resends
    /// (if the worker's begin comes before the clock ticks on).
    LastResend,
    /// The horizon: the first age at which it no longer does.
    Horizon,
    /// The window less 1 ms: the tool still remembers the key, but a
    /// resend decided now could reach it after it forgot.
    WindowEnd,
    /// The horizon less `EDGE_LEAD_MS`: resent, and a slow resend still
    /// lands inside the window (the margin outlasts a request).
    BeforeHorizon,
    /// The window less `IN_MARGIN_LEAD_MS`, inside the margin: not
    /// resent. A rule without the margin would resend here, and a slow
    /// resend would land after the tool forgot the key and act a second
    /// time.
    InMargin,
}

/// How far before the horizon, or the window's end, an [`EdgeAge`] lands
/// when it leaves the worker time to reach its next begin: longer than the
/// clock ticks between two steps of a worker, shorter than a slow
/// request's delay (up to [`REQUEST_LIFETIME_MS_MAX`]).
pub const EDGE_LEAD_MS: u64 = 30_000;
/// How far before the window's end [`EdgeAge::InMargin`] lands: enough for
/// the worker to reach its next begin, little enough that most slow
/// requests sent then would arrive after the window.
pub const IN_MARGIN_LEAD_MS: u64 = 10_000;

const _: () = assert!(IN_MARGIN_LEAD_MS < EDGE_LEAD_MS);
const _: () = assert!(EDGE_LEAD_MS < REQUEST_LIFETIME_MS_MAX);

impl EdgeAge {
    /// The age an event's field stands for.
    pub fn of(code: u8) -> EdgeAge {
        match code % 5 {
            0 => EdgeAge::LastResend,
            1 => EdgeAge::Horizon,
            2 => EdgeAge::WindowEnd,
            3 => EdgeAge::BeforeHorizon,
            _ => EdgeAge::InMargin,
        }
    }

    /// The intent's age, in ms, for a tool of window `window_ms` and
    /// resend horizon `horizon_ms`.
    pub fn age_ms(self, window_ms: u64, horizon_ms: u64) -> u64 {
        match self {
            EdgeAge::LastResend => horizon_ms.saturating_sub(1),
            EdgeAge::Horizon => horizon_ms,
            EdgeAge::WindowEnd => window_ms.saturating_sub(1),
            EdgeAge::BeforeHorizon => horizon_ms.saturating_sub(EDGE_LEAD_MS),
            EdgeAge::InMargin => window_ms.saturating_sub(IN_MARGIN_LEAD_MS),
        }
    }
}

/// What a webhook's event sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalMove {
    /// The bank's verification.
    Verified,
    /// The verification delivered twice at once (a retried webhook): two
    /// signals racing for one wait.
    VerifiedTwice,
    /// A signal no wait waits for.
    Noise,
    /// The screening service's webhook: the reply to each screening
    /// request of the run it took (settling the effect, and ending the
    /// run's wait for it if one is open).
    Reply,
    /// The same replies delivered twice (a retried webhook).
    ReplyTwice,
}

impl SignalMove {
    /// The move an event's first field stands for.
    pub fn of(code: u8) -> SignalMove {
        match code % 5 {
            0 => SignalMove::Verified,
            1 => SignalMove::VerifiedTwice,
            2 => SignalMove::Noise,
            3 => SignalMove::Reply,
            _ => SignalMove::ReplyTwice,
        }
    }
}

/// Everything an agent run does, apart from crash outcomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentSchedule {
    /// Seeds crash outcomes and the database id.
    pub seed: u64,
    /// The runs to create, in order (ids `<workflow>-<index>`).
    pub runs: Vec<Workflow>,
    /// How many workers serve them (1..=3).
    pub workers: u8,
    /// The disk's faults during the fault phase.
    pub faults: FaultConfig,
    /// The fault phase.
    pub events: Vec<Event>,
    /// The fate of each tool call, in order; calls past the list, and every
    /// call of the calm phase, are delivered.
    pub fates: Vec<Fate>,
    /// Commits between automatic engine checkpoints.
    pub checkpoint_every_records: u64,
}

/// A seed's fault rates, in ppm per event slot or per call.
struct Rates {
    crash: u32,
    arm: u32,
    pause: u32,
    resume: u32,
    jump: u32,
    edge_jump: u32,
    checkpoint: u32,
    operate: u32,
    approve: u32,
    signal: u32,
    mix_guard: u32,
    tick: u32,
    ack_dropped: u32,
    request_lost: u32,
    declined: u32,
    slow: u32,
}

impl Rates {
    fn swarm(rng: &mut Rng) -> Rates {
        let mut menu = |options: &[u32]| *rng.pick(options);
        Rates {
            crash: menu(&[0, 5_000, 20_000, 40_000]),
            arm: menu(&[0, 10_000, 30_000]),
            pause: menu(&[0, 10_000, 40_000]),
            resume: menu(&[20_000, 80_000]),
            jump: menu(&[0, 10_000, 30_000]),
            // Drawn from a fork of its own, like the operators' rate.
            edge_jump: 0,
            checkpoint: menu(&[0, 10_000, 30_000]),
            // Drawn from a fork of its own, so the other draws of a seed
            // stay what they were before operators existed.
            operate: 0,
            approve: 0,
            signal: 0,
            mix_guard: 0,
            tick: menu(&[150_000, 300_000]),
            ack_dropped: menu(&[0, 50_000, 150_000]),
            request_lost: menu(&[0, 50_000, 100_000]),
            declined: menu(&[0, 50_000, 150_000]),
            slow: menu(&[0, 50_000, 150_000]),
        }
    }
}

impl AgentSchedule {
    /// The schedule `seed` stands for: a swarm of fault rates, 1 to 4 runs
    /// of the seeds' workflows, 1 to 3 workers, `events` event slots.
    pub fn from_seed(seed: u64, events: u32) -> AgentSchedule {
        let mut root = Rng::new(seed);
        let mut faults = FaultConfig::swarm(&mut root.fork("faults"));
        // The agent campaign cuts power; the storage campaign covers EIO,
        // short writes and ENOSPC, which only halt the engine here.
        faults.sync_eio_ppm = 0;
        faults.write_short_ppm = 0;
        faults.enospc_ppm = 0;
        faults.capacity_bytes = None;
        let mut shape = root.fork("shape");
        let mut rates = Rates::swarm(&mut shape);
        rates.operate = *root.fork("operators").pick(&[0, 5_000, 20_000]);
        let mut outside = root.fork("waits");
        rates.approve = *outside.pick(&[0, 10_000, 30_000]);
        rates.signal = *outside.pick(&[0, 10_000, 30_000]);
        rates.mix_guard = *root.fork("mixed guards").pick(&[0, 5_000, 20_000]);
        rates.edge_jump = *root.fork("window edges").pick(&[0, 5_000, 20_000]);
        let run_count = 1 + shape.below(RUNS_MAX as u64) as usize;
        let runs = (0..run_count)
            .map(|_| *shape.pick(&Workflow::ALL))
            .collect();
        let workers = 1 + shape.below(u64::from(WORKERS_MAX)) as u8;
        let checkpoint_every_records = *shape.pick(&[4, 16, 64]);
        let mut draw = root.fork("events");
        let events: Vec<Event> = (0..events).map(|_| draw_event(&mut draw, &rates)).collect();
        let mut fates_rng = root.fork("fates");
        let fates = (0..events.len() / 2)
            .map(|_| draw_fate(&mut fates_rng, &rates))
            .collect();
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

    /// The fate of the `n`-th call of the fault phase.
    pub fn fate(&self, n: usize) -> Fate {
        self.fates.get(n).copied().unwrap_or(Fate::Delivered)
    }
}

fn draw_event(rng: &mut Rng, rates: &Rates) -> Event {
    let worker = rng.below(u64::from(WORKERS_MAX)) as u8;
    // Each slot draws the same values whatever the rates, so tuning one
    // rate never shifts the draws that follow.
    let roll = rng.below(u64::from(PPM_ONE)) as u32;
    let tick = 1 + rng.below(u64::from(TICK_MS_MAX)) as u16;
    let jump = 30_000 + rng.below(u64::from(JUMP_MS_MAX - 30_000)) as u32;
    let after = 1 + rng.below(u64::from(CRASH_AFTER_OPS_MAX)) as u16;
    let mut bound = 0;
    let mut next = |rate: u32| {
        bound += rate;
        roll < bound
    };
    if next(rates.crash) {
        Event::Crash
    } else if next(rates.arm) {
        Event::ArmIoCrash(after)
    } else if next(rates.pause) {
        Event::Pause(worker)
    } else if next(rates.resume) {
        Event::Resume(worker)
    } else if next(rates.jump) {
        Event::Jump(jump)
    } else if next(rates.edge_jump) {
        Event::EdgeJump(after as u8)
    } else if next(rates.checkpoint) {
        Event::Checkpoint
    } else if next(rates.operate) {
        // Pauses and resumes twice as often as cancels, which end a run.
        let action = match after % 5 {
            0 | 1 => OperatorAction::Pause,
            2 | 3 => OperatorAction::Resume,
            _ => OperatorAction::Cancel,
        };
        Event::Operate(action, (after / 5) as u8)
    } else if next(rates.approve) {
        Event::Approve((after % 4) as u8, (after / 4) as u8)
    } else if next(rates.signal) {
        Event::Signal((after % 5) as u8, (after / 5) as u8)
    } else if next(rates.mix_guard) {
        Event::MixGuard(after as u8)
    } else if next(rates.tick) {
        Event::Tick(tick)
    } else {
        Event::Advance(worker)
    }
}

fn draw_fate(rng: &mut Rng, rates: &Rates) -> Fate {
    let roll = rng.below(u64::from(PPM_ONE)) as u32;
    let delay_ms = 1 + rng.below(REQUEST_LIFETIME_MS_MAX) as u32;
    let mut bound = 0;
    let mut next = |rate: u32| {
        bound += rate;
        roll < bound
    };
    if next(rates.ack_dropped) {
        Fate::AckDropped
    } else if next(rates.request_lost) {
        Fate::RequestLost
    } else if next(rates.declined) {
        Fate::Declined
    } else if next(rates.slow) {
        Fate::Slow { delay_ms }
    } else {
        Fate::Delivered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_stands_for_the_same_schedule() {
        let a = AgentSchedule::from_seed(7, 200);
        assert_eq!(a, AgentSchedule::from_seed(7, 200));
        assert_ne!(a.events, AgentSchedule::from_seed(8, 200).events);
        assert_eq!(a.events.len(), 200);
        assert!(!a.runs.is_empty() && a.runs.len() <= RUNS_MAX);
        assert!((1..=WORKERS_MAX).contains(&a.workers));
    }

    #[test]
    fn seeds_spread_over_every_event_and_fate() {
        let mut seen = [false; 13];
        let mut fates = [false; 5];
        for seed in 0..200 {
            let s = AgentSchedule::from_seed(seed, 200);
            for e in &s.events {
                let i = match e {
                    Event::Advance(_) => 0,
                    Event::Tick(_) => 1,
                    Event::Jump(_) => 2,
                    Event::Crash => 3,
                    Event::ArmIoCrash(_) => 4,
                    Event::Pause(_) => 5,
                    Event::Resume(_) => 6,
                    Event::Checkpoint => 7,
                    Event::Operate(..) => 8,
                    Event::Approve(..) => 9,
                    Event::Signal(..) => 10,
                    Event::MixGuard(_) => 11,
                    Event::EdgeJump(_) => 12,
                };
                seen[i] = true;
            }
            for f in &s.fates {
                let i = match f {
                    Fate::Delivered => 0,
                    Fate::AckDropped => 1,
                    Fate::RequestLost => 2,
                    Fate::Declined => 3,
                    Fate::Slow { .. } => 4,
                };
                fates[i] = true;
            }
        }
        assert_eq!(seen, [true; 13]);
        assert_eq!(fates, [true; 5]);
    }
}

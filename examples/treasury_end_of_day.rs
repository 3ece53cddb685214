//! A treasury agent's end of day (seed 002) on actum: after the close it
//! sweeps the excess cash of the operating account to a money-market
//! fund, then hedges the day's currency exposure. The sweep's intent
//! registers its compensation (the transfer back), so when the dealing
//! desk declines the hedge the confirmed sweep is undone through the
//! engine (`begin_compensation`), as an effect of its own with its own
//! key: the run ends failed with the sweep returned exactly once, even
//! though the process dies after the bank moved the money back and before
//! that was recorded. The bank deduplicates nothing; it can only be asked
//! what a key did, and that is what the resumed worker does.
//!
//! Run it with `cargo run --example treasury_end_of_day` (`-- --quick` for
//! one day only, `-- --dir PATH` to keep the database).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use actum::books::{
    Compensation, CreateRun, EffectKind, EffectStatus, Guard, Outcome, RunId, RunState, StepId,
    ToolClass, Transition, WorkerId, digest_of,
};
use actum::engine::{
    CompensationRequest, EffectCtx, LeaseGrant, StepPlan, StepRequest, StepResult, ToolSpec,
};
use actum::{Engine, EngineOptions, Error, FsStorage, ManualClock};
use actum_examples::{BoxError, Checks, Cli, XorShift, main_of};

/// 2026-03-02 21:00 UTC, after the close: the engine's clock starts here
/// and moves only when the example says so.
const START_MS: u64 = 1_772_485_200_000;
/// A day, in the engine clock's milliseconds.
const DAY_MS: u64 = 86_400_000;
/// A worker's lease: how long a run stays with a worker that stops
/// renewing it. A crash frees it at once: the next open releases it.
const LEASE_MS: u64 = 60_000;
/// What the operating account holds before the first day.
const OPENING_CENTS: i64 = 50_000_000 * 100;
/// The account the day's excess cash leaves.
const OPERATING: &str = "operating";
/// The money-market fund it is swept to.
const MMF: &str = "mmf-prime";
/// The bank and the dealing desk both answer "what did key K do?".
const QUERYABLE: ToolClass = ToolClass::Queryable;

/// Runs the example; the exit code says whether every invariant held.
fn main() -> ExitCode {
    main_of("treasury_end_of_day", end_of_days)
}

/// What the dealing desk says to the day's hedge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hedge {
    Accept,
    Decline,
}

/// Where the worker's process dies, the first time it runs the day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Crash {
    Never,
    /// The sweep's intent is durable; the bank was never called.
    BeforeSweepSent,
    /// The sweep is confirmed and recorded; the hedge not begun.
    AfterSweep,
    /// The bank moved the money back; the outcome is not recorded.
    UndoSentNotRecorded,
}

/// One business day's run.
#[derive(Clone, Debug)]
struct Day {
    run: RunId,
    date: &'static str,
    /// The cash above the policy's floor, swept to the fund.
    excess_cents: i64,
    /// The Australian-dollar exposure to hedge.
    aud_cents: i64,
    hedge: Hedge,
    crash: Crash,
}

/// The days: one scripted day (declined hedge, and the process dies in
/// the middle of undoing the sweep), then, unless `--quick`, seven more
/// drawn from a seeded generator.
fn days(quick: bool) -> Result<Vec<Day>, BoxError> {
    const DATES: [&str; 8] = [
        "2026-03-02",
        "2026-03-03",
        "2026-03-04",
        "2026-03-05",
        "2026-03-06",
        "2026-03-09",
        "2026-03-10",
        "2026-03-11",
    ];
    let day = |date: &'static str, excess_cents, aud_cents, hedge, crash| -> Result<Day, Error> {
        Ok(Day {
            run: RunId::new(format!("eod-{date}"))?,
            date,
            excess_cents,
            aud_cents,
            hedge,
            crash,
        })
    };
    let mut days = vec![day(
        DATES[0],
        1_250_000 * 100,
        800_000 * 100,
        Hedge::Decline,
        Crash::UndoSentNotRecorded,
    )?];
    if quick {
        return Ok(days);
    }
    let mut rng = XorShift::new(0x002_5d41_2ada);
    for date in &DATES[1..] {
        let hedge = if rng.below(3) == 0 {
            Hedge::Decline
        } else {
            Hedge::Accept
        };
        let crash = match rng.below(4) {
            0 => Crash::Never,
            1 => Crash::BeforeSweepSent,
            2 => Crash::AfterSweep,
            _ => Crash::UndoSentNotRecorded,
        };
        let excess = 100_000 * 100 + i64::try_from(rng.below(2_000_000))? * 100;
        let aud = 50_000 * 100 + i64::try_from(rng.below(1_000_000))? * 100;
        days.push(day(date, excess, aud, hedge, crash)?);
    }
    Ok(days)
}

/// `123456` cents as `1,234.56`.
fn money(cents: i64) -> String {
    let units = cents.unsigned_abs() / 100;
    let mut digits = units.to_string();
    let mut grouped = String::new();
    while digits.len() > 3 {
        let tail = digits.split_off(digits.len() - 3);
        grouped = format!(",{tail}{grouped}");
    }
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{digits}{grouped}.{:02}", cents.unsigned_abs() % 100)
}

/// A transfer instruction as the bank reads it: the sweep's arguments and
/// its compensation's are both of this form.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Instruction {
    from: String,
    to: String,
    cents: i64,
}

impl Instruction {
    fn encode(&self) -> Vec<u8> {
        format!(
            "move {} cents from {} to {}",
            self.cents, self.from, self.to
        )
        .into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<Instruction> {
        let text = std::str::from_utf8(bytes).ok()?;
        match text.split(' ').collect::<Vec<_>>().as_slice() {
            ["move", cents, "cents", "from", from, "to", to] => Some(Instruction {
                from: (*from).to_string(),
                to: (*to).to_string(),
                cents: cents.parse().ok()?,
            }),
            _ => None,
        }
    }
}

/// The bank: it executes every instruction it receives (it does not
/// deduplicate), and answers what a key did.
#[derive(Debug)]
struct Bank {
    operating: i64,
    mmf: i64,
    /// Every executed transfer: key, instruction, reference.
    transfers: Vec<(String, Instruction, String)>,
}

impl Bank {
    fn execute(&mut self, key: &str, args: &[u8]) -> Outcome {
        let Some(order) = Instruction::decode(args) else {
            return Outcome::Failed {
                retryable: false,
                reason: "the bank cannot read the instruction".into(),
            };
        };
        let delta = match (order.from.as_str(), order.to.as_str()) {
            (OPERATING, MMF) => order.cents,
            (MMF, OPERATING) => -order.cents,
            _ => {
                return Outcome::Failed {
                    retryable: false,
                    reason: format!("no such accounts: {} to {}", order.from, order.to),
                };
            }
        };
        self.operating -= delta;
        self.mmf += delta;
        let reference = format!("TX-{:04}", self.transfers.len() + 1);
        self.transfers
            .push((key.to_string(), order, reference.clone()));
        Outcome::Confirmed {
            receipt: reference.into_bytes(),
        }
    }

    /// What `key` did. Asked by a worker holding a newer lease than the
    /// one the request went out under, so a request not found never
    /// arrives later: it did not happen.
    fn lookup(&self, key: &str) -> Outcome {
        match self.transfers.iter().find(|(k, _, _)| k == key) {
            Some((_, _, reference)) => Outcome::Confirmed {
                receipt: reference.clone().into_bytes(),
            },
            None => Outcome::Failed {
                retryable: true,
                reason: format!("the bank never received {key}"),
            },
        }
    }

    fn transfers_for(&self, key_prefix: &str) -> Vec<&(String, Instruction, String)> {
        self.transfers
            .iter()
            .filter(|(k, _, _)| k.starts_with(key_prefix))
            .collect()
    }
}

/// The dealing desk: books a forward or declines it.
#[derive(Debug, Default)]
struct Desk {
    /// Every hedge request: key and answer.
    requests: Vec<(String, Outcome)>,
}

impl Desk {
    fn hedge(&mut self, key: &str, day: &Day) -> Outcome {
        let outcome = match day.hedge {
            Hedge::Accept => Outcome::Confirmed {
                receipt: format!("FWD-{:04}", self.requests.len() + 1).into_bytes(),
            },
            Hedge::Decline => Outcome::Failed {
                retryable: false,
                reason: "counterparty credit line exhausted".into(),
            },
        };
        self.requests.push((key.to_string(), outcome.clone()));
        outcome
    }

    fn lookup(&self, key: &str) -> Outcome {
        match self.requests.iter().find(|(k, _)| k == key) {
            Some((_, outcome)) => outcome.clone(),
            None => Outcome::Failed {
                retryable: true,
                reason: format!("the desk never received {key}"),
            },
        }
    }
}

/// Everything outside the engine.
#[derive(Debug)]
struct World {
    bank: Bank,
    desk: Desk,
    /// Days whose process already died once (it dies only the first time).
    crashed: BTreeSet<RunId>,
    /// Claims made right after each restart, with the dead worker's lease
    /// still unexpired by the clock: the run claimed, and whether under a
    /// larger token than the dead worker's.
    retaken: Vec<(RunId, bool)>,
}

/// How one pass of the agent over a claimed run ended.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Ended,
    /// The process died holding the lease.
    Crashed,
}

/// The example: each day's run, with its crash and restart.
fn end_of_days(cli: &Cli, dir: &Path, checks: &mut Checks) -> Result<(), BoxError> {
    let clock = Arc::new(ManualClock::new(START_MS));
    let days = days(cli.quick)?;
    let mut world = World {
        bank: Bank {
            operating: OPENING_CENTS,
            mmf: 0,
            transfers: Vec::new(),
        },
        desk: Desk::default(),
        crashed: BTreeSet::new(),
        retaken: Vec::new(),
    };
    let mut engine = open(dir, &clock)?;
    for day in &days {
        engine = run_day(engine, dir, &clock, day, &mut world)?;
        clock.advance_ms(DAY_MS);
    }
    let crashes = world.crashed.len();
    println!(
        "== {crashes} of {} days crashed once and resumed",
        days.len()
    );
    println!("== the checks");
    check(&engine, &days, &world, checks)?;
    engine.close()?;
    Ok(())
}

/// Opens the engine in `dir` on the real file system and the example's
/// clock.
fn open(dir: &Path, clock: &Arc<ManualClock>) -> Result<Engine, Error> {
    Engine::open_with(
        Arc::new(FsStorage::new()),
        clock.clone(),
        dir,
        EngineOptions::default(),
    )
}

/// One day: the scheduler creates the run, a worker claims it, and, if the
/// process dies, the restarted service claims it again at once (its open
/// released the dead worker's lease). Returns the engine (reopened if it
/// crashed).
fn run_day(
    mut engine: Engine,
    dir: &Path,
    clock: &Arc<ManualClock>,
    day: &Day,
    world: &mut World,
) -> Result<Engine, BoxError> {
    println!(
        "== {}: sweep USD {} to the fund, then hedge AUD {}",
        day.date,
        money(day.excess_cents),
        money(day.aud_cents)
    );
    engine.create_run(CreateRun {
        run: day.run.clone(),
        input_digest: digest_of(day.date.as_bytes()),
        agent_version: "treasury-eod 3.2".into(),
        trace_id: format!("trace-{}", day.date),
        parent: None,
        input: None,
    })?;
    let worker = WorkerId::new("treasury-worker")?;
    let lease = claim(&engine, &worker)?;
    if end_of_day(&engine, &lease, day, world)? == Flow::Ended {
        return Ok(engine);
    }
    let dead_token = lease.guard.token;
    drop(engine); // no close: to the engine this is a crash
    engine = open(dir, clock)?;
    // No clock moves: the open released the lease, so the run is free now.
    let lease = claim(&engine, &worker)?;
    world
        .retaken
        .push((lease.run.clone(), lease.guard.token > dead_token));
    println!(
        "   restarted: {} log records replayed, {} lease of the dead worker released; the run \
         is claimed again at once under token {}",
        engine.recovery().replayed_records,
        engine.recovery().leases_released,
        lease.guard.token.0
    );
    if end_of_day(&engine, &lease, day, world)? != Flow::Ended {
        return Err(format!("{} crashed twice", day.run).into());
    }
    Ok(engine)
}

/// The next claimable run, which must exist.
fn claim(engine: &Engine, worker: &WorkerId) -> Result<LeaseGrant, BoxError> {
    engine
        .claim_next(worker, LEASE_MS)?
        .ok_or_else(|| "nothing to claim".into())
}

/// True, once per day, when the day's process is to die at `point`.
fn dies_at(world: &mut World, day: &Day, point: Crash) -> bool {
    day.crash == point && world.crashed.insert(day.run.clone())
}

/// One pass of the end-of-day agent over its claimed run. It starts from
/// the top every time: each step asks the engine, which answers from the
/// books what is already done.
fn end_of_day(
    engine: &Engine,
    lease: &LeaseGrant,
    day: &Day,
    world: &mut World,
) -> Result<Flow, BoxError> {
    let (run, guard) = (&lease.run, &lease.guard);
    if engine.run(run)?.map(|r| r.state) == Some(RunState::Pending) {
        engine.transition(move_to(run, guard, RunState::Running, "after the close"))?;
    }
    let sweep = StepId::new("sweep")?;
    if sweep_cash(engine, lease, &sweep, day, world)? == Flow::Crashed {
        return Ok(Flow::Crashed);
    }
    if dies_at(world, day, Crash::AfterSweep) {
        println!("   the process dies after the sweep was recorded");
        return Ok(Flow::Crashed);
    }
    let declined = match hedge(engine, guard, run, day, world)? {
        None => {
            engine.transition(move_to(run, guard, RunState::Completed, "swept and hedged"))?;
            println!("   run completed");
            return Ok(Flow::Ended);
        }
        Some(reason) => reason,
    };
    let request = CompensationRequest {
        guard,
        run,
        step: &sweep,
        rationale: "the hedge was declined: the cash goes back to operating",
    };
    if undo_sweep(engine, &request, day, world)? == Flow::Crashed {
        return Ok(Flow::Crashed);
    }
    let reason = format!("hedge declined ({declined}); the sweep was returned");
    engine.transition(move_to(run, guard, RunState::Failed, &reason))?;
    println!("   run failed: {reason}");
    Ok(Flow::Ended)
}

/// The sweep, through the ceremony in halves so the process can die
/// between them. Its intent registers the transfer back.
fn sweep_cash(
    engine: &Engine,
    lease: &LeaseGrant,
    step: &StepId,
    day: &Day,
    world: &mut World,
) -> Result<Flow, BoxError> {
    let order = Instruction {
        from: OPERATING.into(),
        to: MMF.into(),
        cents: day.excess_cents,
    };
    let back = Instruction {
        from: MMF.into(),
        to: OPERATING.into(),
        cents: day.excess_cents,
    };
    let args = order.encode();
    let request = StepRequest {
        guard: &lease.guard,
        run: &lease.run,
        step,
        tool: ToolSpec {
            name: "bank.transfer".into(),
            class: QUERYABLE,
        },
        args: &args,
        rationale: "cash above the policy floor goes to the whitelisted fund",
        compensation: Some(Compensation {
            tool: "bank.transfer".into(),
            args: back.encode(),
            class: QUERYABLE,
        }),
    };
    // A bank that lost the request ("never received") is a retryable
    // failure: the next attempt gets the next key.
    for _ in 0..3 {
        let Some((result, how)) = sweep_attempt(engine, &request, day, world)? else {
            return Ok(Flow::Crashed);
        };
        match result {
            StepResult::Done { key, receipt, .. } => {
                println!("   sweep {key}: confirmed {} ({how})", text(&receipt));
                return Ok(Flow::Ended);
            }
            StepResult::Compensated { key } => {
                println!("   sweep {key}: in the ledger, already returned");
                return Ok(Flow::Ended);
            }
            StepResult::Failed {
                retryable: true,
                key,
                reason,
            } => {
                println!("   sweep {key} did not happen ({reason}): a new attempt");
            }
            other => return Err(format!("the sweep of {}: {other:?}", day.date).into()),
        }
    }
    Err(format!("the sweep of {} failed three times", day.date).into())
}

/// One turn of the sweep's ceremony: the result and how it was reached,
/// or `None` if the process died.
fn sweep_attempt(
    engine: &Engine,
    request: &StepRequest<'_>,
    day: &Day,
    world: &mut World,
) -> Result<Option<(StepResult, &'static str)>, Error> {
    Ok(Some(match engine.begin_step(request)? {
        StepPlan::Act(ctx) => {
            if dies_at(world, day, Crash::BeforeSweepSent) {
                println!(
                    "   sweep intent {} is durable; the process dies before calling the bank",
                    ctx.key
                );
                return Ok(None);
            }
            let outcome = world.bank.execute(&ctx.key.encode(), request.args);
            let result = engine.finish_step(request.guard, &ctx, outcome)?;
            (result, "sent to the bank")
        }
        // An intent without an outcome, on a tool that can be asked:
        // ask, never send again.
        StepPlan::Query(ctx) => {
            let found = world.bank.lookup(&ctx.key.encode());
            println!(
                "   sweep {}: an intent without an outcome; the bank is asked: {}",
                ctx.key,
                said(&found)
            );
            let result = engine.resolve_step(request.guard, &ctx, found)?;
            (result, "as the bank answered, not sent again")
        }
        StepPlan::Done(result) => (result, "from the ledger, not sent again"),
    }))
}

/// The hedge; `Some(reason)` if the desk declined it. A decline recorded
/// before a crash is answered by the ledger the same way, and the desk is
/// not asked again.
fn hedge(
    engine: &Engine,
    guard: &Guard,
    run: &RunId,
    day: &Day,
    world: &mut World,
) -> Result<Option<String>, BoxError> {
    let step = StepId::new("hedge")?;
    let args = format!("sell AUD {} forward 1M", day.aud_cents);
    let request = StepRequest {
        guard,
        run,
        step: &step,
        tool: ToolSpec {
            name: "fx.forward".into(),
            class: QUERYABLE,
        },
        args: args.as_bytes(),
        rationale: "the AUD exposure is above the policy's threshold",
        compensation: None,
    };
    // Both closures reach the desk; only one of them runs.
    let desk = std::cell::RefCell::new(&mut world.desk);
    let result = engine.step_queryable(
        &request,
        |ctx: &EffectCtx| desk.borrow_mut().hedge(&ctx.key.encode(), day),
        |ctx: &EffectCtx| desk.borrow().lookup(&ctx.key.encode()),
    );
    match result {
        Ok(StepResult::Done { receipt, .. }) => {
            println!("   hedge: booked {}", text(&receipt));
            Ok(None)
        }
        Ok(StepResult::Failed {
            retryable: false,
            reason,
            ..
        }) => {
            println!("   hedge: the desk declines it: {reason}");
            Ok(Some(reason))
        }
        Ok(other) => Err(format!("the hedge of {}: {other:?}", day.date).into()),
        Err(e) => Err(e.into()),
    }
}

/// Undoes the confirmed sweep with the compensation its intent
/// registered: intent first, then the bank, then the outcome. After a
/// crash in between, the undoing tool's class decides: the bank is asked,
/// never told twice.
fn undo_sweep(
    engine: &Engine,
    request: &CompensationRequest<'_>,
    day: &Day,
    world: &mut World,
) -> Result<Flow, BoxError> {
    let (plan, compensation) = engine.begin_compensation(request)?;
    let result = match plan {
        StepPlan::Act(ctx) => {
            let outcome = world.bank.execute(&ctx.key.encode(), &compensation.args);
            println!(
                "   undo {}: {} sent to the bank: {}",
                ctx.key,
                compensation.tool,
                said(&outcome)
            );
            if dies_at(world, day, Crash::UndoSentNotRecorded) {
                println!("   the process dies before the undo's outcome is recorded");
                return Ok(Flow::Crashed);
            }
            engine.finish_step(request.guard, &ctx, outcome)?
        }
        StepPlan::Query(ctx) => {
            let found = world.bank.lookup(&ctx.key.encode());
            println!(
                "   undo {}: the bank is asked what it did: {}",
                ctx.key,
                said(&found)
            );
            engine.resolve_step(request.guard, &ctx, found)?
        }
        StepPlan::Done(result) => result,
    };
    match result {
        StepResult::Done { key, receipt, .. } => {
            println!(
                "   undo {key}: confirmed {}; the sweep is compensated",
                text(&receipt)
            );
            Ok(Flow::Ended)
        }
        other => Err(format!("the undo of {}'s sweep: {other:?}", day.date).into()),
    }
}

/// A receipt or reference as text.
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// An outcome in a few words.
fn said(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Confirmed { receipt } => format!("done, {}", text(receipt)),
        Outcome::Failed { reason, .. } => format!("failed, {reason}"),
        Outcome::Unknown { reason } => format!("unknown, {reason}"),
    }
}

/// A transition of `run` under `guard`.
fn move_to(run: &RunId, guard: &Guard, to: RunState, reason: &str) -> Transition {
    Transition {
        run: run.clone(),
        guard: guard.clone(),
        to,
        expected_version: None,
        reason: reason.to_string(),
    }
}

/// The invariants, from the bank's and the desk's records and the books.
fn check(
    engine: &Engine,
    days: &[Day],
    world: &World,
    checks: &mut Checks,
) -> Result<(), BoxError> {
    let mut moves = Vec::new();
    let mut books = Vec::new();
    let mut hedges = Vec::new();
    let mut ends = Vec::new();
    let mut kept = 0;
    for day in days {
        let declined = day.hedge == Hedge::Decline;
        let sweeps = world.bank.transfers_for(&format!("{}/sweep/", day.run));
        let undos = world
            .bank
            .transfers_for(&format!("{}/sweep/undo/", day.run));
        // Every sweep key also prefixes its undo's; count them apart.
        let (sent, back) = (sweeps.len() - undos.len(), undos.len());
        if (sent, back) != (1, usize::from(declined)) {
            moves.push(format!("{}: {sent} sweeps, {back} returns", day.date));
        }
        if !declined {
            kept += day.excess_cents;
        }
        if !ledger_agrees(engine, day, world)? {
            books.push(day.date.to_string());
        }
        let asked = world
            .desk
            .requests
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{}/hedge/", day.run)))
            .count();
        if asked != 1 {
            hedges.push(format!("{}: {asked}", day.date));
        }
        let expected = if declined {
            RunState::Failed
        } else {
            RunState::Completed
        };
        let state = engine.run(&day.run)?.map(|r| r.state);
        if state != Some(expected) {
            ends.push(format!("{}: {state:?}", day.date));
        }
    }
    checks.none_of(
        "each day swept once; each declined day's sweep returned exactly once",
        &moves,
    );
    checks.equal(
        "the balances hold exactly the sweeps of the hedged days",
        (world.bank.operating, world.bank.mmf),
        (OPENING_CENTS - kept, kept),
    );
    checks.none_of(
        "the ledger agrees with the bank: a compensated sweep and its undo's receipt on declined days, a confirmed sweep on the others",
        &books,
    );
    checks.none_of(
        "the desk was asked for each day's hedge once, a declined one never again",
        &hedges,
    );
    checks.none_of("declined days ended failed, hedged days completed", &ends);
    let crashed: Vec<(RunId, bool)> = days
        .iter()
        .filter(|d| world.crashed.contains(&d.run))
        .map(|d| (d.run.clone(), true))
        .collect();
    checks.equal(
        "after every crash, the restarted service claimed the run at once, under a larger token",
        world.retaken.clone(),
        crashed,
    );
    checks.check(
        "the scripted crash in the middle of the undo happened and was recovered",
        days.first().is_some_and(|d| world.crashed.contains(&d.run)),
        || "the first day did not crash".into(),
    );
    Ok(())
}

/// True if the books' sweep (its latest attempt) and its undo match what
/// the bank did for `day`.
fn ledger_agrees(engine: &Engine, day: &Day, world: &World) -> Result<bool, BoxError> {
    let sweep = StepId::new("sweep")?;
    let effects = engine.effects(&day.run)?;
    let Some(act) = effects
        .iter()
        .rev()
        .find(|e| e.key.step() == &sweep && e.key.kind() == EffectKind::Act)
    else {
        return Ok(false);
    };
    let undo = effects
        .iter()
        .find(|e| e.key.step() == &sweep && e.key.kind() != EffectKind::Act);
    let reference = |key: String| {
        world
            .bank
            .transfers
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, _, r)| r.clone().into_bytes())
    };
    let sent = reference(act.key.encode());
    Ok(match (day.hedge, &act.status, undo) {
        (
            Hedge::Decline,
            EffectStatus::Compensated {
                receipt,
                compensation_receipt,
            },
            Some(undo),
        ) => {
            Some(receipt) == sent.as_ref()
                && Some(compensation_receipt) == reference(undo.key.encode()).as_ref()
                && matches!(&undo.status, EffectStatus::Confirmed { receipt } if receipt == compensation_receipt)
        }
        (Hedge::Accept, EffectStatus::Confirmed { receipt }, None) => {
            Some(receipt) == sent.as_ref()
        }
        _ => false,
    })
}

//! A treasury agent's end of day (seed 002) on the runtime: after the close
//! it sweeps the excess cash of the operating account to a money-market
//! fund, then hedges the day's currency exposure. The sweep is a
//! `ctx.step_with_undo` whose compensation is the transfer back, so when the
//! dealing desk declines the hedge the run fails and the runtime's saga
//! undoes the confirmed sweep with the undo handler registered for the bank,
//! as an effect of its own with its own key: the run ends failed with the
//! sweep returned exactly once, even though the process dies after the bank
//! moved the money back and before that was recorded. The bank deduplicates
//! nothing; it can only be asked what a key did (`Tool::with_query`, and the
//! undo handler's `query`), and that is what the resumed worker does.
//!
//! A crash is the process's disk dying at that instant ([`MortalDisk`]):
//! the runtime calls the agent and its undo inside the engine's calls, so
//! the engine cannot be dropped there; a dead disk makes the engine's next
//! write fail, which leaves the database as a killed process would. The
//! engine is then dropped without `close` and reopened on a new disk.
//!
//! Run it with `cargo run --example treasury_end_of_day` (`-- --quick` for
//! one day only, `-- --dir PATH` to keep the database).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actum::books::{
    Compensation, EffectKind, EffectStatus, FencingToken, Outcome, RunId, RunState, StepId,
    ToolClass, WorkerId,
};
use actum::engine::{Engine, EngineOptions};
use actum::runtime::{Fail, RunCtx, Runtime, Tool, UndoCall};
use actum::{Error, ManualClock};
use actum_examples::{BoxError, Checks, Cli, MortalDisk, XorShift, main_of};

/// 2026-03-02 21:00 UTC, after the close: the engine's clock starts here
/// and moves only when the example says so.
const START_MS: u64 = 1_772_485_200_000;
/// A day, in the engine clock's milliseconds.
const DAY_MS: u64 = 86_400_000;
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

/// One business day's run, and what the world does to it.
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

impl Day {
    /// The run's input: what the agent starts from.
    fn input(&self) -> String {
        format!("{} {}", self.excess_cents, self.aud_cents)
    }
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
    /// What it will say to each day's hedge.
    answers: BTreeMap<RunId, Hedge>,
    /// Every hedge request: key and answer.
    requests: Vec<(String, Outcome)>,
}

impl Desk {
    fn hedge(&mut self, key: &str, run: &RunId) -> Outcome {
        let outcome = match self.answers.get(run) {
            Some(Hedge::Accept) => Outcome::Confirmed {
                receipt: format!("FWD-{:04}", self.requests.len() + 1).into_bytes(),
            },
            _ => Outcome::Failed {
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

/// Everything outside the engine; it outlives every process.
#[derive(Debug)]
struct World {
    bank: Bank,
    desk: Desk,
    /// Where each day's first process dies.
    crash_at: BTreeMap<RunId, Crash>,
    /// Days whose process already died once (it dies only the first time).
    crashed: BTreeSet<RunId>,
    /// The fencing token each run was last worked under (by the agent, a
    /// query or an undo).
    tokens: BTreeMap<RunId, FencingToken>,
    /// After each restart, with the dead worker's lease still unexpired by
    /// the clock: the crashed run, and whether the restarted service worked
    /// it under a larger token than the dead worker's.
    retaken: Vec<(RunId, bool)>,
}

impl World {
    /// True, once per day, when the day's process is to die at `point`.
    fn dies_at(&mut self, run: &RunId, point: Crash) -> bool {
        self.crash_at.get(run) == Some(&point) && self.crashed.insert(run.clone())
    }
}

type Shared = Arc<Mutex<World>>;

fn lock(world: &Shared) -> MutexGuard<'_, World> {
    world.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The end-of-day agent, written as if nothing ever failed. `disk` is its
/// process's disk, which the world kills where the day's crash is.
fn end_of_day(
    world: Shared,
    disk: MortalDisk,
) -> impl Fn(&mut RunCtx<'_>) -> Result<Vec<u8>, Fail> + Send + Sync + 'static {
    move |ctx| {
        let run = ctx.run_id().clone();
        lock(&world).tokens.insert(run.clone(), ctx.token());
        let input = String::from_utf8_lossy(ctx.input()).into_owned();
        let amounts: Vec<i64> = input.split(' ').filter_map(|n| n.parse().ok()).collect();
        let [excess, aud] = amounts[..] else {
            return Err(Fail::failed(
                "a day's input is its excess cash and exposure",
            ));
        };
        let transfer = |from: &str, to: &str| Instruction {
            from: from.into(),
            to: to.into(),
            cents: excess,
        };
        let sweep = transfer(OPERATING, MMF).encode();
        let back = Compensation {
            tool: "bank.transfer".into(),
            args: transfer(MMF, OPERATING).encode(),
            class: QUERYABLE,
        };
        // A bank that lost the request ("never received") is a retryable
        // failure: the next attempt gets the next key.
        let w = world.clone();
        let bank = Tool::new("bank.transfer", QUERYABLE)
            .with_query(move |call| {
                let mut w = lock(&w);
                w.tokens.insert(call.key.run().clone(), call.token);
                let found = w.bank.lookup(&call.idempotency_key);
                let said = said(&found);
                println!(
                    "   sweep {}: an intent without an outcome; the bank is asked: {said}",
                    call.key
                );
                found
            })
            .attempts(3);
        let mut sent = false;
        let swept = ctx.step_with_undo("sweep", &bank, &sweep, back, |call| {
            sent = true;
            let mut w = lock(&world);
            if w.dies_at(&run, Crash::BeforeSweepSent) {
                let key = &call.key;
                println!(
                    "   sweep intent {key} is durable; the process dies before calling the bank"
                );
                disk.kill();
                return Outcome::Unknown {
                    reason: "the process died".into(),
                };
            }
            let outcome = w.bank.execute(&call.idempotency_key, &sweep);
            println!(
                "   sweep {}: {} (sent to the bank)",
                call.key,
                said(&outcome)
            );
            outcome
        })?;
        if !sent {
            println!(
                "   sweep: confirmed {} (from the ledger, not sent again)",
                text(&swept)
            );
        }
        if lock(&world).dies_at(&run, Crash::AfterSweep) {
            println!("   the process dies after the sweep was recorded");
            disk.kill();
        }
        // A decline fails the run: the runtime's saga returns the sweep.
        let w = world.clone();
        let desk = Tool::new("fx.forward", QUERYABLE)
            .with_query(move |call| lock(&w).desk.lookup(&call.idempotency_key));
        let forward = format!("sell AUD {aud} forward 1M");
        let booked = ctx.step("hedge", &desk, forward.as_bytes(), |call| {
            let outcome = lock(&world).desk.hedge(&call.idempotency_key, &run);
            match &outcome {
                Outcome::Confirmed { receipt } => println!("   hedge: booked {}", text(receipt)),
                other => println!("   hedge: the desk declines it: {}", said(other)),
            }
            outcome
        })?;
        Ok(booked)
    }
}

/// Undoes a sweep: sends the transfer back, or, for a request a dead
/// process may have sent, asks the bank what it did (never sends twice).
fn undo_sweep(
    world: Shared,
    disk: MortalDisk,
) -> impl Fn(&UndoCall<'_>) -> Outcome + Send + Sync + 'static {
    move |undo| {
        let (key, run) = (&undo.ctx.key, undo.ctx.key.run());
        let mut w = lock(&world);
        w.tokens.insert(run.clone(), undo.ctx.token);
        if undo.query {
            let found = w.bank.lookup(&key.tool_key());
            println!(
                "   undo {key}: the bank is asked what it did: {}",
                said(&found)
            );
            return found;
        }
        let outcome = w.bank.execute(&key.tool_key(), undo.args);
        println!(
            "   undo {key}: the transfer back sent to the bank: {}",
            said(&outcome)
        );
        if w.dies_at(run, Crash::UndoSentNotRecorded) {
            println!("   the process dies before the undo's outcome is recorded");
            disk.kill();
        }
        outcome
    }
}

/// One process of the treasury service: its disk, and a runtime over an
/// engine on that disk serving the agent and the sweep's undo.
struct Process {
    disk: MortalDisk,
    runtime: Runtime,
}

fn boot(dir: &Path, clock: &Arc<ManualClock>, world: &Shared) -> Result<Process, BoxError> {
    let disk = MortalDisk::new();
    let engine = Engine::open_with(
        Arc::new(disk.clone()),
        clock.clone(),
        dir,
        EngineOptions::default(),
    )?;
    let runtime = Runtime::new(Arc::new(engine));
    runtime.register(
        "treasury-eod",
        "3.2",
        end_of_day(world.clone(), disk.clone()),
    )?;
    runtime.register_undo("bank.transfer", undo_sweep(world.clone(), disk.clone()));
    Ok(Process { disk, runtime })
}

/// The worker drains the queue; false if the process died on the way.
fn serve(process: &Process) -> Result<bool, BoxError> {
    let worker = WorkerId::new("treasury-worker")?;
    for _ in 0..100 {
        match process.runtime.work_once(&worker) {
            Ok(Some((_, driven))) => println!("   run {driven:?}"),
            Ok(None) => return Ok(true),
            Err(_) if process.disk.is_dead() => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    Err("the worker did not drain the queue".into())
}

/// The example: each day's run, with its crash and restart.
fn end_of_days(cli: &Cli, dir: &Path, checks: &mut Checks) -> Result<(), BoxError> {
    let clock = Arc::new(ManualClock::new(START_MS));
    let days = days(cli.quick)?;
    let world: Shared = Arc::new(Mutex::new(World {
        bank: Bank {
            operating: OPENING_CENTS,
            mmf: 0,
            transfers: Vec::new(),
        },
        desk: Desk {
            answers: days.iter().map(|d| (d.run.clone(), d.hedge)).collect(),
            requests: Vec::new(),
        },
        crash_at: days.iter().map(|d| (d.run.clone(), d.crash)).collect(),
        crashed: BTreeSet::new(),
        tokens: BTreeMap::new(),
        retaken: Vec::new(),
    }));
    let mut process = boot(dir, &clock, &world)?;
    for day in &days {
        println!(
            "== {}: sweep USD {} to the fund, then hedge AUD {}",
            day.date,
            money(day.excess_cents),
            money(day.aud_cents)
        );
        let input = day.input();
        process
            .runtime
            .start("treasury-eod", day.run.as_str(), input.as_bytes())?;
        if !serve(&process)? {
            process = restart(process, dir, &clock, &world, &day.run)?;
        }
        clock.advance_ms(DAY_MS);
    }
    let w = lock(&world);
    println!(
        "== {} of {} days crashed once and resumed",
        w.crashed.len(),
        days.len()
    );
    println!("== the checks");
    check(process.runtime.engine(), &days, &w, checks)
}

/// The process died: its engine is dropped without `close`. The restarted
/// service opens the database; no clock moves, yet the run is worked again
/// at once: the open released the dead worker's lease.
fn restart(
    dead: Process,
    dir: &Path,
    clock: &Arc<ManualClock>,
    world: &Shared,
    run: &RunId,
) -> Result<Process, BoxError> {
    drop(dead);
    let dead_token = lock(world).tokens.get(run).copied();
    let process = boot(dir, clock, world)?;
    let recovery = process.runtime.engine().recovery();
    println!(
        "   restarted: {} log records replayed, {} lease of the dead worker released",
        recovery.replayed_records, recovery.leases_released,
    );
    if !serve(&process)? {
        return Err(format!("{run} crashed twice").into());
    }
    let mut w = lock(world);
    let token = w.tokens.get(run).copied();
    println!(
        "   the run was worked again under token {}",
        token.map_or(0, |t| t.0)
    );
    w.retaken.push((run.clone(), token > dead_token));
    Ok(process)
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
        "after every crash, the restarted service worked the run at once, under a larger token",
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

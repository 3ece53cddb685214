//! A demo worker process: opens the database, claims runs and carries
//! each through the workflow with the engine's step ceremony (the intent
//! durable before the bank or the mailer is called), on a few threads,
//! until every run is over. It prints `done RUN` on stdout as each run
//! completes, for the parent's progress bar. It may be killed anywhere.
//!
//! **Invariant:** a tool is called only from inside `Engine::step`'s act,
//! so only after the intent of that very key is durable.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use actum::books::{
    RecordDecision, RunId, RunState, StepId, ToolClass, Transition, Usage, WorkerId, digest_of,
};
use actum::engine::{
    EffectCtx, Engine, EngineOptions, LeaseGrant, Recorded, StepRequest, StepResult, ToolOutcome,
    ToolSpec,
};

use super::rng::Rng;
use super::tools::{DEDUP_WINDOW_MS, Tool};
use super::{BANK_FILE, MAIL_FILE, amount_of, db_dir};
use crate::args::WorkerArgs;
use crate::failure::CliError;

/// How long a worker's lease on a run lasts. A killed worker's runs are
/// claimed again at once by the next worker process: its open releases the
/// leases the killed one held.
pub const LEASE_TTL_MS: u64 = 1_000;
/// How long an idle worker sleeps before it looks for work again.
const IDLE_MS: u64 = 25;
/// The longest a tool's request or answer travels, ms (seeded, from 0).
const LATENCY_MS_MAX: u64 = 8;
/// The longest the model thinks, ms (seeded, from 0).
const THINK_MS_MAX: u64 = 20;
/// Exit code of a worker that met an error it cannot step around.
const EXIT_WORKER_FAILED: u8 = 3;

/// The two tools, shared by a process's threads.
struct Tools {
    bank: Tool,
    mailer: Tool,
}

/// Runs the worker process.
pub fn run(args: &WorkerArgs) -> Result<ExitCode, CliError> {
    let db = db_dir(&args.dir);
    let fail = |e| CliError::engine(&db, e);
    let engine = Arc::new(Engine::open_existing(&db, EngineOptions::default()).map_err(fail)?);
    let tool = |name: &str, prefix| {
        Tool::open(&args.dir.join(name), prefix)
            .map_err(|e| CliError::unusable(format!("cannot open the demo's {name}: {e}")))
    };
    let tools = Arc::new(Tools {
        bank: tool(BANK_FILE, "tx")?,
        mailer: tool(MAIL_FILE, "msg")?,
    });
    let pid = std::process::id();
    let threads: Vec<_> = (0..args.threads.max(1))
        .map(|t| {
            let (engine, tools) = (Arc::clone(&engine), Arc::clone(&tools));
            let mut rng = Rng::new(args.seed ^ u64::from(t).rotate_left(32));
            thread::spawn(move || {
                let worker = WorkerId::new(format!("p{pid}-t{t}"))?;
                work_until_all_over(&engine, &tools, &worker, &mut rng)
            })
        })
        .collect();
    let mut failed = None;
    for handle in threads {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed = Some(e.to_string()),
            Err(_) => failed = Some("a worker thread panicked".to_string()),
        }
    }
    if let Some(why) = failed {
        eprintln!("demo worker {pid}: {why}");
        return Ok(ExitCode::from(EXIT_WORKER_FAILED));
    }
    match Arc::try_unwrap(engine) {
        Ok(engine) => engine.close().map_err(fail)?,
        Err(_) => return Err(CliError::unusable("a worker thread still holds the engine")),
    }
    Ok(ExitCode::SUCCESS)
}

/// One thread: claim, work, repeat, until no run is left to do.
fn work_until_all_over(
    engine: &Engine,
    tools: &Tools,
    worker: &WorkerId,
    rng: &mut Rng,
) -> actum::Result<()> {
    // Bounded by the runs: each pass completes one, or waits for a run
    // another thread holds (or whose lease outlived its thread) to free up.
    loop {
        let Some(grant) = engine.claim_next(worker, LEASE_TTL_MS)? else {
            if all_over(engine)? {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(IDLE_MS));
            continue;
        };
        match work(engine, tools, &grant, rng) {
            Ok(true) => {
                // The parent counts these for its progress bar only.
                let _ = writeln!(std::io::stdout(), "done {}", grant.run);
            }
            Ok(false) => {}
            // Another worker took the run over, or it ended: leave it.
            Err(
                actum::Error::LeaseLost { .. }
                | actum::Error::Fenced { .. }
                | actum::Error::RunTerminal { .. }
                | actum::Error::LeaseHeld { .. },
            ) => {}
            Err(e) => return Err(e),
        }
    }
}

/// True once no run is pending, running, waiting or paused.
fn all_over(engine: &Engine) -> actum::Result<bool> {
    for state in RunState::ALL.iter().filter(|s| !s.is_terminal()) {
        if !engine.runs(Some(*state), None, 1)?.is_empty() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Carries the leased run through the workflow; true if it completed,
/// false if a step could not finish now (it is claimed again later).
fn work(engine: &Engine, tools: &Tools, grant: &LeaseGrant, rng: &mut Rng) -> actum::Result<bool> {
    let run = &grant.run;
    let state = engine.run(run)?.map(|r| r.state);
    if state == Some(RunState::Pending) {
        move_to(engine, grant, RunState::Running, "the invoice is due")?;
    }
    let amount = decide_amount(engine, grant, rng)?;
    let what = format!("pay {amount} EUR to ACME for {run}");
    let Some(receipt) = step(engine, grant, ("pay", "bank.transfer"), &what, |ctx| {
        call(&tools.bank, ctx, &what, rng)
    })?
    else {
        return Ok(false);
    };
    let mail = format!("to finance@acme: {run} paid, {amount} EUR, bank receipt {receipt}");
    if step(engine, grant, ("mail", "mailer.send"), &mail, |ctx| {
        call(&tools.mailer, ctx, &mail, rng)
    })?
    .is_none()
    {
        return Ok(false);
    }
    move_to(engine, grant, RunState::Completed, "paid and confirmed")?;
    Ok(true)
}

fn move_to(engine: &Engine, grant: &LeaseGrant, to: RunState, reason: &str) -> actum::Result<()> {
    engine.transition(Transition {
        run: grant.run.clone(),
        guard: grant.guard.clone(),
        to,
        expected_version: None,
        reason: reason.to_string(),
    })?;
    Ok(())
}

/// The model call: what to pay. Journaled, so a resumed run reads the
/// recorded answer instead of asking (and waiting for) the model again.
fn decide_amount(engine: &Engine, grant: &LeaseGrant, rng: &mut Rng) -> actum::Result<String> {
    let run: &RunId = &grant.run;
    if let Some(record) = engine.replay_decision(run, 0, &digest_of(run.as_str().as_bytes()))? {
        return Ok(String::from_utf8_lossy(&record.output).into_owned());
    }
    thread::sleep(Duration::from_millis(rng.between(0, THINK_MS_MAX)));
    let amount = amount_of(run.as_str()).to_string();
    let recorded = engine.record_decision(RecordDecision {
        run: run.clone(),
        guard: grant.guard.clone(),
        position: 0,
        input_digest: digest_of(run.as_str().as_bytes()),
        output: amount.clone().into_bytes(),
        rationale: "the invoice names the amount".into(),
        usage: Usage {
            tokens_in: 120,
            tokens_out: 4,
            cost_micros: 90,
        },
    })?;
    Ok(match recorded {
        Recorded::New { .. } => amount,
        Recorded::Replay(record) => String::from_utf8_lossy(&record.output).into_owned(),
    })
}

/// One step of the ceremony; the receipt, or `None` if the step is not
/// done (its outcome unknown for now: the next claim resends it).
fn step(
    engine: &Engine,
    grant: &LeaseGrant,
    (step, tool): (&str, &str),
    args: &str,
    act: impl FnOnce(&EffectCtx) -> ToolOutcome,
) -> actum::Result<Option<String>> {
    let step = StepId::new(step)?;
    let request = StepRequest {
        guard: &grant.guard,
        run: &grant.run,
        step: &step,
        tool: ToolSpec {
            name: tool.to_string(),
            class: ToolClass::Idempotent {
                dedup_window_ms: DEDUP_WINDOW_MS,
            },
        },
        args: args.as_bytes(),
        rationale: "the invoice workflow",
        compensation: None,
    };
    Ok(match engine.step(&request, act)? {
        StepResult::Done { receipt, .. } => Some(String::from_utf8_lossy(&receipt).into_owned()),
        _ => None,
    })
}

/// Sends the request to `tool` with the step's key and token, with a
/// seeded latency each way (so kills land between the application and the
/// outcome, too).
fn call(tool: &Tool, ctx: &EffectCtx, what: &str, rng: &mut Rng) -> ToolOutcome {
    thread::sleep(Duration::from_millis(rng.between(0, LATENCY_MS_MAX)));
    let answer = tool.request(&ctx.key.encode(), ctx.token.0, what);
    thread::sleep(Duration::from_millis(rng.between(0, LATENCY_MS_MAX)));
    match answer {
        Ok(answer) => ToolOutcome::Confirmed {
            receipt: answer.receipt.into_bytes(),
        },
        Err(e) => ToolOutcome::Unknown {
            reason: format!("{} did not answer: {e}", tool.path().display()),
        },
    }
}

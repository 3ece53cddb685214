//! A demo worker process: opens the database, claims runs and carries
//! each through the workflow with the engine's step ceremony (the intent
//! durable before the bank or the mailer is called), on a few threads,
//! until every run is over. It prints `done RUN` on stdout as each run
//! completes, for the parent's progress bar. It may be killed anywhere.
//!
//! The bank deduplicates by key, so it is declared idempotent: an intent
//! found without an outcome is resent with its key. The mailer sends every
//! request it receives, so it is declared queryable, not idempotent: such
//! an intent is never resent; the mailer is asked whether it sent the key
//! (found: the step is done; not found: the attempt failed, and the next
//! one sends under a new key). Each mail carries the sender's lease expiry
//! as its deadline, so a request held up past it cannot land after a
//! successor asked.
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
use super::tools::{Answer, DEDUP_WINDOW_MS, Tool};
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
/// How long before its lease expires a worker's mail must reach the
/// mailer (the deadline it sends with), ms: room for the clocks of the
/// engine and the mailer to disagree.
const DEADLINE_MARGIN_MS: u64 = 200;
/// Attempts a step makes in one claim after a failure the next attempt may
/// mend (a mail the mailer never sent).
const STEP_ATTEMPTS_MAX: u32 = 3;

/// The two tools, shared by a process's threads.
pub(super) struct Tools {
    bank: Tool,
    mailer: Tool,
}

impl Tools {
    /// Opens the demo's bank (deduplicating) and mailer (not) in `dir`.
    pub(super) fn open(dir: &std::path::Path) -> Result<Tools, CliError> {
        let tool = |name: &str, prefix, window| {
            Tool::open(&dir.join(name), prefix, window)
                .map_err(|e| CliError::unusable(format!("cannot open the demo's {name}: {e}")))
        };
        Ok(Tools {
            bank: tool(BANK_FILE, "tx", Some(DEDUP_WINDOW_MS))?,
            mailer: tool(MAIL_FILE, "msg", None)?,
        })
    }
}

/// Runs the worker process.
pub fn run(args: &WorkerArgs) -> Result<ExitCode, CliError> {
    let db = db_dir(&args.dir);
    let fail = |e| CliError::engine(&db, e);
    let engine = Arc::new(Engine::open_existing(&db, EngineOptions::default()).map_err(fail)?);
    let tools = Arc::new(Tools::open(&args.dir)?);
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
pub(super) fn work(
    engine: &Engine,
    tools: &Tools,
    grant: &LeaseGrant,
    rng: &mut Rng,
) -> actum::Result<bool> {
    let run = &grant.run;
    let state = engine.run(run)?.map(|r| r.state);
    if state == Some(RunState::Pending) {
        move_to(engine, grant, RunState::Running, "the invoice is due")?;
    }
    let amount = decide_amount(engine, grant, rng)?;
    let what = format!("pay {amount} EUR to ACME for {run}");
    let bank = ToolSpec {
        name: "bank.transfer".into(),
        class: ToolClass::Idempotent {
            dedup_window_ms: DEDUP_WINDOW_MS,
        },
    };
    let Some(receipt) = step(engine, grant, ("pay", bank), &what, None, |ctx| {
        call(&tools.bank, ctx, &what, None, rng)
    })?
    else {
        return Ok(false);
    };
    let mail = format!("to finance@acme: {run} paid, {amount} EUR, bank receipt {receipt}");
    let mailer = ToolSpec {
        name: "mailer.send".into(),
        class: ToolClass::Queryable,
    };
    let deadline_ms = grant.expires_ms.saturating_sub(DEADLINE_MARGIN_MS);
    let ask = |ctx: &EffectCtx| query(&tools.mailer, ctx);
    let sent = step(engine, grant, ("mail", mailer), &mail, Some(&ask), |ctx| {
        call(&tools.mailer, ctx, &mail, Some(deadline_ms), rng)
    })?;
    if sent.is_none() {
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
/// done (its outcome unknown for now: the next claim resends or asks). An
/// ambiguous intent on a queryable tool (the mailer) is never resent: the
/// tool is asked whether it applied the key (`query`). A failure the next
/// attempt may mend is tried again, under a new key, a few times.
fn step(
    engine: &Engine,
    grant: &LeaseGrant,
    (step, tool): (&str, ToolSpec),
    args: &str,
    query: Option<&dyn Fn(&EffectCtx) -> ToolOutcome>,
    mut act: impl FnMut(&EffectCtx) -> ToolOutcome,
) -> actum::Result<Option<String>> {
    let step = StepId::new(step)?;
    let request = StepRequest {
        guard: &grant.guard,
        run: &grant.run,
        step: &step,
        tool,
        args: args.as_bytes(),
        rationale: "the invoice workflow",
        compensation: None,
    };
    for _ in 0..STEP_ATTEMPTS_MAX {
        let result = match query {
            Some(query) => engine.step_queryable(&request, &mut act, query)?,
            None => engine.step(&request, &mut act)?,
        };
        match result {
            StepResult::Done { receipt, .. } => {
                return Ok(Some(String::from_utf8_lossy(&receipt).into_owned()));
            }
            StepResult::Failed {
                retryable: true, ..
            } => continue,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// What the queried tool says of `ctx.key`. The demo's tools live in the
/// worker process, so once the process that sent a request is gone, or
/// its lease (the request's deadline) has passed, nothing can still
/// arrive: a key not found was not applied and never will be.
fn query(tool: &Tool, ctx: &EffectCtx) -> ToolOutcome {
    match tool.find(&ctx.key.encode()) {
        Some(receipt) => ToolOutcome::Confirmed {
            receipt: receipt.into_bytes(),
        },
        None => ToolOutcome::Failed {
            retryable: true,
            reason: "the mailer's sent folder does not hold the key".into(),
        },
    }
}

/// Sends the request to `tool` with the step's key and token (and the
/// deadline, if any), with a seeded latency each way (so kills land
/// between the application and the outcome, too).
fn call(
    tool: &Tool,
    ctx: &EffectCtx,
    what: &str,
    deadline_ms: Option<u64>,
    rng: &mut Rng,
) -> ToolOutcome {
    thread::sleep(Duration::from_millis(rng.between(0, LATENCY_MS_MAX)));
    let answer = tool.request(&ctx.key.encode(), ctx.token.0, what, deadline_ms);
    thread::sleep(Duration::from_millis(rng.between(0, LATENCY_MS_MAX)));
    match answer {
        Ok(Answer::Applied { receipt } | Answer::Deduplicated { receipt }) => {
            ToolOutcome::Confirmed {
                receipt: receipt.into_bytes(),
            }
        }
        Ok(Answer::Expired { deadline_ms }) => ToolOutcome::Failed {
            retryable: true,
            reason: format!(
                "{} dropped the request: it came after its deadline {deadline_ms} ms",
                tool.path().display()
            ),
        },
        Err(e) => ToolOutcome::Unknown {
            reason: format!("{} did not answer: {e}", tool.path().display()),
        },
    }
}

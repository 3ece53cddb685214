//! The writes an operator needs: `pause`, `resume` and `cancel` a run
//! (`Engine::operate`, no lease), and `reconcile` an effect whose outcome
//! is pending or unknown from what the operator found out. Each opens the
//! directory for writing (only if it holds a database), which releases the
//! leases a process that died left (said on stderr), says what changed and
//! closes the engine cleanly.
//!
//! `reconcile` goes through the engine's lease-free settle path, the one an
//! asynchronous tool's webhook uses (`Engine::deliver_reply`): it settles
//! the entry under the run's current token, ends a wait of the run for it,
//! and journals who settled it and why as the reply's sender (`reply from
//! operator NAME: REASON`), so the two together must fit one name (128
//! bytes). `Engine::reconcile` itself needs the lease holder's guard.
//!
//! **Invariant:** the engine is closed (a checkpoint and a clean shutdown)
//! whether the write succeeded or was refused.

use std::io::Write;
use std::process::ExitCode;

use actum::books::{EffectKey, EffectStatus, NAME_LEN_BYTES_MAX, OperatorAction, Outcome, RunId};
use actum::engine::{Engine, EngineOptions};
use serde_json::json;

use crate::args::{Found, OperateArgs, ReconcileArgs};
use crate::failure::CliError;

/// Runs `pause`, `resume` or `cancel`.
pub fn run(args: &OperateArgs, action: OperatorAction) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let run = RunId::new(args.run.as_str()).map_err(fail)?;
    let engine = Engine::open_existing(dir, EngineOptions::default()).map_err(fail)?;
    say_leases_released(&engine, dir);
    let done = operate(&engine, &run, action, args);
    // A resumed run whose budget is full pauses again at its next call.
    let full = match (&done, action) {
        (Ok(_), OperatorAction::Resume) => engine
            .budget(&run)
            .map(|book| crate::paused::budget_full(&book, engine.clock().now_ms()))
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let closed = engine.close();
    let (before, after) = done.map_err(fail)?;
    closed.map_err(fail)?;
    if !full.is_empty() {
        // A failed write to stderr is no reason to fail the command.
        let _ = writeln!(
            std::io::stderr(),
            "note: run {run}'s budget has reached {}: it will pause again at its next call \
             unless the budget is raised (`actum budget {} --run {run} ...`)",
            full.join(", "),
            dir.display()
        );
    }
    let changed = before != after.state;
    let said = if args.json {
        let value = json!({
            "run": run.as_str(),
            "before": before.name(),
            "after": after.state.name(),
            "changed": changed,
            "version": after.version,
        });
        writeln!(std::io::stdout(), "{value}")
    } else if changed {
        writeln!(
            std::io::stdout(),
            "run {run}: {before} -> {} (version {}), by {}: {}",
            after.state,
            after.version,
            args.operator,
            args.reason
        )
    } else {
        writeln!(
            std::io::stdout(),
            "run {run} is {before} already; nothing changed"
        )
    };
    said.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

/// Says on stderr (stdout stays the command's answer) that the open
/// released the leases of the process that had `dir` before, if it did:
/// that changed the books too.
pub fn say_leases_released(engine: &Engine, dir: &std::path::Path) {
    let released = engine.recovery().leases_released;
    if released > 0 {
        // A failed write to stderr is no reason to fail the command.
        let _ = writeln!(
            std::io::stderr(),
            "note: opening {} released {released} lease(s) of the process that had it open \
             before (its lock was free, so it is gone); their runs can be claimed again now",
            dir.display()
        );
    }
}

/// The run's state before, and the operator's result.
fn operate(
    engine: &Engine,
    run: &RunId,
    action: OperatorAction,
    args: &OperateArgs,
) -> actum::Result<(actum::books::RunState, actum::engine::Operated)> {
    let before = engine
        .run(run)?
        .ok_or_else(|| actum::Error::NotFound {
            what: format!("run {run}"),
        })?
        .state;
    let after = engine.operate(run, action, &args.operator, &args.reason)?;
    Ok((before, after))
}

/// Runs `reconcile`.
pub fn reconcile(args: &ReconcileArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let key = EffectKey::parse(&args.key).map_err(fail)?;
    let sender = format!("operator {}: {}", args.operator, args.reason);
    if sender.len() > NAME_LEN_BYTES_MAX {
        return Err(CliError::unusable(format!(
            "--operator and --reason are journaled together as {sender:?}, {} bytes; they must \
             fit {NAME_LEN_BYTES_MAX}: shorten the reason",
            sender.len()
        )));
    }
    let outcome = match args.outcome {
        Found::Confirmed => Outcome::Confirmed {
            receipt: args.receipt.clone().unwrap_or_default().into_bytes(),
        },
        Found::Failed => Outcome::Failed {
            retryable: args.retryable,
            reason: args.error.clone().unwrap_or_default(),
        },
    };
    let engine = Engine::open_existing(dir, EngineOptions::default()).map_err(fail)?;
    say_leases_released(&engine, dir);
    let done = settle(&engine, &key, outcome, &sender);
    let closed = engine.close();
    let (before, after, woke) = done.map_err(fail)?;
    closed.map_err(fail)?;
    let said = if args.json {
        let value = json!({
            "key": key.to_string(),
            "before": before,
            "after": after,
            "changed": before != after,
            "wait_ended_at_step": woke,
        });
        writeln!(std::io::stdout(), "{value}")
    } else {
        say_settled(&key, (before, after), woke.as_deref(), &sender)
    };
    said.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

/// The entry's status before and after, and the step whose wait ended.
fn settle(
    engine: &Engine,
    key: &EffectKey,
    outcome: Outcome,
    sender: &str,
) -> actum::Result<(&'static str, &'static str, Option<String>)> {
    let entry = engine.effect(key)?.ok_or_else(|| actum::Error::NotFound {
        what: format!("effect {key}"),
    })?;
    let before = entry.status.name();
    let woke = engine.deliver_reply(key, outcome, sender)?;
    let after = engine.effect(key)?.map_or("missing", |e| e.status.name());
    assert!(
        !matches!(entry.status, EffectStatus::Confirmed { .. }) || before == after,
        "a confirmed entry is never settled again"
    );
    Ok((before, after, woke.map(|step| step.to_string())))
}

fn say_settled(
    key: &EffectKey,
    (before, after): (&str, &str),
    woke: Option<&str>,
    sender: &str,
) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if before == after {
        return writeln!(out, "effect {key} is {after} already; nothing changed");
    }
    writeln!(
        out,
        "effect {key}: {before} -> {after} (journaled as from {sender:?})"
    )?;
    if let Some(step) = woke {
        writeln!(
            out,
            "run {}: its wait at step {step} ended; a worker can claim the run again",
            key.run()
        )?;
    }
    Ok(())
}

//! The writes an operator needs: `pause`, `resume`, `cancel` and `abandon`
//! a run (`Engine::operate`, no lease), and `reconcile` an effect whose
//! outcome is pending or unknown from what the operator found out. Each
//! is an operator's request (`operator.rs`): sent to the engine that has
//! the directory open through its operator channel, or carried out on the
//! directory opened for writing (only if it holds a database), which
//! releases the leases a process that died left (said on stderr) and
//! closes the engine cleanly. Each says what changed.
//!
//! `reconcile` goes through the engine's lease-free settle path, the one an
//! asynchronous tool's webhook uses (`Engine::deliver_reply`): it settles
//! the entry under the run's current token, ends a wait of the run for it,
//! and journals who settled it and why as the reply's sender (`reply from
//! operator NAME: REASON`), so the two together must fit one name (128
//! bytes). `Engine::reconcile` itself needs the lease holder's guard.
//!
//! **Invariant:** a request is carried out once, however often it is sent
//! under its id; an engine this command opened is closed (a checkpoint and
//! a clean shutdown) whether the write succeeded or was refused.

use std::io::Write;
use std::process::ExitCode;

use actum::books::{EffectKey, NAME_LEN_BYTES_MAX, OperatorAction, Outcome, RunId};
use actum::engine::Engine;
use actum::operator::{Act, Done, Request};
use serde_json::json;

use crate::args::{Found, OperateArgs, ReconcileArgs};
use crate::failure::CliError;
use crate::operator::{carry_and_say, made_up_id};

/// Runs `pause`, `resume`, `cancel` or `abandon`.
pub fn run(args: &OperateArgs, action: OperatorAction) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let run = RunId::new(args.run.as_str()).map_err(fail)?;
    let request = Request {
        id: made_up_id(args.request_id.as_deref()),
        operator: args.operator.clone(),
        reason: args.reason.clone(),
        act: Act::Operate {
            run: run.clone(),
            action,
        },
    };
    let done = carry_and_say(dir, &request, args.json, |done| match done {
        Done::Operated {
            before,
            after,
            version,
            ..
        } => Some(json!({
            "run": run.as_str(),
            "before": before.name(),
            "after": after.name(),
            "changed": before != after,
            "version": version,
        })),
        _ => None,
    })?;
    if let Done::Operated { before, after, .. } = done
        && action == OperatorAction::Resume
        && before != after
    {
        say_budget_full(dir, &run);
    }
    Ok(ExitCode::SUCCESS)
}

/// Says on stderr that a resumed run's budget is full: it pauses again at
/// its next call.
fn say_budget_full(dir: &std::path::Path, run: &RunId) {
    let full = crate::live::open_to_read(dir)
        .and_then(|reading| {
            let book = reading.engine.budget(run)?;
            Ok(crate::paused::budget_full(
                &book,
                reading.engine.clock().now_ms(),
            ))
        })
        .unwrap_or_default();
    if !full.is_empty() {
        // A failed write to stderr is no reason to fail the command.
        let _ = writeln!(
            std::io::stderr(),
            "note: run {run}'s budget has reached {}: it will pause again at its next call \
             unless the budget is raised (`actum budget {} --run {run} ...`)",
            full.join(", "),
            crate::place::shown(dir)
        );
    }
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
            crate::place::shown(dir)
        );
    }
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
    let request = Request {
        id: made_up_id(args.request_id.as_deref()),
        operator: args.operator.clone(),
        reason: args.reason.clone(),
        act: Act::Reconcile {
            key: key.clone(),
            outcome,
        },
    };
    carry_and_say(dir, &request, args.json, |done| match done {
        Done::Reconciled {
            before,
            after,
            wait_ended,
            ..
        } => Some(json!({
            "key": key.to_string(),
            "before": before,
            "after": after,
            "changed": before != after,
            "wait_ended_at_step": wait_ended.as_ref().map(|s| s.as_str().to_string()),
        })),
        _ => None,
    })?;
    Ok(ExitCode::SUCCESS)
}

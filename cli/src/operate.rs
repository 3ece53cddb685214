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
use std::path::Path;
use std::process::ExitCode;

use actum::books::{
    EffectKey, EffectStatus, NAME_LEN_BYTES_MAX, OperatorAction, Outcome, RunId, RunState,
};
use actum::engine::{Engine, EngineOptions, Operated};
use serde_json::json;

use crate::args::{Found, OperateArgs, ReconcileArgs};
use crate::failure::CliError;

/// An operator's move done: the run's state before, the engine's answer,
/// and, for a resume, the limits its budget has reached (it pauses again at
/// its next call unless they are raised).
pub(crate) struct Moved {
    pub before: RunState,
    pub after: Operated,
    pub budget_full: Vec<String>,
}

impl Moved {
    /// What `pause`, `resume` or `cancel` says of it, for a person.
    pub(crate) fn sentence(&self, run: &RunId, operator: &str, reason: &str) -> String {
        if self.before == self.after.state {
            return format!("run {run} is {} already; nothing changed", self.before);
        }
        format!(
            "run {run}: {} -> {} (version {}), by {operator}: {reason}",
            self.before, self.after.state, self.after.version
        )
    }

    /// The warning a resume of a run whose budget is full earns, if it does.
    pub(crate) fn budget_note(&self, dir: &Path, run: &RunId) -> Option<String> {
        (!self.budget_full.is_empty()).then(|| {
            format!(
                "run {run}'s budget has reached {}: it will pause again at its next call \
                 unless the budget is raised (`actum budget {} --run {run} ...`)",
                self.budget_full.join(", "),
                dir.display()
            )
        })
    }
}

/// Opens `dir` for writing and makes the operator's move `action` on
/// `run`, journaled with `operator` and `reason`; closes the engine.
pub(crate) fn operate_on(
    dir: &Path,
    run: &RunId,
    action: OperatorAction,
    operator: &str,
    reason: &str,
) -> Result<Moved, CliError> {
    let fail = |e| CliError::engine(dir, e);
    let engine = Engine::open_existing(dir, EngineOptions::default()).map_err(fail)?;
    say_leases_released(&engine, dir);
    let done = operate(&engine, run, action, operator, reason);
    // A resumed run whose budget is full pauses again at its next call.
    let budget_full = match (&done, action) {
        (Ok(_), OperatorAction::Resume) => engine
            .budget(run)
            .map(|book| crate::paused::budget_full(&book, engine.clock().now_ms()))
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let closed = engine.close();
    let (before, after) = done.map_err(fail)?;
    closed.map_err(fail)?;
    Ok(Moved {
        before,
        after,
        budget_full,
    })
}

/// Runs `pause`, `resume` or `cancel`.
pub fn run(args: &OperateArgs, action: OperatorAction) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let run = RunId::new(args.run.as_str()).map_err(|e| CliError::engine(dir, e))?;
    let moved = operate_on(dir, &run, action, &args.operator, &args.reason)?;
    if let Some(note) = moved.budget_note(dir, &run) {
        // A failed write to stderr is no reason to fail the command.
        let _ = writeln!(std::io::stderr(), "note: {note}");
    }
    let said = if args.json {
        let value = json!({
            "run": run.as_str(),
            "before": moved.before.name(),
            "after": moved.after.state.name(),
            "changed": moved.before != moved.after.state,
            "version": moved.after.version,
        });
        writeln!(std::io::stdout(), "{value}")
    } else {
        writeln!(
            std::io::stdout(),
            "{}",
            moved.sentence(&run, &args.operator, &args.reason)
        )
    };
    said.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

/// Says on stderr (stdout stays the command's answer) that the open
/// released the leases of the process that had `dir` before, if it did:
/// that changed the books too.
pub fn say_leases_released(engine: &Engine, dir: &Path) {
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
    operator: &str,
    reason: &str,
) -> actum::Result<(RunState, Operated)> {
    let before = engine
        .run(run)?
        .ok_or_else(|| actum::Error::NotFound {
            what: format!("run {run}"),
        })?
        .state;
    let after = engine.operate(run, action, operator, reason)?;
    Ok((before, after))
}

/// An effect settled by an operator: its status before and after, the step
/// whose wait it ended, and the sender it was journaled as.
pub(crate) struct Settled {
    pub before: &'static str,
    pub after: &'static str,
    pub woke: Option<String>,
    pub sender: String,
}

impl Settled {
    /// What `reconcile` says of it, for a person, one line each.
    pub(crate) fn lines(&self, key: &EffectKey) -> Vec<String> {
        if self.before == self.after {
            return vec![format!(
                "effect {key} is {} already; nothing changed",
                self.after
            )];
        }
        let mut lines = vec![format!(
            "effect {key}: {} -> {} (journaled as from {:?})",
            self.before, self.after, self.sender
        )];
        if let Some(step) = &self.woke {
            lines.push(format!(
                "run {}: its wait at step {step} ended; a worker can claim the run again",
                key.run()
            ));
        }
        lines
    }
}

/// Opens `dir` for writing and settles the effect `key` to `outcome`, as
/// found out by `operator` (`reason` says how); closes the engine. Refused,
/// with nothing written, if the two do not fit one name.
pub(crate) fn settle_in(
    dir: &Path,
    key: &EffectKey,
    outcome: Outcome,
    operator: &str,
    reason: &str,
) -> Result<Settled, CliError> {
    let fail = |e| CliError::engine(dir, e);
    let sender = format!("operator {operator}: {reason}");
    if sender.len() > NAME_LEN_BYTES_MAX {
        return Err(CliError::unusable(format!(
            "the operator and the reason are journaled together as {sender:?}, {} bytes; they \
             must fit {NAME_LEN_BYTES_MAX}: shorten the reason",
            sender.len()
        )));
    }
    let engine = Engine::open_existing(dir, EngineOptions::default()).map_err(fail)?;
    say_leases_released(&engine, dir);
    let done = settle(&engine, key, outcome, &sender);
    let closed = engine.close();
    let (before, after, woke) = done.map_err(fail)?;
    closed.map_err(fail)?;
    Ok(Settled {
        before,
        after,
        woke,
        sender,
    })
}

/// Runs `reconcile`.
pub fn reconcile(args: &ReconcileArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let key = EffectKey::parse(&args.key).map_err(|e| CliError::engine(dir, e))?;
    let outcome = match args.outcome {
        Found::Confirmed => Outcome::Confirmed {
            receipt: args.receipt.clone().unwrap_or_default().into_bytes(),
        },
        Found::Failed => Outcome::Failed {
            retryable: args.retryable,
            reason: args.error.clone().unwrap_or_default(),
        },
    };
    let settled = settle_in(dir, &key, outcome, &args.operator, &args.reason)?;
    let said = if args.json {
        let value = json!({
            "key": key.to_string(),
            "before": settled.before,
            "after": settled.after,
            "changed": settled.before != settled.after,
            "wait_ended_at_step": settled.woke,
        });
        writeln!(std::io::stdout(), "{value}")
    } else {
        let mut out = std::io::stdout().lock();
        settled
            .lines(&key)
            .iter()
            .try_for_each(|line| writeln!(out, "{line}"))
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

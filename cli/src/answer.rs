//! The operator's answers to a run: `approve` or `reject` its open approval
//! (bound to the arguments' digest `show` printed, so the operator answers
//! for what they saw), `signal` it, and set its `budget`. Each opens the
//! directory for writing, as `pause` does, journals who and why through the
//! engine's own command, says what changed and closes the engine.
//!
//! **Invariant:** an approval is decided only for the digest the operator
//! gave: a prefix of fewer than 8 hex digits, or one the open approval's
//! digest does not start with, is refused before anything is written; the
//! engine is closed whether the write succeeded or was refused.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use actum::books::{BudgetLimits, Digest, RunId, RunState, StepId, WaitFor};
use actum::engine::{Engine, EngineOptions};
use serde_json::json;

use crate::args::{ApproveArgs, BudgetArgs, SignalArgs};
use crate::failure::CliError;
use crate::operate::say_leases_released;

/// Hex digits of a digest an operator must give at least (what `show`
/// prints).
const DIGEST_PREFIX_MIN: usize = 8;

/// Opens `dir` for writing, runs `write`, closes the engine whatever
/// happened, and returns what `write` answered.
pub(crate) fn with_engine<T>(
    dir: &Path,
    write: impl FnOnce(&Engine) -> Result<T, CliError>,
) -> Result<T, CliError> {
    let fail = |e| CliError::engine(dir, e);
    let engine = Engine::open_existing(dir, EngineOptions::default()).map_err(fail)?;
    say_leases_released(&engine, dir);
    let done = write(&engine);
    let closed = engine.close();
    let answer = done?;
    closed.map_err(fail)?;
    Ok(answer)
}

/// The open approval of `run`: its step, digest and role.
pub(crate) fn open_approval(
    engine: &Engine,
    run: &RunId,
) -> actum::Result<Option<(StepId, Digest, String)>> {
    let book = engine.waits(run)?;
    Ok(book
        .waits
        .into_iter()
        .filter(|w| w.is_open())
        .find_map(|w| match w.wait_for {
            WaitFor::Approval { args_digest, role } => Some((w.step, args_digest, role)),
            _ => None,
        }))
}

/// The open approval of `run` whose arguments' digest starts with `given`
/// (lowercase hex), or why there is none.
fn the_approval(
    engine: &Engine,
    dir: &Path,
    run: &RunId,
    given: &str,
    as_given: &str,
) -> Result<(StepId, Digest, String), CliError> {
    let fail = |e| CliError::engine(dir, e);
    engine
        .run(run)
        .map_err(fail)?
        .ok_or_else(|| CliError::unusable(format!("{}: no run {run}", dir.display())))?;
    let Some((step, digest, role)) = open_approval(engine, run).map_err(fail)? else {
        return Err(CliError::unusable(format!(
            "{}: run {run} waits for no approval; nothing was changed",
            dir.display()
        )));
    };
    if !digest.to_string().starts_with(given) {
        return Err(CliError::unusable(format!(
            "{}: the approval run {run} waits for (step {step}) is for arguments {}, not \
             {as_given}; nothing was changed: read them again with `actum show`",
            dir.display(),
            digest.short(),
        )));
    }
    Ok((step, digest, role))
}

/// An approval decided: its step, the role it was asked of, and whether
/// deciding it ended the run's wait.
pub(crate) struct Decided {
    pub step: StepId,
    pub role: String,
    pub woke: bool,
}

impl Decided {
    /// What `approve` says of it, for a person.
    pub(crate) fn sentence(&self, run: &RunId, approve: bool, approver: &str) -> String {
        format!(
            "run {run}: step {} {} by {approver} as {}{}",
            self.step,
            if approve { "approved" } else { "rejected" },
            self.role,
            if self.woke { "; the run can go on" } else { "" }
        )
    }
}

/// Decides the open approval of `run` in `dir` whose arguments' digest
/// starts with `digest` (8 hex digits or more): approves it (`approve`
/// true) or rejects it, journaled with `approver` and `note`. Refused,
/// with nothing written, for a shorter or other digest.
pub(crate) fn decide(
    dir: &Path,
    run: &RunId,
    digest: &str,
    approve: bool,
    approver: &str,
    note: &str,
) -> Result<Decided, CliError> {
    let fail = |e| CliError::engine(dir, e);
    let given = digest.to_ascii_lowercase();
    if given.len() < DIGEST_PREFIX_MIN || !given.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CliError::unusable(format!(
            "--digest {digest:?}: give at least {DIGEST_PREFIX_MIN} hex digits of the arguments' \
             digest (`actum show {} {run}` prints them under waits)",
            dir.display()
        )));
    }
    // Checked first on a read-only open, so a refused answer writes nothing
    // (an open for writing does); then again under the lock, where it holds.
    {
        let engine = Engine::open_read_only(dir, EngineOptions::default()).map_err(fail)?;
        the_approval(&engine, dir, run, &given, digest)?;
    }
    with_engine(dir, |engine| {
        let (step, args_digest, role) = the_approval(engine, dir, run, &given, digest)?;
        let woke = engine
            .decide_approval(run, &step, args_digest, approver, &role, approve, note)
            .map_err(fail)?;
        Ok(Decided { step, role, woke })
    })
}

/// Runs `approve` (`approve` true) or `reject`.
pub fn approve(args: &ApproveArgs, approve: bool) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let run = RunId::new(args.run.as_str()).map_err(|e| CliError::engine(dir, e))?;
    let verb = if approve { "approved" } else { "rejected" };
    let decided = decide(dir, &run, &args.digest, approve, &args.approver, &args.note)?;
    let said = if args.json {
        let value = json!({
            "run": run.as_str(),
            "step": decided.step.as_str(),
            "decision": verb,
            "role": decided.role,
            "woke": decided.woke,
        });
        writeln!(std::io::stdout(), "{value}")
    } else {
        writeln!(
            std::io::stdout(),
            "{}",
            decided.sentence(&run, approve, &args.approver)
        )
    };
    said.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

/// An approval a run waits for.
pub(crate) struct Pending {
    pub run: RunId,
    pub step: StepId,
    /// The arguments' digest, in full (lowercase hex).
    pub digest: String,
    pub role: String,
    pub opened_ms: u64,
    pub deadline_ms: Option<u64>,
}

/// The open approvals of the runs waiting for a person, in run id order.
pub(crate) fn pending_approvals(engine: &Engine) -> actum::Result<Vec<Pending>> {
    let mut found = Vec::new();
    crate::runs::each_run(engine, Some(RunState::WaitingHuman), |run| {
        let book = engine.waits(&run.id)?;
        let open = book.waits.into_iter().filter(|w| w.is_open());
        found.extend(open.filter_map(|w| match w.wait_for {
            WaitFor::Approval { args_digest, role } => Some(Pending {
                run: run.id.clone(),
                step: w.step,
                digest: args_digest.to_string(),
                role,
                opened_ms: w.opened_ms,
                deadline_ms: w.deadline_ms,
            }),
            _ => None,
        }));
        Ok(())
    })?;
    Ok(found)
}

/// Runs `signal`.
pub fn signal(args: &SignalArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let run = RunId::new(args.run.as_str()).map_err(fail)?;
    let payload = args.payload.clone().unwrap_or_default().into_bytes();
    let sent = with_engine(dir, |engine| {
        engine
            .signal(&run, &args.name, &payload, &args.sender)
            .map_err(fail)
    })?;
    let said = if args.json {
        let value = json!({
            "run": run.as_str(),
            "name": args.name,
            "seq": sent.seq,
            "taken_by": sent.taken_by.as_ref().map(|s| s.as_str().to_string()),
        });
        writeln!(std::io::stdout(), "{value}")
    } else {
        match &sent.taken_by {
            Some(step) => writeln!(
                std::io::stdout(),
                "run {run}: signal {} ({}) ended the wait of step {step}",
                sent.seq,
                args.name
            ),
            None => writeln!(
                std::io::stdout(),
                "run {run}: signal {} ({}) kept in its inbox until a step waits for it",
                sent.seq,
                args.name
            ),
        }
    };
    said.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `budget`.
pub fn budget(args: &BudgetArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let run = RunId::new(args.run.as_str()).map_err(fail)?;
    let limits = BudgetLimits {
        tokens_in: args.tokens_in,
        tokens_out: args.tokens_out,
        cost_micros: args.cost_micros,
        tool_calls: args.tool_calls,
        wall_ms: args.wall_ms,
    };
    let book = with_engine(dir, |engine| {
        engine
            .set_budget(&run, limits, &args.by, &args.reason)
            .map_err(fail)?;
        engine.budget(&run).map_err(fail)
    })?;
    let said = if args.json {
        let value = json!({
            "run": run.as_str(),
            "limits": book.limits.as_ref().map(ToString::to_string),
            "spent": book.spent.to_string(),
            "held": book.reserved.to_string(),
        });
        writeln!(std::io::stdout(), "{value}")
    } else {
        writeln!(
            std::io::stdout(),
            "run {run}: budget {} (spent {}, held {}), set by {}: {}",
            book.limits
                .as_ref()
                .map_or_else(|| "without limits".to_string(), ToString::to_string),
            book.spent,
            book.reserved,
            args.by,
            args.reason
        )
    };
    said.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

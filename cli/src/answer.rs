//! The operator's answers to a run: `approve` or `reject` its open approval
//! (bound to the arguments' digest `show` printed, so the operator answers
//! for what they saw), `signal` it, and set its `budget`. Each is an
//! operator's request, as `pause` is (`operator.rs`): through the live
//! engine's operator channel, or on the directory opened for writing. The
//! engine journals who and why through its own command; this says what
//! changed.
//!
//! **Invariant:** an approval is decided only for the digest the operator
//! gave: a prefix of fewer than 8 hex digits, or one the open approval's
//! digest does not start with, is refused before anything is written (the
//! engine checks it again under its lock, where it holds).

use std::io::Write;
use std::process::ExitCode;

use actum::books::{BudgetLimits, Digest, RunId, RunState, StepId, WaitFor};
use actum::engine::Engine;
use actum::operator::{Act, Done, Request, the_approval};
use serde_json::json;

use crate::args::{ApproveArgs, BudgetArgs, SignalArgs};
use crate::failure::CliError;
use crate::operator::{carry_and_say, made_up_id};

/// Runs `approve` (`approve` true) or `reject`.
pub fn approve(args: &ApproveArgs, approve: bool) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let run = RunId::new(args.run.as_str()).map_err(fail)?;
    let given = args.digest.to_ascii_lowercase();
    // Checked first on a read (a snapshot if the database is live), so a
    // refused answer (a digest prefix too short or of other arguments)
    // opens nothing for writing.
    {
        let reading = crate::live::open_to_read(dir).map_err(fail)?;
        reading
            .engine
            .read(|books| the_approval(books, &run, &given))
            .map_err(|e| {
                CliError::unusable(format!(
                    "{}: {e}; nothing was changed",
                    crate::place::shown(dir)
                ))
            })?;
    }
    let request = Request {
        id: made_up_id(args.request_id.as_deref()),
        operator: args.approver.clone(),
        reason: args.note.clone(),
        act: Act::Approval {
            run: run.clone(),
            digest_prefix: given,
            approve,
        },
    };
    let verb = if approve { "approved" } else { "rejected" };
    carry_and_say(dir, &request, args.json, |done| match done {
        Done::Approval {
            step, role, woke, ..
        } => Some(json!({
            "run": run.as_str(),
            "step": step.as_str(),
            "decision": verb,
            "role": role,
            "woke": woke,
        })),
        _ => None,
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The open approval of `run`: its step, digest and role.
pub(crate) fn open_approval(
    engine: &Engine,
    run: &RunId,
) -> actum::Result<Option<(StepId, Digest, String)>> {
    engine.read(|books| Ok(actum::operator::open_approval(books, run)))
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
    let request = Request {
        id: made_up_id(args.request_id.as_deref()),
        operator: args.sender.clone(),
        reason: format!("signal {}", args.name),
        act: Act::Signal {
            run: run.clone(),
            name: args.name.clone(),
            payload: args.payload.clone().unwrap_or_default().into_bytes(),
        },
    };
    carry_and_say(dir, &request, args.json, |done| match done {
        Done::Signalled { seq, taken_by, .. } => Some(json!({
            "run": run.as_str(),
            "name": args.name,
            "seq": seq,
            "taken_by": taken_by.as_ref().map(|s| s.as_str().to_string()),
        })),
        _ => None,
    })?;
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
    let request = Request {
        id: made_up_id(args.request_id.as_deref()),
        operator: args.by.clone(),
        reason: args.reason.clone(),
        act: Act::Budget {
            run: run.clone(),
            limits,
        },
    };
    // What the run has spent and holds, read after the write (a snapshot
    // if the database is live).
    let book = || {
        crate::live::open_to_read(dir)
            .and_then(|reading| reading.engine.budget(&run))
            .map_err(fail)
    };
    let done = carry_and_say(dir, &request, args.json, |done| match done {
        Done::Budgeted { .. } => Some(match book() {
            Ok(book) => json!({
                "run": run.as_str(),
                "limits": book.limits.as_ref().map(ToString::to_string),
                "spent": book.spent.to_string(),
                "held": book.reserved.to_string(),
            }),
            Err(_) => json!({ "run": run.as_str(), "limits": limits.to_string() }),
        }),
        _ => None,
    })?;
    if matches!(done, Done::Budgeted { .. }) && !args.json {
        let book = book()?;
        writeln!(
            std::io::stdout(),
            "run {run}: spent {}, held {}",
            book.spent,
            book.reserved
        )
        .map_err(CliError::output)?;
    }
    Ok(ExitCode::SUCCESS)
}

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

use actum::books::{BudgetLimits, RunId};
use actum::operator::{Act, DIGEST_PREFIX_MIN, Done, Request, the_approval};
use serde_json::json;

use crate::args::{ApproveArgs, BudgetArgs, SignalArgs};
use crate::failure::CliError;
use crate::operate::say_other;
use crate::operator::{carry, made_up_id};

/// Runs `approve` (`approve` true) or `reject`.
pub fn approve(args: &ApproveArgs, approve: bool) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let run = RunId::new(args.run.as_str()).map_err(fail)?;
    let given = args.digest.to_ascii_lowercase();
    if given.len() < DIGEST_PREFIX_MIN || !given.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CliError::unusable(format!(
            "--digest {:?}: give at least {DIGEST_PREFIX_MIN} hex digits of the arguments' digest \
             (`actum show {} {run}` prints them under waits)",
            args.digest,
            dir.display()
        )));
    }
    // Checked first on a read (a snapshot if the database is live), so a
    // refused answer opens nothing for writing.
    {
        let reading = crate::live::open_to_read(dir).map_err(fail)?;
        reading
            .engine
            .read(|books| the_approval(books, &run, &given))
            .map_err(|e| {
                CliError::unusable(format!("{}: {e}; nothing was changed", dir.display()))
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
    let (done, via) = carry(dir, &request)?;
    let verb = if approve { "approved" } else { "rejected" };
    let said = match done {
        Done::Approval {
            step, role, woke, ..
        } => {
            if args.json {
                let value = json!({
                    "run": run.as_str(),
                    "step": step.as_str(),
                    "decision": verb,
                    "role": role,
                    "woke": woke,
                    "request": request.id,
                    "via": via.name(),
                });
                writeln!(std::io::stdout(), "{value}")
            } else {
                writeln!(
                    std::io::stdout(),
                    "run {run}: step {step} {verb} by {} as {role}{}",
                    args.approver,
                    if woke { "; the run can go on" } else { "" }
                )
            }
        }
        other => say_other(&request, &other, args.json),
    };
    said.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
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
    let (done, via) = carry(dir, &request)?;
    let said = match done {
        Done::Signalled { seq, taken_by, .. } => {
            if args.json {
                let value = json!({
                    "run": run.as_str(),
                    "name": args.name,
                    "seq": seq,
                    "taken_by": taken_by.as_ref().map(|s| s.as_str().to_string()),
                    "request": request.id,
                    "via": via.name(),
                });
                writeln!(std::io::stdout(), "{value}")
            } else {
                match &taken_by {
                    Some(step) => writeln!(
                        std::io::stdout(),
                        "run {run}: signal {seq} ({}) ended the wait of step {step}",
                        args.name
                    ),
                    None => writeln!(
                        std::io::stdout(),
                        "run {run}: signal {seq} ({}) kept in its inbox until a step waits for it",
                        args.name
                    ),
                }
            }
        }
        other => say_other(&request, &other, args.json),
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
    let request = Request {
        id: made_up_id(args.request_id.as_deref()),
        operator: args.by.clone(),
        reason: args.reason.clone(),
        act: Act::Budget {
            run: run.clone(),
            limits,
        },
    };
    let (done, via) = carry(dir, &request)?;
    if !matches!(done, Done::Budgeted { .. }) {
        say_other(&request, &done, args.json).map_err(CliError::output)?;
        return Ok(ExitCode::SUCCESS);
    }
    // What the run has spent and holds, read after the write (a snapshot
    // if the database is live).
    let book = crate::live::open_to_read(dir)
        .and_then(|reading| reading.engine.budget(&run))
        .map_err(fail)?;
    let said = if args.json {
        let value = json!({
            "run": run.as_str(),
            "limits": book.limits.as_ref().map(ToString::to_string),
            "spent": book.spent.to_string(),
            "held": book.reserved.to_string(),
            "request": request.id,
            "via": via.name(),
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

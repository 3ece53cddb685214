//! `actum retry DIR --run RUN [--checkpoint V]`: an operator puts a failed
//! run back to pending (`Engine::retry_run`, no lease), from its latest
//! checkpoint or an earlier one; and `actum fork DIR --run RUN --into NEW
//! [--checkpoint V]`: a new run from a run's checkpoint
//! (`Engine::fork_run`). Each is journaled with the operator and the
//! reason and says what it did: the acts a retry reopened, the checkpoint
//! it restored; the fork's source and checkpoint. A refusal names the run
//! and why (`RetryRefused`) and changes nothing.
//!
//! **Invariant:** the engine is closed (a checkpoint and a clean shutdown)
//! whether the write succeeded or was refused.

use std::io::Write;
use std::process::ExitCode;

use actum::books::RunId;
use serde_json::json;

use crate::args::{ForkArgs, RetryArgs};
use crate::failure::CliError;
use crate::operate::say_leases_released;

/// Runs `retry`.
pub fn retry(args: &RetryArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let run = RunId::new(args.run.as_str()).map_err(fail)?;
    let engine = crate::place::open_to_write(dir).map_err(fail)?;
    say_leases_released(&engine, dir);
    let done = engine.retry_run(&run, args.checkpoint, &args.operator, &args.reason);
    let closed = engine.close();
    let retried = done.map_err(fail)?;
    closed.map_err(fail)?;
    let reopened: Vec<String> = retried.reopened.iter().map(|k| k.encode()).collect();
    let said = if args.json {
        let value = json!({
            "run": run.as_str(),
            "state": "pending",
            "version": retried.version,
            "reopened": reopened,
            "restored_checkpoint": retried.restored,
        });
        writeln!(std::io::stdout(), "{value}")
    } else {
        let steps = if reopened.is_empty() {
            "no failed act to reopen".to_string()
        } else {
            format!("reopened {}", reopened.join(", "))
        };
        let from = match retried.restored {
            Some(version) => format!("checkpoint {version}, saved again as the newest"),
            None => "its latest checkpoint".to_string(),
        };
        writeln!(
            std::io::stdout(),
            "run {run}: failed -> pending (version {}), from {from}; {steps}; by {}: {}",
            retried.version,
            args.operator,
            args.reason
        )
    };
    said.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `fork`.
pub fn fork(args: &ForkArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let run = RunId::new(args.run.as_str()).map_err(fail)?;
    let into = RunId::new(args.into.as_str()).map_err(fail)?;
    let engine = crate::place::open_to_write(dir).map_err(fail)?;
    say_leases_released(&engine, dir);
    let done = engine.fork_run(&run, &into, args.checkpoint, &args.operator, &args.reason);
    let closed = engine.close();
    let forked = done.map_err(fail)?;
    closed.map_err(fail)?;
    let said = if args.json {
        let value = json!({
            "run": into.as_str(),
            "from": run.as_str(),
            "checkpoint": forked.checkpoint,
            "created": forked.created,
        });
        writeln!(std::io::stdout(), "{value}")
    } else if forked.created {
        let at = match forked.checkpoint {
            Some(version) => format!("its checkpoint {version}"),
            None => "no checkpoint (it has none)".to_string(),
        };
        writeln!(
            std::io::stdout(),
            "run {into}: forked from {run} at {at}, pending; by {}: {}",
            args.operator,
            args.reason
        )
    } else {
        writeln!(
            std::io::stdout(),
            "run {into} is this fork of {run} already; nothing changed"
        )
    };
    said.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

//! `actum migrate DIR --kind K --from V1 --to V2`: an operator moves the
//! runs of agent `K@V1` that are not over (or the runs named with `--run`)
//! to `K@V2` (`Engine::move_version`, no lease), each journaled with the
//! operator and the reason, and says what it moved. The next claim resumes
//! a moved run with the handler of `V2`.
//!
//! A run a worker holds live is not moved (the holder runs `V1`'s
//! handler); opening the directory for writing releases the leases of the
//! process that had it before (said on stderr), so here that refusal comes
//! only from a run leased since. Each refused run is named with why; the
//! others are moved all the same, and the exit code is then 2.
//!
//! **Invariant:** the engine is closed (a checkpoint and a clean shutdown)
//! whether the moves succeeded or were refused.

use std::io::Write;
use std::process::ExitCode;

use actum::books::{RUNS_PAGE_MAX, RunId};
use actum::engine::{Engine, VersionMoved};
use serde_json::json;

use crate::args::MigrateArgs;
use crate::failure::{CliError, EXIT_UNUSABLE};
use crate::operate::say_leases_released;

/// What became of one run.
type Moved = (RunId, actum::Result<VersionMoved>);

/// Runs `migrate`.
pub fn run(args: &MigrateArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    for (what, name) in [
        ("--kind", &args.kind),
        ("--from", &args.from),
        ("--to", &args.to),
    ] {
        if name.is_empty() || name.contains('@') {
            return Err(CliError::unusable(format!(
                "{what} {name:?} must be non-empty and without '@' (the agent is KIND@VERSION)"
            )));
        }
    }
    let named: Vec<RunId> = args
        .runs
        .iter()
        .map(|r| RunId::new(r.as_str()))
        .collect::<actum::Result<_>>()
        .map_err(fail)?;
    let from = format!("{}@{}", args.kind, args.from);
    let to = format!("{}@{}", args.kind, args.to);
    let engine = crate::place::open_to_write(dir).map_err(fail)?;
    say_leases_released(&engine, dir);
    let done = move_runs(&engine, &named, (&from, &to), args);
    let closed = engine.close();
    let moved = done.map_err(fail)?;
    closed.map_err(fail)?;
    say(&moved, (&from, &to), args).map_err(CliError::output)?;
    let refused: Vec<String> = moved
        .iter()
        .filter_map(|(run, r)| r.as_ref().err().map(|e| format!("run {run}: {e}")))
        .collect();
    if refused.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    Err(CliError::Failed {
        message: format!(
            "{}: {} run(s) not moved from {from} to {to}:\n  {}",
            crate::place::shown(dir),
            refused.len(),
            refused.join("\n  ")
        ),
        code: EXIT_UNUSABLE,
    })
}

/// Moves the named runs, or every run at `from` that is not over; an
/// `Err` only for a failure to read the books, never for a refused move.
fn move_runs(
    engine: &Engine,
    named: &[RunId],
    (from, to): (&str, &str),
    args: &MigrateArgs,
) -> actum::Result<Vec<Moved>> {
    let runs = if named.is_empty() {
        runs_at(engine, from)?
    } else {
        named.to_vec()
    };
    Ok(runs
        .into_iter()
        .map(|run| {
            let moved = engine.move_version(&run, from, to, &args.operator, &args.reason);
            (run, moved)
        })
        .collect())
}

/// The runs at agent `agent` that are not over, in id order.
fn runs_at(engine: &Engine, agent: &str) -> actum::Result<Vec<RunId>> {
    let mut found = Vec::new();
    let mut after: Option<RunId> = None;
    // Bounded by the number of runs: each page moves past its last id.
    loop {
        let page = engine.runs(None, after.as_ref(), RUNS_PAGE_MAX)?;
        found.extend(
            page.iter()
                .filter(|r| r.agent_version == agent && !r.state.is_terminal())
                .map(|r| r.id.clone()),
        );
        if page.len() < RUNS_PAGE_MAX {
            return Ok(found);
        }
        after = page.last().map(|r| r.id.clone());
    }
}

fn say(moved: &[Moved], (from, to): (&str, &str), args: &MigrateArgs) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if args.json {
        let runs: Vec<_> = moved
            .iter()
            .map(|(run, r)| match r {
                Ok(m) => json!({"run": run.as_str(), "moved": m.changed, "version": m.version}),
                Err(e) => json!({"run": run.as_str(), "moved": false, "refused": e.to_string()}),
            })
            .collect();
        let value = json!({"from": from, "to": to, "runs": runs});
        return writeln!(out, "{value}");
    }
    if moved.is_empty() {
        return writeln!(out, "no run of {from} that is not over: nothing moved");
    }
    for (run, result) in moved {
        match result {
            Ok(m) if m.changed => writeln!(
                out,
                "run {run}: {from} -> {to} (version {}), by {}: {}",
                m.version, args.operator, args.reason
            )?,
            Ok(_) => writeln!(out, "run {run} is at {to} already; nothing changed")?,
            Err(_) => {} // said on stderr, with the exit code
        }
    }
    Ok(())
}

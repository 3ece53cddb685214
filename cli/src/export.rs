//! `actum export DIR --run ID | --all`: the audit journal as JSON lines on
//! stdout (`Engine::export_audit`, schema in docs/AUDIT.md), one run or
//! every run in id order, read through a read-only open, or a snapshot of
//! a live database (its LSN said on stderr).
//!
//! **Invariant:** the lines are the engine's export, byte for byte; this
//! command adds nothing to stdout but them.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use actum::books::{RUNS_PAGE_MAX, RunId};
use actum::engine::Engine;

use crate::failure::CliError;
use crate::live::open_to_read;
use crate::progress;

/// Runs `export`: one run if `run` is given, else every run.
pub fn run(dir: &Path, run: Option<&str>) -> Result<ExitCode, CliError> {
    let fail = |e| CliError::engine(dir, e);
    let one = run.map(RunId::new).transpose().map_err(fail)?;
    let reading = open_to_read(dir).map_err(fail)?;
    if reading.says_as_of() {
        // stdout holds the engine's lines only.
        eprintln!(
            "actum export {}: {}",
            crate::place::shown(dir),
            reading.as_of()
        );
    }
    let engine = &reading.engine;
    let mut out = BufWriter::new(std::io::stdout().lock());
    match one {
        Some(run) => {
            engine.export_audit(&run, &mut out).map_err(fail)?;
        }
        None => export_all(engine, &mut out).map_err(fail)?,
    }
    out.flush().map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

/// Every run's journal, a page of runs at a time.
fn export_all(engine: &Engine, out: &mut dyn Write) -> actum::Result<()> {
    let bar = progress::counter("runs exported");
    let mut after: Option<RunId> = None;
    let mut lines = 0u64;
    // Bounded by the number of runs: each page moves past its last id.
    loop {
        let page = engine.runs(None, after.as_ref(), RUNS_PAGE_MAX)?;
        for run in &page {
            lines += engine.export_audit(&run.id, out)?;
            bar.inc(1);
            bar.set_message(format!("({lines} lines)"));
        }
        if page.len() < RUNS_PAGE_MAX {
            break;
        }
        after = page.last().map(|r| r.id.clone());
    }
    bar.finish_and_clear();
    Ok(())
}

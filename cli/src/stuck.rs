//! `actum stuck DIR --older-than 1h`: the runs whose wait has been open,
//! or whose effect's outcome has been unknown, for at least that long
//! (`Engine::stuck`), and the runs paused that long (by an operator, or by
//! their budget), with why, by the system clock, read through a read-only
//! open (or a snapshot of a live database, `live.rs`).
//!
//! **Invariant:** the list is the engine's sweep and the paused runs,
//! merged in run id order.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use actum::engine::{Engine, Stuck, StuckReason};
use serde::Serialize;

use crate::failure::CliError;
use crate::live::open_to_read;
use crate::paused;
use crate::text::{Table, fmt_duration, fmt_time};

/// One stuck run, flat, for `--json` and the page.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub run: String,
    /// `waiting`, `unknown`, `compensation failed` or `paused`.
    pub kind: &'static str,
    /// The waiting step, or the unknown effect's key.
    pub at: String,
    /// What the run waits for, or why the outcome is unknown.
    pub what: String,
    pub since_ms: u64,
    pub for_ms: u64,
}

/// Runs `stuck`.
pub fn run(dir: &Path, older_than_ms: u64, json: bool) -> Result<ExitCode, CliError> {
    let fail = |e| CliError::engine(dir, e);
    let reading = open_to_read(dir).map_err(fail)?;
    let rows = gather(&reading.engine, older_than_ms).map_err(fail)?;
    let as_of = reading.as_of();
    let live = reading.says_as_of();
    drop(reading);
    let mut out = std::io::stdout().lock();
    let written = if json {
        if live {
            // stdout holds the rows only.
            eprintln!("actum stuck {}: {as_of}", crate::place::shown(dir));
        }
        serde_json::to_writer_pretty(&mut out, &rows)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        // Only a live database's table says its LSN: the rest is as before.
        let said = if live {
            writeln!(out, "{as_of}")
        } else {
            Ok(())
        };
        said.and_then(|()| write_table(&rows, older_than_ms, &mut out))
    };
    written.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

/// The runs stuck for `older_than_ms` or longer: the engine's sweep and the
/// paused runs, in run id order.
pub(crate) fn gather(engine: &Engine, older_than_ms: u64) -> actum::Result<Vec<Row>> {
    let now_ms = engine.clock().now_ms();
    let stuck = engine.stuck(older_than_ms)?;
    let cutoff_ms = now_ms.saturating_sub(older_than_ms);
    let paused = paused::paused(engine, cutoff_ms, now_ms)?;
    let mut rows: Vec<Row> = stuck.into_iter().map(|s| row(s, now_ms)).collect();
    rows.extend(paused.iter().map(|p| {
        Row {
            run: p.run.to_string(),
            kind: "paused",
            at: if p.budget_full.is_empty() {
                "-"
            } else {
                "budget"
            }
            .to_string(),
            what: paused::describe(p),
            since_ms: p.since_ms,
            for_ms: now_ms.saturating_sub(p.since_ms),
        }
    }));
    // Stable: a run's own reasons keep the sweep's order.
    rows.sort_by(|a, b| a.run.cmp(&b.run));
    Ok(rows)
}

fn row(stuck: Stuck, now_ms: u64) -> Row {
    let (kind, at, what, since_ms) = match stuck.reason {
        StuckReason::Waiting {
            step,
            waits_for,
            since_ms,
        } => ("waiting", step.to_string(), waits_for, since_ms),
        StuckReason::Unknown { key, since_ms } => (
            "unknown",
            key.to_string(),
            "the outcome of this effect is unknown: reconcile it".to_string(),
            since_ms,
        ),
        StuckReason::CompensationFailed { key, since_ms } => (
            "compensation failed",
            key.to_string(),
            "this compensation failed for good: settle the step by hand, then abandon the saga"
                .to_string(),
            since_ms,
        ),
    };
    Row {
        run: stuck.run.to_string(),
        kind,
        at,
        what,
        since_ms,
        for_ms: now_ms.saturating_sub(since_ms),
    }
}

fn write_table(rows: &[Row], older_than_ms: u64, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{} run(s) stuck for {} or longer",
        rows.len(),
        fmt_duration(older_than_ms)
    )?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut table = Table::new(&["RUN", "KIND", "STEP OR EFFECT", "FOR", "SINCE", "WHAT"]);
    for r in rows {
        table.row(vec![
            r.run.clone(),
            r.kind.to_string(),
            r.at.clone(),
            fmt_duration(r.for_ms),
            fmt_time(r.since_ms),
            r.what.clone(),
        ]);
    }
    table.write(out)
}

//! `actum inspect DIR`: what the books hold, read through a read-only open:
//! runs by state and by agent (kind and version), the leases held now, effects whose outcome is pending
//! (intended) or unknown, open waits, and what the files weigh.
//!
//! **Invariant:** reads only, page by page through the engine's public
//! reads, so the counts are the books as recovery rebuilds them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use actum::books::{EffectEntry, EffectStatus, RUNS_PAGE_MAX, Run, RunId, RunState};
use actum::engine::Engine;
use actum::storage::FsStorage;
use actum::verify::{DiskUsage, disk_usage};
use serde::Serialize;

use crate::failure::CliError;
use crate::live::open_to_read;
use crate::progress;
use crate::text::{Table, fmt_bytes, fmt_duration, fmt_time};

/// How many rows of each list a table shows (`--json` shows them all).
const TABLE_ROWS_MAX: usize = 20;

/// A lease held now.
#[derive(Debug, Serialize)]
struct LeaseRow {
    run: String,
    worker: String,
    token: u64,
    expires_ms: u64,
}

/// An effect whose outcome is not known.
#[derive(Debug, Serialize)]
struct EffectRow {
    key: String,
    tool: String,
    since_ms: u64,
    reason: Option<String>,
}

/// An open wait.
#[derive(Debug, Serialize)]
struct WaitRow {
    run: String,
    step: String,
    waits_for: String,
    since_ms: u64,
    deadline_ms: Option<u64>,
}

/// The runs of one agent (`kind@version` for the runtime's runs).
#[derive(Debug, Default, Serialize)]
struct AgentRow {
    runs: u64,
    /// Runs not completed, failed or cancelled.
    not_over: u64,
}

/// Everything `inspect` reports.
#[derive(Debug, Serialize)]
struct Inspection {
    /// The directory, or the PostgreSQL URL without its password.
    dir: String,
    now_ms: u64,
    durable_lsn: u64,
    /// Set when another process's engine holds the directory: the LSN of
    /// the snapshot read (equal to `durable_lsn`).
    live_lsn: Option<u64>,
    /// Set when the books are in PostgreSQL: the server, as its URL names
    /// it without the password (no LSN, no files: `durable_lsn` is 0 and
    /// `sizes` all zero).
    postgres: Option<String>,
    runs: u64,
    runs_by_state: BTreeMap<&'static str, u64>,
    /// Per `agent_version` (a runtime's `kind@version`): what a version
    /// still serves, before its handler is retired.
    runs_by_agent: BTreeMap<String, AgentRow>,
    leases: Vec<LeaseRow>,
    effects_pending: Vec<EffectRow>,
    effects_unknown: Vec<EffectRow>,
    waits: Vec<WaitRow>,
    sizes: DiskUsage,
}

/// Runs `inspect`.
pub fn run(dir: &Path, json: bool) -> Result<ExitCode, CliError> {
    let fail = |e| CliError::engine(dir, e);
    let reading = open_to_read(dir).map_err(fail)?;
    let mut found = gather(&reading.engine, dir).map_err(fail)?;
    found.live_lsn = reading.live_lsn;
    found.postgres = reading.postgres.clone();
    drop(reading);
    if found.postgres.is_none() {
        found.sizes = disk_usage(&FsStorage::new(), dir, None).map_err(fail)?;
    }
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &found).map_err(|e| CliError::output(e.into()))?;
        writeln!(out).map_err(CliError::output)?;
    } else {
        write_tables(&found, &mut out).map_err(CliError::output)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads every run, page by page.
fn gather(engine: &Engine, dir: &Path) -> actum::Result<Inspection> {
    let now_ms = engine.clock().now_ms();
    let mut found = Inspection {
        dir: crate::place::shown(dir),
        now_ms,
        durable_lsn: engine.durable_lsn().0,
        live_lsn: None,
        postgres: None,
        runs: 0,
        runs_by_state: RunState::ALL.iter().map(|s| (s.name(), 0)).collect(),
        runs_by_agent: BTreeMap::new(),
        leases: Vec::new(),
        effects_pending: Vec::new(),
        effects_unknown: Vec::new(),
        waits: Vec::new(),
        sizes: DiskUsage::default(),
    };
    let bar = progress::counter("runs read");
    let mut after: Option<RunId> = None;
    // Bounded by the number of runs: each page moves past its last id.
    loop {
        let page = engine.runs(None, after.as_ref(), RUNS_PAGE_MAX)?;
        for run in &page {
            note_run(engine, run, now_ms, &mut found)?;
            bar.inc(1);
        }
        if page.len() < RUNS_PAGE_MAX {
            break;
        }
        after = page.last().map(|r| r.id.clone());
    }
    bar.finish_and_clear();
    assert_eq!(found.runs_by_state.values().sum::<u64>(), found.runs);
    Ok(found)
}

fn note_run(engine: &Engine, run: &Run, now_ms: u64, found: &mut Inspection) -> actum::Result<()> {
    found.runs += 1;
    *found.runs_by_state.entry(run.state.name()).or_default() += 1;
    let agent = found
        .runs_by_agent
        .entry(run.agent_version.clone())
        .or_default();
    agent.runs += 1;
    agent.not_over += u64::from(!run.state.is_terminal());
    if let Some(lease) = run.lease.as_ref().filter(|l| l.is_live(now_ms)) {
        found.leases.push(LeaseRow {
            run: run.id.to_string(),
            worker: lease.worker.to_string(),
            token: lease.token.0,
            expires_ms: lease.expires_ms,
        });
    }
    for entry in engine.effects(&run.id)? {
        note_effect(entry, found);
    }
    if !run.state.is_terminal()
        && let Some(wait) = engine.waits(&run.id)?.open_wait()
    {
        found.waits.push(WaitRow {
            run: run.id.to_string(),
            step: wait.step.to_string(),
            waits_for: wait.wait_for.to_string(),
            since_ms: wait.opened_ms,
            deadline_ms: wait.deadline_ms,
        });
    }
    Ok(())
}

fn note_effect(entry: EffectEntry, found: &mut Inspection) {
    let row = |reason| EffectRow {
        key: entry.key.to_string(),
        tool: entry.tool.clone(),
        since_ms: entry.settled_ms.unwrap_or(entry.intended_ms),
        reason,
    };
    match &entry.status {
        EffectStatus::Intended => found.effects_pending.push(row(None)),
        EffectStatus::Unknown { reason } => found.effects_unknown.push(row(Some(reason.clone()))),
        _ => {}
    }
}

fn write_tables(found: &Inspection, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "database {}", found.dir)?;
    if let Some(server) = &found.postgres {
        writeln!(
            out,
            "  PostgreSQL {server}: {} runs, read at {}\n",
            found.runs,
            fmt_time(found.now_ms)
        )?;
        return write_books(found, out);
    }
    if let Some(lsn) = found.live_lsn {
        writeln!(
            out,
            "  as of LSN {lsn} (live database: another process has it open; this is a \
             consistent snapshot)"
        )?;
    }
    writeln!(
        out,
        "  {} runs, log durable to lsn {}, read at {}",
        found.runs,
        found.durable_lsn,
        fmt_time(found.now_ms)
    )?;
    let s = &found.sizes;
    writeln!(
        out,
        "  files: {} (manifest {}, {} WAL segment(s) {}, state store {})\n",
        fmt_bytes(s.total_bytes),
        fmt_bytes(s.manifest_bytes),
        s.wal_segments,
        fmt_bytes(s.wal_bytes),
        fmt_bytes(s.state_bytes)
    )?;
    write_books(found, out)
}

/// The tables of what the books hold, the same for either place.
fn write_books(found: &Inspection, out: &mut dyn Write) -> std::io::Result<()> {
    let mut states = Table::new(&["STATE", "RUNS"]);
    for (state, count) in &found.runs_by_state {
        states.row(vec![(*state).to_string(), count.to_string()]);
    }
    states.write(out)?;
    writeln!(out)?;
    let mut agents = Table::new(&["AGENT (KIND@VERSION)", "RUNS", "NOT OVER"]);
    for (agent, row) in found.runs_by_agent.iter().take(TABLE_ROWS_MAX) {
        agents.row(vec![
            agent.clone(),
            row.runs.to_string(),
            row.not_over.to_string(),
        ]);
    }
    agents.write(out)?;
    let age = |since: u64| fmt_duration(found.now_ms.saturating_sub(since));
    section(out, "leases held", found.leases.len())?;
    let mut leases = Table::new(&["RUN", "WORKER", "TOKEN", "EXPIRES IN"]);
    for l in found.leases.iter().take(TABLE_ROWS_MAX) {
        let left = fmt_duration(l.expires_ms.saturating_sub(found.now_ms));
        leases.row(vec![
            l.run.clone(),
            l.worker.clone(),
            l.token.to_string(),
            left,
        ]);
    }
    finish(out, &leases, found.leases.len())?;
    for (title, rows) in [
        (
            "effects pending (intent durable, no outcome yet)",
            &found.effects_pending,
        ),
        (
            "effects unknown (a person must reconcile)",
            &found.effects_unknown,
        ),
    ] {
        section(out, title, rows.len())?;
        let mut table = Table::new(&["KEY", "TOOL", "FOR", "WHY"]);
        for e in rows.iter().take(TABLE_ROWS_MAX) {
            let why = e.reason.clone().unwrap_or_default();
            table.row(vec![e.key.clone(), e.tool.clone(), age(e.since_ms), why]);
        }
        finish(out, &table, rows.len())?;
    }
    section(out, "open waits", found.waits.len())?;
    let mut waits = Table::new(&["RUN", "STEP", "FOR", "WAITS FOR", "DEADLINE"]);
    for w in found.waits.iter().take(TABLE_ROWS_MAX) {
        let deadline = w.deadline_ms.map_or_else(|| "-".to_string(), fmt_time);
        waits.row(vec![
            w.run.clone(),
            w.step.clone(),
            age(w.since_ms),
            w.waits_for.clone(),
            deadline,
        ]);
    }
    finish(out, &waits, found.waits.len())
}

fn section(out: &mut dyn Write, title: &str, count: usize) -> std::io::Result<()> {
    writeln!(out, "\n{title}: {count}")
}

fn finish(out: &mut dyn Write, table: &Table, count: usize) -> std::io::Result<()> {
    if count == 0 {
        return Ok(());
    }
    table.write(out)?;
    if count > TABLE_ROWS_MAX {
        writeln!(
            out,
            "... and {} more (--json lists them all)",
            count - TABLE_ROWS_MAX
        )?;
    }
    Ok(())
}

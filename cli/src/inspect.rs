//! `actum inspect DIR`: what the books hold, read through a read-only open:
//! runs by state and by agent (kind and version), the leases held now, effects whose outcome is pending
//! (intended) or unknown, open waits, and what the files weigh.
//!
//! The books are one [`Engine::look`](actum::engine::Engine::look): on a
//! directory no one has open, the look of a read-only open; on a live
//! database, the look its engine serves through its operator channel (no
//! file copied), or, if it serves none, the look of a snapshot.
//!
//! **Invariant:** reads only, one consistent look as of one LSN, which the
//! command names on a live database.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use actum::books::{EffectEntry, EffectStatus, RunState};
use actum::engine::Look;
use actum::storage::FsStorage;
use actum::verify::{DiskUsage, disk_usage};
use serde::Serialize;

use crate::failure::CliError;
use crate::live::look_to_read;
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
    /// the books read (equal to `durable_lsn`).
    live_lsn: Option<u64>,
    /// True if that engine read them itself, served through its operator
    /// channel; false if they are a snapshot this command took.
    served: bool,
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
    let spinner = progress::spinner("reading the books");
    let looked = look_to_read(dir).map_err(fail)?;
    spinner.finish_and_clear();
    let mut found = Inspection::of(dir, &looked.look);
    found.live_lsn = looked.live_lsn;
    found.served = looked.served;
    found.postgres = looked.postgres;
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

impl Inspection {
    /// The tables of `look`, the books of `dir`.
    fn of(dir: &Path, look: &Look) -> Inspection {
        let runs_by_state: BTreeMap<&'static str, u64> = RunState::ALL
            .iter()
            .map(|s| {
                (
                    s.name(),
                    look.runs_by_state.get(s.name()).copied().unwrap_or(0),
                )
            })
            .collect();
        let runs = runs_by_state.values().sum();
        assert_eq!(runs, look.runs(), "every state is one of RunState::ALL");
        let row = |entry: &EffectEntry, reason| EffectRow {
            key: entry.key.to_string(),
            tool: entry.tool.clone(),
            since_ms: entry.settled_ms.unwrap_or(entry.intended_ms),
            reason,
        };
        let mut effects_pending = Vec::new();
        let mut effects_unknown = Vec::new();
        for entry in &look.open_effects {
            match &entry.status {
                EffectStatus::Intended => effects_pending.push(row(entry, None)),
                EffectStatus::Unknown { reason } => {
                    effects_unknown.push(row(entry, Some(reason.clone())));
                }
                _ => {}
            }
        }
        Inspection {
            dir: crate::place::shown(dir),
            now_ms: look.now_ms,
            durable_lsn: look.lsn,
            live_lsn: None,
            served: false,
            postgres: None,
            runs,
            runs_by_state,
            runs_by_agent: look
                .runs_by_agent
                .iter()
                .map(|(agent, r)| {
                    let row = AgentRow {
                        runs: r.runs,
                        not_over: r.not_over,
                    };
                    (agent.clone(), row)
                })
                .collect(),
            leases: look
                .leases
                .iter()
                .map(|(run, lease)| LeaseRow {
                    run: run.to_string(),
                    worker: lease.worker.to_string(),
                    token: lease.token.0,
                    expires_ms: lease.expires_ms,
                })
                .collect(),
            effects_pending,
            effects_unknown,
            waits: look
                .waits
                .iter()
                .map(|(run, wait)| WaitRow {
                    run: run.to_string(),
                    step: wait.step.to_string(),
                    waits_for: wait.wait_for.to_string(),
                    since_ms: wait.opened_ms,
                    deadline_ms: wait.deadline_ms,
                })
                .collect(),
            sizes: DiskUsage::default(),
        }
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
        let how = if found.served {
            "the books as that engine read them, through its operator channel"
        } else {
            "this is a consistent snapshot"
        };
        writeln!(
            out,
            "  as of LSN {lsn} (live database: another process has it open; {how})"
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
        "  files: {} (manifest {}, {} WAL segment(s) {}, state store {}, its page sums {})\n",
        fmt_bytes(s.total_bytes),
        fmt_bytes(s.manifest_bytes),
        s.wal_segments,
        fmt_bytes(s.wal_bytes),
        fmt_bytes(s.state_bytes),
        fmt_bytes(s.page_sums_bytes)
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

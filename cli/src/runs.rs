//! `actum runs DIR`: the runs, listed a page at a time, filtered by state,
//! agent kind and version, and age.
//!
//! **Invariant:** reads only, in run id order through `Engine::runs`, so a
//! listing resumed with `--after` (the last id a page printed) misses no
//! run and shows none twice, whatever the filters.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use actum::books::{RUNS_PAGE_MAX, Run, RunId, RunState};
use actum::engine::Engine;
use serde::Serialize;

use crate::args::RunsArgs;
use crate::failure::CliError;
use crate::live::open_to_read;
use crate::text::{Table, fmt_duration, fmt_local};

/// One listed run.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub run: String,
    pub state: &'static str,
    /// `kind@version` for the runtime's runs, else the agent version as
    /// the run was created with.
    pub agent: String,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub parent: Option<String>,
    /// The worker holding a live lease, if one does.
    pub held_by: Option<String>,
}

/// What `runs` prints (and the page shows): the page, and where the next
/// one starts.
#[derive(Debug, Serialize)]
pub(crate) struct Listing {
    pub now_ms: u64,
    pub runs: Vec<Row>,
    /// Pass as `--after` for the next page; `None` once every run was seen.
    pub next_after: Option<String>,
}

/// Which runs to list: `runs`' filters, from its arguments or the page's
/// query.
#[derive(Debug, Default)]
pub(crate) struct Filter {
    pub state: Option<RunState>,
    pub kind: Option<String>,
    pub version: Option<String>,
    /// Only runs created within this long before now.
    pub since_ms: Option<u64>,
    /// At most this many runs (at least 1).
    pub limit: u16,
    /// Start after this run id.
    pub after: Option<RunId>,
}

/// Runs `runs`.
pub fn run(args: &RunsArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let after = args
        .after
        .as_deref()
        .map(RunId::new)
        .transpose()
        .map_err(|e| CliError::unusable(format!("--after: {e}")))?;
    let filter = Filter {
        state: args.state,
        kind: args.kind.clone(),
        version: args.version.clone(),
        since_ms: args.since_ms,
        limit: args.limit,
        after,
    };
    let reading = open_to_read(dir).map_err(fail)?;
    let engine = &reading.engine;
    let listing = list(engine, &filter).map_err(fail)?;
    if reading.says_as_of() {
        // stdout holds the listing only.
        eprintln!(
            "actum runs {}: {}",
            crate::place::shown(dir),
            reading.as_of()
        );
    }
    drop(reading);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &listing).map_err(|e| CliError::output(e.into()))?;
        writeln!(out).map_err(CliError::output)?;
    } else {
        write_table(&listing, dir, &mut out).map_err(CliError::output)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// True if `run` passes the filters of `args` at `now_ms`.
fn wanted(run: &Run, args: &Filter, now_ms: u64) -> bool {
    let (kind, version) = match run.agent_version.split_once('@') {
        Some((kind, version)) => (kind, version),
        None => (run.agent_version.as_str(), run.agent_version.as_str()),
    };
    args.kind.as_deref().is_none_or(|k| k == kind)
        && args.version.as_deref().is_none_or(|v| v == version)
        && args
            .since_ms
            .is_none_or(|since| run.created_ms >= now_ms.saturating_sub(since))
}

/// Reads pages of runs in id order until `args.limit` pass the filters or
/// the runs end.
pub(crate) fn list(engine: &Engine, args: &Filter) -> actum::Result<Listing> {
    assert!(args.limit >= 1, "a page lists at least one run");
    let now_ms = engine.clock().now_ms();
    let mut after = args.after.clone();
    let state: Option<RunState> = args.state;
    let mut runs = Vec::new();
    // Bounded by the number of runs: each page moves past its last id.
    let next_after = loop {
        let page = engine.runs(state, after.as_ref(), RUNS_PAGE_MAX)?;
        let Some(last) = page.last() else {
            break None;
        };
        let last = last.id.clone();
        for run in page {
            if !wanted(&run, args, now_ms) {
                continue;
            }
            let id = run.id.clone();
            runs.push(row(run, now_ms));
            if runs.len() == usize::from(args.limit) {
                // More may follow: the next page starts after this run.
                return Ok(Listing {
                    now_ms,
                    runs,
                    next_after: Some(id.as_str().to_string()),
                });
            }
        }
        after = Some(last);
    };
    Ok(Listing {
        now_ms,
        runs,
        next_after,
    })
}

fn row(run: Run, now_ms: u64) -> Row {
    let held_by = run
        .lease
        .as_ref()
        .filter(|l| l.expires_ms > now_ms)
        .map(|l| l.worker.as_str().to_string());
    Row {
        run: run.id.as_str().to_string(),
        state: run.state.name(),
        agent: run.agent_version,
        created_ms: run.created_ms,
        updated_ms: run.updated_ms,
        parent: run.parent.map(|p| p.as_str().to_string()),
        held_by,
    }
}

fn write_table(listing: &Listing, dir: &Path, out: &mut dyn Write) -> std::io::Result<()> {
    if listing.runs.is_empty() {
        writeln!(out, "no run in {} matches", crate::place::shown(dir))?;
        return Ok(());
    }
    let mut table = Table::new(&["RUN", "STATE", "AGENT", "CREATED", "LAST CHANGE", "HELD BY"]);
    for r in &listing.runs {
        table.row(vec![
            r.run.clone(),
            r.state.to_string(),
            r.agent.clone(),
            fmt_local(r.created_ms),
            format!(
                "{} ago",
                fmt_duration(listing.now_ms.saturating_sub(r.updated_ms))
            ),
            r.held_by.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    table.write(out)?;
    if let Some(next) = &listing.next_after {
        writeln!(out, "more may follow: add --after {next}")?;
    }
    Ok(())
}

/// Calls `each` with every run (in `state`, if given), in id order, a page
/// at a time.
pub(crate) fn each_run(
    engine: &Engine,
    state: Option<RunState>,
    mut each: impl FnMut(Run) -> actum::Result<()>,
) -> actum::Result<()> {
    let mut after: Option<RunId> = None;
    // Bounded by the number of runs: each page moves past its last id.
    loop {
        let page = engine.runs(state, after.as_ref(), RUNS_PAGE_MAX)?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = Some(last.id.clone());
        page.into_iter().try_for_each(&mut each)?;
    }
}

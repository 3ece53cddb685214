//! `actum tail DIR [--run RUN]`: follows the journal as it grows. Every
//! `--interval` it reads the directory (a snapshot while another process
//! has it open, else a read-only open) and prints each op committed since
//! the last read, one line each, in the audit journal's words: its LSN, its
//! time in the machine's time zone, its run, what happened and why.
//!
//! It starts at the end of the log (`--from-start`: at the oldest record
//! the log still holds). A range a checkpoint let go between two reads is
//! said, never skipped silently. Each read of a live database copies its
//! state store (`Engine::open_snapshot`), so a store of gigabytes wants a
//! longer interval.
//!
//! **Invariant:** every line is printed once, in LSN order; nothing in the
//! directory is written.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use actum::Lsn;
use actum::books::{RunId, audit_line_of};
use actum::engine::Engine;

use crate::args::TailArgs;
use crate::failure::CliError;
use crate::live::open_to_read;
use crate::show::what_for_people;
use crate::text::fmt_local;

/// The most commits one read prints before reading again.
const COMMITS_PER_READ: usize = 10_000;

/// Runs `tail`.
pub fn run(args: &TailArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    crate::place::refuse_url(
        dir,
        "tail",
        "there is no log to follow (`actum runs` and `actum show` read the books there)",
    )?;
    let fail = |e| CliError::engine(dir, e);
    let only = args
        .run
        .as_deref()
        .map(RunId::new)
        .transpose()
        .map_err(|e| CliError::unusable(format!("--run: {e}")))?;
    let mut after: Option<Lsn> = None;
    let mut reads = 0u64;
    // Until stopped (Ctrl-C), or after `--reads` reads.
    loop {
        let reading = open_to_read(dir).map_err(fail)?;
        let engine = &reading.engine;
        let from = match after {
            Some(lsn) => lsn,
            None if args.from_start => Lsn::ZERO,
            None => engine.durable_lsn(),
        };
        if after.is_none() {
            let mut err = std::io::stderr();
            // Progress talk goes to stderr: stdout carries the lines.
            let _ = writeln!(
                err,
                "following {} from LSN {} ({}); Ctrl-C stops",
                dir.display(),
                from.0,
                reading.as_of()
            );
        }
        after = Some(print_since(engine, dir, from, only.as_ref())?);
        drop(reading);
        reads += 1;
        if args.reads.is_some_and(|max| reads >= max) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(args.interval_ms));
    }
}

/// Prints every commit after `from` the engine holds; returns the last LSN
/// printed (or `from`).
fn print_since(
    engine: &Engine,
    dir: &std::path::Path,
    from: Lsn,
    only: Option<&RunId>,
) -> Result<Lsn, CliError> {
    let mut at = from;
    let mut out = std::io::stdout().lock();
    // Bounded by the durable LSN: each read moves `at` past what it printed.
    loop {
        let commits = match engine.read_log(at, COMMITS_PER_READ) {
            Err(actum::Error::LsnOutOfRange { first, .. }) if first > at.next() => {
                writeln!(
                    out,
                    "-- LSN {} to {} were checkpointed out of the log before this read; going on \
                     from {}",
                    at.next().0,
                    first.0 - 1,
                    first.0
                )
                .map_err(CliError::output)?;
                at = Lsn(first.0 - 1);
                continue;
            }
            other => other.map_err(|e| CliError::engine(dir, e))?,
        };
        let Some(last) = commits.last().map(|c| c.lsn) else {
            return Ok(at);
        };
        for commit in &commits {
            for op in &commit.ops {
                let Some((run, line)) = audit_line_of(op) else {
                    continue;
                };
                if only.is_some_and(|r| *r != run) {
                    continue;
                }
                let why = if line.why.is_empty() {
                    String::new()
                } else {
                    format!("  ({})", line.why)
                };
                writeln!(
                    out,
                    "{:>8}  {}  {run}  {}{why}",
                    commit.lsn.0,
                    fmt_local(line.at_ms),
                    what_for_people(&line.what)
                )
                .map_err(CliError::output)?;
            }
        }
        out.flush().map_err(CliError::output)?;
        at = last;
    }
}

//! `actum prune DIR --older-than 30d`: the runs over for at least that long
//! leave the books (`Engine::prune_all`), batch after batch, with a
//! progress counter; the runs kept are counted by reason. It checkpoints
//! first, so runs ended since the last checkpoint are in the index prune
//! reads, and closes the engine (a checkpoint) after.
//!
//! **Invariant:** only runs the engine's retention rule lets go leave: over
//! for long enough, every dedup window of their ledger passed.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use actum::engine::{Engine, EngineOptions};
use serde_json::json;

use crate::args::PruneArgs;
use crate::failure::CliError;
use crate::operate::say_leases_released;
use crate::progress;
use crate::text::fmt_duration;

/// Runs `prune`.
pub fn run(args: &PruneArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let engine = Engine::open_existing(dir, EngineOptions::default()).map_err(fail)?;
    say_leases_released(&engine, dir);
    let bar = progress::counter("runs pruned");
    let done = engine.checkpoint().and_then(|_| {
        engine.prune_all(args.older_than_ms, &mut |batch| {
            bar.inc(batch.pruned.len() as u64);
        })
    });
    bar.finish_and_clear();
    let closed = engine.close();
    let done = done.map_err(fail)?;
    closed.map_err(fail)?;
    // The reasons, without the run names they carry.
    let mut kept: BTreeMap<String, u64> = BTreeMap::new();
    for (run, why) in &done.kept {
        let general = why.replace(run.as_str(), "RUN");
        *kept.entry(general).or_default() += 1;
    }
    let said = if args.json {
        let value = json!({
            "pruned": done.pruned.len(),
            "kept": done.kept.len(),
            "kept_by_reason": kept,
        });
        writeln!(std::io::stdout(), "{value}")
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{} run(s) over for {} or longer left the books; {} kept",
            done.pruned.len(),
            fmt_duration(args.older_than_ms),
            done.kept.len()
        )
        .and_then(|()| {
            kept.iter()
                .try_for_each(|(why, n)| writeln!(out, "  {n} kept: {why}"))
        })
    };
    said.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

//! `actum prune DIR --older-than 30d`: the runs over for at least that long
//! leave the books (`Engine::prune_all`), batch after batch; the runs kept
//! are counted by reason. An operator's request (`operator.rs`): through
//! the live engine's operator channel, or on the directory opened here,
//! with a progress counter. Either way it checkpoints first, so runs ended
//! since the last checkpoint are in the index prune reads.
//!
//! **Invariant:** only runs the engine's retention rule lets go leave: over
//! for long enough, every dedup window of their ledger passed.

use std::process::ExitCode;

use actum::operator::{Act, Done, Request, pruned};
use serde_json::json;

use crate::args::PruneArgs;
use crate::failure::CliError;
use crate::operator::{carry_with, made_up_id, say};
use crate::progress;

/// Runs `prune`.
pub fn run(args: &PruneArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let request = Request {
        id: made_up_id(args.request_id.as_deref()),
        operator: args.operator.clone(),
        reason: args.reason.clone(),
        act: Act::Prune {
            older_than_ms: args.older_than_ms,
        },
    };
    let (done, via) = carry_with(dir, &request, |engine| {
        let bar = progress::counter("runs pruned");
        let done = engine.checkpoint().and_then(|_| {
            engine.prune_all(args.older_than_ms, &mut |batch| {
                bar.inc(batch.pruned.len() as u64);
            })
        });
        bar.finish_and_clear();
        Ok(pruned(&done?))
    })?;
    say(&done, via, &request, args.json, |done| match done {
        Done::Pruned { pruned, kept } => Some(json!({
            "pruned": pruned,
            "kept": kept.iter().map(|(_, n)| n).sum::<u64>(),
            "kept_by_reason": kept.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        })),
        _ => None,
    })?;
    Ok(ExitCode::SUCCESS)
}

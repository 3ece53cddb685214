//! Runs the effect protocol (durable intent, durable outcome) on `THREADS`
//! threads for `PROTOCOLS` protocols and prints what the WAL did: commits,
//! fsyncs and commits per fsync, the wall time, and how its segments grew
//! (ahead of need, or on the commit path). Under
//! `valgrind --tool=callgrind` with `THREADS=1` it counts the instructions
//! one commit costs (docs/PERFORMANCE.md, "Why, measured").
//!
//! `ACTUM_PROBE_CHECKPOINT_RECORDS=N` sets the checkpoint interval in commits.
//! With `ACTUM_PROBE_CHECKPOINTS=off` automatic checkpoints are off, so the
//! state store is never written while it runs: the difference is what
//! checkpoints cost the log (docs/PERFORMANCE.md, "What limits it").
//!
//! Run: `cargo run --release -p actum-benches --example protocol_probe -- [THREADS] [PROTOCOLS]`

use std::sync::Arc;
use std::time::Instant;

use actum::{EngineOptions, FsStorage};

use actum_benches::protocol::{ProtocolEngine, run_protocols};

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let protocols: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let checkpoints = std::env::var("ACTUM_PROBE_CHECKPOINTS").map_or(true, |v| v != "off");
    let mut options = EngineOptions::default();
    if !checkpoints {
        options.checkpoint_every_records = 0;
        options.checkpoint_every_bytes = 0;
    }
    if let Some(every) = std::env::var("ACTUM_PROBE_CHECKPOINT_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        options.checkpoint_every_records = every;
    }
    let setup = ProtocolEngine::with_storage(threads, Arc::new(FsStorage::new()), options);
    let before = setup.engine.wal_stats();
    let start = Instant::now();
    run_protocols(&setup, threads, protocols);
    let elapsed = start.elapsed();
    let after = setup.engine.wal_stats();
    let commits = after.appends - before.appends;
    let fsyncs = after.fsyncs - before.fsyncs;
    println!(
        "checkpoints {}: {threads} threads, {protocols} protocols in {:.3} s: {:.0} protocols/s, {commits} commits, \
         {fsyncs} fsyncs, {:.1} commits per fsync",
        if checkpoints { "on" } else { "off" },
        elapsed.as_secs_f64(),
        protocols as f64 / elapsed.as_secs_f64(),
        commits as f64 / fsyncs.max(1) as f64
    );
    println!(
        "segments: {} grown ahead of need, {} grown on the commit path, {} made on the commit path",
        after.grows - before.grows,
        after.inline_grows - before.inline_grows,
        after.inline_prepares - before.inline_prepares
    );
}

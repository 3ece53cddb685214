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
//! With `ACTUM_PROBE_RAW=1` the same protocols run on the raw group-commit
//! ceiling instead (two group-committed records each, the bench's
//! `raw_ceiling`), so `/usr/bin/time` over both shows what the engine adds in
//! CPU and context switches. With `ACTUM_PROBE_FULL_SEGMENTS=1` the log's
//! segments are made at their full size, so none grows while it runs.
//!
//! Run: `cargo run --release -p actum-benches --example protocol_probe -- [THREADS] [PROTOCOLS]`

use std::sync::Arc;
use std::time::Instant;

use actum::{EngineOptions, FsStorage};

use actum_benches::group_commit::GroupCommitFile;
use actum_benches::harness::run_writers;
use actum_benches::protocol::{ProtocolEngine, TwoCommits, run_protocols};
use actum_benches::{DurableLog, OnPeer};

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let protocols: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    if std::env::var("ACTUM_PROBE_RAW").is_ok_and(|v| v == "1") {
        let raw = OnPeer::new(TwoCommits, GroupCommitFile::new());
        let elapsed = run_writers(&raw, threads, 0, protocols);
        println!(
            "raw ceiling: {threads} threads, {protocols} protocols in {:.3} s: {:.0} protocols/s, {}",
            elapsed.as_secs_f64(),
            protocols as f64 / elapsed.as_secs_f64(),
            raw.summary().unwrap_or_default()
        );
        return;
    }
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
    if std::env::var("ACTUM_PROBE_FULL_SEGMENTS").is_ok_and(|v| v == "1") {
        options.db.wal.segment_first_step_bytes = options.db.wal.segment_size_bytes;
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

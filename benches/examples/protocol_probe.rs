//! Runs the effect protocol (durable intent, durable outcome) on `THREADS`
//! threads for `PROTOCOLS` protocols and prints what the WAL did: commits,
//! fsyncs and commits per fsync, and the wall time. Under
//! `valgrind --tool=callgrind` with `THREADS=1` it counts the instructions
//! one commit costs (docs/PERFORMANCE.md, "Why, measured").
//!
//! Run: `cargo run --release -p actum-benches --example protocol_probe -- [THREADS] [PROTOCOLS]`

use std::time::Instant;

use actum_benches::protocol::{ProtocolEngine, run_protocols};

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let protocols: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let setup = ProtocolEngine::new(threads);
    let before = setup.engine.wal_stats();
    let start = Instant::now();
    run_protocols(&setup, threads, protocols);
    let elapsed = start.elapsed();
    let after = setup.engine.wal_stats();
    let commits = after.appends - before.appends;
    let fsyncs = after.fsyncs - before.fsyncs;
    println!(
        "{threads} threads, {protocols} protocols in {:.3} s: {:.0} protocols/s, {commits} commits, \
         {fsyncs} fsyncs, {:.1} commits per fsync",
        elapsed.as_secs_f64(),
        protocols as f64 / elapsed.as_secs_f64(),
        commits as f64 / fsyncs.max(1) as f64
    );
}

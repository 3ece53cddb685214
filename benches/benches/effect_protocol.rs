//! The effect protocol per second at 1, 4, 16 and 64 writer threads: actum's `begin_effect`
//! (the durable intent) then `finish_effect` (the durable outcome), beside the same two durable
//! writes on every other system: the raw group-commit file (the ceiling: two group-committed
//! records; at one thread, two fsyncs), the raw floor (each record its own `pwrite` and
//! `fdatasync`, nothing shared: at one thread, two fsyncs in sequence), redb (two `Durability::Immediate`
//! transactions), and SQLite (WAL, `synchronous=FULL`, two transactions) both with one
//! connection behind a mutex and with a connection per thread.
//!
//! One criterion iteration is one whole protocol (two durable writes); `iter_custom` spreads a
//! sample's protocols over the threads and times start barrier to last commit. After each
//! system its summary goes to stderr: for actum, commits per fsync from `Engine::wal_stats`.
//!
//! Run: `cargo bench -p actum-benches --bench effect_protocol`
//! (docs/PERFORMANCE.md, "The engine at the speed of its log", has the figures and ratios).

use std::time::Duration;

use actum_benches::peers::Sqlite;
use actum_benches::protocol::{ProtocolEngine, TwoCommits};
use actum_benches::runner::{bench_peers, bench_system};
use actum_benches::{OnPeer, WRITER_COUNTS};
use criterion::{Criterion, SamplingMode, Throughput};

fn effect_protocol(c: &mut Criterion) {
    let mut group = c.benchmark_group("effect_protocol");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(1));
    // Systems interleave per thread count, so drift on a shared VM hits all of them alike.
    for threads in WRITER_COUNTS {
        bench_system(&mut group, "actum", threads, || {
            ProtocolEngine::new(threads)
        });
        bench_peers(&mut group, threads, TwoCommits);
        bench_system(&mut group, "sqlite_per_thread", threads, || {
            OnPeer::new(TwoCommits, Sqlite::new())
        });
    }
    group.finish();
}

criterion::criterion_group!(benches, effect_protocol);
criterion::criterion_main!(benches);

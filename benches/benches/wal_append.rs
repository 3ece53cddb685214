//! Durable commits per second of 256-byte records, 1/4/16/64 writers, every system side by side.
//!
//! One criterion iteration is one durable record; `iter_custom` spreads a sample's records over
//! the writer threads and times start barrier to last commit (see `actum_benches::harness`).
//! Run: `cargo bench -p actum-benches --bench wal_append` (docs/PERFORMANCE.md has the figures).

use std::time::Duration;

use actum_benches::group_commit::GroupCommitFile;
use actum_benches::harness::run_writers;
use actum_benches::peers::{Redb, Sqlite};
use actum_benches::raw::{AppendFile, PreallocatedFile};
use actum_benches::{DurableLog, WRITER_COUNTS, actum_wal::ActumWal, settle_scratch};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};

/// Benches one system at one writer count; the system is built once, outside any timing.
/// It is built is built lazily, so one filtered out on the command line costs nothing.
fn bench_log<L: DurableLog>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    threads: usize,
    make: fn() -> L,
) {
    let mut log = None;
    let mut next_ticket = 0u64;
    group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
        let log = log.get_or_insert_with(make);
        b.iter_custom(|records| {
            let elapsed = run_writers(log, threads, next_ticket, records);
            next_ticket += records;
            elapsed
        });
    });
    if let Some(summary) = log.as_ref().and_then(DurableLog::summary) {
        eprintln!("{name}/{threads}: {summary}");
    }
    drop(log);
    settle_scratch();
}

fn wal_append(c: &mut Criterion) {
    let mut group = c.benchmark_group("wal_append");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(1));
    // Systems interleave per writer count, so drift on a shared VM hits all of them alike.
    for threads in WRITER_COUNTS {
        bench_log(&mut group, "raw_append", threads, AppendFile::new);
        bench_log(
            &mut group,
            "raw_preallocated",
            threads,
            PreallocatedFile::new,
        );
        bench_log(
            &mut group,
            "raw_group_commit",
            threads,
            GroupCommitFile::new,
        );
        bench_log(&mut group, "actum_wal", threads, ActumWal::new);
        bench_log(&mut group, "redb", threads, Redb::new);
        bench_log(&mut group, "sqlite", threads, Sqlite::new);
    }
    group.finish();
}

criterion::criterion_group!(benches, wal_append);
criterion::criterion_main!(benches);

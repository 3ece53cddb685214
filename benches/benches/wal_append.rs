//! Durable commits per second of 256-byte records, 1/4/16/64 writers, every system side by side.
//!
//! One criterion iteration is one durable record; `iter_custom` spreads a sample's records over
//! the writer threads and times start barrier to last commit (see `actum_benches::harness`).
//! Run: `cargo bench -p actum-benches --bench wal_append` (docs/PERFORMANCE.md has the figures).

use std::time::Duration;

use actum_benches::group_commit::GroupCommitFile;
use actum_benches::peers::{Redb, Sqlite};
use actum_benches::raw::{AppendFile, PreallocatedFile};
use actum_benches::runner::bench_system;
use actum_benches::{WRITER_COUNTS, actum_wal::ActumWal};
use criterion::{Criterion, SamplingMode, Throughput};

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
        bench_system(&mut group, "raw_append", threads, AppendFile::new);
        bench_system(
            &mut group,
            "raw_preallocated",
            threads,
            PreallocatedFile::new,
        );
        bench_system(
            &mut group,
            "raw_group_commit",
            threads,
            GroupCommitFile::new,
        );
        bench_system(&mut group, "actum_wal", threads, ActumWal::new);
        bench_system(&mut group, "redb", threads, Redb::new);
        bench_system(&mut group, "sqlite", threads, Sqlite::new);
    }
    group.finish();
}

criterion::criterion_group!(benches, wal_append);
criterion::criterion_main!(benches);

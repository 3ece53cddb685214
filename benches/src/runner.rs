//! The criterion side of the benches: bench one [`DurableLog`] at one writer count in a
//! criterion group, then print its summary and settle its scratch directory; or the standard
//! set of peers doing one [`PeerWork`] ([`bench_peers`]).
//!
//! **Invariant:** a system is built at most once per bench, lazily (one filtered out on the
//! command line costs nothing), outside any timed region; tickets stay unique across the
//! bench's samples.

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId};

use crate::group_commit::GroupCommitFile;
use crate::harness::run_writers;
use crate::peers::{Redb, SqliteShared};
use crate::raw::PreallocatedFile;
use crate::{DurableLog, OnPeer, PeerWork, settle_scratch};

/// Benches `make()`'s system as `name/threads` in `group`: each sample's iterations are spread
/// over `threads` writer threads by [`run_writers`]. After the bench its summary goes to stderr.
pub fn bench_system<L: DurableLog>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    threads: usize,
    make: impl FnOnce() -> L,
) {
    let mut make = Some(make);
    let mut system: Option<L> = None;
    let mut next_ticket = 0u64;
    group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
        let system = system.get_or_insert_with(|| {
            let make = make.take().expect("a system is built once");
            make()
        });
        b.iter_custom(|iterations| {
            let elapsed = run_writers(system, threads, next_ticket, iterations);
            next_ticket += iterations;
            elapsed
        });
    });
    if let Some(summary) = system.as_ref().and_then(DurableLog::summary) {
        eprintln!("{name}/{threads}: {summary}");
    }
    drop(system);
    settle_scratch();
}

/// Benches the peers every engine bench compares actum with, each doing `work` per iteration at
/// `threads` writers: `raw_ceiling` (group commit into a preallocated file), `raw_floor` (each
/// commit its own `pwrite` and `fdatasync`), `redb` (`Durability::Immediate`) and
/// `sqlite_shared` (one connection behind a mutex, WAL, `synchronous=FULL`).
pub fn bench_peers<W: PeerWork + Copy>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    threads: usize,
    work: W,
) {
    bench_system(group, "raw_ceiling", threads, || {
        OnPeer::new(work, GroupCommitFile::new())
    });
    bench_system(group, "raw_floor", threads, || {
        OnPeer::new(work, PreallocatedFile::new())
    });
    bench_system(group, "redb", threads, || OnPeer::new(work, Redb::new()));
    bench_system(group, "sqlite_shared", threads, || {
        OnPeer::new(work, SqliteShared::new())
    });
}

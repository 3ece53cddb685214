//! The effect protocol on the books in PostgreSQL (`actum::pg`): per protocol a fresh step's
//! intent (`BeginEffect`) then its outcome (`FinishEffect`), each one serializable transaction
//! committed on the server, every writer thread on a connection of its own (as workers in
//! separate processes would be), against the embedded engine and the raw two-record ceiling on
//! this machine's disk in the same run.
//!
//! Needs a server: `ACTUM_PG_URL`, or run it under the script that starts one:
//! `scripts/postgres.sh cargo bench -p actum-benches --bench pg_protocol`. Without one it says so
//! and measures nothing. docs/PERFORMANCE.md, "The effect protocol on PostgreSQL", has figures.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actum::books::{Answer, Begun, Command, Guard, RunId};
use actum::pg::{PgStore, scratch_database};
use actum_benches::group_commit::GroupCommitFile;
use actum_benches::protocol::{ProtocolEngine, TwoCommits, confirmed, intent, leased_run_on};
use actum_benches::runner::bench_system;
use actum_benches::{DurableLog, OnPeer, WRITER_COUNTS};
use criterion::{Criterion, SamplingMode, Throughput};

/// A scratch database with one leased, running run per writer thread.
struct PgProtocol {
    url: String,
    runs: Vec<(RunId, Guard)>,
    /// One connection per run, kept across samples (a worker keeps its
    /// connection; a fresh server process's first queries are not the
    /// protocol's cost).
    stores: Vec<PgStore>,
    next_writer: AtomicUsize,
}

impl PgProtocol {
    fn new(server: &str, runs: usize) -> PgProtocol {
        let url = scratch_database(server, "bench").expect("a scratch database");
        let store = PgStore::connect(&url).expect("connecting to the bench database");
        let runs: Vec<(RunId, Guard)> = (0..runs)
            .map(|t| {
                leased_run_on(
                    &|cmd| store.execute(cmd),
                    &format!("bench-{t}"),
                    &format!("w{t}"),
                )
            })
            .collect();
        let stores = (0..runs.len())
            .map(|_| PgStore::connect(&url).expect("a writer's connection"))
            .collect();
        PgProtocol {
            url,
            runs,
            stores,
            next_writer: AtomicUsize::new(0),
        }
    }
}

impl DurableLog for PgProtocol {
    type Writer<'a> = usize;

    fn summary(&self) -> Option<String> {
        // Transactions rolled back are attempts the server refused
        // (serialization failures) and ran again.
        let mut client = postgres::Client::connect(&self.url, postgres::NoTls).ok()?;
        let row = client
            .query_one(
                "SELECT xact_commit, xact_rollback FROM pg_stat_database \
                 WHERE datname = current_database()",
                &[],
            )
            .ok()?;
        let (commits, rollbacks): (i64, i64) = (row.get(0), row.get(1));
        Some(format!(
            "{commits} transactions committed, {rollbacks} rolled back and run again"
        ))
    }

    fn writer(&self) -> usize {
        self.next_writer.fetch_add(1, Ordering::Relaxed) % self.runs.len()
    }

    fn commit(&self, t: &mut usize, ticket: u64) {
        let (run, guard) = &self.runs[*t];
        let store = &self.stores[*t];
        let begun = store
            .execute(&Command::BeginEffect(intent(run, guard, ticket)))
            .expect("beginning an effect");
        let Answer::Begun(Begun::Proceed { key, .. }) = begun else {
            panic!("a fresh step proceeds: {begun:?}");
        };
        store
            .execute(&Command::FinishEffect(confirmed(key, guard)))
            .expect("finishing an effect");
    }
}

fn pg_protocol(c: &mut Criterion) {
    let server = match std::env::var("ACTUM_PG_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            eprintln!(
                "pg_protocol: ACTUM_PG_URL names no server; nothing measured \
                 (scripts/postgres.sh cargo bench -p actum-benches --bench pg_protocol)"
            );
            return;
        }
    };
    let mut group = c.benchmark_group("pg_protocol");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(1));
    for threads in WRITER_COUNTS {
        bench_system(&mut group, "postgres", threads, || {
            PgProtocol::new(&server, threads)
        });
        bench_system(&mut group, "actum", threads, || {
            ProtocolEngine::new(threads)
        });
        bench_system(&mut group, "raw_ceiling", threads, || {
            OnPeer::new(TwoCommits, GroupCommitFile::new())
        });
    }
    group.finish();
}

criterion::criterion_group!(benches, pg_protocol);
criterion::criterion_main!(benches);

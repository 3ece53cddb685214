//! The effect protocol on the books in PostgreSQL: per protocol a fresh step's intent then its
//! outcome, each one transaction committed on the server. Four systems in the same run:
//!
//! - `engine_pg`: the `Engine` API over PostgreSQL (`Engine::open_postgres`, one engine shared
//!   by every writer thread, each command on a connection of its pool), `begin_effect` then
//!   `finish_effect`, what the runtime does;
//! - `postgres`: the backend's core alone (`PgStore::execute`), a store per writer;
//! - `pg_raw_ceiling`: the server's own ceiling for the same shape, two single-row transactions
//!   per protocol (an `INSERT`, then an `UPDATE` of that row) from a plain client loop, a
//!   connection per writer: what no layer above the server can beat;
//! - `actum` and `raw_ceiling`: the embedded engine and the raw two-record ceiling on this
//!   machine's disk.
//!
//! Needs a server: `ACTUM_PG_URL`, or run it under the script that starts one:
//! `scripts/postgres.sh cargo bench -p actum-benches --bench pg_protocol`. Without one it says so
//! and measures nothing. docs/PERFORMANCE.md, "The effect protocol on PostgreSQL", has figures.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actum::books::{Answer, Begun, Command, Guard, RunId};
use actum::engine::{Engine, EngineOptions};
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

/// The protocol through the `Engine` API over PostgreSQL: one engine, shared by the writers.
struct PgEngineProtocol {
    engine: Engine,
    runs: Vec<(RunId, Guard)>,
    next_writer: AtomicUsize,
}

impl PgEngineProtocol {
    fn new(server: &str, runs: usize) -> PgEngineProtocol {
        let url = scratch_database(server, "bench_engine").expect("a scratch database");
        let engine =
            Engine::open_postgres(&url, EngineOptions::default()).expect("opening the engine");
        let runs = (0..runs)
            .map(|t| {
                leased_run_on(
                    &|cmd| engine.execute(cmd),
                    &format!("bench-{t}"),
                    &format!("w{t}"),
                )
            })
            .collect();
        PgEngineProtocol {
            engine,
            runs,
            next_writer: AtomicUsize::new(0),
        }
    }
}

impl DurableLog for PgEngineProtocol {
    type Writer<'a> = usize;

    fn writer(&self) -> usize {
        self.next_writer.fetch_add(1, Ordering::Relaxed) % self.runs.len()
    }

    fn commit(&self, t: &mut usize, ticket: u64) {
        let (run, guard) = &self.runs[*t];
        let begun = self
            .engine
            .begin_effect(intent(run, guard, ticket))
            .expect("beginning an effect");
        let Begun::Proceed { key, .. } = begun else {
            panic!("a fresh step proceeds: {begun:?}");
        };
        self.engine
            .finish_effect(confirmed(key, guard))
            .expect("finishing an effect");
    }
}

/// The server's ceiling for the protocol's shape: two single-row transactions (an insert, then
/// an update of the row) from a plain client, one connection per writer.
struct PgRawCeiling {
    /// One connection per writer, kept across samples (as `PgProtocol`'s stores are).
    writers: Vec<std::sync::Mutex<RawWriter>>,
    next_writer: AtomicUsize,
}

impl PgRawCeiling {
    fn new(server: &str, writers: usize) -> PgRawCeiling {
        let url = scratch_database(server, "bench_raw").expect("a scratch database");
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connecting");
        client
            .batch_execute(
                "CREATE TABLE effects (writer bigint, ticket bigint, row bytea, \
                 PRIMARY KEY (writer, ticket))",
            )
            .expect("the ceiling's table");
        let writers = (0..writers)
            .map(|id| std::sync::Mutex::new(RawWriter::connect(&url, id as i64)))
            .collect();
        PgRawCeiling {
            writers,
            next_writer: AtomicUsize::new(0),
        }
    }
}

/// A writer of the raw ceiling: its connection and its two statements, prepared once.
struct RawWriter {
    id: i64,
    client: postgres::Client,
    insert: postgres::Statement,
    update: postgres::Statement,
}

impl RawWriter {
    fn connect(url: &str, id: i64) -> RawWriter {
        let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connecting");
        let insert = client
            .prepare("INSERT INTO effects (writer, ticket, row) VALUES ($1, $2, $3)")
            .expect("preparing the insert");
        let update = client
            .prepare("UPDATE effects SET row = $3 WHERE writer = $1 AND ticket = $2")
            .expect("preparing the update");
        RawWriter {
            id,
            client,
            insert,
            update,
        }
    }
}

impl DurableLog for PgRawCeiling {
    type Writer<'a> = usize;

    fn writer(&self) -> usize {
        self.next_writer.fetch_add(1, Ordering::Relaxed) % self.writers.len()
    }

    fn commit(&self, t: &mut usize, ticket: u64) {
        let mut w = self.writers[*t]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let w = &mut *w;
        let ticket = ticket as i64;
        // Autocommit: each statement is a transaction of its own, durable when it returns.
        w.client
            .execute(&w.insert, &[&w.id, &ticket, &&b"intent: stripe.charge"[..]])
            .expect("the intent's row");
        w.client
            .execute(
                &w.update,
                &[&w.id, &ticket, &&b"confirmed: ch_0123456789"[..]],
            )
            .expect("the outcome's row");
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
        bench_system(&mut group, "engine_pg", threads, || {
            PgEngineProtocol::new(&server, threads)
        });
        bench_system(&mut group, "pg_raw_ceiling", threads, || {
            PgRawCeiling::new(&server, threads)
        });
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

//! The effect protocol on the books in PostgreSQL: per protocol a fresh step's intent then its
//! outcome, each committed on the server before it is answered. These systems in the same run:
//!
//! - `engine_pg`: the `Engine` API over PostgreSQL (`Engine::open_postgres`, one engine shared
//!   by every writer thread, each command on a connection of its pool), `begin_effect` then
//!   `finish_effect`, what the runtime does;
//! - `postgres`: the backend's core alone (`PgStore::execute`), a store per writer;
//! - `pg_raw_ceiling`: the server's own ceiling for the same shape, two single-row transactions
//!   per protocol (an `INSERT`, then an `UPDATE` of that row) from a plain client loop, a
//!   connection per writer: what no layer above the server can beat;
//! - `pg_pipelined_ceiling`: the ceiling of the shape a command takes on the store, without the
//!   store: two transactions per protocol, each two round trips on the store's pipelining
//!   connection (`START` with one locking read of the run's row and the clock; then one
//!   statement writing the entry and a journal line, with `COMMIT`): what the store's design
//!   could reach if its own work cost nothing;
//! - `pg_optimistic_ceiling` and `pg_cached_ceiling`: the shapes of a command run without a
//!   transaction (docs/POSTGRES.md, "Optimistic commands"), without the store: an autocommit read
//!   of the run's row and the journal's length then one guarded autocommit write (two statements
//!   a command), and the guarded write alone, decided on what the writer holds (one statement);
//! - `actum` and `raw_ceiling`: the embedded engine and the raw two-record ceiling on this
//!   machine's disk.
//!
//! Needs a server: `ACTUM_PG_URL`, or run it under the script that starts one:
//! `scripts/postgres.sh cargo bench -p actum-benches --bench pg_protocol`. Without one it says so
//! and measures nothing. docs/PERFORMANCE.md, "The effect protocol on PostgreSQL", has figures.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actum::books::{Answer, Begun, Command, Guard, RunId};
use actum::engine::{Engine, EngineOptions};
use actum::pg::{Connection, Param, PgStore, Request, scratch_database};
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

    fn summary(&self) -> Option<String> {
        // Commands decided with no read, and those whose guarded write found
        // the run (or the server's clock) elsewhere and ran again as a
        // transaction.
        let counts = self.engine.pg_store()?.optimistic_counts();
        Some(format!(
            "{} commands tried optimistically, {} decided with no read, {} ran again",
            counts.tried, counts.from_memory, counts.again
        ))
    }

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

/// The writers of a ceiling, each with its connection kept across samples (as `PgProtocol`'s
/// stores are), handed to the bench's threads in turn.
struct Writers<W> {
    writers: Vec<std::sync::Mutex<W>>,
    next_writer: AtomicUsize,
}

impl<W> Writers<W> {
    fn new(writers: impl Iterator<Item = W>) -> Writers<W> {
        Writers {
            writers: writers.map(std::sync::Mutex::new).collect(),
            next_writer: AtomicUsize::new(0),
        }
    }

    /// The next writer's number, in turn.
    fn next(&self) -> usize {
        self.next_writer.fetch_add(1, Ordering::Relaxed) % self.writers.len()
    }

    /// Writer `t`.
    fn lock(&self, t: usize) -> std::sync::MutexGuard<'_, W> {
        self.writers[t]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A writer of a ceiling's shape: runs one command of it, the statement `write` writing `row`
/// under `ticket`.
trait ShapeWriter: Send {
    fn command(&mut self, write: &'static str, ticket: i64, row: &'static [u8]);
}

/// The ceiling of a command's shape, without the store: its writers, and the statements that
/// write a protocol's intent and its outcome.
struct Ceiling<W> {
    writers: Writers<W>,
    intent: &'static str,
    outcome: &'static str,
}

impl<W: ShapeWriter> DurableLog for Ceiling<W> {
    type Writer<'a>
        = usize
    where
        W: 'a;

    fn writer(&self) -> usize {
        self.writers.next()
    }

    fn commit(&self, t: &mut usize, ticket: u64) {
        let mut w = self.writers.lock(*t);
        let ticket = ticket as i64;
        w.command(self.intent, ticket, b"intent: stripe.charge");
        w.command(self.outcome, ticket, b"confirmed: ch_0123456789");
    }
}

/// The server's ceiling for the protocol's shape: two single-row transactions (an insert, then
/// an update of the row) from a plain client, one connection per writer.
struct PgRawCeiling(Writers<RawWriter>);

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
        PgRawCeiling(Writers::new(
            (0..writers).map(|id| RawWriter::connect(&url, id as i64)),
        ))
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
        self.0.next()
    }

    fn commit(&self, t: &mut usize, ticket: u64) {
        let mut w = self.0.lock(*t);
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

/// The run's row, locked, with the server's clock: a command's first round trip.
const PIPELINED_READ: &str = "SELECT floor(extract(epoch FROM now()) * 1000)::bigint, \
     (SELECT row FROM runs WHERE id = $1 FOR UPDATE)";
/// The intent's entry and its journal line, one statement.
const PIPELINED_INTENT: &str = "WITH e AS (INSERT INTO effects (writer, ticket, row) \
     VALUES ($1, $2, $3)) INSERT INTO journal (writer, seq, row) VALUES ($1, $4, $3)";
/// The outcome written over the entry, and its journal line, one statement.
const PIPELINED_OUTCOME: &str = "WITH e AS (UPDATE effects SET row = $3 \
     WHERE writer = $1 AND ticket = $2) INSERT INTO journal (writer, seq, row) VALUES ($1, $4, $3)";

/// A writer of the pipelined ceiling: its run, its connection, its journal's length.
struct PipelinedWriter {
    id: i64,
    connection: Connection,
    read: postgres::Statement,
    seq: i64,
}

/// A scratch database with the ceilings' tables (a run per writer, the entries, the journal), and
/// per writer its id, its pipelining connection and `read` prepared on it.
fn ceiling_writers(
    server: &str,
    prefix: &str,
    writers: usize,
    read: &'static str,
) -> impl Iterator<Item = (i64, Connection, postgres::Statement)> {
    let url = scratch_database(server, prefix).expect("a scratch database");
    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connecting");
    client
        .batch_execute(
            "CREATE TABLE runs (id bigint PRIMARY KEY, row bytea); \
             CREATE TABLE effects (writer bigint, ticket bigint, row bytea, \
             PRIMARY KEY (writer, ticket)); \
             CREATE TABLE journal (writer bigint, seq bigint, row bytea, \
             PRIMARY KEY (writer, seq))",
        )
        .expect("the ceiling's tables");
    (0..writers).map(move |id| {
        let id = id as i64;
        client
            .execute(
                "INSERT INTO runs (id, row) VALUES ($1, $2)",
                &[&id, &&b"run: leased to its writer"[..]],
            )
            .expect("the writer's run");
        let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut connection = Connection::connect(&url, counted)
            .expect("a runtime")
            .expect("connecting");
        let read = connection
            .prepare(Cow::Borrowed(read))
            .expect("preparing the read");
        (id, connection, read)
    })
}

/// A ceiling of the shape `intent` and `outcome` write: its writers made by `make` from what
/// [`ceiling_writers`] gives each.
fn ceiling<W>(
    server: &str,
    prefix: &str,
    writers: usize,
    read: &'static str,
    (intent, outcome): (&'static str, &'static str),
    make: impl Fn(i64, Connection, postgres::Statement) -> W,
) -> Ceiling<W> {
    let writers = ceiling_writers(server, prefix, writers, read);
    Ceiling {
        writers: Writers::new(writers.map(|(id, connection, read)| make(id, connection, read))),
        intent,
        outcome,
    }
}

/// The ceiling of the store's transaction's shape: see the module's documentation.
fn pipelined_ceiling(server: &str, writers: usize) -> Ceiling<PipelinedWriter> {
    let shape = (PIPELINED_INTENT, PIPELINED_OUTCOME);
    ceiling(
        server,
        "bench_pipelined",
        writers,
        PIPELINED_READ,
        shape,
        |id, connection, read| PipelinedWriter {
            id,
            connection,
            read,
            seq: 0,
        },
    )
}

impl ShapeWriter for PipelinedWriter {
    /// One command: `START` with the read, then the write with `COMMIT`.
    fn command(&mut self, write: &'static str, ticket: i64, row: &'static [u8]) {
        let id = self.id;
        let (begun, read) = self.connection.pipeline(
            vec![Request::Simple(
                "START TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            )],
            &[(&self.read, &[&id])],
        );
        assert!(begun.iter().all(Result::is_ok), "the transaction begun");
        assert!(read.iter().all(Result::is_ok), "the run read");
        self.seq += 1;
        let params: Vec<Param> = vec![
            Param::from(id),
            Param::from(ticket),
            Param::from(row.to_vec()),
            Param::from(self.seq),
        ];
        let (done, _) = self.connection.pipeline(
            vec![
                Request::Execute {
                    op: "write",
                    sql: Cow::Borrowed(write),
                    params,
                },
                Request::Simple("COMMIT"),
            ],
            &[],
        );
        assert!(done.iter().all(Result::is_ok), "the write and its commit");
    }
}

/// The optimistic shape's read: the clock, the run's row and its journal's length, in autocommit
/// (no lock, no transaction kept open).
const OPTIMISTIC_READ: &str = "SELECT floor(extract(epoch FROM now()) * 1000)::bigint, \
     (SELECT row FROM runs WHERE id = $1), \
     (SELECT coalesce(max(seq), 0) FROM journal WHERE writer = $1)";
/// The intent's entry and its journal line in one autocommit statement, guarded: the run's row
/// is locked and must be the one read (else a division by zero fails the statement), and the
/// journal line's key is the next after the length read (else a unique violation does).
const OPTIMISTIC_INTENT: &str = "WITH g AS (SELECT 1 FROM runs WHERE id = $1 AND row = $5 FOR UPDATE), \
     e AS (INSERT INTO effects (writer, ticket, row) VALUES ($1, $2, $3)), \
     j AS (INSERT INTO journal (writer, seq, row) VALUES ($1, $4, $3)) \
     SELECT 1 / count(*) FROM g";
/// The outcome over the entry and its journal line, guarded as the intent.
const OPTIMISTIC_OUTCOME: &str = "WITH g AS (SELECT 1 FROM runs WHERE id = $1 AND row = $5 FOR UPDATE), \
     e AS (UPDATE effects SET row = $3 WHERE writer = $1 AND ticket = $2), \
     j AS (INSERT INTO journal (writer, seq, row) VALUES ($1, $4, $3)) \
     SELECT 1 / count(*) FROM g";

/// A writer of the optimistic ceiling.
struct OptimisticWriter {
    id: i64,
    connection: Connection,
    read: postgres::Statement,
}

/// The ceiling of an optimistic command's shape: two autocommit statements per command (a read
/// of what the command decides on, then its writes guarded by what it read), no transaction
/// begun or committed by a message of its own.
fn optimistic_ceiling(server: &str, writers: usize) -> Ceiling<OptimisticWriter> {
    let shape = (OPTIMISTIC_INTENT, OPTIMISTIC_OUTCOME);
    ceiling(
        server,
        "bench_optimistic",
        writers,
        OPTIMISTIC_READ,
        shape,
        |id, connection, read| OptimisticWriter {
            id,
            connection,
            read,
        },
    )
}

impl ShapeWriter for OptimisticWriter {
    /// One command: the read, then the guarded write, each in autocommit.
    fn command(&mut self, write: &'static str, ticket: i64, row: &'static [u8]) {
        let id = self.id;
        let (_, mut read) = self
            .connection
            .pipeline(Vec::new(), &[(&self.read, &[&id])]);
        let rows = read.pop().expect("one read").expect("the run read");
        let run: Vec<u8> = rows[0].get(1);
        let seq: i64 = rows[0].get(2);
        let params: Vec<Param> = vec![
            Param::from(id),
            Param::from(ticket),
            Param::from(row.to_vec()),
            Param::from(seq + 1),
            Param::from(run),
        ];
        let (done, _) = self.connection.pipeline(
            vec![Request::Execute {
                op: "write",
                sql: Cow::Borrowed(write),
                params,
            }],
            &[],
        );
        assert!(done.iter().all(Result::is_ok), "the guarded write");
    }
}

/// The intent as one autocommit statement with nothing read before it: the guard of
/// [`OPTIMISTIC_INTENT`], and the server's clock within a second of the writer's estimate, and
/// the step without an entry yet.
const CACHED_INTENT: &str = "WITH g AS (SELECT 1 FROM runs WHERE id = $1 AND row = $5 \
     AND abs(floor(extract(epoch FROM now()) * 1000)::bigint - $6) < 1000 \
     AND NOT EXISTS (SELECT 1 FROM effects WHERE writer = $1 AND ticket = $2) FOR UPDATE), \
     e AS (INSERT INTO effects (writer, ticket, row) VALUES ($1, $2, $3)), \
     j AS (INSERT INTO journal (writer, seq, row) VALUES ($1, $4, $3)) \
     SELECT 1 / count(*) FROM g";
/// The outcome as one autocommit statement, guarded as [`CACHED_INTENT`] but for the step.
const CACHED_OUTCOME: &str = "WITH g AS (SELECT 1 FROM runs WHERE id = $1 AND row = $5 \
     AND abs(floor(extract(epoch FROM now()) * 1000)::bigint - $6) < 1000 FOR UPDATE), \
     e AS (UPDATE effects SET row = $3 WHERE writer = $1 AND ticket = $2), \
     j AS (INSERT INTO journal (writer, seq, row) VALUES ($1, $4, $3)) \
     SELECT 1 / count(*) FROM g";

/// A writer of the no-read shape: the optimistic writer's connection, and its journal's length
/// (what it holds of its run, with the run's row).
struct CachedWriter {
    writer: OptimisticWriter,
    seq: i64,
}

impl ShapeWriter for CachedWriter {
    /// One command: the guarded write alone, decided at this host's clock.
    fn command(&mut self, write: &'static str, ticket: i64, row: &'static [u8]) {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_millis() as i64;
        self.seq += 1;
        let params: Vec<Param> = vec![
            Param::from(self.writer.id),
            Param::from(ticket),
            Param::from(row.to_vec()),
            Param::from(self.seq),
            Param::from(b"run: leased to its writer".to_vec()),
            Param::from(now_ms),
        ];
        let (done, _) = self.writer.connection.pipeline(
            vec![Request::Execute {
                op: "write",
                sql: Cow::Borrowed(write),
                params,
            }],
            &[],
        );
        for d in &done {
            if let Err((_, e)) = d {
                panic!("the guarded write: {e:?}");
            }
        }
    }
}

/// The ceiling of a command decided on what the writer already holds: one guarded autocommit
/// statement per command.
fn cached_ceiling(server: &str, writers: usize) -> Ceiling<CachedWriter> {
    let shape = (CACHED_INTENT, CACHED_OUTCOME);
    ceiling(
        server,
        "bench_cached",
        writers,
        OPTIMISTIC_READ,
        shape,
        |id, connection, read| CachedWriter {
            writer: OptimisticWriter {
                id,
                connection,
                read,
            },
            seq: 0,
        },
    )
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
        bench_system(&mut group, "pg_pipelined_ceiling", threads, || {
            pipelined_ceiling(&server, threads)
        });
        bench_system(&mut group, "pg_optimistic_ceiling", threads, || {
            optimistic_ceiling(&server, threads)
        });
        bench_system(&mut group, "pg_cached_ceiling", threads, || {
            cached_ceiling(&server, threads)
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

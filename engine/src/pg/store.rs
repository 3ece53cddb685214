//! `PgStore`: the books in a PostgreSQL database, one command per
//! transaction.
//!
//! A command runs as the embedded engine's does, on the server's rows:
//! `books::decide` over a [`PgBooks`] view of a transaction, then
//! `books::apply` of its ops through the same view, then `COMMIT`; the
//! answer is returned only after the commit returned.
//!
//! The transaction is `REPEATABLE READ` (one snapshot for all of the
//! command's reads), and every run the command reads is locked (`FOR
//! UPDATE`): commands on one run take their turns, in the order they lock
//! it, so a lease or a fencing token a command checked cannot change before
//! it commits; a row another transaction changed since the snapshot is a
//! serialization failure, run again. `SERIALIZABLE` was measured first and
//! dropped: its predicate locks are per index page, so on small tables
//! commands on different runs failed each other (at 16 writers, 1,862 of
//! 3,271 attempts rolled back; docs/PERFORMANCE.md, "The effect protocol on
//! PostgreSQL"). Time is the server's
//! (`now()`, the transaction's start on the server's clock), so hosts whose
//! clocks disagree still agree on leases, deadlines and timers.
//!
//! A serialization failure, a deadlock or a key another transaction
//! inserted first (SQLSTATE 40001, 40P01, 23505) rolls the transaction back, nothing of it applied, and the command runs again from
//! its reads, at most [`RETRIES`] times. A connection lost before `COMMIT`
//! was sent loses the command whole (`may_have_landed: false`); one lost
//! while `COMMIT` was in flight may or may not have landed, whole
//! (`may_have_landed: true`), as a failed fsync on the embedded engine. The
//! next call connects again.
//!
//! An intent whose arguments are not stored, an outcome or a
//! reconciliation is first run optimistically: decided on what the process
//! holds of its run since its last command there (`PgBooks::from_known`),
//! or on one autocommit read (`PgBooks::optimistic`), its writes sent as one
//! autocommit statement that lands only if the run is still as held or
//! read; when it is not, or the command needs more than that, nothing
//! landed and it runs as above.
//!
//! **Invariant:** a command's reads and writes happen in one transaction,
//! or its writes land in one statement only on the rows it read unchanged;
//! it is answered only once they landed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use postgres::error::SqlState;

use super::books::{
    CLOCK_SLACK_MS, Ended, Failed, Known, Optimistic, PgBooks, command_run, digest_of_key,
    optimistic_command,
};
use super::schema;
use super::wire::Connection;
use crate::books::{Answer, Decided};
use crate::books::{
    AuditEntry, BlobRefs, BooksRead, BooksWrite, BudgetBook, CheckpointMeta, Command,
    DecisionRecord, EffectEntry, MemBooks, ResourceBook, Run, RunId, SagaBook, SharedEntry,
    WaitBook, apply, decide,
};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::state::rows::{RowTable, decode_row};

/// How many times a command is run again after a serialization failure.
pub const RETRIES: u32 = 64;

/// How many runs a store holds what it knows of at most (the runs its
/// workers hold leases on; past it, the run first in id order is let go).
const KNOWN_RUNS: usize = 4_096;

/// What a store counted of its optimistic commands (see
/// [`PgStore::optimistic_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptimisticCounts {
    /// Commands tried optimistically.
    pub tried: u64,
    /// Of them, those that landed nothing and ran again in a transaction.
    pub again: u64,
    /// Of them, those decided on what the process held of the run, with no
    /// read.
    pub from_memory: u64,
}

/// The books in a PostgreSQL database, through a pool of connections:
/// share one `PgStore` between threads; each command takes a connection of
/// its own for its transaction, so commands on different runs go on at
/// once.
pub struct PgStore {
    url: String,
    /// The server as errors name it: the URL without its password.
    server: String,
    /// The connections no command is using (a command takes one, or makes
    /// one if none is idle, and gives it back unless it failed).
    idle: Mutex<Vec<Connection>>,
    /// Whether the connect that made this store created the tables.
    created: bool,
    /// The round trips to the server its connections made.
    round_trips: Arc<AtomicU64>,
    /// The commands run optimistically, those of them that ran again in a
    /// transaction, and those decided on what the process held (see
    /// [`PgStore::optimistic_counts`]).
    optimistic: [AtomicU64; 3],
    /// What this process holds of the runs its optimistic commands landed
    /// on last (at most [`KNOWN_RUNS`]; see `Known`).
    known: Mutex<BTreeMap<RunId, Known>>,
    /// The server's clock less this host's, in milliseconds, as the last
    /// read of the server's clock measured it (first at connect).
    offset_ms: AtomicI64,
    /// Fault injection for the kill loop: every how many optimistic
    /// commands one waits between its read and its write, and how long, in
    /// milliseconds (0: never; see [`PgStore::stall_optimistic_writes`]).
    stall: [AtomicU64; 2],
    /// The planted bugs of this backend (test-only `planted-bugs`).
    planted: Planted,
}

/// The planted bugs of the backend (`crate::planted`): switched on only
/// through [`PgStore::plant`], which the engine calls only when the
/// `planted-bugs` feature is on and its options name the bug.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Planted {
    /// `PgDecideOutsideTransaction`.
    pub(crate) decide_outside: bool,
    /// `PgAnswerBeforeDurable`.
    pub(crate) answer_before_durable: bool,
    /// `PgRefusedWriteAsCommitted`.
    pub(crate) refused_write_as_committed: bool,
    /// `PgStaleWriteAsCommitted`.
    pub(crate) stale_write_as_committed: bool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// `url` without the password it may carry (`postgres://user:secret@host`).
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(name, _)| name);
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_string(),
    }
}

/// `Error::Postgres` for `e`, met on `server` while doing `op`.
pub(crate) fn postgres_error(
    server: &str,
    op: &'static str,
    may_have_landed: bool,
    e: postgres::Error,
) -> Error {
    Error::Postgres {
        server: server.to_string(),
        op,
        may_have_landed,
        source: Box::new(e),
    }
}

/// The server tests run against: the URL `ACTUM_PG_URL` names
/// (scripts/postgres.sh starts a server and sets it), or `None` when it
/// names none, so the test skips, saying so on stderr.
///
/// # Panics
///
/// When `ACTUM_PG_REQUIRED` is set (the script sets it) and
/// `ACTUM_PG_URL` names no server: a test that must run does not skip.
pub fn server_for_tests() -> Option<String> {
    match std::env::var("ACTUM_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("ACTUM_PG_REQUIRED").is_err(),
                "ACTUM_PG_REQUIRED is set but ACTUM_PG_URL names no server"
            );
            eprintln!("skipped: ACTUM_PG_URL names no PostgreSQL server (scripts/postgres.sh)");
            None
        }
    }
}

/// Makes a new, empty database on the server `url` names, for a test or a
/// bench: `<prefix>_<process id>_<n>`, dropped first if a run before left
/// it. Returns the URL of the new database (`url` with its database name
/// replaced). The tables are made when a store first connects to it.
pub fn scratch_database(url: &str, prefix: &str) -> Result<String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    let server = without_password(url);
    let failed = |op: &'static str| {
        let server = server.clone();
        move |e| postgres_error(&server, op, false, e)
    };
    let mut admin = postgres::Client::connect(url, postgres::NoTls).map_err(failed("connect"))?;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .map_err(failed("drop a scratch database"))?;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .map_err(failed("create a scratch database"))?;
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let root = base.rsplit_once('/').map_or(base, |(root, _)| root);
    Ok(match query {
        Some(query) => format!("{root}/{name}?{query}"),
        None => format!("{root}/{name}"),
    })
}

/// Whether the server asks for the transaction to be run again.
fn retryable(error: &postgres::Error) -> bool {
    matches!(
        error.code(),
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::UNIQUE_VIOLATION
    )
}

impl PgStore {
    /// Connects to the database `url` names (a libpq-style URL,
    /// `postgres://user@host:port/dbname`), and creates or upgrades the
    /// books' tables in it (refusing a newer version than this build's).
    pub fn connect(url: &str) -> Result<PgStore> {
        let mut store = PgStore {
            url: url.to_string(),
            server: without_password(url),
            idle: Mutex::new(Vec::new()),
            created: false,
            round_trips: Arc::new(AtomicU64::new(0)),
            optimistic: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            known: Mutex::new(BTreeMap::new()),
            offset_ms: AtomicI64::new(0),
            stall: [AtomicU64::new(0), AtomicU64::new(0)],
            planted: Planted::default(),
        };
        // The tables, on a connection of the synchronous client's (once,
        // at open); commands use the pool's.
        let mut client = postgres::Client::connect(url, postgres::NoTls)
            .map_err(|e| store.error("connect", false, e))?;
        let found = schema::prepare(&mut client, &store.server)?;
        store.created = found == 0;
        let connection = store.take()?;
        store.give_back(connection);
        let server = store.now_ms()?;
        store.measured(server);
        Ok(store)
    }

    /// This host's clock corrected by its offset from the server's as
    /// measured now (the last read of the server's clock).
    pub(crate) fn server_clock(&self) -> ServerClock {
        ServerClock {
            offset_ms: self.offset_ms.load(Ordering::Relaxed),
        }
    }

    /// Plants the bugs `planted` names (test-only, see [`Planted`]).
    pub(crate) fn plant(&mut self, planted: Planted) {
        self.planted = planted;
        // Connections made before are set up without the bugs.
        self.idle
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The server, as errors name it.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// How many round trips to the server this store's connections made
    /// (each a wait for the server's answers to what was sent at once: the
    /// cost of a command's small statements is in these). An unprepared
    /// statement of the rare paths (counters, whole-database reads), whose
    /// prepare and run are two trips, counts as one.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// How many commands this store tried optimistically (decided on one
    /// read in autocommit, or on what it held of the run, and written by one
    /// guarded statement), how many of them ran again in a transaction
    /// (their run changed after the read, the server's clock was not where
    /// the process estimated it, or they needed a row the read did not
    /// hold), and how many were decided with no read.
    pub fn optimistic_counts(&self) -> OptimisticCounts {
        let get = |n: usize| self.optimistic[n].load(Ordering::Relaxed);
        OptimisticCounts {
            tried: get(0),
            again: get(1),
            from_memory: get(2),
        }
    }

    /// Fault injection (for the kill loop, `internals`): every `every`-th
    /// command run optimistically waits `ms` milliseconds between its read
    /// and its write, as a slow network or a descheduled process would make
    /// it, so the run's lease keeper (or another worker) changes the run in
    /// between and the write's guard is what stands. `every` 0 stops it.
    #[cfg(any(test, feature = "internals"))]
    #[doc(hidden)]
    pub fn stall_optimistic_writes(&self, every: u64, ms: u64) {
        self.stall[0].store(every, Ordering::Relaxed);
        self.stall[1].store(ms, Ordering::Relaxed);
    }

    /// Whether the connect that made this store found no tables and
    /// created them.
    pub fn created(&self) -> bool {
        self.created
    }

    fn error(&self, op: &'static str, may_have_landed: bool, e: postgres::Error) -> Error {
        postgres_error(&self.server, op, may_have_landed, e)
    }

    /// An idle connection, or a new one if none is idle.
    fn take(&self) -> Result<Connection> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(connection) if !connection.is_closed() => Ok(connection),
            _ => {
                let mut connection = Connection::connect(&self.url, Arc::clone(&self.round_trips))
                    .map_err(|e| Error::io("start a connection's runtime", self.server.clone(), e))?
                    .map_err(|e| self.error("connect", false, e))?;
                if self.planted.answer_before_durable {
                    connection
                        .batch_execute("SET synchronous_commit = off")
                        .map_err(|e| self.error("connect", false, e))?;
                }
                Ok(connection)
            }
        }
    }

    /// Gives `connection` back to the pool. A connection a failure of the
    /// server's or of the network met is never given back: the client does
    /// not always notice a connection the server ended (an
    /// administrator's `pg_terminate_backend`, a restart) until a second
    /// call fails on it, so the next command connects afresh instead.
    /// A transaction still open on it (a refused command's, a read's) is
    /// rolled back first; a connection that cannot is dropped.
    fn give_back(&self, mut connection: Connection) {
        if connection.in_transaction && connection.batch_execute("ROLLBACK").is_err() {
            return;
        }
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(connection);
    }

    /// Runs `work` on a connection of the pool, given back afterwards
    /// unless `broke` says the outcome left it in doubt.
    fn on_connection<T, E>(
        &self,
        work: impl FnOnce(&mut Connection) -> std::result::Result<T, E>,
        broke: impl FnOnce(&std::result::Result<T, E>) -> bool,
    ) -> Result<std::result::Result<T, E>> {
        let mut connection = self.take()?;
        let outcome = work(&mut connection);
        if !broke(&outcome) {
            self.give_back(connection);
        }
        Ok(outcome)
    }

    /// Runs `cmd`: decides it on the server's rows, applies its ops and
    /// commits, in one transaction, run again on a
    /// serialization failure. Its answer, once committed.
    pub fn execute(&self, cmd: &Command) -> Result<Answer> {
        self.execute_on(cmd, None, &|_, _| ())
            .map(|(answer, ())| answer)
    }

    /// [`Self::execute`], calling `observe` with the decided command and
    /// the books it was decided on, inside the attempt that committed (an
    /// attempt run again calls it again; only the committed one's value is
    /// returned): how the engine counts its metrics.
    /// (`at_ms`: a clock reading to decide at instead of the server's, for
    /// tests driven by a manual clock.)
    pub(crate) fn execute_observed<D>(
        &self,
        cmd: &Command,
        at_ms: Option<u64>,
        observe: &dyn Fn(&Decided, &dyn BooksRead) -> D,
    ) -> Result<(Answer, D)> {
        self.execute_on(cmd, at_ms, observe)
    }

    /// [`Self::execute`] at the clock reading `now_ms` instead of the
    /// server's: for tests that compare with the reference model.
    #[cfg(test)]
    pub(crate) fn execute_at(&self, cmd: &Command, now_ms: u64) -> Result<Answer> {
        self.execute_on(cmd, Some(now_ms), &|_, _| ())
            .map(|(answer, ())| answer)
    }

    fn execute_on<D>(
        &self,
        cmd: &Command,
        now_ms: Option<u64>,
        observe: &dyn Fn(&Decided, &dyn BooksRead) -> D,
    ) -> Result<(Answer, D)> {
        let mut last = None;
        for _ in 0..=RETRIES {
            let attempt = self.on_connection(
                |connection| self.attempt(connection, cmd, now_ms, observe),
                |outcome| matches!(outcome, Err(Attempt::Failed(Error::Postgres { .. }))),
            );
            match attempt.map_err(Attempt::Failed).and_then(|outcome| outcome) {
                Err(Attempt::Retry(e)) => last = Some(e),
                Err(Attempt::Failed(error)) => return Err(error),
                Ok(answer) => return Ok(answer),
            }
        }
        let e = last.expect("at least one attempt");
        Err(self.error(
            "run a command (serialization failures every time)",
            false,
            e,
        ))
    }

    fn attempt<D>(
        &self,
        connection: &mut Connection,
        cmd: &Command,
        at_ms: Option<u64>,
        observe: &dyn Fn(&Decided, &dyn BooksRead) -> D,
    ) -> std::result::Result<(Answer, D), Attempt> {
        // (The planted `PgDecideOutsideTransaction`: decided on a snapshot
        // of its own, ended before the command's transaction begins.)
        let outside = match self.planted.decide_outside {
            true => Some(self.decide_outside(connection, cmd, at_ms)?),
            false => None,
        };
        if outside.is_none()
            && let Some(done) = self.optimistic(connection, cmd, at_ms, observe)
        {
            return done;
        }
        // A transaction may change the run: what the process held of it is
        // let go of (a write decided on it would fail its guard anyway).
        if let Some(run) = command_run(cmd) {
            self.known
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(run);
        }
        // The transaction begun, the clock and what `cmd` reads first read,
        // in one round trip.
        let mut books = PgBooks::command(connection, cmd);
        if at_ms.is_none() && !books.has_failed() {
            self.measured(books.clock_ms());
        }
        let now_ms = at_ms.unwrap_or_else(|| books.clock_ms());
        let decided = match outside {
            Some(decided) => decided,
            None => decide(&books, cmd, now_ms),
        };
        let applied = decided.and_then(|decided| applied_on(&mut books, decided, observe));
        // A failed read must not pass for an absent row: it decides first.
        // A refused command changes nothing: its transaction is rolled back
        // with the connection.
        if let Err(refused) = applied {
            return match books.finish() {
                Some(failed) => Err(self.failed_with(failed)),
                None => Err(Attempt::Failed(refused)),
            };
        }
        let (ended, known) = books.commit(self.planted.refused_write_as_committed);
        match ended {
            Ended::Committed => {
                if let Some(known) = known {
                    self.hold(known);
                }
                applied.map_err(Attempt::Failed)
            }
            Ended::Failed(failed) => Err(self.failed_with(failed)),
            // The connection broke with COMMIT in flight: the server may
            // have committed it, whole, or not at all.
            Ended::InDoubt(op, e) => Err(Attempt::Failed(self.error(op, true, e))),
        }
    }

    /// `cmd` run optimistically (`PgBooks::optimistic`): decided on one
    /// autocommit read of its run and written by one autocommit statement
    /// that lands only if the run is as read, two statements where a
    /// transaction takes four. `None` when it must run in a transaction
    /// instead (nothing of it landed): it needed a row the read did not
    /// hold, wrote one it may not write so, or its run changed since.
    fn optimistic<D>(
        &self,
        connection: &mut Connection,
        cmd: &Command,
        at_ms: Option<u64>,
        observe: &dyn Fn(&Decided, &dyn BooksRead) -> D,
    ) -> Option<std::result::Result<(Answer, D), Attempt>> {
        if !optimistic_command(cmd) {
            return None;
        }
        let run = command_run(cmd)?;
        let known = self
            .known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(run)
            .filter(Known::usable);
        let mut books = match known {
            // A manual clock (tests) decides at its own readings, which the
            // server's clock cannot be checked against.
            Some(known) if at_ms.is_none() => {
                self.optimistic[2].fetch_add(1, Ordering::Relaxed);
                // Half the slack ahead: the measured offset is low by the
                // read's latency and the write starts after this reading,
                // so the reading lands at or a little after the server's
                // clock when the write runs, which the write checks.
                let now_ms = self.server_clock().now_ms() + CLOCK_SLACK_MS / 2;
                PgBooks::from_known(connection, known, now_ms)
            }
            _ => {
                let books = PgBooks::optimistic(connection, cmd, run.clone());
                if at_ms.is_none() && !books.has_failed() {
                    self.measured(books.clock_ms());
                }
                books
            }
        };
        let tried = self.optimistic[0].fetch_add(1, Ordering::Relaxed) + 1;
        let stale = || {
            self.optimistic[1].fetch_add(1, Ordering::Relaxed);
            None
        };
        let now_ms = at_ms.unwrap_or_else(|| books.clock_ms());
        let applied = decide(&books, cmd, now_ms)
            .and_then(|decided| applied_on(&mut books, decided, observe));
        if books.missed() {
            return stale();
        }
        if let Err(refused) = applied {
            // What the process held may be out of date, and nothing checks a
            // refusal: the transaction decides.
            if books.decided_from_memory() {
                return stale();
            }
            // Refused on the run as read (a read that failed decides
            // first): nothing was sent to refuse.
            return Some(match books.finish() {
                Some(failed) => Err(self.failed_with(failed)),
                None => Err(Attempt::Failed(refused)),
            });
        }
        let every = self.stall[0].load(Ordering::Relaxed);
        if every > 0 && tried.is_multiple_of(every) {
            let ms = self.stall[1].load(Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        let (ended, known) = books.commit_optimistic(self.planted.refused_write_as_committed);
        match ended {
            Optimistic::Committed => {
                if let Some(known) = known {
                    self.hold(known);
                }
                Some(applied.map_err(Attempt::Failed))
            }
            // (The planted `PgStaleWriteAsCommitted`: nothing landed, and
            // the command is answered as if it had.)
            Optimistic::Changed if self.planted.stale_write_as_committed => {
                Some(applied.map_err(Attempt::Failed))
            }
            Optimistic::Stale | Optimistic::Changed => stale(),
            Optimistic::Failed(failed) => Some(Err(self.failed_with(failed))),
            Optimistic::InDoubt(op, e) => Some(Err(Attempt::Failed(self.error(op, true, e)))),
        }
    }

    /// Notes the server's clock, `server_ms`, read just now: the offset
    /// [`Self::server_clock`] corrects this host's clock by.
    fn measured(&self, server_ms: u64) {
        let here = i64::try_from(SystemClock.now_ms()).unwrap_or(i64::MAX);
        let server = i64::try_from(server_ms).unwrap_or(i64::MAX);
        self.offset_ms
            .store(server.saturating_sub(here), Ordering::Relaxed);
    }

    /// How many ledger entries the process holds of `run` (for tests:
    /// what it holds is the last command's sides, not the run's history).
    #[cfg(test)]
    pub(crate) fn held_entries(&self, run: &RunId) -> Option<usize> {
        self.known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(run)
            .map(Known::entries)
    }

    /// Holds what `known` says of its run for the next command on it.
    fn hold(&self, known: Known) {
        let mut held = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if held.len() >= KNOWN_RUNS && !held.contains_key(known.run()) {
            held.pop_first();
        }
        held.insert(known.run().clone(), known);
    }

    /// An attempt that ended on `failed`, before anything landed.
    fn failed_with(&self, failed: Failed) -> Attempt {
        match failed {
            Failed::Query(op, e) => self.failed(op, e),
            Failed::Corrupt(error) => Attempt::Failed(error),
        }
    }

    /// The planted `PgDecideOutsideTransaction`: `cmd` decided in a
    /// read-only transaction that ends before the command's begins.
    fn decide_outside(
        &self,
        connection: &mut Connection,
        cmd: &Command,
        at_ms: Option<u64>,
    ) -> std::result::Result<Result<Decided>, Attempt> {
        let books = PgBooks::snapshot(connection);
        let now_ms = at_ms.unwrap_or_else(|| books.clock_ms());
        let decided = decide(&books, cmd, now_ms);
        let failed = books.finish();
        connection
            .batch_execute("ROLLBACK")
            .map_err(|e| self.failed("end the read", e))?;
        match failed {
            Some(failed) => Err(self.failed_with(failed)),
            None => Ok(decided),
        }
    }

    /// A failure before `COMMIT` was sent: nothing landed.
    fn failed(&self, op: &'static str, e: postgres::Error) -> Attempt {
        if retryable(&e) {
            Attempt::Retry(e)
        } else {
            Attempt::Failed(self.error(op, false, e))
        }
    }

    /// Runs `read` over the books as of one snapshot (a read-only,
    /// repeatable-read transaction; nothing is locked, so no command waits
    /// for it), with the server's clock reading at its start. A read that
    /// failed on the server, or a damaged row, is the `Err`; a value `read`
    /// computed from a failed read is never returned.
    pub fn read<T>(&self, read: impl FnOnce(&dyn BooksRead, u64) -> Result<T>) -> Result<T> {
        self.read_books(|books, now_ms| read(books, now_ms))
    }

    /// [`Self::read`] over the concrete view (its listing queries).
    pub(crate) fn read_books<T>(
        &self,
        read: impl FnOnce(&PgBooks<'_>, u64) -> Result<T>,
    ) -> Result<T> {
        self.on_snapshot(|books| {
            let now_ms = books.clock_ms();
            let value = read(&books, now_ms);
            match books.finish() {
                Some(Failed::Query(op, e)) => Err(self.error(op, false, e)),
                Some(Failed::Corrupt(error)) => Err(error),
                None => value,
            }
        })
    }

    /// The engine's counters every process stored, by name.
    pub(crate) fn read_metrics(&self) -> Result<BTreeMap<String, u64>> {
        self.in_snapshot(|connection| {
            let rows = connection
                .query("SELECT name, value FROM actum_metrics", &[])
                .map_err(|e| self.error("read the counters", false, e))?;
            Ok(rows
                .iter()
                .map(|row| {
                    let value: i64 = row.get(1);
                    (row.get(0), u64::try_from(value).unwrap_or(0))
                })
                .collect())
        })
    }

    /// Adds `counted` to the stored counters, in one transaction.
    pub(crate) fn add_metrics(&self, counted: &[(&'static str, u64)]) -> Result<()> {
        let added = self.on_connection(
            |connection| {
                connection.batch_execute("START TRANSACTION")?;
                for (name, value) in counted.iter().filter(|(_, v)| *v > 0) {
                    let value = i64::try_from(*value).unwrap_or(i64::MAX);
                    connection.execute(
                        "INSERT INTO actum_metrics (name, value) VALUES ($1, $2) \
                         ON CONFLICT (name) DO UPDATE SET value = actum_metrics.value + EXCLUDED.value",
                        &[name, &value],
                    )?;
                }
                connection.batch_execute("COMMIT")
            },
            Result::is_err,
        )?;
        added.map_err(|e| self.error("store the counters", e.is_closed(), e))
    }

    /// The server's clock, in milliseconds since the epoch.
    pub fn now_ms(&self) -> Result<u64> {
        self.read(|_, now_ms| Ok(now_ms))
    }

    /// Runs `read` over a read-only, repeatable-read snapshot on a
    /// connection of the pool; a failure of the server's drops the
    /// connection.
    fn on_snapshot<T>(&self, read: impl FnOnce(PgBooks<'_>) -> Result<T>) -> Result<T> {
        self.on_connection(
            |connection| read(PgBooks::snapshot(connection)),
            |outcome| matches!(outcome, Err(Error::Postgres { .. })),
        )?
    }

    /// Runs `read` on a connection of the pool in a read-only,
    /// repeatable-read transaction; a failure of the server's drops the
    /// connection.
    fn in_snapshot<T>(&self, read: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        self.on_connection(
            |connection| {
                connection
                    .batch_execute("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    .map_err(|e| self.error("begin", false, e))?;
                read(connection)
            },
            |outcome| matches!(outcome, Err(Error::Postgres { .. })),
        )?
    }

    /// Every row of the books, read in one transaction into a [`MemBooks`]
    /// (for checks and tests: it holds the whole database in memory).
    pub fn read_all(&self) -> Result<MemBooks> {
        self.in_snapshot(|connection| self.read_all_in(connection))
    }

    fn read_all_in(&self, txn: &mut Connection) -> Result<MemBooks> {
        let mut books = MemBooks::new();
        let read = |txn: &mut Connection, sql: &str| {
            txn.query(sql, &[])
                .map_err(|e| self.error("read every row", false, e))
        };
        let corrupt = |reason: String| Error::Corrupt {
            file: "postgres".into(),
            offset: 0,
            reason,
        };
        macro_rules! rows {
            ($sql:expr, $table:expr, $ty:ty, |$value:ident| $put:expr) => {
                for row in read(txn, $sql)? {
                    let bytes: Vec<u8> = row.get(0);
                    let $value: $ty = decode_row($table, &bytes)
                        .map_err(|e| corrupt(format!("a row of {:?}: {e}", $table)))?;
                    $put;
                }
            };
        }
        rows!("SELECT row FROM actum_runs", RowTable::Run, Run, |v| books
            .put_run(v));
        rows!(
            "SELECT row FROM actum_effects",
            RowTable::Effect,
            EffectEntry,
            |v| books.put_effect(v)
        );
        rows!(
            "SELECT row FROM actum_checkpoints",
            RowTable::Checkpoint,
            CheckpointMeta,
            |v| { books.put_checkpoint(v) }
        );
        rows!(
            "SELECT row FROM actum_decisions",
            RowTable::Decision,
            DecisionRecord,
            |v| { books.put_decision(v) }
        );
        for row in read(txn, "SELECT run, row FROM actum_audit ORDER BY run, seq")? {
            let run: String = row.get(0);
            let run = RunId::new(&run).map_err(|e| corrupt(format!("an audit row's run: {e}")))?;
            let bytes: Vec<u8> = row.get(1);
            let entry: AuditEntry = decode_row(RowTable::Audit, &bytes)
                .map_err(|e| corrupt(format!("an audit row of run {run}: {e}")))?;
            books.push_audit(&run, entry);
        }
        rows!(
            "SELECT row FROM actum_waits",
            RowTable::Waits,
            WaitBook,
            |v| books.put_waits(v)
        );
        rows!(
            "SELECT row FROM actum_budgets",
            RowTable::Budgets,
            BudgetBook,
            |v| books.put_budget(v)
        );
        rows!(
            "SELECT row FROM actum_sagas",
            RowTable::Sagas,
            SagaBook,
            |v| books.put_saga(v)
        );
        rows!(
            "SELECT row FROM actum_resources",
            RowTable::Resources,
            ResourceBook,
            |v| { books.put_resource(v) }
        );
        rows!(
            "SELECT row FROM actum_shared",
            RowTable::Shared,
            SharedEntry,
            |v| books.put_shared(v)
        );
        rows!(
            "SELECT row FROM actum_blob_refs",
            RowTable::BlobRefs,
            BlobRefs,
            |v| books.put_blob_refs(v)
        );
        for row in read(txn, "SELECT digest, bytes FROM actum_blobs")? {
            let key: Vec<u8> = row.get(0);
            let digest = digest_of_key(&key).ok_or_else(|| corrupt("a blob key".into()))?;
            books.put_blob(digest, row.get(1));
        }
        for row in read(txn, "SELECT digest, holders FROM actum_blob_holders")? {
            let key: Vec<u8> = row.get(0);
            let digest = digest_of_key(&key).ok_or_else(|| corrupt("a blob holder key".into()))?;
            let holders = u64::try_from(row.get::<_, i64>(1))
                .map_err(|_| corrupt("a negative blob holder count".into()))?;
            books.put_blob_holders(digest, Some(holders));
        }
        Ok(books)
    }
}

/// `decided` applied to `books`, op by op until a read fails (what is
/// applied after is thrown away), `observe` called first on the decision:
/// its answer and what `observe` saw.
fn applied_on<D>(
    books: &mut PgBooks<'_>,
    decided: Decided,
    observe: &dyn Fn(&Decided, &dyn BooksRead) -> D,
) -> Result<(Answer, D)> {
    let seen = observe(&decided, books);
    for op in &decided.ops {
        if books.has_failed() {
            break;
        }
        apply(books, op)?;
    }
    Ok((decided.answer, seen))
}

/// This host's clock, corrected by its offset from the server's.
#[derive(Debug)]
pub(crate) struct ServerClock {
    /// The server's clock less this host's, in milliseconds.
    pub(crate) offset_ms: i64,
}

impl Clock for ServerClock {
    fn now_ms(&self) -> u64 {
        let here = i64::try_from(SystemClock.now_ms()).unwrap_or(i64::MAX);
        u64::try_from(here.saturating_add(self.offset_ms)).unwrap_or(0)
    }
}

/// Why one attempt at a command ended without an answer.
enum Attempt {
    /// The server asked for it to run again.
    Retry(postgres::Error),
    /// It failed for good (or was refused by the rules).
    Failed(Error),
}

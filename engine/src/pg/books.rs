//! `PgBooks`: [`BooksRead`] and [`BooksWrite`] over one PostgreSQL
//! transaction, so `books::decide` and `books::apply` run on the server's
//! rows exactly as they run on the embedded engine's: one set of rules, two
//! stores.
//!
//! Every row is the same bytes the embedded state store keeps
//! (`state::rows::encode_row`: a checksum seeded with the table, then the
//! postcard body), in a `bytea` column beside the key columns a query needs
//! (docs/FORMAT.md, "PostgreSQL tables"). A row that does not decode, or
//! whose own key differs from the key it is stored under, is `Corrupt`
//! naming the table and key; nothing is guessed.
//!
//! The traits answer `Option`s, not `Result`s: a failed query is recorded
//! in the view (the first one wins) and answers "absent", and
//! [`PgBooks::finish`] returns it, so the command's transaction is rolled
//! back and never committed on a read that failed.
//!
//! **Invariant:** the view writes only through `BooksWrite`, inside the
//! transaction it was given; every key column is `COLLATE "C"`, so the
//! server orders keys as the embedded books do (by bytes).

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use postgres::error::SqlState;
use postgres::types::ToSql;
use serde::de::DeserializeOwned;

use super::schema::{ended_ms, state_code};
use super::wire::{Connection, Param, Read, Request};
use crate::books::{
    AuditEntry, BlobRefs, BooksRead, BooksWrite, BudgetBook, CheckpointMeta, Command,
    DIGEST_LEN_BYTES, DecisionRecord, Digest, EffectEntry, EffectKey, EffectKind, ResourceBook,
    ResourceId, Run, RunId, RunState, SagaBook, SharedEntry, SharedKeyId, StepId, WaitBook,
    claimable_from_ms, wake_ms,
};
use crate::error::Error;
use crate::state::rows::{RowTable, decode_row, effect_kind_code, encode_row};

/// How many claimable runs one query of `visit_claimable` fetches.
const CLAIM_PAGE: i64 = 32;

/// A failure the view met: the server's, or a row that does not decode.
pub(crate) enum Failed {
    /// The query failed (a serialization failure among them: retried).
    Query(&'static str, postgres::Error),
    /// A stored row is damaged.
    Corrupt(Error),
}

/// How a command's transaction ended.
pub(crate) enum Ended {
    /// `COMMIT` was answered: every write landed.
    Committed,
    /// Nothing landed: a read or a write failed before `COMMIT` ran (the
    /// server answers a failed transaction's `COMMIT` by rolling it back).
    Failed(Failed),
    /// The connection failed with `COMMIT` sent: the transaction may or may
    /// not have landed, whole.
    InDoubt(&'static str, postgres::Error),
}

/// Each value as a statement's parameter, owned (a queued write is sent
/// after the call that queued it returned): the values before a `;` are
/// borrowed and copied, the one after it (a row's bytes) is moved in, not
/// copied again.
macro_rules! owned {
    ($($value:expr),* $(; $moved:expr)?) => {
        vec![$(Param::from($value),)* $(Param::from($moved))?]
    };
}

/// The statement that reads the server's clock at the transaction's start
/// (`now()`), in milliseconds since the epoch.
const CLOCK: &str = "SELECT floor(extract(epoch FROM now()) * 1000)::bigint";

/// The statement that reads one ledger entry by its key.
const EFFECT: &str = "SELECT row FROM actum_effects WHERE run = $1 AND step = $2 AND kind = $3 \
     AND attempt = $4";

/// The statement that reads the latest attempt of a step's side.
const LATEST_EFFECT: &str = "SELECT row FROM actum_effects WHERE run = $1 AND step = $2 \
     AND kind = $3 ORDER BY attempt DESC LIMIT 1";

/// The statement that looks a blob up.
const BLOB_EXISTS: &str = "SELECT 1 FROM actum_blobs WHERE digest = $1";

/// The books as the rows of one open transaction.
pub struct PgBooks<'a> {
    /// Whether reads lock the runs they read (a command's view) or not (a
    /// read-only view, whose transaction cannot lock).
    locking: bool,
    connection: RefCell<&'a mut Connection>,
    /// The writes not yet sent: they go to the server with the next read
    /// that is not cached, or with `COMMIT`, in one round trip (so a read
    /// still sees every write before it).
    queued: RefCell<Vec<Request>>,
    failed: RefCell<Option<Failed>>,
    /// The server's clock at the transaction's start, read with its first
    /// statements (`None` when not asked for, or if it failed).
    clock_ms: Option<u64>,
    /// What this transaction read or wrote of the rows a command reads
    /// again and again (its runs, ledger entries and journal lengths), so
    /// each is read from the server once. Sound because every write of the
    /// transaction goes through this view, and what other transactions
    /// commit meanwhile is not in its snapshot (or, for a locked run, cannot
    /// happen).
    cache: RefCell<Cache>,
    /// An optimistic command's view (see [`PgBooks::optimistic`]): it reads
    /// nothing past its first read, and its write checks the run's stored
    /// record is still `stored_run`'s.
    optimistic: bool,
    /// Whether an optimistic command's view was asked for a row its read
    /// did not hold (it answered nothing: the command runs again in a
    /// transaction).
    missed: Cell<bool>,
    /// A view of what the process held of its run, with no read (see
    /// [`PgBooks::from_known`]): the clock reading it decides at, which
    /// its write checks against the server's clock.
    decided_at: Option<u64>,
    /// The rows such a view took for absent without reading them: its
    /// write checks each.
    assumed: RefCell<Vec<Assumed>>,
    /// The run the command read first and that run's stored record as it
    /// stands after the command's writes: what an optimistic write checks
    /// the run still holds, and what the process holds of the run once the
    /// command committed.
    stored_run: Option<(RunId, Vec<u8>)>,
    /// The steps' sides of the ledger this view read or wrote: what the
    /// process keeps of a run's ledger after the command is these sides
    /// only, so it does not grow with the run's history.
    touched: RefCell<BTreeSet<(RunId, StepId, EffectKind)>>,
}

/// A row a view of what the process held took for absent without reading
/// it; the command's write lands only if it is still absent.
enum Assumed {
    /// A step's side has no ledger entry.
    NoEntry(RunId, StepId, EffectKind),
    /// A blob is not stored.
    NoBlob(Digest),
}

/// How far the clock reading a command decided on what the process held
/// (see [`PgBooks::from_known`]) may be ahead of the server's clock when its
/// write runs: the write fails when the server's clock is later than that
/// reading (a lease live at the reading is live at the write, an intent is
/// never stamped before its time) or earlier by more than this.
pub(crate) const CLOCK_SLACK_MS: u64 = 200;

/// What a process holds of a run after a command on it committed (in a
/// transaction or optimistically): the rows it read and wrote of the run,
/// and the run's stored record, as they were when it committed. The
/// next command on the run may be decided on them with no read; its write
/// lands only if the run is still as they say (the same guard, and the
/// journal's next line still free).
pub(crate) struct Known {
    run: RunId,
    stored: Vec<u8>,
    cache: Cache,
}

impl Known {
    /// What a view's `cache` holds of `run` (nothing of other runs, whose
    /// rows no write of a command on `run` checks; nothing of blobs, which
    /// are not the run's), with the run's record stored as `stored`.
    /// Of the ledger, only the sides in `touched` (the command's own).
    fn of(
        run: RunId,
        stored: Vec<u8>,
        mut cache: Cache,
        touched: &BTreeSet<(RunId, StepId, EffectKind)>,
    ) -> Known {
        // Kept in place: a map that held only the run's rows (the usual
        // case) keeps its node, so a run's commands allocate no maps.
        cache.runs.retain(|id, _| *id == run);
        cache.waits.retain(|id, _| *id == run);
        cache.budgets.retain(|id, _| *id == run);
        cache.sagas.retain(|id, _| *id == run);
        cache.audit_lens.retain(|id, _| *id == run);
        let own = |id: &RunId, step: &StepId, kind: EffectKind| {
            *id == run
                && touched
                    .iter()
                    .any(|(r, s, k)| r == id && s == step && *k == kind)
        };
        cache
            .effects
            .retain(|key, _| own(key.run(), key.step(), key.kind()));
        cache
            .latest
            .retain(|(id, step, kind), _| own(id, step, *kind));
        cache.blobs.clear();
        Known { run, stored, cache }
    }

    /// The run it is of.
    pub(crate) fn run(&self) -> &RunId {
        &self.run
    }

    /// How many ledger entries it holds.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.cache.effects.len()
    }

    /// Whether a command may be decided on it without the server's clock:
    /// the run has no budget and no waits, whose limits and deadlines are
    /// times; its lease is checked at the reading decided at, which the
    /// write holds at or after the server's clock.
    pub(crate) fn usable(&self) -> bool {
        matches!(self.cache.budgets.get(&self.run), Some(None))
            && matches!(self.cache.waits.get(&self.run), Some(None))
            && matches!(self.cache.runs.get(&self.run), Some(Some(_)))
    }
}

/// The rows a [`PgBooks`] read or wrote, by key (`None`: absent).
#[derive(Default)]
struct Cache {
    runs: BTreeMap<RunId, Option<Run>>,
    waits: BTreeMap<RunId, Option<WaitBook>>,
    budgets: BTreeMap<RunId, Option<BudgetBook>>,
    sagas: BTreeMap<RunId, Option<SagaBook>>,
    effects: BTreeMap<EffectKey, Option<EffectEntry>>,
    audit_lens: BTreeMap<RunId, u64>,
    /// The latest attempt of a step's side (0: none): every later attempt
    /// is absent.
    latest: BTreeMap<(RunId, StepId, EffectKind), u32>,
    /// Whether a blob is stored.
    blobs: BTreeMap<Digest, bool>,
}

/// What a command will read first, read in one statement sent with
/// `START TRANSACTION`, in one round trip, instead of a statement and a
/// round trip each (`PgBooks::command`): a guess from the command's fields,
/// never a rule (what it guessed wrong is read again when asked for, what
/// it read needlessly is only cached).
enum Prefetch<'c> {
    /// The clock alone.
    Clock,
    /// A run: its record (locked), wait book, budget, saga and journal
    /// length.
    Run(&'c RunId),
    /// A run, the latest act of a step, and whether a blob is stored (an
    /// intent).
    Intent(&'c RunId, &'c StepId, &'c Digest),
    /// A run and one ledger entry (an outcome, a reconciliation).
    Entry(&'c EffectKey),
    /// A run and whether a blob is stored (a run's creation).
    Create(&'c RunId, &'c Digest),
}

impl<'c> Prefetch<'c> {
    fn of(cmd: &'c Command) -> Prefetch<'c> {
        match cmd {
            Command::BeginEffect(c) => Prefetch::Intent(&c.run, &c.step, &c.args_digest),
            Command::FinishEffect(c) => Prefetch::Entry(&c.key),
            Command::Reconcile(c) => Prefetch::Entry(&c.key),
            Command::CreateRun(c) => Prefetch::Create(&c.run, &c.input_digest),
            Command::Transition(c) => Prefetch::Run(&c.run),
            Command::RenewLease(c) => Prefetch::Run(&c.run),
            Command::ReleaseLease(c) => Prefetch::Run(&c.run),
            Command::SaveCheckpoint(c) => Prefetch::Run(&c.run),
            Command::RecordDecision(c) => Prefetch::Run(&c.run),
            Command::OpenWait(c) => Prefetch::Run(&c.run),
            Command::Reserve(c) => Prefetch::Run(&c.run),
            Command::Settle(c) => Prefetch::Run(&c.run),
            Command::AcquireLease(c) => Prefetch::Run(&c.run),
            _ => Prefetch::Clock,
        }
    }
}

/// The columns every prefetch of a run reads, in one statement: the clock
/// (column 0), then the run's record, locked in a command's transaction
/// (`FOR UPDATE` in a sub-select locks the row it finds; an optimistic
/// command's read locks nothing), wait book, budget, saga (`NULL` when
/// absent) and journal length (columns 1 to 5), each one index probe.
macro_rules! prefetch_run {
    ($lock:literal) => {
        concat!(
            "SELECT floor(extract(epoch FROM now()) * 1000)::bigint, \
             (SELECT row FROM actum_runs WHERE id = $1",
            $lock,
            "), \
             (SELECT row FROM actum_waits WHERE run = $1), \
             (SELECT row FROM actum_budgets WHERE run = $1), \
             (SELECT row FROM actum_sagas WHERE run = $1), \
             (SELECT coalesce(max(seq), 0) FROM actum_audit WHERE run = $1)"
        )
    };
}

/// The prefetch statements, locking the run (a command's transaction) or
/// not (an optimistic command's read, in autocommit).
macro_rules! prefetches {
    ($lock:literal) => {
        Prefetches {
            run: prefetch_run!($lock),
            // Then the step's latest act (column 6) and whether the blob
            // is stored (column 7).
            intent: concat!(
                prefetch_run!($lock),
                ", (SELECT row FROM actum_effects WHERE run = $1 AND step = $2 AND kind = $3 \
                 ORDER BY attempt DESC LIMIT 1), EXISTS (SELECT 1 FROM actum_blobs WHERE digest = $4)"
            ),
            // Then the entry (column 6).
            entry: concat!(
                prefetch_run!($lock),
                ", (SELECT row FROM actum_effects WHERE run = $1 AND step = $2 AND kind = $3 \
                 AND attempt = $4)"
            ),
            // Then whether the blob is stored (column 6).
            create: concat!(
                prefetch_run!($lock),
                ", EXISTS (SELECT 1 FROM actum_blobs WHERE digest = $2)"
            ),
        }
    };
}

/// The statements of the prefetches of [`Prefetch::Run`],
/// [`Prefetch::Intent`], [`Prefetch::Entry`] and [`Prefetch::Create`].
struct Prefetches {
    run: &'static str,
    intent: &'static str,
    entry: &'static str,
    create: &'static str,
}

/// A command's prefetches, in its transaction: the run locked.
const LOCKING: Prefetches = prefetches!(" FOR UPDATE");

/// An optimistic command's prefetches, in autocommit: nothing locked.
const UNLOCKED: Prefetches = prefetches!("");

/// The tables an optimistic command may write (see
/// [`PgBooks::commit_optimistic`]): the rows of its own run that only a
/// command journaled on that run changes. A command that writes anything
/// else (the run's record, its waits and claim instant, blobs and their
/// holders, resources, shared keys) runs in a transaction.
const OPTIMISTIC_TABLES: [&str; 5] = [
    "actum_effects",
    "actum_audit",
    "actum_sagas",
    "actum_budgets",
    "actum_decisions",
];

/// The run `cmd` reads first, if it names one (what a process holds of
/// that run is let go of when the command runs in a transaction).
pub(crate) fn command_run(cmd: &Command) -> Option<&RunId> {
    match Prefetch::of(cmd) {
        Prefetch::Run(run) | Prefetch::Intent(run, ..) | Prefetch::Create(run, _) => Some(run),
        Prefetch::Entry(key) => Some(key.run()),
        Prefetch::Clock => None,
    }
}

/// Whether `cmd` is run optimistically first (see [`PgBooks::optimistic`]):
/// not one that writes the run's record (a lease's, a state's change) or
/// its waits, stores blobs (an intent with its arguments: their holders are
/// counted across runs), or reads more than its first read holds (a
/// decision reads the count of the run's decisions).
pub(crate) fn optimistic_command(cmd: &Command) -> bool {
    match cmd {
        Command::BeginEffect(c) => c.args.is_none(),
        Command::FinishEffect(_) | Command::Reconcile(_) => true,
        _ => false,
    }
}

/// How an optimistic command ended (see [`PgBooks::commit_optimistic`]).
pub(crate) enum Optimistic {
    /// Its writes landed (or it had none: answered from its read).
    Committed,
    /// Nothing landed, and the command must run in a transaction instead:
    /// it needed a row its read did not hold, or wrote a table it may not.
    Stale,
    /// Nothing landed: its run changed after its read (the write's guard
    /// failed); it must run again, in a transaction.
    Changed,
    /// The server refused the write for another cause: nothing landed.
    Failed(Failed),
    /// The connection broke with the write in flight: it landed whole or
    /// not at all.
    InDoubt(&'static str, postgres::Error),
}

/// A `u64` of the books as a PostgreSQL `bigint`. Every count, version,
/// sequence and time the books hold is far below `i64::MAX`; a bound past
/// it (a range's open end) is clamped.
fn big(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl<'a> PgBooks<'a> {
    /// Begins `cmd`'s transaction on `connection` (repeatable read; every
    /// run it reads is locked), reading in the same round trip the
    /// server's clock and what `cmd` will read first.
    pub(crate) fn command(connection: &'a mut Connection, cmd: &Command) -> PgBooks<'a> {
        let mut books = PgBooks::with_locking(true, connection);
        let stored = books.begin(
            Some("START TRANSACTION ISOLATION LEVEL REPEATABLE READ"),
            &Prefetch::of(cmd),
            &LOCKING,
        );
        books.stored_run = command_run(cmd).cloned().zip(stored);
        books
    }

    /// An optimistic view of `cmd` (one [`optimistic_command`] accepts) on
    /// `connection`, its run `run`: no transaction is begun; one statement,
    /// in autocommit, reads the server's clock and what `cmd` reads first
    /// (its run unlocked), and the view answers only from what that read
    /// and what the command wrote. `cmd` is decided and applied on it as on
    /// a transaction's view, then [`Self::commit_optimistic`] sends its
    /// writes as one statement that lands only if the run is as read.
    pub(crate) fn optimistic(
        connection: &'a mut Connection,
        cmd: &Command,
        run: RunId,
    ) -> PgBooks<'a> {
        let mut books = PgBooks::with_locking(false, connection);
        let read = books.begin(None, &Prefetch::of(cmd), &UNLOCKED);
        // The run absent (or the read failed): a transaction decides.
        books.missed.set(read.is_none());
        books.optimistic = true;
        books.stored_run = Some((run, read.unwrap_or_default()));
        books
    }

    /// An optimistic view of a command on what the process holds of its
    /// run (`known`), with no read: decided at `now_ms`, an estimate of the
    /// server's clock that the write checks (see [`CLOCK_SLACK_MS`]). A
    /// row of the run's ledger it does not hold, and a blob, it takes for
    /// absent, and the write checks that; any other row it does not hold
    /// is a miss, as in [`Self::optimistic`].
    pub(crate) fn from_known(
        connection: &'a mut Connection,
        known: Known,
        now_ms: u64,
    ) -> PgBooks<'a> {
        let mut books = PgBooks::with_locking(false, connection);
        books.cache = RefCell::new(known.cache);
        books.optimistic = true;
        books.stored_run = Some((known.run, known.stored));
        books.decided_at = Some(now_ms);
        books.clock_ms = Some(now_ms);
        books
    }

    /// Begins a read-only snapshot on `connection` (repeatable read;
    /// nothing is locked) and reads the server's clock with it.
    pub(crate) fn snapshot(connection: &'a mut Connection) -> PgBooks<'a> {
        let mut books = PgBooks::with_locking(false, connection);
        books.begin(
            Some("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
            &Prefetch::Clock,
            &LOCKING,
        );
        books
    }

    fn with_locking(locking: bool, connection: &'a mut Connection) -> PgBooks<'a> {
        PgBooks {
            locking,
            connection: RefCell::new(connection),
            queued: RefCell::new(Vec::new()),
            failed: RefCell::new(None),
            clock_ms: None,
            cache: RefCell::new(Cache::default()),
            optimistic: false,
            missed: Cell::new(false),
            decided_at: None,
            assumed: RefCell::new(Vec::new()),
            stored_run: None,
            touched: RefCell::new(BTreeSet::new()),
        }
    }

    /// Sends `start` (if any) with the first reads, in one round trip, the
    /// run's read from `prefetches`; the stored bytes of the run's record,
    /// if one was read.
    fn begin(
        &mut self,
        start: Option<&'static str>,
        prefetch: &Prefetch<'_>,
        prefetches: &Prefetches,
    ) -> Option<Vec<u8>> {
        if let Some(start) = start {
            self.queued.borrow_mut().push(Request::Simple(start));
        }
        let act = i16::from(effect_kind_code(EffectKind::Act));
        let (run, sql, owned): (_, _, Vec<Param>) = match prefetch {
            Prefetch::Clock => (None, CLOCK, Vec::new()),
            Prefetch::Run(run) => (Some(*run), prefetches.run, owned![run.as_str()]),
            Prefetch::Intent(run, step, digest) => (
                Some(*run),
                prefetches.intent,
                owned![run.as_str(), step.as_str(), act, digest.0.as_slice()],
            ),
            Prefetch::Entry(key) => {
                let (run, step, kind, attempt) = effect_params(key);
                (
                    Some(key.run()),
                    prefetches.entry,
                    owned![run, step, kind, attempt],
                )
            }
            Prefetch::Create(run, digest) => (
                Some(*run),
                prefetches.create,
                owned![run.as_str(), digest.0.as_slice()],
            ),
        };
        let params: Vec<&(dyn ToSql + Sync)> = owned.iter().map(Param::as_sql).collect();
        let rows = self
            .fetch(&[("read the command's rows", sql, &params)])
            .pop()
            .unwrap_or_default();
        let row = rows.first()?;
        self.clock_ms = Some(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0));
        let stored = run.and_then(|_| row.get::<_, Option<Vec<u8>>>(1));
        if let Some(id) = run {
            self.cache_run(id, Some(row), 1);
        }
        match prefetch {
            Prefetch::Intent(run, step, digest) => {
                self.cache_latest(run, step, EffectKind::Act, row.get(6));
                self.cache_blob(digest, row.get(7));
            }
            Prefetch::Entry(key) => {
                self.cache_effect(key, row.get(6));
            }
            Prefetch::Create(_, digest) => {
                self.cache_blob(digest, row.get(6));
            }
            Prefetch::Clock | Prefetch::Run(_) => {}
        }
        stored
    }

    /// The server's clock at the transaction's start, in milliseconds
    /// since the epoch (read with the transaction's first statements; `0`
    /// after a failure, which [`Self::finish`] or [`Self::commit`] reports).
    pub(crate) fn clock_ms(&self) -> u64 {
        self.clock_ms.unwrap_or(0)
    }

    /// The statement for `sql`, prepared on first use on this connection.
    fn statement(&self, sql: &'static str) -> Result<postgres::Statement, postgres::Error> {
        self.connection.borrow_mut().prepare(Cow::Borrowed(sql))
    }

    /// Ends a view that commits nothing: the first failure any read met.
    /// (Its transaction is rolled back when its connection goes back to
    /// the pool.)
    pub(crate) fn finish(self) -> Option<Failed> {
        self.failed.into_inner()
    }

    /// Sends the queued writes and `COMMIT`, in one round trip, unless a
    /// read or a write failed before (then nothing is sent and the
    /// transaction is rolled back with its connection).
    /// (`planted_ignore_refused`: the planted `PgRefusedWriteAsCommitted`,
    /// false unless the store plants it.)
    /// What the process holds of the run the command read first, once
    /// committed, comes with `Committed` (see [`Known`]).
    pub(crate) fn commit(self, planted_ignore_refused: bool) -> (Ended, Option<Known>) {
        if let Some(failed) = self.failed.into_inner() {
            return (Ended::Failed(failed), None);
        }
        let mut requests = merge_writes(self.queued.into_inner());
        requests.push(Request::Simple("COMMIT"));
        let (done, _) = self.connection.into_inner().pipeline(requests, &[]);
        let mut done = done.into_iter();
        let commit = done.next_back().expect("COMMIT's answer");
        for write in done {
            if let Err((op, e)) = write {
                if planted_ignore_refused && e.code().is_some() {
                    // The planted `PgRefusedWriteAsCommitted`.
                    continue;
                }
                let ended = match e.code() {
                    // The server refused it: the transaction failed there,
                    // and its COMMIT rolled it back.
                    Some(_) => Ended::Failed(Failed::Query(op, e)),
                    // The connection broke with COMMIT among what was sent.
                    None => Ended::InDoubt(op, e),
                };
                return (ended, None);
            }
        }
        match commit {
            // (What the process holds is made once the commit is answered,
            // not on the way to it.)
            Ok(()) => (
                Ended::Committed,
                self.stored_run.map(|(run, stored)| {
                    Known::of(
                        run,
                        stored,
                        self.cache.into_inner(),
                        &self.touched.into_inner(),
                    )
                }),
            ),
            Err((op, e)) if e.is_closed() || e.code().is_none() => (Ended::InDoubt(op, e), None),
            Err((op, e)) => (Ended::Failed(Failed::Query(op, e)), None),
        }
    }

    /// Whether a failure is recorded (later reads answer nothing, so what
    /// is decided or applied after it is meaningless and is thrown away).
    pub(crate) fn has_failed(&self) -> bool {
        self.failed.borrow().is_some() || self.missed.get()
    }

    /// Whether an optimistic view was asked for a row its read did not
    /// hold: what was decided on it means nothing, and the command runs
    /// again in a transaction.
    pub(crate) fn missed(&self) -> bool {
        self.missed.get()
    }

    /// Notes that this view read or wrote a side of the ledger.
    fn touch(&self, run: &RunId, step: &StepId, kind: EffectKind) {
        self.touched
            .borrow_mut()
            .insert((run.clone(), step.clone(), kind));
    }

    /// Whether this view decided on what the process held, with no read
    /// (see [`Self::from_known`]): only a write that lands proves it was
    /// still so.
    pub(crate) fn decided_from_memory(&self) -> bool {
        self.decided_at.is_some()
    }

    /// Ends an optimistic command (see [`Self::optimistic`]): its writes
    /// sent as one statement, in autocommit, that first locks the run's
    /// record and fails unless its bytes are still the ones read (a
    /// division by zero when none is left), and whose journal line is the
    /// next after the length read (another command's line there is a
    /// unique violation): either way the statement lands whole or not at
    /// all. Every command that changes a row of the run's it may write
    /// journals on the run (`describe`), and one that deletes the run
    /// deletes its record, so a write that lands decided on the run as it
    /// still was: as if the command had run in a transaction begun at its
    /// read. A command with no writes is answered from its read.
    /// (`planted_ignore_refused`: the planted `PgRefusedWriteAsCommitted`.)
    /// A view of what the process held (see [`Self::from_known`]) checks
    /// too that the server's clock is at most [`CLOCK_SLACK_MS`] before the
    /// reading it decided at and not after it, and that every row it took
    /// for absent is. What the process holds of the run once the write
    /// landed comes with `Committed`.
    pub(crate) fn commit_optimistic(
        self,
        planted_ignore_refused: bool,
    ) -> (Optimistic, Option<Known>) {
        if let Some(failed) = self.failed.into_inner() {
            return (Optimistic::Failed(failed), None);
        }
        let Some((run, stored)) = self.stored_run.filter(|_| self.optimistic) else {
            return (Optimistic::Stale, None);
        };
        if self.missed.get() {
            return (Optimistic::Stale, None);
        }
        // What the process holds once the write landed (made after it).
        let (cache, touched) = (self.cache.into_inner(), self.touched.into_inner());
        let known = |run: RunId, stored: Vec<u8>| Some(Known::of(run, stored, cache, &touched));
        let writes = self.queued.into_inner();
        if writes.is_empty() {
            // Answered from the read; but what the process held is checked
            // only by a write: the transaction answers.
            if self.decided_at.is_some() {
                return (Optimistic::Stale, None);
            }
            return (Optimistic::Committed, known(run, stored));
        }
        // The statement's pieces (the guard's, then each write's SQL, each
        // with its count of parameters) and its parameters in that order:
        // the pieces name the statement, composed and prepared once per
        // connection (`optimistic_sql`).
        let mut params: Vec<Param> = Vec::with_capacity(16);
        params.push(Param::from(run.as_str()));
        params.push(Param::Bytes(stored.clone()));
        let mut pieces: Vec<(&'static str, usize)> = Vec::with_capacity(8);
        pieces.push((GUARD_RUN, 2));
        if let Some(at) = self.decided_at {
            params.push(Param::Big(big(at)));
            pieces.push((GUARD_CLOCK, 1));
        }
        for assumed in self.assumed.into_inner() {
            match assumed {
                Assumed::NoEntry(run, step, kind) => {
                    params.extend(owned![
                        run.as_str(),
                        step.as_str(),
                        i16::from(effect_kind_code(kind))
                    ]);
                    pieces.push((GUARD_NO_ENTRY, 3));
                }
                Assumed::NoBlob(digest) => {
                    params.extend(owned![digest.0.as_slice()]);
                    pieces.push((GUARD_NO_BLOB, 1));
                }
            }
        }
        for write in writes {
            let Request::Execute {
                sql: Cow::Borrowed(part),
                params: own,
                ..
            } = write
            else {
                return (Optimistic::Stale, None);
            };
            pieces.push((part, own.len()));
            params.extend(own);
        }
        const OP: &str = "write the command's rows (run unchanged since read)";
        let connection = self.connection.into_inner();
        let answer = match connection.composed(pieces, optimistic_sql) {
            None => return (Optimistic::Stale, None),
            Some(Err(e)) => Err((OP, e)),
            Some(Ok(statement)) => connection.execute_prepared(OP, &statement, &params),
        };
        let ended = match answer {
            Ok(()) => return (Optimistic::Committed, known(run, stored)),
            Err((op, e)) => match e.code() {
                Some(code)
                    if *code == SqlState::DIVISION_BY_ZERO
                        || *code == SqlState::UNIQUE_VIOLATION
                        || *code == SqlState::T_R_SERIALIZATION_FAILURE
                        || *code == SqlState::T_R_DEADLOCK_DETECTED =>
                {
                    Optimistic::Changed
                }
                // The planted `PgRefusedWriteAsCommitted`.
                Some(_) if planted_ignore_refused => Optimistic::Committed,
                // The server refused it: nothing landed.
                Some(_) => Optimistic::Failed(Failed::Query(op, e)),
                // The connection broke with the statement sent: it landed
                // whole or not at all.
                None => Optimistic::InDoubt(op, e),
            },
        };
        (ended, None)
    }

    fn fail(&self, failure: Failed) {
        let mut slot = self.failed.borrow_mut();
        if slot.is_none() {
            *slot = Some(failure);
        }
    }

    /// Runs `reads` after the queued writes, all in one round trip: each
    /// read's rows (none after a failure, which is recorded).
    fn fetch(
        &self,
        reads: &[(&'static str, &'static str, &[&(dyn ToSql + Sync)])],
    ) -> Vec<Vec<postgres::Row>> {
        let nothing = || reads.iter().map(|_| Vec::new()).collect();
        if self.optimistic {
            self.missed.set(true);
        }
        if self.has_failed() {
            return nothing();
        }
        let mut statements = Vec::with_capacity(reads.len());
        for (op, sql, _) in reads {
            match self.statement(sql) {
                Ok(statement) => statements.push(statement),
                Err(e) => {
                    self.fail(Failed::Query(op, e));
                    return nothing();
                }
            }
        }
        let pipeline: Vec<Read<'_>> = statements
            .iter()
            .zip(reads)
            .map(|(statement, (_, _, params))| (statement, *params))
            .collect();
        let queued = merge_writes(std::mem::take(&mut *self.queued.borrow_mut()));
        let (done, rows) = self.connection.borrow_mut().pipeline(queued, &pipeline);
        for write in done {
            if let Err((op, e)) = write {
                self.fail(Failed::Query(op, e));
            }
        }
        rows.into_iter()
            .zip(reads)
            .map(|(read, (op, ..))| match read {
                Ok(rows) => rows,
                Err(e) => {
                    self.fail(Failed::Query(op, e));
                    Vec::new()
                }
            })
            .collect()
    }

    fn query(
        &self,
        op: &'static str,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Vec<postgres::Row> {
        self.fetch(&[(op, sql, params)]).pop().unwrap_or_default()
    }

    /// Queues a write: it is sent with the next read or with `COMMIT`.
    fn execute(&self, op: &'static str, sql: &'static str, params: Vec<Param>) {
        if self.has_failed() {
            return;
        }
        self.queued.borrow_mut().push(Request::Execute {
            op,
            sql: Cow::Borrowed(sql),
            params,
        });
    }

    /// The `bytea` column 0 of the first row `sql` returns.
    fn bytes(
        &self,
        op: &'static str,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Option<Vec<u8>> {
        let rows = self.query(op, sql, params);
        rows.first().map(|row| row.get::<_, Vec<u8>>(0))
    }

    /// A stored row of `table`, decoded, whose own key `same` accepts.
    fn decode<T: DeserializeOwned>(
        &self,
        table: RowTable,
        bytes: &[u8],
        what: impl Fn() -> String,
        same: impl FnOnce(&T) -> bool,
    ) -> Option<T> {
        match decode_row::<T>(table, bytes) {
            Ok(value) if same(&value) => Some(value),
            Ok(_) => {
                self.corrupt(format!(
                    "{} is stored under another key than its own",
                    what()
                ));
                None
            }
            Err(e) => {
                self.corrupt(format!("the stored {} is damaged: {e}", what()));
                None
            }
        }
    }

    fn corrupt(&self, reason: String) {
        self.fail(Failed::Corrupt(Error::Corrupt {
            file: PathBuf::from("postgres"),
            offset: 0,
            reason,
        }));
    }

    /// The row of `table` keyed by one text column.
    fn by_text<T: DeserializeOwned>(
        &self,
        op: &'static str,
        sql: &'static str,
        key: &str,
        table: RowTable,
        what: impl Fn() -> String,
        same: impl FnOnce(&T) -> bool,
    ) -> Option<T> {
        let bytes = self.bytes(op, sql, &[&key])?;
        self.decode(table, &bytes, what, same)
    }

    /// Up to `max` runs after `after` in id order, of `state` if given
    /// (the state index).
    pub(crate) fn runs_after(
        &self,
        state: Option<RunState>,
        after: Option<&RunId>,
        max: usize,
    ) -> Vec<Run> {
        let from = after.map_or("", RunId::as_str);
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let rows = match state {
            None => self.query(
                "list runs",
                "SELECT row FROM actum_runs WHERE id > $1 ORDER BY id LIMIT $2",
                &[&from, &max],
            ),
            Some(state) => self.query(
                "list runs",
                "SELECT row FROM actum_runs WHERE state = $3 AND id > $1 ORDER BY id LIMIT $2",
                &[&from, &max, &state_code(state)],
            ),
        };
        rows.iter()
            .filter_map(|row| {
                let bytes: Vec<u8> = row.get(0);
                self.decode(
                    RowTable::Run,
                    &bytes,
                    || "run".into(),
                    |run: &Run| state.is_none_or(|s| run.state == s),
                )
            })
            .collect()
    }

    /// Up to `max` runs that ended at or before `before_ms`, oldest end
    /// first, leaving out those `skip` names (the ended index).
    pub(crate) fn ended_before(
        &self,
        before_ms: u64,
        max: usize,
        skip: impl Fn(&str) -> bool,
    ) -> Vec<RunId> {
        const PAGE: i64 = 256;
        let mut found = Vec::new();
        let mut after: (i64, String) = (-1, String::new());
        loop {
            let rows = self.query(
                "list ended runs",
                "SELECT ended_ms, id FROM actum_runs WHERE ended_ms IS NOT NULL \
                 AND ended_ms <= $1 AND (ended_ms, id) > ($2, $3) ORDER BY ended_ms, id LIMIT $4",
                &[&big(before_ms), &after.0, &after.1, &PAGE],
            );
            for row in &rows {
                let id: String = row.get(1);
                after = (row.get(0), id.clone());
                if skip(&id) {
                    continue;
                }
                match RunId::new(&id) {
                    Ok(run) => found.push(run),
                    Err(e) => self.corrupt(format!("an ended run's id {id:?}: {e}")),
                }
                if found.len() == max {
                    return found;
                }
            }
            if (rows.len() as i64) < PAGE {
                return found;
            }
        }
    }

    /// Caches the stored row of `key` (`None`: absent); its entry.
    fn cache_effect(&self, key: &EffectKey, stored: Option<Vec<u8>>) -> Option<EffectEntry> {
        let entry = stored.and_then(|bytes| {
            self.decode(
                RowTable::Effect,
                &bytes,
                || format!("ledger entry {key}"),
                |e: &EffectEntry| e.key == *key,
            )
        });
        if !self.has_failed() {
            self.cache
                .borrow_mut()
                .effects
                .insert(key.clone(), entry.clone());
        }
        entry
    }

    /// Caches the stored row of a step's side's latest attempt (`None`:
    /// none); its entry.
    fn cache_latest(
        &self,
        run: &RunId,
        step: &StepId,
        kind: EffectKind,
        stored: Option<Vec<u8>>,
    ) -> Option<EffectEntry> {
        let latest = stored.and_then(|bytes| {
            self.decode(
                RowTable::Effect,
                &bytes,
                || format!("latest ledger entry of step {step} of run {run}"),
                |e: &EffectEntry| {
                    e.key.run() == run && e.key.step() == step && e.key.kind() == kind
                },
            )
        });
        if !self.has_failed() {
            let mut cache = self.cache.borrow_mut();
            let attempt = latest.as_ref().map_or(0, |e| e.key.attempt());
            cache
                .latest
                .insert((run.clone(), step.clone(), kind), attempt);
            if let Some(entry) = &latest {
                cache.effects.insert(entry.key.clone(), Some(entry.clone()));
            }
        }
        latest
    }

    /// Caches whether `digest` is stored; that.
    fn cache_blob(&self, digest: &Digest, exists: bool) -> bool {
        if !self.has_failed() {
            self.cache.borrow_mut().blobs.insert(*digest, exists);
        }
        exists
    }

    /// Every row of a run's ledger, decoded, in key order.
    fn effect_rows(&self, rows: Vec<postgres::Row>) -> Vec<EffectEntry> {
        let mut entries: Vec<EffectEntry> = rows
            .iter()
            .filter_map(|row| {
                let bytes: Vec<u8> = row.get(0);
                self.decode(RowTable::Effect, &bytes, || "ledger entry".into(), |_| true)
            })
            .collect();
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        entries
    }

    /// The instant `run` became claimable, as the claim index keeps it.
    fn claim_from(run: &Run, waits: Option<&WaitBook>) -> Option<i64> {
        claimable_from_ms(run, wake_ms(waits)).map(big)
    }

    /// Sets the claim index of run `id` from its record and its waits.
    fn reindex(&self, id: &RunId) {
        let (Some(run), waits) = (self.run(id), self.waits(id)) else {
            return;
        };
        let from = Self::claim_from(&run, waits.as_ref());
        self.execute(
            "index a claimable run",
            "UPDATE actum_runs SET claim_from = $2 WHERE id = $1",
            owned![id.as_str(), from],
        );
    }
    /// The statement that reads a run (locked, in a command's view) with
    /// its wait book, budget, saga and journal length: the commands that
    /// read a run read these next.
    fn run_sql(&self) -> &'static str {
        macro_rules! run_with_books {
            () => {
                "SELECT r.row, w.row, b.row, s.row, \
                 (SELECT coalesce(max(a.seq), 0) FROM actum_audit a WHERE a.run = r.id) \
                 FROM actum_runs r \
                 LEFT JOIN actum_waits w ON w.run = r.id \
                 LEFT JOIN actum_budgets b ON b.run = r.id \
                 LEFT JOIN actum_sagas s ON s.run = r.id \
                 WHERE r.id = $1"
            };
        }
        if self.locking {
            concat!(run_with_books!(), " FOR UPDATE OF r")
        } else {
            run_with_books!()
        }
    }

    /// Caches what `row` holds of run `id` from its column `at` on (its
    /// record, wait book, budget, saga and journal length: what
    /// [`Self::run_sql`] reads from column 0, a prefetch from column 1);
    /// no row: the run is absent. The run.
    fn cache_run(&self, id: &RunId, row: Option<&postgres::Row>, at: usize) -> Option<Run> {
        let Some(row) = row else {
            if !self.has_failed() {
                self.cache.borrow_mut().runs.insert(id.clone(), None);
            }
            return None;
        };
        let column = |n: usize| row.get::<_, Option<Vec<u8>>>(at + n);
        let run = column(0).and_then(|bytes| {
            self.decode(
                RowTable::Run,
                &bytes,
                || format!("run {id}"),
                |run: &Run| run.id == *id,
            )
        });
        let waits = column(1).and_then(|bytes| {
            self.decode(
                RowTable::Waits,
                &bytes,
                || format!("wait book of run {id}"),
                |b: &WaitBook| b.run == *id,
            )
        });
        let budget = column(2).and_then(|bytes| {
            self.decode(
                RowTable::Budgets,
                &bytes,
                || format!("budget of run {id}"),
                |b: &BudgetBook| b.run == *id,
            )
        });
        let saga = column(3).and_then(|bytes| {
            self.decode(
                RowTable::Sagas,
                &bytes,
                || format!("saga of run {id}"),
                |b: &SagaBook| b.run == *id,
            )
        });
        let audit_len = u64::try_from(row.get::<_, i64>(at + 4)).unwrap_or(0);
        if !self.has_failed() {
            let mut cache = self.cache.borrow_mut();
            cache.runs.insert(id.clone(), run.clone());
            cache.audit_lens.insert(id.clone(), audit_len);
            cache.waits.insert(id.clone(), waits);
            cache.budgets.insert(id.clone(), budget);
            cache.sagas.insert(id.clone(), saga);
        }
        run
    }
}

/// `requests` with each run of writes to different tables made one
/// statement (`WITH w0 AS (first), w1 AS (second) last`): the server runs
/// a statement's parts on one snapshot and in no set order, so only writes
/// that cannot touch one row (different tables; none of them reads a
/// table) are joined, and the statement goes to the server once instead of
/// once per write. Writes to one table stay apart, in their order.
fn merge_writes(requests: Vec<Request>) -> Vec<Request> {
    let mut merged = Vec::with_capacity(requests.len());
    let mut run: Vec<(&'static str, Cow<'static, str>, Vec<Param>)> = Vec::new();
    let mut tables: Vec<&str> = Vec::new();
    fn close(
        run: &mut Vec<(&'static str, Cow<'static, str>, Vec<Param>)>,
        merged: &mut Vec<Request>,
    ) {
        match run.len() {
            0 => {}
            1 => {
                let (op, sql, params) = run.pop().expect("one write");
                merged.push(Request::Execute { op, sql, params });
            }
            _ => {
                let mut sql = String::from("WITH ");
                let mut params = Vec::new();
                let last = run.len() - 1;
                for (at, (_, part, own)) in run.drain(..).enumerate() {
                    let shifted = shift_parameters(&part, params.len());
                    if at < last {
                        if at > 0 {
                            sql.push_str(", ");
                        }
                        sql.push_str(&format!("w{at} AS ({shifted})"));
                    } else {
                        sql.push(' ');
                        sql.push_str(&shifted);
                    }
                    params.extend(own);
                }
                merged.push(Request::Execute {
                    op: "write the command's rows",
                    sql: Cow::Owned(sql),
                    params,
                });
            }
        }
    }
    for request in requests {
        match request {
            Request::Execute { op, sql, params } => {
                let Some(table) = written_table(&sql) else {
                    // Not a plain write of a known table: on its own.
                    close(&mut run, &mut merged);
                    tables.clear();
                    merged.push(Request::Execute { op, sql, params });
                    continue;
                };
                if tables.contains(&table) {
                    close(&mut run, &mut merged);
                    tables.clear();
                }
                tables.push(table);
                run.push((op, sql, params));
            }
            simple => {
                close(&mut run, &mut merged);
                tables.clear();
                merged.push(simple);
            }
        }
    }
    close(&mut run, &mut merged);
    merged
}

/// The table a write statement writes (`INSERT INTO t`, `UPDATE t`,
/// `DELETE FROM t`).
/// The pieces of an optimistic write's guard (see
/// [`PgBooks::commit_optimistic`]): markers `optimistic_sql` gives their SQL,
/// never the SQL of a write.
const GUARD_RUN: &str = "guard: the run's record as read";
const GUARD_CLOCK: &str = "guard: the server's clock as estimated";
const GUARD_NO_ENTRY: &str = "guard: no entry of the step's side";
const GUARD_NO_BLOB: &str = "guard: no blob of the digest";

/// The SQL of an optimistic write made of `pieces` (each with its count of
/// parameters): a guard that locks the run's record and holds when every
/// guard piece does, then each write as a CTE with its parameters numbered
/// after those before it, then a division by the count of rows the guard
/// found, which fails the statement when it found none. `None` when the
/// writes cannot go as one statement: a table outside
/// [`OPTIMISTIC_TABLES`], one table written twice (two writes of one table
/// in one statement run in no set order), or no journal line (only a
/// journal line proves no other command came between).
fn optimistic_sql(pieces: &[(&'static str, usize)]) -> Option<String> {
    let mut guard = String::new();
    let mut writes = String::new();
    let mut tables: Vec<&str> = Vec::new();
    let mut before = 0;
    for &(piece, count) in pieces {
        let n = before + 1;
        match piece {
            GUARD_RUN => guard.push_str(&format!(
                "SELECT 1 FROM actum_runs WHERE id = ${n} AND row = ${}",
                n + 1
            )),
            GUARD_CLOCK => guard.push_str(&format!(
                " AND floor(extract(epoch FROM now()) * 1000)::bigint \
                 BETWEEN ${n}::bigint - {CLOCK_SLACK_MS} AND ${n}::bigint"
            )),
            GUARD_NO_ENTRY => guard.push_str(&format!(
                " AND NOT EXISTS (SELECT 1 FROM actum_effects WHERE run = ${n} \
                 AND step = ${} AND kind = ${})",
                n + 1,
                n + 2
            )),
            GUARD_NO_BLOB => guard.push_str(&format!(
                " AND NOT EXISTS (SELECT 1 FROM actum_blobs WHERE digest = ${n})"
            )),
            write => {
                let table = written_table(write).filter(|t| OPTIMISTIC_TABLES.contains(t))?;
                if tables.contains(&table) {
                    return None;
                }
                writes.push_str(&format!(
                    ", w{} AS ({})",
                    tables.len(),
                    shift_parameters(write, before)
                ));
                tables.push(table);
            }
        }
        before += count;
    }
    if !tables.contains(&"actum_audit") {
        return None;
    }
    Some(format!(
        "WITH g AS ({guard} FOR UPDATE){writes} SELECT 1 / count(*) FROM g"
    ))
}

fn written_table(sql: &str) -> Option<&'static str> {
    let rest = sql
        .strip_prefix("INSERT INTO ")
        .or_else(|| sql.strip_prefix("UPDATE "))
        .or_else(|| sql.strip_prefix("DELETE FROM "))?;
    let table = rest.split([' ', '(']).next()?;
    TABLES.iter().copied().find(|known| *known == table)
}

/// The books' tables (docs/FORMAT.md, "PostgreSQL tables").
const TABLES: [&str; 13] = [
    "actum_runs",
    "actum_effects",
    "actum_blobs",
    "actum_checkpoints",
    "actum_decisions",
    "actum_audit",
    "actum_waits",
    "actum_budgets",
    "actum_sagas",
    "actum_resources",
    "actum_shared",
    "actum_blob_holders",
    "actum_blob_refs",
];

/// `sql` with every parameter `$n` numbered `$(n + by)`.
fn shift_parameters(sql: &str, by: usize) -> String {
    let mut shifted = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        shifted.push(c);
        if c != '$' {
            continue;
        }
        let mut number = 0usize;
        let mut digits = false;
        while let Some(digit) = chars.peek().and_then(|d| d.to_digit(10)) {
            number = number * 10 + digit as usize;
            digits = true;
            chars.next();
        }
        if digits {
            shifted.push_str(&(number + by).to_string());
        }
    }
    shifted
}

fn effect_params(key: &EffectKey) -> (&str, &str, i16, i64) {
    (
        key.run().as_str(),
        key.step().as_str(),
        i16::from(effect_kind_code(key.kind())),
        i64::from(key.attempt()),
    )
}

impl BooksRead for PgBooks<'_> {
    fn run(&self, id: &RunId) -> Option<Run> {
        if let Some(cached) = self.cache.borrow().runs.get(id) {
            return cached.clone();
        }
        let rows = self.query("read run", self.run_sql(), &[&id.as_str()]);
        self.cache_run(id, rows.first(), 0)
    }

    fn visit_claimable(&self, now_ms: u64, visit: &mut dyn FnMut(&Run) -> bool) {
        // Keyset pages in claim order; a run another worker's transaction
        // holds is skipped, not waited for, so workers do not queue on one
        // row.
        let mut after: Option<(i64, String)> = None;
        loop {
            let rows = match (&after, self.locking) {
                (None, true) => self.query(
                    "list claimable runs",
                    "SELECT row, claim_from, id FROM actum_runs \
                     WHERE claim_from <= $1 ORDER BY claim_from, id LIMIT $2 \
                     FOR UPDATE SKIP LOCKED",
                    &[&big(now_ms), &CLAIM_PAGE],
                ),
                (Some((from, id)), true) => self.query(
                    "list claimable runs",
                    "SELECT row, claim_from, id FROM actum_runs \
                     WHERE claim_from <= $1 AND (claim_from, id) > ($3, $4) \
                     ORDER BY claim_from, id LIMIT $2 FOR UPDATE SKIP LOCKED",
                    &[&big(now_ms), &CLAIM_PAGE, from, &id.as_str()],
                ),
                (None, false) => self.query(
                    "list claimable runs",
                    "SELECT row, claim_from, id FROM actum_runs \
                     WHERE claim_from <= $1 ORDER BY claim_from, id LIMIT $2",
                    &[&big(now_ms), &CLAIM_PAGE],
                ),
                (Some((from, id)), false) => self.query(
                    "list claimable runs",
                    "SELECT row, claim_from, id FROM actum_runs \
                     WHERE claim_from <= $1 AND (claim_from, id) > ($3, $4) \
                     ORDER BY claim_from, id LIMIT $2",
                    &[&big(now_ms), &CLAIM_PAGE, from, &id.as_str()],
                ),
            };
            let full = rows.len() as i64 == CLAIM_PAGE;
            for row in &rows {
                let bytes: Vec<u8> = row.get(0);
                let id: String = row.get(2);
                after = Some((row.get(1), id.clone()));
                let Some(run) = self.decode(
                    RowTable::Run,
                    &bytes,
                    || format!("run {id}"),
                    |run: &Run| run.id.as_str() == id,
                ) else {
                    return;
                };
                if !visit(&run) {
                    return;
                }
            }
            if !full {
                return;
            }
        }
    }

    fn effect(&self, key: &EffectKey) -> Option<EffectEntry> {
        self.touch(key.run(), key.step(), key.kind());
        {
            let cache = self.cache.borrow();
            if let Some(cached) = cache.effects.get(key) {
                return cached.clone();
            }
            let side = (key.run().clone(), key.step().clone(), key.kind());
            if cache
                .latest
                .get(&side)
                .is_some_and(|latest| key.attempt() > *latest)
            {
                return None;
            }
        }
        let (run, step, kind, attempt) = effect_params(key);
        let rows = self.query("read ledger entry", EFFECT, &[&run, &step, &kind, &attempt]);
        self.cache_effect(key, rows.first().map(|row| row.get(0)))
    }

    fn latest_effect(&self, run: &RunId, step: &StepId, kind: EffectKind) -> Option<EffectEntry> {
        self.touch(run, step, kind);
        {
            // Known when this transaction read or wrote the side before.
            let cache = self.cache.borrow();
            let side = (run.clone(), step.clone(), kind);
            match cache.latest.get(&side) {
                Some(0) => return None,
                Some(attempt) => {
                    let key = EffectKey::of_kind(run.clone(), step.clone(), kind, *attempt);
                    if let Some(Some(entry)) = key.ok().and_then(|key| cache.effects.get(&key)) {
                        return Some(entry.clone());
                    }
                }
                None => {}
            }
        }
        if self.decided_at.is_some() && self.stored_run.as_ref().is_some_and(|(own, _)| own == run)
        {
            // Taken for absent; the write checks it.
            self.assumed
                .borrow_mut()
                .push(Assumed::NoEntry(run.clone(), step.clone(), kind));
            self.cache
                .borrow_mut()
                .latest
                .insert((run.clone(), step.clone(), kind), 0);
            return None;
        }
        let code = i16::from(effect_kind_code(kind));
        let rows = self.query(
            "read latest ledger entry",
            LATEST_EFFECT,
            &[&run.as_str(), &step.as_str(), &code],
        );
        self.cache_latest(run, step, kind, rows.first().map(|row| row.get(0)))
    }

    fn checkpoint_latest(&self, run: &RunId) -> Option<CheckpointMeta> {
        let bytes = self.bytes(
            "read latest checkpoint",
            "SELECT row FROM actum_checkpoints WHERE run = $1 ORDER BY version DESC LIMIT 1",
            &[&run.as_str()],
        )?;
        self.decode(
            RowTable::Checkpoint,
            &bytes,
            || format!("latest checkpoint of run {run}"),
            |m: &CheckpointMeta| m.run == *run,
        )
    }

    fn checkpoint_at(&self, run: &RunId, version: u64) -> Option<CheckpointMeta> {
        let bytes = self.bytes(
            "read checkpoint",
            "SELECT row FROM actum_checkpoints WHERE run = $1 AND version = $2",
            &[&run.as_str(), &big(version)],
        )?;
        self.decode(
            RowTable::Checkpoint,
            &bytes,
            || format!("checkpoint {version} of run {run}"),
            |m: &CheckpointMeta| m.run == *run && m.version == version,
        )
    }

    fn blob_exists(&self, digest: &Digest) -> bool {
        if let Some(exists) = self.cache.borrow().blobs.get(digest) {
            return *exists;
        }
        if self.decided_at.is_some() {
            // Taken for absent; the write checks it.
            self.assumed.borrow_mut().push(Assumed::NoBlob(*digest));
            self.cache.borrow_mut().blobs.insert(*digest, false);
            return false;
        }
        let rows = self.query("look up blob", BLOB_EXISTS, &[&digest.0.as_slice()]);
        self.cache_blob(digest, !rows.is_empty())
    }

    fn blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        let bytes = self.bytes(
            "read blob",
            "SELECT bytes FROM actum_blobs WHERE digest = $1",
            &[&digest.0.as_slice()],
        )?;
        // Content addressed: bytes that do not hash to their key are
        // damaged, whichever way they came to be.
        if crate::books::digest_of(&bytes) != *digest {
            self.corrupt(format!(
                "blob {} does not hash to its digest",
                digest.short()
            ));
            return None;
        }
        Some(bytes)
    }

    fn decision_at(&self, run: &RunId, position: u64) -> Option<DecisionRecord> {
        let bytes = self.bytes(
            "read decision",
            "SELECT row FROM actum_decisions WHERE run = $1 AND position = $2",
            &[&run.as_str(), &big(position)],
        )?;
        self.decode(
            RowTable::Decision,
            &bytes,
            || format!("decision {position} of run {run}"),
            |r: &DecisionRecord| r.run == *run && r.position == position,
        )
    }

    fn decision_count(&self, run: &RunId) -> u64 {
        let rows = self.query(
            "count decisions",
            "SELECT count(*) FROM actum_decisions WHERE run = $1",
            &[&run.as_str()],
        );
        rows.first()
            .map_or(0, |row| u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    fn audit_len(&self, run: &RunId) -> u64 {
        if let Some(len) = self.cache.borrow().audit_lens.get(run) {
            return *len;
        }
        // A run's journal is numbered 1, 2, ... with no gap (`push_audit`
        // asserts it), so its length is its last number: one step down the
        // primary key's index, where a count would read every entry.
        let rows = self.query(
            "count audit entries",
            "SELECT coalesce(max(seq), 0) FROM actum_audit WHERE run = $1",
            &[&run.as_str()],
        );
        let len = rows
            .first()
            .map_or(0, |row| u64::try_from(row.get::<_, i64>(0)).unwrap_or(0));
        if !self.has_failed() {
            self.cache.borrow_mut().audit_lens.insert(run.clone(), len);
        }
        len
    }

    fn audit(&self, run: &RunId, from_seq: u64) -> Vec<AuditEntry> {
        let rows = self.query(
            "read audit",
            "SELECT row FROM actum_audit WHERE run = $1 AND seq >= $2 ORDER BY seq",
            &[&run.as_str(), &big(from_seq)],
        );
        rows.iter()
            .filter_map(|row| {
                let bytes: Vec<u8> = row.get(0);
                self.decode(
                    RowTable::Audit,
                    &bytes,
                    || format!("audit entry of run {run}"),
                    |_: &AuditEntry| true,
                )
            })
            .collect()
    }

    fn waits(&self, run: &RunId) -> Option<WaitBook> {
        if let Some(cached) = self.cache.borrow().waits.get(run) {
            return cached.clone();
        }
        let book = self.by_text(
            "read wait book",
            "SELECT row FROM actum_waits WHERE run = $1",
            run.as_str(),
            RowTable::Waits,
            || format!("wait book of run {run}"),
            |b: &WaitBook| b.run == *run,
        );
        if !self.has_failed() {
            self.cache
                .borrow_mut()
                .waits
                .insert(run.clone(), book.clone());
        }
        book
    }

    fn budget(&self, run: &RunId) -> Option<BudgetBook> {
        if let Some(cached) = self.cache.borrow().budgets.get(run) {
            return cached.clone();
        }
        let book = self.by_text(
            "read budget",
            "SELECT row FROM actum_budgets WHERE run = $1",
            run.as_str(),
            RowTable::Budgets,
            || format!("budget of run {run}"),
            |b: &BudgetBook| b.run == *run,
        );
        if !self.has_failed() {
            self.cache
                .borrow_mut()
                .budgets
                .insert(run.clone(), book.clone());
        }
        book
    }

    fn saga(&self, run: &RunId) -> Option<SagaBook> {
        if let Some(cached) = self.cache.borrow().sagas.get(run) {
            return cached.clone();
        }
        let book = self.by_text(
            "read saga",
            "SELECT row FROM actum_sagas WHERE run = $1",
            run.as_str(),
            RowTable::Sagas,
            || format!("saga of run {run}"),
            |b: &SagaBook| b.run == *run,
        );
        if !self.has_failed() {
            self.cache
                .borrow_mut()
                .sagas
                .insert(run.clone(), book.clone());
        }
        book
    }

    fn resource(&self, resource: &ResourceId) -> Option<ResourceBook> {
        self.by_text(
            "read resource",
            "SELECT row FROM actum_resources WHERE id = $1",
            resource.as_str(),
            RowTable::Resources,
            || format!("resource {resource}"),
            |b: &ResourceBook| b.resource == *resource,
        )
    }

    fn shared(&self, key: &SharedKeyId) -> Option<SharedEntry> {
        self.by_text(
            "read shared key",
            "SELECT row FROM actum_shared WHERE key = $1",
            key.as_str(),
            RowTable::Shared,
            || format!("shared key {key}"),
            |e: &SharedEntry| e.key == *key,
        )
    }

    fn effects_of(&self, run: &RunId) -> Vec<EffectEntry> {
        let rows = self.query(
            "read a run's ledger",
            "SELECT row FROM actum_effects WHERE run = $1",
            &[&run.as_str()],
        );
        self.effect_rows(rows)
    }

    fn blob_holders(&self, digest: &Digest) -> Option<u64> {
        let rows = self.query(
            "read blob holders",
            "SELECT holders FROM actum_blob_holders WHERE digest = $1",
            &[&digest.0.as_slice()],
        );
        rows.first()
            .map(|row| u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    fn blob_refs(&self, run: &RunId) -> Option<BlobRefs> {
        self.by_text(
            "read blob references",
            "SELECT row FROM actum_blob_refs WHERE run = $1",
            run.as_str(),
            RowTable::BlobRefs,
            || format!("blob references of run {run}"),
            |r: &BlobRefs| r.run == *run,
        )
    }
}

impl BooksWrite for PgBooks<'_> {
    fn put_run(&mut self, run: Run) {
        let waits = self.waits(&run.id);
        let from = Self::claim_from(&run, waits.as_ref());
        let row = encode_row(RowTable::Run, &run);
        let (state, ended) = (state_code(run.state), ended_ms(&run));
        let id = run.id.clone();
        if let Some((stored_id, stored)) = &mut self.stored_run
            && *stored_id == id
        {
            stored.clone_from(&row);
        }
        self.execute(
            "write run",
            "INSERT INTO actum_runs (id, claim_from, row, state, ended_ms) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (id) DO UPDATE SET claim_from = EXCLUDED.claim_from, row = EXCLUDED.row, \
             state = EXCLUDED.state, ended_ms = EXCLUDED.ended_ms",
            owned![run.id.as_str(), from, row, state, ended],
        );
        self.cache.borrow_mut().runs.insert(id, Some(run));
    }

    fn put_effect(&mut self, entry: EffectEntry) {
        self.touch(entry.key.run(), entry.key.step(), entry.key.kind());
        let (run, step, kind, attempt) = effect_params(&entry.key);
        let row = encode_row(RowTable::Effect, &entry);
        // A row this view read is updated, one it knows absent inserted
        // (each one change of the row, where an upsert's conflict also
        // locks it); else either.
        const INSERT: &str = "INSERT INTO actum_effects (run, step, kind, attempt, row) \
                              VALUES ($1, $2, $3, $4, $5)";
        let side = (
            entry.key.run().clone(),
            entry.key.step().clone(),
            entry.key.kind(),
        );
        let sql = {
            let cache = self.cache.borrow();
            match cache.effects.get(&entry.key) {
                Some(Some(_)) => {
                    "UPDATE actum_effects SET row = $5 WHERE run = $1 AND step = $2 \
                     AND kind = $3 AND attempt = $4"
                }
                Some(None) => INSERT,
                None if cache
                    .latest
                    .get(&side)
                    .is_some_and(|latest| entry.key.attempt() > *latest) =>
                {
                    INSERT
                }
                None => {
                    "INSERT INTO actum_effects (run, step, kind, attempt, row) \
                     VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (run, step, kind, attempt) DO UPDATE SET row = EXCLUDED.row"
                }
            }
        };
        if sql == INSERT && entry.key.attempt() == 1 {
            // The primary key refuses this insert if the side has any entry
            // (attempts are numbered from 1 and leave only with their run):
            // the write need not check that side's absence again.
            self.assumed
                .borrow_mut()
                .retain(|assumed| !matches!(assumed, Assumed::NoEntry(r, st, k) if (r, st, *k) == (&side.0, &side.1, side.2)));
        }
        self.execute(
            "write ledger entry",
            sql,
            owned![run, step, kind, attempt; row],
        );
        let mut cache = self.cache.borrow_mut();
        if let Some(latest) = cache.latest.get_mut(&side) {
            *latest = (*latest).max(entry.key.attempt());
        }
        cache.effects.insert(entry.key.clone(), Some(entry));
    }

    fn put_blob(&mut self, digest: Digest, bytes: Vec<u8>) {
        // Content addressed: a stored digest already holds these bytes.
        self.execute(
            "write blob",
            "INSERT INTO actum_blobs (digest, bytes) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            owned![digest.0.as_slice(); bytes],
        );
        self.cache.borrow_mut().blobs.insert(digest, true);
    }

    fn put_checkpoint(&mut self, meta: CheckpointMeta) {
        let row = encode_row(RowTable::Checkpoint, &meta);
        self.execute(
            "write checkpoint",
            "INSERT INTO actum_checkpoints (run, version, row) VALUES ($1, $2, $3) \
             ON CONFLICT (run, version) DO UPDATE SET row = EXCLUDED.row",
            owned![meta.run.as_str(), big(meta.version); row],
        );
    }

    fn put_decision(&mut self, record: DecisionRecord) {
        let row = encode_row(RowTable::Decision, &record);
        self.execute(
            "write decision",
            "INSERT INTO actum_decisions (run, position, row) VALUES ($1, $2, $3) \
             ON CONFLICT (run, position) DO UPDATE SET row = EXCLUDED.row",
            owned![record.run.as_str(), big(record.position); row],
        );
    }

    fn push_audit(&mut self, run: &RunId, entry: AuditEntry) {
        let len = self.audit_len(run);
        // After a failed read the count means nothing (the transaction is
        // thrown away); otherwise a gap is a bug of the rules.
        assert!(
            self.has_failed() || entry.seq == len + 1,
            "audit of run {run} out of sequence"
        );
        let row = encode_row(RowTable::Audit, &entry);
        self.execute(
            "append audit entry",
            "INSERT INTO actum_audit (run, seq, row) VALUES ($1, $2, $3)",
            owned![run.as_str(), big(entry.seq); row],
        );
        self.cache
            .borrow_mut()
            .audit_lens
            .insert(run.clone(), entry.seq);
    }

    fn put_waits(&mut self, book: WaitBook) {
        let row = encode_row(RowTable::Waits, &book);
        self.execute(
            "write wait book",
            "INSERT INTO actum_waits (run, row) VALUES ($1, $2) \
             ON CONFLICT (run) DO UPDATE SET row = EXCLUDED.row",
            owned![book.run.as_str(); row],
        );
        self.cache
            .borrow_mut()
            .waits
            .insert(book.run.clone(), Some(book.clone()));
        // A wait's deadline decides when its run is claimable again.
        self.reindex(&book.run);
    }

    fn put_budget(&mut self, book: BudgetBook) {
        let row = encode_row(RowTable::Budgets, &book);
        self.execute(
            "write budget",
            "INSERT INTO actum_budgets (run, row) VALUES ($1, $2) \
             ON CONFLICT (run) DO UPDATE SET row = EXCLUDED.row",
            owned![book.run.as_str(); row],
        );
        self.cache
            .borrow_mut()
            .budgets
            .insert(book.run.clone(), Some(book.clone()));
    }

    fn put_saga(&mut self, book: SagaBook) {
        let row = encode_row(RowTable::Sagas, &book);
        self.execute(
            "write saga",
            "INSERT INTO actum_sagas (run, row) VALUES ($1, $2) \
             ON CONFLICT (run) DO UPDATE SET row = EXCLUDED.row",
            owned![book.run.as_str(); row],
        );
        self.cache
            .borrow_mut()
            .sagas
            .insert(book.run.clone(), Some(book.clone()));
    }

    fn put_resource(&mut self, book: ResourceBook) {
        let row = encode_row(RowTable::Resources, &book);
        self.execute(
            "write resource",
            "INSERT INTO actum_resources (id, row) VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE SET row = EXCLUDED.row",
            owned![book.resource.as_str(); row],
        );
    }

    fn put_shared(&mut self, entry: SharedEntry) {
        let row = encode_row(RowTable::Shared, &entry);
        self.execute(
            "write shared key",
            "INSERT INTO actum_shared (key, row) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET row = EXCLUDED.row",
            owned![entry.key.as_str(); row],
        );
    }

    fn delete_run(&mut self, run: &RunId) {
        if self.stored_run.as_ref().is_some_and(|(id, _)| id == run) {
            self.stored_run = None;
        }
        {
            let mut cache = self.cache.borrow_mut();
            cache.runs.insert(run.clone(), None);
            cache.audit_lens.insert(run.clone(), 0);
            cache.waits.insert(run.clone(), None);
            cache.budgets.insert(run.clone(), None);
            cache.sagas.insert(run.clone(), None);
            cache.effects.retain(|key, _| key.run() != run);
            cache.latest.retain(|(r, _, _), _| r != run);
        }
        for (op, sql) in [
            ("delete run", "DELETE FROM actum_runs WHERE id = $1"),
            ("delete ledger", "DELETE FROM actum_effects WHERE run = $1"),
            (
                "delete checkpoints",
                "DELETE FROM actum_checkpoints WHERE run = $1",
            ),
            (
                "delete decisions",
                "DELETE FROM actum_decisions WHERE run = $1",
            ),
            ("delete audit", "DELETE FROM actum_audit WHERE run = $1"),
            ("delete wait book", "DELETE FROM actum_waits WHERE run = $1"),
            ("delete budget", "DELETE FROM actum_budgets WHERE run = $1"),
            ("delete saga", "DELETE FROM actum_sagas WHERE run = $1"),
            (
                "delete blob references",
                "DELETE FROM actum_blob_refs WHERE run = $1",
            ),
        ] {
            self.execute(op, sql, owned![run.as_str()]);
        }
    }

    fn delete_blob(&mut self, digest: &Digest) {
        self.execute(
            "delete blob",
            "DELETE FROM actum_blobs WHERE digest = $1",
            owned![digest.0.as_slice()],
        );
        self.cache.borrow_mut().blobs.insert(*digest, false);
    }

    fn put_blob_holders(&mut self, digest: Digest, holders: Option<u64>) {
        match holders {
            Some(n) => self.execute(
                "write blob holders",
                "INSERT INTO actum_blob_holders (digest, holders) VALUES ($1, $2) \
                 ON CONFLICT (digest) DO UPDATE SET holders = EXCLUDED.holders",
                owned![digest.0.as_slice(), big(n)],
            ),
            None => self.execute(
                "delete blob holders",
                "DELETE FROM actum_blob_holders WHERE digest = $1",
                owned![digest.0.as_slice()],
            ),
        }
    }

    fn put_blob_refs(&mut self, refs: BlobRefs) {
        let row = encode_row(RowTable::BlobRefs, &refs);
        self.execute(
            "write blob references",
            "INSERT INTO actum_blob_refs (run, row) VALUES ($1, $2) \
             ON CONFLICT (run) DO UPDATE SET row = EXCLUDED.row",
            owned![refs.run.as_str(); row],
        );
    }
}

/// A digest from a `bytea` key column; `None` if it has the wrong length.
pub(crate) fn digest_of_key(bytes: &[u8]) -> Option<Digest> {
    <[u8; DIGEST_LEN_BYTES]>::try_from(bytes).ok().map(Digest)
}

#[cfg(test)]
mod merge_tests {
    use super::*;

    fn write(sql: &'static str, params: usize) -> Request {
        Request::Execute {
            op: sql,
            sql: Cow::Borrowed(sql),
            params: (0..params).map(|n| Param::Big(n as i64)).collect(),
        }
    }

    fn shape(requests: &[Request]) -> Vec<(String, usize)> {
        requests
            .iter()
            .map(|r| match r {
                Request::Simple(sql) => ((*sql).to_string(), 0),
                Request::Execute { sql, params, .. } => (sql.to_string(), params.len()),
            })
            .collect()
    }

    /// An optimistic write's SQL, from its pieces: the guard's numbered
    /// from `$1`, each write's renumbered after everything before it.
    #[test]
    fn an_optimistic_write_is_composed_from_its_pieces() {
        const EFFECT: &str = "INSERT INTO actum_effects (run, step, kind, attempt, row) \
                              VALUES ($1, $2, $3, $4, $5)";
        const AUDIT: &str = "INSERT INTO actum_audit (run, seq, row) VALUES ($1, $2, $3)";
        let sql = optimistic_sql(&[
            (GUARD_RUN, 2),
            (GUARD_CLOCK, 1),
            (GUARD_NO_BLOB, 1),
            (GUARD_NO_ENTRY, 3),
            (EFFECT, 5),
            (AUDIT, 3),
        ]);
        assert_eq!(
            sql.as_deref(),
            Some(
                "WITH g AS (SELECT 1 FROM actum_runs WHERE id = $1 AND row = $2 \
                 AND floor(extract(epoch FROM now()) * 1000)::bigint \
                 BETWEEN $3::bigint - 200 AND $3::bigint \
                 AND NOT EXISTS (SELECT 1 FROM actum_blobs WHERE digest = $4) \
                 AND NOT EXISTS (SELECT 1 FROM actum_effects WHERE run = $5 \
                 AND step = $6 AND kind = $7) FOR UPDATE), \
                 w0 AS (INSERT INTO actum_effects (run, step, kind, attempt, row) \
                 VALUES ($8, $9, $10, $11, $12)), \
                 w1 AS (INSERT INTO actum_audit (run, seq, row) VALUES ($13, $14, $15)) \
                 SELECT 1 / count(*) FROM g"
            )
        );
        // No journal line, a table written twice, a table outside the
        // optimistic ones: no statement.
        assert_eq!(optimistic_sql(&[(GUARD_RUN, 2), (EFFECT, 5)]), None);
        assert_eq!(
            optimistic_sql(&[(GUARD_RUN, 2), (AUDIT, 3), (AUDIT, 3)]),
            None
        );
        assert_eq!(
            optimistic_sql(&[
                (GUARD_RUN, 2),
                ("INSERT INTO actum_runs (id, row) VALUES ($1, $2)", 2),
                (AUDIT, 3)
            ]),
            None
        );
    }

    #[test]
    fn parameters_are_renumbered_past_the_ones_before() {
        assert_eq!(
            shift_parameters("VALUES ($1, $2, $10) -- $", 3),
            "VALUES ($4, $5, $13) -- $"
        );
        assert_eq!(shift_parameters("WHERE id = $1", 0), "WHERE id = $1");
    }

    #[test]
    fn writes_to_different_tables_become_one_statement_and_one_table_stays_apart() {
        let merged = merge_writes(vec![
            Request::Simple("START TRANSACTION"),
            write("INSERT INTO actum_effects (run, row) VALUES ($1, $2)", 2),
            write(
                "INSERT INTO actum_audit (run, seq, row) VALUES ($1, $2, $3)",
                3,
            ),
            write("UPDATE actum_runs SET claim_from = $2 WHERE id = $1", 2),
            // The same table again: a statement of its own, after.
            write(
                "INSERT INTO actum_audit (run, seq, row) VALUES ($1, $2, $3)",
                3,
            ),
            Request::Simple("COMMIT"),
        ]);
        assert_eq!(
            shape(&merged),
            vec![
                ("START TRANSACTION".into(), 0),
                (
                    "WITH w0 AS (INSERT INTO actum_effects (run, row) VALUES ($1, $2)), \
                     w1 AS (INSERT INTO actum_audit (run, seq, row) VALUES ($3, $4, $5)) \
                     UPDATE actum_runs SET claim_from = $7 WHERE id = $6"
                        .into(),
                    7
                ),
                (
                    "INSERT INTO actum_audit (run, seq, row) VALUES ($1, $2, $3)".into(),
                    3
                ),
                ("COMMIT".into(), 0),
            ]
        );
    }

    #[test]
    fn a_write_to_an_unknown_table_is_never_joined() {
        let merged = merge_writes(vec![
            write("INSERT INTO actum_effects (run) VALUES ($1)", 1),
            write("INSERT INTO elsewhere (run) VALUES ($1)", 1),
            write("INSERT INTO actum_audit (run) VALUES ($1)", 1),
        ]);
        assert_eq!(merged.len(), 3);
    }
}

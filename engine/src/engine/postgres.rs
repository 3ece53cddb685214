//! The engine over PostgreSQL (the `postgres` feature):
//! [`Engine::open_postgres`] gives the same `Engine` API, and so the same
//! runtime, over books that processes on many hosts share.
//!
//! Every command goes to [`PgStore::execute`]: one transaction on the
//! server, answered once committed; every read is one read-only snapshot.
//! Nothing is kept in memory between calls (no hot books, no log, no
//! checkpoints), so another process's commands are seen at once. Time in
//! every decision is the server's; the engine's [`Clock`] (what the runtime
//! sleeps by) is this host's clock corrected by its offset from the
//! server's, measured at open.
//!
//! What belongs to the embedded engine's directory answers
//! [`Error::NotOnPostgres`]: the log (`read_log`), the operator channel
//! (`serve_operators`; operators reach the books by opening the database
//! themselves). `checkpoint` writes nothing: every command is in the
//! server's tables once answered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::books::{Command, Decided, MemBooks, Run, RunId, RunState};
use crate::clock::Clock;
use crate::db::Recovery;
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::pg::{PgBooks, PgStore, Planted};
use crate::planted::{PlantedBug, planted};

use super::commit::Committed;
use super::core::{Backend, Engine};
use super::operations::Counters;
use super::options::EngineOptions;

/// On PostgreSQL, which has no checkpoints to follow, a process runs
/// retention (`Retention::prune_after_ms`) after every this many of its
/// commits.
pub const RETENTION_EVERY_COMMITS: u64 = 256;

/// Most prune commands one retention pass runs (each of at most
/// `PRUNE_RUNS_MAX` runs).
const PRUNE_BATCHES_PER_PASS: usize = 16;

/// The PostgreSQL backend's parts.
pub(crate) struct PgBackend {
    pub(crate) store: PgStore,
    /// Decide at this clock's readings instead of the server's (tests
    /// driven by a manual clock: `open_postgres_at`).
    pub(crate) decide_at: Option<Arc<dyn Clock>>,
    /// What this process's commands decided since it opened the engine.
    pub(crate) counters: Mutex<Counters>,
    /// Commits this process made, for retention's turn.
    commits: AtomicU64,
    /// Held by the one retention pass at a time.
    retaining: Mutex<()>,
}

impl Engine {
    /// Opens the books in the PostgreSQL database `url` names
    /// (`postgres://user@host:port/dbname`), creating or upgrading their
    /// tables (docs/FORMAT.md, "PostgreSQL tables"). Share the engine
    /// between threads: each command takes a connection of its own from
    /// the engine's pool. Other processes, on this host or others, may open
    /// the same database at once: their commands and this one's take
    /// turns run by run, and leases, deadlines and timers read the
    /// server's clock. docs/POSTGRES.md says what differs from a directory.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// # let Ok(server) = std::env::var("ACTUM_PG_URL") else {
    /// #     assert!(std::env::var("ACTUM_PG_REQUIRED").is_err(), "no ACTUM_PG_URL");
    /// #     return Ok(());
    /// # };
    /// # let url = actum::pg::scratch_database(&server, "doc_open")?;
    /// // url: "postgres://actum@db.internal:5432/books", say
    /// let web = Engine::open_postgres(&url, EngineOptions::default())?;
    /// let worker = Engine::open_postgres(&url, EngineOptions::default())?; // another process
    /// let run = RunId::new("job-1")?;
    /// web.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"1"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// // The other process sees the run at once, and claims it.
    /// let lease = worker.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// assert_eq!(lease.run, run);
    /// assert!(web.claim_next(&WorkerId::new("w2")?, 30_000)?.is_none(), "leased");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_postgres(url: &str, options: EngineOptions) -> Result<Engine> {
        Engine::open_postgres_on(url, None, options)
    }

    /// [`Engine::open_postgres`], deciding every command at `clock`'s
    /// readings instead of the server's: for the scenario tests that drive
    /// time by hand, as they do on a directory. Never in production: hosts
    /// on one database must share the server's clock.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::ManualClock;
    ///
    /// # let Ok(server) = std::env::var("ACTUM_PG_URL") else {
    /// #     assert!(std::env::var("ACTUM_PG_REQUIRED").is_err(), "no ACTUM_PG_URL");
    /// #     return Ok(());
    /// # };
    /// # let url = actum::pg::scratch_database(&server, "doc_open_at")?;
    /// let clock = Arc::new(ManualClock::new(1_000));
    /// let engine = Engine::open_postgres_at(&url, clock.clone(), EngineOptions::default())?;
    /// let run = RunId::new("job-2")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"2"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 500)?.expect("pending");
    /// assert_eq!(lease.expires_ms, 1_500, "decided at the manual clock's reading");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn open_postgres_at(
        url: &str,
        clock: Arc<dyn Clock>,
        options: EngineOptions,
    ) -> Result<Engine> {
        Engine::open_postgres_on(url, Some(clock), options)
    }

    fn open_postgres_on(
        url: &str,
        decide_at: Option<Arc<dyn Clock>>,
        options: EngineOptions,
    ) -> Result<Engine> {
        options.validate()?;
        if options.operator_channel {
            return Err(Error::InvalidConfig {
                reason: "operator_channel serves a directory's engine; on PostgreSQL an \
                         operator's command opens the database as any process does"
                    .into(),
            });
        }
        let mut store = PgStore::connect(url)?;
        store.plant(Planted {
            decide_outside: planted(&options.db.wal, PlantedBug::PgDecideOutsideTransaction),
            answer_before_durable: planted(&options.db.wal, PlantedBug::PgAnswerBeforeDurable),
            refused_write_as_committed: planted(
                &options.db.wal,
                PlantedBug::PgRefusedWriteAsCommitted,
            ),
            stale_write_as_committed: planted(&options.db.wal, PlantedBug::PgStaleWriteAsCommitted),
        });
        // The offset the store measured at connect, kept for the engine's
        // life (the store's own moves on with every read of the clock).
        let clock: Arc<dyn Clock> = match &decide_at {
            Some(clock) => Arc::clone(clock),
            None => Arc::new(store.server_clock()),
        };
        let recovery = Recovery {
            created: store.created(),
            state_lsn_at_open: Lsn::ZERO,
            replayed_records: 0,
            durable_lsn: Lsn::ZERO,
            leases_released: 0,
            repair_dropped: None,
        };
        Ok(Engine {
            clock,
            options,
            recovery,
            backend: Backend::Postgres(Box::new(PgBackend {
                store,
                decide_at,
                counters: Mutex::new(Counters::default()),
                commits: AtomicU64::new(0),
                retaining: Mutex::new(()),
            })),
            snapshot_lsn: None,
            operator_channel: Mutex::new(None),
        })
    }

    /// After a command of this process's committed on PostgreSQL: a
    /// retention pass, if it is its turn and no other is running (its
    /// refusals and failures leave the runs for the next pass).
    pub(crate) fn after_postgres_commit(&self, pg: &PgBackend) {
        let Some(after_ms) = self.options.retention.prune_after_ms else {
            return;
        };
        let commits = pg.commits.fetch_add(1, Ordering::Relaxed) + 1;
        if !commits.is_multiple_of(RETENTION_EVERY_COMMITS) {
            return;
        }
        let Ok(_turn) = pg.retaining.try_lock() else {
            return;
        };
        self.prune_after_checkpoint(after_ms, PRUNE_BATCHES_PER_PASS);
    }

    /// The store under a PostgreSQL engine (`internals`: for the kill
    /// loop's fault injection, not part of the public API); `None` on a
    /// directory.
    ///
    /// ```
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// assert!(engine.pg_store().is_none(), "a directory has no store of PostgreSQL's");
    /// # let Ok(server) = std::env::var("ACTUM_PG_URL") else {
    /// #     assert!(std::env::var("ACTUM_PG_REQUIRED").is_err(), "no ACTUM_PG_URL");
    /// #     return Ok(());
    /// # };
    /// # let url = actum::pg::scratch_database(&server, "doc_pg_store")?;
    /// let engine = Engine::open_postgres(&url, EngineOptions::default())?;
    /// let store = engine.pg_store().expect("the books are in PostgreSQL");
    /// assert_eq!(store.optimistic_counts().tried, 0, "no command run yet");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn pg_store(&self) -> Option<&PgStore> {
        self.postgres().map(|pg| &pg.store)
    }

    /// The PostgreSQL backend, if the books are there.
    pub(crate) fn postgres(&self) -> Option<&PgBackend> {
        match &self.backend {
            Backend::Postgres(pg) => Some(pg),
            Backend::Embedded(_) => None,
        }
    }
}

impl PgBackend {
    /// Runs `cmd` as one transaction; answered once committed. The LSN is
    /// `Lsn::ZERO`: the server's log is not actum's.
    pub(crate) fn commit(&self, cmd: &Command) -> Committed {
        let count = |decided: &Decided, books: &dyn crate::books::BooksRead| {
            let mut counters = Counters::default();
            counters.count(cmd, &decided.answer, &decided.ops, books);
            (counters, !decided.ops.is_empty())
        };
        let at_ms = self.decide_at.as_ref().map(|clock| clock.now_ms());
        let (answer, (counted, committed)) = self.store.execute_observed(cmd, at_ms, &count)?;
        self.counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(counted, committed);
        Ok((answer, Lsn::ZERO))
    }

    /// A page of runs in id order (see `Engine::runs`).
    pub(crate) fn runs_page(
        &self,
        state: Option<RunState>,
        after: Option<&RunId>,
        limit: usize,
    ) -> Result<Vec<Run>> {
        self.store
            .read_books(|books, _| Ok(books.runs_after(state, after, limit)))
    }

    /// Runs `read` over one snapshot of the books, as the concrete view.
    pub(crate) fn read_books<T>(
        &self,
        read: impl FnOnce(&PgBooks<'_>, u64) -> Result<T>,
    ) -> Result<T> {
        self.store.read_books(read)
    }

    /// Every row of the books.
    pub(crate) fn snapshot(&self) -> Result<MemBooks> {
        self.store.read_all()
    }

    /// The counters: what every process stored ([`Self::store_counters`])
    /// and what this one counted since it last stored.
    pub(crate) fn counters(&self) -> Result<Counters> {
        let mut counters = Counters::stored(&self.store.read_metrics()?);
        let own = self
            .counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        counters.add(own, false);
        Ok(counters)
    }

    /// Adds what this process counted since it last stored to the stored
    /// counters (at `checkpoint` and `close`; a process that dies before
    /// loses what it counted since, as a crash on a directory loses what
    /// was counted since its last checkpoint). On failure nothing is
    /// stored, and the counts stay for the next time.
    pub(crate) fn store_counters(&self) -> Result<()> {
        let mut own = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        self.store.add_metrics(&own.totals(0, 0))?;
        // (The samples of wait durations are this process's only.)
        *own = own.samples_only();
        Ok(())
    }
}

/// [`Error::NotOnPostgres`] for `what`.
pub(crate) fn not_on_postgres(what: &'static str, instead: &'static str) -> Error {
    Error::NotOnPostgres { what, instead }
}

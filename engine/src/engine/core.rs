//! The [`Engine`] handle: the durable pipeline (directory lock, manifest,
//! WAL, redb state store) and the hot books in memory, behind a mutex, plus
//! the clock. Opening it recovers: the runs the state store lists as live
//! are loaded into memory whole, then every WAL record after the state's
//! `applied_lsn` is replayed into memory through the same `apply` as the
//! live path; a writable open then releases the leases of the process that
//! had the directory before (`leases_at_open.rs`). A checkpoint writes the
//! durable records since the last one to redb in one transaction, off the
//! engine lock, and lets terminal runs leave memory.
//!
//! **Invariant:** the hot books hold exactly the effects of every logged
//! record (durable or about to be), in LSN order, each once; the state
//! store holds exactly those up to its `applied_lsn`, which never passes the
//! WAL's durable LSN; `unmaterialized` lists, in order, every record in
//! between.

use std::collections::{BTreeSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redb::WriteTransaction;

use crate::books::{
    Command, EffectKey, Op, Overlay, PAYLOAD_VERSIONS_READ, Writes, apply, decode_ops,
    unsupported_payload_version,
};
use crate::clock::{Clock, SystemClock};
use crate::combine::Combiner;
use crate::db::{Pipeline, RecordAt, Recovery};
use crate::error::{Error, Result};
use crate::hot::{ColdReader, Forget, HotState, HotView};
use crate::ids::Lsn;
use crate::planted::{PlantedBug, planted};
use crate::state::RedbBooks;
use crate::storage::{FsStorage, Storage};

use super::commit::Committed;
use super::leases_at_open::held_leases;
use super::options::EngineOptions;

/// Whether an open may change the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// `open`, `open_with`, `open_existing`: the engine writes, and its
    /// open releases the leases of the process that had the directory
    /// before.
    ReadWrite,
    /// `open_read_only*`: nothing in the directory changes, the leases
    /// included.
    ReadOnly,
}

/// A logged record whose effects are in the hot books but not yet in the
/// state store.
#[derive(Debug)]
pub(crate) struct Unmaterialized {
    pub(crate) lsn: Lsn,
    pub(crate) ops: Vec<Op>,
    pub(crate) bytes: u64,
}

/// The mutable heart of the engine, behind [`Engine`]'s mutex.
pub(crate) struct Inner {
    /// The decision state: every logged record's effects.
    pub(crate) hot: HotState,
    /// The records in the hot books and not yet in the state store.
    pub(crate) unmaterialized: VecDeque<Unmaterialized>,
    /// Their encoded size, summed.
    pub(crate) unmaterialized_bytes: u64,
    /// The LSN of the last record applied to the hot books.
    pub(crate) last_applied: Lsn,
    /// Set when a failure left the in-memory state uncertain.
    pub(crate) halted: Option<(&'static str, Option<Arc<Error>>)>,
    /// What the engine decided since it was opened, for `metrics`.
    pub(crate) counters: super::operations::Counters,
}

/// The agent's books, durable: share one `Arc<Engine>` across worker
/// threads. See `docs/API.md` for the guarantee of every call.
///
/// ```
/// use actum::engine::{Engine, EngineOptions};
///
/// let dir = tempfile::tempdir()?;
/// let engine = Engine::open(dir.path(), EngineOptions::default())?;
/// assert!(engine.recovery().created);
/// engine.close()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Engine {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) options: EngineOptions,
    pub(crate) recovery: Recovery,
    /// Where the books live: a directory, or a PostgreSQL database.
    pub(crate) backend: Backend,
    /// The LSN a snapshot is as of (`open_snapshot`); `None` otherwise.
    pub(crate) snapshot_lsn: Option<Lsn>,
    /// The operator channel, while served (`serve_operators`).
    pub(crate) operator_channel: Mutex<Option<crate::operator::channel::Serving>>,
}

/// Where an [`Engine`]'s books live.
pub(crate) enum Backend {
    /// A directory: the log, the manifest and the state store, and the hot
    /// books in memory.
    Embedded(Box<Embedded>),
    /// A PostgreSQL database shared by many processes (`open_postgres`).
    #[cfg(feature = "postgres")]
    Postgres(Box<super::postgres::PgBackend>),
}

/// The embedded backend's parts.
pub(crate) struct Embedded {
    /// Lock, manifest, WAL and state store; shared, so commands wait for
    /// their group commit, and a checkpoint writes redb, without `inner`.
    pub(crate) pipeline: Pipeline,
    pub(crate) inner: Mutex<Inner>,
    /// Held by the one checkpoint writing the state store at a time.
    pub(crate) checkpointing: Mutex<()>,
    /// Hands batches of concurrent commands to one caller to decide.
    pub(crate) combiner: Combiner<Command, Committed>,
    /// Set when the last batch left enough unmaterialized records that a
    /// checkpoint is due; read without the engine lock.
    pub(crate) checkpoint_wanted: AtomicBool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut f = f.debug_struct("Engine");
        match &self.backend {
            Backend::Embedded(local) => f.field("state", &local.pipeline.state().path()),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => f.field("server", &pg.store.server()),
        };
        f.field("recovery", &self.recovery).finish_non_exhaustive()
    }
}

const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Engine>();
};

impl Engine {
    /// Opens (creating if needed) the database in `dir` on the real file
    /// system and the system clock, and recovers it.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// assert!(engine.recovery().created);
    /// let run = RunId::new("job-2")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"2"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// // One engine per directory.
    /// let second = Engine::open(dir.path(), EngineOptions::default());
    /// assert!(matches!(second, Err(Error::Locked { .. })));
    /// drop(engine); // a crash: no close
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// assert!(!engine.recovery().created);
    /// assert!(engine.run(&run)?.is_some(), "acknowledged, so recovered");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(dir: impl AsRef<Path>, options: EngineOptions) -> Result<Engine> {
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        Engine::open_with(storage, Arc::new(SystemClock), dir, options)
    }

    /// Opens the database in `dir` on `storage` with `clock` (the simulator
    /// passes its disk and virtual clock). Once the log is replayed, the
    /// leases the earlier process held are released in one commit: the
    /// directory lock proves that process gone, so its runs are claimed
    /// again at once, under larger tokens ([`Recovery::leases_released`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::{FsStorage, ManualClock};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    /// let engine = Engine::open_with(Arc::new(FsStorage::new()), clock.clone(), dir.path(),
    ///     EngineOptions::default())?;
    /// let run = RunId::new("job-3")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"3"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// clock.advance_ms(5_000);
    /// let lease = engine.acquire_lease(&run, &WorkerId::new("w1")?, 30_000)?;
    /// // Every time the engine records is the clock's, never the wall's.
    /// assert_eq!(engine.run(&run)?.expect("created").created_ms, 1_700_000_000_000);
    /// assert_eq!(lease.expires_ms, 1_700_000_035_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_with(
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        dir: impl AsRef<Path>,
        options: EngineOptions,
    ) -> Result<Engine> {
        Engine::open_for(storage, clock, dir.as_ref(), options, Access::ReadWrite)
    }

    /// [`Engine::open_with`], for `access`: an open that may write then
    /// releases the leases the earlier process held (see
    /// `leases_at_open.rs`); a read-only open leaves them as they are.
    pub(crate) fn open_for(
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        dir: &Path,
        options: EngineOptions,
        access: Access,
    ) -> Result<Engine> {
        options.validate()?;
        let recovering = Pipeline::open(storage, clock.as_ref(), dir, options.pipeline())?;
        // One read transaction serves the load and the whole replay: the
        // state store does not change until the first checkpoint.
        let cold = ColdReader::new(recovering.state());
        let hot = HotState::load(
            &cold,
            options.check_live_claims,
            planted(&options.db.wal, PlantedBug::ParkAtOpenUnindexed),
            planted(&options.db.wal, PlantedBug::ClaimAgentsInTurn),
        );
        cold.check()?;
        let counters = super::operations::Counters::stored(&recovering.state().read_metrics()?);
        let mut inner = Inner {
            hot,
            unmaterialized: VecDeque::new(),
            unmaterialized_bytes: 0,
            last_applied: recovering.state().applied_lsn(),
            halted: None,
            counters,
        };
        // (The planted `ReleaseStoredLeasesOnly`: the leases the state
        // store held, taken before the log is replayed.)
        let stored_leases = planted(&options.db.wal, PlantedBug::ReleaseStoredLeasesOnly)
            .then(|| held_leases(&inner.hot));
        let strip = planted(&options.db.wal, PlantedBug::LoseCompensationOnCrash);
        let replayed = recovering
            .replay(|at, payload| replay_record(&mut inner, &cold, at, payload, strip))?;
        cold.finish()?;
        let (pipeline, recovery) = recovering.finish(replayed)?;
        assert_eq!(
            inner.last_applied, recovery.durable_lsn,
            "replay reached the log's end"
        );
        let mut engine = Engine {
            clock,
            options,
            recovery,
            backend: Backend::Embedded(Box::new(Embedded {
                pipeline,
                inner: Mutex::new(inner),
                checkpointing: Mutex::new(()),
                combiner: Combiner::default(),
                checkpoint_wanted: AtomicBool::new(false),
            })),
            snapshot_lsn: None,
            operator_channel: Mutex::new(None),
        };
        if access == Access::ReadWrite {
            engine.recovery.leases_released =
                engine.release_leases_at_open(stored_leases.as_ref())?;
        }
        Ok(engine)
    }

    /// What opening found and did.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// engine.create_run(CreateRun { run: RunId::new("job-4")?, input_digest: digest_of(b"4"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// drop(engine); // a crash before any checkpoint
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let recovery = engine.recovery();
    /// assert!(!recovery.created);
    /// assert_eq!(recovery.replayed_records, 1, "the create, replayed from the log");
    /// assert_eq!(recovery.durable_lsn, engine.durable_lsn());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The write-ahead log's counters: appends, records, group commits and
    /// fsyncs (so `appends / fsyncs` is the records each fsync carried).
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let before = engine.wal_stats();
    /// engine.create_run(CreateRun { run: RunId::new("job-5")?, input_digest: digest_of(b"5"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let after = engine.wal_stats();
    /// assert_eq!(after.records, before.records + 1, "one command, one record");
    /// assert!(after.fsyncs > before.fsyncs, "synced before it was acknowledged");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wal_stats(&self) -> crate::wal::WalStats {
        // (No log of actum's on PostgreSQL: every counter is zero.)
        #[cfg(feature = "postgres")]
        if self.postgres().is_some() {
            return crate::wal::WalStats::default();
        }
        self.local().pipeline.db().wal().stats()
    }

    /// The highest LSN known durable: every record up to it survives any
    /// crash. An act must not begin before this reaches its intent's LSN
    /// ([`super::EffectCtx::intent_lsn`]).
    ///
    /// ```
    /// use actum::books::{StepId, ToolClass};
    /// use actum::engine::{Engine, EngineOptions, StepPlan, StepRequest, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("job-6")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"6"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let before = engine.durable_lsn();
    /// let request = StepRequest { guard: &lease.guard, run: &run, step: &StepId::new("notify")?,
    ///     tool: ToolSpec { name: "slack.post".into(), class: ToolClass::NotIdempotent },
    ///     args: b"deploy done", rationale: "tell the team", compensation: None };
    /// let StepPlan::Act(ctx) = engine.begin_step(&request)? else { panic!("a fresh step acts") };
    /// // The intent is a new record, durable before the act may start.
    /// assert!(ctx.intent_lsn > before);
    /// assert!(engine.durable_lsn() >= ctx.intent_lsn);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn durable_lsn(&self) -> Lsn {
        // (On PostgreSQL a command is durable once answered, and its
        // answer rests on `Lsn::ZERO`.)
        #[cfg(feature = "postgres")]
        if self.postgres().is_some() {
            return Lsn::ZERO;
        }
        self.local().pipeline.durable_lsn()
    }

    /// How many runs the hot books hold in memory: every run a command
    /// touched since the open, unless a checkpoint has written it since and
    /// it ended or parked in a wait, and every run a lease held at the open
    /// (which the open released). A run out of memory is read from the
    /// state store and brought back by the first command on it.
    ///
    /// ```
    /// use actum::books::{CreateRun, OperatorAction, RunId, RunState, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// for name in ["live", "over"] {
    ///     engine.create_run(CreateRun { run: RunId::new(name)?, input_digest: digest_of(b"x"),
    ///         agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// }
    /// let over = RunId::new("over")?;
    /// engine.operate(&over, OperatorAction::Cancel, "ops", "duplicate")?;
    /// assert_eq!(engine.runs_in_memory(), 2);
    /// // Once a checkpoint has written it, the ended run leaves memory...
    /// engine.checkpoint()?;
    /// assert_eq!(engine.runs_in_memory(), 1);
    /// // ...and is read from the state store.
    /// assert_eq!(engine.run(&over)?.expect("kept").state, RunState::Cancelled);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn runs_in_memory(&self) -> usize {
        // (On PostgreSQL nothing is kept in memory between calls.)
        #[cfg(feature = "postgres")]
        if self.postgres().is_some() {
            return 0;
        }
        self.lock().hot.run_count()
    }

    /// The clock the engine reads time from.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::{FsStorage, ManualClock};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let clock = Arc::new(ManualClock::new(1_000));
    /// let engine = Engine::open_with(Arc::new(FsStorage::new()), clock.clone(), dir.path(),
    ///     EngineOptions::default())?;
    /// assert_eq!(engine.clock().now_ms(), 1_000);
    /// // The engine's clock is the one it was opened with.
    /// clock.advance_ms(500);
    /// assert_eq!(engine.clock().now_ms(), 1_500);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Writes every durable record since the last checkpoint to the state
    /// store in one durable redb transaction, records it in the manifest,
    /// removes the WAL segments it covers, and lets terminal runs it wrote
    /// leave memory; returns the LSN the state store now covers. Commits
    /// also trigger this automatically (see [`EngineOptions`]); no
    /// background thread ever runs it, and commands go on while it writes.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("job-7")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"7"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lsn = engine.checkpoint()?;
    /// assert_eq!(lsn, engine.durable_lsn(), "the state store covers every record");
    /// drop(engine); // a crash right after: the state store has it all
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// assert_eq!(engine.recovery().state_lsn_at_open, lsn);
    /// assert_eq!(engine.recovery().replayed_records, 0, "nothing left to replay");
    /// assert!(engine.run(&run)?.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn checkpoint(&self) -> Result<Lsn> {
        // (On PostgreSQL every answered command is in the server's tables:
        // only the counters are left to store.)
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            pg.store_counters()?;
            return Ok(Lsn::ZERO);
        }
        let _turn = self
            .local()
            .checkpointing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.checkpoint_locked()
    }

    /// The checkpoint, with the `checkpointing` turn held by the caller.
    pub(crate) fn checkpoint_locked(&self) -> Result<Lsn> {
        let batch: Vec<Unmaterialized> = {
            let mut inner = self.lock();
            self.check_running(&mut inner)?;
            let durable = self.local().pipeline.durable_lsn();
            let ready = inner.unmaterialized.partition_point(|u| u.lsn <= durable);
            let batch: Vec<Unmaterialized> = inner.unmaterialized.drain(..ready).collect();
            inner.unmaterialized_bytes -= batch.iter().map(|u| u.bytes).sum::<u64>();
            self.local()
                .checkpoint_wanted
                .store(false, Ordering::Relaxed);
            batch
        };
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            return Ok(self.local().pipeline.state().applied_lsn());
        };
        let (first, last) = (first.lsn, last.lsn);
        let path = self.local().pipeline.state().path().to_path_buf();
        let planted = CheckpointBugs {
            shared_blobs_go: self.planted(PlantedBug::PruneSharedBlobs),
            cleaner_loses_moves: self.planted(PlantedBug::CleanerLosesMoves),
            stale_live_claims: self.planted(PlantedBug::StaleLiveClaims),
        };
        let metrics = self.counter_totals();
        let written = self
            .local()
            .pipeline
            .materialize_durably((first, last), |txn| {
                apply_ops(txn, &path, batch.iter().flat_map(|u| &u.ops), planted)?;
                crate::state::write_metrics(txn, &path, &metrics)
            });
        let mut inner = self.lock();
        match written {
            Ok(lsn) => {
                assert_eq!(lsn, last);
                let forget = Forget {
                    steps: self.planted(PlantedBug::ForgetEvictedSteps),
                    deadlines: self.planted(PlantedBug::ForgetParkedDeadlines),
                };
                inner.hot.evict_through(lsn, forget);
                Ok(lsn)
            }
            Err(e) => Err(inner.halt_with("a failed checkpoint", e)),
        }
    }

    /// Closes cleanly: every record is written to the state store, then the
    /// manifest records the clean-shutdown LSN. Dropping an engine without
    /// closing it is safe (it is what a crash looks like); the next open
    /// replays the log.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("job-8")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"8"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// engine.close()?;
    /// // A clean shutdown: the next open has nothing to replay, and every run is there.
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// assert_eq!(engine.recovery().replayed_records, 0);
    /// assert!(engine.run(&run)?.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close(self) -> Result<()> {
        // (On PostgreSQL every answered command is committed: closing
        // stores the counters and drops the connections.)
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            return pg.store_counters();
        }
        // No operator's request is taken from here on.
        self.stop_serving_operators();
        // Every command returned before `close` could take `self`; a record
        // still in flight is durable once its group commits.
        let last = self.lock().last_applied;
        if last > self.local().pipeline.durable_lsn() {
            self.local().pipeline.wait_durable(last)?;
        }
        self.checkpoint()?;
        self.store_counters()?;
        // The state store now holds every record the log does: the log's
        // files go back to their first step (docs/DURABILITY.md,
        // "Shrinking the log at close").
        let db = self.local().pipeline.db();
        db.wal().shrink_at_close(db.manifest().applied_lsn)?;
        let (pipeline, inner) = match self.backend {
            Backend::Embedded(local) => {
                let local = *local;
                (local.pipeline, local.inner)
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => unreachable!("the PostgreSQL backend closed above"),
        };
        let inner = inner.into_inner().unwrap_or_else(PoisonError::into_inner);
        if let Some((after, cause)) = inner.halted {
            return Err(Error::Halted { after, cause });
        }
        assert!(
            inner.unmaterialized.is_empty(),
            "every record is written at close"
        );
        pipeline.close()
    }

    /// The embedded backend's parts. Only the embedded engine's own paths
    /// call this: every public method that reaches one dispatches on the
    /// backend first (the scenario suite runs every method on both).
    pub(crate) fn local(&self) -> &Embedded {
        match &self.backend {
            Backend::Embedded(local) => local,
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => {
                unreachable!("an embedded engine's path taken on the PostgreSQL backend")
            }
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic inside decide or apply is a bug that leaves the hot books
        // uncertain: halt.
        self.local().inner.lock().unwrap_or_else(|poisoned| {
            let mut inner = poisoned.into_inner();
            inner.halt("a panic while holding the engine lock", None);
            inner
        })
    }
}

impl Engine {
    /// `Err(Halted)` once a failure made the state uncertain, a panic
    /// inside redb among them: redb's own state is then in doubt (the
    /// call that met the panic answered its `StateStore` error; every
    /// later one answers `Halted` with it as the cause).
    pub(crate) fn check_running(&self, inner: &mut Inner) -> Result<()> {
        if inner.halted.is_none()
            && let Some(cause) = self.local().pipeline.state().panicked()
        {
            inner.halt(
                "a panic inside redb on the state store's bytes",
                Some(Arc::new(cause)),
            );
        }
        inner.check_running()
    }
}

impl Inner {
    /// `Err(Halted)` once a failure made the state uncertain.
    pub(crate) fn check_running(&self) -> Result<()> {
        match &self.halted {
            None => Ok(()),
            Some((after, cause)) => Err(Error::Halted {
                after,
                cause: cause.clone(),
            }),
        }
    }

    /// Stops accepting commands (the first cause is kept).
    pub(crate) fn halt(&mut self, after: &'static str, cause: Option<Arc<Error>>) {
        if self.halted.is_none() {
            self.halted = Some((after, cause));
        }
        assert!(self.halted.is_some());
    }

    /// Halts after `error`, which `after` names, and returns the `Halted`
    /// the failing call answers with, its cause shared with every later
    /// call's. An engine already halted keeps its first cause: a later
    /// failure is its consequence (a log poisoned by the first).
    pub(crate) fn halt_with(&mut self, after: &'static str, error: Error) -> Error {
        self.halt(after, Some(Arc::new(error)));
        match self.check_running() {
            Err(halted) => halted,
            Ok(()) => unreachable!("halted just above"),
        }
    }

    /// Lists a record applied to the hot books as not yet in the state store.
    pub(crate) fn push_unmaterialized(&mut self, record: Unmaterialized) {
        assert!(
            self.unmaterialized
                .back()
                .is_none_or(|u| u.lsn <= record.lsn)
        );
        self.unmaterialized_bytes += record.bytes;
        self.unmaterialized.push_back(record);
    }

    /// Applies the record at `lsn` to the hot books: stages it on an
    /// overlay, then writes the result in.
    pub(crate) fn apply_record(
        &mut self,
        cold: &ColdReader<'_>,
        lsn: Lsn,
        ops: &[Op],
    ) -> std::result::Result<(), ApplyFailure> {
        let writes = stage(&self.hot, cold, ops)?;
        self.write(cold, lsn, writes)
    }

    /// Writes what the record at `lsn` wrote (staged on an overlay) into the
    /// hot books, bringing the runs it touches into memory first.
    pub(crate) fn write(
        &mut self,
        cold: &ColdReader<'_>,
        lsn: Lsn,
        writes: Writes,
    ) -> std::result::Result<(), ApplyFailure> {
        // (`>=`: the planted bug `ReplayRecordTwice` applies one record
        // twice, and the books, not this assertion, must catch it.)
        assert!(lsn >= self.last_applied, "records are applied in LSN order");
        let touched = writes
            .runs
            .keys()
            .chain(writes.effects.keys().map(|k| k.run()))
            .chain(writes.checkpoints.keys().map(|(r, _)| r))
            .chain(writes.decisions.keys().map(|(r, _)| r))
            .chain(writes.audit.keys())
            .chain(writes.waits.keys())
            .chain(writes.budgets.keys())
            .chain(writes.sagas.keys());
        // A record's writes name the same run in several tables, one after
        // the other (a created run and its audit entry): bring each in once.
        let mut previous: Option<&crate::books::RunId> = None;
        for run in touched {
            if previous != Some(run) {
                self.hot.fault_in(run, cold);
            }
            previous = Some(run);
        }
        cold.check().map_err(ApplyFailure::Read)?;
        self.hot.merge(writes, lsn);
        self.last_applied = lsn;
        Ok(())
    }
}

/// Applies `ops` to an overlay of the hot books (and the state store for
/// what left memory, through `cold`); returns what they wrote, or why they
/// do not apply.
pub(crate) fn stage(
    hot: &HotState,
    cold: &ColdReader<'_>,
    ops: &[Op],
) -> std::result::Result<Writes, ApplyFailure> {
    let view = HotView { hot, cold };
    let mut overlay = Overlay::new(&view);
    let applied = ops
        .iter()
        .try_for_each(|op| apply(&mut overlay, op).map_err(ApplyFailure::Apply));
    let writes = overlay.into_writes();
    cold.check().map_err(ApplyFailure::Read)?;
    applied.map(|()| writes)
}

/// Why a record did not apply to the hot books.
#[derive(Debug)]
pub(crate) enum ApplyFailure {
    /// An op does not fit the books.
    Apply(crate::books::ApplyError),
    /// The state store could not be read.
    Read(Error),
}

/// The planted bugs a checkpoint's writes can carry (none outside the
/// simulator's tests).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CheckpointBugs {
    /// `PruneSharedBlobs`: a prune deletes every blob its run referenced.
    pub(crate) shared_blobs_go: bool,
    /// `CleanerLosesMoves`: the blob stream's cleaner leaves a moved
    /// record's index entry behind.
    pub(crate) cleaner_loses_moves: bool,
    /// `StaleLiveClaims`: a run's claim row is written only when it becomes
    /// live.
    pub(crate) stale_live_claims: bool,
}

/// Applies `ops` to the books in `txn` (a checkpoint's records): on an
/// overlay of the state store first, so a row the records change many
/// times (a run's version, an entry intended then settled) is read once and
/// written once, then every row the overlay wrote, table by table. Every op
/// was applied to the hot books before it was logged, so an `Err` here
/// means the state store diverged from them.
pub(crate) fn apply_ops<'a>(
    txn: &WriteTransaction,
    path: &Path,
    ops: impl Iterator<Item = &'a Op>,
    planted: CheckpointBugs,
) -> Result<()> {
    let ops: Vec<&Op> = ops.collect();
    let fresh: BTreeSet<&EffectKey> = ops
        .iter()
        .filter_map(|op| match op {
            Op::EffectIntended { entry } => Some(&entry.key),
            _ => None,
        })
        .collect();
    let mut books = RedbBooks::writer_of_fresh(txn, path, &fresh);
    books.cleaner_loses_moves = planted.cleaner_loses_moves;
    books.stale_live_claims = planted.stale_live_claims;
    let mut overlay = Overlay::new(&books);
    let mut give_way = crate::sync::GiveWay::default();
    for op in ops {
        give_way.unit();
        if let (Op::RunPruned { run, .. }, true) = (op, planted.shared_blobs_go) {
            use crate::books::{BooksRead, BooksWrite};
            let refs = BooksRead::blob_refs(&overlay, run);
            for digest in refs.map(|r| r.digests).unwrap_or_default() {
                BooksWrite::delete_blob(&mut overlay, &digest);
            }
        }
        if let Err(e) = apply(&mut overlay, op) {
            // A failed read answers "absent"; report it, not its symptom.
            drop(overlay);
            books.finish()?;
            return Err(Error::Inconsistent {
                what: format!("a durable op no longer applies to the state store ({e})"),
            });
        }
    }
    let writes = overlay.into_writes();
    // A read that failed while applying would have misled the overlay: the
    // rows are written only if every read succeeded.
    if books.error.borrow().is_none() {
        books.put_writes(writes);
    }
    books.finish()
}

/// Replays the record `payload` found at `at` into the hot books: the same
/// `apply` as the live path. A record that does not decode, or whose ops do
/// not apply, is `Corrupt` naming its segment file and offset, never a
/// panic. A payload version this build does not read is
/// `UnsupportedPayload` instead: the record passed its checksums, so its
/// bytes are what another build wrote, not damage (docs/FORMAT.md,
/// "Versioning of the payload").
fn replay_record(
    inner: &mut Inner,
    cold: &ColdReader<'_>,
    at: &RecordAt<'_>,
    payload: &[u8],
    strip_compensations: bool,
) -> Result<()> {
    if let Some(found) = unsupported_payload_version(payload) {
        return Err(Error::UnsupportedPayload {
            file: at.file.to_path_buf(),
            offset: at.offset,
            lsn: at.lsn,
            found,
            supported: &PAYLOAD_VERSIONS_READ,
        });
    }
    let corrupt = |reason: String| Error::corrupt(at.file, at.offset, reason);
    let mut ops = decode_ops(payload).map_err(|e| {
        corrupt(format!(
            "the record at {} is not a list of books ops: {e}",
            at.lsn
        ))
    })?;
    if ops.is_empty() {
        return Err(corrupt(format!("the record at {} holds no ops", at.lsn)));
    }
    if strip_compensations {
        for op in &mut ops {
            if let Op::EffectIntended { entry } = op {
                entry.compensation = None;
            }
        }
    }
    match inner.apply_record(cold, at.lsn, &ops) {
        Ok(()) => {}
        Err(ApplyFailure::Read(e)) => return Err(e),
        Err(ApplyFailure::Apply(e)) => {
            return Err(corrupt(format!(
                "the record at {} does not apply to the books: {e}",
                at.lsn
            )));
        }
    }
    inner.push_unmaterialized(Unmaterialized {
        lsn: at.lsn,
        bytes: payload.len() as u64,
        ops,
    });
    Ok(())
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::test_support::*;
    use crate::books::{
        AcquireResource, Answer, Begun, BudgetLimits, Command, Compensation, FinishEffect, Guard,
        MemBooks, OpenWait, Part, Prune, ReleaseResource, ResourceId, RunState, SendSignal,
        SetBudget, SetShared, SharedKeyId, SharedSetter, ToolClass, WaitFor,
    };
    use crate::state::read_books;

    /// Every op of a workload touching every table: runs (one ends), acts
    /// and their compensation, checkpoint parts (blobs) saved twice,
    /// decisions, waits and signals, a budget, and the audit of it all.
    fn workload() -> (MemBooks, Vec<Op>) {
        let mut b = Books::default();
        let mut ops = Vec::new();
        let mut run = |b: &mut Books, cmd: Command| {
            let decided = b.ok(cmd);
            ops.extend(decided.ops);
            decided.answer
        };
        let mut lease = |b: &mut Books, name: &str, worker: &str| {
            run(b, create(name, name.as_bytes()));
            let Answer::Leased {
                run: leased, token, ..
            } = run(b, acquire(name, worker, LEASE_MS))
            else {
                panic!("a free run is leased")
            };
            let guard = Guard {
                run: leased,
                worker: wid(worker),
                token,
            };
            run(b, transition(name, &guard, RunState::Running));
            guard
        };
        let g = lease(&mut b, "r", "w1");
        let gq = lease(&mut b, "q", "w2");
        let limits = BudgetLimits {
            tool_calls: Some(9),
            ..BudgetLimits::default()
        };
        let budget = SetBudget {
            run: rid("r"),
            limits,
            by: "ops".into(),
            reason: "test".into(),
        };
        run(&mut b, Command::SetBudget(budget));
        for step in ["s1", "s2"] {
            let mut cmd = begin("r", step, &g, ToolClass::Queryable, step.as_bytes());
            if let Command::BeginEffect(begin) = &mut cmd {
                begin.compensation = Some(Compensation {
                    tool: "refund".into(),
                    args: b"undo".to_vec(),
                    class: ToolClass::Queryable,
                });
            }
            let Answer::Begun(Begun::Proceed { key, .. }) = run(&mut b, cmd) else {
                panic!("a fresh step proceeds")
            };
            let finish = FinishEffect {
                key,
                guard: g.clone(),
                outcome: confirmed(step.as_bytes()),
            };
            run(&mut b, Command::FinishEffect(finish));
            let parts = vec![
                Part {
                    name: "plan".into(),
                    bytes: b"same".to_vec(),
                    extends: None,
                    inline: false,
                },
                Part {
                    name: "cursor".into(),
                    bytes: step.as_bytes().to_vec(),
                    extends: None,
                    inline: false,
                },
            ];
            run(&mut b, save("r", &g, 1, parts));
        }
        run(&mut b, decision("r", &g, 0, b"in", b"out"));
        run(&mut b, compensate("r", "s1", &g));
        let open = OpenWait {
            run: rid("r"),
            guard: g.clone(),
            step: sid("s3"),
            wait_for: WaitFor::Signal { name: "go".into() },
            deadline_ms: None,
            reason: "test".into(),
        };
        run(&mut b, Command::OpenWait(open));
        let signal = SendSignal {
            run: rid("r"),
            name: "go".into(),
            payload: b"now".to_vec(),
            sender: "hook".into(),
        };
        run(&mut b, Command::SendSignal(signal));
        let customer = ResourceId::new("customer:42").unwrap();
        let hold = |run: &str, guard: &Guard| {
            Command::AcquireResource(AcquireResource {
                resource: customer.clone(),
                run: rid(run),
                guard: guard.clone(),
                ttl_ms: 1_000,
            })
        };
        run(&mut b, hold("q", &gq));
        let dnc = |version, by| {
            Command::SetShared(SetShared {
                key: SharedKeyId::new("dnc:c42").unwrap(),
                expected_version: version,
                value: Some(b"dnc".to_vec()),
                by,
                reason: "asked".into(),
            })
        };
        let by_q = SharedSetter::Run {
            run: rid("q"),
            guard: gq.clone(),
        };
        run(&mut b, dnc(0, by_q));
        let release = Command::ReleaseResource(ReleaseResource {
            resource: customer.clone(),
            run: rid("q"),
            guard: gq.clone(),
        });
        run(&mut b, release);
        run(&mut b, hold("q", &gq));
        run(&mut b, transition("q", &gq, RunState::Completed));
        let by_ops = SharedSetter::Operator { name: "ops".into() };
        run(
            &mut b,
            Command::SetShared(SetShared {
                value: None,
                ..match dnc(1, by_ops) {
                    Command::SetShared(s) => s,
                    _ => unreachable!("dnc builds a SetShared"),
                }
            }),
        );
        // q ends, leaves the books whole, and its name is taken again;
        // r saves a third checkpoint sharing a part with the first.
        run(
            &mut b,
            Command::Prune(Prune {
                runs: vec![rid("q")],
                older_than_ms: 0,
            }),
        );
        run(&mut b, create("q", b"again"));
        (b.mem, ops)
    }

    /// The books a state store holds after `ops` were checkpointed in
    /// chunks of `chunk` ops (each chunk one transaction, as a checkpoint).
    fn checkpointed(ops: &[Op], chunk: usize) -> MemBooks {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let db = redb::Database::create(&path).unwrap();
        for ops in ops.chunks(chunk) {
            let txn = db.begin_write().unwrap();
            apply_ops(&txn, &path, ops.iter(), CheckpointBugs::default()).unwrap();
            txn.commit().unwrap();
        }
        let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
        read_books(&txn, &path).unwrap()
    }

    #[test]
    fn a_checkpoint_writes_what_applying_its_ops_one_by_one_writes() {
        let (model, ops) = workload();
        // Every table has rows to write.
        let r = rid("r");
        assert!(model.waits(&r).is_some() && model.budget(&r).is_some());
        assert_eq!(model.decision_count(&r), 1);
        assert_eq!(model.checkpoint_latest(&r).map(|m| m.version), Some(2));
        assert!(model.audit_len(&r) > 10);
        let undo = model.latest_effect(&r, &sid("s1"), crate::books::EffectKind::Undo);
        assert!(undo.is_some());
        assert_eq!(
            model.run(&rid("q")).map(|q| (q.state, q.version)),
            Some((RunState::Pending, 1))
        );
        assert_eq!(
            model.audit_len(&rid("q")),
            1,
            "the pruned q's journal went with it"
        );
        assert!(
            model
                .blob_holders(&crate::books::digest_of(b"same"))
                .is_some()
        );
        let customer = ResourceId::new("customer:42").unwrap();
        let hold = model.resource(&customer).and_then(|b| b.hold).unwrap();
        assert_eq!((hold.run, hold.token.0), (rid("q"), 2));
        let dnc = model.shared(&SharedKeyId::new("dnc:c42").unwrap()).unwrap();
        assert_eq!((dnc.version, dnc.value), (2, None));
        assert!(ops.len() > 20, "the workload is not trivial: {}", ops.len());
        for chunk in [1, 2, 7, ops.len()] {
            assert_eq!(checkpointed(&ops, chunk), model, "chunks of {chunk} ops");
        }
    }
}

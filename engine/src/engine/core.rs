//! The [`Engine`] handle: a database directory (lock, manifest, WAL) and its
//! redb state store (behind a mutex, with the commands in flight), plus the
//! clock. Opening it recovers: the state store is checked against the
//! manifest and the WAL after its `applied_lsn` is replayed through the
//! same `apply` as the live path.
//!
//! **Invariant:** while an `Engine` is open and not halted, the state store
//! has applied only durable WAL records, in LSN order, each once
//! (`state.applied_lsn() <= wal.durable_lsn()`, equal whenever no command
//! is in flight).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redb::WriteTransaction;

use crate::books::{Op, apply, decode_ops};
use crate::clock::{Clock, SystemClock};
use crate::db::{Materialized, Pipeline, RecordAt, Recovery};
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::planted::{PlantedBug, planted};
use crate::state::RedbBooks;
use crate::storage::{FsStorage, Storage};

use super::commit::Pending;
use super::options::EngineOptions;

/// The mutable heart of the engine, behind [`Engine`]'s mutex.
pub(crate) struct Inner {
    /// The state store and what was applied since the last checkpoint.
    pub(crate) mat: Materialized,
    /// Records logged but not yet applied, in LSN order (see `commit.rs`).
    pub(crate) pending: Vec<Pending>,
    /// Set when a failure left the in-memory state uncertain.
    pub(crate) halted: Option<String>,
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
    pub(crate) state_path: PathBuf,
    pub(crate) recovery: Recovery,
    /// Lock, manifest and WAL; shared, so commands wait for their group
    /// commit without holding `inner`.
    pub(crate) pipeline: Pipeline,
    pub(crate) inner: Mutex<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("state_path", &self.state_path)
            .field("recovery", &self.recovery)
            .finish_non_exhaustive()
    }
}

const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Engine>();
};

impl Engine {
    /// Opens (creating if needed) the database in `dir` on the real file
    /// system and the system clock, and recovers it.
    pub fn open(dir: impl AsRef<Path>, options: EngineOptions) -> Result<Engine> {
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        Engine::open_with(storage, Arc::new(SystemClock), dir, options)
    }

    /// Opens the database in `dir` on `storage` with `clock` (the simulator
    /// passes its disk and virtual clock).
    pub fn open_with(
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        dir: impl AsRef<Path>,
        options: EngineOptions,
    ) -> Result<Engine> {
        options.validate()?;
        let recovering = Pipeline::open(storage, clock.as_ref(), dir.as_ref(), options.pipeline())?;
        let state_path = recovering.state().path().to_path_buf();
        let strip = planted(&options.db.wal, PlantedBug::LoseCompensationOnCrash);
        let (pipeline, mat, recovery) = recovering
            .replay(|txn, at, payload| replay_record(txn, &state_path, at, payload, strip))?;
        assert_eq!(
            mat.applied_lsn(),
            recovery.durable_lsn,
            "replay reached the log's end"
        );
        let inner = Inner {
            mat,
            pending: Vec::new(),
            halted: None,
        };
        Ok(Engine {
            clock,
            options,
            state_path,
            recovery,
            pipeline,
            inner: Mutex::new(inner),
        })
    }

    /// What opening found and did.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The write-ahead log's counters: appends, records, group commits and
    /// fsyncs (so `appends / fsyncs` is the records each fsync carried).
    pub fn wal_stats(&self) -> crate::wal::WalStats {
        self.pipeline.db().wal().stats()
    }

    /// The highest LSN known durable: every record up to it survives any
    /// crash. An act must not begin before this reaches its intent's LSN
    /// ([`super::EffectCtx::intent_lsn`]).
    pub fn durable_lsn(&self) -> Lsn {
        self.pipeline.durable_lsn()
    }

    /// The clock the engine reads time from.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Makes everything committed so far durable in the state store, records
    /// it in the manifest and removes the WAL segments it covers; returns
    /// the LSN covered. Commits also trigger this automatically (see
    /// [`EngineOptions`]); no background thread ever runs it.
    pub fn checkpoint(&self) -> Result<Lsn> {
        let mut inner = self.lock();
        self.apply_durable(&mut inner)?;
        let result = self.pipeline.checkpoint(&mut inner.mat);
        if let Err(e) = &result {
            inner.halt(format!("a failed checkpoint ({e})"));
        }
        result
    }

    /// Closes cleanly: a final checkpoint, then the manifest records the
    /// clean-shutdown LSN. Dropping an engine without closing it is safe
    /// (it is what a crash looks like); the next open replays the log.
    pub fn close(self) -> Result<()> {
        {
            // Every command returned before `close` could take `self`; a
            // record still pending is durable once its group commits.
            let mut inner = self.lock();
            if let Some(last) = inner.pending.last().map(|p| p.lsn) {
                self.pipeline.wait_durable(last)?;
            }
            self.apply_durable(&mut inner)?;
            assert!(inner.pending.is_empty(), "no command is in flight at close");
        }
        let Engine {
            pipeline, inner, ..
        } = self;
        let inner = inner.into_inner().unwrap_or_else(PoisonError::into_inner);
        if let Some(cause) = inner.halted {
            return Err(Error::Halted { cause });
        }
        pipeline.close(inner.mat)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic inside decide or apply is a bug that leaves redb's open
        // transaction uncommitted; the state is unchanged, but halt anyway.
        self.inner.lock().unwrap_or_else(|poisoned| {
            let mut inner = poisoned.into_inner();
            inner.halt("a panic while holding the engine lock".to_string());
            inner
        })
    }
}

impl Inner {
    /// `Err(Halted)` once a failure made the state uncertain.
    pub(crate) fn check_running(&self) -> Result<()> {
        match &self.halted {
            None => Ok(()),
            Some(cause) => Err(Error::Halted {
                cause: cause.clone(),
            }),
        }
    }

    /// Stops accepting commands (the first cause is kept).
    pub(crate) fn halt(&mut self, cause: String) {
        if self.halted.is_none() {
            self.halted = Some(cause);
        }
        assert!(self.halted.is_some());
    }
}

/// Applies `ops` to the books in `txn` (a group of durable records on the
/// live path). Every op was already applied to the pending view before it
/// was logged, so an `Err` here means the state store diverged from it.
pub(crate) fn apply_ops<'a>(
    txn: &WriteTransaction,
    path: &Path,
    ops: impl Iterator<Item = &'a Op>,
) -> Result<()> {
    let mut books = RedbBooks::writer(txn, path);
    for op in ops {
        if let Err(e) = apply(&mut books, op) {
            // A failed read answers "absent"; report it, not its symptom.
            books.finish()?;
            return Err(Error::Inconsistent {
                what: format!("a durable op no longer applies to the state store ({e})"),
            });
        }
    }
    books.finish()
}

/// Replays the record `payload` found at `at` into `txn`: the same `apply`
/// as the live path. A record that does not decode, or whose ops do not
/// apply, is `Corrupt` naming its segment file and offset, never a panic.
fn replay_record(
    txn: &WriteTransaction,
    path: &Path,
    at: &RecordAt<'_>,
    payload: &[u8],
    strip_compensations: bool,
) -> Result<()> {
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
    let mut books = RedbBooks::writer(txn, path);
    for op in &ops {
        if let Err(e) = apply(&mut books, op) {
            books.finish()?;
            return Err(corrupt(format!(
                "the record at {} does not apply to the books: {e}",
                at.lsn
            )));
        }
    }
    books.finish()
}

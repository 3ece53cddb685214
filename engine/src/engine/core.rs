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

use crate::books::{apply, decode_ops};
use crate::clock::{Clock, SystemClock};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::state::{RedbBooks, StateStore, replay_log};
use crate::storage::{FsStorage, Storage};

use super::commit::Pending;
use super::options::EngineOptions;

/// What opening found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// True if the directory held no database and one was created.
    pub created: bool,
    /// The LSN the state store's durable commit covered when opened.
    pub state_lsn_at_open: Lsn,
    /// How many WAL records were replayed into the state store.
    pub replayed_records: u64,
    /// The WAL's durable LSN after recovery.
    pub durable_lsn: Lsn,
}

/// The mutable heart of the engine, behind [`Engine`]'s mutex.
pub(crate) struct Inner {
    pub(crate) state: StateStore,
    /// Records logged but not yet applied, in LSN order (see `commit.rs`).
    pub(crate) pending: Vec<Pending>,
    /// Set when a failure left the in-memory state uncertain.
    pub(crate) halted: Option<String>,
    /// Commits since the last checkpoint.
    pub(crate) records_since_checkpoint: u64,
    /// Logged bytes since the last checkpoint.
    pub(crate) bytes_since_checkpoint: u64,
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
    pub(crate) db: Db,
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
        let dir = dir.as_ref();
        let (db, report) = Db::open(
            Arc::clone(&storage),
            clock.as_ref(),
            dir,
            options.db.clone(),
        )?;
        let manifest = db.manifest();
        let state_path = dir.join(&manifest.state_file);
        let mut state = StateStore::open(&storage, &state_path, options.verify_state_on_open)?;
        let state_lsn_at_open = state.applied_lsn();
        let replayed_records = replay_log(&db, &mut state, |state, lsn, payload| {
            let ops = decode_ops(payload).map_err(|e| {
                Error::corrupt(
                    dir.join("wal"),
                    0,
                    format!("the record at {lsn} is not a list of books ops: {e}"),
                )
            })?;
            apply_record(state, lsn, &ops)
        })?;
        let durable_lsn = db.wal().durable_lsn();
        assert_eq!(
            state.applied_lsn(),
            durable_lsn,
            "replay reached the log's end"
        );
        let recovery = Recovery {
            created: report.created,
            state_lsn_at_open,
            replayed_records,
            durable_lsn,
        };
        let inner = Inner {
            state,
            pending: Vec::new(),
            halted: None,
            records_since_checkpoint: replayed_records,
            bytes_since_checkpoint: 0,
        };
        Ok(Engine {
            clock,
            options,
            state_path,
            recovery,
            db,
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
        self.db.wal().stats()
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
        let result = inner.checkpoint(&self.db);
        if let Err(e) = &result {
            inner.halt(format!("a failed checkpoint ({e})"));
        }
        result
    }

    /// Closes cleanly: a final checkpoint, then the manifest records the
    /// clean-shutdown LSN. Dropping an engine without closing it is safe
    /// (it is what a crash looks like); the next open replays the log.
    pub fn close(self) -> Result<()> {
        let Engine { db, inner, .. } = self;
        let mut inner = inner.into_inner().unwrap_or_else(PoisonError::into_inner);
        if let Some(cause) = inner.halted.take() {
            return Err(Error::Halted { cause });
        }
        // Every command returned before `close` could take `self`, so each
        // record is applied or its command failed (and halted the engine).
        assert!(inner.pending.is_empty(), "no command is in flight at close");
        inner.checkpoint(&db)?;
        drop(inner);
        db.close()
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

    /// State store checkpoint, then manifest and WAL GC. Records still
    /// pending are durable or about to be, and stay in the WAL.
    pub(crate) fn checkpoint(&mut self, db: &Db) -> Result<Lsn> {
        let lsn = self.state.checkpoint()?;
        assert!(
            lsn <= db.wal().durable_lsn(),
            "the state holds only durable records"
        );
        db.checkpoint(lsn)?;
        self.records_since_checkpoint = 0;
        self.bytes_since_checkpoint = 0;
        Ok(lsn)
    }
}

/// Applies `ops` (the record at `lsn`) to `state` in one transaction.
pub(crate) fn apply_record(
    state: &mut StateStore,
    lsn: Lsn,
    ops: &[crate::books::Op],
) -> Result<()> {
    assert!(!ops.is_empty(), "a record holds at least one op");
    let path = state.path().to_path_buf();
    state.apply(lsn, |txn| {
        let mut books = RedbBooks::writer(txn, &path);
        for op in ops {
            apply(&mut books, op);
        }
        books.finish()
    })?;
    assert_eq!(state.applied_lsn(), lsn);
    Ok(())
}

/// Applies a group of consecutive records in one state transaction.
pub(crate) fn apply_group(state: &mut StateStore, group: &[Pending]) -> Result<()> {
    let (Some(first), Some(last)) = (group.first(), group.last()) else {
        return Ok(());
    };
    assert!(
        group.windows(2).all(|w| w[1].lsn == w[0].lsn.next()),
        "a group's records are consecutive"
    );
    let path = state.path().to_path_buf();
    state.apply_group(first.lsn, last.lsn, |txn| {
        let mut books = RedbBooks::writer(txn, &path);
        for op in group.iter().flat_map(|p| &p.ops) {
            apply(&mut books, op);
        }
        books.finish()
    })?;
    assert_eq!(state.applied_lsn(), last.lsn);
    Ok(())
}

//! The durable pipeline: the one type that knows the order a record takes
//! from a caller to the disk, and back after a crash. The engine and the
//! simulator's storage campaign both drive it, so every campaign runs the
//! engine's own ordering, never a copy of it.
//!
//! Live path:
//!
//! 1. [`Pipeline::enqueue`]: the record joins the WAL's next group; the
//!    caller's own lock fixes the LSN order;
//! 2. [`Pipeline::wait_durable`]: one leader writes and `fdatasync`s the
//!    group for every waiter;
//! 3. the state store catches up with durable records, either as they come
//!    ([`Pipeline::materialize`], one `Durability::None` transaction per
//!    group, then [`Pipeline::checkpoint`]), or many at once
//!    ([`Pipeline::materialize_durably`]: one `Durability::Immediate`
//!    transaction per checkpoint, which is how the engine does it);
//! 4. the manifest names the state store's new `applied_lsn`, then the WAL
//!    segments it covers are removed.
//!
//! Recovery ([`Pipeline::open`] then [`Recovering::replay`] and
//! [`Recovering::finish`], or [`Recovering::replay_into_state`]): the directory is locked, the manifest
//! chosen, the WAL recovered; the state store is opened and checked against
//! the manifest; every durable record after the state's `applied_lsn` is
//! handed to the caller (the engine rebuilds its books in memory) or
//! applied to the state store, through the same function the live path
//! uses.
//!
//! **Invariant:** the state store holds only durable records, each once, in
//! LSN order (`applied_lsn <= durable_lsn`); a manifest names a checkpoint
//! only after the state store's durable commit covering it; a segment is
//! removed only after the manifest that no longer needs it is durable.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::WriteTransaction;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::planted::{PlantedBug, planted};
use crate::state::{PageCheck, StateStore};
use crate::storage::{OpenMode, Storage};

use super::open::{Db, DbOptions, OpenReport};

/// How a pipeline is opened and when its owner should checkpoint.
#[derive(Clone, Debug, Default)]
pub struct PipelineOptions {
    /// Database directory options (WAL segment size, record limit, id).
    pub db: DbOptions,
    /// Check every page checksum of the state store on open.
    pub verify_state_on_open: bool,
    /// A checkpoint is due after this many records since the last one; 0
    /// disables the count.
    pub checkpoint_every_records: u64,
    /// ... or after this many logged bytes since the last one; 0 disables.
    pub checkpoint_every_bytes: u64,
    /// A clean close compacts the state store when at least this many
    /// bytes of it, and a sixteenth of it or more, are free; 0: never.
    pub compact_at_close_free_bytes: u64,
}

impl PipelineOptions {
    /// True if `records` of `bytes` logged bytes since the last checkpoint
    /// call for another one.
    pub fn checkpoint_due(&self, records: u64, bytes: u64) -> bool {
        let by_count =
            self.checkpoint_every_records != 0 && records >= self.checkpoint_every_records;
        let by_size = self.checkpoint_every_bytes != 0 && bytes >= self.checkpoint_every_bytes;
        by_count || by_size
    }
}

/// What opening found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// True if the directory held no database and one was created.
    pub created: bool,
    /// The LSN the state store's durable commit covered when opened.
    pub state_lsn_at_open: Lsn,
    /// How many WAL records were replayed.
    pub replayed_records: u64,
    /// The WAL's durable LSN after recovery (before the record of the
    /// leases released at open, if any).
    pub durable_lsn: Lsn,
    /// How many leases an engine's open released: every live lease of a
    /// run not over, granted by an earlier open of the directory, whose
    /// process the directory lock proves gone (0 for a read-only open, and
    /// from the pipeline alone).
    pub leases_released: u64,
    /// With `WalOptions::repair`: the acknowledged records recovery cut
    /// from the log to get past damage (file, byte offset, LSN range), if
    /// it cut any.
    pub repair_dropped: Option<String>,
}

/// Where a replayed record lies, to name it in an error about its contents.
#[derive(Clone, Copy, Debug)]
pub struct RecordAt<'a> {
    /// The record's LSN.
    pub lsn: Lsn,
    /// The segment file holding it.
    pub file: &'a Path,
    /// Its byte offset in that file.
    pub offset: u64,
}

/// An open pipeline: the directory, manifest and WAL, and the state store.
/// Every method takes `&self`: callers wait for their group commit, and one
/// of them writes the state store, without holding each other's locks.
#[derive(Debug)]
pub struct Pipeline {
    db: Db,
    state: StateStore,
    options: PipelineOptions,
}

/// A pipeline whose directory is open and whose records after the state
/// store's `applied_lsn` have not been replayed yet.
#[derive(Debug)]
pub struct Recovering {
    db: Db,
    report: OpenReport,
    state: StateStore,
    options: PipelineOptions,
    /// The state store's `applied_lsn` as opened: replay starts after it.
    state_lsn_at_open: Lsn,
}

impl Pipeline {
    /// Opens (creating if needed) the database in `dir` and its state store;
    /// call [`Recovering::replay`] (or `replay_into_state`) next.
    pub fn open(
        storage: Arc<dyn Storage>,
        clock: &dyn Clock,
        dir: &Path,
        options: PipelineOptions,
    ) -> Result<Recovering> {
        let (db, report) = Db::open(Arc::clone(&storage), clock, dir, options.db.clone())?;
        let state_path: PathBuf = dir.join(db.manifest().state_file);
        let check = if options.verify_state_on_open {
            PageCheck::AtOpen
        } else {
            PageCheck::Off
        };
        let unchecked = planted(&options.db.wal, PlantedBug::PageSumsUnchecked);
        let keep_refused = planted(&options.db.wal, PlantedBug::KeepRefusedStore);
        #[cfg_attr(not(feature = "planted-bugs"), expect(unused_mut, reason = "planted only"))]
        let mut state =
            StateStore::open_with(&storage, &state_path, check, unchecked, keep_refused)?;
        #[cfg(feature = "planted-bugs")]
        if planted(&options.db.wal, PlantedBug::SharedReadOutlivesCommit) {
            state.plant_stale_shared_read();
        }
        #[cfg(feature = "planted-bugs")]
        if planted(&options.db.wal, PlantedBug::ReadOnlyHandleOutlivesWrite) {
            state.plant_read_only_outlives_write();
        }
        if !state.synced_at_open() {
            // Its file durable before the first record of this open is
            // written, as the log's and the manifest's are.
            let (disk, path) = (Arc::clone(&storage), state_path.clone());
            db.wal().before_first_write(Box::new(move || {
                disk.open(&path, OpenMode::Existing)
                    .and_then(|file| file.sync_data())
                    .map_err(|e| Error::io("sync state store", &path, e))
            }));
        }
        check_state_against_log(&db, &state)?;
        let state_lsn_at_open = state.applied_lsn();
        Ok(Recovering {
            db,
            report,
            state,
            options,
            state_lsn_at_open,
        })
    }

    /// The database directory, manifest and WAL.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The state store.
    pub fn state(&self) -> &StateStore {
        &self.state
    }

    /// The options it was opened with.
    pub fn options(&self) -> &PipelineOptions {
        &self.options
    }

    /// The highest LSN known durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.db.wal().durable_lsn()
    }

    /// The LSN the next enqueued record will get (stable under the lock the
    /// caller enqueues under).
    pub fn next_lsn(&self) -> Lsn {
        self.db.wal().next_lsn()
    }

    /// Queues `batch` as consecutive records of the next group commit;
    /// returns the last one's LSN. Not durable until [`Pipeline::wait_durable`].
    pub fn enqueue(&self, batch: &[&[u8]]) -> Result<Lsn> {
        assert!(!batch.is_empty(), "a batch holds at least one record");
        self.db.wal().enqueue(batch)
    }

    /// Waits until `lsn` is durable, leading the group commit if no one is.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<()> {
        let durable = self.db.wal().wait_durable(lsn)?;
        assert!(durable >= lsn);
        Ok(())
    }

    /// Applies the durable records `first..=last` to the state store in one
    /// `Durability::None` transaction, through `apply`.
    pub fn materialize(
        &self,
        (first, last): (Lsn, Lsn),
        apply: impl FnOnce(&WriteTransaction) -> Result<()>,
    ) -> Result<()> {
        assert!(
            last <= self.durable_lsn(),
            "only durable records reach the state store"
        );
        self.state.apply_group(first, last, apply)
    }

    /// Makes everything materialized durable in the state store, records it
    /// in the manifest, then removes the WAL segments it covers; returns the
    /// LSN covered.
    pub fn checkpoint(&self) -> Result<Lsn> {
        let lsn = self.state.checkpoint()?;
        self.install_checkpoint(lsn)
    }

    /// Applies the durable records `first..=last` to the state store and
    /// makes them durable, in one `Durability::Immediate` transaction, then
    /// records it in the manifest and removes the WAL segments it covers:
    /// a whole checkpoint's worth of records for one redb commit.
    pub fn materialize_durably(
        &self,
        (first, last): (Lsn, Lsn),
        apply: impl FnOnce(&WriteTransaction) -> Result<()>,
    ) -> Result<Lsn> {
        assert!(
            last <= self.durable_lsn(),
            "only durable records reach the state store"
        );
        let lsn = self.state.apply_durably(first, last, apply)?;
        self.install_checkpoint(lsn)
    }

    fn install_checkpoint(&self, lsn: Lsn) -> Result<Lsn> {
        assert!(
            lsn <= self.durable_lsn(),
            "the state holds only durable records"
        );
        self.db.checkpoint(lsn)?;
        Ok(lsn)
    }

    /// Grows the WAL's active segment one step ahead of need if its writer
    /// asked for it ([`crate::wal::Wal::grow_ahead`]); one atomic load when
    /// it did not. Call it after a commit is acknowledged, never before:
    /// it zero-fills and syncs up to half a segment. Returns whether it
    /// grew.
    pub fn grow_wal_ahead(&self) -> Result<bool> {
        let wal = self.db.wal();
        if !wal.grow_wanted() {
            return Ok(false);
        }
        wal.grow_ahead()
    }

    /// True if `records` of `bytes` since the last checkpoint call for one.
    pub fn checkpoint_due(&self, records: u64, bytes: u64) -> bool {
        self.options.checkpoint_due(records, bytes)
    }

    /// Closes cleanly: a final checkpoint of what is materialized, then the
    /// manifest records the clean-shutdown LSN.
    pub fn close(self) -> Result<()> {
        // A checkpoint with nothing to make durable is skipped: its empty
        // `Durability::Immediate` commit (two syncs of the state store) and
        // its manifest update (one sync) would record what the disk already
        // holds durably (the same `applied_lsn`, segments and state), so no
        // crash can tell whether they were made.
        let applied = self.state.applied_lsn();
        let settled =
            self.state.durable_lsn() == applied && self.db.manifest().applied_lsn == applied;
        if !settled {
            self.checkpoint()?;
        }
        let Pipeline {
            db,
            mut state,
            options,
        } = self;
        state.compact_if_free(options.compact_at_close_free_bytes)?;
        // The state store closes before the directory lock is released.
        drop(state);
        db.close()
    }
}

impl Recovering {
    /// The state store as opened, before any replay.
    pub fn state(&self) -> &StateStore {
        &self.state
    }

    /// The database directory as opened.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Hands every durable record after the state store's `applied_lsn` to
    /// `each`, in LSN order, and leaves the state store as it is: the
    /// engine rebuilds its books in memory and materialises them at its
    /// next checkpoint. The replay borrows the opened pipeline (so `each`
    /// may hold reads of [`Recovering::state`] across records); returns how
    /// many records it handed over, for [`Recovering::finish`].
    pub fn replay(&self, mut each: impl FnMut(&RecordAt<'_>, &[u8]) -> Result<()>) -> Result<u64> {
        let twice = planted(&self.options.db.wal, PlantedBug::ReplayRecordTwice);
        let applied = self.state_lsn_at_open;
        let mut first = true;
        self.replay_records(|at, payload| {
            if twice && first {
                each(at, payload)?;
            }
            first = false;
            assert!(at.lsn > applied);
            each(at, payload)
        })
    }

    /// Applies every durable record after the state store's `applied_lsn`
    /// to it, each in its own transaction, through `apply` (the function the
    /// live path materializes with); then the pipeline is ready.
    pub fn replay_into_state(
        self,
        mut apply: impl FnMut(&WriteTransaction, &RecordAt<'_>, &[u8]) -> Result<()>,
    ) -> Result<(Pipeline, Recovery)> {
        let twice = planted(&self.options.db.wal, PlantedBug::ReplayRecordTwice);
        let mut first = true;
        let replayed = self.replay_records(|at, payload| {
            let double = twice && first;
            first = false;
            self.state.apply(at.lsn, |txn| {
                if double {
                    apply(txn, at, payload)?;
                }
                apply(txn, at, payload)
            })
        })?;
        self.finish(replayed)
    }

    fn replay_records(
        &self,
        mut each: impl FnMut(&RecordAt<'_>, &[u8]) -> Result<()>,
    ) -> Result<u64> {
        let from = self.state_lsn_at_open;
        let mut replayed = 0u64;
        if from < self.db.wal().durable_lsn() {
            let mut records = self.db.wal().read_from(from.next())?;
            while let Some(record) = records.next() {
                let (lsn, payload) = record?;
                let (file, offset) = records.position().expect("a record was just read");
                each(&RecordAt { lsn, file, offset }, &payload)?;
                replayed += 1;
            }
        }
        Ok(replayed)
    }

    /// Ends recovery after a replay that handed over `replayed` records:
    /// `Corrupt` unless they reach the log's durable end.
    pub fn finish(self, replayed: u64) -> Result<(Pipeline, Recovery)> {
        let Recovering {
            db,
            report,
            state,
            options,
            state_lsn_at_open,
        } = self;
        let durable = db.wal().durable_lsn();
        if Lsn(state_lsn_at_open.0 + replayed) != durable {
            return Err(Error::corrupt(
                db.dir().join("wal"),
                0,
                format!(
                    "replay reached {} but the log is durable to {durable}",
                    Lsn(state_lsn_at_open.0 + replayed)
                ),
            ));
        }
        let recovery = Recovery {
            created: report.created,
            state_lsn_at_open,
            replayed_records: replayed,
            durable_lsn: durable,
            leases_released: 0,
            repair_dropped: report
                .recovery
                .as_ref()
                .and_then(|r| r.repair_dropped.clone()),
        };
        Ok((Pipeline { db, state, options }, recovery))
    }
}

/// The state store must cover at least the manifest's checkpoint and at
/// most the log's end.
fn check_state_against_log(db: &Db, state: &StateStore) -> Result<()> {
    let covered = state.applied_lsn();
    let manifest_lsn = db.manifest().applied_lsn;
    if covered < manifest_lsn {
        return Err(Error::corrupt(
            state.path(),
            0,
            format!(
                "the state store covers {covered} but the manifest says a checkpoint covered \
                 {manifest_lsn}: a durable state commit was lost"
            ),
        ));
    }
    let durable = db.wal().durable_lsn();
    if covered > durable {
        return Err(Error::corrupt(
            state.path(),
            0,
            format!(
                "the state store covers {covered} but the log ends at {durable}: acknowledged \
                 records are missing from the log"
            ),
        ));
    }
    Ok(())
}

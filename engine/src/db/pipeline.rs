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
//! 3. [`Pipeline::materialize`]: durable records are applied to the state
//!    store in LSN order, in one `Durability::None` transaction per group;
//! 4. [`Pipeline::checkpoint`]: a `Durability::Immediate` redb commit
//!    recording `applied_lsn`, then the manifest naming it, then the WAL
//!    segments it covers are removed.
//!
//! Recovery ([`Pipeline::open`] then [`Recovering::replay`]): the directory
//! is locked, the manifest chosen, the WAL recovered; the state store is
//! opened and checked against the manifest; every durable record after the
//! state's `applied_lsn` is replayed through the caller's apply function,
//! the same one its live path uses.
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
use crate::state::StateStore;
use crate::storage::Storage;

use super::open::{Db, DbOptions, OpenReport};

/// How a pipeline is opened and when it checkpoints on its own.
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
    /// How many WAL records were replayed into the state store.
    pub replayed_records: u64,
    /// The WAL's durable LSN after recovery.
    pub durable_lsn: Lsn,
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

/// The shared half of an open pipeline: the directory, manifest and WAL.
/// Its methods take `&self`, so callers wait for their group commit
/// without holding the lock that guards the [`Materialized`] half.
#[derive(Debug)]
pub struct Pipeline {
    db: Db,
    options: PipelineOptions,
}

/// The exclusive half: the state store and what was applied to it since the
/// last checkpoint. Its owner keeps it under the lock that orders commits.
#[derive(Debug)]
pub struct Materialized {
    state: StateStore,
    records_since_checkpoint: u64,
    bytes_since_checkpoint: u64,
}

/// A pipeline whose directory is open and whose state store is not yet
/// caught up with the log: look at the state as it was found, then replay.
#[derive(Debug)]
pub struct Recovering {
    db: Db,
    report: OpenReport,
    state: StateStore,
    options: PipelineOptions,
}

impl Pipeline {
    /// Opens (creating if needed) the database in `dir` and its state store;
    /// call [`Recovering::replay`] to catch the state up with the log.
    pub fn open(
        storage: Arc<dyn Storage>,
        clock: &dyn Clock,
        dir: &Path,
        options: PipelineOptions,
    ) -> Result<Recovering> {
        let (db, report) = Db::open(Arc::clone(&storage), clock, dir, options.db.clone())?;
        let state_path: PathBuf = dir.join(db.manifest().state_file);
        let state = StateStore::open(&storage, &state_path, options.verify_state_on_open)?;
        Ok(Recovering {
            db,
            report,
            state,
            options,
        })
    }

    /// The database directory, manifest and WAL.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The highest LSN known durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.db.wal().durable_lsn()
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

    /// Applies the durable records `first..=last` (`bytes` long in the log)
    /// to the state store in one transaction, through `apply`.
    pub fn materialize(
        &self,
        mat: &mut Materialized,
        (first, last): (Lsn, Lsn),
        bytes: u64,
        apply: impl FnOnce(&WriteTransaction) -> Result<()>,
    ) -> Result<()> {
        assert!(
            last <= self.durable_lsn(),
            "only durable records reach the state store"
        );
        mat.state.apply_group(first, last, apply)?;
        mat.records_since_checkpoint += last.0 - first.0 + 1;
        mat.bytes_since_checkpoint += bytes;
        assert_eq!(mat.state.applied_lsn(), last);
        Ok(())
    }

    /// True if the records applied since the last checkpoint call for one.
    pub fn checkpoint_due(&self, mat: &Materialized) -> bool {
        self.options
            .checkpoint_due(mat.records_since_checkpoint, mat.bytes_since_checkpoint)
    }

    /// Makes everything applied durable in the state store, records it in
    /// the manifest, then removes the WAL segments it covers; returns the
    /// LSN covered.
    pub fn checkpoint(&self, mat: &mut Materialized) -> Result<Lsn> {
        let lsn = mat.state.checkpoint()?;
        assert!(
            lsn <= self.durable_lsn(),
            "the state holds only durable records"
        );
        self.db.checkpoint(lsn)?;
        mat.records_since_checkpoint = 0;
        mat.bytes_since_checkpoint = 0;
        Ok(lsn)
    }

    /// Closes cleanly: a final checkpoint, then the manifest records the
    /// clean-shutdown LSN.
    pub fn close(self, mut mat: Materialized) -> Result<()> {
        self.checkpoint(&mut mat)?;
        // The state store closes before the directory lock is released.
        drop(mat);
        self.db.close()
    }
}

impl Materialized {
    /// The state store.
    pub fn state(&self) -> &StateStore {
        &self.state
    }

    /// A read transaction over everything materialized so far.
    pub fn read(&self) -> Result<redb::ReadTransaction> {
        self.state.read()
    }

    /// The LSN of the last record materialized.
    pub fn applied_lsn(&self) -> Lsn {
        self.state.applied_lsn()
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

    /// Checks the state store against the manifest, then replays every
    /// durable record after its `applied_lsn`, each in its own transaction,
    /// through `apply` (the function the live path materializes with).
    pub fn replay(
        self,
        mut apply: impl FnMut(&WriteTransaction, &RecordAt<'_>, &[u8]) -> Result<()>,
    ) -> Result<(Pipeline, Materialized, Recovery)> {
        let Recovering {
            db,
            report,
            mut state,
            options,
        } = self;
        let state_lsn_at_open = state.applied_lsn();
        check_state_against_log(&db, &state)?;
        let durable = db.wal().durable_lsn();
        let mut replayed = 0u64;
        let twice = planted(&options.db.wal, PlantedBug::ReplayRecordTwice);
        if state_lsn_at_open < durable {
            let mut records = db.wal().read_from(state_lsn_at_open.next())?;
            while let Some(record) = records.next() {
                let (lsn, payload) = record?;
                let (file, offset) = records.position().expect("a record was just read");
                let at = RecordAt { lsn, file, offset };
                state.apply(lsn, |txn| {
                    if twice && replayed == 0 {
                        apply(txn, &at, &payload)?;
                    }
                    apply(txn, &at, &payload)
                })?;
                replayed += 1;
            }
        }
        if state.applied_lsn() != durable {
            return Err(Error::corrupt(
                db.dir().join("wal"),
                0,
                format!(
                    "replay reached {} but the log is durable to {durable}",
                    state.applied_lsn()
                ),
            ));
        }
        let recovery = Recovery {
            created: report.created,
            state_lsn_at_open,
            replayed_records: replayed,
            durable_lsn: durable,
        };
        let mat = Materialized {
            state,
            records_since_checkpoint: replayed,
            bytes_since_checkpoint: 0,
        };
        Ok((Pipeline { db, options }, mat, recovery))
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

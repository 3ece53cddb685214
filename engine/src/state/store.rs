//! `StateStore`: a redb database on the storage seam plus its `applied_lsn`
//! and its schema version (the layout of its tables, docs/FORMAT.md, "State
//! store tables"), recorded by every commit and checked at every open, so a
//! store in a layout this build does not know is refused, never misread.
//!
//! Every durable commit records redb's allocator state (quick repair), so a
//! crash never costs a walk of the whole file on the next open; the store is
//! committed durably only at checkpoints, so the extra cost is paid rarely.
//!
//! **Invariant:** records are applied in LSN order, each once; the
//! `applied_lsn` a commit records is the LSN of the last record whose
//! effects it holds.
//!
//! A store whose page sums came back whole from a clean close opens on a
//! read-only redb handle, which writes nothing: no header marking the file
//! in use, no sync, no allocator state loaded, and the sums left whole. The
//! first commit opens the writable handle (the sums are spoiled before its
//! first write, `storage::page_sums`), so a session that only reads, say a
//! resumed LangGraph thread's `get_state`, neither syncs at open nor commits
//! at close (docs/DURABILITY.md, "A store opened for reading").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use redb::{Durability, ReadTransaction, ReadableDatabase, TableDefinition, WriteTransaction};

use super::books_tables::ReadTables;
use super::guard::{
    RedbPanicked, drop_guarded, guard, guarded, keep_unclosed, let_go_unclosed,
};
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::storage::page_sums::{Loaded, PageSums};
use crate::storage::{OpenMode, RedbBackend, Storage};

/// How a state store's pages are checked when it is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageCheck {
    /// No whole check at open; reads are still checked against the sums a
    /// clean close left, where there are any.
    Off,
    /// The whole check (redb's `check_integrity`, a read of every page),
    /// unless the last close was clean and left page sums that rest on a
    /// whole check: then each page is checked as it is read.
    AtOpen,
    /// The whole check, whatever the sums say (`actum verify`).
    Whole,
}

/// How a state store's pages were checked when it was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckedAtOpen {
    /// Every page, by redb's whole check.
    Whole,
    /// None at open: each page as it is read, against the sums of the last
    /// clean close.
    AsRead,
    /// Not checked (the check was off and no sums rest on one).
    Unchecked,
}

/// The page sums file of the state store at `path`: `state.redb` keeps
/// them in `state.redb.sums`.
pub fn sums_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sums");
    PathBuf::from(name)
}

/// The table holding the state store's own bookkeeping.
pub const META_TABLE: TableDefinition<&str, u64> = TableDefinition::new("actum_meta");
/// The key under which `applied_lsn` is stored in [`META_TABLE`].
const APPLIED_LSN_KEY: &str = "applied_lsn";
/// The key under which the schema version is stored in [`META_TABLE`].
const SCHEMA_VERSION_KEY: &str = "schema_version";
/// The prefix of the keys under which the engine's counters are stored in
/// [`META_TABLE`] (`metric.resumes`, ...), written by each checkpoint.
pub const METRIC_KEY_PREFIX: &str = "metric.";
/// The layout of the state store's tables and rows this build writes and
/// reads (docs/FORMAT.md, "State store tables"): recorded by every commit,
/// checked whenever a store is opened. Version 2 added the wait books table
/// (`books_waits`) and version 3 the budget books table (`books_budgets`);
/// the tables before them are unchanged. Version 4 lets a wait book's rows
/// hold the child-run wait (`WaitFor::Child`, `WaitStatus::ChildEnded`),
/// appended variants that leave every older row's bytes as they were, and
/// version 5 the wait for an asynchronous tool's reply (`WaitFor::Reply`,
/// `WaitStatus::Replied`), appended alike. Version 6 added the saga books
/// table (`books_sagas`), the resource leases (`books_resources`) and the
/// shared keys (`books_shared`), and lets a run row hold
/// `RunState::Compensating` (appended). Version 7 lets an effect row hold
/// `ToolClass::IdempotentWithMargin` (appended; no table changed), and
/// version 8 lets a wait book's rows hold the wait for several children
/// (`WaitFor::Children`, `WaitStatus::ChildrenEnded`, appended) and an
/// audit row `AuditWhat::VersionMoved` (appended alike). Version 9 lets an
/// effect row (and a wait book's `WaitStatus::Replied`) hold a receipt kept
/// in the blob store by digest (`EffectStatus::ConfirmedStored`,
/// `EffectStatus::CompensatedStored`, appended; no table changed: the blob
/// is a row of the blobs table, counted in the blob holders and references
/// tables like a checkpoint part), and an audit row hold an operator's retry and
/// fork (`AuditWhat::Retried`, `AuditWhat::Forked`, appended). Version 10
/// writes checkpoint rows in metadata layout 2, whose parts may be stored as
/// chunks (a part saved in append form; each chunk a row of the blobs table,
/// counted like a whole part). A layout-1 row begins with its run id and a
/// layout-2 row with an empty marker, so rows of both layouts are read side
/// by side and an older store needs no rewrite. Version 11 writes them in
/// layout 3, where a chunked part's digest names its chunk list; layout-2
/// rows are still read. Version 12 writes a checkpoint's audit entries of a
/// run as one row keyed by the last one's seq (table 12); the one-entry rows
/// of older versions (table 5) are keyed the same way and read beside them.
/// Version 13 keeps new blobs as records of the blob stream
/// (`books_blob_chunks`, `books_blob_index`, `books_blob_stream`;
/// `blob_stream.rs`) instead of rows of `books_blobs`, whose rows a store
/// written before is still read, counted and deleted from. Version 14
/// writes checkpoint rows in metadata layout 4, which holds parts of at
/// most `CHECKPOINT_INLINE_BYTES_MAX` in the row itself; rows of older
/// layouts are read beside them. Version 15 adds the live claims table
/// (`books_live_claims`): what an open needs of each live run, written
/// with its row, so the open does not read the run rows; a live run of an
/// older store has no claim row until its row is written again, and is
/// read from its run row.
pub const STATE_SCHEMA_VERSION: u64 = 15;

/// Every schema version this build opens, oldest first. An older store
/// lacks only tables added since, which read as empty (no run of it ever
/// waited, had a budget or compensated), so it is opened as is; its next commit records
/// the current version, after which an older build refuses it by name.
pub const STATE_SCHEMA_VERSIONS_READ: [u64; 15] =
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, STATE_SCHEMA_VERSION];

/// redb's page cache for the state store. redb's default (1 GiB) lets the
/// cache grow with the file, so resident memory grew with history (585 MiB
/// after 500,000 completed runs in `memory_after_runs`); the hot books keep
/// the working set in memory, so redb's cache serves only checkpoints and
/// reads of settled history.
pub const STATE_CACHE_BYTES: usize = 32 << 20;

/// A redb database whose every transaction records the WAL position it
/// reflects. Its methods take `&self`: redb serialises writers itself, and
/// readers run beside a writer on the last committed snapshot.
pub struct StateStore {
    path: PathBuf,
    /// The writable handle: set at open, or by the first commit of a store
    /// opened on a read-only handle (`era`); taken when the store is
    /// dropped (through the guard: redb's destructor writes the file's
    /// header and may meet damaged pages).
    db: OnceLock<redb::Database>,
    /// The read-only handle a store whose sums came whole from a clean
    /// close opens on; `None` once the writable handle is open (or if the
    /// store opened on it).
    era: Mutex<Option<Arc<ReadEra>>>,
    /// Where the writable handle opens the store's file again.
    storage: Arc<dyn Storage>,
    /// The open made the file durable (a sync of its own, or redb's
    /// writable open, which syncs its header): see `synced_at_open`.
    synced_at_open: bool,
    /// LSN of the last record applied (durably or not).
    applied_lsn: AtomicU64,
    /// LSN covered by the last `Durability::Immediate` commit.
    durable_lsn: AtomicU64,
    /// The first panic inside redb a call on this store met (what it was
    /// doing, and redb's message). redb's own state is then in doubt (a
    /// lock it held is poisoned; a commit may panic again while unwinding
    /// from the first, which aborts the process), so the engine halts,
    /// and the store is never closed through redb (see `Drop`).
    panicked: Mutex<Option<(&'static str, RedbPanicked)>>,
    /// The page check found damage: redb may have "repaired" it in memory
    /// by going back to its previous commit, and its close would commit
    /// that (over pages known to be damaged) into a file that is to be
    /// examined. The store is let go unclosed instead.
    refused: bool,
    /// The planted `KeepRefusedStore`: an abandoned handle is kept until
    /// the process ends, not let go (false outside the simulator's tests).
    keep_refused: bool,
    /// The read transaction the engine's readers share until the next
    /// commit ([`StateStore::shared_read`]).
    shared: Mutex<Option<Arc<SharedRead>>>,
    /// The planted `SharedReadOutlivesCommit`: commits do not forget the
    /// shared read transaction.
    stale_shared_read: bool,
    /// The planted `ReadOnlyHandleOutlivesWrite`: readers keep beginning
    /// on the read-only handle after the writable one opened.
    keep_read_only: bool,
    /// The sum of every block, checked on every read (shared with redb's
    /// backend, which writes them back at a clean close).
    sums: Arc<PageSums>,
    /// How the pages were checked at open.
    checked_at_open: CheckedAtOpen,
}

/// The read-only handle a store opened on, kept by every read transaction
/// begun on it, so it lasts until the last of them ends. When the writable
/// handle opens, a read transaction of it (`pin`) is begun before its first
/// commit: it sees the snapshot this handle's readers see (nothing was
/// committed in between), so the writable handle never reuses a page they
/// may still read (its own accounting of readers knows only its own).
struct ReadEra {
    /// `Some` until dropped (through the guard).
    db: Option<redb::ReadOnlyDatabase>,
    pin: Mutex<Option<ReadTransaction>>,
}

impl Drop for ReadEra {
    fn drop(&mut self) {
        let pin = self
            .pin
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(pin) = pin {
            drop_guarded(pin);
        }
        if let Some(db) = self.db.take() {
            drop_guarded(db);
        }
    }
}

/// One read transaction of the state store and the tables opened in it,
/// shared by every reader that asks between two commits. The store changes
/// only when it commits, so a transaction begun after the last commit sees
/// what a new one would, and beginning one (and opening the tables a read
/// needs, and ending it) cost more than the lookups of a batch of commands:
/// `ColdReader::begin`, `open_table` and their drops were 7% of a
/// protocol's instructions (docs/PERFORMANCE.md, "Instruction counts per
/// protocol").
pub(crate) struct SharedRead {
    /// `Some` until dropped (through the guard, tables first).
    txn: Option<ReadTransaction>,
    tables: ReadTables,
    /// The read-only handle it was begun on, if the writable one was not
    /// open yet (dropped after the transaction).
    _era: Option<Arc<ReadEra>>,
}

impl SharedRead {
    /// The transaction.
    pub(crate) fn txn(&self) -> &ReadTransaction {
        self.txn.as_ref().expect("a shared read holds its transaction until dropped")
    }

    /// The tables opened in it so far.
    pub(crate) fn tables(&self) -> &ReadTables {
        &self.tables
    }
}

impl Drop for SharedRead {
    fn drop(&mut self) {
        // redb's read transaction ends in its destructor: through the
        // guard, like every call into redb; its tables first.
        drop_guarded(std::mem::take(&mut self.tables));
        if let Some(txn) = self.txn.take() {
            drop_guarded(txn);
        }
    }
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("path", &self.path)
            .field("applied_lsn", &self.applied_lsn())
            .field("durable_lsn", &self.durable_lsn())
            .finish_non_exhaustive()
    }
}

impl StateStore {
    /// Opens the state store at `path`, creating it first if it does not
    /// exist.
    ///
    /// Creation is atomic: redb initialises (and syncs) the file under a
    /// temporary name, which is renamed into place and the directory synced,
    /// so a crash never leaves a half-initialised store under `path`.
    ///
    /// `check` says how its pages are checked (see [`PageCheck`]); a read
    /// whose block does not match the sum kept for it fails naming the file
    /// and the block's offset (`storage::page_sums`).
    pub fn open(storage: &Arc<dyn Storage>, path: &Path, check: PageCheck) -> Result<StateStore> {
        Self::open_with(storage, path, check, false, false)
    }

    /// [`StateStore::open`]; with `unchecked`, a read whose block does not
    /// match its sum is handed to redb as it is (the planted
    /// `PageSumsUnchecked`); with `keep_refused`, a refused store's handle
    /// is kept, not let go (the planted `KeepRefusedStore`).
    pub(crate) fn open_with(
        storage: &Arc<dyn Storage>,
        path: &Path,
        check: PageCheck,
        unchecked: bool,
        keep_refused: bool,
    ) -> Result<StateStore> {
        let exists = storage
            .exists(path)
            .map_err(|e| Error::io("look for state store", path, e))?;
        if !exists {
            create(storage, path)?;
        }
        let file = storage
            .open(path, OpenMode::Existing)
            .map_err(|e| Error::io("open state store", path, e))?;
        let sums_path = sums_path(path);
        let sums_file = storage
            .open(&sums_path, OpenMode::OpenOrCreate)
            .map_err(|e| Error::io("open page sums", &sums_path, e))?;
        let (mut sums, loaded) = PageSums::load(path, &*file, Some(sums_file))
            .map_err(|e| Error::io("load page sums", &sums_path, e))?;
        // Writes a previous handle left in the page cache may not be
        // durable; make them so before redb (and replay) trusts them. Whole
        // sums prove the handle that wrote them synced every write of the
        // store with no error first (`PageSums::close`), and none came
        // since (an open empties them durably before redb writes); redb's
        // open syncs the file too, before anything is written.
        if loaded == Loaded::None {
            file.sync_data()
                .map_err(|e| Error::io("sync state store", path, e))?;
        }
        sums.plant_unchecked(unchecked);
        let sums = Arc::new(sums);
        let whole_check = match check {
            PageCheck::Off => false,
            PageCheck::AtOpen => loaded != Loaded::Checked,
            PageCheck::Whole => true,
        };
        // Sums from a clean close, and no whole check asked for: redb's
        // read-only handle, until the first commit. (One that will not
        // open, a store redb marks as needing recovery say, is opened
        // writable below, which repairs it or says why not.)
        let mut file = Some(file);
        let read_only = if !whole_check && loaded != Loaded::None {
            let file = file.take().expect("not taken yet");
            guarded(path, "open", || {
                redb::Database::builder()
                    .set_cache_size(STATE_CACHE_BYTES)
                    .open_read_only_with_backend(RedbBackend::reading(file, Arc::clone(&sums)))
            })
            .ok()
        } else {
            None
        };
        let db = OnceLock::new();
        if read_only.is_none() {
            let file = match file.take() {
                Some(file) => file,
                None => storage
                    .open(path, OpenMode::Existing)
                    .map_err(|e| Error::io("open state store", path, e))?,
            };
            let _ = db.set(open_writable(path, file, &sums)?);
        }
        let synced_at_open = read_only.is_none();
        // From here on the store's destructor drops redb through the guard,
        // whichever check below refuses it.
        let mut store = StateStore {
            path: path.to_path_buf(),
            db,
            era: Mutex::new(read_only.map(|db| {
                Arc::new(ReadEra {
                    db: Some(db),
                    pin: Mutex::new(None),
                })
            })),
            storage: Arc::clone(storage),
            synced_at_open,
            applied_lsn: AtomicU64::new(0),
            durable_lsn: AtomicU64::new(0),
            panicked: Mutex::new(None),
            refused: false,
            keep_refused,
            shared: Mutex::new(None),
            stale_shared_read: false,
            keep_read_only: false,
            sums: Arc::clone(&sums),
            checked_at_open: if whole_check {
                CheckedAtOpen::Whole
            } else if loaded == Loaded::Checked && check != PageCheck::Off {
                CheckedAtOpen::AsRead
            } else {
                CheckedAtOpen::Unchecked
            },
        };
        if whole_check {
            let db = store.db.get_mut().expect("a whole check opens writable");
            let checked = guard(path, "verify page checksums", || db.check_integrity());
            // A check that failed on an I/O error found no damage, and redb
            // latches the error, so its close writes nothing: that handle
            // is dropped as usual. Damage found, or a panic, is refused.
            store.refused = !matches!(
                checked,
                Ok(Ok(true))
                    | Ok(Err(redb::DatabaseError::Storage(
                        redb::StorageError::Io(_) | redb::StorageError::PreviousIo
                    )))
            );
            let checked = checked
                .and_then(|result| result.map_err(|e| state_error(path, "verify page checksums", e)));
            let intact = store.note(checked).map_err(|e| sums.corrupt_or(e))?;
            if !intact {
                sums.note_failed();
                return Err(Error::corrupt(
                    path,
                    0,
                    "a page checksum of the state store does not match its contents \
                     (the file is left as it was; `actum verify` reports it)",
                ));
            }
            sums.note_checked();
        }
        let read = store.own_read().map_err(|e| sums.corrupt_or(e))?;
        store
            .note(check_schema_version(read.txn(), path))
            .map_err(|e| sums.corrupt_or(e))?;
        let applied_lsn = store
            .note(read_applied_lsn(read.txn(), path))
            .map_err(|e| sums.corrupt_or(e))?;
        drop(read);
        store.applied_lsn.store(applied_lsn.0, Ordering::SeqCst);
        store.durable_lsn.store(applied_lsn.0, Ordering::SeqCst);
        Ok(store)
    }

    /// How the pages were checked when the store was opened.
    pub fn checked_at_open(&self) -> CheckedAtOpen {
        self.checked_at_open
    }

    /// How many blocks of the store have a known sum, of how many.
    pub fn known_blocks(&self) -> (usize, usize) {
        self.sums.known_blocks()
    }

    /// Compacts the store at a clean close if at least `min_free_bytes` of
    /// its file, and a sixteenth of it or more, are pages no table uses
    /// (redb's `compact`: pages move toward the start of the file, which
    /// then shrinks). Nothing is done when it is not worth it, when
    /// `min_free_bytes` is 0, or when a reader still holds a snapshot. redb
    /// is asked for its free pages only when this open wrote at least a
    /// sixteenth of the file: its count walks every table, a read of the
    /// whole file, so a close reads at most sixteen times what its session
    /// wrote, and a session that only read closes without reading the
    /// store. The free pages a smaller session leaves stay for later
    /// commits to reuse (they never grow the file) until a session that
    /// writes enough looks again. Its
    /// writes go through the page sums
    /// like every write, and each of redb's steps is a durable commit of
    /// the same rows, so a crash in the middle leaves a store that opens
    /// as after any crash, rows unchanged (docs/DURABILITY.md, "Compaction
    /// at close").
    pub fn compact_if_free(&mut self, min_free_bytes: u64) -> Result<()> {
        if min_free_bytes == 0 || self.refused || self.has_panicked() {
            return Ok(());
        }
        // (The sums hold one entry per block of the file.)
        let file_bytes =
            self.sums.known_blocks().1 as u64 * crate::storage::page_sums::BLOCK_BYTES;
        if self.sums.written_bytes().saturating_mul(16) < file_bytes {
            return Ok(());
        }
        self.forget_shared_read();
        let path = self.path.clone();
        let db = self.writable()?;
        let txn = self.note(guarded(&path, "begin write", || db.begin_write()))?;
        let stats = guarded(&path, "read allocation stats", || txn.stats());
        drop_guarded(txn);
        let stats = self.note(stats)?;
        let used = stats.allocated_pages() * stats.page_size() as u64;
        let free = file_bytes.saturating_sub(used);
        if free < min_free_bytes || free.saturating_mul(16) < file_bytes {
            return Ok(());
        }
        let db = self
            .db
            .get_mut()
            .expect("the writable handle was opened above");
        let compacted = guard(&path, "compact", || db.compact());
        match compacted {
            // A reader still holds a snapshot (an operator's look that
            // outlived the engine's close): nothing moved.
            Ok(Err(redb::CompactionError::TransactionInProgress)) | Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => self.note(Err(state_error(&path, "compact", e))),
            Err(e) => self.note(Err(e)),
        }
    }

    /// The writable handle, opened now if the store opened on a read-only
    /// one: the sums are spoiled before its first write (redb's header),
    /// then a read transaction of it pins the snapshot the read-only
    /// handle's readers see, before anything is committed (`ReadEra`).
    fn writable(&self) -> Result<&redb::Database> {
        if let Some(db) = self.db.get() {
            return Ok(db);
        }
        let mut era = self.era.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(db) = self.db.get() {
            return Ok(db);
        }
        let file = self
            .storage
            .open(&self.path, OpenMode::Existing)
            .map_err(|e| Error::io("open state store", &self.path, e))?;
        let db = self.note(open_writable(&self.path, file, &self.sums))?;
        if let Some(era) = era.as_ref() {
            let pin = guarded(&self.path, "begin read", || db.begin_read());
            match self.note(pin) {
                Ok(pin) => *era.pin.lock().unwrap_or_else(PoisonError::into_inner) = Some(pin),
                Err(error) => {
                    // Never closed: its close commits, and the readers of
                    // the read-only handle are not pinned.
                    self.abandon(db);
                    return Err(error);
                }
            }
        }
        let _ = self.db.set(db);
        let read_only = if self.keep_read_only { None } else { era.take() };
        drop(era);
        // Ended (if no reader still holds it) outside the lock.
        drop(read_only);
        Ok(self.db.get().expect("just set"))
    }

    /// Whether the open made the store's file durable: its own sync (no
    /// whole page sums) or redb's writable open, which syncs the header it
    /// writes (and with it every write of the file the page cache holds).
    /// A store opened on the read-only handle trusted its clean close
    /// instead, so the caller syncs it before anything of this open is
    /// acknowledged: a database copied with `cp` may sit in the page cache
    /// only (docs/DURABILITY.md, "A store opened for reading").
    pub(crate) fn synced_at_open(&self) -> bool {
        self.synced_at_open
    }

    /// Whether the store is still on the read-only handle it opened on (no
    /// commit since the open).
    pub fn reading_only(&self) -> bool {
        self.db.get().is_none()
    }

    /// The LSN of the last record applied.
    pub fn applied_lsn(&self) -> Lsn {
        Lsn(self.applied_lsn.load(Ordering::SeqCst))
    }

    /// The LSN covered by the last durable commit.
    pub fn durable_lsn(&self) -> Lsn {
        Lsn(self.durable_lsn.load(Ordering::SeqCst))
    }

    /// The file the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Applies the record at `lsn` (which must be the next one) in one
    /// non-durable transaction: `apply` writes its effects, and the store
    /// records `lsn` in the same transaction.
    pub fn apply(
        &self,
        lsn: Lsn,
        apply: impl FnOnce(&WriteTransaction) -> Result<()>,
    ) -> Result<()> {
        self.apply_group(lsn, lsn, apply)
    }

    /// Applies the consecutive records `first..=last` (`first` must be the
    /// next LSN) in one non-durable transaction, recording `last`: a group
    /// of records costs one redb commit instead of one each.
    pub fn apply_group(
        &self,
        first: Lsn,
        last: Lsn,
        apply: impl FnOnce(&WriteTransaction) -> Result<()>,
    ) -> Result<()> {
        self.commit((first, last), Durability::None, apply)
    }

    /// Applies the consecutive records `first..=last` and makes everything
    /// applied durable, in one `Durability::Immediate` transaction: how the
    /// engine materialises a checkpoint's worth of records at once.
    pub fn apply_durably(
        &self,
        first: Lsn,
        last: Lsn,
        apply: impl FnOnce(&WriteTransaction) -> Result<()>,
    ) -> Result<Lsn> {
        self.commit((first, last), Durability::Immediate, apply)?;
        Ok(last)
    }

    /// Makes everything applied so far durable; returns the LSN it covers.
    pub fn checkpoint(&self) -> Result<Lsn> {
        let lsn = self.applied_lsn();
        self.commit((lsn.next(), lsn), Durability::Immediate, |_| Ok(()))?;
        Ok(lsn)
    }

    /// A read transaction over the current (possibly non-durable) state,
    /// of the writable handle (opened now if the store opened read-only:
    /// the transaction does not keep a read-only handle alive).
    pub fn read(&self) -> Result<redb::ReadTransaction> {
        let db = self.writable()?;
        self.note(guarded(&self.path, "begin read", || db.begin_read()))
    }

    /// A new read transaction of its own, with no table opened yet: of the
    /// writable handle, or of the read-only one while the store is on it.
    pub(crate) fn own_read(&self) -> Result<Arc<SharedRead>> {
        if let Some(db) = self.db.get().filter(|_| !self.keep_read_only) {
            return self.begin_shared(None, || db.begin_read());
        }
        // Begun under the lock the switch to the writable handle takes, so
        // every transaction of the read-only handle is begun before the
        // writable one pins its snapshot.
        let era = self.era.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(era) = era.as_ref() else {
            drop(era);
            let db = self.db.get().expect("set before the read-only handle goes");
            return self.begin_shared(None, || db.begin_read());
        };
        let read_only = era.db.as_ref().expect("open until dropped");
        self.begin_shared(Some(Arc::clone(era)), || read_only.begin_read())
    }

    /// A read transaction begun by `begin` (on the handle `era` holds, if
    /// `Some`), as a reader shares it.
    fn begin_shared(
        &self,
        era: Option<Arc<ReadEra>>,
        begin: impl FnOnce() -> std::result::Result<ReadTransaction, redb::TransactionError>,
    ) -> Result<Arc<SharedRead>> {
        Ok(Arc::new(SharedRead {
            txn: Some(self.note(guarded(&self.path, "begin read", begin))?),
            tables: ReadTables::default(),
            _era: era,
        }))
    }

    /// The read transaction shared until the next commit, begun now if no
    /// reader has asked since the last one: it sees exactly what a new
    /// transaction would (every commit forgets it). A reader that holds it
    /// past a commit keeps reading the snapshot it began with.
    pub(crate) fn shared_read(&self) -> Result<Arc<SharedRead>> {
        let mut slot = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(read) = slot.as_ref() {
            return Ok(Arc::clone(read));
        }
        let read = self.own_read()?;
        *slot = Some(Arc::clone(&read));
        Ok(read)
    }

    /// Plants `SharedReadOutlivesCommit`: commits no longer forget the
    /// shared read transaction.
    #[cfg(feature = "planted-bugs")]
    pub(crate) fn plant_stale_shared_read(&mut self) {
        self.stale_shared_read = true;
    }

    /// Plants `ReadOnlyHandleOutlivesWrite`: readers keep beginning on the
    /// read-only handle (if the store opened on one) after its first commit.
    #[cfg(feature = "planted-bugs")]
    pub(crate) fn plant_read_only_outlives_write(&mut self) {
        self.keep_read_only = true;
    }

    /// Forgets the shared read transaction: the next reader begins a new one.
    fn forget_shared_read(&self) {
        let read = self
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Ended (if no reader still holds it) outside the lock.
        drop(read);
    }

    /// `result`, noting first whether its error is a panic inside redb.
    /// Every caller that reads or writes through this store's handles
    /// passes its results through here.
    pub(crate) fn note<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(error) = &result {
            self.note_error(error);
        }
        result
    }

    /// Notes whether `error` is a panic inside redb (see [`Self::note`]).
    pub(crate) fn note_error(&self, error: &Error) {
        if let Error::StateStore { op, source, .. } = error
            && let Some(panicked) = source.downcast_ref::<RedbPanicked>()
        {
            let mut first = self.panicked.lock().unwrap_or_else(PoisonError::into_inner);
            first.get_or_insert_with(|| (op, panicked.clone()));
            // redb's state is in doubt: no sums vouch for this file.
            self.sums.note_failed();
        }
    }

    /// The first panic inside redb this store met, as the error it was
    /// (rebuilt: the engine keeps it as the cause of its halt).
    pub(crate) fn panicked(&self) -> Option<Error> {
        let first = self.panicked.lock().unwrap_or_else(PoisonError::into_inner);
        first.as_ref().map(|(op, panicked)| Error::StateStore {
            file: self.path.clone(),
            op,
            source: Box::new(panicked.clone()),
        })
    }

    /// Whether redb panicked in this store (what `panicked` reports,
    /// without building the error).
    fn has_panicked(&self) -> bool {
        self.panicked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Ends a handle without closing it (its close would commit): freed
    /// during a silent unwind (`let_go_unclosed`), or kept until the
    /// process ends when redb panicked in this store (a lock its destructor
    /// takes may be poisoned: `keep_unclosed`).
    fn abandon(&self, db: redb::Database) {
        if self.has_panicked() || self.keep_refused {
            keep_unclosed(db);
        } else {
            let_go_unclosed(db);
        }
    }

    /// One transaction applying `first..=last` (empty when `first` is past
    /// `last`) and recording `last`.
    fn commit(
        &self,
        span: (Lsn, Lsn),
        durability: Durability,
        apply: impl FnOnce(&WriteTransaction) -> Result<()>,
    ) -> Result<()> {
        // Before and after. A checkpoint commits without the engine lock,
        // while commands are decided: a reader that asks meanwhile may get
        // the snapshot before this commit, which is right for it (the hot
        // books hold every run the commit's records touch until they evict
        // them, under the lock, after this call returns). The forget after
        // the commit takes the lock a reader stores a new transaction under,
        // so from then on the cache is empty or holds a snapshot with this
        // commit in it, and every reader after the eviction sees it.
        let forget = !self.stale_shared_read;
        if forget {
            self.forget_shared_read();
        }
        let committed = self.commit_unnoted(span, durability, apply);
        if forget {
            self.forget_shared_read();
        }
        self.note(committed)
    }

    fn commit_unnoted(
        &self,
        (first, last): (Lsn, Lsn),
        durability: Durability,
        apply: impl FnOnce(&WriteTransaction) -> Result<()>,
    ) -> Result<()> {
        let path = &self.path;
        let db = self.writable()?;
        let mut txn = guarded(path, "begin write", || db.begin_write())?;
        // redb admits one writer at a time, so these checks see no race.
        assert_eq!(
            first,
            self.applied_lsn().next(),
            "records are applied in LSN order, each once"
        );
        assert!(first.0 <= last.0 + 1, "a commit never moves backwards");
        let durable = matches!(durability, Durability::Immediate);
        let filled = guarded(path, "set durability", || {
            txn.set_durability(durability)?;
            if durable {
                // Record the allocator state, so a crash needs no full repair.
                txn.set_quick_repair(true);
            }
            Ok::<(), redb::SetDurabilityError>(())
        })
        .and_then(|()| apply(&txn))
        .and_then(|()| guarded(path, "record applied lsn", || record_meta(&txn, last)));
        if let Err(error) = filled {
            // Dropping an unfinished write transaction rolls it back.
            drop_guarded(txn);
            return Err(error);
        }
        guarded(path, "commit", || txn.commit())?;
        self.applied_lsn.store(last.0, Ordering::SeqCst);
        if durable {
            let before = self.durable_lsn.swap(last.0, Ordering::SeqCst);
            assert!(before <= last.0, "durable coverage never moves back");
        }
        Ok(())
    }
}

/// The writable handle of the store at `path`, on `file`, with its sums.
fn open_writable(
    path: &Path,
    file: Box<dyn crate::storage::StorageFile>,
    sums: &Arc<PageSums>,
) -> Result<redb::Database> {
    let opened = guarded(path, "open", || {
        redb::Database::builder()
            .set_cache_size(STATE_CACHE_BYTES)
            .create_with_backend(RedbBackend::with_sums(file, Arc::clone(sums)))
    });
    opened.map_err(|e| sums.corrupt_or(e))
}

impl Drop for StateStore {
    fn drop(&mut self) {
        // The shared read (if no reader holds it, and none can: the engine
        // is gone) ends before the database closes.
        self.forget_shared_read();
        // A store that never committed closes its read-only handle, which
        // writes nothing (and leaves the sums file as the open found it).
        let read_only = self
            .era
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(read_only);
        let Some(db) = self.db.take() else {
            return;
        };
        // redb's close commits its allocator state, walking the pages that
        // made it panic: a second panic while unwinding from the first
        // aborts the process, past any guard; and after a failed page check
        // it would write redb's in-memory repair back. The handle is let go
        // unclosed instead, as a crash would leave it; the log holds every
        // record, and the next open checks the pages again. A refused
        // store's handle is freed so; one redb panicked in is kept until
        // the process ends (`abandon`).
        if self.has_panicked() || self.refused {
            self.abandon(db);
        } else {
            drop_guarded(db);
        }
    }
}

/// Records `last` as the applied LSN, and the schema version, in `txn`.
fn record_meta(txn: &WriteTransaction, last: Lsn) -> std::result::Result<(), redb::Error> {
    let mut meta = txn.open_table(META_TABLE)?;
    meta.insert(APPLIED_LSN_KEY, last.0)?;
    // In every commit rather than in one of its own at creation: the meta
    // table is written here anyway, and every commit that makes a table
    // records the version beside it.
    meta.insert(SCHEMA_VERSION_KEY, STATE_SCHEMA_VERSION)?;
    Ok(())
}

/// Creates an empty store at `path` through a temporary file and a rename.
fn create(storage: &Arc<dyn Storage>, path: &Path) -> Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    let mut temp_name = path.as_os_str().to_owned();
    temp_name.push(".creating");
    let temp = PathBuf::from(temp_name);
    // Whatever an interrupted creation left is not a store: start over.
    if storage
        .exists(&temp)
        .map_err(|e| Error::io("look for state store temp", &temp, e))?
    {
        storage
            .remove_file(&temp)
            .map_err(|e| Error::io("remove state store temp", &temp, e))?;
    }
    let file = storage
        .open(&temp, OpenMode::CreateNew)
        .map_err(|e| Error::io("create state store", &temp, e))?;
    let db = guarded(&temp, "create", || {
        redb::Database::builder().create_with_backend(RedbBackend::new(file))
    })?;
    // redb's drop writes a clean header but cannot report a failed sync;
    // sync again ourselves so only a durable store is renamed into place.
    drop_guarded(db);
    storage
        .open(&temp, OpenMode::Existing)
        .and_then(|file| file.sync_data())
        .map_err(|e| Error::io("sync new state store", &temp, e))?;
    storage
        .rename(&temp, path)
        .map_err(|e| Error::io("install state store", path, e))?;
    storage
        .sync_dir(parent)
        .map_err(|e| Error::io("sync directory", parent, e))?;
    Ok(())
}

/// Refuses a store whose schema version this build does not know. A store
/// without one has never been committed to (it holds no tables), or was
/// written before the version was recorded, in the layout that became
/// version 1.
fn check_schema_version(txn: &ReadTransaction, path: &Path) -> Result<()> {
    let found = read_meta(txn, path, SCHEMA_VERSION_KEY, "read schema version")?.unwrap_or(1);
    if STATE_SCHEMA_VERSIONS_READ.contains(&found) {
        return Ok(());
    }
    let supported = u32::try_from(STATE_SCHEMA_VERSION).expect("a small version");
    match u32::try_from(found) {
        Ok(found) => Err(Error::UnsupportedFormat {
            file: path.to_path_buf(),
            found,
            supported,
        }),
        Err(_) => Err(Error::corrupt(
            path,
            0,
            format!("the state store's schema version {found} is not one any build writes"),
        )),
    }
}

impl StateStore {
    /// The counters the last checkpoint stored (`metric.NAME` keys of the
    /// meta table), by name without the prefix; empty for a store no
    /// checkpoint wrote them to.
    pub fn read_metrics(&self) -> Result<BTreeMap<String, u64>> {
        let read = self.own_read()?;
        let txn = read.txn();
        guarded(&self.path, "read metrics", || {
            let meta = match txn.open_table(META_TABLE) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(BTreeMap::new()),
                Err(e) => return Err(redb::Error::from(e)),
            };
            let mut found = BTreeMap::new();
            for row in meta.range(METRIC_KEY_PREFIX..)? {
                let (key, value) = row?;
                let Some(name) = key.value().strip_prefix(METRIC_KEY_PREFIX) else {
                    break;
                };
                found.insert(name.to_string(), value.value());
            }
            Ok::<_, redb::Error>(found)
        })
    }
}

/// Stores `metrics` (name, total) under `metric.NAME` in `txn`'s meta table.
pub fn write_metrics(txn: &WriteTransaction, path: &Path, metrics: &[(&str, u64)]) -> Result<()> {
    guarded(path, "write metrics", || {
        let mut meta = txn.open_table(META_TABLE)?;
        for (name, value) in metrics {
            meta.insert(format!("{METRIC_KEY_PREFIX}{name}").as_str(), *value)?;
        }
        Ok::<(), redb::Error>(())
    })
}

fn read_applied_lsn(txn: &ReadTransaction, path: &Path) -> Result<Lsn> {
    let applied = read_meta(txn, path, APPLIED_LSN_KEY, "read applied lsn")?;
    Ok(Lsn(applied.unwrap_or(0)))
}

/// The value under `key` in the meta table; `None` if the table or the key
/// is not there (a store never committed to).
fn read_meta(
    txn: &ReadTransaction,
    path: &Path,
    key: &str,
    op: &'static str,
) -> Result<Option<u64>> {
    guarded(path, op, || {
        let meta = match txn.open_table(META_TABLE) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(redb::Error::from(e)),
        };
        Ok(meta.get(key)?.map(|v| v.value()))
    })
}

/// Any redb error, naming the state file and what was being done.
pub(crate) fn state_error(
    path: &Path,
    op: &'static str,
    error: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::StateStore {
        file: path.to_path_buf(),
        op,
        source: Box::new(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::FsStorage;

    const KV: TableDefinition<u64, u64> = TableDefinition::new("kv");

    #[test]
    fn a_state_store_error_keeps_redbs_error_as_its_typed_source() {
        let redb = redb::StorageError::Corrupted("page 7 is not a page".into());
        let error = state_error(Path::new("/db/state.redb"), "read run", redb);
        let message = error.to_string();
        assert!(message.contains("/db/state.redb") && message.contains("read run"));
        let source = std::error::Error::source(&error).expect("a source");
        let found = source.downcast_ref::<redb::StorageError>().expect("redb's own type");
        assert!(found.to_string().contains("page 7"), "{found}");
    }

    fn put(txn: &WriteTransaction, key: u64, value: u64) -> Result<()> {
        let mut table = txn.open_table(KV).expect("table");
        table.insert(key, value).expect("insert");
        Ok(())
    }

    #[test]
    fn applied_lsn_survives_only_through_a_checkpoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.redb");
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        {
            let store = StateStore::open(&storage, &path, PageCheck::AtOpen).expect("open");
            assert_eq!(store.applied_lsn(), Lsn::ZERO);
            store.apply(Lsn(1), |t| put(t, 1, 10)).expect("apply 1");
            store.apply(Lsn(2), |t| put(t, 2, 20)).expect("apply 2");
            assert_eq!(store.checkpoint().expect("checkpoint"), Lsn(2));
            store.apply(Lsn(3), |t| put(t, 3, 30)).expect("apply 3");
            assert_eq!(store.applied_lsn(), Lsn(3));
            assert_eq!(store.durable_lsn(), Lsn(2));
        }
        // Dropping redb flushes it cleanly, so the reopened store may cover
        // lsn 3 as well; what it must never do is cover less than lsn 2.
        let store = StateStore::open(&storage, &path, PageCheck::AtOpen).expect("reopen");
        assert!(store.applied_lsn() >= Lsn(2));
        let txn = store.read().expect("read");
        let table = txn.open_table(KV).expect("kv");
        assert_eq!(table.get(2).expect("get").map(|v| v.value()), Some(20));
    }

    #[test]
    fn a_group_of_records_is_one_transaction_covering_its_last_lsn() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        let path = dir.path().join("g.redb");
        let store = StateStore::open(&storage, &path, PageCheck::Off).expect("open");
        store.apply(Lsn(1), |t| put(t, 1, 10)).expect("apply 1");
        store
            .apply_group(Lsn(2), Lsn(4), |t| {
                put(t, 2, 20)?;
                put(t, 3, 30)?;
                put(t, 4, 40)
            })
            .expect("apply 2..=4");
        assert_eq!(store.applied_lsn(), Lsn(4));
        assert_eq!(store.checkpoint().expect("checkpoint"), Lsn(4));
        drop(store);
        let store = StateStore::open(&storage, &path, PageCheck::AtOpen).expect("reopen");
        assert_eq!(store.applied_lsn(), Lsn(4));
        let txn = store.read().expect("read");
        let table = txn.open_table(KV).expect("kv");
        assert_eq!(table.get(4).expect("get").map(|v| v.value()), Some(40));
    }

    /// A store with `rows` rows `k -> MARK + k`, closed cleanly.
    const MARK: u64 = 0x5eed_f00d_0000_0000;

    fn store_with_rows(storage: &Arc<dyn Storage>, path: &Path, rows: u64) {
        let store = StateStore::open(storage, path, PageCheck::AtOpen).expect("open");
        assert_eq!(store.checked_at_open(), CheckedAtOpen::Whole, "a new store");
        store
            .apply(Lsn(1), |t| {
                for k in 0..rows {
                    put(t, k, MARK + k)?;
                }
                Ok(())
            })
            .expect("apply");
        store.checkpoint().expect("checkpoint");
    }

    fn read_all(store: &StateStore, rows: u64) -> Result<()> {
        let txn = store.read()?;
        let table = txn
            .open_table(KV)
            .map_err(|e| state_error(store.path(), "open kv", e))?;
        for k in 0..rows {
            let value = table
                .get(k)
                .map_err(|e| state_error(store.path(), "get", e))?
                .map(|v| v.value());
            assert_eq!(value, Some(MARK + k));
        }
        Ok(())
    }

    #[test]
    fn after_a_clean_close_pages_are_checked_as_read_and_after_a_crash_all_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        let path = dir.path().join("state.redb");
        store_with_rows(&storage, &path, 2_000);
        let store = StateStore::open(&storage, &path, PageCheck::AtOpen).expect("reopen");
        assert_eq!(store.checked_at_open(), CheckedAtOpen::AsRead);
        read_all(&store, 2_000).expect("every row reads back");
        let (known, blocks) = store.known_blocks();
        assert!(known > 0 && known <= blocks, "{known} of {blocks}");
        store.apply(Lsn(2), |t| put(t, 5, MARK + 5)).expect("apply");
        // A crash: the handle is never closed.
        std::mem::forget(store);
        let store = StateStore::open(&storage, &path, PageCheck::AtOpen).expect("after a crash");
        assert_eq!(store.checked_at_open(), CheckedAtOpen::Whole);
        read_all(&store, 2_000).expect("rows");
        drop(store);
        let store = StateStore::open(&storage, &path, PageCheck::Whole).expect("asked for all");
        assert_eq!(store.checked_at_open(), CheckedAtOpen::Whole);
        drop(store);
        let store = StateStore::open(&storage, &path, PageCheck::Off).expect("off");
        assert_eq!(
            store.checked_at_open(),
            CheckedAtOpen::Unchecked,
            "off is off, though reads are checked against the sums"
        );
        drop(store);
        // An open with the check off and no sums vouches for nothing: the
        // next open checks the whole store again.
        std::fs::write(sums_path(&path), b"").expect("lose the sums");
        drop(StateStore::open(&storage, &path, PageCheck::Off).expect("off"));
        let store = StateStore::open(&storage, &path, PageCheck::AtOpen).expect("at open");
        assert_eq!(store.checked_at_open(), CheckedAtOpen::Whole);
    }

    #[test]
    fn damage_at_rest_after_a_clean_close_is_refused_at_the_first_read_naming_its_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        let path = dir.path().join("state.redb");
        store_with_rows(&storage, &path, 2_000);
        // Damage every copy of row 1,234's value in the file.
        let mut bytes = std::fs::read(&path).expect("read the store");
        let needle = (MARK + 1_234).to_le_bytes();
        let at = bytes
            .windows(8)
            .enumerate()
            .filter(|(_, w)| *w == needle)
            .map(|(i, _)| i)
            .collect::<Vec<_>>();
        assert!(!at.is_empty(), "the value is in the file");
        for &i in &at {
            bytes[i] ^= 0x40;
        }
        std::fs::write(&path, &bytes).expect("damage");
        let store = StateStore::open(&storage, &path, PageCheck::AtOpen).expect("no whole check");
        assert_eq!(store.checked_at_open(), CheckedAtOpen::AsRead);
        let err = read_all(&store, 2_000).expect_err("the damaged row is refused, not misread");
        let message = err.to_string();
        assert!(message.contains("state.redb"), "{message}");
        assert!(
            message.contains("does not match the checksum kept for it"),
            "{message}"
        );
        let offset = (at[0] as u64 / 4096) * 4096;
        let named = at
            .iter()
            .any(|&i| message.contains(&format!("offset {}", (i as u64 / 4096) * 4096)));
        assert!(named, "names the damaged block (e.g. offset {offset}): {message}");
        drop(store);
        // The mismatch kept the sums from being written back: the next
        // open checks the whole store and refuses it.
        let Err(err) = StateStore::open(&storage, &path, PageCheck::AtOpen) else {
            panic!("refused at open");
        };
        assert!(matches!(err, Error::Corrupt { .. } | Error::StateStore { .. }), "{err}");
    }

    /// How many of this process's open files are `path` (Linux's
    /// `/proc/self/fd`).
    #[cfg(target_os = "linux")]
    fn open_files(path: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .expect("list open files")
            .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
            .filter(|target| target == path)
            .count()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_refused_store_is_let_go_its_file_closed_and_its_damage_left_as_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        let path = dir.path().join("state.redb");
        store_with_rows(&storage, &path, 2_000);
        assert_eq!(open_files(&path), 0, "closed cleanly");
        // A row's value damaged, and no sums: the open's whole check is
        // redb's own, which finds the damage (not an I/O error).
        let mut bytes = std::fs::read(&path).expect("read the store");
        let needle = (MARK + 1_234).to_le_bytes();
        for i in 0..bytes.len() - 8 {
            if bytes[i..i + 8] == needle {
                bytes[i] ^= 0x40;
            }
        }
        std::fs::write(&path, &bytes).expect("damage");
        std::fs::write(sums_path(&path), b"").expect("lose the sums");
        let Err(err) = StateStore::open(&storage, &path, PageCheck::AtOpen) else {
            panic!("the damage is found at open");
        };
        assert!(
            matches!(err, Error::Corrupt { .. } | Error::StateStore { .. }),
            "{err}"
        );
        // Let go, not kept: its file is closed (it stayed open for the
        // process's life while refused handles were kept).
        assert_eq!(open_files(&path), 0, "the refused handle was freed");
        // And nothing redb repaired in memory was written back: the next
        // open finds the same damage.
        assert!(
            StateStore::open(&storage, &path, PageCheck::AtOpen).is_err(),
            "still refused"
        );
        assert_eq!(open_files(&path), 0, "freed again");
    }

    fn set_schema_version(storage: &Arc<dyn Storage>, path: &Path, version: Option<u64>) {
        let file = storage.open(path, OpenMode::Existing).expect("open");
        let db = redb::Database::builder()
            .create_with_backend(RedbBackend::new(file))
            .expect("redb");
        let txn = db.begin_write().expect("begin write");
        {
            let mut meta = txn.open_table(META_TABLE).expect("meta");
            match version {
                Some(version) => meta.insert(SCHEMA_VERSION_KEY, version).map(|_| ()),
                None => meta.remove(SCHEMA_VERSION_KEY).map(|_| ()),
            }
            .expect("edit schema version");
        }
        txn.commit().expect("commit");
    }

    #[test]
    fn a_store_records_its_schema_version_and_another_one_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        let path = dir.path().join("state.redb");
        {
            let store = StateStore::open(&storage, &path, PageCheck::AtOpen).expect("create");
            store.apply(Lsn(1), |t| put(t, 1, 10)).expect("apply 1");
            store.checkpoint().expect("checkpoint");
        }
        {
            let file = storage.open(&path, OpenMode::Existing).expect("open");
            let db = redb::Database::builder()
                .create_with_backend(RedbBackend::new(file))
                .expect("redb");
            let txn = db.begin_read().expect("read");
            let meta = txn.open_table(META_TABLE).expect("meta");
            let version = meta
                .get(SCHEMA_VERSION_KEY)
                .expect("get")
                .map(|v| v.value());
            assert_eq!(version, Some(STATE_SCHEMA_VERSION));
        }
        set_schema_version(&storage, &path, Some(16));
        let err = StateStore::open(&storage, &path, PageCheck::AtOpen).expect_err("version 16");
        assert!(
            matches!(
                &err,
                Error::UnsupportedFormat { file, found: 16, supported: 15 } if file == &path
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("this build reads version 15"),
            "{err}"
        );
        set_schema_version(&storage, &path, Some(u64::MAX));
        let err = StateStore::open(&storage, &path, PageCheck::AtOpen).expect_err("garbage");
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        // A store from before the version was recorded is version 1, which
        // this build still opens (it lacks only the wait and budget books
        // tables), and so is version 2 (it lacks the budget books table).
        set_schema_version(&storage, &path, None);
        StateStore::open(&storage, &path, PageCheck::AtOpen).expect("no version recorded");
        for version in STATE_SCHEMA_VERSIONS_READ {
            set_schema_version(&storage, &path, Some(version));
            StateStore::open(&storage, &path, PageCheck::AtOpen).expect("an older version opens");
        }
    }

    #[test]
    #[should_panic(expected = "records are applied in LSN order")]
    fn a_group_that_skips_an_lsn_is_a_bug() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        let store = StateStore::open(&storage, &dir.path().join("s.redb"), PageCheck::Off).expect("open");
        let _ = store.apply_group(Lsn(2), Lsn(3), |_| Ok(()));
    }

    #[test]
    #[should_panic(expected = "records are applied in LSN order")]
    fn applying_out_of_order_is_a_bug() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        let store = StateStore::open(&storage, &dir.path().join("s.redb"), PageCheck::Off).expect("open");
        let _ = store.apply(Lsn(2), |_| Ok(()));
    }
}

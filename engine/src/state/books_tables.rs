//! The agent's books as redb tables, and [`RedbBooks`]: a view of one redb
//! transaction that implements [`BooksRead`] (and, over a write transaction,
//! `BooksWrite`), so the engine runs the very same `decide` and `apply` over
//! redb that the unit tests run over `MemBooks`.
//!
//! Layout (`rows.rs`): every value is a checksummed row holding the postcard
//! encoding of the books type named by its table; keys are the values' own
//! ids, as tuples, so redb's key order equals `MemBooks`' `BTreeMap` order
//! (`&str` orders bytewise, like `String`). A step's latest attempt and a
//! run's newest checkpoint are the last key of a range.
//!
//! **Invariant:** the books traits cannot return errors, so a failed redb
//! read or an undecodable value is recorded in the view (the read answers
//! "absent") and [`RedbBooks::finish`] returns it: the engine calls `finish`
//! after every decide and apply and refuses the result if anything failed,
//! so a storage error is never mistaken for an empty table.

use std::cell::{Cell, RefCell};
use std::sync::OnceLock;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use redb::{
    Key, ReadOnlyTable, ReadTransaction, ReadableTable, Table, TableDefinition, TableHandle, Value,
    WriteTransaction,
};
use serde::de::DeserializeOwned;

use super::rows::{
    AUDIT_TABLE, BLOB_HOLDERS_TABLE, BLOB_REFS_TABLE, BLOBS_TABLE, BUDGETS_TABLE,
    CHECKPOINTS_TABLE, DECISIONS_TABLE, EFFECTS_TABLE, ENDED_TABLE, LIVE_CLAIMS_TABLE,
    LIVE_RUNS_TABLE, LiveClaim, RESOURCES_TABLE, RUNS_TABLE, RowTable, SAGAS_TABLE, SHARED_TABLE,
    WAITS_TABLE, decode_audit_row, decode_row, effect_kind_code, effect_row_key,
};
use super::blob_stream::{
    BLOB_CHUNKS_TABLE, BLOB_INDEX_TABLE, BLOB_STREAM_TABLE, BlobLookup, BlobReader, BlobWriter,
};
use super::guard::{drop_guarded, guard};
use super::store::state_error;
use crate::books::{
    AuditEntry, BlobRefs, BooksRead, BudgetBook, CheckpointMeta, DecisionRecord, Digest,
    EffectEntry, EffectKey, EffectKind, ResourceBook, ResourceId, Run, RunId, SagaBook,
    SharedEntry, SharedKeyId, StepId, WaitBook,
};
use crate::error::{Error, Result};

/// The transaction a view reads (and maybe writes) through.
pub(crate) enum Txn<'a> {
    Read(&'a ReadTransaction),
    Write(&'a WriteTransaction),
}

/// The books in one redb transaction (see the module docs).
pub struct RedbBooks<'a> {
    pub(crate) txn: Txn<'a>,
    pub(crate) path: &'a Path,
    pub(crate) error: RefCell<Option<Error>>,
    /// The audit length of each run read or written through this view:
    /// a checkpoint appends many entries per run, and each append checks
    /// its sequence number, so the length is read from the table once.
    pub(crate) audit_lens: RefCell<BTreeMap<RunId, u64>>,
    /// The blob references of each run asked about through this view, as
    /// read: a checkpoint asks about a run's at every save it replays, and
    /// the row holds every blob the run ever referenced. Forgotten when
    /// this view writes a run's references.
    pub(crate) blob_refs_read: RefCell<BTreeMap<RunId, Option<BlobRefs>>>,
    /// A write view's run rows as read: a checkpoint's replay reads a
    /// run's row at nearly every op it applies to the run, and the row is
    /// the same until this view writes it. Forgotten when this view writes
    /// or deletes a run. (A read view keeps none: it is made per read.)
    pub(crate) runs_read: RefCell<BTreeMap<RunId, Option<Run>>>,
    /// Run rows this view read from its table (what `runs_read` saves).
    pub(crate) run_rows_read: Cell<u64>,
    /// A write view's open tables, made on its first write or read (a read
    /// view opens none: the tables are large, and a cold read makes a view).
    pub(crate) tables: RefCell<Option<Box<OpenTables<'a>>>>,
    /// A read view's tables, kept open by its owner across many views of
    /// one read transaction ([`RedbBooks::reader_keeping`]); `None`: each
    /// read opens its table.
    pub(crate) read_tables: Option<&'a ReadTables>,
    /// Ledger keys a checkpoint's write view answers "absent" for without
    /// a lookup ([`RedbBooks::writer_of_fresh`]).
    pub(crate) fresh_effects: Option<&'a BTreeSet<&'a EffectKey>>,
    /// The planted `CleanerLosesMoves` (set by a checkpoint's writer).
    pub(crate) cleaner_loses_moves: bool,
    /// The planted `StaleLiveClaims` (set by a checkpoint's writer).
    pub(crate) stale_live_claims: bool,
}

/// Opens `$def` in the view's transaction (a write view keeps it open in
/// `$slot` of its [`OpenTables`]) and evaluates `$body` (a
/// `Result<_, redb::StorageError>`) with the table bound to `$t`. Yields
/// `Some(value)`, or `None` if the table does not exist yet (a read
/// transaction) or something failed (recorded in the view).
macro_rules! with_table {
    ($view:expr, $def:expr => $slot:ident, $op:expr, |$t:ident| $body:expr) => {{
        let view: &RedbBooks<'_> = $view;
        let outcome = guard(view.path, $op, || -> std::result::Result<Option<_>, redb::Error> {
            match view.txn {
                Txn::Read(txn) => match view.read_tables {
                    Some(kept) => match read_in(txn, &kept.$slot, $def) {
                        Ok(Some(table)) => {
                            let $t = table;
                            ($body).map(Some).map_err(redb::Error::from)
                        }
                        Ok(None) => Ok(None),
                        Err(e) => Err(redb::Error::from(e)),
                    },
                    None => match txn.open_table($def) {
                        Ok(table) => {
                            let $t = &table;
                            ($body).map(Some).map_err(redb::Error::from)
                        }
                        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
                        Err(e) => Err(redb::Error::from(e)),
                    },
                },
                Txn::Write(txn) => {
                    let mut tables = view.tables.borrow_mut();
                    let tables = tables.get_or_insert_with(Box::default);
                    match open_in(txn, &mut tables.$slot, $def) {
                        Ok(table) => {
                            let $t = &*table;
                            ($body).map(Some).map_err(redb::Error::from)
                        }
                        Err(e) => Err(redb::Error::from(e)),
                    }
                }
            }
        });
        view.settle(outcome, $op)
    }};
}

/// Reads the row at `$key` of a table keyed by name (`$op` names the read
/// in an error), decodes it as `$table` (`$what`, in a `Corrupt` error),
/// and checks with `$named` that the row is the one its key names (`$row`,
/// in the mismatch error): `None` if there is no such row or it fails.
macro_rules! named_row {
    (
        $view:expr, $def:expr => $slot:ident, $op:expr, $key:expr,
        $table:expr, $what:expr, $row:expr, |$value:ident: $ty:ty| $named:expr
    ) => {{
        let view: &RedbBooks<'_> = $view;
        let bytes = with_table!(view, $def => $slot, $op, |t| t
            .get($key)
            .map(|g| g.map(|v| v.value().to_vec())))
        .flatten()?;
        let $value: $ty = view.decode($table, &bytes, || $what)?;
        let same = $named;
        view.keyed($value, same, || $row)
    }};
}

impl RedbBooks<'_> {
    /// What `answer` makes of `read()`, kept in `cache` under `run` so the
    /// row is read once until this view writes the run (each writer
    /// forgets its entry). A failed read, recorded in the view, is not
    /// kept.
    fn remembered<T, R>(
        &self,
        cache: &RefCell<BTreeMap<RunId, T>>,
        run: &RunId,
        read: impl FnOnce() -> T,
        answer: impl FnOnce(&T) -> R,
    ) -> R {
        if let Some(known) = cache.borrow().get(run) {
            return answer(known);
        }
        let value = read();
        let answered = answer(&value);
        if self.error.borrow().is_none() {
            cache.borrow_mut().insert(run.clone(), value);
        }
        answered
    }

    /// The row of run `id`, read from its table.
    fn run_row(&self, id: &RunId) -> Option<Run> {
        self.run_rows_read.set(self.run_rows_read.get() + 1);
        named_row!(self, RUNS_TABLE => runs, "read run", id.as_str(),
            RowTable::Run, format!("run {id}"), format!("the row of run {id}"),
            |run: Run| run.id == *id)
    }
}

impl RedbBooks<'_> {
    /// `read` over the view's blob tables (the blob stream's, and the
    /// blobs table of a store written before schema 13; the stream's
    /// chunks only if `chunks`): `None` if it failed (recorded in the
    /// view).
    pub(crate) fn with_blobs<T>(
        &self,
        op: &'static str,
        chunks: bool,
        read: impl FnOnce(&dyn BlobLookup) -> std::result::Result<T, redb::Error>,
    ) -> Option<T> {
        let outcome = guard(self.path, op, || -> std::result::Result<Option<T>, redb::Error> {
            match self.txn {
                Txn::Read(txn) => match self.read_tables {
                    Some(kept) => {
                        let reader = BlobReader {
                            index: read_in(txn, &kept.blob_index, BLOB_INDEX_TABLE)?,
                            chunks: match chunks {
                                true => read_in(txn, &kept.blob_chunks, BLOB_CHUNKS_TABLE)?,
                                false => None,
                            },
                            old: read_in(txn, &kept.blobs, BLOBS_TABLE)?,
                        };
                        read(&reader).map(Some)
                    }
                    None => {
                        let index = open_if_there(txn, BLOB_INDEX_TABLE)?;
                        let chunks = match chunks {
                            true => open_if_there(txn, BLOB_CHUNKS_TABLE)?,
                            false => None,
                        };
                        let old = open_if_there(txn, BLOBS_TABLE)?;
                        let reader = BlobReader {
                            index: index.as_ref(),
                            chunks: chunks.as_ref(),
                            old: old.as_ref(),
                        };
                        let answer = read(&reader);
                        drop_guarded((index, chunks, old));
                        answer.map(Some)
                    }
                },
                Txn::Write(txn) => {
                    let mut tables = self.tables.borrow_mut();
                    let tables = tables.get_or_insert_with(Box::default);
                    if !chunks {
                        // A look-up needs only the index (and an older
                        // store's blobs table): a checkpoint makes one per
                        // stored argument it replays.
                        let old = has_old_blobs(txn, tables)?;
                        let index = &*open_in(txn, &mut tables.blob_index, BLOB_INDEX_TABLE)?;
                        let old = match old {
                            true => Some(&*open_in(txn, &mut tables.blobs, BLOBS_TABLE)?),
                            false => None,
                        };
                        let reader = BlobReader::<_, Table<'_, u64, &[u8]>, _> {
                            index: Some(index),
                            chunks: None,
                            old,
                        };
                        return read(&reader).map(Some);
                    }
                    let writer = blob_writer(txn, tables, false)?;
                    let reader = BlobReader {
                        index: Some(&*writer.index),
                        chunks: Some(&*writer.chunks),
                        old: writer.old.as_deref(),
                    };
                    read(&reader).map(Some)
                }
            }
        });
        self.settle(outcome, op)
    }
}

/// Whether `txn` holds the blobs table of a store written before schema
/// 13, asked once per view (opening it in a write transaction would make it).
fn has_old_blobs(
    txn: &WriteTransaction,
    tables: &mut OpenTables<'_>,
) -> std::result::Result<bool, redb::Error> {
    if let Some(known) = tables.old_blobs {
        return Ok(known);
    }
    let found = txn.list_tables()?.any(|t| t.name() == BLOBS_TABLE.name());
    tables.old_blobs = Some(found);
    Ok(found)
}

/// The table `def` of a read transaction, `None` if its snapshot has none.
pub(crate) fn open_if_there<K: Key + 'static, V: Value + 'static>(
    txn: &ReadTransaction,
    def: TableDefinition<K, V>,
) -> std::result::Result<Option<ReadOnlyTable<K, V>>, redb::TableError> {
    match txn.open_table(def) {
        Ok(table) => Ok(Some(table)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The blob tables of a write transaction, opened in `tables`: the blob
/// stream's (made if new) and, if the store has it, the blobs table of a
/// store written before schema 13 (never made: asked once per view).
pub(crate) fn blob_writer<'s, 'a>(
    txn: &'a WriteTransaction,
    tables: &'s mut OpenTables<'a>,
    loses_moves: bool,
) -> std::result::Result<BlobWriter<'s, 'a>, redb::Error> {
    let old = has_old_blobs(txn, tables)?;
    open_in(txn, &mut tables.blob_index, BLOB_INDEX_TABLE)?;
    open_in(txn, &mut tables.blob_chunks, BLOB_CHUNKS_TABLE)?;
    open_in(txn, &mut tables.blob_stream, BLOB_STREAM_TABLE)?;
    if old {
        open_in(txn, &mut tables.blobs, BLOBS_TABLE)?;
    }
    Ok(BlobWriter {
        index: tables.blob_index.as_mut().expect("opened above"),
        chunks: tables.blob_chunks.as_mut().expect("opened above"),
        counts: tables.blob_stream.as_mut().expect("opened above"),
        old: tables.blobs.as_mut(),
        loses_moves,
    })
}

impl Drop for RedbBooks<'_> {
    fn drop(&mut self) {
        // A write view's tables write their roots back into the
        // transaction as they close: through the guard, like every call.
        if let Some(tables) = self.tables.get_mut().take() {
            drop_guarded(tables);
        }
    }
}

/// A redb table of the books, opened once in a read transaction: `None`
/// inside when the table does not exist in that snapshot.
pub(crate) type ReadTable<K, V> = OnceLock<Option<ReadOnlyTable<K, V>>>;

/// The tables of one read transaction, each opened on its first read and
/// kept for every later view of the same transaction: a replay reads the
/// runs table once per created run, and redb's `open_table` costs more
/// than the lookup (docs/PERFORMANCE.md, "Open time after a crash"). A
/// read-only table is a snapshot of its transaction, so keeping it open
/// changes no answer. Drop it through `drop_guarded`, like every redb
/// handle. (`OnceLock`, not `OnceCell`: the engine's readers share one
/// transaction and its tables, `StateStore::shared_read`.)
#[derive(Default)]
pub(crate) struct ReadTables {
    runs: ReadTable<&'static str, &'static [u8]>,
    live_runs: ReadTable<&'static str, ()>,
    live_claims: ReadTable<&'static str, &'static [u8]>,
    effects: ReadTable<(&'static str, &'static str, u8, u32), &'static [u8]>,
    blobs: ReadTable<&'static [u8], &'static [u8]>,
    checkpoints: ReadTable<(&'static str, u64), &'static [u8]>,
    decisions: ReadTable<(&'static str, u64), &'static [u8]>,
    audit: ReadTable<(&'static str, u64), &'static [u8]>,
    waits: ReadTable<&'static str, &'static [u8]>,
    budgets: ReadTable<&'static str, &'static [u8]>,
    sagas: ReadTable<&'static str, &'static [u8]>,
    resources: ReadTable<&'static str, &'static [u8]>,
    shared: ReadTable<&'static str, &'static [u8]>,
    blob_holders: ReadTable<&'static [u8], u64>,
    blob_refs: ReadTable<&'static str, &'static [u8]>,
    ended: ReadTable<(u64, &'static str), ()>,
    blob_index: ReadTable<&'static [u8], u64>,
    blob_chunks: ReadTable<u64, &'static [u8]>,
}

/// The table `def` of `txn`, opened into `slot` the first time; `None` if
/// the snapshot has no such table. A failed open is not kept: the next read
/// tries again (and the view records the failure).
fn read_in<'s, K: Key + 'static, V: Value + 'static>(
    txn: &ReadTransaction,
    slot: &'s ReadTable<K, V>,
    def: TableDefinition<K, V>,
) -> std::result::Result<Option<&'s ReadOnlyTable<K, V>>, redb::TableError> {
    if let Some(kept) = slot.get() {
        return Ok(kept.as_ref());
    }
    let opened = match txn.open_table(def) {
        Ok(table) => Some(table),
        Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(e),
    };
    Ok(slot.get_or_init(|| opened).as_ref())
}

/// A redb table of the books, open in a write transaction.
pub(crate) type OpenTable<'a, K, V> = Option<Table<'a, K, V>>;

/// The tables a write view has opened, kept open until the view is
/// dropped: redb's `open_table` costs several times a lookup, and a
/// checkpoint reads and writes thousands of rows. (redb refuses to open a
/// table twice at once, so every read and write of the view goes through
/// these.)
#[derive(Default)]
pub(crate) struct OpenTables<'a> {
    pub(crate) runs: OpenTable<'a, &'static str, &'static [u8]>,
    pub(crate) live_runs: OpenTable<'a, &'static str, ()>,
    pub(crate) live_claims: OpenTable<'a, &'static str, &'static [u8]>,
    pub(crate) effects: OpenTable<'a, (&'static str, &'static str, u8, u32), &'static [u8]>,
    pub(crate) blobs: OpenTable<'a, &'static [u8], &'static [u8]>,
    pub(crate) checkpoints: OpenTable<'a, (&'static str, u64), &'static [u8]>,
    pub(crate) decisions: OpenTable<'a, (&'static str, u64), &'static [u8]>,
    pub(crate) audit: OpenTable<'a, (&'static str, u64), &'static [u8]>,
    pub(crate) waits: OpenTable<'a, &'static str, &'static [u8]>,
    pub(crate) budgets: OpenTable<'a, &'static str, &'static [u8]>,
    pub(crate) sagas: OpenTable<'a, &'static str, &'static [u8]>,
    pub(crate) resources: OpenTable<'a, &'static str, &'static [u8]>,
    pub(crate) shared: OpenTable<'a, &'static str, &'static [u8]>,
    pub(crate) blob_holders: OpenTable<'a, &'static [u8], u64>,
    pub(crate) blob_refs: OpenTable<'a, &'static str, &'static [u8]>,
    pub(crate) ended: OpenTable<'a, (u64, &'static str), ()>,
    pub(crate) blob_index: OpenTable<'a, &'static [u8], u64>,
    pub(crate) blob_chunks: OpenTable<'a, u64, &'static [u8]>,
    pub(crate) blob_stream: OpenTable<'a, &'static str, u64>,
    /// Whether the transaction holds the blobs table of a store written
    /// before schema 13 (asked once: opening it in a write transaction
    /// would make it).
    pub(crate) old_blobs: Option<bool>,
}

/// The table `def` of `txn`, opened into `slot` the first time.
pub(crate) fn open_in<'s, 'a, K: Key + 'static, V: Value + 'static>(
    txn: &'a WriteTransaction,
    slot: &'s mut OpenTable<'a, K, V>,
    def: TableDefinition<K, V>,
) -> std::result::Result<&'s mut Table<'a, K, V>, redb::TableError> {
    let table = match slot.take() {
        Some(table) => table,
        None => txn.open_table(def)?,
    };
    Ok(slot.insert(table))
}

impl<'a> RedbBooks<'a> {
    /// A read-only view of `txn`; `path` names the state file in errors.
    pub fn reader(txn: &'a ReadTransaction, path: &'a Path) -> RedbBooks<'a> {
        Self::read_view(txn, path, None)
    }

    /// A read-only view of `txn` that reads through `tables`, opened in
    /// `txn` (and only in it) and kept by the caller across views.
    pub(crate) fn reader_keeping(
        txn: &'a ReadTransaction,
        path: &'a Path,
        tables: &'a ReadTables,
    ) -> RedbBooks<'a> {
        Self::read_view(txn, path, Some(tables))
    }

    fn read_view(
        txn: &'a ReadTransaction,
        path: &'a Path,
        read_tables: Option<&'a ReadTables>,
    ) -> RedbBooks<'a> {
        RedbBooks {
            txn: Txn::Read(txn),
            path,
            error: RefCell::new(None),
            audit_lens: RefCell::new(BTreeMap::new()),
            blob_refs_read: RefCell::new(BTreeMap::new()),
            runs_read: RefCell::new(BTreeMap::new()),
            run_rows_read: Cell::new(0),
            tables: RefCell::new(None),
            read_tables,
            fresh_effects: None,
            cleaner_loses_moves: false,
            stale_live_claims: false,
        }
    }

    /// A read-write view of `txn`, for `apply`.
    pub fn writer(txn: &'a WriteTransaction, path: &'a Path) -> RedbBooks<'a> {
        RedbBooks {
            txn: Txn::Write(txn),
            path,
            error: RefCell::new(None),
            audit_lens: RefCell::new(BTreeMap::new()),
            blob_refs_read: RefCell::new(BTreeMap::new()),
            runs_read: RefCell::new(BTreeMap::new()),
            run_rows_read: Cell::new(0),
            tables: RefCell::new(None),
            read_tables: None,
            fresh_effects: None,
            cleaner_loses_moves: false,
            stale_live_claims: false,
        }
    }

    /// [`RedbBooks::writer`] for a checkpoint's records, which intend the
    /// ledger entries `fresh`: the view answers "absent" for each of them
    /// without a lookup. Each was intended on the hot books, which answer
    /// for the state store too, only after they found no entry under its
    /// key, so the state store (as the last checkpoint left it) holds none;
    /// the lookup was an empty read of a B-tree per intent.
    pub(crate) fn writer_of_fresh(
        txn: &'a WriteTransaction,
        path: &'a Path,
        fresh: &'a BTreeSet<&'a EffectKey>,
    ) -> RedbBooks<'a> {
        let mut books = RedbBooks::writer(txn, path);
        books.fresh_effects = Some(fresh);
        books
    }

    /// Ends the view: `Err` with the first failure any read or write met.
    pub fn finish(self) -> Result<()> {
        match self.error.take() {
            None => Ok(()),
            Some(error) => Err(error),
        }
    }

    /// Records `error` unless an earlier one is already recorded.
    pub(crate) fn fail(&self, error: Error) {
        let mut slot = self.error.borrow_mut();
        if slot.is_none() {
            *slot = Some(error);
        }
    }

    /// The value of a guarded call into redb (`None`: no table); a panic
    /// or an error is recorded in the view and answers `None`.
    pub(crate) fn settle<T>(
        &self,
        outcome: Result<std::result::Result<Option<T>, redb::Error>>,
        op: &'static str,
    ) -> Option<T> {
        match outcome {
            Ok(Ok(value)) => value,
            Ok(Err(reason)) => {
                self.fail(state_error(self.path, op, reason));
                None
            }
            Err(panicked) => {
                self.fail(panicked);
                None
            }
        }
    }

    /// Decodes a stored row of `table`, recording a `Corrupt` error if it
    /// is not one.
    pub(crate) fn decode<T: DeserializeOwned>(
        &self,
        table: RowTable,
        bytes: &[u8],
        what: impl FnOnce() -> String,
    ) -> Option<T> {
        match decode_row(table, bytes) {
            Ok(value) => Some(value),
            Err(e) => {
                self.fail(Error::corrupt(
                    self.path,
                    0,
                    format!("the stored {} is damaged: {e}", what()),
                ));
                None
            }
        }
    }

    /// `value` if its own key fields equal the key it was read under
    /// (`same`); otherwise records `Corrupt` naming both and answers
    /// `None`. A row's CRC covers its value, not its key, so a row moved
    /// under another key passes the CRC and only this catches it.
    pub(crate) fn keyed<T>(
        &self,
        value: T,
        same: bool,
        what: impl FnOnce() -> String,
    ) -> Option<T> {
        if same {
            return Some(value);
        }
        self.fail(Error::corrupt(
            self.path,
            0,
            format!("{} is stored under another key", what()),
        ));
        None
    }

    /// Every ledger entry of `run`, in key order (act attempts of each step,
    /// then its compensation's).
    pub fn effects_of(&self, run: &RunId) -> Vec<EffectEntry> {
        let r = run.as_str();
        let rows = with_table!(self, EFFECTS_TABLE => effects, "read a run's effects", |t| {
            t.range((r, "", 0u8, 0u32)..).and_then(|iter| {
                iter.map(|item| item.map(|(k, v)| (k.value().0 == r, v.value().to_vec())))
                    .take_while(|row| row.as_ref().map_or(true, |(same, _)| *same))
                    .map(|row| row.map(|(_, v)| v))
                    .collect::<std::result::Result<Vec<_>, _>>()
            })
        })
        .unwrap_or_default();
        rows.iter()
            .filter_map(|bytes| {
                let entry: EffectEntry =
                    self.decode(RowTable::Effect, bytes, || format!("effect of run {run}"))?;
                let same = entry.key.run() == run;
                self.keyed(entry, same, || format!("an effect read as run {run}'s"))
            })
            .collect()
    }

    /// Up to `max` runs with ids after `after` (all, if `None`), in id
    /// order.
    pub fn runs_after(&self, after: Option<&RunId>, max: usize) -> Vec<Run> {
        use std::ops::Bound;
        let from = after.map_or(Bound::Unbounded, |id| Bound::Excluded(id.as_str()));
        let rows = with_table!(self, RUNS_TABLE => runs, "list runs", |t| {
            t.range::<&str>((from, Bound::Unbounded)).and_then(|iter| {
                iter.take(max)
                    .map(|item| item.map(|(k, v)| (k.value().to_string(), v.value().to_vec())))
                    .collect::<std::result::Result<Vec<_>, _>>()
            })
        })
        .unwrap_or_default();
        rows.iter()
            .filter_map(|(key, bytes)| {
                let run: Run = self.decode(RowTable::Run, bytes, || format!("run {key}"))?;
                let same = run.id.as_str() == key;
                self.keyed(run, same, || format!("the row of run {key}"))
            })
            .collect()
    }

    /// The ids of the runs that are not terminal, as the live-runs table
    /// lists them.
    pub fn live_run_ids(&self) -> Vec<RunId> {
        let names = with_table!(self, LIVE_RUNS_TABLE => live_runs, "list live runs", |t| {
            t.iter().and_then(|iter| {
                iter.map(|item| item.map(|(k, _)| k.value().to_string()))
                    .collect::<std::result::Result<Vec<_>, _>>()
            })
        })
        .unwrap_or_default();
        names
            .into_iter()
            .filter_map(|name| match RunId::new(name) {
                Ok(id) => Some(id),
                Err(e) => {
                    self.fail(Error::corrupt(
                        self.path,
                        0,
                        format!("the live-runs table lists an invalid run id: {e}"),
                    ));
                    None
                }
            })
            .collect()
    }

    /// The runs the live-runs table lists, in id order, each with its row
    /// of the live claims table if it has one (a store written before
    /// schema 15 has none until the run's row is written again).
    pub(crate) fn live_run_claims(&self) -> Vec<(RunId, Option<LiveClaim>)> {
        let ids = self.live_run_ids();
        let mut claims: Vec<Option<LiveClaim>> = vec![None; ids.len()];
        // Both tables are in id order: one pass over each, each claim row
        // decoded where it lies (an open reads every one).
        with_table!(self, LIVE_CLAIMS_TABLE => live_claims, "list live claims", |t| {
            t.iter().and_then(|iter| {
                let mut at = 0;
                for item in iter {
                    let (key, value) = item?;
                    let key = key.value();
                    while ids.get(at).is_some_and(|id| id.as_str() < key) {
                        at += 1;
                    }
                    if let Some(slot) = claims.get_mut(at).filter(|_| ids[at].as_str() == key) {
                        *slot = self
                            .decode(RowTable::LiveClaim, value.value(), || {
                                format!("the live claim of run {key}")
                            })
                            .and_then(|claim: LiveClaim| {
                                let same = claim.run == key;
                                self.keyed(claim, same, || format!("the live claim row of run {key}"))
                            });
                        at += 1;
                    }
                }
                Ok(())
            })
        });
        ids.into_iter().zip(claims).collect()
    }

    /// Up to `max` runs that ended at or before `before_ms`, oldest first,
    /// passing over those `skip` names (the `books_ended` index: runs ended
    /// before it existed are not in it).
    pub fn ended_before(
        &self,
        before_ms: u64,
        max: usize,
        skip: impl Fn(&str) -> bool,
    ) -> Vec<RunId> {
        let names = with_table!(self, ENDED_TABLE => ended, "list ended runs", |t| {
            t.range((0u64, "")..=(before_ms, "~")).and_then(|iter| {
                let mut names = Vec::new();
                for item in iter {
                    let (key, _) = item?;
                    let name = key.value().1;
                    if !skip(name) {
                        names.push(name.to_string());
                        if names.len() == max {
                            break;
                        }
                    }
                }
                Ok(names)
            })
        })
        .unwrap_or_default();
        names
            .into_iter()
            .filter_map(|name| match RunId::new(name) {
                Ok(id) => Some(id),
                Err(e) => {
                    self.fail(Error::corrupt(
                        self.path,
                        0,
                        format!("the ended-runs index lists an invalid run id: {e}"),
                    ));
                    None
                }
            })
            .collect()
    }

    /// Every journaled decision of `run`, by position.
    pub fn decisions_of(&self, run: &RunId) -> Vec<DecisionRecord> {
        let r = run.as_str();
        let rows = with_table!(self, DECISIONS_TABLE => decisions, "read a run's decisions", |t| {
            t.range((r, 0u64)..=(r, u64::MAX)).and_then(|iter| {
                iter.map(|item| item.map(|(_, v)| v.value().to_vec()))
                    .collect::<std::result::Result<Vec<_>, _>>()
            })
        })
        .unwrap_or_default();
        rows.iter()
            .filter_map(|bytes| {
                let record: DecisionRecord =
                    self.decode(RowTable::Decision, bytes, || format!("decision of run {run}"))?;
                let same = record.run == *run;
                self.keyed(record, same, || format!("a decision read as run {run}'s"))
            })
            .collect()
    }

    /// The last (key's second half, value) of `run`'s range in `journal`.
    fn last_in(&self, journal: Journal, run: &RunId, op: &'static str) -> Option<(u64, Vec<u8>)> {
        match journal {
            Journal::Checkpoints => {
                with_table!(self, CHECKPOINTS_TABLE => checkpoints, op, |t| last_of(t, run))
            }
            Journal::Decisions => {
                with_table!(self, DECISIONS_TABLE => decisions, op, |t| last_of(t, run))
            }
            Journal::Audit => with_table!(self, AUDIT_TABLE => audit, op, |t| last_of(t, run)),
        }
        .flatten()
    }
}

/// The tables keyed by (run, a number growing per run).
#[derive(Clone, Copy, Debug)]
enum Journal {
    Checkpoints,
    Decisions,
    Audit,
}

/// The last (number, value) of `run`'s range in `table`.
fn last_of(
    table: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    run: &RunId,
) -> std::result::Result<Option<(u64, Vec<u8>)>, redb::StorageError> {
    let mut range = table.range((run.as_str(), 0u64)..=(run.as_str(), u64::MAX))?;
    match range.next_back() {
        None => Ok(None),
        Some(item) => item.map(|(k, v)| Some((k.value().1, v.value().to_vec()))),
    }
}

impl BooksRead for RedbBooks<'_> {
    fn run(&self, id: &RunId) -> Option<Run> {
        let Txn::Write(_) = self.txn else {
            return self.run_row(id);
        };
        self.remembered(&self.runs_read, id, || self.run_row(id), Clone::clone)
    }

    fn visit_claimable(&self, now_ms: u64, visit: &mut dyn FnMut(&Run) -> bool) {
        // A scan of every run: the engine decides on its hot books, which
        // keep an index; this serves tools reading a closed database.
        let all = with_table!(self, RUNS_TABLE => runs, "scan runs", |t| {
            t.iter().and_then(|iter| {
                iter.map(|item| item.map(|(_, v)| v.value().to_vec()))
                    .collect::<std::result::Result<Vec<_>, _>>()
            })
        })
        .unwrap_or_default();
        let mut claimable: Vec<(u64, Run)> = all
            .iter()
            .filter_map(|bytes| self.decode::<Run>(RowTable::Run, bytes, || "run (scan)".to_string()))
            .filter_map(|run| {
                let wake = crate::books::wake_ms(self.waits(&run.id).as_ref());
                crate::books::claimable_from_ms(&run, wake)
                    .filter(|from_ms| *from_ms <= now_ms)
                    .map(|from_ms| (from_ms, run))
            })
            .collect();
        claimable.sort_by(|(a, x), (b, y)| (a, &x.id).cmp(&(b, &y.id)));
        for (_, run) in &claimable {
            if !visit(run) {
                return;
            }
        }
    }

    fn effect(&self, key: &EffectKey) -> Option<EffectEntry> {
        if self.fresh_effects.is_some_and(|fresh| fresh.contains(key)) {
            return None;
        }
        let k = effect_row_key(key);
        let bytes = with_table!(self, EFFECTS_TABLE => effects, "read effect", |t| t
            .get(k)
            .map(|g| g.map(|v| v.value().to_vec())))
        .flatten()?;
        let entry: EffectEntry = self.decode(RowTable::Effect, &bytes, || format!("effect {key}"))?;
        let same = entry.key == *key;
        self.keyed(entry, same, || format!("the row of effect {key}"))
    }

    fn latest_effect(&self, run: &RunId, step: &StepId, kind: EffectKind) -> Option<EffectEntry> {
        let (r, s, k) = (run.as_str(), step.as_str(), effect_kind_code(kind));
        let bytes = with_table!(self, EFFECTS_TABLE => effects, "read latest effect", |t| {
            t.range((r, s, k, 0u32)..=(r, s, k, u32::MAX))
                .and_then(|mut range| match range.next_back() {
                    None => Ok(None),
                    Some(item) => item.map(|(_, v)| Some(v.value().to_vec())),
                })
        })
        .flatten()?;
        let entry: EffectEntry = self.decode(
            RowTable::Effect,
            &bytes,
            || format!("latest effect of {run}/{step}"),
        )?;
        let same = entry.key.run() == run && entry.key.step() == step && entry.key.kind() == kind;
        self.keyed(entry, same, || {
            format!("the latest {} row of {run}/{step}", kind.name())
        })
    }

    fn checkpoint_latest(&self, run: &RunId) -> Option<CheckpointMeta> {
        let (version, bytes) = self.last_in(Journal::Checkpoints, run, "read latest checkpoint")?;
        let meta: CheckpointMeta = self.decode(
            RowTable::Checkpoint,
            &bytes,
            || format!("latest checkpoint of run {run}"),
        )?;
        let same = meta.run == *run && meta.version == version;
        self.keyed(meta, same, || {
            format!("the row of checkpoint {version} of run {run}")
        })
    }

    fn checkpoint_at(&self, run: &RunId, version: u64) -> Option<CheckpointMeta> {
        let bytes = with_table!(self, CHECKPOINTS_TABLE => checkpoints, "read checkpoint", |t| t
            .get((run.as_str(), version))
            .map(|g| g.map(|v| v.value().to_vec())))
        .flatten()?;
        let meta: CheckpointMeta = self.decode(
            RowTable::Checkpoint,
            &bytes,
            || format!("checkpoint {version} of run {run}"),
        )?;
        let same = meta.run == *run && meta.version == version;
        self.keyed(meta, same, || {
            format!("the row of checkpoint {version} of run {run}")
        })
    }

    fn blob_exists(&self, digest: &Digest) -> bool {
        self.with_blobs("look up blob", false, |blobs| Ok(blobs.find(digest)?.is_some()))
            .unwrap_or(false)
    }

    fn blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        self.with_blobs("read blob", true, |blobs| blobs.read(digest)).flatten()
    }

    fn decision_at(&self, run: &RunId, position: u64) -> Option<DecisionRecord> {
        let bytes = with_table!(self, DECISIONS_TABLE => decisions, "read decision", |t| t
            .get((run.as_str(), position))
            .map(|g| g.map(|v| v.value().to_vec())))
        .flatten()?;
        let record: DecisionRecord = self.decode(
            RowTable::Decision,
            &bytes,
            || format!("decision {position} of run {run}"),
        )?;
        let same = record.run == *run && record.position == position;
        self.keyed(record, same, || {
            format!("the row of decision {position} of run {run}")
        })
    }

    fn decision_count(&self, run: &RunId) -> u64 {
        self.last_in(Journal::Decisions, run, "count decisions")
            .map_or(0, |(position, _)| position + 1)
    }

    fn audit_len(&self, run: &RunId) -> u64 {
        if let Some(len) = self.audit_lens.borrow().get(run) {
            return *len;
        }
        let len = self
            .last_in(Journal::Audit, run, "count audit entries")
            .map_or(0, |(seq, _)| seq);
        // A failed read answers 0 but proves nothing: not remembered.
        if self.error.borrow().is_none() {
            self.audit_lens.borrow_mut().insert(run.clone(), len);
        }
        len
    }

    fn audit(&self, run: &RunId, from_seq: u64) -> Vec<AuditEntry> {
        let r = run.as_str();
        // A row is keyed by its last entry's seq, so the first row at or
        // after `from_seq` is the one that holds it.
        let all = with_table!(self, AUDIT_TABLE => audit, "read audit", |t| {
            t.range((r, from_seq)..=(r, u64::MAX)).and_then(|iter| {
                iter.map(|item| item.map(|(k, v)| (k.value().1, v.value().to_vec())))
                    .collect::<std::result::Result<Vec<_>, _>>()
            })
        })
        .unwrap_or_default();
        let mut entries = Vec::new();
        for (seq, bytes) in &all {
            match decode_audit_row(bytes, *seq) {
                Ok(row) => entries.extend(row.into_iter().filter(|e| e.seq >= from_seq)),
                Err(e) => {
                    self.fail(Error::corrupt(
                        self.path,
                        0,
                        format!("the stored audit of run {run} (row {seq}) is damaged: {e}"),
                    ));
                    break;
                }
            }
        }
        entries
    }

    fn budget(&self, run: &RunId) -> Option<BudgetBook> {
        named_row!(self, BUDGETS_TABLE => budgets, "read budget book", run.as_str(),
            RowTable::Budgets, format!("budget book of run {run}"),
            format!("the row of the budget book of run {run}"),
            |book: BudgetBook| book.run == *run)
    }

    fn saga(&self, run: &RunId) -> Option<SagaBook> {
        named_row!(self, SAGAS_TABLE => sagas, "read saga book", run.as_str(),
            RowTable::Sagas, format!("saga book of run {run}"),
            format!("the row of the saga book of run {run}"),
            |book: SagaBook| book.run == *run)
    }

    fn resource(&self, resource: &ResourceId) -> Option<ResourceBook> {
        named_row!(self, RESOURCES_TABLE => resources, "read resource", resource.as_str(),
            RowTable::Resources, format!("resource {resource}"),
            format!("the row of resource {resource}"),
            |book: ResourceBook| book.resource == *resource)
    }

    fn shared(&self, key: &SharedKeyId) -> Option<SharedEntry> {
        named_row!(self, SHARED_TABLE => shared, "read shared key", key.as_str(),
            RowTable::Shared, format!("shared key {key}"),
            format!("the row of shared key {key}"),
            |entry: SharedEntry| entry.key == *key)
    }

    fn effects_of(&self, run: &RunId) -> Vec<EffectEntry> {
        RedbBooks::effects_of(self, run)
    }

    fn blob_holders(&self, digest: &Digest) -> Option<u64> {
        with_table!(self, BLOB_HOLDERS_TABLE => blob_holders, "read blob holders", |t| t
            .get(digest.0.as_slice())
            .map(|g| g.map(|v| v.value())))
        .flatten()
    }

    fn blob_refs(&self, run: &RunId) -> Option<BlobRefs> {
        named_row!(self, BLOB_REFS_TABLE => blob_refs, "read blob references", run.as_str(),
            RowTable::BlobRefs, format!("blob references of run {run}"),
            format!("the row of the blob references of run {run}"),
            |refs: BlobRefs| refs.run == *run)
    }

    fn blob_referenced(&self, run: &RunId, digest: &Digest) -> bool {
        self.remembered(
            &self.blob_refs_read,
            run,
            || self.blob_refs(run),
            |refs| refs.as_ref().is_some_and(|refs| refs.contains(digest)),
        )
    }

    fn waits(&self, run: &RunId) -> Option<WaitBook> {
        named_row!(self, WAITS_TABLE => waits, "read wait book", run.as_str(),
            RowTable::Waits, format!("wait book of run {run}"),
            format!("the row of the wait book of run {run}"),
            |book: WaitBook| book.run == *run)
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::{Digest, FencingToken, RunState};
    use crate::state::rows::encode_row;
    use redb::{ReadableDatabase, ReadableTableMetadata};

    fn run(name: &str) -> Run {
        Run {
            id: RunId::new(name).unwrap(),
            state: RunState::Pending,
            version: 1,
            input_digest: Digest([1; 32]),
            agent_version: "a".into(),
            trace_id: "t".into(),
            parent: None,
            created_ms: 1,
            updated_ms: 1,
            lease: None,
            next_token: FencingToken::FIRST,
        }
    }

    fn checkpoint(run: &str, version: u64) -> CheckpointMeta {
        CheckpointMeta {
            run: RunId::new(run).unwrap(),
            version,
            schema_version: 1,
            parts: Vec::new(),
            saved_ms: 1,
            token: FencingToken::FIRST,
        }
    }

    fn entry(seq: u64) -> AuditEntry {
        AuditEntry {
            seq,
            at_ms: 100 + seq,
            token: Some(FencingToken::FIRST),
            what: crate::books::AuditWhat::LeaseReleased,
            why: format!("line {seq}"),
        }
    }

    /// A checkpoint writes its new blobs to the stream in the order they
    /// were put, not by digest: the blobs of one save, and of a thread's
    /// saves one after another, lie side by side, so reading them back
    /// touches few chunks (docs/PERFORMANCE.md, "A resume's page reads").
    #[test]
    fn a_checkpoint_writes_its_blobs_to_the_stream_in_the_order_they_were_put() {
        use crate::books::{BooksWrite, Overlay, digest_of};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let db = redb::Database::create(&path).unwrap();
        // Ten blobs whose put order is not their digests' order.
        let blobs: Vec<(Digest, Vec<u8>)> = (0u8..10)
            .map(|k| vec![k; 100 + usize::from(k)])
            .map(|bytes| (digest_of(&bytes), bytes))
            .collect();
        let mut sorted: Vec<Digest> = blobs.iter().map(|(d, _)| *d).collect();
        sorted.sort();
        assert_ne!(
            sorted,
            blobs.iter().map(|(d, _)| *d).collect::<Vec<_>>(),
            "the test needs a put order other than the digest order"
        );
        let txn = db.begin_write().unwrap();
        {
            let books = RedbBooks::writer(&txn, &path);
            let mut overlay = Overlay::new(&books);
            for (digest, bytes) in &blobs {
                overlay.put_blob(*digest, bytes.clone());
            }
            // A blob put again, and one deleted and put again, keep their
            // first place.
            overlay.put_blob(blobs[2].0, blobs[2].1.clone());
            overlay.delete_blob(&blobs[5].0);
            overlay.put_blob(blobs[5].0, blobs[5].1.clone());
            books.put_writes(overlay.into_writes());
            books.finish().unwrap();
        }
        txn.commit().unwrap();
        let txn = db.begin_read().unwrap();
        let index = txn.open_table(BLOB_INDEX_TABLE).unwrap();
        let offsets: Vec<u64> = blobs
            .iter()
            .map(|(digest, _)| index.get(digest.0.as_slice()).unwrap().unwrap().value())
            .collect();
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "stream offsets in put order: {offsets:?}"
        );
        let view = RedbBooks::reader(&txn, &path);
        for (digest, bytes) in &blobs {
            assert_eq!(crate::books::BooksRead::blob(&view, digest).as_deref(), Some(bytes.as_slice()));
        }
        view.finish().unwrap();
    }

    /// A store written before schema 12 holds one row per audit entry
    /// (table 5); a checkpoint since writes one row per run (table 12)
    /// beside them. Both are read as one journal, from any seq, by the
    /// view, by a checkpoint's overlay and by the whole-books snapshot.
    #[test]
    fn audit_rows_of_one_entry_and_of_many_are_read_as_one_journal() {
        use crate::books::{BooksWrite, MemBooks, Overlay};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let db = redb::Database::create(&path).unwrap();
        let id = RunId::new("r1").unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut audit = txn.open_table(AUDIT_TABLE).unwrap();
            for seq in 1..=3 {
                let row = encode_row(RowTable::Audit, &entry(seq));
                audit.insert(("r1", seq), row.as_slice()).unwrap();
            }
        }
        // Two checkpoints' worth, through the checkpoint's own path.
        for appended in [4..=6, 7..=7] {
            let books = RedbBooks::writer(&txn, &path);
            let mut overlay = Overlay::new(&books);
            for seq in appended {
                overlay.push_audit(&id, entry(seq));
            }
            let writes = overlay.into_writes();
            books.put_writes(writes);
            books.finish().unwrap();
        }
        txn.commit().unwrap();
        let txn = db.begin_read().unwrap();
        let rows = txn.open_table(AUDIT_TABLE).unwrap().len().unwrap();
        assert_eq!(rows, 5, "three old rows, one per checkpoint since");

        let view = RedbBooks::reader(&txn, &path);
        assert_eq!(view.audit_len(&id), 7);
        for from in 0..=8 {
            let expected: Vec<_> = (from.max(1)..=7).map(entry).collect();
            assert_eq!(view.audit(&id, from), expected, "from {from}");
        }
        view.finish().unwrap();

        let snapshot = crate::state::books_snapshot::read_books(&txn, &path).unwrap();
        let mut reference = MemBooks::new();
        for seq in 1..=7 {
            reference.push_audit(&id, entry(seq));
        }
        assert_eq!(snapshot.audit(&id, 0), reference.audit(&id, 0));
    }

    /// A checkpoint's write view reads a run's row from its table once,
    /// and reads it again only after it wrote or deleted the run itself.
    #[test]
    fn a_write_view_reads_each_run_row_once_until_it_writes_the_run() {
        use crate::books::BooksWrite;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut runs = txn.open_table(RUNS_TABLE).unwrap();
            let row = encode_row(RowTable::Run, &run("r1"));
            runs.insert("r1", row.as_slice()).unwrap();
        }
        let (r1, r2) = (RunId::new("r1").unwrap(), RunId::new("r2").unwrap());
        let mut books = RedbBooks::writer(&txn, &path);
        for _ in 0..3 {
            assert_eq!(books.run(&r1), Some(run("r1")));
            assert_eq!(books.run(&r2), None);
        }
        assert_eq!(books.run_rows_read.get(), 2, "one read per run, absent or not");
        let mut moved = run("r1");
        moved.version = 2;
        books.put_run(moved.clone());
        assert_eq!(books.run(&r1), Some(moved));
        books.put_run(run("r2"));
        assert_eq!(books.run(&r2), Some(run("r2")));
        assert_eq!(books.run_rows_read.get(), 4, "a run it wrote is read again");
        books.delete_run(&r1);
        assert_eq!(books.run(&r1), None);
        books.put_writes(crate::books::Writes::default());
        assert_eq!(books.run(&r2), Some(run("r2")));
        assert_eq!(books.run_rows_read.get(), 6, "and after it wrote a batch of rows");
        books.finish().unwrap();
        txn.commit().unwrap();
        // A read view keeps no rows: each read goes to the table.
        let txn = db.begin_read().unwrap();
        let view = RedbBooks::reader(&txn, &path);
        assert_eq!(view.run(&r2), Some(run("r2")));
        assert_eq!(view.run(&r2), Some(run("r2")));
        assert_eq!(view.run_rows_read.get(), 2);
        view.finish().unwrap();
    }

    /// A row of entries stored under a seq other than its last entry's,
    /// or with a gap inside, is `Corrupt` naming the run and the row.
    #[test]
    fn an_audit_row_under_another_seq_or_with_a_gap_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let db = redb::Database::create(&path).unwrap();
        for (key, entries) in [(4, vec![entry(1), entry(2), entry(3)]), (3, vec![entry(1), entry(3)])] {
            let txn = db.begin_write().unwrap();
            {
                let mut audit = txn.open_table(AUDIT_TABLE).unwrap();
                audit.retain(|_, _| false).unwrap();
                let row = encode_row(RowTable::AuditChunk, &entries);
                audit.insert(("r1", key), row.as_slice()).unwrap();
            }
            txn.commit().unwrap();
            let txn = db.begin_read().unwrap();
            let view = RedbBooks::reader(&txn, &path);
            assert_eq!(view.audit(&RunId::new("r1").unwrap(), 1), Vec::new());
            let err = view.finish().unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
            let message = err.to_string();
            assert!(message.contains("audit of run r1 (row"), "{message}");
            let err = crate::state::books_snapshot::read_books(&txn, &path).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        }
    }

    #[test]
    fn a_row_under_another_key_is_corrupt_not_a_panic_or_an_answer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut runs = txn.open_table(RUNS_TABLE).unwrap();
            runs.insert("r2", encode_row(RowTable::Run, &run("r1")).as_slice())
                .unwrap();
            runs.insert("r1", encode_row(RowTable::Run, &run("r1")).as_slice())
                .unwrap();
            let mut checkpoints = txn.open_table(CHECKPOINTS_TABLE).unwrap();
            let row = encode_row(RowTable::Checkpoint, &checkpoint("r1", 1));
            checkpoints.insert(("r1", 2), row.as_slice()).unwrap();
        }
        txn.commit().unwrap();
        let txn = db.begin_read().unwrap();

        let view = RedbBooks::reader(&txn, &path);
        assert_eq!(view.run(&RunId::new("r1").unwrap()), Some(run("r1")));
        view.finish().unwrap();

        let view = RedbBooks::reader(&txn, &path);
        assert_eq!(view.run(&RunId::new("r2").unwrap()), None);
        let err = view.finish().unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(
            err.to_string().contains("stored under another key"),
            "{err}"
        );

        let view = RedbBooks::reader(&txn, &path);
        assert_eq!(view.checkpoint_latest(&RunId::new("r1").unwrap()), None);
        assert!(matches!(view.finish(), Err(Error::Corrupt { .. })));
    }
}

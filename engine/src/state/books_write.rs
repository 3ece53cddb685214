//! `BooksWrite` for [`RedbBooks`] over a write transaction: the puts that
//! `apply` makes, as redb inserts in the transaction `StateStore::apply`
//! commits together with the record's LSN.
//!
//! A checkpoint writes many records at once: [`RedbBooks::put_writes`]
//! takes what an overlay gathered from all of their ops (each row once, in
//! key order) and writes it with each table opened once, rather than
//! running every op's reads and puts against redb one by one.
//!
//! **Invariant:** a write through a read-only view is a bug (asserted); a
//! failed insert is recorded in the view and surfaces from
//! [`RedbBooks::finish`], so the transaction is dropped, not committed.

use std::path::Path;

use redb::{ReadableTable, WriteTransaction};

use super::books_tables::{OpenTables, RedbBooks, Txn, blob_writer, open_in};
use super::guard::guard;
use super::rows::{
    AUDIT_TABLE, BLOB_HOLDERS_TABLE, BLOB_REFS_TABLE, BUDGETS_TABLE,
    CHECKPOINTS_TABLE, DECISIONS_TABLE, EFFECTS_TABLE, ENDED_TABLE, LIVE_CLAIMS_TABLE,
    LIVE_RUNS_TABLE, LiveClaim,
    RESOURCES_TABLE, RUNS_TABLE, RowTable, SAGAS_TABLE, SHARED_TABLE, WAITS_TABLE, decode_row,
    effect_row_key, encode_audit_row, encode_row,
};
use crate::books::{
    AuditEntry, BlobRefs, BooksRead, BooksWrite, BudgetBook, CheckpointMeta, DecisionRecord,
    Digest, EffectEntry, ResourceBook, Run, RunId, SagaBook, SharedEntry, WaitBook, Writes,
};
use crate::sync::GiveWay;

impl<'a> RedbBooks<'a> {
    fn assert_writable(&self, what: &str) {
        assert!(
            matches!(self.txn, Txn::Write(_)),
            "{what} through a read-only view of the books"
        );
    }

    /// Runs `write` on the view's open tables, recording any failure.
    fn write_with(
        &self,
        op: &'static str,
        write: impl FnOnce(&'a WriteTransaction, &mut OpenTables<'a>) -> Result<(), redb::Error>,
    ) {
        let Txn::Write(txn) = self.txn else {
            panic!("{op} through a read-only view of the books");
        };
        let outcome = guard(self.path, op, || {
            let mut tables = self.tables.borrow_mut();
            write(txn, tables.get_or_insert_with(Box::default)).map(Some)
        });
        self.settle(outcome, op);
    }
}

impl RedbBooks<'_> {
    /// Writes everything `writes` holds, as `apply` of the ops that made
    /// it would have: runs (and the live-runs index), ledger entries, new
    /// blobs, checkpoint metadata, decisions, appended audit entries, wait
    /// and budget books. Each table is opened once and filled in key order.
    pub(crate) fn put_writes(&self, writes: Writes) {
        self.blob_refs_read.borrow_mut().clear();
        self.runs_read.borrow_mut().clear();
        let path = self.path;
        self.write_with("write a checkpoint's rows", |txn, tables| {
            let bugs = (self.cleaner_loses_moves, self.stale_live_claims);
            write_all(txn, tables, path, writes, bugs)
        });
    }
}

/// [`RedbBooks::put_writes`]'s inserts; the first failure stops them.
fn write_all<'a>(
    txn: &'a WriteTransaction,
    tables: &mut OpenTables<'a>,
    path: &Path,
    writes: Writes,
    (loses_moves, stale_claims): (bool, bool),
) -> Result<(), redb::Error> {
    let Writes {
        runs,
        effects,
        blobs,
        checkpoints,
        decisions,
        audit,
        waits,
        budgets,
        sagas,
        resources,
        shared,
        pruned,
        blobs_deleted,
        blob_holders,
        blob_refs,
        blob_refs_added,
    } = writes;
    let mut give_way = GiveWay::default();
    // Deletions first: a run pruned and then created again in these
    // records loses its old rows before its new ones are written.
    for run in &pruned {
        give_way.unit();
        delete_run_rows(txn, tables, run)?;
    }
    for digest in &blobs_deleted {
        give_way.unit();
        blob_writer(txn, tables, loses_moves)?.remove(digest)?;
    }
    for run in runs.values() {
        give_way.unit();
        put_run(txn, tables, run, stale_claims)?;
    }
    for entry in effects.values() {
        give_way.unit();
        let row = encode_row(RowTable::Effect, entry);
        let table = open_in(txn, &mut tables.effects, EFFECTS_TABLE)?;
        table.insert(effect_row_key(&entry.key), row.as_slice())?;
    }
    // In the order they were first put, not by digest: the blobs one save
    // wrote lie side by side in the stream, so a read of them touches few
    // of its chunks (docs/PERFORMANCE.md, "A resume's page reads").
    for (digest, bytes) in &blobs {
        give_way.unit();
        blob_writer(txn, tables, loses_moves)?.put(digest, bytes)?;
    }
    for meta in checkpoints.values() {
        give_way.unit();
        let row = encode_row(RowTable::Checkpoint, meta);
        let table = open_in(txn, &mut tables.checkpoints, CHECKPOINTS_TABLE)?;
        table.insert((meta.run.as_str(), meta.version), row.as_slice())?;
    }
    for record in decisions.values() {
        give_way.unit();
        let row = encode_row(RowTable::Decision, record);
        let table = open_in(txn, &mut tables.decisions, DECISIONS_TABLE)?;
        table.insert((record.run.as_str(), record.position), row.as_slice())?;
    }
    for (run, entries) in &audit {
        give_way.unit();
        put_audit(txn, tables, run, entries)?;
    }
    for book in waits.values() {
        give_way.unit();
        let row = encode_row(RowTable::Waits, book);
        let table = open_in(txn, &mut tables.waits, WAITS_TABLE)?;
        table.insert(book.run.as_str(), row.as_slice())?;
    }
    for book in budgets.values() {
        give_way.unit();
        let row = encode_row(RowTable::Budgets, book);
        let table = open_in(txn, &mut tables.budgets, BUDGETS_TABLE)?;
        table.insert(book.run.as_str(), row.as_slice())?;
    }
    for book in sagas.values() {
        give_way.unit();
        let row = encode_row(RowTable::Sagas, book);
        let table = open_in(txn, &mut tables.sagas, SAGAS_TABLE)?;
        table.insert(book.run.as_str(), row.as_slice())?;
    }
    for book in resources.values() {
        give_way.unit();
        put_resource(txn, tables, book)?;
    }
    for entry in shared.values() {
        give_way.unit();
        put_shared(txn, tables, entry)?;
    }
    for (digest, holders) in &blob_holders {
        give_way.unit();
        put_blob_holders(txn, tables, digest, *holders)?;
    }
    for refs in blob_refs.values() {
        give_way.unit();
        let row = encode_row(RowTable::BlobRefs, refs);
        let table = open_in(txn, &mut tables.blob_refs, BLOB_REFS_TABLE)?;
        table.insert(refs.run.as_str(), row.as_slice())?;
    }
    // References added to what the run's row holds: the row is read once
    // and written once per run (`Writes::blob_refs_added`).
    for (run, added) in blob_refs_added {
        give_way.unit();
        assert!(
            !blob_refs.contains_key(&run) && !pruned.contains(&run),
            "references of run {run} are added to its row or replace it, not both"
        );
        let table = open_in(txn, &mut tables.blob_refs, BLOB_REFS_TABLE)?;
        let held = table
            .get(run.as_str())?
            .map(|row| row.value().to_vec());
        let mut refs = match held {
            None => BlobRefs::none(run.clone()),
            Some(row) => decode_row::<BlobRefs>(RowTable::BlobRefs, &row).map_err(|e| {
                redb::Error::Corrupted(format!(
                    "the row of the blob references of run {run} in {}: {e}",
                    path.display()
                ))
            })?,
        };
        refs.extend(&added);
        let row = encode_row(RowTable::BlobRefs, &refs);
        table.insert(run.as_str(), row.as_slice())?;
    }
    Ok(())
}

/// Writes `run`'s row and keeps [`LIVE_RUNS_TABLE`] and
/// [`LIVE_CLAIMS_TABLE`] in step with it: listed, with its claim row,
/// while it is not terminal, removed when it is. (`stale_claim`: the
/// planted `StaleLiveClaims`, which writes the claim row only when the run
/// becomes live.)
fn put_run<'a>(
    txn: &'a WriteTransaction,
    tables: &mut OpenTables<'a>,
    run: &Run,
    stale_claim: bool,
) -> Result<(), redb::Error> {
    let id = run.id.as_str();
    let row = encode_row(RowTable::Run, run);
    let before = open_in(txn, &mut tables.runs, RUNS_TABLE)?
        .insert(id, row.as_slice())?
        .map(|row| row.value().to_vec());
    let live = open_in(txn, &mut tables.live_runs, LIVE_RUNS_TABLE)?;
    if run.state.is_terminal() {
        live.remove(id)?;
        open_in(txn, &mut tables.live_claims, LIVE_CLAIMS_TABLE)?.remove(id)?;
        // A run that is over is written once, when it ends: its time in
        // the index is when a prune may take it.
        open_in(txn, &mut tables.ended, ENDED_TABLE)?.insert((run.updated_ms, id), ())?;
    } else {
        let was_live = live.insert(id, ())?.is_some();
        if !(stale_claim && was_live) {
            let claim = encode_row(RowTable::LiveClaim, &LiveClaim::of(run));
            let claims = open_in(txn, &mut tables.live_claims, LIVE_CLAIMS_TABLE)?;
            claims.insert(id, claim.as_slice())?;
        }
        // A run that existed and was not live was over: an operator's retry
        // brought it back, so it leaves the index of ended runs.
        if !was_live
            && let Some(ended) = before.and_then(|row| decode_row::<Run>(RowTable::Run, &row).ok())
            && ended.state.is_terminal()
        {
            open_in(txn, &mut tables.ended, ENDED_TABLE)?.remove((ended.updated_ms, id))?;
        }
    }
    Ok(())
}

/// Deletes every row of `run`: its record and its place in the live and
/// ended indexes, ledger entries, checkpoints, decisions, audit, waits,
/// budget, saga and blob references.
fn delete_run_rows<'a>(
    txn: &'a WriteTransaction,
    tables: &mut OpenTables<'a>,
    run: &RunId,
) -> Result<(), redb::Error> {
    let r = run.as_str();
    let record = open_in(txn, &mut tables.runs, RUNS_TABLE)?
        .remove(r)?
        .map(|row| row.value().to_vec());
    let ended_ms = record
        .and_then(|row| decode_row::<Run>(RowTable::Run, &row).ok())
        .map(|run| run.updated_ms);
    if let Some(ended_ms) = ended_ms {
        open_in(txn, &mut tables.ended, ENDED_TABLE)?.remove((ended_ms, r))?;
    }
    open_in(txn, &mut tables.live_runs, LIVE_RUNS_TABLE)?.remove(r)?;
    open_in(txn, &mut tables.live_claims, LIVE_CLAIMS_TABLE)?.remove(r)?;
    // Step names are printable ASCII below `~`, so this range is the run's.
    open_in(txn, &mut tables.effects, EFFECTS_TABLE)?
        .retain_in((r, "", 0u8, 0u32)..(r, "~", 0u8, 0u32), |_, _| false)?;
    open_in(txn, &mut tables.checkpoints, CHECKPOINTS_TABLE)?
        .retain_in((r, 0u64)..=(r, u64::MAX), |_, _| false)?;
    open_in(txn, &mut tables.decisions, DECISIONS_TABLE)?
        .retain_in((r, 0u64)..=(r, u64::MAX), |_, _| false)?;
    open_in(txn, &mut tables.audit, AUDIT_TABLE)?
        .retain_in((r, 0u64)..=(r, u64::MAX), |_, _| false)?;
    open_in(txn, &mut tables.waits, WAITS_TABLE)?.remove(r)?;
    open_in(txn, &mut tables.budgets, BUDGETS_TABLE)?.remove(r)?;
    open_in(txn, &mut tables.sagas, SAGAS_TABLE)?.remove(r)?;
    open_in(txn, &mut tables.blob_refs, BLOB_REFS_TABLE)?.remove(r)?;
    Ok(())
}

fn put_blob_holders<'a>(
    txn: &'a WriteTransaction,
    tables: &mut OpenTables<'a>,
    digest: &Digest,
    holders: Option<u64>,
) -> Result<(), redb::Error> {
    let table = open_in(txn, &mut tables.blob_holders, BLOB_HOLDERS_TABLE)?;
    match holders {
        Some(n) => table.insert(digest.0.as_slice(), n)?,
        None => table.remove(digest.0.as_slice())?,
    };
    Ok(())
}

/// Stores `bytes` under `digest` unless it is there: content addressed, a
/// stored digest already holds these bytes.
fn put_blob<'a>(
    txn: &'a WriteTransaction,
    tables: &mut OpenTables<'a>,
    digest: &Digest,
    bytes: &[u8],
) -> Result<(), redb::Error> {
    blob_writer(txn, tables, false)?.put(digest, bytes)
}

fn put_resource<'a>(
    txn: &'a WriteTransaction,
    tables: &mut OpenTables<'a>,
    book: &ResourceBook,
) -> Result<(), redb::Error> {
    let row = encode_row(RowTable::Resources, book);
    let table = open_in(txn, &mut tables.resources, RESOURCES_TABLE)?;
    table.insert(book.resource.as_str(), row.as_slice())?;
    Ok(())
}

fn put_shared<'a>(
    txn: &'a WriteTransaction,
    tables: &mut OpenTables<'a>,
    entry: &SharedEntry,
) -> Result<(), redb::Error> {
    let row = encode_row(RowTable::Shared, entry);
    let table = open_in(txn, &mut tables.shared, SHARED_TABLE)?;
    table.insert(entry.key.as_str(), row.as_slice())?;
    Ok(())
}

/// One row for `entries`, the audit entries appended to `run` (numbered
/// without a gap), under the last one's seq; nothing for none.
fn put_audit<'a>(
    txn: &'a WriteTransaction,
    tables: &mut OpenTables<'a>,
    run: &RunId,
    entries: &[AuditEntry],
) -> Result<(), redb::Error> {
    let Some(last) = entries.last() else {
        return Ok(());
    };
    let row = encode_audit_row(entries);
    let table = open_in(txn, &mut tables.audit, AUDIT_TABLE)?;
    table.insert((run.as_str(), last.seq), row.as_slice())?;
    Ok(())
}

impl BooksWrite for RedbBooks<'_> {
    fn put_run(&mut self, run: Run) {
        self.assert_writable("put_run");
        self.runs_read.borrow_mut().remove(&run.id);
        let stale = self.stale_live_claims;
        self.write_with("write run", |txn, tables| put_run(txn, tables, &run, stale));
    }

    fn put_effect(&mut self, entry: EffectEntry) {
        self.assert_writable("put_effect");
        let row = encode_row(RowTable::Effect, &entry);
        self.write_with("write effect", |txn, tables| {
            let table = open_in(txn, &mut tables.effects, EFFECTS_TABLE)?;
            table.insert(effect_row_key(&entry.key), row.as_slice())?;
            Ok(())
        });
    }

    fn put_blob(&mut self, digest: Digest, bytes: Vec<u8>) {
        self.assert_writable("put_blob");
        self.write_with("write blob", |txn, tables| {
            put_blob(txn, tables, &digest, &bytes)
        });
    }

    fn put_checkpoint(&mut self, meta: CheckpointMeta) {
        self.assert_writable("put_checkpoint");
        let row = encode_row(RowTable::Checkpoint, &meta);
        self.write_with("write checkpoint", |txn, tables| {
            let table = open_in(txn, &mut tables.checkpoints, CHECKPOINTS_TABLE)?;
            table.insert((meta.run.as_str(), meta.version), row.as_slice())?;
            Ok(())
        });
    }

    fn put_decision(&mut self, record: DecisionRecord) {
        self.assert_writable("put_decision");
        let row = encode_row(RowTable::Decision, &record);
        self.write_with("write decision", |txn, tables| {
            let table = open_in(txn, &mut tables.decisions, DECISIONS_TABLE)?;
            table.insert((record.run.as_str(), record.position), row.as_slice())?;
            Ok(())
        });
    }

    fn push_audit(&mut self, run: &RunId, entry: AuditEntry) {
        self.assert_writable("push_audit");
        assert_eq!(
            entry.seq,
            self.audit_len(run) + 1,
            "audit of run {run} out of sequence"
        );
        self.write_with("write audit entry", |txn, tables| {
            put_audit(txn, tables, run, std::slice::from_ref(&entry))
        });
        self.audit_lens.borrow_mut().insert(run.clone(), entry.seq);
    }

    fn put_budget(&mut self, book: BudgetBook) {
        self.assert_writable("put_budget");
        let row = encode_row(RowTable::Budgets, &book);
        self.write_with("write budget book", |txn, tables| {
            let table = open_in(txn, &mut tables.budgets, BUDGETS_TABLE)?;
            table.insert(book.run.as_str(), row.as_slice())?;
            Ok(())
        });
    }

    fn put_saga(&mut self, book: SagaBook) {
        self.assert_writable("put_saga");
        let row = encode_row(RowTable::Sagas, &book);
        self.write_with("write saga book", |txn, tables| {
            let table = open_in(txn, &mut tables.sagas, SAGAS_TABLE)?;
            table.insert(book.run.as_str(), row.as_slice())?;
            Ok(())
        });
    }

    fn put_resource(&mut self, book: ResourceBook) {
        self.assert_writable("put_resource");
        self.write_with("write resource", |txn, tables| {
            put_resource(txn, tables, &book)
        });
    }

    fn put_shared(&mut self, entry: SharedEntry) {
        self.assert_writable("put_shared");
        self.write_with("write shared key", |txn, tables| {
            put_shared(txn, tables, &entry)
        });
    }

    fn delete_run(&mut self, run: &RunId) {
        self.assert_writable("delete_run");
        self.blob_refs_read.borrow_mut().remove(run);
        self.runs_read.borrow_mut().remove(run);
        self.write_with("delete run", |txn, tables| {
            delete_run_rows(txn, tables, run)
        });
    }

    fn delete_blob(&mut self, digest: &Digest) {
        self.assert_writable("delete_blob");
        self.write_with("delete blob", |txn, tables| {
            blob_writer(txn, tables, self.cleaner_loses_moves)?.remove(digest)
        });
    }

    fn put_blob_holders(&mut self, digest: Digest, holders: Option<u64>) {
        self.assert_writable("put_blob_holders");
        self.write_with("write blob holders", |txn, tables| {
            put_blob_holders(txn, tables, &digest, holders)
        });
    }

    fn put_blob_refs(&mut self, refs: BlobRefs) {
        self.assert_writable("put_blob_refs");
        self.blob_refs_read.borrow_mut().remove(&refs.run);
        let row = encode_row(RowTable::BlobRefs, &refs);
        self.write_with("write blob references", |txn, tables| {
            let table = open_in(txn, &mut tables.blob_refs, BLOB_REFS_TABLE)?;
            table.insert(refs.run.as_str(), row.as_slice())?;
            Ok(())
        });
    }

    fn put_waits(&mut self, book: WaitBook) {
        self.assert_writable("put_waits");
        let row = encode_row(RowTable::Waits, &book);
        self.write_with("write wait book", |txn, tables| {
            let table = open_in(txn, &mut tables.waits, WAITS_TABLE)?;
            table.insert(book.run.as_str(), row.as_slice())?;
            Ok(())
        });
    }
}

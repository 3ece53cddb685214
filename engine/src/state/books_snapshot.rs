//! A whole-books snapshot of the redb tables as a [`MemBooks`], so tests and
//! the simulator can compare the engine's state with the reference model by
//! plain equality.
//!
//! **Invariant:** the snapshot is built only through `MemBooks`' public
//! `BooksWrite` puts, in table order, so two stores holding the same rows
//! give equal snapshots; any undecodable row is an error, never skipped.

use std::path::Path;

use redb::{ReadTransaction, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;

use super::rows::{
    AUDIT_TABLE, BLOB_HOLDERS_TABLE, BLOB_REFS_TABLE, BLOBS_TABLE, BUDGETS_TABLE,
    CHECKPOINTS_TABLE, DECISIONS_TABLE, EFFECTS_TABLE, RESOURCES_TABLE, RUNS_TABLE, RowTable,
    SAGAS_TABLE, SHARED_TABLE, WAITS_TABLE, decode_audit_row, decode_row,
};
use super::blob_stream::{self, BLOB_CHUNKS_TABLE, BLOB_INDEX_TABLE, BLOB_STREAM_TABLE};
use super::books_tables::open_if_there;
use super::guard::guarded;
use crate::books::{
    BlobRefs, BooksRead, BooksWrite, BudgetBook, CheckpointMeta, DecisionRecord, Digest,
    EffectEntry, MemBooks, ResourceBook, Run, RunId, SagaBook, SharedEntry, WaitBook,
};
use crate::error::{Error, Result};

/// Every (key bytes unused) value of `def`, in key order; empty if the table
/// does not exist yet.
fn values<K: redb::Key + 'static>(
    txn: &ReadTransaction,
    path: &Path,
    def: TableDefinition<K, &[u8]>,
) -> Result<Vec<Vec<u8>>> {
    rows(txn, path, def, "read a table for a snapshot", |_, v| v.to_vec())
}

/// `each` of every (key, value) of `def`, in key order, read through the
/// guard; empty if the table does not exist yet.
fn rows<K: redb::Key + 'static, V: redb::Value + 'static, T>(
    txn: &ReadTransaction,
    path: &Path,
    def: TableDefinition<K, V>,
    op: &'static str,
    each: impl Fn(K::SelfType<'_>, V::SelfType<'_>) -> T,
) -> Result<Vec<T>> {
    guarded(path, op, || {
        let table = match txn.open_table(def) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(redb::Error::from(e)),
        };
        let mut out = Vec::new();
        for item in table.iter()? {
            let (k, v) = item?;
            out.push(each(k.value(), v.value()));
        }
        Ok(out)
    })
}

/// Every (digest, holder count) of the blob holders table, by digest.
fn blob_holders(txn: &ReadTransaction, path: &Path) -> Result<Vec<(Digest, u64)>> {
    let rows = rows(txn, path, BLOB_HOLDERS_TABLE, "read blob holders", |k, v| {
        (<[u8; 32]>::try_from(k).ok(), v)
    })?;
    rows.into_iter()
        .map(|(digest, holders)| match digest {
            Some(digest) => Ok((Digest(digest), holders)),
            None => Err(Error::corrupt(path, 0, "a blob holder count is keyed by no digest")),
        })
        .collect()
}

fn decode<T: DeserializeOwned>(
    path: &Path,
    table: RowTable,
    bytes: &[u8],
    what: &str,
) -> Result<T> {
    decode_row(table, bytes)
        .map_err(|e| Error::corrupt(path, 0, format!("a stored {what} is damaged: {e}")))
}

/// Reads every books table of `txn` into a [`MemBooks`].
pub fn read_books(txn: &ReadTransaction, path: &Path) -> Result<MemBooks> {
    let mut books = MemBooks::new();
    for bytes in values(txn, path, RUNS_TABLE)? {
        books.put_run(decode::<Run>(path, RowTable::Run, &bytes, "run")?);
    }
    for bytes in values(txn, path, EFFECTS_TABLE)? {
        books.put_effect(decode::<EffectEntry>(
            path,
            RowTable::Effect,
            &bytes,
            "effect",
        )?);
    }
    for (key, bytes) in all_blobs(txn, path)? {
        // A blob kept under another digest than its own would collapse
        // with its twin; its key must be its digest.
        let digest = crate::books::digest_of(&bytes);
        if digest != key {
            return Err(Error::corrupt(
                path,
                0,
                format!(
                    "blob {} is kept under another digest, {}",
                    digest.short(),
                    key.short()
                ),
            ));
        }
        books.put_blob(digest, bytes);
    }
    for bytes in values(txn, path, CHECKPOINTS_TABLE)? {
        books.put_checkpoint(decode::<CheckpointMeta>(
            path,
            RowTable::Checkpoint,
            &bytes,
            "checkpoint",
        )?);
    }
    for bytes in values(txn, path, DECISIONS_TABLE)? {
        books.put_decision(decode::<DecisionRecord>(
            path,
            RowTable::Decision,
            &bytes,
            "decision",
        )?);
    }
    for bytes in values(txn, path, WAITS_TABLE)? {
        books.put_waits(decode::<WaitBook>(
            path,
            RowTable::Waits,
            &bytes,
            "wait book",
        )?);
    }
    for bytes in values(txn, path, BUDGETS_TABLE)? {
        books.put_budget(decode::<BudgetBook>(
            path,
            RowTable::Budgets,
            &bytes,
            "budget book",
        )?);
    }
    for bytes in values(txn, path, BLOB_REFS_TABLE)? {
        books.put_blob_refs(decode::<BlobRefs>(
            path,
            RowTable::BlobRefs,
            &bytes,
            "blob references",
        )?);
    }
    for (digest, holders) in blob_holders(txn, path)? {
        books.put_blob_holders(digest, Some(holders));
    }
    for bytes in values(txn, path, RESOURCES_TABLE)? {
        books.put_resource(decode::<ResourceBook>(
            path,
            RowTable::Resources,
            &bytes,
            "resource",
        )?);
    }
    for bytes in values(txn, path, SHARED_TABLE)? {
        books.put_shared(decode::<SharedEntry>(
            path,
            RowTable::Shared,
            &bytes,
            "shared key",
        )?);
    }
    for bytes in values(txn, path, SAGAS_TABLE)? {
        books.put_saga(decode::<SagaBook>(
            path,
            RowTable::Sagas,
            &bytes,
            "saga book",
        )?);
    }
    push_audit(txn, path, &mut books)?;
    Ok(books)
}

/// Every blob kept, as (the digest it is kept under, its bytes): the rows
/// of the blobs table of a store written before schema 13, then the blob
/// stream's records in digest order. The stream's own accounting must hold
/// (`blob_stream::problems`).
fn all_blobs(txn: &ReadTransaction, path: &Path) -> Result<Vec<(Digest, Vec<u8>)>> {
    let mut out = Vec::new();
    let keyed = |k: &[u8]| <[u8; 32]>::try_from(k).ok().map(Digest);
    for (key, bytes) in rows(txn, path, BLOBS_TABLE, "read blobs", |k, v| (keyed(k), v.to_vec()))? {
        let key = key.ok_or_else(|| Error::corrupt(path, 0, "a blob row is keyed by no digest"))?;
        out.push((key, bytes));
    }
    let stream = guarded(path, "read the blob stream", || {
        let index = open_if_there(txn, BLOB_INDEX_TABLE)?;
        let chunks = open_if_there(txn, BLOB_CHUNKS_TABLE)?;
        let counts = open_if_there(txn, BLOB_STREAM_TABLE)?;
        let problems = blob_stream::problems(index.as_ref(), chunks.as_ref(), counts.as_ref())?;
        let mut records = Vec::new();
        if let (Some(index), Some(chunks)) = (&index, &chunks)
            && problems.is_empty()
        {
            for row in index.iter()? {
                let (key, at) = row?;
                let digest = Digest(<[u8; 32]>::try_from(key.value()).expect("problems checked keys"));
                records.push((digest, blob_stream::read_record(chunks, &digest, at.value())?));
            }
        }
        Ok::<_, redb::Error>((problems, records))
    })?;
    let (problems, records) = stream;
    if let Some(first) = problems.first() {
        return Err(Error::corrupt(
            path,
            0,
            format!("the blob stream does not hold ({} problem(s)); the first: {first}", problems.len()),
        ));
    }
    out.extend(records);
    Ok(out)
}

fn push_audit(txn: &ReadTransaction, path: &Path, books: &mut MemBooks) -> Result<()> {
    let rows = rows(txn, path, AUDIT_TABLE, "read audit", |(run, seq), v| {
        (run.to_string(), seq, v.to_vec())
    })?;
    for (run, seq, bytes) in rows {
        let run = RunId::new(run).map_err(|e| {
            Error::corrupt(path, 0, format!("the audit table names an invalid run: {e}"))
        })?;
        let entries = decode_audit_row(&bytes, seq).map_err(|e| {
            Error::corrupt(
                path,
                0,
                format!("the stored audit of run {run} (row {seq}) is damaged: {e}"),
            )
        })?;
        for entry in entries {
            // A run's entries are numbered from 1 without a gap; a row moved
            // by damage breaks the count (and `push_audit` asserts it).
            let held = books.audit_len(&run);
            if entry.seq != held + 1 {
                return Err(Error::corrupt(
                    path,
                    0,
                    format!("audit entry {} of run {run} follows entry {held}", entry.seq),
                ));
            }
            books.push_audit(&run, entry);
        }
    }
    Ok(())
}

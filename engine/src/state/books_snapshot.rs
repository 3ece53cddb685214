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
    SAGAS_TABLE, SHARED_TABLE, WAITS_TABLE, decode_row,
};
use super::store::state_error;
use crate::books::{
    AuditEntry, BlobRefs, BooksWrite, BudgetBook, CheckpointMeta, DecisionRecord, Digest,
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
    let table = match txn.open_table(def) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(state_error(path, "open table for snapshot", e)),
    };
    let iter = table
        .iter()
        .map_err(|e| state_error(path, "scan table for snapshot", e))?;
    iter.map(|item| {
        item.map(|(_, v)| v.value().to_vec())
            .map_err(|e| state_error(path, "read row for snapshot", e))
    })
    .collect()
}

/// Every (digest, holder count) of the blob holders table, by digest.
fn blob_holders(txn: &ReadTransaction, path: &Path) -> Result<Vec<(Digest, u64)>> {
    let table = match txn.open_table(BLOB_HOLDERS_TABLE) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(state_error(path, "open blob holders for snapshot", e)),
    };
    let iter = table
        .iter()
        .map_err(|e| state_error(path, "scan blob holders for snapshot", e))?;
    iter.map(|item| {
        let (key, value) = item.map_err(|e| state_error(path, "read blob holders", e))?;
        let digest: [u8; 32] = key
            .value()
            .try_into()
            .map_err(|_| Error::corrupt(path, 0, "a blob holder count is keyed by no digest"))?;
        Ok((Digest(digest), value.value()))
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
    let blobs = values(txn, path, BLOBS_TABLE)?;
    let blob_count = blobs.len();
    for bytes in blobs {
        books.put_blob(crate::books::digest_of(&bytes), bytes);
    }
    // A blob stored under another digest than its own would have collapsed
    // with its twin above; the count catches it.
    assert_blob_keys(txn, path, blob_count)?;
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
    assert_eq!(books.blob_count(), blob_count, "blobs are keyed by digest");
    Ok(books)
}

/// Checks that every blob row's key is the digest of its bytes.
fn assert_blob_keys(txn: &ReadTransaction, path: &Path, expected: usize) -> Result<()> {
    let table = match txn.open_table(BLOBS_TABLE) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(state_error(path, "open blob table", e)),
    };
    let mut seen = 0usize;
    for item in table
        .iter()
        .map_err(|e| state_error(path, "scan blobs", e))?
    {
        let (k, v) = item.map_err(|e| state_error(path, "read blob", e))?;
        let digest = crate::books::digest_of(v.value());
        if k.value() != digest.0.as_slice() {
            return Err(Error::corrupt(
                path,
                0,
                format!("blob stored under a key that is not its digest {}", {
                    let d: Digest = digest;
                    d.short()
                }),
            ));
        }
        seen += 1;
    }
    assert_eq!(seen, expected);
    Ok(())
}

fn push_audit(txn: &ReadTransaction, path: &Path, books: &mut MemBooks) -> Result<()> {
    let table = match txn.open_table(AUDIT_TABLE) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(state_error(path, "open audit table", e)),
    };
    for item in table
        .iter()
        .map_err(|e| state_error(path, "scan audit", e))?
    {
        let (k, v) = item.map_err(|e| state_error(path, "read audit entry", e))?;
        let (run, seq) = k.value();
        let run = RunId::new(run)?;
        let entry: AuditEntry = decode(path, RowTable::Audit, v.value(), "audit entry")?;
        if entry.seq != seq {
            return Err(Error::corrupt(
                path,
                0,
                format!("audit entry {seq} of run {run} carries seq {}", entry.seq),
            ));
        }
        books.push_audit(&run, entry);
    }
    Ok(())
}

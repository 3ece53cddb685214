//! The state store's share of a verify: redb's walk of every page checksum
//! (`check_integrity`, through the engine's own `StateStore::open`), its
//! schema version and `applied_lsn` held against the manifest and the log,
//! then every row of every books table decoded and its CRC checked
//! (`read_books`), and the blob reference counts held to the references
//! (no blob a reference names is missing, no counted blob is named by no
//! run).
//!
//! **Invariant:** redb is only ever given the read-only view, so a repair
//! it makes while checking stays in memory; a panic inside redb on damaged
//! pages is caught by the state store's guard and reported as damage to the
//! file, never passed on.

use std::path::Path;
use std::sync::Arc;

use redb::{ReadTransaction, ReadableTableMetadata, TableDefinition, TableError};

use super::report::{Area, Status, VerifyReport};
use crate::db::STATE_FILE;
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::manifest::Manifest;
use crate::state::blob_stream::BLOB_INDEX_TABLE;
use crate::state::rows::{
    AUDIT_TABLE, BLOBS_TABLE, BUDGETS_TABLE, CHECKPOINTS_TABLE, DECISIONS_TABLE, EFFECTS_TABLE,
    RUNS_TABLE, WAITS_TABLE,
};
use crate::state::{PageCheck, StateStore, drop_guarded, guarded, read_books};
use crate::storage::Storage;

/// Checks the state store of `dir`: the file `manifest` names (the
/// default name without one), against the manifest's checkpoint and the
/// log's `durable` end when they are known.
pub(super) fn check(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    manifest: Option<&Manifest>,
    durable: Option<Lsn>,
    report: &mut VerifyReport,
) -> Result<()> {
    let path = dir.join(manifest.map_or(STATE_FILE, |m| m.state_file.as_str()));
    let exists = storage
        .exists(&path)
        .map_err(|e| Error::io("look for state store", &path, e))?;
    if !exists {
        let covered = manifest.map_or(Lsn::ZERO, |m| m.applied_lsn);
        let (status, what) = if covered == Lsn::ZERO {
            (
                Status::Note,
                "the state store was never made (no checkpoint yet); an open makes it",
            )
        } else {
            (
                Status::Damaged,
                "the state store is missing, yet the manifest names a checkpoint in it",
            )
        };
        report.push(Area::StateStore, status, (path, None), what);
        return Ok(());
    }
    let checked = check_store(storage, &path, manifest, durable);
    match checked {
        Ok(Ok(rows)) => {
            report.state_rows_checked = rows;
            let what = format!(
                "every page checksum verified by redb; {rows} row(s) decoded and their CRCs \
                 checked"
            );
            report.push(Area::StateStore, Status::Intact, (path, None), what);
        }
        Ok(Err(Damage(what))) => report.push(Area::StateStore, Status::Damaged, (path, None), what),
        Err(e @ Error::Io { .. }) => return Err(e),
        Err(e) => {
            // The state store's errors carry offset 0 where redb does not
            // say where: report no offset rather than a wrong one.
            report.damaged_by(Area::StateStore, path.clone(), &e);
            if let Some(last) = report.findings.last_mut().filter(|f| f.offset == Some(0)) {
                last.offset = None;
            }
        }
    }
    Ok(())
}

/// Damage the store's own reads did not raise as an `Error`.
struct Damage(String);

/// The checks proper; returns the rows read, or the damage found.
fn check_store(
    storage: &Arc<dyn Storage>,
    path: &Path,
    manifest: Option<&Manifest>,
    durable: Option<Lsn>,
) -> Result<std::result::Result<u64, Damage>> {
    let store = StateStore::open(storage, path, PageCheck::Whole)?;
    let covered = store.applied_lsn();
    if let Some(m) = manifest.filter(|m| covered < m.applied_lsn) {
        return Ok(Err(Damage(format!(
            "the state store covers {covered} but the manifest says a checkpoint covered {}: a \
             durable state commit was lost",
            m.applied_lsn
        ))));
    }
    if let Some(end) = durable.filter(|&end| covered > end) {
        return Ok(Err(Damage(format!(
            "the state store covers {covered} but the log ends at {end}: acknowledged records \
             are missing from the log"
        ))));
    }
    let txn = store.read()?;
    let read = store.note(read_books(&txn, path).and_then(|books| {
        let rows = row_count(&txn, path)?;
        Ok((books, rows))
    }));
    drop_guarded(txn);
    let (books, rows) = read?;
    // Every blob reference names a stored blob, and every counted blob is
    // named as often as its count says: no dangling reference, no leak.
    let problems = books.blob_reference_problems();
    if let Some(first) = problems.first() {
        return Ok(Err(Damage(format!(
            "the blob references do not hold ({} problem(s)); the first: {first}",
            problems.len()
        ))));
    }
    Ok(Ok(rows))
}

/// How many rows the books tables hold.
fn row_count(txn: &ReadTransaction, path: &Path) -> Result<u64> {
    let mut rows = table_len(txn, path, RUNS_TABLE)?;
    rows += table_len(txn, path, EFFECTS_TABLE)?;
    rows += table_len(txn, path, BLOBS_TABLE)?;
    rows += table_len(txn, path, BLOB_INDEX_TABLE)?;
    rows += table_len(txn, path, CHECKPOINTS_TABLE)?;
    rows += table_len(txn, path, DECISIONS_TABLE)?;
    rows += table_len(txn, path, AUDIT_TABLE)?;
    rows += table_len(txn, path, WAITS_TABLE)?;
    rows += table_len(txn, path, BUDGETS_TABLE)?;
    Ok(rows)
}

fn table_len<K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &ReadTransaction,
    path: &Path,
    def: TableDefinition<K, V>,
) -> Result<u64> {
    guarded(path, "count rows", || match txn.open_table(def) {
        Ok(table) => table.len().map_err(redb::Error::from),
        Err(TableError::TableDoesNotExist(_)) => Ok(0),
        Err(e) => Err(redb::Error::from(e)),
    })
}

//! The state store's share of a verify: redb's walk of every page checksum
//! (`check_integrity`, through the engine's own `StateStore::open`), its
//! schema version and `applied_lsn` held against the manifest and the log,
//! then every row of every books table decoded and its CRC checked
//! (`read_books`), the blob reference counts held to the references
//! (no blob a reference names is missing, no counted blob is named by no
//! run), and every live claim row held to its run's row (an open files a
//! live run by its claim row without reading the run row).
//!
//! **Invariant:** redb is only ever given the read-only view, so a repair
//! it makes while checking stays in memory; a panic inside redb on damaged
//! pages is caught by the state store's guard and reported as damage to the
//! file, never passed on.

use std::path::Path;
use std::sync::Arc;

use redb::{ReadTransaction, ReadableTableMetadata, TableDefinition, TableError};

use super::report::{Area, Status, VerifyReport};
use crate::books::{BooksRead, MemBooks, RunId};
use crate::db::STATE_FILE;
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::manifest::Manifest;
use crate::state::blob_stream::BLOB_INDEX_TABLE;
use crate::state::rows::{
    AUDIT_TABLE, BLOBS_TABLE, BUDGETS_TABLE, CHECKPOINTS_TABLE, DECISIONS_TABLE, EFFECTS_TABLE,
    LIVE_CLAIMS_TABLE, LiveClaim, RUNS_TABLE, RowTable, WAITS_TABLE, decode_row,
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
        let claims = claim_problem(&txn, path, &books)?;
        Ok((books, rows, claims))
    }));
    drop_guarded(txn);
    let (books, rows, claims) = read?;
    if let Some(what) = claims {
        return Ok(Err(Damage(what)));
    }
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

/// The first live claim row that does not say what its run's row says
/// (`LiveClaim::of`), or names a run that is not live, if one does. A store
/// written before schema 15 has none, which is no damage.
fn claim_problem(txn: &ReadTransaction, path: &Path, books: &MemBooks) -> Result<Option<String>> {
    let rows = guarded(path, "read live claims", || {
        match txn.open_table(LIVE_CLAIMS_TABLE) {
            Ok(table) => table
                .range::<&str>(..)
                .and_then(|iter| {
                    iter.map(|item| item.map(|(k, v)| (k.value().to_string(), v.value().to_vec())))
                        .collect::<std::result::Result<Vec<_>, _>>()
                })
                .map_err(redb::Error::from),
            Err(TableError::TableDoesNotExist(_)) => Ok(Vec::new()),
            Err(e) => Err(redb::Error::from(e)),
        }
    })?;
    for (key, bytes) in rows {
        let claim: LiveClaim = match decode_row(RowTable::LiveClaim, &bytes) {
            Ok(claim) => claim,
            Err(why) => return Ok(Some(format!("the live claim row of run {key}: {why}"))),
        };
        let run = RunId::new(key.as_str()).ok().and_then(|id| books.run(&id));
        let expected = run
            .filter(|run| !run.state.is_terminal())
            .map(|run| LiveClaim::of(&run));
        if expected.as_ref() != Some(&claim) {
            return Ok(Some(format!(
                "the live claim row of run {key} says {claim:?}, but its run row gives \
                 {expected:?} (None: no live run of that id); an open would file the run by \
                 the claim row"
            )));
        }
    }
    Ok(None)
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

//! Recovery of the state store: the one replay both the engine and the
//! simulator's storage campaign run after `Db::open`.
//!
//! **Invariant:** on `Ok`, the state store has applied exactly the WAL's
//! durable records, each once, in LSN order, and it never covered less than
//! the checkpoint the manifest names.

use crate::db::Db;
use crate::error::{Error, Result};
use crate::ids::Lsn;

use super::store::StateStore;

/// Checks `state` against the manifest of `db`, then replays every durable
/// WAL record after the state's `applied_lsn` through `apply` (which must
/// call `StateStore::apply` for that LSN: the same function the live path
/// uses). Returns how many records were replayed.
pub fn replay_log(
    db: &Db,
    state: &mut StateStore,
    mut apply: impl FnMut(&mut StateStore, Lsn, &[u8]) -> Result<()>,
) -> Result<u64> {
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
    let mut replayed = 0u64;
    if covered < durable {
        for record in db.wal().read_from(covered.next())? {
            let (lsn, payload) = record?;
            apply(state, lsn, &payload)?;
            assert_eq!(
                state.applied_lsn(),
                lsn,
                "apply applied the record it was given"
            );
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
    Ok(replayed)
}

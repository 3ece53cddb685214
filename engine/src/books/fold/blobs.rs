//! How many runs refer to each counted blob, kept as ops are applied: a
//! run's first reference to a blob counts it, and pruning a run drops its
//! references, so a blob no run refers to can be let go.

use crate::books::base::digest::Digest;
use crate::books::base::ids::RunId;
use crate::books::vocabulary::state::BooksWrite;

/// Notes that `run` references the blob `digest`, if the blob is counted:
/// the run's first reference adds one to its count.
pub(crate) fn reference(state: &mut (impl BooksWrite + ?Sized), run: &RunId, digest: &Digest) {
    let Some(holders) = state.blob_holders(digest) else {
        return;
    };
    // (One digest added, if new: a run's list grows with every part it
    // saves, and a view that holds it is not asked to copy it.)
    if state.add_blob_ref(run, *digest) {
        state.put_blob_holders(*digest, Some(holders + 1));
    }
}

/// Takes `run`'s references off its blobs, deleting each blob no run
/// references any more, then deletes the run and every row of it.
pub(crate) fn prune_run(state: &mut (impl BooksWrite + ?Sized), run: &RunId) {
    if let Some(refs) = state.blob_refs(run) {
        for digest in &refs.digests {
            match state.blob_holders(digest) {
                Some(0) | None => {}
                Some(1) => {
                    state.delete_blob(digest);
                    state.put_blob_holders(*digest, None);
                }
                Some(n) => state.put_blob_holders(*digest, Some(n - 1)),
            }
        }
    }
    state.delete_run(run);
}

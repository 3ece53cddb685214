//! Invariant: redb's committed state survives the same faults. What redb
//! holds when opened covers at least the last acknowledged checkpoint and
//! equals the model's state at the LSN redb says it covers.

use crate::campaign::{Model, Observed};

/// redb's durable state is a true prefix state, at or past the checkpoint.
pub fn redb_committed_state_survives(model: &Model, observed: &Observed) -> Result<(), String> {
    if observed.redb_applied_at_open < model.checkpoint_lsn() {
        return Err(format!(
            "redb covers {} after recovery but a checkpoint covering {} was acknowledged",
            observed.redb_applied_at_open,
            model.checkpoint_lsn()
        ));
    }
    let reachable = model.last_lsn().0 + model.inflight().map_or(0, |b| b.len() as u64);
    if observed.redb_applied_at_open.0 > reachable {
        return Err(format!(
            "redb covers {} but only {reachable} records were ever appended",
            observed.redb_applied_at_open
        ));
    }
    let expected = if observed.redb_applied_at_open <= model.last_lsn() {
        model.state_at(observed.redb_applied_at_open)
    } else {
        model.state_with_inflight()
    };
    if observed.redb_state_at_open != expected {
        return Err(format!(
            "redb's state at {} ({} keys) is not the model's at that LSN ({} keys)",
            observed.redb_applied_at_open,
            observed.redb_state_at_open.len(),
            expected.len()
        ));
    }
    Ok(())
}

//! Invariant: damage to acknowledged data gives an error, never wrong data.
//! After bit rot of durable bytes, a reopen either fails or returns exactly
//! what was acknowledged.
//!
//! One documented exception (docs/DURABILITY.md, "Known limits"): after a
//! crash (no clean close), damage to the last acknowledged batch, with
//! nothing written after it, cannot be told from a torn write and is
//! truncated. The checker allows exactly that: the state as it was before
//! that batch, and only when the shutdown was not clean.

use actum::{Error, Lsn};

use crate::campaign::{Model, Observed};

/// Checks a reopen after bit rot at `what` (file and offset, for the report);
/// `clean` says whether the database was closed cleanly before the rot.
pub fn corruption_is_detected(
    model: &Model,
    reopened: &Result<Observed, Error>,
    what: &str,
    clean: bool,
) -> Result<(), String> {
    let Ok(observed) = reopened else {
        // Any error is the right answer to damage; the caller reports it.
        return Ok(());
    };
    if observed.durable_lsn == model.last_lsn() && &observed.state == model.state() {
        return Ok(());
    }
    let before_last_batch = Lsn(model.last_batch_first().0.saturating_sub(1));
    let lost_only_the_last_batch = observed.durable_lsn == before_last_batch
        && observed.state == model.state_at(before_last_batch);
    if !clean && lost_only_the_last_batch {
        return Ok(());
    }
    Err(format!(
        "after bit rot at {what} the reopen succeeded with the log at {} and {} keys; \
         acknowledged: {} and {} keys (wrong or lost data, not an error; clean shutdown: {clean})",
        observed.durable_lsn,
        observed.state.len(),
        model.last_lsn(),
        model.state().len()
    ))
}

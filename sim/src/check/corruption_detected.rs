//! Invariant: damage to acknowledged data gives an error, never wrong data.
//! After bit rot of durable bytes, a reopen either fails or returns exactly
//! what was acknowledged.

use actum::Error;

use crate::campaign::{Model, Observed};

/// Checks a reopen after bit rot at `what` (file and offset, for the report).
pub fn corruption_is_detected(
    model: &Model,
    reopened: &Result<Observed, Error>,
    what: &str,
) -> Result<(), String> {
    let Ok(observed) = reopened else {
        // Any error is the right answer to damage; the caller reports it.
        return Ok(());
    };
    if observed.durable_lsn != model.last_lsn() || &observed.state != model.state() {
        return Err(format!(
            "after bit rot at {what} the reopen succeeded with the log at {} and {} keys; \
             acknowledged: {} and {} keys (wrong or lost data, not an error)",
            observed.durable_lsn,
            observed.state.len(),
            model.last_lsn(),
            model.state().len()
        ));
    }
    Ok(())
}

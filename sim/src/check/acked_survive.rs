//! Invariant: every acknowledged append survives any crash.

use crate::campaign::{Model, Observed};

/// The log reaches at least the last acknowledged LSN, and every key holds
/// its last acknowledged value (or the value of the one in-flight batch,
/// which may have landed on top of it).
pub fn acked_appends_survive(model: &Model, observed: &Observed) -> Result<(), String> {
    if observed.durable_lsn < model.last_lsn() {
        return Err(format!(
            "the log ends at {} but {} was acknowledged",
            observed.durable_lsn,
            model.last_lsn()
        ));
    }
    for (key, value) in model.state() {
        let found = observed.state.get(key);
        let overwritten_in_flight = model.inflight().is_some_and(|batch| {
            batch
                .iter()
                .any(|put| put.key == *key && Some(&put.value) == found)
        });
        if found != Some(value) && !overwritten_in_flight {
            return Err(format!(
                "key {key}: acknowledged value of {} bytes, found {:?} bytes",
                value.len(),
                found.map(Vec::len)
            ));
        }
    }
    Ok(())
}

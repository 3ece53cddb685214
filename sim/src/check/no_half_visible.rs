//! Invariant: nothing unacknowledged is half-visible. The one in-flight
//! batch is wholly present or wholly absent, and nothing else appears.

use crate::campaign::{Model, Observed};

/// Returns whether the in-flight batch landed, or why the state is neither
/// "without it" nor "with it".
pub fn nothing_unacknowledged_is_half_visible(
    model: &Model,
    observed: &Observed,
) -> Result<bool, String> {
    let last = model.last_lsn();
    if observed.durable_lsn == last && &observed.state == model.state() {
        return Ok(false);
    }
    if let Some(batch) = model.inflight() {
        let with = last.0 + batch.len() as u64;
        if observed.durable_lsn.0 == with && observed.state == model.state_with_inflight() {
            return Ok(true);
        }
    }
    let extra: Vec<&u64> = observed
        .state
        .keys()
        .filter(|key| !model.state_with_inflight().contains_key(key))
        .collect();
    Err(format!(
        "after recovery the log ends at {} and the state has {} keys; acknowledged: {} \
         ({} keys), in flight: {:?} records; keys never written: {:?}",
        observed.durable_lsn,
        observed.state.len(),
        last,
        model.state().len(),
        model.inflight().map(<[_]>::len),
        extra
    ))
}

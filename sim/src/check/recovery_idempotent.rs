//! Invariant: recovery is idempotent. Recovering again (after a crash
//! during or right after recovery, with no new writes) observes the same.

use crate::campaign::Observed;

/// Two recoveries with nothing written between them agree.
pub fn recovery_is_idempotent(first: &Observed, second: &Observed) -> Result<(), String> {
    if first.durable_lsn != second.durable_lsn {
        return Err(format!(
            "the first recovery ended the log at {}, the second at {}",
            first.durable_lsn, second.durable_lsn
        ));
    }
    if first.state != second.state {
        return Err(format!(
            "the two recoveries disagree on the state ({} keys vs {} keys)",
            first.state.len(),
            second.state.len()
        ));
    }
    Ok(())
}

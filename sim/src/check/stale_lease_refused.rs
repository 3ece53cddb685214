//! Invariant: no mutation accepted from a stale lease. A command the engine
//! acknowledged presented the run's current fencing token (the latest the
//! reference model granted), or took no guard.

use actum::books::{BooksRead, Command, FencingToken, MemBooks};

/// `Err` if `cmd`, just acknowledged, presented a token older than the
/// run's latest grant in `model` (the books before the command).
pub fn stale_lease_refused(model: &MemBooks, cmd: &Command) -> Result<(), String> {
    let mut cmd = cmd.clone();
    let Some((run, guard)) = cmd.guard_mut() else {
        return Ok(());
    };
    let Some(record) = model.run(&run) else {
        return Ok(());
    };
    let current = FencingToken(record.next_token.0.saturating_sub(1));
    if guard.token >= current {
        return Ok(());
    }
    Err(format!(
        "the engine acknowledged a command on run {run} from {} under token {} after token {} \
         was granted",
        guard.worker, guard.token.0, current.0
    ))
}

//! Invariant: an approval binds the exact effect it approves. A
//! `DecideApproval` the engine acknowledged named the arguments digest and
//! the role of an approval the reference model held open at that step
//! (the books before the command), before its deadline.
//!
//! The simulated approver sometimes decides from a stale screen (another
//! digest) or too late; the engine must refuse those.

use actum::books::{BooksRead, Command, MemBooks, WaitFor, WaitStatus};

/// `Err` if `cmd`, just acknowledged at `now_ms`, decides an approval the
/// model (before the command) does not hold open under exactly its terms.
pub fn approval_binds_its_effect(
    model: &MemBooks,
    cmd: &Command,
    now_ms: u64,
) -> Result<(), String> {
    let Command::DecideApproval(decision) = cmd else {
        return Ok(());
    };
    let wait = model
        .waits(&decision.run)
        .and_then(|book| book.wait_at(&decision.step).cloned());
    let Some(wait) = wait else {
        return Err(format!(
            "the engine took a decision on step {} of run {}, which asked for no approval",
            decision.step, decision.run
        ));
    };
    let WaitFor::Approval { args_digest, role } = &wait.wait_for else {
        return Err(format!(
            "the engine took an approval for the {} at step {} of run {}",
            wait.wait_for, decision.step, decision.run
        ));
    };
    let in_time = wait.deadline_ms.is_none_or(|at| now_ms < at);
    if *args_digest != decision.args_digest || *role != decision.role || !in_time {
        return Err(format!(
            "the engine took {}'s decision on step {} of run {} for args {} as {} at {now_ms} \
             ms; the approval is bound to args {} for {} until {:?}",
            decision.approver,
            decision.step,
            decision.run,
            decision.args_digest.short(),
            decision.role,
            args_digest.short(),
            role,
            wait.deadline_ms
        ));
    }
    if wait.status != WaitStatus::Open {
        return Err(format!(
            "the engine took a second decision on step {} of run {} (already {})",
            decision.step,
            decision.run,
            wait.status.name()
        ));
    }
    Ok(())
}

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
        .and_then(|book| book.approval_at(&decision.step).cloned());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{
        BooksWrite, DecideApproval, FencingToken, RunState, StepId, WaitBook, WaitRecord, digest_of,
    };

    fn books(status: WaitStatus) -> MemBooks {
        let mut books = MemBooks::new();
        books.put_run(run_record("r", RunState::WaitingHuman));
        let mut book = WaitBook::new(run_id("r"));
        book.waits.push(WaitRecord {
            step: StepId::new("pay").expect("a valid step"),
            seq: 1,
            wait_for: WaitFor::Approval {
                args_digest: digest_of(b"pay 90"),
                role: "finance".into(),
            },
            deadline_ms: Some(5_000),
            opened_ms: 1_000,
            token: FencingToken(1),
            reason: "above the threshold".into(),
            status,
            ended_ms: None,
        });
        books.put_waits(book);
        books
    }

    fn decide(args: &[u8], role: &str, step: &str) -> Command {
        Command::DecideApproval(DecideApproval {
            run: run_id("r"),
            step: StepId::new(step).expect("a valid step"),
            args_digest: digest_of(args),
            approver: "ann".into(),
            role: role.into(),
            approve: true,
            note: String::new(),
        })
    }

    #[test]
    fn only_the_bound_digest_and_role_before_the_deadline_once_pass() {
        let open = books(WaitStatus::Open);
        assert!(
            approval_binds_its_effect(&open, &decide(b"pay 90", "finance", "pay"), 4_999).is_ok()
        );
        let stale = approval_binds_its_effect(&open, &decide(b"pay 900", "finance", "pay"), 2_000);
        assert!(stale.expect_err("another digest").contains("bound to args"));
        let role = approval_binds_its_effect(&open, &decide(b"pay 90", "ops", "pay"), 2_000);
        assert!(role.is_err(), "another role");
        let late = approval_binds_its_effect(&open, &decide(b"pay 90", "finance", "pay"), 5_000);
        assert!(late.is_err(), "at the deadline");
        let nowhere =
            approval_binds_its_effect(&open, &decide(b"pay 90", "finance", "ship"), 2_000);
        assert!(
            nowhere
                .expect_err("no wait")
                .contains("asked for no approval")
        );
        let decided = books(WaitStatus::Approved {
            approver: "bob".into(),
            note: String::new(),
        });
        let twice =
            approval_binds_its_effect(&decided, &decide(b"pay 90", "finance", "pay"), 2_000);
        assert!(
            twice
                .expect_err("second decision")
                .contains("second decision")
        );
    }
}

//! The audit journal of a run: what happened, why, when and under which
//! lease token, one entry per applied op that concerns the run. It is
//! derived from the ops alone, so replaying the log rebuilds it exactly.
//! What happened is kept as data ([`AuditWhat`]) and put in words only when
//! shown, so the commit path formats nothing.
//!
//! Invariant: a run's entries carry `seq` 1, 2, 3, ... in apply order.

use std::borrow::Cow;

use crate::books::base::ids::RunId;
use crate::books::records::audit::{AuditEntry, AuditWhat};
use crate::books::records::wait::WaitStatus;
use crate::books::vocabulary::op::Op;

/// The journal line `op` contributes, and the run it belongs to; `None` for
/// ops that concern no single run (blob puts).
pub fn describe(op: &Op) -> Option<(RunId, AuditEntry)> {
    let entry = |at_ms, token, what: AuditWhat, why: &str| AuditEntry {
        seq: 0,
        at_ms,
        token,
        what,
        why: why.to_string(),
    };
    let (run, line) = match op {
        Op::RunCreated { run } => (
            run.id.clone(),
            entry(
                run.created_ms,
                None,
                AuditWhat::Created {
                    agent_version: run.agent_version.clone(),
                    input: run.input_digest,
                },
                "",
            ),
        ),
        Op::RunTransitioned {
            run,
            from,
            to,
            at_ms,
            token,
            reason,
            ..
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(*token),
                AuditWhat::Transitioned {
                    from: *from,
                    to: *to,
                },
                reason,
            ),
        ),
        Op::LeaseAcquired {
            run, lease, at_ms, ..
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(lease.token),
                AuditWhat::LeaseAcquired {
                    worker: lease.worker.clone(),
                    expires_ms: lease.expires_ms,
                },
                "",
            ),
        ),
        Op::LeaseRenewed {
            run,
            token,
            expires_ms,
            at_ms,
            ..
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(*token),
                AuditWhat::LeaseRenewed {
                    expires_ms: *expires_ms,
                },
                "",
            ),
        ),
        Op::LeaseReleased {
            run, token, at_ms, ..
        } => (
            run.clone(),
            entry(*at_ms, Some(*token), AuditWhat::LeaseReleased, ""),
        ),
        Op::EffectIntended { entry: e } => (
            e.key.run().clone(),
            entry(
                e.intended_ms,
                Some(e.token),
                AuditWhat::Intended {
                    key: e.key.clone(),
                    tool: e.tool.clone(),
                    args: e.args_digest,
                },
                &e.rationale,
            ),
        ),
        Op::EffectResent { key, token, at_ms } => (
            key.run().clone(),
            entry(
                *at_ms,
                Some(*token),
                AuditWhat::Resent { key: key.clone() },
                "",
            ),
        ),
        Op::EffectSettled {
            key,
            status,
            at_ms,
            token,
            note,
        } => (
            key.run().clone(),
            entry(
                *at_ms,
                Some(*token),
                AuditWhat::Settled {
                    key: key.clone(),
                    status: Cow::Borrowed(status.name()),
                },
                note,
            ),
        ),
        Op::BlobPut { .. } => return None,
        Op::CheckpointSaved { meta } => (
            meta.run.clone(),
            entry(
                meta.saved_ms,
                Some(meta.token),
                AuditWhat::CheckpointSaved {
                    version: meta.version,
                    schema_version: meta.schema_version,
                    parts: meta.parts.len() as u64,
                },
                "",
            ),
        ),
        Op::DecisionRecorded { record } => (
            record.run.clone(),
            entry(
                record.recorded_ms,
                Some(record.token),
                AuditWhat::DecisionRecorded {
                    position: record.position,
                    input: record.input_digest,
                },
                &record.rationale,
            ),
        ),
        Op::WaitOpened { run, wait } => (
            run.clone(),
            entry(
                wait.opened_ms,
                Some(wait.token),
                AuditWhat::WaitOpened {
                    step: wait.step.clone(),
                    wait_for: wait.wait_for.clone(),
                    deadline_ms: wait.deadline_ms,
                },
                &wait.reason,
            ),
        ),
        Op::WaitEnded {
            run,
            step,
            status,
            at_ms,
        } => {
            let why = match status {
                WaitStatus::Approved { approver, note }
                | WaitStatus::Rejected { approver, note } => {
                    format!("{approver}: {note}")
                }
                WaitStatus::Signalled { signal } => {
                    format!(
                        "signal {} ({}) from {}",
                        signal.seq, signal.name, signal.sender
                    )
                }
                WaitStatus::ChildEnded { state, checkpoint } => match checkpoint {
                    Some(version) => format!("the child ended {state} at checkpoint {version}"),
                    None => format!("the child ended {state} with no checkpoint"),
                },
                WaitStatus::Replied { status } => format!("the effect is {}", status.name()),
                WaitStatus::ChildrenEnded { ended } => ended
                    .iter()
                    .map(|end| match end.checkpoint {
                        Some(version) => {
                            format!("{} ended {} at checkpoint {version}", end.run, end.state)
                        }
                        None => format!("{} ended {} with no checkpoint", end.run, end.state),
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                WaitStatus::Open | WaitStatus::Elapsed => String::new(),
            };
            let what = AuditWhat::WaitEnded {
                step: step.clone(),
                status: Cow::Borrowed(status.name()),
            };
            (run.clone(), entry(*at_ms, None, what, &why))
        }
        Op::SignalReceived { run, signal } => (
            run.clone(),
            entry(
                signal.sent_ms,
                None,
                AuditWhat::SignalReceived {
                    seq: signal.seq,
                    name: signal.name.clone(),
                    sender: signal.sender.clone(),
                },
                "",
            ),
        ),
        Op::BudgetSet {
            run,
            limits,
            by,
            reason,
            at_ms,
        } => (
            run.clone(),
            entry(
                *at_ms,
                None,
                AuditWhat::BudgetSet {
                    limits: *limits,
                    by: by.clone(),
                },
                reason,
            ),
        ),
        Op::BudgetReserved { run, reservation } => (
            run.clone(),
            entry(
                reservation.reserved_ms,
                Some(reservation.token),
                AuditWhat::Reserved {
                    charge: reservation.charge.clone(),
                    amount: reservation.amount,
                },
                "",
            ),
        ),
        Op::BudgetSettled {
            run,
            charge,
            actual,
            at_ms,
            token,
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(*token),
                AuditWhat::ChargeSettled {
                    charge: charge.clone(),
                    actual: *actual,
                },
                "",
            ),
        ),
        Op::SagaOpened {
            run,
            end,
            at_ms,
            token,
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(*token),
                AuditWhat::SagaOpened { end: *end },
                "",
            ),
        ),
        Op::ResourceAcquired {
            resource,
            run,
            token,
            expires_ms,
            at_ms,
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(*token),
                AuditWhat::ResourceAcquired {
                    resource: resource.clone(),
                    expires_ms: *expires_ms,
                },
                "",
            ),
        ),
        Op::ResourceRenewed {
            resource,
            run,
            token,
            expires_ms,
            at_ms,
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(*token),
                AuditWhat::ResourceRenewed {
                    resource: resource.clone(),
                    expires_ms: *expires_ms,
                },
                "",
            ),
        ),
        Op::ResourceReleased {
            resource,
            run,
            token,
            at_ms,
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(*token),
                AuditWhat::ResourceReleased {
                    resource: resource.clone(),
                },
                "",
            ),
        ),
        // A pruned run's journal goes with it.
        Op::RunPruned { .. } => return None,
        Op::RunVersionMoved {
            run,
            from,
            to,
            at_ms,
            token,
            operator,
            reason,
            ..
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(*token),
                AuditWhat::VersionMoved {
                    from: from.clone(),
                    to: to.clone(),
                    operator: operator.clone(),
                },
                reason,
            ),
        ),
        Op::RunRetried {
            run,
            at_ms,
            token,
            reopened,
            restored,
            operator,
            reason,
            ..
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(*token),
                AuditWhat::Retried {
                    reopened: reopened.clone(),
                    restored: *restored,
                    operator: operator.clone(),
                },
                reason,
            ),
        ),
        Op::RunForked {
            run,
            from,
            checkpoint,
            at_ms,
            operator,
            reason,
        } => (
            run.clone(),
            entry(
                *at_ms,
                None,
                AuditWhat::Forked {
                    from: from.clone(),
                    checkpoint: *checkpoint,
                    operator: operator.clone(),
                },
                reason,
            ),
        ),
        Op::SharedSet {
            key,
            version,
            change,
            ..
        } => {
            // A set by an operator belongs to no run: it is journaled with
            // the key only.
            let run = change.run.as_ref()?;
            (
                run.clone(),
                entry(
                    change.at_ms,
                    change.token,
                    AuditWhat::SharedSet {
                        key: key.clone(),
                        version: *version,
                        value: change.value_digest,
                    },
                    &change.why,
                ),
            )
        }
    };
    Some((run, line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::books::BooksRead;
    use crate::books::RunState;
    use crate::books::ToolClass;
    use crate::books::test_support::*;
    use crate::books::*;

    #[test]
    fn the_journal_says_what_why_when_and_under_which_token() {
        let (mut b, g) = books_with_leased_run("r");
        b.now_ms += 5;
        b.ok(transition("r", &g, RunState::Running));
        let mut cmd = begin("r", "wire", &g, ToolClass::Queryable, b"usd 100 to mmf");
        if let Command::BeginEffect(c) = &mut cmd {
            c.rationale = "excess cash above policy threshold".to_string();
        }
        b.ok(cmd);
        let journal = b.mem.audit(&rid("r"), 1);
        let seqs: Vec<u64> = journal.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4]);
        assert_eq!(journal[0].token, None);
        assert!(journal[1].what.to_string().contains("lease acquired"));
        assert_eq!(journal[2].what.to_string(), "pending -> running");
        assert_eq!(journal[2].at_ms, b.now_ms);
        assert_eq!(journal[3].token, Some(g.token));
        assert_eq!(journal[3].why, "excess cash above policy threshold");
        assert_eq!(b.mem.audit(&rid("r"), 4).len(), 1);
    }

    #[test]
    fn blob_puts_are_not_journaled() {
        let op = Op::BlobPut {
            digest: crate::books::digest_of(b"x"),
            bytes: b"x".to_vec(),
        };
        assert!(describe(&op).is_none());
        let (b, _g) = books_with_leased_run("r");
        assert_eq!(b.mem.audit_len(&rid("r")), 2);
    }
}

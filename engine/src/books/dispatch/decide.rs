//! `decide`: validates a command against the current state and returns the
//! ops to log and the answer to give. Validation happens here and only
//! here; the ops it returns always apply cleanly to the state it read.
//!
//! Invariants: decide reads state and `now_ms` only (no clock, no I/O, no
//! randomness), so the same state and command give the same ops; a refused
//! command yields no ops; a batch yields the ops of all its commands or,
//! if any is refused, none.

use crate::books::base::limits::{BATCH_COMMANDS_MAX, check_size};
use crate::books::fold::apply::apply;
use crate::books::rules::budget::{decide_reserve, decide_set_budget, decide_settle};
use crate::books::rules::checkpoint::decide_save;
use crate::books::rules::compensation::decide_begin_compensation;
use crate::books::rules::coord::{
    decide_acquire_resource, decide_release_resource, decide_set_shared,
};
use crate::books::rules::decision::decide_record;
use crate::books::rules::effect::{
    decide_begin, decide_deliver_reply, decide_finish, decide_reconcile,
};
use crate::books::rules::lease::{decide_acquire, decide_claim, decide_release, decide_renew};
use crate::books::rules::retention::decide_prune;
use crate::books::rules::retry::{decide_fork, decide_retry};
use crate::books::rules::run::{decide_create, decide_operate, decide_transition};
use crate::books::rules::saga::decide_end_saga;
use crate::books::rules::version::decide_move_version;
use crate::books::rules::wait::{decide_approval, decide_open_wait, decide_signal, wake_parents};
use crate::books::views::overlay::Overlay;
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::Command;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// Decides `cmd` against `state` at `now_ms` (see the module docs).
pub fn decide(state: &impl BooksRead, cmd: &Command, now_ms: u64) -> Result<Decided> {
    match cmd {
        Command::Batch(cmds) => decide_batch(state, cmds, now_ms),
        single => decide_one(state, single, now_ms),
    }
}

/// Decides one command, then ends the parents' waits for any child runs
/// it ends (a child's end wakes its parent in the same commit, whichever
/// command ended it).
fn decide_one(state: &dyn BooksRead, cmd: &Command, now_ms: u64) -> Result<Decided> {
    let mut decided = decide_command(state, cmd, now_ms)?;
    let woken = wake_parents(state, &decided.ops, now_ms);
    decided.ops.extend(woken);
    Ok(decided)
}

fn decide_command(state: &dyn BooksRead, cmd: &Command, now_ms: u64) -> Result<Decided> {
    match cmd {
        Command::CreateRun(c) => decide_create(state, c, now_ms),
        Command::Transition(c) => decide_transition(state, c, now_ms),
        Command::AcquireLease(c) => decide_acquire(state, c, now_ms),
        Command::ClaimNext(c) => decide_claim(state, c, now_ms),
        Command::RenewLease(c) => decide_renew(state, c, now_ms),
        Command::ReleaseLease(c) => decide_release(state, c, now_ms),
        Command::BeginEffect(c) => decide_begin(state, c, now_ms),
        Command::FinishEffect(c) => decide_finish(state, c, now_ms),
        Command::Reconcile(c) => decide_reconcile(state, c, now_ms),
        Command::BeginCompensation(c) => decide_begin_compensation(state, c, now_ms),
        Command::SaveCheckpoint(c) => decide_save(state, c, now_ms),
        Command::RecordDecision(c) => decide_record(state, c, now_ms),
        Command::Operate(c) => decide_operate(state, c, now_ms),
        Command::OpenWait(c) => decide_open_wait(state, c, now_ms),
        Command::DecideApproval(c) => decide_approval(state, c, now_ms),
        Command::SendSignal(c) => decide_signal(state, c, now_ms),
        Command::DeliverReply(c) => decide_deliver_reply(state, c, now_ms),
        Command::SetBudget(c) => decide_set_budget(state, c, now_ms),
        Command::Reserve(c) => decide_reserve(state, c, now_ms),
        Command::Settle(c) => decide_settle(state, c, now_ms),
        Command::EndSaga(c) => decide_end_saga(state, c, now_ms),
        Command::AcquireResource(c) => decide_acquire_resource(state, c, now_ms),
        Command::ReleaseResource(c) => decide_release_resource(state, c, now_ms),
        Command::SetShared(c) => decide_set_shared(state, c, now_ms),
        Command::Prune(c) => decide_prune(state, c, now_ms),
        Command::MoveVersion(c) => decide_move_version(state, c, now_ms),
        Command::RetryRun(c) => decide_retry(state, c, now_ms),
        Command::ForkRun(c) => decide_fork(state, c, now_ms),
        Command::Batch(_) => Err(Error::InvalidCommand {
            reason: "batches do not nest; flatten the inner batch into the outer one".to_string(),
        }),
    }
}

/// Decides each command against an overlay holding the earlier commands'
/// effects; the first refusal refuses the whole batch.
fn decide_batch(state: &dyn BooksRead, cmds: &[Command], now_ms: u64) -> Result<Decided> {
    if cmds.is_empty() {
        return Err(Error::InvalidCommand {
            reason: "an empty batch commits nothing".to_string(),
        });
    }
    check_size(
        || "batch (in commands, not bytes)".to_string(),
        cmds.len(),
        BATCH_COMMANDS_MAX,
    )?;
    let mut overlay = Overlay::new(state);
    let mut ops = Vec::new();
    let mut answers = Vec::with_capacity(cmds.len());
    for (index, cmd) in cmds.iter().enumerate() {
        let decided = decide_one(&overlay, cmd, now_ms).map_err(|cause| Error::BatchRefused {
            index,
            cause: Box::new(cause),
        })?;
        for op in &decided.ops {
            // A disagreement between decide and apply refuses the batch.
            apply(&mut overlay, op)?;
        }
        ops.extend(decided.ops);
        answers.push(decided.answer);
    }
    assert_eq!(answers.len(), cmds.len());
    Ok(Decided {
        ops,
        answer: Answer::Batch(answers),
    })
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::Part;
    use crate::books::test_support::*;
    use crate::books::*;
    use crate::books::{EffectStatus, Outcome, ToolClass};

    #[test]
    fn a_batch_whose_last_command_is_invalid_produces_no_ops() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(transition("r", &g, RunState::Running));
        let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!()
        };
        let before = b.mem.clone();
        let batch = Command::Batch(vec![
            finish(
                &key,
                &g,
                Outcome::Confirmed {
                    receipt: b"r".to_vec(),
                },
            ),
            save(
                "r",
                &g,
                1,
                vec![Part {
                    name: "m".into(),
                    bytes: b"x".to_vec(),
                    extends: None,
                    inline: false,
                }],
            ),
            transition("r", &g, RunState::Completed),
            transition("r", &g, RunState::Running), // completed is final
        ]);
        let err = decide(&b.mem, &batch, b.now_ms).unwrap_err();
        assert!(
            matches!(&err, Error::BatchRefused { index: 3, cause } if matches!(**cause, Error::RunTerminal { .. })),
            "{err}"
        );
        assert_eq!(b.mem, before);
    }

    #[test]
    fn a_valid_batch_commits_finish_checkpoint_and_transition_together() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(transition("r", &g, RunState::Running));
        let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!()
        };
        let parts = vec![
            Part {
                name: "m".into(),
                bytes: b"x".to_vec(),
                extends: None,
                inline: false,
            },
            Part {
                name: "n".into(),
                bytes: b"x".to_vec(),
                extends: None,
                inline: false,
            },
        ];
        let batch = Command::Batch(vec![
            finish(
                &key,
                &g,
                Outcome::Confirmed {
                    receipt: b"r".to_vec(),
                },
            ),
            save("r", &g, 1, parts.clone()),
            // The second save sees the first's blob through the overlay.
            save("r", &g, 1, parts),
            transition("r", &g, RunState::WaitingHuman),
        ]);
        let d = b.ok(batch);
        let Answer::Batch(answers) = &d.answer else {
            panic!()
        };
        assert_eq!(answers.len(), 4);
        assert!(matches!(
            answers[2],
            Answer::CheckpointSaved {
                version: 2,
                blobs_written: 0,
                ..
            }
        ));
        assert_eq!(
            d.ops
                .iter()
                .filter(|op| matches!(op, Op::BlobPut { .. }))
                .count(),
            1
        );
        assert!(matches!(
            b.mem.effect(&key).unwrap().status,
            EffectStatus::Confirmed { .. }
        ));
        assert_eq!(b.mem.run(&rid("r")).unwrap().state, RunState::WaitingHuman);
    }

    #[test]
    fn empty_oversized_and_nested_batches_are_refused() {
        let (b, g) = books_with_leased_run("r");
        assert!(matches!(
            decide(&b.mem, &Command::Batch(vec![]), 0),
            Err(Error::InvalidCommand { .. })
        ));
        let nested = Command::Batch(vec![Command::Batch(vec![transition(
            "r",
            &g,
            RunState::Running,
        )])]);
        assert!(matches!(
            decide(&b.mem, &nested, b.now_ms),
            Err(Error::BatchRefused { index: 0, .. })
        ));
        let big = Command::Batch(vec![
            transition("r", &g, RunState::Running);
            BATCH_COMMANDS_MAX + 1
        ]);
        assert!(matches!(
            decide(&b.mem, &big, b.now_ms),
            Err(Error::TooLarge { .. })
        ));
    }

    #[test]
    fn decide_is_deterministic() {
        let (b, g) = books_with_running_run("r");
        let cmd = begin("r", "s", &g, ToolClass::NotIdempotent, b"a");
        assert_eq!(
            decide(&b.mem, &cmd, b.now_ms).unwrap(),
            decide(&b.mem, &cmd, b.now_ms).unwrap()
        );
        assert!(decide(&b.mem, &cmd, b.now_ms).unwrap().ops.len() == 1);
    }
}

//! `decide`: validates a command against the current state and returns the
//! ops to log and the answer to give. Validation happens here and only
//! here; the ops it returns always apply cleanly to the state it read.
//!
//! Invariants: decide reads state and `now_ms` only (no clock, no I/O, no
//! randomness), so the same state and command give the same ops; a refused
//! command yields no ops; a batch yields the ops of all its commands or,
//! if any is refused, none.

use super::apply::apply;
use super::budget::{Reserved, SettledCharge, decide_reserve, decide_set_budget, decide_settle};
use super::checkpoint::decide_save;
use super::command::Command;
use super::compensation::decide_begin_compensation;
use super::coord::{decide_acquire_resource, decide_release_resource, decide_set_shared};
use super::decision::{DecisionRecord, decide_record};
use super::effect::{decide_begin, decide_deliver_reply, decide_finish, decide_reconcile};
use super::ids::{EffectKey, FencingToken, ResourceId, RunId, SharedKeyId, StepId};
use super::lease::{decide_acquire, decide_claim, decide_release, decide_renew};
use super::limits::{BATCH_COMMANDS_MAX, check_size};
use super::op::Op;
use super::overlay::Overlay;
use super::retention::decide_prune;
use super::run::{RunState, decide_create, decide_operate, decide_transition};
use super::saga::decide_end_saga;
use super::state::BooksRead;
use super::wait::{WaitRecord, decide_approval, decide_open_wait, decide_signal, wake_parents};
use crate::error::{Error, Result};

/// What `BeginEffect` decided (ceremony points 1 to 3): the one answer a
/// caller acts on before touching the world.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Begun {
    /// The intent is recorded: act now, passing `key` and `token` to the tool.
    Proceed {
        /// The idempotency key.
        key: EffectKey,
        /// The fencing token.
        token: FencingToken,
    },
    /// The step was already done: here is its receipt; do not act.
    Replay {
        /// The idempotency key of the confirmed attempt.
        key: EffectKey,
        /// The stored receipt.
        receipt: Vec<u8>,
    },
    /// An intent without outcome, inside the tool's dedup window: send
    /// again with the *same* key.
    Resend {
        /// The (unchanged) idempotency key.
        key: EffectKey,
        /// The fencing token.
        token: FencingToken,
    },
    /// An intent without outcome on a queryable tool: ask the tool about
    /// `key`, then send `Reconcile`. Do not act.
    Reconcile {
        /// The key to ask about.
        key: EffectKey,
        /// The fencing token.
        token: FencingToken,
    },
    /// Nobody knows whether the act happened; it must be reconciled by a
    /// person or a query. Do not act.
    Unknown {
        /// The ambiguous attempt.
        key: EffectKey,
        /// Why it is unknown.
        reason: String,
    },
    /// The step was done and compensated; do not act.
    Compensated {
        /// The attempt.
        key: EffectKey,
    },
}

/// What the caller is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The run was created at `version`.
    RunCreated {
        /// The run.
        run: RunId,
        /// Its version (1).
        version: u64,
    },
    /// The run already existed with the same input; nothing changed.
    RunExisted {
        /// The run.
        run: RunId,
        /// Its current version.
        version: u64,
        /// Its current state.
        state: RunState,
    },
    /// The run moved.
    Transitioned {
        /// The run.
        run: RunId,
        /// Its state before.
        from: RunState,
        /// Its state now.
        to: RunState,
        /// Its version now.
        version: u64,
    },
    /// The caller holds the run's lease (acquire, claim or renew).
    Leased {
        /// The run.
        run: RunId,
        /// The token to present on every mutation and to hand to tools.
        token: FencingToken,
        /// When the lease dies unless renewed, ms since the epoch.
        expires_ms: u64,
        /// The run's version now.
        version: u64,
    },
    /// No run is claimable now.
    NothingToClaim,
    /// The lease was given up.
    Released {
        /// The run.
        run: RunId,
        /// Its version now.
        version: u64,
    },
    /// What `BeginEffect` decided: act, replay, resend, reconcile, or not.
    Begun(Begun),
    /// The effect settled (or already had exactly this outcome).
    Settled {
        /// The attempt.
        key: EffectKey,
        /// Its status now (`confirmed`, ...).
        status: &'static str,
    },
    /// An asynchronous tool's reply was recorded (or the entry already held
    /// exactly this outcome).
    Replied {
        /// The attempt it answers.
        key: EffectKey,
        /// Its status now (`confirmed` or `failed`).
        status: &'static str,
        /// The step whose wait for the reply it ended, if one was open.
        wait_ended: Option<StepId>,
    },
    /// The checkpoint was saved.
    CheckpointSaved {
        /// The run.
        run: RunId,
        /// The checkpoint's version.
        version: u64,
        /// Parts whose bytes were new.
        blobs_written: usize,
        /// Bytes of the new parts.
        bytes_written: u64,
        /// Parts whose bytes were already stored.
        blobs_reused: usize,
    },
    /// The model call was journaled.
    DecisionRecorded {
        /// The run.
        run: RunId,
        /// Its position.
        position: u64,
    },
    /// The call at this position was already journaled with this input:
    /// reuse it instead of calling the model.
    DecisionReplay {
        /// The recorded call.
        record: DecisionRecord,
    },
    /// An operator's action: the run's state and version after it, and
    /// whether it changed anything (`false`: the run was already there).
    Operated {
        /// The run.
        run: RunId,
        /// Its state now.
        state: RunState,
        /// Its version now.
        version: u64,
        /// False if the run was already in the asked state.
        changed: bool,
    },
    /// The wait at the step, as it stands: just opened (`Open`, the run
    /// is waiting and its lease released), or ended (by then, or at once:
    /// the run goes on).
    Waited {
        /// The wait.
        wait: WaitRecord,
        /// The run's state now.
        state: RunState,
    },
    /// An approval was decided.
    WaitEnded {
        /// The run.
        run: RunId,
        /// The step whose wait ended.
        step: StepId,
        /// `approved` or `rejected`.
        status: &'static str,
        /// True if the run was waiting and is now claimable (false if an
        /// operator paused it meanwhile).
        woke: bool,
    },
    /// A signal was received.
    Signalled {
        /// The run.
        run: RunId,
        /// The signal's number among the run's signals.
        seq: u64,
        /// The step whose wait it ended, if one waited for it; otherwise it
        /// waits in the run's inbox.
        taken_by: Option<StepId>,
    },
    /// The run's budget limits were set.
    BudgetSet {
        /// The run.
        run: RunId,
    },
    /// What a reserve decided: make the call, it was made, or the budget
    /// is exhausted (and the run paused).
    Reserved(Reserved),
    /// A reserved call's cost was recorded.
    ChargeSettled(SettledCharge),
    /// The answers of a batch's commands, in order.
    Batch(Vec<Answer>),
    /// The run holds the resource's lease: hand `token` to the tools.
    ResourceGranted {
        /// The resource.
        resource: ResourceId,
        /// The hold's fencing token.
        token: FencingToken,
        /// When the hold dies unless renewed, ms since the epoch.
        expires_ms: u64,
        /// True if the run held it already (same token, later expiry).
        renewed: bool,
    },
    /// The run gave the resource's lease up.
    ResourceReleased {
        /// The resource.
        resource: ResourceId,
    },
    /// What a prune removed, and what it kept and why.
    Pruned {
        /// The runs removed.
        pruned: Vec<RunId>,
        /// The runs kept, each with the reason.
        kept: Vec<(RunId, String)>,
    },
    /// A shared key's compare-and-set: its version now, and whether it
    /// changed (false: it held that value already).
    SharedSet {
        /// The key.
        key: SharedKeyId,
        /// Its version now.
        version: u64,
        /// False if it held the value already.
        changed: bool,
    },
}

/// The outcome of deciding a command: the ops to log (possibly none) and
/// the answer to give once they are durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    /// Ops to log, in order, as one atomic commit.
    pub ops: Vec<Op>,
    /// The answer for the caller.
    pub answer: Answer,
}

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
    use crate::books::checkpoint::Part;
    use crate::books::ledger::{EffectStatus, Outcome, ToolClass};
    use crate::books::test_support::*;

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
            },
            Part {
                name: "n".into(),
                bytes: b"x".to_vec(),
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

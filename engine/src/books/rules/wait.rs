//! Durable waits: a run stops at a step until a person approves the exact
//! effect it is about to make, a signal arrives from outside, or a timer is
//! due; meanwhile it holds no lease, so no worker is tied up.
//!
//! A run's waits and the signals sent to it live in one record, its
//! [`WaitBook`]. A worker opens a wait at a step ([`OpenWait`]): the run
//! moves to `waiting_human` (an approval) or `waiting_tool` (a signal or a
//! timer) and its lease is released in the same commit. The wait ends when
//! an approver decides ([`DecideApproval`], no lease needed), a matching
//! signal arrives ([`SendSignal`], no lease needed) or its deadline passes
//! (the next claim of the run ends it). An approval or a signal moves the
//! run back to `running` with no lease, so `claim_next` hands it out; a
//! deadline makes the run claimable at that instant, and the claim ends the
//! wait and starts the run in the same commit.
//!
//! Invariants: a run has at most one open wait, the last of its book, and
//! only while it is waiting or paused; a step opens at most one wait of
//! each kind ([`WaitFor::kind`]: an approval, then the reply of the act it
//! approved), and
//! asking again with the same terms answers with the wait as it stands
//! (so a resumed worker learns how it ended); an approval is bound to the
//! arguments digest of the effect it approves and is refused for any other,
//! after its deadline, or once decided; a signal is taken by at most one
//! wait, and signals of one name are taken in the order they arrived.

use crate::books::base::digest::Digest;
use crate::books::base::ids::{EffectKey, RunId, StepId};
use crate::books::base::limits::{
    CHILDREN_MAX, INBOX_SIGNALS_MAX, SIGNAL_PAYLOAD_BYTES_MAX, check_size, check_text,
};
use crate::books::records::ledger::EffectStatus;
use crate::books::records::run::{Run, RunState};
use crate::books::records::wait::{
    ChildEnd, Join, SignalRecord, WaitBook, WaitFor, WaitRecord, WaitStatus,
};
use crate::books::rules::checks::{
    check_live, check_name, check_running, existing, move_under_current_token,
};
use crate::books::rules::run::cancel_with_awaited;
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::{DecideApproval, OpenWait, SendSignal};
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// The wait's terms as text, for a mismatch message.
fn terms(wait_for: &WaitFor, deadline_ms: Option<u64>) -> String {
    match deadline_ms {
        Some(at) => format!("{wait_for} until {at} ms"),
        None => format!("{wait_for}, no deadline"),
    }
}

fn check_terms(cmd: &OpenWait) -> Result<()> {
    check_text("wait reason", &cmd.reason)?;
    match &cmd.wait_for {
        WaitFor::Approval { role, .. } => check_name("approver role", role)?,
        WaitFor::Signal { name } => check_name("signal name", name)?,
        WaitFor::Timer => {}
        WaitFor::Child { run } if *run == cmd.run => {
            return Err(Error::InvalidCommand {
                reason: format!("run {run} cannot wait for its own end"),
            });
        }
        WaitFor::Child { .. } => {}
        WaitFor::Reply { key } if *key.run() != cmd.run || *key.step() != cmd.step => {
            return Err(Error::InvalidCommand {
                reason: format!(
                    "step {} of run {} cannot wait for the reply to effect {key}: only to an \
                     effect it began",
                    cmd.step, cmd.run
                ),
            });
        }
        WaitFor::Reply { .. } => {}
        WaitFor::Children { runs, .. } => check_children_terms(cmd, runs)?,
    }
    let needs_deadline = matches!(cmd.wait_for, WaitFor::Approval { .. } | WaitFor::Timer);
    if needs_deadline && cmd.deadline_ms.is_none() {
        return Err(Error::InvalidCommand {
            reason: format!(
                "the {} at step {} of run {} needs a deadline",
                cmd.wait_for, cmd.step, cmd.run
            ),
        });
    }
    Ok(())
}

/// A fan-out's children: one at least, at most [`CHILDREN_MAX`], each
/// once, none the waiting run itself.
fn check_children_terms(cmd: &OpenWait, runs: &[RunId]) -> Result<()> {
    let refuse = |why: String| {
        Err(Error::InvalidCommand {
            reason: format!("step {} of run {} cannot wait for {why}", cmd.step, cmd.run),
        })
    };
    if runs.is_empty() {
        return refuse("no children".to_string());
    }
    check_size(
        || {
            format!(
                "children awaited at step {} of run {} (in runs, not bytes)",
                cmd.step, cmd.run
            )
        },
        runs.len(),
        CHILDREN_MAX,
    )?;
    if runs.contains(&cmd.run) {
        return refuse("its own end".to_string());
    }
    for (i, run) in runs.iter().enumerate() {
        if runs[..i].contains(run) {
            return refuse(format!("child run {run} twice"));
        }
    }
    Ok(())
}

/// Refuses a new approval that would be expired already (asking again for
/// an existing one is answered with how it ended, whenever it is asked).
fn check_not_expired(cmd: &OpenWait, now_ms: u64) -> Result<()> {
    if let (WaitFor::Approval { .. }, Some(at)) = (&cmd.wait_for, cmd.deadline_ms)
        && at <= now_ms
    {
        return Err(Error::InvalidCommand {
            reason: format!(
                "the approval at step {} of run {} would expire at {at} ms, not after now \
                 ({now_ms} ms)",
                cmd.step, cmd.run
            ),
        });
    }
    Ok(())
}

/// Decides `OpenWait`: the holder of a running run's live lease stops it
/// at a step. Asking again at the same step with the same terms answers
/// with the wait as it stands; with other terms it is `WaitMismatch`. A
/// signal already in the inbox, or a deadline already past, ends the new
/// wait at once and the run goes on running; otherwise the run moves to its
/// waiting state and its lease is released.
pub(crate) fn decide_open_wait(
    state: &dyn BooksRead,
    cmd: &OpenWait,
    now_ms: u64,
) -> Result<Decided> {
    check_terms(cmd)?;
    let run = existing(state, &cmd.run)?;
    check_live(&run, &cmd.guard, now_ms)?;
    let book = state
        .waits(&run.id)
        .unwrap_or_else(|| WaitBook::new(run.id.clone()));
    if let Some(found) = book.wait_like(&cmd.step, &cmd.wait_for) {
        if found.wait_for != cmd.wait_for || found.deadline_ms != cmd.deadline_ms {
            return Err(Error::WaitMismatch {
                run: run.id.clone(),
                step: cmd.step.clone(),
                recorded: terms(&found.wait_for, found.deadline_ms),
                presented: terms(&cmd.wait_for, cmd.deadline_ms),
            });
        }
        return Ok(Decided {
            ops: Vec::new(),
            answer: Answer::Waited {
                wait: found.clone(),
                state: run.state,
            },
        });
    }
    check_running(&run, "open a wait")?;
    check_not_expired(cmd, now_ms)?;
    let ended_already = match &cmd.wait_for {
        WaitFor::Child { run: child } => check_child(state, &run, child)?,
        WaitFor::Children { runs, join } => {
            let mut ended = Vec::new();
            for child in runs {
                if let Some(WaitStatus::ChildEnded { state, checkpoint }) =
                    check_child(state, &run, child)?
                {
                    ended.push(ChildEnd {
                        run: child.clone(),
                        state,
                        checkpoint,
                    });
                }
            }
            joined(runs.len(), *join, ended)
        }
        WaitFor::Reply { key } => {
            let entry = state.effect(key).ok_or_else(|| Error::NotFound {
                what: format!("effect {key}, whose reply step {} would wait for", cmd.step),
            })?;
            replied(&entry.status)
        }
        _ => None,
    };
    assert!(
        book.open_wait().is_none(),
        "a running run of {} has no open wait",
        run.id
    );
    let opened = WaitRecord {
        step: cmd.step.clone(),
        seq: book.waits.len() as u64 + 1,
        wait_for: cmd.wait_for.clone(),
        deadline_ms: cmd.deadline_ms,
        opened_ms: now_ms,
        token: cmd.guard.token,
        reason: cmd.reason.clone(),
        status: WaitStatus::Open,
        ended_ms: None,
    };
    let mut ops = vec![Op::WaitOpened {
        run: run.id.clone(),
        wait: opened.clone(),
    }];
    let ended = match &cmd.wait_for {
        WaitFor::Signal { name } => book.first_signal(name).map(|signal| WaitStatus::Signalled {
            signal: signal.clone(),
        }),
        _ => ended_already,
    }
    .or_else(|| {
        cmd.deadline_ms
            .is_some_and(|at| at <= now_ms)
            .then_some(WaitStatus::Elapsed)
    });
    if let Some(status) = ended {
        ops.push(Op::WaitEnded {
            run: run.id.clone(),
            step: cmd.step.clone(),
            status: status.clone(),
            at_ms: now_ms,
        });
        if let (
            WaitFor::Children {
                runs,
                join: Join::First,
            },
            WaitStatus::ChildrenEnded { ended },
        ) = (&cmd.wait_for, &status)
        {
            let losers: Vec<RunId> = runs
                .iter()
                .filter(|c| ended.iter().all(|e| e.run != **c))
                .cloned()
                .collect();
            let why = ended.first().map_or_else(String::new, |e| {
                format!("its sibling {} ended {} first", e.run, e.state)
            });
            ops.extend(cancel_with_awaited(state, &losers, &why, now_ms));
        }
        let wait = WaitRecord {
            status,
            ended_ms: Some(now_ms),
            ..opened
        };
        return Ok(Decided {
            ops,
            answer: Answer::Waited {
                wait,
                state: run.state,
            },
        });
    }
    let to = cmd.wait_for.waiting_state();
    let (moved, version) = move_under_current_token(&run, to, now_ms, cmd.reason.clone());
    ops.push(moved);
    ops.push(Op::LeaseReleased {
        run: run.id.clone(),
        token: cmd.guard.token,
        version: version + 1,
        at_ms: now_ms,
    });
    Ok(Decided {
        ops,
        answer: Answer::Waited {
            wait: opened,
            state: to,
        },
    })
}

/// Checks that `child` is a child of `parent`; its end as a wait status
/// if it ended already (the wait then ends as it opens).
fn check_child(state: &dyn BooksRead, parent: &Run, child: &RunId) -> Result<Option<WaitStatus>> {
    let found = existing(state, child)?;
    if found.parent.as_ref() != Some(&parent.id) {
        return Err(Error::InvalidCommand {
            reason: format!(
                "run {} cannot wait for the end of run {child}: its parent is {}",
                parent.id,
                found
                    .parent
                    .as_ref()
                    .map_or_else(|| "none".to_string(), |p| format!("run {p}"))
            ),
        });
    }
    Ok(found
        .state
        .is_terminal()
        .then(|| child_ended(state, &found.id, found.state)))
}

/// The status ending a wait for `child`, which ended in `state`.
fn child_ended(state: &dyn BooksRead, child: &RunId, ended_in: RunState) -> WaitStatus {
    let end = child_end(state, child, ended_in);
    WaitStatus::ChildEnded {
        state: end.state,
        checkpoint: end.checkpoint,
    }
}

/// How `child`, which ended in `ended_in`, ended: with its last checkpoint.
fn child_end(state: &dyn BooksRead, child: &RunId, ended_in: RunState) -> ChildEnd {
    ChildEnd {
        run: child.clone(),
        state: ended_in,
        checkpoint: state.checkpoint_latest(child).map(|meta| meta.version),
    }
}

/// The status ending a wait for `awaited` children joined by `join`,
/// given those that have `ended` (in the order the wait names them), or
/// `None` while it stays open.
fn joined(awaited: usize, join: Join, mut ended: Vec<ChildEnd>) -> Option<WaitStatus> {
    match join {
        Join::First if !ended.is_empty() => {
            ended.truncate(1);
            Some(WaitStatus::ChildrenEnded { ended })
        }
        Join::All if ended.len() == awaited => Some(WaitStatus::ChildrenEnded { ended }),
        Join::First | Join::All => None,
    }
}

/// The status ending a wait for the reply to an effect now in `status`:
/// `None` while no reply is in (intended, or unknown: the caller could not
/// tell, the tool may still answer).
fn replied(status: &EffectStatus) -> Option<WaitStatus> {
    match status {
        EffectStatus::Intended | EffectStatus::Unknown { .. } => None,
        settled => Some(WaitStatus::Replied {
            status: settled.clone(),
        }),
    }
}

/// The ops that end `run`'s wait for the reply to effect `key`, which
/// settles into `status` now, and wake the run (if it sat waiting; a
/// paused run stays paused); none if no such wait is open or `status` is
/// no reply. Whoever settles the effect (a delivered reply, a worker's
/// outcome, a reconcile) calls this in the same decision, so a run never
/// waits for a reply its ledger already holds.
pub(crate) fn wake_on_reply(
    state: &dyn BooksRead,
    run: &Run,
    key: &EffectKey,
    status: &EffectStatus,
    now_ms: u64,
) -> Vec<Op> {
    // Only a waiting or paused run has an open wait: a running one, the
    // common case on this path, costs no read of its wait book.
    if !matches!(run.state, RunState::WaitingTool | RunState::Paused) {
        return Vec::new();
    }
    let Some(status) = replied(status) else {
        return Vec::new();
    };
    let book = state.waits(&run.id);
    let Some(wait) = book.as_ref().and_then(|b| b.open_wait()) else {
        return Vec::new();
    };
    if wait.wait_for != (WaitFor::Reply { key: key.clone() }) {
        return Vec::new();
    }
    let ended = Op::WaitEnded {
        run: run.id.clone(),
        step: wait.step.clone(),
        status,
        at_ms: now_ms,
    };
    let reason = format!("the reply to effect {key} arrived");
    std::iter::once(ended)
        .chain(wake(run, RunState::WaitingTool, now_ms, reason))
        .collect()
}

/// The ops that end the parents' waits for the children that `ops` end:
/// for each run `ops` move to a terminal state whose parent waits for it,
/// the parent's wait ends (for a wait on several children, once the join
/// is met) with the children's states and last checkpoints, and the parent
/// wakes (if it sat waiting; a paused parent stays paused). `state` is the
/// books before `ops`; a parent that ended already, or that `ops` end too
/// (a cancel takes its awaited children with it), is left as it is.
pub(crate) fn wake_parents(state: &dyn BooksRead, ops: &[Op], now_ms: u64) -> Vec<Op> {
    wake_parents_joining(state, ops, now_ms, false)
}

/// The planted bug `JoinAllAtFirstEnd`: the ops that end, at the first
/// child's end, the waits for all of several children that `ops` would
/// leave open (as if every join were [`Join::First`]).
pub(crate) fn wake_all_joins_at_first_end(
    state: &dyn BooksRead,
    ops: &[Op],
    now_ms: u64,
) -> Vec<Op> {
    let woken: Vec<&RunId> = ops
        .iter()
        .filter_map(|op| match op {
            Op::WaitEnded { run, .. } => Some(run),
            _ => None,
        })
        .collect();
    let early = wake_parents_joining(state, ops, now_ms, true);
    early
        .into_iter()
        .filter(|op| match op {
            Op::WaitEnded { run, .. } | Op::RunTransitioned { run, .. } => !woken.contains(&run),
            _ => true,
        })
        .collect()
}

/// [`wake_parents`]; `first_only` ends every wait on several children at
/// its first end (the planted bug above).
fn wake_parents_joining(
    state: &dyn BooksRead,
    ops: &[Op],
    now_ms: u64,
    first_only: bool,
) -> Vec<Op> {
    // The runs `ops` end, with the state they end in, in order.
    let ending: Vec<(&RunId, RunState)> = ops
        .iter()
        .filter_map(|op| match op {
            Op::RunTransitioned { run, to, .. } if to.is_terminal() => Some((run, *to)),
            _ => None,
        })
        .collect();
    let ended_in = |run: &RunId| {
        ending
            .iter()
            .find(|(r, _)| *r == run)
            .map(|(_, to)| *to)
            .or_else(|| state.run(run).map(|r| r.state).filter(|s| s.is_terminal()))
    };
    let mut woken = Vec::new();
    let mut parents_woken: Vec<RunId> = Vec::new();
    for (run, to) in &ending {
        let Some(parent) = state.run(run).and_then(|child| child.parent) else {
            continue;
        };
        if parents_woken.contains(&parent) {
            continue;
        }
        let Some(parent) = state
            .run(&parent)
            .filter(|p| !p.state.is_terminal() && ended_in(&p.id).is_none())
        else {
            continue;
        };
        let book = state.waits(&parent.id);
        let Some(wait) = book.as_ref().and_then(|b| b.open_wait()) else {
            continue;
        };
        let mut losers = Vec::new();
        let status = match &wait.wait_for {
            WaitFor::Child { run: awaited } if awaited == *run => child_ended(state, run, *to),
            WaitFor::Children { runs, join } if runs.contains(run) => {
                if *join == Join::First {
                    losers = runs
                        .iter()
                        .filter(|c| ended_in(c).is_none())
                        .cloned()
                        .collect();
                }
                let join = if first_only { Join::First } else { *join };
                // Of children ending at once, the first the wait names.
                let ended = runs
                    .iter()
                    .filter_map(|child| ended_in(child).map(|s| child_end(state, child, s)))
                    .collect();
                let Some(status) = joined(runs.len(), join, ended) else {
                    continue;
                };
                status
            }
            _ => continue,
        };
        woken.push(Op::WaitEnded {
            run: parent.id.clone(),
            step: wait.step.clone(),
            status,
            at_ms: now_ms,
        });
        let reason = format!("child run {run} ended {to}");
        woken.extend(wake(&parent, RunState::WaitingTool, now_ms, reason));
        let why = format!("its sibling {run} ended {to} first");
        woken.extend(cancel_with_awaited(state, &losers, &why, now_ms));
        parents_woken.push(parent.id.clone());
    }
    woken
}

/// The run's open wait, named by step, or why there is none to end.
fn open_wait_at<'b>(
    book: Option<&'b WaitBook>,
    run: &RunId,
    step: &StepId,
) -> Result<&'b WaitRecord> {
    let open = book.and_then(|b| b.open_wait()).filter(|w| w.step == *step);
    let wait = open
        .or_else(|| book.and_then(|b| b.wait_at(step)))
        .ok_or_else(|| Error::NotFound {
            what: format!("a wait at step {step} of run {run}"),
        })?;
    if !wait.is_open() {
        return Err(Error::WaitEnded {
            run: run.clone(),
            step: step.clone(),
            status: wait.status.name(),
        });
    }
    Ok(wait)
}

/// The op moving a run whose wait just ended back to `running`, if it sat
/// in its waiting state (a paused run stays paused until an operator
/// resumes it).
fn wake(run: &Run, waited_in: RunState, now_ms: u64, reason: String) -> Option<Op> {
    (run.state == waited_in)
        .then(|| move_under_current_token(run, RunState::Running, now_ms, reason).0)
}

/// Decides `DecideApproval`: an approver, with no lease, approves or
/// rejects the open approval at a step. It must name the digest the wait
/// is bound to and the role it asks for, before its deadline.
pub(crate) fn decide_approval(
    state: &dyn BooksRead,
    cmd: &DecideApproval,
    now_ms: u64,
) -> Result<Decided> {
    check_name("approver", &cmd.approver)?;
    check_text("approval note", &cmd.note)?;
    let run = existing(state, &cmd.run)?;
    if run.state.is_terminal() {
        return Err(Error::RunTerminal {
            run: run.id.clone(),
            state: run.state,
        });
    }
    let book = state.waits(&run.id);
    let wait = open_wait_at(book.as_ref(), &run.id, &cmd.step)?;
    let WaitFor::Approval { args_digest, role } = &wait.wait_for else {
        return Err(Error::InvalidCommand {
            reason: format!(
                "step {} of run {} waits for a {}, not an approval",
                cmd.step, run.id, wait.wait_for
            ),
        });
    };
    if let Some(deadline_ms) = wait.deadline_ms.filter(|at| *at <= now_ms) {
        return Err(Error::ApprovalExpired {
            run: run.id.clone(),
            step: cmd.step.clone(),
            deadline_ms,
            now_ms,
        });
    }
    if *args_digest != cmd.args_digest {
        return Err(Error::ApprovalMismatch {
            run: run.id.clone(),
            step: cmd.step.clone(),
            bound: *args_digest,
            presented: cmd.args_digest,
        });
    }
    if *role != cmd.role {
        return Err(Error::ApproverRole {
            run: run.id.clone(),
            step: cmd.step.clone(),
            required: role.clone(),
            presented: cmd.role.clone(),
        });
    }
    let (status, verb) = if cmd.approve {
        let status = WaitStatus::Approved {
            approver: cmd.approver.clone(),
            note: cmd.note.clone(),
        };
        (status, "approved")
    } else {
        let status = WaitStatus::Rejected {
            approver: cmd.approver.clone(),
            note: cmd.note.clone(),
        };
        (status, "rejected")
    };
    let mut ops = vec![Op::WaitEnded {
        run: run.id.clone(),
        step: cmd.step.clone(),
        status,
        at_ms: now_ms,
    }];
    let reason = format!("{verb} by {} ({role}): {}", cmd.approver, cmd.note);
    ops.extend(wake(&run, RunState::WaitingHuman, now_ms, reason));
    let woke = ops.len() > 1;
    Ok(Decided {
        ops,
        answer: Answer::WaitEnded {
            run: run.id.clone(),
            step: cmd.step.clone(),
            status: verb,
            woke,
        },
    })
}

/// Decides `SendSignal`: anyone, with no lease, sends a named signal to a
/// run that has not ended. If the run's open wait waits for that name, the
/// signal ends it and the run is woken; otherwise the signal waits in the
/// inbox for a later wait of that name.
pub(crate) fn decide_signal(
    state: &dyn BooksRead,
    cmd: &SendSignal,
    now_ms: u64,
) -> Result<Decided> {
    check_name("signal name", &cmd.name)?;
    check_name("signal sender", &cmd.sender)?;
    check_size(
        || format!("payload of signal {} to run {}", cmd.name, cmd.run),
        cmd.payload.len(),
        SIGNAL_PAYLOAD_BYTES_MAX,
    )?;
    let run = existing(state, &cmd.run)?;
    if run.state.is_terminal() {
        return Err(Error::RunTerminal {
            run: run.id.clone(),
            state: run.state,
        });
    }
    let book = state
        .waits(&run.id)
        .unwrap_or_else(|| WaitBook::new(run.id.clone()));
    let signal = SignalRecord {
        seq: book.signals_received + 1,
        name: cmd.name.clone(),
        payload: cmd.payload.clone(),
        sender: cmd.sender.clone(),
        sent_ms: now_ms,
    };
    let mut ops = vec![Op::SignalReceived {
        run: run.id.clone(),
        signal: signal.clone(),
    }];
    let waiting = book
        .open_wait()
        .filter(|w| matches!(&w.wait_for, WaitFor::Signal { name } if *name == cmd.name));
    let taken_by = waiting.map(|w| w.step.clone());
    match waiting {
        Some(wait) => {
            ops.push(Op::WaitEnded {
                run: run.id.clone(),
                step: wait.step.clone(),
                status: WaitStatus::Signalled { signal },
                at_ms: now_ms,
            });
            let reason = format!("signal {} from {}", cmd.name, cmd.sender);
            ops.extend(wake(&run, RunState::WaitingTool, now_ms, reason));
        }
        None => check_size(
            || format!("inbox of run {} (in signals, not bytes)", run.id),
            book.inbox.len() + 1,
            INBOX_SIGNALS_MAX,
        )?,
    }
    Ok(Decided {
        ops,
        answer: Answer::Signalled {
            run: run.id.clone(),
            seq: book.signals_received + 1,
            taken_by,
        },
    })
}

/// The ops that end `run`'s open wait because its deadline passed at
/// `now_ms`, moving it back to `running`; none if its wait is not due (a
/// claim or acquisition of a run calls this before granting the lease).
pub(crate) fn wake_if_due(state: &dyn BooksRead, run: &Run, now_ms: u64) -> Vec<Op> {
    let book = state.waits(&run.id);
    let Some(wait) = book.as_ref().and_then(|b| b.open_wait()) else {
        return Vec::new();
    };
    let held = run.lease.as_ref().is_some_and(|l| l.is_live(now_ms));
    if held || wait.deadline_ms.is_none_or(|at| at > now_ms) {
        return Vec::new();
    }
    let reason = format!("the {} at step {} elapsed", wait.wait_for, wait.step);
    let ended = Op::WaitEnded {
        run: run.id.clone(),
        step: wait.step.clone(),
        status: WaitStatus::Elapsed,
        at_ms: now_ms,
    };
    std::iter::once(ended)
        .chain(wake(run, wait.wait_for.waiting_state(), now_ms, reason))
        .collect()
}

/// An effect at a step that asked for an approval begins only once that
/// approval is granted, and only with the arguments it is bound to: the
/// approval names the exact effect, never a neighbour of it.
pub(crate) fn check_approved(
    state: &dyn BooksRead,
    run: &Run,
    step: &StepId,
    args_digest: &Digest,
) -> Result<()> {
    let Some(book) = state.waits(&run.id) else {
        return Ok(());
    };
    let Some(wait) = book.approval_at(step) else {
        return Ok(());
    };
    let WaitFor::Approval {
        args_digest: bound, ..
    } = &wait.wait_for
    else {
        return Ok(());
    };
    if !matches!(wait.status, WaitStatus::Approved { .. }) {
        return Err(Error::NotApproved {
            run: run.id.clone(),
            step: step.clone(),
            status: wait.status.name(),
        });
    }
    if bound != args_digest {
        return Err(Error::ApprovalMismatch {
            run: run.id.clone(),
            step: step.clone(),
            bound: *bound,
            presented: *args_digest,
        });
    }
    Ok(())
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests;

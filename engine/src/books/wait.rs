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
//! only while it is waiting or paused; a step opens at most one wait, and
//! asking again with the same terms answers with the wait as it stands
//! (so a resumed worker learns how it ended); an approval is bound to the
//! arguments digest of the effect it approves and is refused for any other,
//! after its deadline, or once decided; a signal is taken by at most one
//! wait, and signals of one name are taken in the order they arrived.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::command::{DecideApproval, OpenWait, SendSignal};
use super::decide::{Answer, Decided};
use super::digest::Digest;
use super::ids::{EffectKey, FencingToken, RunId, StepId};
use super::lease::check_live;
use super::ledger::EffectStatus;
use super::limits::{INBOX_SIGNALS_MAX, NAME_LEN_BYTES_MAX, SIGNAL_PAYLOAD_BYTES_MAX, check_size};
use super::op::Op;
use super::run::{Run, RunState, check_running, check_text, existing, move_under_current_token};
use super::state::BooksRead;
use crate::error::{Error, Result};

/// What a wait waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitFor {
    /// A person's approval of one effect: the arguments digest of the
    /// effect the step will begin, and the role that may approve it.
    Approval {
        /// The digest an approval must name (`digest_of(args)`).
        args_digest: Digest,
        /// The approver role that may decide (`finance`, ...).
        role: String,
    },
    /// A signal of this name, sent from outside with [`SendSignal`].
    Signal {
        /// The signal's name.
        name: String,
    },
    /// Nothing but the deadline: a durable timer.
    Timer,
    /// The end of a child run this run started (see
    /// [`child_run_id`](super::ids::child_run_id)): the wait ends when the
    /// child reaches a terminal state, with that state and the version of
    /// the child's last checkpoint (its result).
    Child {
        /// The child run; its parent must be the waiting run.
        run: RunId,
    },
    /// The reply of an asynchronous tool: the step began the effect `key`
    /// and sent it; the tool answers later, from outside
    /// ([`DeliverReply`](super::command::DeliverReply), a webhook), and that
    /// reply settles the effect and ends the wait in one commit, with
    /// nobody holding the run.
    Reply {
        /// The effect awaited: one the waiting step began.
        key: EffectKey,
    },
}

impl WaitFor {
    /// The run state a run waiting for this is in.
    pub fn waiting_state(&self) -> RunState {
        match self {
            WaitFor::Approval { .. } => RunState::WaitingHuman,
            WaitFor::Signal { .. }
            | WaitFor::Timer
            | WaitFor::Child { .. }
            | WaitFor::Reply { .. } => RunState::WaitingTool,
        }
    }
}

impl fmt::Display for WaitFor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitFor::Approval { args_digest, role } => {
                write!(f, "approval by {role} of args {}", args_digest.short())
            }
            WaitFor::Signal { name } => write!(f, "signal {name}"),
            WaitFor::Timer => f.write_str("timer"),
            WaitFor::Child { run } => write!(f, "end of child run {run}"),
            WaitFor::Reply { key } => write!(f, "reply to effect {key}"),
        }
    }
}

/// A signal sent to a run: kept in the run's inbox until a wait takes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalRecord {
    /// Its number among the signals the run received, from 1.
    pub seq: u64,
    /// Its name.
    pub name: String,
    /// What it carries (a webhook's body, a person's answer).
    pub payload: Vec<u8>,
    /// Who sent it (journaled).
    pub sender: String,
    /// When it arrived, ms since the epoch.
    pub sent_ms: u64,
}

/// Where a wait stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitStatus {
    /// Not ended yet.
    Open,
    /// The approver approved.
    Approved {
        /// Who approved.
        approver: String,
        /// What they noted.
        note: String,
    },
    /// The approver rejected.
    Rejected {
        /// Who rejected.
        approver: String,
        /// What they noted.
        note: String,
    },
    /// A matching signal arrived; here it is.
    Signalled {
        /// The signal the wait took.
        signal: SignalRecord,
    },
    /// The deadline passed first: a timer fired, an approval expired, a
    /// signal did not come in time.
    Elapsed,
    /// The awaited child run ended.
    ChildEnded {
        /// Its terminal state.
        state: RunState,
        /// The version of its last checkpoint when it ended (what it
        /// returns to its parent), if it saved one.
        checkpoint: Option<u64>,
    },
    /// The awaited effect settled: its tool's reply arrived (or a worker
    /// or a reconcile recorded the outcome); the ledger holds it.
    Replied {
        /// The status the effect settled into (confirmed or failed).
        status: EffectStatus,
    },
}

impl WaitStatus {
    /// The status's name, for messages (`approved`, `elapsed`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            WaitStatus::Open => "open",
            WaitStatus::Approved { .. } => "approved",
            WaitStatus::Rejected { .. } => "rejected",
            WaitStatus::Signalled { .. } => "signalled",
            WaitStatus::Elapsed => "elapsed",
            WaitStatus::ChildEnded { .. } => "child-ended",
            WaitStatus::Replied { .. } => "replied",
        }
    }
}

/// One wait of a run, at one step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitRecord {
    /// The step that waits (one wait per step).
    pub step: StepId,
    /// Its number among the run's waits, from 1.
    pub seq: u64,
    /// What it waits for.
    pub wait_for: WaitFor,
    /// When it ends by itself, ms since the epoch (required for an approval
    /// and a timer).
    pub deadline_ms: Option<u64>,
    /// When it was opened, ms since the epoch.
    pub opened_ms: u64,
    /// The lease token it was opened under.
    pub token: FencingToken,
    /// Why (journaled).
    pub reason: String,
    /// Where it stands.
    pub status: WaitStatus,
    /// When it ended, ms since the epoch.
    pub ended_ms: Option<u64>,
}

impl WaitRecord {
    /// True until the wait ends.
    pub fn is_open(&self) -> bool {
        self.status == WaitStatus::Open
    }
}

/// A run's waits and the signals no wait has taken yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitBook {
    /// The run.
    pub run: RunId,
    /// Its waits, in the order they were opened; only the last may be open.
    pub waits: Vec<WaitRecord>,
    /// Signals received and not taken, in arrival order.
    pub inbox: Vec<SignalRecord>,
    /// How many signals the run received (the last `seq`).
    pub signals_received: u64,
}

impl WaitBook {
    /// The empty book of `run`.
    pub fn new(run: RunId) -> WaitBook {
        WaitBook {
            run,
            waits: Vec::new(),
            inbox: Vec::new(),
            signals_received: 0,
        }
    }

    /// The open wait, if any (always the last).
    pub fn open_wait(&self) -> Option<&WaitRecord> {
        self.waits.last().filter(|w| w.is_open())
    }

    /// The wait of `step`, if it opened one.
    pub fn wait_at(&self, step: &StepId) -> Option<&WaitRecord> {
        self.waits.iter().find(|w| w.step == *step)
    }

    /// The first signal named `name` in the inbox.
    pub fn first_signal(&self, name: &str) -> Option<&SignalRecord> {
        self.inbox.iter().find(|s| s.name == name)
    }
}

/// The instant the open wait of `book` ends by itself, if it has one.
pub fn wake_ms(book: Option<&WaitBook>) -> Option<u64> {
    book?.open_wait()?.deadline_ms
}

/// The wait's terms as text, for a mismatch message.
fn terms(wait_for: &WaitFor, deadline_ms: Option<u64>) -> String {
    match deadline_ms {
        Some(at) => format!("{wait_for} until {at} ms"),
        None => format!("{wait_for}, no deadline"),
    }
}

pub(crate) fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidCommand {
            reason: format!("the {what} is empty"),
        });
    }
    check_size(|| what.to_string(), name.len(), NAME_LEN_BYTES_MAX)
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
    if let Some(found) = book.wait_at(&cmd.step) {
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
    WaitStatus::ChildEnded {
        state: ended_in,
        checkpoint: state.checkpoint_latest(child).map(|meta| meta.version),
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
/// the parent's wait ends with the child's state and last checkpoint, and
/// the parent wakes (if it sat waiting; a paused parent stays paused).
/// `state` is the books before `ops`; a parent that ended already, or that
/// `ops` end too (a cancel takes its awaited child with it), is left as it
/// is.
pub(crate) fn wake_parents(state: &dyn BooksRead, ops: &[Op], now_ms: u64) -> Vec<Op> {
    let ending: Vec<&RunId> = ops
        .iter()
        .filter_map(|op| match op {
            Op::RunTransitioned { run, to, .. } if to.is_terminal() => Some(run),
            _ => None,
        })
        .collect();
    let mut woken = Vec::new();
    for op in ops {
        let Op::RunTransitioned { run, to, .. } = op else {
            continue;
        };
        if !to.is_terminal() {
            continue;
        }
        let Some(parent) = state.run(run).and_then(|child| child.parent) else {
            continue;
        };
        let Some(parent) = state
            .run(&parent)
            .filter(|p| !p.state.is_terminal() && !ending.contains(&&p.id))
        else {
            continue;
        };
        let book = state.waits(&parent.id);
        let Some(wait) = book.as_ref().and_then(|b| b.open_wait()) else {
            continue;
        };
        if wait.wait_for != (WaitFor::Child { run: run.clone() }) {
            continue;
        }
        woken.push(Op::WaitEnded {
            run: parent.id.clone(),
            step: wait.step.clone(),
            status: child_ended(state, run, *to),
            at_ms: now_ms,
        });
        let reason = format!("child run {run} ended {to}");
        woken.extend(wake(&parent, RunState::WaitingTool, now_ms, reason));
    }
    woken
}

/// The run's open wait, named by step, or why there is none to end.
fn open_wait_at<'b>(
    book: Option<&'b WaitBook>,
    run: &RunId,
    step: &StepId,
) -> Result<&'b WaitRecord> {
    let wait = book
        .and_then(|b| b.wait_at(step))
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
    let Some(wait) = book.wait_at(step) else {
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

/// Refuses moving a run to `running` while its wait is open: only the
/// wait's end (an approval, a signal, its deadline) does that.
pub(crate) fn check_no_open_wait(state: &dyn BooksRead, run: &Run) -> Result<()> {
    let book = state.waits(&run.id);
    match book.as_ref().and_then(|b| b.open_wait()) {
        None => Ok(()),
        Some(wait) => Err(Error::WaitOpen {
            run: run.id.clone(),
            step: wait.step.clone(),
            waits_for: wait.wait_for.to_string(),
        }),
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::command::{Command, DeliverReply, Operate, OperatorAction};
    use crate::books::decide::Begun;
    use crate::books::digest::digest_of;
    use crate::books::ids::EffectKind;
    use crate::books::ledger::{Outcome, ToolClass};
    use crate::books::test_support::*;

    const DAY_MS: u64 = 24 * 60 * 60 * 1000;

    fn open(
        run: &str,
        g: &Guard,
        step: &str,
        wait_for: WaitFor,
        deadline_ms: Option<u64>,
    ) -> Command {
        Command::OpenWait(OpenWait {
            run: rid(run),
            guard: g.clone(),
            step: sid(step),
            wait_for,
            deadline_ms,
            reason: "above the threshold".into(),
        })
    }

    fn approval_of(args: &[u8]) -> WaitFor {
        WaitFor::Approval {
            args_digest: digest_of(args),
            role: "finance".into(),
        }
    }

    fn decide(run: &str, step: &str, args: &[u8], role: &str, approve: bool) -> Command {
        Command::DecideApproval(DecideApproval {
            run: rid(run),
            step: sid(step),
            args_digest: digest_of(args),
            approver: "ann".into(),
            role: role.into(),
            approve,
            note: "checked the invoice".into(),
        })
    }

    fn signal(run: &str, name: &str, payload: &[u8]) -> Command {
        Command::SendSignal(SendSignal {
            run: rid(run),
            name: name.into(),
            payload: payload.to_vec(),
            sender: "psp".into(),
        })
    }

    fn operate(run: &str, action: OperatorAction) -> Command {
        Command::Operate(Operate {
            run: rid(run),
            action,
            operator: "ops".into(),
            reason: "look".into(),
        })
    }

    fn guard_of(d: &Decided, worker: &str) -> Guard {
        let Answer::Leased { token, .. } = d.answer else {
            panic!("{:?}", d.answer)
        };
        Guard {
            worker: wid(worker),
            token,
        }
    }

    fn waited(d: &Decided) -> (WaitRecord, RunState) {
        match &d.answer {
            Answer::Waited { wait, state } => (wait.clone(), *state),
            other => panic!("{other:?}"),
        }
    }

    fn state(b: &Books) -> RunState {
        b.mem.run(&rid("r")).unwrap().state
    }

    fn claim_r(b: &mut Books, worker: &str) -> Guard {
        let d = b.ok(claim(worker, LEASE_MS));
        assert!(
            matches!(&d.answer, Answer::Leased { run, .. } if *run == rid("r")),
            "{:?}",
            d.answer
        );
        guard_of(&d, worker)
    }

    fn nothing_to_claim(b: &mut Books) -> bool {
        b.ok(claim("wx", LEASE_MS)).answer == Answer::NothingToClaim
    }

    fn create_child(parent: &str, child: &str) -> Command {
        Command::CreateRun(crate::books::command::CreateRun {
            run: rid(child),
            input_digest: digest_of(child.as_bytes()),
            agent_version: "agent/v1".into(),
            trace_id: "trace-1".into(),
            parent: Some(rid(parent)),
        })
    }

    fn on_child(child: &str) -> WaitFor {
        WaitFor::Child { run: rid(child) }
    }

    /// The parent `r`, running under `g`, starts child `r:sum` and waits
    /// for it in one batch, as `Engine::start_child` does.
    fn start_child(b: &mut Books, g: &Guard) -> Decided {
        b.ok(Command::Batch(vec![
            create_child("r", "r:sum"),
            open("r", g, "sum", on_child("r:sum"), None),
        ]))
    }

    fn claim_child(b: &mut Books) -> Guard {
        let d = b.ok(claim("wc", LEASE_MS));
        assert!(
            matches!(&d.answer, Answer::Leased { run, .. } if *run == rid("r:sum")),
            "{:?}",
            d.answer
        );
        let g = guard_of(&d, "wc");
        b.ok(transition("r:sum", &g, RunState::Running));
        g
    }

    #[test]
    fn a_child_that_completes_wakes_its_parent_with_its_last_checkpoint() {
        let (mut b, g) = books_with_running_run("r");
        let d = start_child(&mut b, &g);
        let Answer::Batch(answers) = &d.answer else {
            panic!("{:?}", d.answer)
        };
        assert!(matches!(answers[0], Answer::RunCreated { .. }));
        assert!(
            matches!(&answers[1], Answer::Waited { wait, state: RunState::WaitingTool } if wait.is_open())
        );
        assert_eq!(state(&b), RunState::WaitingTool);
        assert!(b.mem.run(&rid("r")).unwrap().lease.is_none());
        // Only the child is claimable; the parent's stale guard is refused.
        let c = claim_child(&mut b);
        assert!(b.run(transition("r", &g, RunState::Running)).is_err());
        let part = crate::books::checkpoint::Part {
            name: "summary".into(),
            bytes: b"three findings".to_vec(),
        };
        b.ok(save("r:sum", &c, 1, vec![part.clone()]));
        b.ok(save("r:sum", &c, 1, vec![part]));
        let d = b.ok(transition("r:sum", &c, RunState::Completed));
        // The child's end and the parent's wake are one decision.
        assert!(
            d.ops
                .iter()
                .any(|op| matches!(op, Op::WaitEnded { run, .. } if *run == rid("r")))
        );
        assert_eq!(state(&b), RunState::Running);
        let g2 = claim_r(&mut b, "w2");
        let (wait, now) = waited(&start_child(&mut b, &g2).answer.clone().into_last());
        assert_eq!(
            wait.status,
            WaitStatus::ChildEnded {
                state: RunState::Completed,
                checkpoint: Some(2)
            }
        );
        assert_eq!(now, RunState::Running);
        // No second child: the re-run's create found the first one.
        assert_eq!(b.mem.runs().filter(|r| r.parent.is_some()).count(), 1);
    }

    trait Last {
        fn into_last(self) -> Decided;
    }

    impl Last for Answer {
        fn into_last(self) -> Decided {
            let Answer::Batch(mut answers) = self else {
                panic!("{self:?}")
            };
            Decided {
                ops: Vec::new(),
                answer: answers.pop().unwrap(),
            }
        }
    }

    #[test]
    fn a_cancelled_or_failed_child_ends_the_wait_with_its_state_and_a_paused_parent_stays_paused() {
        let (mut b, g) = books_with_running_run("r");
        start_child(&mut b, &g);
        b.ok(operate("r", OperatorAction::Pause));
        b.ok(operate("r:sum", OperatorAction::Cancel));
        assert_eq!(state(&b), RunState::Paused);
        let book = b.mem.waits(&rid("r")).unwrap();
        assert_eq!(
            book.waits[0].status,
            WaitStatus::ChildEnded {
                state: RunState::Cancelled,
                checkpoint: None
            }
        );
        // Resumed, the parent runs: its wait has ended.
        b.ok(operate("r", OperatorAction::Resume));
        assert_eq!(state(&b), RunState::Running);

        let (mut b, g) = books_with_running_run("r");
        start_child(&mut b, &g);
        let c = claim_child(&mut b);
        b.ok(transition("r:sum", &c, RunState::Failed));
        let book = b.mem.waits(&rid("r")).unwrap();
        assert!(matches!(
            book.waits[0].status,
            WaitStatus::ChildEnded {
                state: RunState::Failed,
                ..
            }
        ));
        assert_eq!(state(&b), RunState::Running);
    }

    #[test]
    fn cancelling_a_parent_cancels_the_child_it_awaits_and_its_grandchild() {
        let (mut b, g) = books_with_running_run("r");
        start_child(&mut b, &g);
        let c = claim_child(&mut b);
        b.ok(Command::Batch(vec![
            create_child("r:sum", "r:sum:cite"),
            open("r:sum", &c, "cite", on_child("r:sum:cite"), None),
        ]));
        let d = b.ok(operate("r", OperatorAction::Cancel));
        for run in ["r", "r:sum", "r:sum:cite"] {
            assert_eq!(
                b.mem.run(&rid(run)).unwrap().state,
                RunState::Cancelled,
                "{run}"
            );
        }
        // No wait ended: the parents were cancelled, not woken.
        assert!(!d.ops.iter().any(|op| matches!(op, Op::WaitEnded { .. })));
        // The child's holder is fenced.
        assert!(b.run(transition("r:sum", &c, RunState::Completed)).is_err());
    }

    #[test]
    fn waiting_for_a_child_that_ended_ends_at_once_and_only_a_child_can_be_awaited() {
        let (mut b, g) = books_with_running_run("r");
        b.ok(create_child("r", "r:sum"));
        b.ok(create("other", b"o"));
        b.ok(operate("r:sum", OperatorAction::Cancel));
        let (wait, now) = waited(&b.ok(open("r", &g, "sum", on_child("r:sum"), None)));
        assert_eq!(wait.status.name(), "child-ended");
        assert_eq!(now, RunState::Running);
        for (step, wait_for) in [
            ("a", on_child("other")),
            ("b", on_child("r")),
            ("c", on_child("missing")),
        ] {
            let err = b.run(open("r", &g, step, wait_for, None)).unwrap_err();
            assert!(
                matches!(err, Error::InvalidCommand { .. } | Error::NotFound { .. }),
                "{err}"
            );
        }
        b.ok(operate("other", OperatorAction::Cancel));
        // A child's deadline passing first ends the wait as elapsed.
        let due = b.now_ms + 1_000;
        b.ok(create_child("r", "r:late"));
        b.ok(open("r", &g, "late", on_child("r:late"), Some(due)));
        b.now_ms = due;
        b.ok(acquire("r", "w2", LEASE_MS));
        assert_eq!(
            b.mem.waits(&rid("r")).unwrap().waits[1].status,
            WaitStatus::Elapsed
        );
        // The child ending later changes nothing for the parent.
        b.ok(operate("r:late", OperatorAction::Cancel));
        assert_eq!(state(&b), RunState::Running);
        assert_eq!(
            b.mem.waits(&rid("r")).unwrap().waits[1].status,
            WaitStatus::Elapsed
        );
    }

    fn deliver(key: &EffectKey, outcome: Outcome) -> Command {
        Command::DeliverReply(DeliverReply {
            key: key.clone(),
            outcome,
            sender: "kyc-webhook".into(),
        })
    }

    /// Run `r`, running under `g`, begins step `screen` on an idempotent
    /// tool and returns the key it must send.
    fn begin_screen(b: &mut Books, g: &Guard) -> EffectKey {
        let class = ToolClass::Idempotent {
            dedup_window_ms: DAY_MS,
        };
        let d = b.ok(begin("r", "screen", g, class, b"screen acme"));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!("{:?}", d.answer)
        };
        key
    }

    /// Run `r` began step `screen` and waits for its reply.
    fn waiting_for_screen() -> (Books, Guard, EffectKey) {
        let (mut b, g) = books_with_running_run("r");
        let key = begin_screen(&mut b, &g);
        b.ok(open(
            "r",
            &g,
            "screen",
            WaitFor::Reply { key: key.clone() },
            None,
        ));
        (b, g, key)
    }

    fn replied_at(d: &Decided) -> Option<StepId> {
        match &d.answer {
            Answer::Replied { wait_ended, .. } => wait_ended.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_delivered_reply_settles_the_effect_and_wakes_the_run_without_a_lease() {
        let (mut b, g) = books_with_running_run("r");
        let key = begin_screen(&mut b, &g);
        let on_reply = WaitFor::Reply { key: key.clone() };
        let (wait, now) = waited(&b.ok(open("r", &g, "screen", on_reply.clone(), None)));
        assert_eq!(
            (wait.status, now),
            (WaitStatus::Open, RunState::WaitingTool)
        );
        assert!(b.mem.run(&rid("r")).unwrap().lease.is_none());
        assert!(
            nothing_to_claim(&mut b),
            "a run waiting for a reply is not claimable"
        );
        // A reply is never "unknown", and the webhook needs no lease.
        let vague = Outcome::Unknown { reason: "?".into() };
        assert!(matches!(
            b.run(deliver(&key, vague)),
            Err(Error::InvalidCommand { .. })
        ));
        let d = b.ok(deliver(&key, confirmed(b"clear")));
        assert_eq!(replied_at(&d), Some(sid("screen")));
        // The settle, the wait's end and the wake are one decision.
        assert!(matches!(
            d.ops.as_slice(),
            [
                Op::EffectSettled { .. },
                Op::WaitEnded { .. },
                Op::RunTransitioned {
                    to: RunState::Running,
                    ..
                }
            ]
        ));
        assert_eq!(state(&b), RunState::Running);
        // The webhook retries: nothing new; another outcome is refused.
        let again = b.ok(deliver(&key, confirmed(b"clear")));
        assert!(again.ops.is_empty());
        assert_eq!(replied_at(&again), None);
        let failed = Outcome::Failed {
            retryable: false,
            reason: "match".into(),
        };
        assert!(matches!(
            b.run(deliver(&key, failed)),
            Err(Error::EffectNotOpen { .. })
        ));
        // The next worker learns the reply from the wait and from the ledger.
        let g2 = claim_r(&mut b, "w2");
        let (wait, _) = waited(&b.ok(open("r", &g2, "screen", on_reply, None)));
        assert_eq!(
            wait.status,
            WaitStatus::Replied {
                status: EffectStatus::Confirmed {
                    receipt: b"clear".to_vec()
                }
            }
        );
        let class = ToolClass::Idempotent {
            dedup_window_ms: DAY_MS,
        };
        let d = b.ok(begin("r", "screen", &g2, class, b"screen acme"));
        assert!(matches!(d.answer, Answer::Begun(Begun::Replay { .. })));
    }

    #[test]
    fn a_reply_before_the_wait_ends_it_as_it_opens_and_any_settle_ends_an_open_one() {
        // The webhook beats the worker to it: the wait ends as it opens.
        let (mut b, g) = books_with_running_run("r");
        let key = begin_screen(&mut b, &g);
        assert_eq!(replied_at(&b.ok(deliver(&key, confirmed(b"clear")))), None);
        let on_reply = WaitFor::Reply { key: key.clone() };
        let (wait, now) = waited(&b.ok(open("r", &g, "screen", on_reply, None)));
        assert!(matches!(wait.status, WaitStatus::Replied { .. }));
        assert_eq!(now, RunState::Running, "the worker goes on under its lease");
        // An outcome recorded by the worker (or a reconcile) ends the wait
        // too: a run never waits for a reply its ledger holds.
        let (mut b, g, key) = waiting_for_screen();
        let d = b.ok(finish(&key, &g, confirmed(b"clear")));
        assert!(d.ops.iter().any(|op| matches!(op, Op::WaitEnded { .. })));
        assert_eq!(state(&b), RunState::Running);
        // A paused run's wait ends, and the run stays paused.
        let (mut b, _, key) = waiting_for_screen();
        b.ok(operate("r", OperatorAction::Pause));
        assert_eq!(
            replied_at(&b.ok(deliver(&key, confirmed(b"clear")))),
            Some(sid("screen"))
        );
        assert_eq!(state(&b), RunState::Paused);
        assert!(b.mem.waits(&rid("r")).unwrap().open_wait().is_none());
    }

    #[test]
    fn a_reply_wait_names_an_effect_its_own_step_began() {
        let (mut b, g) = books_with_running_run("r");
        let key = begin_screen(&mut b, &g);
        let before = b.mem.clone();
        // Another step's effect, another run's, one never begun.
        for (step, key) in [
            ("other", key.clone()),
            (
                "screen",
                EffectKey::of_kind(rid("q"), sid("screen"), EffectKind::Act, 1).unwrap(),
            ),
        ] {
            let err = b
                .run(open("r", &g, step, WaitFor::Reply { key }, None))
                .unwrap_err();
            assert!(matches!(err, Error::InvalidCommand { .. }), "{err}");
        }
        let unbegun = EffectKey::of_kind(rid("r"), sid("screen"), EffectKind::Act, 2).unwrap();
        let err = b
            .run(open(
                "r",
                &g,
                "screen",
                WaitFor::Reply {
                    key: unbegun.clone(),
                },
                None,
            ))
            .unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
        assert!(matches!(
            b.run(deliver(&unbegun, confirmed(b"x"))),
            Err(Error::NotFound { .. })
        ));
        assert_eq!(b.mem, before);
    }

    #[test]
    fn an_approval_parks_the_run_without_a_lease_and_only_the_bound_digest_wakes_it() {
        let (mut b, g) = books_with_running_run("r");
        let deadline = b.now_ms + 2 * DAY_MS;
        let d = b.ok(open(
            "r",
            &g,
            "pay",
            approval_of(b"eur 900 to acme"),
            Some(deadline),
        ));
        let (wait, now) = waited(&d);
        assert_eq!(
            (wait.status.clone(), now),
            (WaitStatus::Open, RunState::WaitingHuman)
        );
        let run = b.mem.run(&rid("r")).unwrap();
        assert!(run.lease.is_none(), "the waiting run holds no lease");
        assert!(
            nothing_to_claim(&mut b),
            "a run waiting for a person is not claimable"
        );
        // The old holder is fenced out.
        assert!(matches!(
            b.run(begin(
                "r",
                "pay",
                &g,
                ToolClass::NotIdempotent,
                b"eur 900 to acme"
            )),
            Err(Error::LeaseLost { .. })
        ));
        let before = b.mem.clone();
        assert!(matches!(
            b.run(decide("r", "pay", b"eur 9000 to acme", "finance", true)),
            Err(Error::ApprovalMismatch { .. })
        ));
        assert!(matches!(
            b.run(decide("r", "pay", b"eur 900 to acme", "intern", true)),
            Err(Error::ApproverRole { .. })
        ));
        assert!(matches!(
            b.run(decide("r", "nope", b"eur 900 to acme", "finance", true)),
            Err(Error::NotFound { .. })
        ));
        assert_eq!(b.mem, before, "refused decisions change nothing");
        let d = b.ok(decide("r", "pay", b"eur 900 to acme", "finance", true));
        assert!(matches!(
            d.answer,
            Answer::WaitEnded {
                woke: true,
                status: "approved",
                ..
            }
        ));
        assert_eq!(state(&b), RunState::Running);
        assert!(matches!(
            b.run(decide("r", "pay", b"eur 900 to acme", "finance", false)),
            Err(Error::WaitEnded {
                status: "approved",
                ..
            })
        ));
        // A worker claims it, asks again at the step, and learns the answer.
        let g2 = claim_r(&mut b, "w2");
        let (wait, now) = waited(&b.ok(open(
            "r",
            &g2,
            "pay",
            approval_of(b"eur 900 to acme"),
            Some(deadline),
        )));
        assert!(
            matches!(wait.status, WaitStatus::Approved { ref approver, .. } if approver == "ann")
        );
        assert_eq!(now, RunState::Running);
        b.ok(begin(
            "r",
            "pay",
            &g2,
            ToolClass::NotIdempotent,
            b"eur 900 to acme",
        ));
        // The same step asking for other terms is a mismatch.
        assert!(matches!(
            b.run(open("r", &g2, "pay", approval_of(b"other"), Some(deadline))),
            Err(Error::WaitMismatch { .. })
        ));
        let audit = b.mem.audit(&rid("r"), 1);
        assert!(
            audit.iter().any(|e| e.why == "ann: checked the invoice"),
            "{audit:?}"
        );
    }

    #[test]
    fn a_rejection_wakes_the_run_with_the_rejection() {
        let (mut b, g) = books_with_running_run("r");
        let deadline = b.now_ms + DAY_MS;
        b.ok(open("r", &g, "pay", approval_of(b"a"), Some(deadline)));
        b.ok(decide("r", "pay", b"a", "finance", false));
        let g2 = claim_r(&mut b, "w2");
        let (wait, _) = waited(&b.ok(open("r", &g2, "pay", approval_of(b"a"), Some(deadline))));
        assert_eq!(wait.status.name(), "rejected");
        assert!(matches!(
            b.run(begin("r", "pay", &g2, ToolClass::NotIdempotent, b"a")),
            Err(Error::NotApproved {
                status: "rejected",
                ..
            })
        ));
    }

    #[test]
    fn an_expired_approval_is_refused_and_the_run_wakes_at_its_deadline() {
        let (mut b, g) = books_with_running_run("r");
        let deadline = b.now_ms + 48 * 60 * 60 * 1000;
        b.ok(open("r", &g, "pay", approval_of(b"a"), Some(deadline)));
        b.now_ms = deadline - 1;
        assert!(nothing_to_claim(&mut b));
        b.now_ms = deadline;
        assert!(matches!(
            b.run(decide("r", "pay", b"a", "finance", true)),
            Err(Error::ApprovalExpired { .. })
        ));
        let d = b.ok(claim("w2", LEASE_MS));
        assert_eq!(
            d.ops.iter().map(Op::name).collect::<Vec<_>>(),
            ["WaitEnded", "RunTransitioned", "LeaseAcquired"],
            "the claim ends the wait and starts the run in one commit"
        );
        let g2 = guard_of(&d, "w2");
        assert_eq!(state(&b), RunState::Running);
        let (wait, _) = waited(&b.ok(open("r", &g2, "pay", approval_of(b"a"), Some(deadline))));
        assert_eq!(wait.status, WaitStatus::Elapsed);
        assert!(matches!(
            b.run(decide("r", "pay", b"a", "finance", true)),
            Err(Error::WaitEnded {
                status: "elapsed",
                ..
            })
        ));
    }

    #[test]
    fn a_week_long_timer_holds_nothing_and_wakes_the_run_when_due() {
        let (mut b, g) = books_with_running_run("r");
        let due = b.now_ms + 7 * DAY_MS;
        let (_, now) = waited(&b.ok(open("r", &g, "nap", WaitFor::Timer, Some(due))));
        assert_eq!(now, RunState::WaitingTool);
        b.now_ms = due - 1;
        assert!(nothing_to_claim(&mut b));
        // A worker cannot move it on by hand while it waits.
        let d = b.ok(acquire("r", "w3", LEASE_MS));
        let g3 = guard_of(&d, "w3");
        assert!(matches!(
            b.run(transition("r", &g3, RunState::Running)),
            Err(Error::WaitOpen { .. })
        ));
        b.ok(release("r", &g3));
        b.now_ms = due;
        let g2 = claim_r(&mut b, "w2");
        assert_eq!(state(&b), RunState::Running);
        let (wait, _) = waited(&b.ok(open("r", &g2, "nap", WaitFor::Timer, Some(due))));
        assert_eq!(
            (wait.status, wait.ended_ms),
            (WaitStatus::Elapsed, Some(due))
        );
        // A timer already due ends at once; the run goes on with its lease.
        let (wait, now) = waited(&b.ok(open("r", &g2, "nap2", WaitFor::Timer, Some(due))));
        assert_eq!((wait.status, now), (WaitStatus::Elapsed, RunState::Running));
        assert!(b.mem.run(&rid("r")).unwrap().lease.is_some());
    }

    #[test]
    fn racing_signals_each_go_to_one_wait_in_arrival_order() {
        let (mut b, g) = books_with_running_run("r");
        let on_paid = || WaitFor::Signal {
            name: "paid".into(),
        };
        b.ok(open("r", &g, "await-1", on_paid(), None));
        assert!(nothing_to_claim(&mut b));
        let d = b.ok(Command::Batch(vec![
            signal("r", "paid", b"first"),
            signal("r", "paid", b"second"),
            signal("r", "other", b"x"),
        ]));
        let Answer::Batch(answers) = &d.answer else {
            panic!()
        };
        assert!(
            matches!(&answers[0], Answer::Signalled { seq: 1, taken_by: Some(s), .. } if *s == sid("await-1"))
        );
        assert!(matches!(
            &answers[1],
            Answer::Signalled {
                seq: 2,
                taken_by: None,
                ..
            }
        ));
        assert_eq!(state(&b), RunState::Running);
        let g2 = claim_r(&mut b, "w2");
        let (wait, _) = waited(&b.ok(open("r", &g2, "await-1", on_paid(), None)));
        let WaitStatus::Signalled { signal: got } = wait.status else {
            panic!()
        };
        assert_eq!(got.payload, b"first");
        // The second one waits in the inbox for the next wait of its name,
        // which takes it at once: the run never stops.
        let (wait, now) = waited(&b.ok(open("r", &g2, "await-2", on_paid(), None)));
        let WaitStatus::Signalled { signal: got } = wait.status else {
            panic!()
        };
        assert_eq!(
            (got.payload.as_slice(), got.seq, now),
            (&b"second"[..], 2, RunState::Running)
        );
        let book = b.mem.waits(&rid("r")).unwrap();
        assert_eq!(
            book.inbox
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["other"]
        );
    }

    #[test]
    fn a_signal_with_a_deadline_elapses_when_none_comes() {
        let (mut b, g) = books_with_running_run("r");
        let due = b.now_ms + 1_000;
        b.ok(open(
            "r",
            &g,
            "hook",
            WaitFor::Signal {
                name: "done".into(),
            },
            Some(due),
        ));
        b.now_ms = due;
        claim_r(&mut b, "w2");
        let book = b.mem.waits(&rid("r")).unwrap();
        assert_eq!(book.waits[0].status, WaitStatus::Elapsed);
        // A late signal is kept for a later wait; it ends nothing.
        let d = b.ok(signal("r", "done", b"late"));
        assert!(matches!(d.answer, Answer::Signalled { taken_by: None, .. }));
    }

    #[test]
    fn a_paused_wait_resumes_into_waiting_and_an_approval_meanwhile_leaves_it_paused() {
        let (mut b, g) = books_with_running_run("r");
        let deadline = b.now_ms + DAY_MS;
        b.ok(open("r", &g, "pay", approval_of(b"a"), Some(deadline)));
        b.ok(operate("r", OperatorAction::Pause));
        b.ok(operate("r", OperatorAction::Resume));
        assert_eq!(
            state(&b),
            RunState::WaitingHuman,
            "back to waiting, not running"
        );
        let again = b.ok(operate("r", OperatorAction::Resume));
        assert!(matches!(
            again.answer,
            Answer::Operated { changed: false, .. }
        ));
        b.ok(operate("r", OperatorAction::Pause));
        let d = b.ok(decide("r", "pay", b"a", "finance", true));
        assert!(matches!(d.answer, Answer::WaitEnded { woke: false, .. }));
        assert_eq!(state(&b), RunState::Paused);
        assert!(nothing_to_claim(&mut b));
        b.ok(operate("r", OperatorAction::Resume));
        assert_eq!(state(&b), RunState::Running);
        claim_r(&mut b, "w2");
    }

    #[test]
    fn a_cancelled_run_takes_no_approval_and_no_signal() {
        let (mut b, g) = books_with_running_run("r");
        b.ok(open(
            "r",
            &g,
            "pay",
            approval_of(b"a"),
            Some(b.now_ms + DAY_MS),
        ));
        b.ok(operate("r", OperatorAction::Cancel));
        assert!(matches!(
            b.run(decide("r", "pay", b"a", "finance", true)),
            Err(Error::RunTerminal { .. })
        ));
        assert!(matches!(
            b.run(signal("r", "x", b"")),
            Err(Error::RunTerminal { .. })
        ));
    }

    #[test]
    fn bad_terms_are_refused_before_anything_changes() {
        let (mut b, g) = books_with_running_run("r");
        let before = b.mem.clone();
        let no_deadline = b.run(open("r", &g, "pay", approval_of(b"a"), None));
        assert!(
            matches!(no_deadline, Err(Error::InvalidCommand { .. })),
            "{no_deadline:?}"
        );
        let past = b.run(open("r", &g, "pay", approval_of(b"a"), Some(b.now_ms)));
        assert!(
            matches!(past, Err(Error::InvalidCommand { .. })),
            "{past:?}"
        );
        let timer = b.run(open("r", &g, "nap", WaitFor::Timer, None));
        assert!(
            matches!(timer, Err(Error::InvalidCommand { .. })),
            "{timer:?}"
        );
        let unnamed = b.run(open(
            "r",
            &g,
            "s",
            WaitFor::Signal {
                name: String::new(),
            },
            None,
        ));
        assert!(
            matches!(unnamed, Err(Error::InvalidCommand { .. })),
            "{unnamed:?}"
        );
        let big = Command::SendSignal(SendSignal {
            run: rid("r"),
            name: "n".into(),
            payload: vec![0; SIGNAL_PAYLOAD_BYTES_MAX + 1],
            sender: "s".into(),
        });
        assert!(matches!(b.run(big), Err(Error::TooLarge { .. })));
        assert_eq!(b.mem, before);
        // The inbox is bounded.
        for _ in 0..INBOX_SIGNALS_MAX {
            b.ok(signal("r", "n", b""));
        }
        assert!(matches!(
            b.run(signal("r", "n", b"")),
            Err(Error::TooLarge { .. })
        ));
    }
}

//! A run's wait book: what a wait waits for (an approval, a signal, a
//! timer), how it ended, and the signals sent to the run. The rules that
//! open and end waits are in `rules/wait.rs`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::books::base::digest::Digest;
use crate::books::base::ids::{EffectKey, FencingToken, RunId, StepId};
use crate::books::records::ledger::EffectStatus;
use crate::books::records::run::RunState;

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
    /// A signal of this name, sent from outside with [`SendSignal`](crate::books::SendSignal).
    Signal {
        /// The signal's name.
        name: String,
    },
    /// Nothing but the deadline: a durable timer.
    Timer,
    /// The end of a child run this run started (see
    /// [`child_run_id`](crate::books::child_run_id)): the wait ends when the
    /// child reaches a terminal state, with that state and the version of
    /// the child's last checkpoint (its result).
    Child {
        /// The child run; its parent must be the waiting run.
        run: RunId,
    },
    /// The reply of an asynchronous tool: the step began the effect `key`
    /// and sent it; the tool answers later, from outside
    /// ([`DeliverReply`](crate::books::DeliverReply), a webhook), and that
    /// reply settles the effect and ends the wait in one commit, with
    /// nobody holding the run.
    Reply {
        /// The effect awaited: one the waiting step began.
        key: EffectKey,
    },
    /// The end of several child runs this run started together (a
    /// fan-out, see [`children_run_ids`](crate::books::children_run_ids)):
    /// the wait ends when all of them have ended ([`Join::All`]) or when
    /// the first does ([`Join::First`]).
    Children {
        /// The children, in the order the step started them; each one's
        /// parent must be the waiting run. At least one, at most
        /// [`CHILDREN_MAX`](crate::books::CHILDREN_MAX), no two the
        /// same.
        runs: Vec<RunId>,
        /// Whether the wait ends at the first end or the last.
        join: Join,
    },
}

/// When a wait for several children ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Join {
    /// Once every child has ended (completed, failed or cancelled).
    All,
    /// Once any child has ended; the same commit cancels the others (their
    /// sagas undo what they did).
    First,
}

impl fmt::Display for Join {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Join::All => "all",
            Join::First => "the first",
        })
    }
}

/// How one awaited child ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildEnd {
    /// The child run.
    pub run: RunId,
    /// Its terminal state.
    pub state: RunState,
    /// The version of its last checkpoint when it ended (its result), if it
    /// saved one.
    pub checkpoint: Option<u64>,
}

impl WaitFor {
    /// The run state a run waiting for this is in.
    pub fn waiting_state(&self) -> RunState {
        match self {
            WaitFor::Approval { .. } => RunState::WaitingHuman,
            WaitFor::Signal { .. }
            | WaitFor::Timer
            | WaitFor::Child { .. }
            | WaitFor::Reply { .. }
            | WaitFor::Children { .. } => RunState::WaitingTool,
        }
    }

    /// What kind of wait this is: `approval`, `signal`, `timer`, `child`
    /// (one child or several) or `reply`. A step opens at most one wait of
    /// each kind (an approval and then the reply of the act it approved,
    /// say).
    pub fn kind(&self) -> &'static str {
        match self {
            WaitFor::Approval { .. } => "approval",
            WaitFor::Signal { .. } => "signal",
            WaitFor::Timer => "timer",
            WaitFor::Child { .. } | WaitFor::Children { .. } => "child",
            WaitFor::Reply { .. } => "reply",
        }
    }

    /// The child runs this wait awaits: none, one or several.
    pub fn awaited_children(&self) -> &[RunId] {
        match self {
            WaitFor::Child { run } => std::slice::from_ref(run),
            WaitFor::Children { runs, .. } => runs,
            _ => &[],
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
            WaitFor::Children { runs, join } => {
                write!(f, "end of {join} of {} child runs", runs.len())?;
                if let (Some(first), Some(last)) = (runs.first(), runs.last()) {
                    write!(f, " ({first} .. {last})")?;
                }
                Ok(())
            }
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
    /// The awaited children ended: for [`Join::All`] every child, in the
    /// order the wait names them; for [`Join::First`] the one that ended
    /// first (of several ending at once, the first the wait names).
    ChildrenEnded {
        /// How each of them ended.
        ended: Vec<ChildEnd>,
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
            WaitStatus::ChildrenEnded { .. } => "children-ended",
        }
    }
}

/// One wait of a run, at one step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitRecord {
    /// The step that waits (at most one wait of each kind per step).
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

    /// The latest wait of `step`, if it opened one.
    pub fn wait_at(&self, step: &StepId) -> Option<&WaitRecord> {
        self.waits.iter().rev().find(|w| w.step == *step)
    }

    /// The wait of `step` of the same kind as `wait_for` ([`WaitFor::kind`]),
    /// if it opened one.
    pub fn wait_like(&self, step: &StepId, wait_for: &WaitFor) -> Option<&WaitRecord> {
        self.waits
            .iter()
            .find(|w| w.step == *step && w.wait_for.kind() == wait_for.kind())
    }

    /// The approval `step` asked for, if it asked for one.
    pub fn approval_at(&self, step: &StepId) -> Option<&WaitRecord> {
        self.waits
            .iter()
            .find(|w| w.step == *step && matches!(w.wait_for, WaitFor::Approval { .. }))
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

//! A run: its state, the moves allowed between states, its lease, and when
//! it may be claimed (the order `claim_next` hands runs out in). The rules
//! that create and move runs are in `rules/run.rs`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::books::base::digest::Digest;
use crate::books::base::ids::{FencingToken, RunId};
use crate::books::records::lease::Lease;

/// Where a run is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RunState {
    /// Accepted, not yet started.
    Pending,
    /// A worker is executing its steps.
    Running,
    /// An external, asynchronous tool call is in flight.
    WaitingTool,
    /// Blocked on a person's approval or input.
    WaitingHuman,
    /// Halted by an operator or a budget; resumes only when told.
    Paused,
    /// Finished successfully (terminal).
    Completed,
    /// Finished with an error (terminal).
    Failed,
    /// Aborted by a user or a policy (terminal); effects already committed stand.
    Cancelled,
    /// Failed or cancelled after acts that registered a compensation: its
    /// saga undoes them, last first, then the run ends as it was headed
    /// (`saga.rs`). Appended last: postcard encodes a state by its index.
    Compensating,
}

impl RunState {
    /// Every state, in declaration order.
    pub const ALL: [RunState; 9] = [
        RunState::Pending,
        RunState::Running,
        RunState::WaitingTool,
        RunState::WaitingHuman,
        RunState::Paused,
        RunState::Completed,
        RunState::Failed,
        RunState::Cancelled,
        RunState::Compensating,
    ];

    /// True for completed, failed and cancelled: nothing follows them.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunState::Completed | RunState::Failed | RunState::Cancelled
        )
    }

    /// The state's name as written in docs and messages (`waiting_human`).
    pub fn name(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Running => "running",
            RunState::WaitingTool => "waiting_tool",
            RunState::WaitingHuman => "waiting_human",
            RunState::Paused => "paused",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
            RunState::Compensating => "compensating",
        }
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The legal transitions, as one table. A state never moves to itself (a
/// no-op is not a change and would only bump the version), and terminal
/// states move nowhere. Every state that may fail or be cancelled may
/// compensate instead, and a compensating run moves only to its end.
pub fn transition_allowed(from: RunState, to: RunState) -> bool {
    use RunState::*;
    matches!(
        (from, to),
        (Pending, Running | Paused | Cancelled | Compensating)
            | (
                Running,
                WaitingTool | WaitingHuman | Paused | Completed | Failed | Cancelled | Compensating
            )
            | (
                WaitingTool | WaitingHuman,
                Running | Paused | Failed | Cancelled | Compensating
            )
            | (
                Paused,
                Running | WaitingTool | WaitingHuman | Failed | Cancelled | Compensating
            )
            | (Compensating, Failed | Cancelled)
    )
}

/// One run's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The run's name.
    pub id: RunId,
    /// Where the run is in its life.
    pub state: RunState,
    /// Grows by one on every change to this record (optimistic concurrency).
    pub version: u64,
    /// Digest of the run's input; a re-create must present the same one.
    pub input_digest: Digest,
    /// Which agent build runs it (for audit and replay).
    pub agent_version: String,
    /// The observability trace id, propagated across resumes.
    pub trace_id: String,
    /// The run that spawned this one, if any.
    pub parent: Option<RunId>,
    /// When the run was created, ms since the epoch.
    pub created_ms: u64,
    /// When this record last changed, ms since the epoch.
    pub updated_ms: u64,
    /// The current lease, live or expired; `None` once released.
    pub lease: Option<Lease>,
    /// The token the next lease acquisition will hand out.
    pub next_token: FencingToken,
}

/// The token of the newest acquisition of `run` (zero if never leased).
pub(crate) fn current_token(run: &Run) -> FencingToken {
    FencingToken(run.next_token.0 - 1)
}

/// When `run` can be claimed without anyone's help, ms since the epoch: a
/// pending, running or compensating run nobody holds, since its last
/// change; one of those or a waiting run whose holder's lease runs out, at
/// the expiry; a
/// waiting run nobody holds, at its open wait's deadline `wake_ms` (see
/// [`wake_ms`](crate::books::wake_ms)). `None` for a waiting run that
/// released its lease and has no deadline (parked until an approval or a
/// signal), a paused run and a terminal one.
///
/// Claims go in order of this instant, then of run id: the run that has
/// waited longest for a worker goes first, and an index kept in that order
/// answers `claim_next` with one lookup.
pub fn claimable_from_ms(run: &Run, wake_ms: Option<u64>) -> Option<u64> {
    match (run.state, &run.lease) {
        (RunState::Pending | RunState::Running | RunState::Compensating, None) => {
            Some(run.updated_ms)
        }
        (RunState::WaitingTool | RunState::WaitingHuman, None) => wake_ms,
        (
            RunState::Pending
            | RunState::Running
            | RunState::WaitingTool
            | RunState::WaitingHuman
            | RunState::Compensating,
            Some(lease),
        ) => Some(lease.expires_ms),
        _ => None,
    }
}

/// True for a run that may wait out of memory: waiting for a person or a
/// tool, with no lease (a wait releases it), so nothing happens to it
/// until something from outside does or its wait's deadline comes.
pub fn may_park(run: &Run) -> bool {
    matches!(run.state, RunState::WaitingHuman | RunState::WaitingTool) && run.lease.is_none()
}

/// True if a worker may claim `run` at `now_ms` (see [`claimable_from_ms`]).
pub fn claimable(run: &Run, wake_ms: Option<u64>, now_ms: u64) -> bool {
    claimable_from_ms(run, wake_ms).is_some_and(|from_ms| from_ms <= now_ms)
}

/// The claim order of a claimable run: when it became claimable, then id.
pub fn claim_order(run: &Run, wake_ms: Option<u64>) -> Option<(u64, &RunId)> {
    claimable_from_ms(run, wake_ms).map(|from_ms| (from_ms, &run.id))
}

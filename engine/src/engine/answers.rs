//! Typed results of the engine's calls: each is the slice of
//! [`Answer`](crate::books::Answer) one command can produce, so callers match
//! on what can actually happen.
//!
//! **Invariant:** these are plain data; converting an answer of another
//! command's shape is a bug in the engine (asserted), never a caller error.

use crate::books::{Answer, DecisionRecord, Guard, RunId, RunState, WorkerId};

/// A run after `transition`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moved {
    /// The run.
    pub run: RunId,
    /// Its state before.
    pub from: RunState,
    /// Its state now: the state asked for, or `Compensating` for a move to
    /// failed or cancelled whose saga has acts to undo first.
    pub to: RunState,
    /// Its version now.
    pub version: u64,
}

/// A run after `create_run`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    /// The run.
    pub run: RunId,
    /// Its version now.
    pub version: u64,
    /// Its state now (`Pending` if new).
    pub state: RunState,
    /// True if it already existed with the same input (nothing changed).
    pub existed: bool,
}

/// A lease the caller now holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseGrant {
    /// The run.
    pub run: RunId,
    /// The worker and fencing token to present on every mutation.
    pub guard: Guard,
    /// When the lease dies unless renewed, ms since the epoch.
    pub expires_ms: u64,
    /// The run's version now.
    pub version: u64,
}

/// A checkpoint after `save_checkpoint`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedCheckpoint {
    /// The run.
    pub run: RunId,
    /// The checkpoint's version.
    pub version: u64,
    /// Parts whose blob was new: a whole part's bytes, an appended part's
    /// new bytes, or, past the chunk limit, an appended part's whole value.
    pub blobs_written: usize,
    /// Bytes of those new blobs: what the save wrote besides its metadata.
    pub bytes_written: u64,
    /// Parts whose blob was already stored (not written again), counting an
    /// append of no new bytes.
    pub blobs_reused: usize,
    /// Parts of at most `CHECKPOINT_INLINE_BYTES_MAX` held in the
    /// checkpoint's metadata itself, in no blob (written with each
    /// checkpoint that has them, never shared).
    pub parts_inline: usize,
}

/// What `record_decision` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Journaled at `position`.
    New {
        /// The position.
        position: u64,
    },
    /// Already journaled with this input: reuse it, do not call the model.
    Replay(DecisionRecord),
}

/// A run after an operator's pause, resume or cancel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operated {
    /// The run.
    pub run: RunId,
    /// Its state now.
    pub state: RunState,
    /// Its version now.
    pub version: u64,
    /// False if the run was already in the asked state (nothing changed).
    pub changed: bool,
}

/// Panics: the engine produced an answer of the wrong shape (a bug).
pub(crate) fn unexpected(answer: &Answer, call: &str) -> ! {
    panic!("engine bug: {call} answered {answer:?}")
}

impl LeaseGrant {
    pub(crate) fn from_answer(answer: Answer, worker: &WorkerId, call: &str) -> LeaseGrant {
        let Answer::Leased {
            run,
            token,
            expires_ms,
            version,
        } = answer
        else {
            unexpected(&answer, call)
        };
        let guard = Guard {
            run: run.clone(),
            worker: worker.clone(),
            token,
        };
        LeaseGrant {
            run,
            guard,
            expires_ms,
            version,
        }
    }
}

//! Typed results of the engine's calls: each is the slice of
//! [`Answer`](crate::books::Answer) one command can produce, so callers match
//! on what can actually happen.
//!
//! **Invariant:** these are plain data; converting an answer of another
//! command's shape is a bug in the engine (asserted), never a caller error.

use crate::books::{
    Answer, DecisionRecord, EffectKey, FencingToken, Guard, RunId, RunState, WorkerId,
};

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

/// What `begin_effect` decided (ceremony points 1 to 3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Begun {
    /// The intent is durable: act now with `key` and `token`.
    Proceed {
        /// The idempotency key.
        key: EffectKey,
        /// The fencing token.
        token: FencingToken,
    },
    /// Already done: the stored receipt; do not act.
    Replay {
        /// The confirmed attempt.
        key: EffectKey,
        /// Its receipt.
        receipt: Vec<u8>,
    },
    /// An earlier intent without outcome, inside the tool's dedup window:
    /// send again with the same key.
    Resend {
        /// The unchanged key.
        key: EffectKey,
        /// The fencing token.
        token: FencingToken,
    },
    /// An earlier intent without outcome on a queryable tool: ask the tool
    /// about `key`, then `reconcile`. Do not act.
    Reconcile {
        /// The key to ask about.
        key: EffectKey,
        /// The fencing token.
        token: FencingToken,
    },
    /// Nobody knows whether the act happened. Do not act.
    Unknown {
        /// The ambiguous attempt.
        key: EffectKey,
        /// Why.
        reason: String,
    },
    /// Done and compensated. Do not act.
    Compensated {
        /// The attempt.
        key: EffectKey,
    },
}

/// A checkpoint after `save_checkpoint`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedCheckpoint {
    /// The run.
    pub run: RunId,
    /// The checkpoint's version.
    pub version: u64,
    /// Parts whose bytes were new.
    pub blobs_written: usize,
    /// Bytes of the new parts.
    pub bytes_written: u64,
    /// Parts whose bytes were already stored (not written again).
    pub blobs_reused: usize,
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

/// Panics: the engine produced an answer of the wrong shape (a bug).
pub(crate) fn unexpected(answer: &Answer, call: &str) -> ! {
    panic!("engine bug: {call} answered {answer:?}")
}

impl Begun {
    pub(crate) fn from_answer(answer: Answer) -> Begun {
        match answer {
            Answer::Proceed { key, token } => Begun::Proceed { key, token },
            Answer::Replay { key, receipt } => Begun::Replay { key, receipt },
            Answer::Resend { key, token } => Begun::Resend { key, token },
            Answer::Reconcile { key, token } => Begun::Reconcile { key, token },
            Answer::Unknown { key, reason } => Begun::Unknown { key, reason },
            Answer::Compensated { key } => Begun::Compensated { key },
            other => unexpected(&other, "begin_effect"),
        }
    }
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

//! How a handler ends other than with its output: the run failed (the
//! handler said why), or the runtime stopped the handler at one of its calls
//! (the run waits, the lease is gone, the process shuts down, the handler
//! no longer matches the run's journal, an outcome is unknown).

use std::fmt;

use crate::books::{EffectKey, RunId};
use crate::error::Error;

/// What a handler returns instead of its output. Every [`RunCtx`] call
/// returns it, so `?` hands a stop back to the runtime unchanged; a handler
/// makes its own with [`Fail::failed`] (or from a `String`).
///
/// [`RunCtx`]: super::RunCtx
#[derive(Debug)]
pub enum Fail {
    /// The run fails for good with this reason (journaled); its saga, if it
    /// has one, undoes what was done first.
    Failed {
        /// Why, in the handler's words.
        reason: String,
    },
    /// The runtime stopped the handler at one of its calls; return it with
    /// `?`. What happens to the run is the stop's (see [`Stop`]).
    Stopped(Stop),
}

impl Fail {
    /// The run fails for good, for `reason`.
    pub fn failed(reason: impl Into<String>) -> Fail {
        Fail::Failed {
            reason: reason.into(),
        }
    }
}

impl From<String> for Fail {
    fn from(reason: String) -> Fail {
        Fail::Failed { reason }
    }
}

impl From<&str> for Fail {
    fn from(reason: &str) -> Fail {
        Fail::failed(reason)
    }
}

impl From<Stop> for Fail {
    fn from(stop: Stop) -> Fail {
        Fail::Stopped(stop)
    }
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fail::Failed { reason } => write!(f, "the run failed: {reason}"),
            Fail::Stopped(stop) => write!(f, "the handler was stopped: {stop}"),
        }
    }
}

impl std::error::Error for Fail {}

/// Why the runtime stopped a handler at one of its calls, and so what
/// becomes of the run.
#[derive(Debug)]
pub enum Stop {
    /// The run waits (an approval, a timer, a signal, a child) and its
    /// lease was released in the same commit; whatever ends the wait makes
    /// it claimable, and the handler is called again from the top.
    Parked {
        /// The step that waits.
        step: String,
    },
    /// The lease ran out or was taken over: another worker resumes the run.
    LeaseLost {
        /// What the runtime was about to do.
        at: String,
    },
    /// [`Runtime::shutdown`](super::Runtime::shutdown) was called: the
    /// lease is released and the run resumes in the next process.
    ShuttingDown,
    /// The handler's calls no longer match the run's journal: the run is
    /// paused for an operator, with both in the reason.
    Diverged(Divergence),
    /// Nobody knows whether an act happened and its tool can neither
    /// deduplicate nor be asked: the run is paused until an operator
    /// reconciles the effect (`actum reconcile`) and resumes it.
    OutcomeUnknown {
        /// The ambiguous attempt.
        key: EffectKey,
        /// What was known.
        reason: String,
    },
    /// The run's budget (or an ancestor's) has no room for the call: the
    /// engine paused the run in the same commit that refused the hold, and
    /// the call was not made. Raise the budget, then resume the run.
    BudgetExhausted {
        /// Which limit, by how much.
        reason: String,
    },
    /// An engine call failed in a way the run cannot go on from (the
    /// engine halted, an I/O error): the runtime reports it.
    Engine(Error),
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Parked { step } => write!(f, "the run waits at step {step}"),
            Stop::LeaseLost { at } => write!(f, "the lease was lost before {at}"),
            Stop::ShuttingDown => write!(f, "the runtime is shutting down"),
            Stop::Diverged(d) => write!(f, "{d}"),
            Stop::OutcomeUnknown { key, reason } => {
                write!(
                    f,
                    "the outcome of {key} is unknown ({reason}): reconcile it"
                )
            }
            Stop::BudgetExhausted { reason } => {
                write!(f, "the budget has no room for the call: {reason}")
            }
            Stop::Engine(e) => write!(f, "engine error: {e}"),
        }
    }
}

/// A handler whose calls no longer match what its run journaled: a renamed
/// or removed step, calls in another order, other arguments or another
/// model input at a recorded position. Names both sides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// The run.
    pub run: RunId,
    /// The handler's call, counted from 1 in this run.
    pub call: u64,
    /// What the journal recorded at that call (`step book`, `decision 2`,
    /// `wait approve`, `nothing: the journal ends here`).
    pub recorded: String,
    /// What the handler called.
    pub called: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "run {} diverged from its journal at call {}: the journal has {}, the handler \
             called {}",
            self.run, self.call, self.recorded, self.called
        )
    }
}

//! A run's saga book: the compensable steps it took, in order, and how the
//! run ends once they are undone; what a compensating run does next. The
//! rules over sagas are in `rules/saga.rs`.

use serde::{Deserialize, Serialize};

use crate::books::base::ids::{EffectKey, EffectKind, RunId, StepId};
use crate::books::records::ledger::EffectEntry;
use crate::books::records::run::RunState;

/// A run's saga: the steps it could have to undo, and where it is headed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SagaBook {
    /// The run.
    pub run: RunId,
    /// The steps whose act registered a compensation, in the order their
    /// first intents were written: the saga undoes them last first.
    pub steps: Vec<StepId>,
    /// While (and after) the run compensates: the end it reaches once the
    /// saga is done (`failed` or `cancelled`).
    pub end: Option<RunState>,
}

impl SagaBook {
    /// An empty book for `run`.
    pub fn new(run: RunId) -> SagaBook {
        SagaBook {
            run,
            steps: Vec::new(),
            end: None,
        }
    }
}

/// What a compensating run's saga does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SagaNext {
    /// Undo this step's confirmed act with its registered compensation
    /// (`begin_compensation`): the latest step not yet undone.
    Undo {
        /// The step.
        step: StepId,
    },
    /// This step's act has no known outcome yet, and nothing earlier may
    /// be undone before it is known: resolve it by its tool's class (a
    /// `begin_effect` of the same act answers `Resend` or `Reconcile`, and
    /// never begins a new one), or record its outcome when it arrives.
    Resolve {
        /// The act's latest attempt.
        key: EffectKey,
    },
    /// The saga cannot go on by itself: this act's or compensation's
    /// outcome is unknown on a tool that cannot say, or the compensation
    /// failed for good. A person must settle it (a reconcile), or an
    /// operator abandon the saga (`OperatorAction::Abandon`).
    Stuck {
        /// The attempt that holds it.
        key: EffectKey,
        /// Its status, by name (`unknown`, `failed (terminal)`).
        status: &'static str,
    },
    /// Nothing is outstanding: the saga ends, and the run with it.
    End {
        /// The run's end.
        end: RunState,
    },
}

/// True for the two ends a saga leads to.
pub(crate) fn is_saga_end(state: RunState) -> bool {
    matches!(state, RunState::Failed | RunState::Cancelled)
}

/// What is outstanding, in words, for an error.
pub(crate) fn describe_next(next: &SagaNext) -> String {
    match next {
        SagaNext::Undo { step } => format!("step {step} is still to be undone"),
        SagaNext::Resolve { key } => format!("act {key} has no known outcome yet"),
        SagaNext::Stuck { key, status } => format!("{key} is {status}: a person must settle it"),
        SagaNext::End { end } => format!("nothing: the saga ends {end}"),
    }
}

/// Appends `step` to `run`'s saga book if its act registers a compensation
/// and the step is not listed yet (`apply` calls it for every intent).
pub(crate) fn note_intent(book: Option<SagaBook>, entry: &EffectEntry) -> Option<SagaBook> {
    if entry.key.kind() != EffectKind::Act || entry.compensation.is_none() {
        return None;
    }
    let mut book = book.unwrap_or_else(|| SagaBook::new(entry.key.run().clone()));
    if book.steps.iter().any(|s| s == entry.key.step()) {
        return None;
    }
    book.steps.push(entry.key.step().clone());
    Some(book)
}

//! Invariant: no effect begins unless its run is running. A `begin_effect`
//! or `begin_compensation` the engine acknowledged (an intent written, a
//! resend or a query handed out, or a receipt replayed) was made on a run
//! the reference model held in `running` (the books before the command):
//! not pending, paused by an operator, waiting, or over. A compensating
//! run's saga is the exception it needs: it begins compensations, and
//! resolves an act already in flight (its latest attempt open), but never
//! begins an act.
//!
//! The model's run state comes from applying acknowledged ops, not from
//! the rule `decide` enforces, so this catches an engine that skips the
//! rule.

use actum::books::{BooksRead, Command, EffectKind, MemBooks, RunState};

/// `Err` if `cmd`, just acknowledged, begins an effect (or compensation)
/// on a run that `model` (the books before the command) holds in a state
/// other than `running`. Batches are not looked into: a begin inside one
/// may follow a transition of the same batch.
pub fn effect_begins_on_a_running_run(model: &MemBooks, cmd: &Command) -> Result<(), String> {
    let (run, what, saga_may) = match cmd {
        Command::BeginEffect(c) => {
            let in_flight = model
                .latest_effect(&c.run, &c.step, EffectKind::Act)
                .is_some_and(|e| e.status.is_open());
            (&c.run, format!("an effect of step {}", c.step), in_flight)
        }
        Command::BeginCompensation(c) => {
            (&c.run, format!("a compensation of step {}", c.step), true)
        }
        _ => return Ok(()),
    };
    match model.run(run) {
        Some(record) if record.state == RunState::Compensating && saga_may => Ok(()),
        Some(record) if record.state != RunState::Running => Err(format!(
            "the engine began {what} on run {run}, which is {}",
            record.state
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{
        BeginEffect, BooksWrite, FencingToken, Guard, StepId, ToolClass, WorkerId, digest_of,
    };

    fn books_with(state: RunState) -> MemBooks {
        let mut books = MemBooks::new();
        books.put_run(run_record("r", state));
        books
    }

    fn begin() -> Command {
        Command::BeginEffect(BeginEffect {
            run: run_id("r"),
            step: StepId::new("pay").expect("valid"),
            guard: Guard {
                run: run_id("r"),
                worker: WorkerId::new("w1").expect("valid"),
                token: FencingToken(1),
            },
            tool: "bank.pay".into(),
            tool_class: ToolClass::NotIdempotent,
            args_digest: digest_of(b"10"),
            args: None,
            rationale: "due".into(),
            compensation: None,
        })
    }

    #[test]
    fn a_begin_on_a_run_that_is_not_running_is_caught() {
        assert!(effect_begins_on_a_running_run(&books_with(RunState::Running), &begin()).is_ok());
        for state in [RunState::Pending, RunState::Paused, RunState::Cancelled] {
            match effect_begins_on_a_running_run(&books_with(state), &begin()) {
                Err(err) => assert!(err.contains(state.name()), "{err}"),
                Ok(()) => panic!("a begin on a {state} run passed"),
            }
        }
    }
}

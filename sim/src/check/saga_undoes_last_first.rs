//! Invariant: a saga undoes what its run did, last first, each step once.
//! Once the runs are over, for every run whose acts registered a
//! compensation (its saga book lists the steps, in intent order):
//!
//! - the world applied at most one compensation of each step (whatever
//!   its attempts), and a compensated act's exactly one;
//! - those compensations were applied in the reverse order of the steps;
//! - a run that failed or was cancelled left no act confirmed (nor with
//!   its outcome still open) that registered a compensation, unless an
//!   operator abandoned its saga (the journal says so).

use std::collections::BTreeMap;

use actum::books::{BooksRead, EffectKind, EffectStatus, MemBooks, RunState, StepId};

use crate::world::Application;

/// `Err` naming the first run whose saga broke a rule.
pub fn sagas_undo_last_first(books: &MemBooks, log: &[Application]) -> Result<(), String> {
    for run in books.runs() {
        let Some(book) = books.saga(&run.id) else {
            continue;
        };
        // The world's compensations of each step of this run, in order.
        let mut undos: BTreeMap<&StepId, Vec<&Application>> = BTreeMap::new();
        for app in log
            .iter()
            .filter(|a| *a.key.run() == run.id && a.key.kind() == EffectKind::Undo)
        {
            undos.entry(app.key.step()).or_default().push(app);
        }
        let mut last_seq: Option<(usize, &StepId)> = None;
        for step in book.steps.iter().rev() {
            let applied = undos.get(step).map_or(&[][..], Vec::as_slice);
            if applied.len() > 1 {
                return Err(format!(
                    "step {step} of run {} was compensated {} times ({})",
                    run.id,
                    applied.len(),
                    keys(applied)
                ));
            }
            let act = books.latest_effect(&run.id, step, EffectKind::Act);
            let compensated = act.as_ref().is_some_and(|a| a.status.is_compensated());
            if compensated && applied.is_empty() {
                return Err(format!(
                    "step {step} of run {} is recorded compensated, but the world applied no \
                     compensation of it",
                    run.id
                ));
            }
            if let [app] = applied {
                // Walking the steps backwards, each compensation comes after
                // the one of the step after it.
                if let Some((seq, later)) = last_seq
                    && app.seq < seq
                {
                    return Err(format!(
                        "run {} undid step {step} (world seq {}) before step {later} (seq {seq}), \
                         which came after it: a saga undoes last first",
                        run.id, app.seq
                    ));
                }
                last_seq = Some((app.seq, step));
            }
            left_behind(books, run, step, act.map(|a| a.status))?;
        }
    }
    Ok(())
}

/// `Err` if `run` failed or was cancelled by itself (no operator abandoned
/// its saga) while the act of `step` stands confirmed or open.
fn left_behind(
    books: &MemBooks,
    run: &actum::books::Run,
    step: &StepId,
    act: Option<EffectStatus>,
) -> Result<(), String> {
    if !matches!(run.state, RunState::Failed | RunState::Cancelled) {
        return Ok(());
    }
    let abandoned = books
        .audit(&run.id, 1)
        .iter()
        .any(|e| e.why.contains("(abandon)"));
    let stands = matches!(
        act,
        Some(
            EffectStatus::Confirmed { .. }
                | EffectStatus::ConfirmedStored { .. }
                | EffectStatus::Intended
                | EffectStatus::Unknown { .. }
        )
    );
    if stands && !abandoned {
        return Err(format!(
            "run {} ended {} with the act of step {step} {}, never compensated",
            run.id,
            run.state,
            act.as_ref().map_or("absent", EffectStatus::name)
        ));
    }
    Ok(())
}

fn keys(apps: &[&Application]) -> String {
    let keys: Vec<String> = apps.iter().map(|a| a.key.to_string()).collect();
    keys.join(", ")
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{BooksWrite, Compensation, SagaBook, ToolClass};

    /// Run `r` failed, with compensable steps `a` then `b`, both undone.
    fn books() -> MemBooks {
        let mut books = books_with(Vec::new());
        books.put_run(run_record("r", RunState::Failed));
        for step in ["a", "b"] {
            let undone = EffectStatus::Compensated {
                receipt: b"ok".to_vec(),
                compensation_receipt: b"back".to_vec(),
            };
            let mut act = entry(&format!("r/{step}/1"), undone, ToolClass::Queryable);
            act.compensation = Some(Compensation {
                tool: "undo".into(),
                args: Vec::new(),
                class: ToolClass::Queryable,
            });
            books.put_effect(act);
        }
        books.put_saga(SagaBook {
            run: run_id("r"),
            steps: vec![StepId::new("a").unwrap(), StepId::new("b").unwrap()],
            end: Some(RunState::Failed),
        });
        books
    }

    #[test]
    fn undone_last_first_each_once_passes() {
        let log = [
            app(0, "r/b/undo/1", 2, "back"),
            app(1, "r/a/undo/1", 2, "back"),
        ];
        assert_eq!(sagas_undo_last_first(&books(), &log), Ok(()));
    }

    #[test]
    fn first_first_twice_missing_or_left_behind_are_caught() {
        let forward = [
            app(0, "r/a/undo/1", 2, "back"),
            app(1, "r/b/undo/1", 2, "back"),
        ];
        let err = sagas_undo_last_first(&books(), &forward).unwrap_err();
        assert!(err.contains("undoes last first"), "{err}");
        let twice = [
            app(0, "r/b/undo/1", 2, "back"),
            app(1, "r/b/undo/2", 2, "back"),
            app(2, "r/a/undo/1", 2, "back"),
        ];
        let err = sagas_undo_last_first(&books(), &twice).unwrap_err();
        assert!(err.contains("compensated 2 times"), "{err}");
        let missing = [app(0, "r/b/undo/1", 2, "back")];
        let err = sagas_undo_last_first(&books(), &missing).unwrap_err();
        assert!(err.contains("applied no compensation"), "{err}");
        let mut left = books();
        let mut act = left.effect(&key("r/a/1")).unwrap();
        act.status = confirmed("ok");
        left.put_effect(act);
        let err = sagas_undo_last_first(&left, &[app(0, "r/b/undo/1", 2, "back")]).unwrap_err();
        assert!(err.contains("never compensated"), "{err}");
    }
}

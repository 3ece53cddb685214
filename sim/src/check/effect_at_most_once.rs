//! Invariant: no side effect fires twice. For each logical step of a run,
//! each side (the act, its compensation) is applied in the world at most
//! once, over every attempt and every key. And its ledger half: the engine
//! never plans an act or a query for a step side whose latest attempt the
//! books hold confirmed (a tool that deduplicates would hide the second
//! send from the world's log).

use std::collections::BTreeMap;

use actum::books::{BooksRead, EffectKey, EffectKind, EffectStatus, MemBooks, RunId, StepId};

use crate::world::Application;

/// `Err` naming the step and both applications if any side of any step
/// was applied twice.
pub fn effect_applied_at_most_once(log: &[Application]) -> Result<(), String> {
    let mut first: BTreeMap<(&RunId, &StepId, EffectKind), &Application> = BTreeMap::new();
    for app in log {
        let side = (app.key.run(), app.key.step(), app.key.kind());
        if let Some(earlier) = first.insert(side, app) {
            return Err(format!(
                "step {}/{} ({}) was applied twice in the world: by {} (key {}, token {}) at {} \
                 ms and by {} (key {}, token {}) at {} ms",
                app.key.run(),
                app.key.step(),
                app.key.kind().name(),
                earlier.tool,
                earlier.key,
                earlier.token.0,
                earlier.at_ms,
                app.tool,
                app.key,
                app.token.0,
                app.at_ms
            ));
        }
    }
    Ok(())
}

/// `Err` if the step side of `key`, for which the engine just planned a
/// call, is confirmed (or compensated) in `model`, the books of the
/// acknowledged commands.
pub fn step_not_confirmed(model: &MemBooks, key: &EffectKey) -> Result<(), String> {
    let Some(latest) = model.latest_effect(key.run(), key.step(), key.kind()) else {
        return Ok(());
    };
    match latest.status {
        EffectStatus::Confirmed { .. }
        | EffectStatus::Compensated { .. }
        | EffectStatus::ConfirmedStored { .. }
        | EffectStatus::CompensatedStored { .. } => Err(format!(
            "the engine planned a call of {key} while {} is {} in the books",
            latest.key,
            latest.status.name()
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;

    #[test]
    fn a_second_application_of_a_step_is_caught_over_keys_but_not_across_sides() {
        let once = [app(0, "r/pay/1", 1, "a"), app(1, "r/pay/undo/1", 1, "b")];
        assert!(effect_applied_at_most_once(&once).is_ok());
        let twice = [app(0, "r/pay/1", 1, "a"), app(1, "r/pay/2", 2, "b")];
        let err = effect_applied_at_most_once(&twice).expect_err("applied twice");
        assert!(err.contains("r/pay") && err.contains("twice"), "{err}");
    }

    #[test]
    fn a_call_planned_for_a_confirmed_step_is_caught() {
        use crate::check::test_support::key;
        use actum::books::{BooksWrite, ToolClass};
        let mut books = MemBooks::new();
        let done = EffectStatus::Confirmed {
            receipt: b"r".to_vec(),
        };
        books.put_effect(entry("r/pay/1", done, ToolClass::Queryable));
        assert!(step_not_confirmed(&books, &key("r/pay/1")).is_err());
        assert!(step_not_confirmed(&books, &key("r/pay/2")).is_err());
        assert!(step_not_confirmed(&books, &key("r/ship/1")).is_ok());
        books.put_effect(entry(
            "r/ship/1",
            EffectStatus::Intended,
            ToolClass::Queryable,
        ));
        assert!(step_not_confirmed(&books, &key("r/ship/1")).is_ok());
    }
}

//! Invariant: no side effect fires twice. For each logical step of a run,
//! each side (the act, its compensation) is applied in the world at most
//! once, over every attempt and every key.

use std::collections::BTreeMap;

use actum::books::{EffectKind, RunId, StepId};

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
}

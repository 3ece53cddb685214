//! Invariant: liveness. After the faults stop (the calm phase), every run
//! reaches a terminal state, no intent is left open, and the only `Unknown`
//! entries are on tools that can neither deduplicate nor answer a query
//! (or idempotent ones whose intent outlived the dedup window less the
//! tool's resend margin, past which the engine no longer resends, before
//! its run ended). A run an
//! operator cancelled is the exception: a cancel does not wait for acts in
//! flight, so its open entries stay open for a person to reconcile (each
//! still applied at most once: `effect_applied_at_most_once`).

use actum::books::{BooksRead, EffectStatus, MemBooks, RunState, ToolClass};

/// `Err` naming the first run or entry that did not settle.
pub fn every_run_ends_settled(books: &MemBooks) -> Result<(), String> {
    if let Some(run) = books.runs().find(|r| !r.state.is_terminal()) {
        return Err(format!(
            "run {} is still {} after the faults stopped",
            run.id, run.state
        ));
    }
    for entry in books.effects() {
        let run = books.run(entry.key.run());
        if run.as_ref().is_some_and(|r| r.state == RunState::Cancelled) {
            continue;
        }
        // The last the run was decided on: the entry's own settle, or the
        // run's end (a begin past the horizon answers an entry already
        // unknown without settling it again).
        let last_ms = entry
            .settled_ms
            .into_iter()
            .chain(run.map(|r| r.updated_ms))
            .max()
            .unwrap_or(entry.intended_ms);
        match (&entry.status, entry.tool_class) {
            (EffectStatus::Intended, _) => {
                return Err(format!("effect {} is still only intended", entry.key));
            }
            (EffectStatus::Unknown { .. }, ToolClass::NotIdempotent) => {}
            (EffectStatus::Unknown { .. }, class)
                if class.resend_horizon_ms().is_some_and(|horizon| {
                    last_ms.saturating_sub(entry.intended_ms) >= horizon
                }) => {}
            (EffectStatus::Unknown { reason }, class) => {
                return Err(format!(
                    "effect {} on a {class:?} tool ended unknown ({reason}); it should have been \
                     resent or queried",
                    entry.key
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;

    #[test]
    fn open_intents_and_unknowns_a_tool_could_resolve_are_caught() {
        let unknown = EffectStatus::Unknown {
            reason: "ack lost".into(),
        };
        let mail = books_with(vec![entry(
            "r/mail/1",
            unknown.clone(),
            ToolClass::NotIdempotent,
        )]);
        assert!(every_run_ends_settled(&mail).is_ok());
        let wire = books_with(vec![entry(
            "r/wire/1",
            unknown.clone(),
            ToolClass::Queryable,
        )]);
        assert!(every_run_ends_settled(&wire).is_err());
        let window = ToolClass::Idempotent {
            dedup_window_ms: 500,
        };
        let aged = books_with(vec![entry("r/pay/1", unknown.clone(), window)]);
        assert!(
            every_run_ends_settled(&aged).is_ok(),
            "settled 1000 ms after its intent"
        );
        // Inside the window, but past the window less its resend margin
        // (the default's 105 ms, or a declared one): never resent, so a
        // person must reconcile it.
        for edge in [
            ToolClass::Idempotent {
                dedup_window_ms: 1_050,
            },
            ToolClass::IdempotentWithMargin {
                dedup_window_ms: 5_000,
                resend_margin_ms: 4_500,
            },
        ] {
            let aged = books_with(vec![entry("r/pay/1", unknown.clone(), edge)]);
            assert!(every_run_ends_settled(&aged).is_ok(), "{edge:?}");
        }
        let fresh = ToolClass::Idempotent {
            dedup_window_ms: 5_000,
        };
        assert!(
            every_run_ends_settled(&books_with(vec![entry("r/pay/1", unknown, fresh)])).is_err()
        );
        let open = books_with(vec![entry("r/pay/1", EffectStatus::Intended, fresh)]);
        assert!(every_run_ends_settled(&open).is_err());
    }

    #[test]
    fn an_unknown_recorded_before_the_horizon_passes_if_its_run_ended_after_it() {
        use actum::books::BooksWrite;
        let unknown = EffectStatus::Unknown {
            reason: "no reply before the timeout".into(),
        };
        // Intended at 1000, reported unknown at 2000; resent until 5500.
        let day = ToolClass::Idempotent {
            dedup_window_ms: 5_000,
        };
        for (ended_ms, ok) in [(5_500, true), (5_499, false)] {
            let mut books = books_with(vec![entry("r/pay/1", unknown.clone(), day)]);
            let mut run = run_record("r", RunState::Failed);
            run.updated_ms = ended_ms;
            books.put_run(run);
            assert_eq!(every_run_ends_settled(&books).is_ok(), ok, "{ended_ms}");
        }
    }

    #[test]
    fn an_open_intent_of_a_cancelled_run_waits_for_a_person() {
        use actum::books::BooksWrite;
        let fresh = ToolClass::Idempotent {
            dedup_window_ms: 5_000,
        };
        for (state, ok) in [(RunState::Cancelled, true), (RunState::Completed, false)] {
            let mut books = books_with(vec![entry("r/pay/1", EffectStatus::Intended, fresh)]);
            books.put_run(run_record("r", state));
            assert_eq!(every_run_ends_settled(&books).is_ok(), ok, "{state}");
        }
    }
}

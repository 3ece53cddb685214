//! Invariant: liveness. After the faults stop (the calm phase), every run
//! reaches a terminal state, no intent is left open, and the only `Unknown`
//! entries are on tools that can neither deduplicate nor answer a query
//! (or idempotent ones whose intent outlived the dedup window).

use actum::books::{EffectStatus, MemBooks, ToolClass};

/// `Err` naming the first run or entry that did not settle.
pub fn every_run_ends_settled(books: &MemBooks) -> Result<(), String> {
    if let Some(run) = books.runs().find(|r| !r.state.is_terminal()) {
        return Err(format!(
            "run {} is still {} after the faults stopped",
            run.id, run.state
        ));
    }
    for entry in books.effects() {
        match (&entry.status, entry.tool_class) {
            (EffectStatus::Intended, _) => {
                return Err(format!("effect {} is still only intended", entry.key));
            }
            (EffectStatus::Unknown { .. }, ToolClass::NotIdempotent) => {}
            (EffectStatus::Unknown { .. }, ToolClass::Idempotent { dedup_window_ms })
                if entry
                    .settled_ms
                    .is_some_and(|at| at.saturating_sub(entry.intended_ms) >= dedup_window_ms) => {}
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

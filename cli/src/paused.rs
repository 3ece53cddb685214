//! Paused runs for `stuck`, with why: the reason journaled with the pause
//! (an operator's, or the budget's when a call found no room), and, when
//! the run's budget is full, which limits are reached, since resuming it
//! then only pauses it again at its next call.
//!
//! **Invariant:** every paused run whose pause is at least as old as the
//! cutoff is listed once, in run id order; the why is the journal's words.

use actum::books::{AuditWhat, BudgetBook, RunId, RunState};
use actum::engine::Engine;

/// A paused run.
pub struct Paused {
    /// The run.
    pub run: RunId,
    /// When it was paused, ms since the epoch.
    pub since_ms: u64,
    /// Why, as journaled with the pause.
    pub why: String,
    /// The limits its budget has reached (empty if it has room).
    pub budget_full: Vec<String>,
}

/// The limits `book` has reached at `now_ms`, as `cost_micros 1300 of
/// 1000`: what was spent and is held against each limit set.
pub fn budget_full(book: &BudgetBook, now_ms: u64) -> Vec<String> {
    let Some(limits) = &book.limits else {
        return Vec::new();
    };
    let used = book.spent.checked_add(&book.reserved).unwrap_or(book.spent);
    let cost_limits = [
        limits.tokens_in,
        limits.tokens_out,
        limits.cost_micros,
        limits.tool_calls,
    ];
    let mut full: Vec<String> = used
        .dimensions()
        .into_iter()
        .zip(cost_limits)
        .filter_map(|((name, used), limit)| {
            limit
                .filter(|&l| used >= l)
                .map(|l| format!("{name} {used} of {l}"))
        })
        .collect();
    if let Some(limit) = limits.wall_ms {
        let ran = book.wall_ms(now_ms);
        if ran >= limit {
            full.push(format!("wall_ms {ran} of {limit}"));
        }
    }
    full
}

/// The paused runs paused at or before `cutoff_ms`, in run id order.
pub fn paused(engine: &Engine, cutoff_ms: u64, now_ms: u64) -> actum::Result<Vec<Paused>> {
    let mut found = Vec::new();
    crate::runs::each_run(engine, Some(RunState::Paused), |run| {
        let pause = engine.audit(&run.id)?.into_iter().rev().find(|e| {
            matches!(
                e.what,
                AuditWhat::Transitioned {
                    to: RunState::Paused,
                    ..
                }
            )
        });
        let (since_ms, why) = pause.map_or((run.updated_ms, String::new()), |e| (e.at_ms, e.why));
        if since_ms > cutoff_ms {
            return Ok(());
        }
        let book = engine.budget(&run.id)?;
        found.push(Paused {
            run: run.id,
            since_ms,
            why,
            budget_full: budget_full(&book, now_ms),
        });
        Ok(())
    })?;
    Ok(found)
}

/// What `stuck` says of a paused run.
pub fn describe(p: &Paused) -> String {
    let why = if p.why.is_empty() {
        "paused (no reason journaled)".to_string()
    } else {
        p.why.clone()
    };
    if p.budget_full.is_empty() {
        return format!("{why}; `actum resume` lets it go on");
    }
    format!(
        "{why}; its budget has reached {}: raise it (`actum budget`), then resume",
        p.budget_full.join(", ")
    )
}

//! Invariants of what an operator reads: the sweep of stuck runs names
//! exactly the runs not over whose open wait, or unknown effect, is older
//! than the SLA in the books; the audit export is the run's journal, line
//! for line.

use actum::books::{BooksRead, EffectKind, EffectStatus, MemBooks, RunState};
use actum::engine::{Stuck, StuckReason};

/// `Err` if `found` (the engine's sweep at `now_ms` for `older_than_ms`)
/// is not what `books` say is stuck.
pub fn stuck_runs_are_the_books(
    books: &MemBooks,
    found: &[Stuck],
    now_ms: u64,
    older_than_ms: u64,
) -> Result<(), String> {
    let cutoff = now_ms.saturating_sub(older_than_ms);
    let mut expected = Vec::new();
    for run in books.runs().filter(|r| !r.state.is_terminal()) {
        if let Some(wait) = books
            .waits(&run.id)
            .and_then(|b| b.open_wait().cloned())
            .filter(|w| w.opened_ms <= cutoff)
        {
            expected.push((
                run.id.clone(),
                format!("wait {} since {}", wait.step, wait.opened_ms),
            ));
        }
        let mut unknown: Vec<_> = books
            .effects()
            .filter(|e| *e.key.run() == run.id)
            .filter(|e| matches!(e.status, EffectStatus::Unknown { .. }))
            .map(|e| (e.settled_ms.unwrap_or(e.intended_ms), e.key.clone()))
            .filter(|(since, _)| *since <= cutoff)
            .collect();
        unknown.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        for (since, key) in unknown {
            expected.push((run.id.clone(), format!("unknown {key} since {since}")));
        }
        // A compensating run whose latest compensation of a step failed
        // for good: its saga cannot end by itself.
        for undo in books.effects().filter(|e| {
            *e.key.run() == run.id
                && run.state == RunState::Compensating
                && e.key.kind() == EffectKind::Undo
                && matches!(
                    e.status,
                    EffectStatus::Failed {
                        retryable: false,
                        ..
                    }
                )
        }) {
            let latest = books.latest_effect(&run.id, undo.key.step(), EffectKind::Undo);
            let since = undo.settled_ms.unwrap_or(undo.intended_ms);
            if latest.is_some_and(|l| l.key == undo.key) && since <= cutoff {
                let key = &undo.key;
                expected.push((
                    run.id.clone(),
                    format!("compensation {key} failed since {since}"),
                ));
            }
        }
    }
    let mut listed: Vec<_> = found
        .iter()
        .map(|s| {
            let what = match &s.reason {
                StuckReason::Waiting { step, since_ms, .. } => {
                    format!("wait {step} since {since_ms}")
                }
                StuckReason::Unknown { key, since_ms } => format!("unknown {key} since {since_ms}"),
                StuckReason::CompensationFailed { key, since_ms } => {
                    format!("compensation {key} failed since {since_ms}")
                }
            };
            (s.run.clone(), what)
        })
        .collect();
    listed.sort();
    expected.sort();
    if listed != expected {
        return Err(format!(
            "the sweep for {older_than_ms} ms at {now_ms} ms lists {listed:?}; the books hold \
             {expected:?}"
        ));
    }
    Ok(())
}

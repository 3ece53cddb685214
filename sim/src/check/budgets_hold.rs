//! Invariants: a budget is never overspent, and a replay is never charged
//! again.
//!
//! In the simulation every call costs less than the hold reserved for it
//! and operators only raise limits, so for every run with limits, what it
//! spent plus what it holds stays within each limit, and what it holds is
//! exactly its open reservations. Every call the world saw for such a run
//! was paid for: the world's distinct act keys of the run are at most its
//! settled plus held tool calls (a call made past an exhausted budget, or
//! without a hold, breaks it). And each charged tool call is one attempt:
//! a run never spent more tool calls than its ledger holds attempts (a
//! step replayed from the books and charged again breaks it).
//!
//! A child run draws on its ancestors' budgets: its holds are counted in
//! each ancestor's book too, so an ancestor holds its own open
//! reservations plus its descendants' that name it, and its calls are its
//! own and its descendants'.

use std::collections::BTreeSet;

use actum::books::{BooksRead, BudgetBook, Cost, EffectKind, MemBooks, RunId};

use crate::world::Application;

/// `Err` naming the run, the limit and the counts if a budget of `books`
/// (all of them, or `only` that run's) is overspent or miscounted.
pub fn budgets_hold(books: &MemBooks, only: Option<&RunId>) -> Result<(), String> {
    for run in books.runs().filter(|r| only.is_none_or(|id| r.id == *id)) {
        let Some(book) = books.budget(&run.id) else {
            continue;
        };
        check_book(books, &book)?;
    }
    Ok(())
}

/// The runs whose calls `run` pays for: itself and its descendants.
fn family(books: &MemBooks, run: &RunId) -> BTreeSet<RunId> {
    books
        .runs()
        .filter(|r| {
            let mut at = Some(r.id.clone());
            while let Some(id) = at {
                if id == *run {
                    return true;
                }
                at = books.run(&id).and_then(|found| found.parent);
            }
            false
        })
        .map(|r| r.id.clone())
        .collect()
}

fn check_book(books: &MemBooks, book: &BudgetBook) -> Result<(), String> {
    let counted_here: Vec<_> = books
        .runs()
        .filter_map(|r| books.budget(&r.id))
        .flat_map(|b| b.open)
        .filter(|r| r.charged.contains(&book.run))
        .collect();
    let held = counted_here
        .iter()
        .try_fold(Cost::default(), |sum, r| sum.checked_add(&r.amount))
        .ok_or_else(|| format!("the holds of run {} overflow", book.run))?;
    if held != book.reserved {
        return Err(format!(
            "run {} holds {} in the open reservations counted in it but counts {} reserved",
            book.run, held, book.reserved
        ));
    }
    let Some(limits) = book.limits else {
        return Ok(());
    };
    let used = book
        .spent
        .checked_add(&book.reserved)
        .ok_or_else(|| format!("the counters of run {} overflow", book.run))?;
    let limited = [
        limits.tokens_in,
        limits.tokens_out,
        limits.cost_micros,
        limits.tool_calls,
    ];
    for ((name, used), limit) in used.dimensions().into_iter().zip(limited) {
        if let Some(limit) = limit
            && used > limit
        {
            return Err(format!(
                "run {} used {used} {name} (spent {}, held {}) past its limit of {limit}",
                book.run, book.spent, book.reserved
            ));
        }
    }
    Ok(())
}

/// `Err` naming the run and the counts if the world saw more calls of a
/// budgeted run than it paid or holds, or a run was charged more tool
/// calls than it has recorded attempts.
pub fn calls_are_paid_once(books: &MemBooks, log: &[Application]) -> Result<(), String> {
    for run in books.runs() {
        let Some(book) = books.budget(&run.id) else {
            continue;
        };
        let family = family(books, &run.id);
        let made: BTreeSet<_> = log
            .iter()
            .filter(|app| family.contains(app.key.run()) && app.key.kind() == EffectKind::Act)
            .map(|app| &app.key)
            .collect();
        let paid = book.spent.tool_calls + book.reserved.tool_calls;
        if made.len() as u64 > paid {
            return Err(format!(
                "the world applied {} calls of run {} but its budget paid or holds only {paid}: \
                 {made:?}",
                made.len(),
                run.id
            ));
        }
        let attempts = books
            .effects()
            .filter(|e| family.contains(e.key.run()) && e.key.kind() == EffectKind::Act)
            .count() as u64;
        if book.spent.tool_calls > attempts {
            return Err(format!(
                "run {} was charged {} tool calls but made {attempts} attempts: a call was \
                 charged twice",
                run.id, book.spent.tool_calls
            ));
        }
    }
    Ok(())
}

/// `Err` unless the model of the books, which decided the same reserve,
/// holds budget for `charge` of `run` too: the engine granted a hold the
/// books refuse (past an exhausted budget, or for a call made before).
pub fn reserve_granted_by_the_books(
    model: &MemBooks,
    run: &RunId,
    charge: &actum::books::Charge,
) -> Result<(), String> {
    if model
        .budget(run)
        .is_some_and(|b| b.reservation(charge).is_some())
    {
        return Ok(());
    }
    let why = match model.run(run).map(|r| r.state) {
        Some(actum::books::RunState::Paused) => "past its exhausted budget",
        _ => "for a call made and recorded before",
    };
    Err(format!(
        "the engine granted run {run} a hold for {charge} {why}; the books hold none"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{BooksWrite, BudgetLimits, Charge, FencingToken, Reservation, StepId};

    fn book(limit: u64, spent: u64, held: u64) -> BudgetBook {
        let run = RunId::new("r").expect("a valid id");
        let open: Vec<Reservation> = (0..held)
            .map(|i| Reservation {
                charge: Charge::Effect {
                    step: StepId::new(format!("s{i}")).expect("a valid id"),
                },
                amount: Cost::tool_call(0),
                reserved_ms: 0,
                token: FencingToken(1),
                attempt: 1,
                charged: vec![run.clone()],
            })
            .collect();
        BudgetBook {
            run: run.clone(),
            limits: Some(BudgetLimits {
                tool_calls: Some(limit),
                ..BudgetLimits::default()
            }),
            spent: Cost {
                tool_calls: spent,
                ..Cost::default()
            },
            reserved: Cost {
                tool_calls: held,
                ..Cost::default()
            },
            open,
            ran_ms: 0,
            running_since_ms: None,
        }
    }

    /// The books holding run `r` with `book` as its budget.
    fn books_of(book: BudgetBook) -> MemBooks {
        let mut books = MemBooks::new();
        books.put_run(run_record("r", actum::books::RunState::Running));
        books.put_budget(book);
        books
    }

    #[test]
    fn spending_past_a_limit_or_a_miscounted_hold_is_caught() {
        assert!(budgets_hold(&books_of(book(3, 2, 1)), None).is_ok());
        let err = budgets_hold(&books_of(book(3, 3, 1)), None).expect_err("overspent");
        assert!(err.contains("past its limit of 3"), "{err}");
        let mut wrong = book(3, 0, 1);
        wrong.reserved.tool_calls = 2;
        let err = budgets_hold(&books_of(wrong), None).expect_err("miscounted");
        assert!(err.contains("counts"), "{err}");
    }

    #[test]
    fn a_parent_counts_its_childs_holds_and_calls() {
        let mut books = books_of(book(3, 0, 1));
        let mut child = run_record("r:c", actum::books::RunState::Running);
        child.parent = Some(RunId::new("r").expect("a valid id"));
        books.put_run(child);
        let mut child_book = book(3, 0, 1);
        child_book.run = RunId::new("r:c").expect("a valid id");
        child_book.limits = None;
        for hold in &mut child_book.open {
            hold.charged = vec![child_book.run.clone(), RunId::new("r").expect("valid")];
        }
        books.put_budget(child_book);
        // The parent counts one hold of its own and its child's: two.
        let err = budgets_hold(&books, None).expect_err("the child's hold is not counted");
        assert!(err.contains("counts"), "{err}");
        let mut parent = books
            .budget(&RunId::new("r").expect("valid"))
            .expect("a book");
        parent.reserved.tool_calls = 2;
        books.put_budget(parent);
        assert!(budgets_hold(&books, None).is_ok());
        // The child's call is one the parent paid for.
        let class = actum::books::ToolClass::Idempotent {
            dedup_window_ms: 1_000_000,
        };
        let mut with_calls = books.clone();
        with_calls.put_effect(entry("r:c/s/1", confirmed("ok"), class));
        let calls = [app(0, "r:c/s/1", 1, "x"), app(1, "r/a/1", 1, "y")];
        assert!(calls_are_paid_once(&with_calls, &calls).is_ok());
        let three = [
            app(0, "r:c/s/1", 1, "x"),
            app(1, "r/a/1", 1, "y"),
            app(2, "r/b/1", 1, "z"),
        ];
        let err = calls_are_paid_once(&with_calls, &three).expect_err("unpaid call");
        assert!(err.contains("run r "), "{err}");
    }

    #[test]
    fn a_call_without_a_hold_and_a_charged_replay_are_caught() {
        let class = actum::books::ToolClass::Queryable;
        let mut books = books_with(vec![entry("r/a/1", confirmed("ok"), class)]);
        books.put_run(run_record("r", actum::books::RunState::Running));
        books.put_budget(book(5, 1, 0));
        let one = [app(0, "r/a/1", 1, "x")];
        assert!(calls_are_paid_once(&books, &one).is_ok());
        let two = [app(0, "r/a/1", 1, "x"), app(1, "r/b/1", 1, "y")];
        let err = calls_are_paid_once(&books, &two).expect_err("unpaid call");
        assert!(err.contains("paid or holds only 1"), "{err}");
        books.put_budget(book(5, 2, 0));
        let err = calls_are_paid_once(&books, &one).expect_err("charged twice");
        assert!(err.contains("charged twice"), "{err}");
    }
}

//! Budgets: what a run may spend on model calls and tool calls (tokens in
//! and out, cost in micro-units, tool calls) and how long it may run, kept
//! in its [`BudgetBook`]. A worker reserves before a call ([`Reserve`]) and
//! settles after it ([`Settle`]), which returns the difference; a reserve
//! that would go over any limit is refused and pauses the run in the same
//! commit (fail closed: the call is never made). An operator raising the
//! budget ([`SetBudget`], no lease) lets the run be resumed.
//!
//! A worker that never reserves is held to the limits all the same: with
//! limits set (on the run or an ancestor), `BeginEffect` refuses a fresh
//! act that would pass them, naming the run, the step and the limit
//! (`BudgetExhausted`, nothing recorded), and counts its tool call in the
//! intent's commit unless a reserve holds it already
//! ([`decide_act_within_budget`]). A resend, replay or query of an act
//! begun before is the same call and is never refused.
//!
//! A charge is named by what it pays for, a model call at a position of the
//! decision journal or the act of a step ([`Charge`]), so a replay costs
//! nothing: reserving a charge whose decision is journaled, or whose act
//! has an outcome no new attempt follows, is answered `Replayed`, and
//! reserving one already reserved answers the open reservation again (or,
//! if its call is recorded but was never settled, because its worker died,
//! charges the whole hold first: fail closed). A
//! settle is accepted once the call is recorded; commit it in the same
//! batch as the outcome (`FinishEffect`, `RecordDecision`) so that no crash
//! comes between them.
//!
//! A child run draws on its ancestors' budgets too: a reservation is
//! checked against, and counted in, the run's own book and the book of
//! every ancestor that has limits (up to [`BUDGET_ANCESTORS_MAX`] levels),
//! so a tree of runs stays within its root's budget. Wall time is the run's
//! own: the time it spent `running` since its book was made.
//!
//! Invariants: `reserved` is the sum of the open reservations counted in a
//! book; a charge has at most one open reservation; a settled charge is
//! never charged again; spending counted before a settle is never lost.

use crate::books::base::ids::{EffectKind, FencingToken, RunId, StepId};
use crate::books::base::limits::{
    BUDGET_ANCESTORS_MAX, RESERVATIONS_OPEN_MAX, check_size, check_text,
};
use crate::books::fold::apply::apply;
use crate::books::records::budget::{
    BudgetBook, Charge, Cost, Reservation, Reserved, SettledCharge,
};
use crate::books::records::ledger::EffectStatus;
use crate::books::records::run::{Run, RunState};
use crate::books::rules::checks::{check_live, check_running, existing, move_under_current_token};
use crate::books::views::overlay::Overlay;
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::{Reserve, SetBudget, Settle};
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

fn check_by(what: &str, by: &str, run: &RunId) -> Result<()> {
    check_text(what, by)?;
    if by.is_empty() {
        return Err(Error::InvalidCommand {
            reason: format!("the {what} of run {run} must be named"),
        });
    }
    Ok(())
}

/// The budget book of `run`, or a new empty one.
pub(crate) fn book_or_new(state: &dyn BooksRead, run: &Run, now_ms: u64) -> BudgetBook {
    state
        .budget(&run.id)
        .unwrap_or_else(|| BudgetBook::new(run.id.clone(), run.state, now_ms))
}

/// Decides `SetBudget`: an operator (no lease) sets or changes a live run's
/// limits; spending so far stands.
pub(crate) fn decide_set_budget(
    state: &dyn BooksRead,
    cmd: &SetBudget,
    now_ms: u64,
) -> Result<Decided> {
    check_by("operator", &cmd.by, &cmd.run)?;
    check_text("budget reason", &cmd.reason)?;
    let run = existing(state, &cmd.run)?;
    if run.state.is_terminal() {
        return Err(Error::RunTerminal {
            run: run.id.clone(),
            state: run.state,
        });
    }
    Ok(Decided {
        ops: vec![Op::BudgetSet {
            run: run.id.clone(),
            limits: cmd.limits,
            by: cmd.by.clone(),
            reason: cmd.reason.clone(),
            at_ms: now_ms,
        }],
        answer: Answer::BudgetSet { run: run.id },
    })
}

/// True if the call `charge` pays for is recorded: its decision is
/// journaled, or its act's latest attempt has an outcome.
fn recorded(state: &dyn BooksRead, run: &RunId, charge: &Charge) -> bool {
    match charge {
        Charge::Decision { position } => state.decision_at(run, *position).is_some(),
        Charge::Effect { step } => state
            .latest_effect(run, step, EffectKind::Act)
            .is_some_and(|entry| entry.status != EffectStatus::Intended),
    }
}

/// The attempt of `step`'s act a reservation made now pays for.
fn attempt_paid_for(state: &dyn BooksRead, run: &RunId, step: &StepId) -> u32 {
    match state.latest_effect(run, step, EffectKind::Act) {
        None => 1,
        Some(entry) if entry.status == EffectStatus::Intended => entry.key.attempt(),
        Some(entry) => entry.key.attempt().saturating_add(1),
    }
}

/// True if the call `reservation` holds for is recorded: its decision is
/// journaled, or its attempt has an outcome (or a later attempt exists).
fn reserved_call_recorded(state: &dyn BooksRead, run: &RunId, reservation: &Reservation) -> bool {
    match &reservation.charge {
        Charge::Decision { position } => state.decision_at(run, *position).is_some(),
        Charge::Effect { step } => {
            state
                .latest_effect(run, step, EffectKind::Act)
                .is_some_and(|entry| {
                    let attempt = entry.key.attempt();
                    attempt > reservation.attempt
                        || (attempt == reservation.attempt
                            && entry.status != EffectStatus::Intended)
                })
        }
    }
}

/// True if the call `charge` pays for will not be made again: its decision
/// is journaled (a resume replays it), or its act's latest attempt was
/// recorded and no new attempt follows (a retryable failure is followed by
/// a new, paid, attempt). An attempt sent again with its own key after an
/// unknown outcome (`resends > 0`) is the same, paid, call.
fn replayed(state: &dyn BooksRead, run: &RunId, charge: &Charge) -> bool {
    match charge {
        Charge::Decision { .. } => recorded(state, run, charge),
        Charge::Effect { step } => {
            state
                .latest_effect(run, step, EffectKind::Act)
                .is_some_and(|entry| match entry.status {
                    EffectStatus::Intended => entry.resends > 0,
                    EffectStatus::Failed { retryable, .. } => !retryable,
                    _ => true,
                })
        }
    }
}

/// The books a reservation of `run` is counted in: its own, then each
/// ancestor's with limits, nearest first.
fn chain(state: &dyn BooksRead, run: &Run, now_ms: u64) -> Vec<BudgetBook> {
    let mut books = vec![book_or_new(state, run, now_ms)];
    let mut parent = run.parent.clone();
    for _ in 0..BUDGET_ANCESTORS_MAX {
        let Some(id) = parent else { break };
        let Some(ancestor) = state.run(&id) else {
            break;
        };
        if let Some(book) = state.budget(&id).filter(|b| b.limits.is_some()) {
            books.push(book);
        }
        parent = ancestor.parent;
    }
    books
}

/// Decides `Reserve`: the holder of a running run's live lease asks to hold
/// `amount` for a call (see the module docs for the answers). A
/// reservation found open for a call that is recorded (a worker reserved,
/// made the call, recorded it, and died before settling) is settled at its
/// full amount first: the worker that knew the actual cost is gone, so the
/// books charge what was held (fail closed).
pub(crate) fn decide_reserve(state: &dyn BooksRead, cmd: &Reserve, now_ms: u64) -> Result<Decided> {
    let run = existing(state, &cmd.run)?;
    check_live(&run, &cmd.guard, now_ms)?;
    check_running(&run, "reserve budget for a call")?;
    let open = state
        .budget(&run.id)
        .and_then(|book| book.reservation(&cmd.charge).cloned());
    let Some(open) = open else {
        return decide_fresh_reserve(state, &run, cmd, now_ms, true);
    };
    if !reserved_call_recorded(state, &run.id, &open) {
        return Ok(Decided {
            ops: Vec::new(),
            answer: Answer::Reserved(Reserved::Granted {
                charge: open.charge,
                amount: open.amount,
                again: true,
            }),
        });
    }
    let settle = Op::BudgetSettled {
        run: run.id.clone(),
        charge: cmd.charge.clone(),
        actual: open.amount,
        at_ms: now_ms,
        token: cmd.guard.token,
    };
    let mut overlay = Overlay::new(state);
    apply(&mut overlay, &settle).map_err(|e| Error::Inconsistent {
        what: format!(
            "settling the recorded {} of run {}: {e}",
            cmd.charge, run.id
        ),
    })?;
    let mut decided = decide_fresh_reserve(&overlay, &run, cmd, now_ms, true)?;
    decided.ops.insert(0, settle);
    Ok(decided)
}

/// `Reserve` for a charge with no open reservation (`check_replay`: false
/// only for the planted bug `ChargeReplays`).
fn decide_fresh_reserve(
    state: &dyn BooksRead,
    run: &Run,
    cmd: &Reserve,
    now_ms: u64,
    check_replay: bool,
) -> Result<Decided> {
    let answer = |reserved| Answer::Reserved(reserved);
    if check_replay && replayed(state, &run.id, &cmd.charge) {
        return Ok(Decided {
            ops: Vec::new(),
            answer: answer(Reserved::Replayed {
                charge: cmd.charge.clone(),
            }),
        });
    }
    let books = chain(state, run, now_ms);
    check_size(
        || format!("open reservations of run {}", run.id),
        books[0].open.len() + 1,
        RESERVATIONS_OPEN_MAX,
    )?;
    let refusal = books
        .iter()
        .enumerate()
        .find_map(|(i, book)| book.refusal(&cmd.amount, now_ms, i == 0));
    if let Some(reason) = refusal {
        let why = format!("budget exhausted reserving {}: {reason}", cmd.charge);
        let (op, _) = move_under_current_token(run, RunState::Paused, now_ms, why.clone());
        return Ok(Decided {
            ops: vec![op],
            answer: answer(Reserved::Exhausted { reason: why }),
        });
    }
    let overflow = books
        .iter()
        .any(|b| b.reserved.checked_add(&cmd.amount).is_none());
    if overflow {
        return Err(Error::InvalidCommand {
            reason: format!(
                "reserving {} for {} of run {} overflows a budget's counters",
                cmd.amount, cmd.charge, run.id
            ),
        });
    }
    let reservation = Reservation {
        charge: cmd.charge.clone(),
        amount: cmd.amount,
        reserved_ms: now_ms,
        token: cmd.guard.token,
        attempt: match &cmd.charge {
            Charge::Decision { .. } => 0,
            Charge::Effect { step } => attempt_paid_for(state, &run.id, step),
        },
        charged: books.iter().map(|b| b.run.clone()).collect(),
    };
    Ok(Decided {
        ops: vec![Op::BudgetReserved {
            run: run.id.clone(),
            reservation,
        }],
        answer: answer(Reserved::Granted {
            charge: cmd.charge.clone(),
            amount: cmd.amount,
            again: false,
        }),
    })
}

/// The budget check of a fresh act: `begin_effect` is about to intend
/// attempt `attempt` of `step`'s act under `token`. Nothing to do if
/// neither the run nor an ancestor it draws on has limits. Otherwise the
/// act fails closed, as a reserve does: refused (`BudgetExhausted`, naming
/// the run, the step and the limit) if one more tool call would pass
/// `tool_calls`, if a limit is already passed, or if the run's time
/// running is used up. A hold open for the act (its worker reserved
/// before beginning) already counts its tool call, which is not counted
/// again; without one, the tool call is counted as spent in the intent's
/// commit (a hold of one tool call, settled at once), so a worker that
/// never reserves still cannot pass `tool_calls`.
pub(crate) fn decide_act_within_budget(
    state: &dyn BooksRead,
    run: &Run,
    (step, attempt): (&StepId, u32),
    token: FencingToken,
    now_ms: u64,
) -> Result<Vec<Op>> {
    let books = chain(state, run, now_ms);
    if books.iter().all(|b| b.limits.is_none()) {
        return Ok(Vec::new());
    }
    let charge = Charge::Effect { step: step.clone() };
    let held = books[0].reservation(&charge).is_some();
    let asked = if held {
        Cost::default()
    } else {
        Cost::tool_call(0)
    };
    let refusal = books
        .iter()
        .enumerate()
        .find_map(|(i, book)| book.refusal(&asked, now_ms, i == 0));
    if let Some(limit) = refusal {
        return Err(Error::BudgetExhausted {
            run: run.id.clone(),
            step: step.clone(),
            limit,
        });
    }
    if held {
        return Ok(Vec::new());
    }
    let overflow = books
        .iter()
        .any(|b| b.reserved.checked_add(&asked).is_none() || b.spent.checked_add(&asked).is_none());
    if overflow {
        return Err(Error::InvalidCommand {
            reason: format!(
                "counting the act of step {step} of run {} overflows a budget's counters",
                run.id
            ),
        });
    }
    let reservation = Reservation {
        charge: charge.clone(),
        amount: asked,
        reserved_ms: now_ms,
        token,
        attempt,
        charged: books.iter().map(|b| b.run.clone()).collect(),
    };
    Ok(vec![
        Op::BudgetReserved {
            run: run.id.clone(),
            reservation,
        },
        Op::BudgetSettled {
            run: run.id.clone(),
            charge,
            actual: asked,
            at_ms: now_ms,
            token,
        },
    ])
}

/// Planted `ChargeReplays`: `Reserve` without the replay check, so a call
/// made and recorded before is held and charged again.
pub(crate) fn decide_reserve_charging_replays(
    state: &dyn BooksRead,
    cmd: &Reserve,
    now_ms: u64,
) -> Result<Decided> {
    let run = existing(state, &cmd.run)?;
    check_live(&run, &cmd.guard, now_ms)?;
    check_running(&run, "reserve budget for a call")?;
    if state
        .budget(&run.id)
        .is_some_and(|b| b.reservation(&cmd.charge).is_some())
    {
        return decide_reserve(state, cmd, now_ms);
    }
    decide_fresh_reserve(state, &run, cmd, now_ms, false)
}

/// Decides `Settle`: the lease holder records what a reserved call cost,
/// once the call is recorded (its decision journaled or its act's outcome
/// known); the difference goes back. A paused run settles too (a call in
/// flight when its budget ran out still cost what it cost).
pub(crate) fn decide_settle(state: &dyn BooksRead, cmd: &Settle, now_ms: u64) -> Result<Decided> {
    let run = existing(state, &cmd.run)?;
    check_live(&run, &cmd.guard, now_ms)?;
    let open = state
        .budget(&run.id)
        .and_then(|book| book.reservation(&cmd.charge).cloned());
    let Some(open) = open else {
        if recorded(state, &run.id, &cmd.charge) {
            return Ok(Decided {
                ops: Vec::new(),
                answer: Answer::ChargeSettled(SettledCharge {
                    charge: cmd.charge.clone(),
                    returned: Cost::default(),
                    overrun: Cost::default(),
                    already: true,
                }),
            });
        }
        return Err(Error::NotReserved {
            run: run.id.clone(),
            charge: cmd.charge.to_string(),
        });
    };
    if !reserved_call_recorded(state, &run.id, &open) {
        return Err(Error::InvalidCommand {
            reason: format!(
                "{} of run {} is settled only once it is recorded (journal the decision or \
                 finish the effect first, in the same batch or before)",
                cmd.charge, run.id
            ),
        });
    }
    let overflow = open.charged.iter().any(|id| {
        state
            .budget(id)
            .is_none_or(|b| b.spent.checked_add(&cmd.actual).is_none())
    });
    if overflow {
        return Err(Error::InvalidCommand {
            reason: format!(
                "settling {} for {} of run {} overflows a budget's counters",
                cmd.actual, cmd.charge, run.id
            ),
        });
    }
    Ok(Decided {
        ops: vec![Op::BudgetSettled {
            run: run.id.clone(),
            charge: cmd.charge.clone(),
            actual: cmd.actual,
            at_ms: now_ms,
            token: cmd.guard.token,
        }],
        answer: Answer::ChargeSettled(SettledCharge {
            charge: cmd.charge.clone(),
            returned: open.amount.saturating_sub(&cmd.actual),
            overrun: cmd.actual.saturating_sub(&open.amount),
            already: false,
        }),
    })
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests;

//! Budgets: what a run may spend on model calls and tool calls (tokens in
//! and out, cost in micro-units, tool calls) and how long it may run, kept
//! in its [`BudgetBook`]. A worker reserves before a call ([`Reserve`]) and
//! settles after it ([`Settle`]), which returns the difference; a reserve
//! that would go over any limit is refused and pauses the run in the same
//! commit (fail closed: the call is never made). An operator raising the
//! budget ([`SetBudget`], no lease) lets the run be resumed.
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

use std::fmt;

use serde::{Deserialize, Serialize};

use super::apply::apply;
use super::command::{Reserve, SetBudget, Settle};
use super::decide::{Answer, Decided};
use super::decision::Usage;
use super::ids::{EffectKind, FencingToken, RunId, StepId};
use super::lease::check_live;
use super::ledger::EffectStatus;
use super::limits::{BUDGET_ANCESTORS_MAX, RESERVATIONS_OPEN_MAX, check_size};
use super::op::Op;
use super::overlay::Overlay;
use super::run::{Run, RunState, check_running, check_text, existing, move_under_current_token};
use super::state::BooksRead;
use crate::error::{Error, Result};

/// What a call costs, or what a book has spent or holds reserved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Completion tokens.
    pub tokens_out: u64,
    /// Money, in integer micro-units of the caller's currency.
    pub cost_micros: u64,
    /// Tool calls.
    pub tool_calls: u64,
}

impl Cost {
    /// One tool call costing `cost_micros`.
    pub fn tool_call(cost_micros: u64) -> Cost {
        Cost {
            tool_calls: 1,
            cost_micros,
            ..Cost::default()
        }
    }

    /// What a model call's usage costs.
    pub fn of_usage(usage: Usage) -> Cost {
        Cost {
            tokens_in: usage.tokens_in,
            tokens_out: usage.tokens_out,
            cost_micros: usage.cost_micro_usd,
            tool_calls: 0,
        }
    }

    /// Each dimension with its name, in a fixed order.
    pub fn dimensions(&self) -> [(&'static str, u64); 4] {
        [
            ("tokens_in", self.tokens_in),
            ("tokens_out", self.tokens_out),
            ("cost_micros", self.cost_micros),
            ("tool_calls", self.tool_calls),
        ]
    }

    /// The sum, or `None` if a dimension overflows.
    pub fn checked_add(&self, other: &Cost) -> Option<Cost> {
        Some(Cost {
            tokens_in: self.tokens_in.checked_add(other.tokens_in)?,
            tokens_out: self.tokens_out.checked_add(other.tokens_out)?,
            cost_micros: self.cost_micros.checked_add(other.cost_micros)?,
            tool_calls: self.tool_calls.checked_add(other.tool_calls)?,
        })
    }

    /// The difference, or `None` if a dimension would go below zero.
    pub fn checked_sub(&self, other: &Cost) -> Option<Cost> {
        Some(Cost {
            tokens_in: self.tokens_in.checked_sub(other.tokens_in)?,
            tokens_out: self.tokens_out.checked_sub(other.tokens_out)?,
            cost_micros: self.cost_micros.checked_sub(other.cost_micros)?,
            tool_calls: self.tool_calls.checked_sub(other.tool_calls)?,
        })
    }

    /// `self - other` in each dimension, stopping at zero.
    pub fn saturating_sub(&self, other: &Cost) -> Cost {
        Cost {
            tokens_in: self.tokens_in.saturating_sub(other.tokens_in),
            tokens_out: self.tokens_out.saturating_sub(other.tokens_out),
            cost_micros: self.cost_micros.saturating_sub(other.cost_micros),
            tool_calls: self.tool_calls.saturating_sub(other.tool_calls),
        }
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} tokens in, {} tokens out, {} micros, {} tool calls",
            self.tokens_in, self.tokens_out, self.cost_micros, self.tool_calls
        )
    }
}

/// A run's limits: `None` in a dimension means no limit there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetLimits {
    /// Most prompt tokens.
    pub tokens_in: Option<u64>,
    /// Most completion tokens.
    pub tokens_out: Option<u64>,
    /// Most money, in micro-units.
    pub cost_micros: Option<u64>,
    /// Most tool calls.
    pub tool_calls: Option<u64>,
    /// Most time spent `running`, in milliseconds (the run's own).
    pub wall_ms: Option<u64>,
}

impl BudgetLimits {
    /// The cost limits in [`Cost::dimensions`] order.
    fn cost_dimensions(&self) -> [Option<u64>; 4] {
        [
            self.tokens_in,
            self.tokens_out,
            self.cost_micros,
            self.tool_calls,
        ]
    }
}

impl fmt::Display for BudgetLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let named = [
            ("tokens_in", self.tokens_in),
            ("tokens_out", self.tokens_out),
            ("cost_micros", self.cost_micros),
            ("tool_calls", self.tool_calls),
            ("wall_ms", self.wall_ms),
        ];
        let set: Vec<String> = named
            .iter()
            .filter_map(|(name, limit)| limit.map(|l| format!("{name} {l}")))
            .collect();
        if set.is_empty() {
            return f.write_str("no limits");
        }
        f.write_str(&set.join(", "))
    }
}

/// What a reservation pays for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Charge {
    /// The model call at this position of the run's decision journal.
    Decision {
        /// Its position.
        position: u64,
    },
    /// The act of this step (its tool call).
    Effect {
        /// The step.
        step: StepId,
    },
}

impl fmt::Display for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Charge::Decision { position } => write!(f, "model call {position}"),
            Charge::Effect { step } => write!(f, "the act of step {step}"),
        }
    }
}

/// An open reservation of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// What it pays for.
    pub charge: Charge,
    /// How much it holds.
    pub amount: Cost,
    /// When it was made, ms since the epoch.
    pub reserved_ms: u64,
    /// The lease token it was made under.
    pub token: FencingToken,
    /// For a step's act, the attempt it pays for (the one after the
    /// latest when it was made, or the latest if that has no outcome yet);
    /// 0 for a model call.
    pub attempt: u32,
    /// The books it is counted in: the run's own first, then each
    /// ancestor's with limits, nearest first.
    pub charged: Vec<RunId>,
}

/// A run's budget: its limits, what it spent and holds reserved, and how
/// long it has run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetBook {
    /// The run.
    pub run: RunId,
    /// Its own limits; `None` if it has none (it may still draw on an
    /// ancestor's, and its spending is counted all the same).
    pub limits: Option<BudgetLimits>,
    /// Settled charges counted in this book: the run's own, and its
    /// descendants' while it had limits.
    pub spent: Cost,
    /// Open reservations counted in this book.
    pub reserved: Cost,
    /// The run's own open reservations.
    pub open: Vec<Reservation>,
    /// Time spent running before `running_since_ms`, in milliseconds.
    pub ran_ms: u64,
    /// Since when the run is running, if it is.
    pub running_since_ms: Option<u64>,
}

impl BudgetBook {
    /// The empty book of `run`, made at `at_ms` while the run is in `state`.
    pub fn new(run: RunId, state: RunState, at_ms: u64) -> BudgetBook {
        BudgetBook {
            run,
            limits: None,
            spent: Cost::default(),
            reserved: Cost::default(),
            open: Vec::new(),
            ran_ms: 0,
            running_since_ms: (state == RunState::Running).then_some(at_ms),
        }
    }

    /// The open reservation of `charge`, if any.
    pub fn reservation(&self, charge: &Charge) -> Option<&Reservation> {
        self.open.iter().find(|r| r.charge == *charge)
    }

    /// How long the run has been running at `now_ms`, in milliseconds.
    pub fn wall_ms(&self, now_ms: u64) -> u64 {
        let current = self
            .running_since_ms
            .map_or(0, |since| now_ms.saturating_sub(since));
        self.ran_ms.saturating_add(current)
    }

    /// Why reserving `amount` more would break this book's limits at
    /// `now_ms`, if it would (`own`: the book is the reserving run's, whose
    /// wall time counts).
    fn refusal(&self, amount: &Cost, now_ms: u64, own: bool) -> Option<String> {
        let limits = self.limits?;
        let spent = self.spent.dimensions();
        let reserved = self.reserved.dimensions();
        let asked = amount.dimensions();
        for (i, limit) in limits.cost_dimensions().into_iter().enumerate() {
            let Some(limit) = limit else { continue };
            let (name, spent) = spent[i];
            let total = u128::from(spent) + u128::from(reserved[i].1) + u128::from(asked[i].1);
            if total > u128::from(limit) {
                return Some(format!(
                    "the budget of run {} allows {limit} {name}: {spent} spent, {} reserved, {} \
                     asked",
                    self.run, reserved[i].1, asked[i].1
                ));
            }
        }
        match limits.wall_ms {
            Some(limit) if own && self.wall_ms(now_ms) >= limit => Some(format!(
                "the budget of run {} allows {limit} ms of running: {} ms run",
                self.run,
                self.wall_ms(now_ms)
            )),
            _ => None,
        }
    }
}

/// What a reserve decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reserved {
    /// Make the call: `amount` is held for it (`again`: it was reserved
    /// before, by this or an earlier worker, and is still open).
    Granted {
        /// What it pays for.
        charge: Charge,
        /// What is held.
        amount: Cost,
        /// True if the reservation existed already.
        again: bool,
    },
    /// The call was made and recorded before (a replay): do not make it,
    /// and nothing is charged.
    Replayed {
        /// What it paid for.
        charge: Charge,
    },
    /// A limit would be broken: the call must not be made, and the run is
    /// paused until an operator raises the budget and resumes it.
    Exhausted {
        /// Which limit, of which run, by how much.
        reason: String,
    },
}

/// What a settle returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettledCharge {
    /// What it paid for.
    pub charge: Charge,
    /// Reserved and not spent: given back.
    pub returned: Cost,
    /// Spent beyond the reservation.
    pub overrun: Cost,
    /// True if it was settled before (nothing changed now).
    pub already: bool,
}

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

/// The wall-clock bookkeeping of a run's move from `from` to `to` at
/// `at_ms`: leaving `running` adds the stretch to `ran_ms`.
pub(crate) fn note_transition(book: &mut BudgetBook, from: RunState, to: RunState, at_ms: u64) {
    if from == RunState::Running
        && let Some(since) = book.running_since_ms.take()
    {
        book.ran_ms = book.ran_ms.saturating_add(at_ms.saturating_sub(since));
    }
    if to == RunState::Running {
        book.running_since_ms = Some(at_ms);
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::command::{Command, Guard, Operate, OperatorAction};
    use crate::books::decide::Begun;
    use crate::books::ledger::{Outcome, ToolClass};
    use crate::books::test_support::*;

    fn set_budget(run: &str, limits: BudgetLimits) -> Command {
        Command::SetBudget(SetBudget {
            run: rid(run),
            limits,
            by: "ops".into(),
            reason: "quarterly cap".into(),
        })
    }

    fn reserve(run: &str, g: &Guard, charge: Charge, amount: Cost) -> Command {
        Command::Reserve(Reserve {
            run: rid(run),
            guard: g.clone(),
            charge,
            amount,
        })
    }

    fn settle(run: &str, g: &Guard, charge: Charge, actual: Cost) -> Command {
        Command::Settle(Settle {
            run: rid(run),
            guard: g.clone(),
            charge,
            actual,
        })
    }

    fn operate(run: &str, action: OperatorAction) -> Command {
        Command::Operate(Operate {
            run: rid(run),
            action,
            operator: "ops".into(),
            reason: "budget".into(),
        })
    }

    fn step(name: &str) -> Charge {
        Charge::Effect { step: sid(name) }
    }

    fn calls(n: u64) -> BudgetLimits {
        BudgetLimits {
            tool_calls: Some(n),
            ..BudgetLimits::default()
        }
    }

    fn reserved(d: &Decided) -> Reserved {
        match &d.answer {
            Answer::Reserved(r) => r.clone(),
            other => panic!("{other:?}"),
        }
    }

    fn settled(d: &Decided) -> SettledCharge {
        match &d.answer {
            Answer::ChargeSettled(s) => s.clone(),
            other => panic!("{other:?}"),
        }
    }

    /// Reserves, begins, confirms and settles the act of `name`.
    fn paid_step(b: &mut Books, run: &str, g: &Guard, name: &str, actual: Cost) {
        let r = reserved(&b.ok(reserve(run, g, step(name), Cost::tool_call(100))));
        assert!(matches!(r, Reserved::Granted { again: false, .. }), "{r:?}");
        let d = b.ok(begin(run, name, g, ToolClass::Queryable, name.as_bytes()));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!("{:?}", d.answer)
        };
        b.ok(finish(&key, g, confirmed(b"ok")));
        b.ok(settle(run, g, step(name), actual));
    }

    fn book(b: &Books, run: &str) -> BudgetBook {
        b.mem.budget(&rid(run)).unwrap()
    }

    #[test]
    fn a_settle_returns_what_the_call_did_not_spend() {
        let (mut b, g) = books_with_running_run("r");
        b.ok(set_budget("r", calls(5)));
        let r = reserved(&b.ok(reserve("r", &g, step("pay"), Cost::tool_call(100))));
        assert_eq!(
            r,
            Reserved::Granted {
                charge: step("pay"),
                amount: Cost::tool_call(100),
                again: false
            }
        );
        assert_eq!(book(&b, "r").reserved, Cost::tool_call(100));
        let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!()
        };
        b.ok(finish(&key, &g, confirmed(b"ok")));
        let s = settled(&b.ok(settle("r", &g, step("pay"), Cost::tool_call(60))));
        assert_eq!(s.returned.cost_micros, 40);
        assert_eq!(s.overrun, Cost::default());
        let after = book(&b, "r");
        assert_eq!(after.reserved, Cost::default());
        assert_eq!(after.spent, Cost::tool_call(60));
        assert!(after.open.is_empty());
        // The journal says what was reserved and what it cost.
        let lines: Vec<String> = b
            .mem
            .audit(&rid("r"), 1)
            .iter()
            .map(|e| e.what.to_string())
            .collect();
        assert!(lines.iter().any(|l| l.starts_with("reserved")), "{lines:?}");
        assert!(
            lines.iter().any(|l| l.contains("the act of step pay cost")),
            "{lines:?}"
        );
    }

    #[test]
    fn exhaustion_refuses_the_call_and_pauses_the_run_until_an_operator_raises_it() {
        let (mut b, g) = books_with_running_run("r");
        b.ok(set_budget("r", calls(1)));
        paid_step(&mut b, "r", &g, "one", Cost::tool_call(10));
        let r = reserved(&b.ok(reserve("r", &g, step("two"), Cost::tool_call(10))));
        let Reserved::Exhausted { reason } = r else {
            panic!("{r:?}")
        };
        assert!(reason.contains("allows 1 tool_calls"), "{reason}");
        assert_eq!(b.mem.run(&rid("r")).unwrap().state, RunState::Paused);
        assert!(book(&b, "r").open.is_empty(), "nothing was held");
        // The call is never made: the begin is refused on a paused run,
        // and so is another reserve.
        let err = b
            .run(begin("r", "two", &g, ToolClass::Queryable, b"two"))
            .unwrap_err();
        assert!(matches!(err, Error::RunNotRunning { .. }), "{err}");
        let err = b
            .run(reserve("r", &g, step("two"), Cost::tool_call(10)))
            .unwrap_err();
        assert!(matches!(err, Error::RunNotRunning { .. }), "{err}");
        // Resumed without a raise, it is paused again at the next reserve.
        b.ok(operate("r", OperatorAction::Resume));
        let r = reserved(&b.ok(reserve("r", &g, step("two"), Cost::tool_call(10))));
        assert!(matches!(r, Reserved::Exhausted { .. }), "{r:?}");
        // Raised and resumed, the call goes ahead; spending so far stands.
        b.ok(set_budget("r", calls(2)));
        b.ok(operate("r", OperatorAction::Resume));
        paid_step(&mut b, "r", &g, "two", Cost::tool_call(10));
        assert_eq!(book(&b, "r").spent.tool_calls, 2);
    }

    #[test]
    fn a_replayed_step_or_decision_is_not_charged_again() {
        let (mut b, g) = books_with_running_run("r");
        b.ok(set_budget("r", calls(1)));
        paid_step(&mut b, "r", &g, "pay", Cost::tool_call(10));
        let r = reserved(&b.ok(reserve("r", &g, step("pay"), Cost::tool_call(10))));
        assert_eq!(
            r,
            Reserved::Replayed {
                charge: step("pay")
            }
        );
        let model = Charge::Decision { position: 0 };
        let ask = Cost {
            tokens_in: 100,
            tokens_out: 100,
            ..Cost::default()
        };
        b.ok(reserve("r", &g, model.clone(), ask));
        // A worker that crashed after reserving asks again: the same hold.
        let r = reserved(&b.ok(reserve("r", &g, model.clone(), ask)));
        assert!(matches!(r, Reserved::Granted { again: true, .. }), "{r:?}");
        assert_eq!(book(&b, "r").reserved.tokens_in, 100);
        b.ok(decision("r", &g, 0, b"prompt", b"answer"));
        b.ok(settle("r", &g, model.clone(), ask));
        let r = reserved(&b.ok(reserve("r", &g, model.clone(), ask)));
        assert_eq!(
            r,
            Reserved::Replayed {
                charge: model.clone()
            }
        );
        let s = settled(&b.ok(settle("r", &g, model, ask)));
        assert!(s.already);
        let spent = book(&b, "r").spent;
        assert_eq!((spent.tool_calls, spent.tokens_in), (1, 100));
    }

    #[test]
    fn a_recorded_call_left_unsettled_by_a_dead_worker_is_charged_its_full_hold() {
        let (mut b, g) = books_with_running_run("r");
        b.ok(set_budget("r", calls(3)));
        // The worker reserves, makes the call, records it, and dies.
        b.ok(reserve("r", &g, step("pay"), Cost::tool_call(100)));
        let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!()
        };
        b.ok(finish(&key, &g, confirmed(b"ok")));
        // Its successor asks again: the call is not made again, and the
        // hold is charged whole.
        let d = b.ok(reserve("r", &g, step("pay"), Cost::tool_call(100)));
        assert_eq!(
            reserved(&d),
            Reserved::Replayed {
                charge: step("pay")
            }
        );
        assert!(
            matches!(d.ops[..], [Op::BudgetSettled { .. }]),
            "{:?}",
            d.ops
        );
        let after = book(&b, "r");
        assert_eq!(
            (after.spent, after.reserved),
            (Cost::tool_call(100), Cost::default())
        );
        // After a retryable failure, the dead worker's call is charged and
        // the retry gets a hold of its own, in one commit.
        b.ok(reserve("r", &g, step("mail"), Cost::tool_call(10)));
        let d = b.ok(begin("r", "mail", &g, ToolClass::Queryable, b"m"));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!()
        };
        let busy = Outcome::Failed {
            retryable: true,
            reason: "busy".into(),
        };
        b.ok(finish(&key, &g, busy));
        let d = b.ok(reserve("r", &g, step("mail"), Cost::tool_call(10)));
        assert!(
            matches!(reserved(&d), Reserved::Granted { again: false, .. }),
            "{:?}",
            d.answer
        );
        assert!(
            matches!(
                d.ops[..],
                [Op::BudgetSettled { .. }, Op::BudgetReserved { .. }]
            ),
            "{:?}",
            d.ops
        );
        let after = book(&b, "r");
        assert_eq!((after.spent.tool_calls, after.reserved.tool_calls), (2, 1));
    }

    #[test]
    fn a_retry_after_a_retryable_failure_is_a_new_paid_call() {
        let (mut b, g) = books_with_running_run("r");
        b.ok(set_budget("r", calls(2)));
        b.ok(reserve("r", &g, step("pay"), Cost::tool_call(10)));
        let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!()
        };
        let failed = Outcome::Failed {
            retryable: true,
            reason: "busy".into(),
        };
        b.ok(finish(&key, &g, failed));
        b.ok(settle("r", &g, step("pay"), Cost::tool_call(10)));
        let r = reserved(&b.ok(reserve("r", &g, step("pay"), Cost::tool_call(10))));
        assert!(matches!(r, Reserved::Granted { again: false, .. }), "{r:?}");
        assert_eq!(book(&b, "r").reserved.tool_calls, 1);
        // A successor asks again before the retry is made: the hold is
        // for the retry, not for the failed attempt, so it stands as is.
        let d = b.ok(reserve("r", &g, step("pay"), Cost::tool_call(10)));
        assert!(
            matches!(reserved(&d), Reserved::Granted { again: true, .. }),
            "{:?}",
            d.answer
        );
        assert!(d.ops.is_empty(), "{:?}", d.ops);
        let after = book(&b, "r");
        assert_eq!((after.spent.tool_calls, after.reserved.tool_calls), (1, 1));
    }

    #[test]
    fn a_settle_needs_the_call_recorded_and_a_reservation() {
        let (mut b, g) = books_with_running_run("r");
        let err = b
            .run(settle("r", &g, step("pay"), Cost::tool_call(1)))
            .unwrap_err();
        assert!(matches!(err, Error::NotReserved { .. }), "{err}");
        assert!(
            err.to_string().contains("the act of step pay of run r"),
            "{err}"
        );
        b.ok(reserve("r", &g, step("pay"), Cost::tool_call(1)));
        let err = b
            .run(settle("r", &g, step("pay"), Cost::tool_call(1)))
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidCommand { reason } if reason.contains("only once it is recorded")),
            "{err}"
        );
        // Without a budget the spending is still counted.
        assert_eq!(book(&b, "r").limits, None);
        assert_eq!(book(&b, "r").reserved.tool_calls, 1);
    }

    #[test]
    fn a_child_draws_on_its_parents_budget() {
        let (mut b, g) = books_with_running_run("parent");
        b.ok(set_budget("parent", calls(2)));
        let Command::CreateRun(mut child) = create("child", b"c") else {
            panic!()
        };
        child.parent = Some(rid("parent"));
        b.ok(Command::CreateRun(child));
        let d = b.ok(acquire("child", "w2", LEASE_MS));
        let Answer::Leased { token, .. } = d.answer else {
            panic!()
        };
        let gc = Guard {
            worker: wid("w2"),
            token,
        };
        b.ok(transition("child", &gc, RunState::Running));
        paid_step(&mut b, "parent", &g, "a", Cost::tool_call(1));
        paid_step(&mut b, "child", &gc, "b", Cost::tool_call(1));
        assert_eq!(book(&b, "parent").spent.tool_calls, 2);
        assert_eq!(book(&b, "child").spent.tool_calls, 1);
        let r = reserved(&b.ok(reserve("child", &gc, step("c"), Cost::tool_call(1))));
        let Reserved::Exhausted { reason } = r else {
            panic!("{r:?}")
        };
        assert!(reason.contains("budget of run parent"), "{reason}");
        assert_eq!(b.mem.run(&rid("child")).unwrap().state, RunState::Paused);
        assert_eq!(b.mem.run(&rid("parent")).unwrap().state, RunState::Running);
    }

    #[test]
    fn wall_time_counts_only_time_spent_running() {
        let (mut b, g) = books_with_running_run("r");
        b.ok(set_budget(
            "r",
            BudgetLimits {
                wall_ms: Some(1_000),
                ..BudgetLimits::default()
            },
        ));
        b.now_ms += 600;
        b.ok(operate("r", OperatorAction::Pause));
        b.now_ms += 1_000_000; // paused: not counted
        b.ok(operate("r", OperatorAction::Resume));
        b.now_ms += 300;
        let lease = b.ok(acquire("r", "w1", LEASE_MS));
        let Answer::Leased { token, .. } = lease.answer else {
            panic!("{:?}", lease.answer)
        };
        let g = Guard { token, ..g };
        let r = reserved(&b.ok(reserve("r", &g, step("a"), Cost::default())));
        assert!(matches!(r, Reserved::Granted { .. }), "{r:?}");
        assert_eq!(book(&b, "r").wall_ms(b.now_ms), 900);
        b.now_ms += 100;
        let r = reserved(&b.ok(reserve("r", &g, step("b"), Cost::default())));
        let Reserved::Exhausted { reason } = r else {
            panic!("{r:?}")
        };
        assert!(reason.contains("1000 ms run"), "{reason}");
    }

    #[test]
    fn a_paused_run_still_settles_a_call_in_flight() {
        let (mut b, g) = books_with_running_run("r");
        b.ok(reserve("r", &g, step("pay"), Cost::tool_call(10)));
        let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!()
        };
        b.ok(operate("r", OperatorAction::Pause));
        b.ok(finish(&key, &g, confirmed(b"ok")));
        let s = settled(&b.ok(settle("r", &g, step("pay"), Cost::tool_call(25))));
        assert_eq!(s.overrun.cost_micros, 15);
        assert_eq!(book(&b, "r").spent.cost_micros, 25);
    }
}

//! A run's budget book: its limits, the reservations open against it and
//! the charges settled, with the arithmetic over them (costs, whether a
//! reservation fits). The rules that reserve and settle are in
//! `rules/budget.rs`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::books::base::ids::{FencingToken, RunId, StepId};
use crate::books::records::decision::Usage;
use crate::books::records::run::RunState;

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
            cost_micros: usage.cost_micros,
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
    pub(crate) fn refusal(&self, amount: &Cost, now_ms: u64, own: bool) -> Option<String> {
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

//! Budgets through the engine: an operator sets a run's limits
//! ([`Engine::set_budget`]); a worker reserves before each model or tool
//! call ([`Engine::reserve`]) and settles after it ([`Engine::settle`],
//! best in one [`Engine::commit_batch`] with the call's outcome);
//! [`Engine::budget`] reads a run's book.
//!
//! **Invariant:** like every typed method, these only build a command and
//! narrow its answer; the rules live in `books::budget`.

use crate::books::{
    Answer, BudgetBook, BudgetLimits, Charge, Command, Cost, Guard, Reserve, Reserved, RunId,
    RunState, SetBudget, Settle, SettledCharge,
};
use crate::error::Result;

use super::answers::unexpected;
use super::core::Engine;

impl Engine {
    /// Sets the budget limits of the live run `run` (they replace the old
    /// ones whole), as the operator `by`, with no lease. Spending so far
    /// stands: raising a limit lets a run paused by exhaustion be resumed
    /// ([`Engine::operate`]); lowering one pauses it at its next reserve.
    ///
    /// ```
    /// use actum::books::{BudgetLimits, Charge, CreateRun, Cost, OperatorAction, Reserved, RunId,
    ///     RunState, StepId, Transition, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("research-1")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"q"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// engine.set_budget(&run, BudgetLimits { tool_calls: Some(0), ..Default::default() },
    ///     "ops", "no tools yet")?;
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let search = Charge::Effect { step: StepId::new("search")? };
    /// let answer = engine.reserve(&run, &lease.guard, search.clone(), Cost::tool_call(0))?;
    /// assert!(matches!(answer, Reserved::Exhausted { .. }));
    /// assert_eq!(engine.run(&run)?.expect("exists").state, RunState::Paused);
    /// // The operator raises the budget and resumes the run; the call goes ahead.
    /// engine.set_budget(&run, BudgetLimits { tool_calls: Some(3), ..Default::default() },
    ///     "ops", "approved by the team lead")?;
    /// engine.operate(&run, OperatorAction::Resume, "ops", "budget raised")?;
    /// let answer = engine.reserve(&run, &lease.guard, search, Cost::tool_call(0))?;
    /// assert!(matches!(answer, Reserved::Granted { again: false, .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_budget(
        &self,
        run: &RunId,
        limits: BudgetLimits,
        by: &str,
        reason: &str,
    ) -> Result<()> {
        let cmd = Command::SetBudget(SetBudget {
            run: run.clone(),
            limits,
            by: by.to_string(),
            reason: reason.to_string(),
        });
        match self.answer(cmd)? {
            Answer::BudgetSet { .. } => Ok(()),
            other => unexpected(&other, "set_budget"),
        }
    }

    /// Holds `amount` of the running run's budget, and of each ancestor's
    /// with limits, for the call `charge`, before it is made. `Granted`:
    /// make the call. `Replayed`: it was made and recorded before; do not
    /// make it, nothing is charged. `Exhausted`: a limit would be broken;
    /// the run is paused in the same commit and the call must not be made.
    ///
    /// ```
    /// use actum::books::{BudgetLimits, Charge, CreateRun, Cost, Reserved, RunId, RunState, StepId,
    ///     Transition, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions, StepRequest, ToolSpec};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("research-2")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"q"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// engine.set_budget(&run, BudgetLimits { cost_micros: Some(1_000), ..Default::default() },
    ///     "ops", "")?;
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let charge = Charge::Effect { step: StepId::new("search")? };
    /// engine.reserve(&run, &lease.guard, charge.clone(), Cost::tool_call(400))?;
    /// let settled = engine.settle(&run, &lease.guard, charge.clone(), Cost::tool_call(0));
    /// assert!(settled.is_err(), "the call is not recorded yet");
    /// let tool = ToolSpec { name: "search".into(), class: actum::books::ToolClass::Queryable };
    /// let request = StepRequest { run: &run, step: &StepId::new("search")?, guard: &lease.guard,
    ///     tool, args: b"query", rationale: "find sources", compensation: None };
    /// engine.step(&request, |_ctx| actum::books::Outcome::Confirmed { receipt: b"3 hits".to_vec() })?;
    /// let settled = engine.settle(&run, &lease.guard, charge.clone(), Cost::tool_call(250))?;
    /// assert_eq!(settled.returned.cost_micros, 150);
    /// // A resumed worker asks again: the call is not made and not charged again.
    /// let again = engine.reserve(&run, &lease.guard, charge.clone(), Cost::tool_call(400))?;
    /// assert_eq!(again, Reserved::Replayed { charge });
    /// assert_eq!(engine.budget(&run)?.spent.cost_micros, 250);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve(
        &self,
        run: &RunId,
        guard: &Guard,
        charge: Charge,
        amount: Cost,
    ) -> Result<Reserved> {
        let cmd = Command::Reserve(Reserve {
            run: run.clone(),
            guard: guard.clone(),
            charge,
            amount,
        });
        match self.answer(cmd)? {
            Answer::Reserved(reserved) => Ok(reserved),
            other => unexpected(&other, "reserve"),
        }
    }

    /// Records what the reserved call `charge` cost, once it is recorded
    /// (its decision journaled, or its act's outcome known); what the
    /// reservation held beyond `actual` goes back. Settling again answers
    /// `already`. To leave no crash between the outcome and the settle,
    /// commit both in one [`Engine::commit_batch`] (a `FinishEffect` or
    /// `RecordDecision`, then a `Settle`).
    ///
    /// ```
    /// use actum::books::{BudgetLimits, Charge, Cost, RecordDecision, Usage, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("research-3")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"3"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// engine.set_budget(&run, BudgetLimits { cost_micros: Some(10_000), ..Default::default() }, "ops", "")?;
    /// let call = Charge::Decision { position: 0 };
    /// let hold = Usage { tokens_in: 1_000, tokens_out: 100, cost_micros: 2_000 };
    /// engine.reserve(&run, &lease.guard, call.clone(), Cost::of_usage(hold))?;
    /// let used = Usage { tokens_in: 700, tokens_out: 50, cost_micros: 900 };
    /// engine.record_decision(RecordDecision { run: run.clone(), guard: lease.guard.clone(),
    ///     position: 0, input_digest: digest_of(b"prompt"), output: b"answer".to_vec(),
    ///     rationale: "".into(), usage: used })?;
    /// let settled = engine.settle(&run, &lease.guard, call.clone(), Cost::of_usage(used))?;
    /// assert_eq!(settled.returned, Cost { tokens_in: 300, tokens_out: 50, cost_micros: 1_100, tool_calls: 0 });
    /// // Settling again (a retry) changes nothing.
    /// assert!(engine.settle(&run, &lease.guard, call, Cost::of_usage(used))?.already);
    /// let book = engine.budget(&run)?;
    /// assert_eq!((book.spent, book.reserved), (Cost::of_usage(used), Cost::default()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn settle(
        &self,
        run: &RunId,
        guard: &Guard,
        charge: Charge,
        actual: Cost,
    ) -> Result<SettledCharge> {
        let cmd = Command::Settle(Settle {
            run: run.clone(),
            guard: guard.clone(),
            charge,
            actual,
        });
        match self.answer(cmd)? {
            Answer::ChargeSettled(settled) => Ok(settled),
            other => unexpected(&other, "settle"),
        }
    }

    /// The budget book of `run`: its limits, what it spent and holds
    /// reserved, its open reservations and how long it ran; an empty book
    /// (no limits, nothing spent) if it never had one.
    ///
    /// ```
    /// use actum::books::{BudgetLimits, Charge, Cost, StepId};
    /// use actum::engine::{Engine, EngineOptions};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("research-4")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"4"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// // A run that never had a budget has an empty book.
    /// let book = engine.budget(&run)?;
    /// assert_eq!((book.limits, book.spent), (None, Cost::default()));
    /// let limits = BudgetLimits { tool_calls: Some(5), ..Default::default() };
    /// engine.set_budget(&run, limits, "ops", "pilot")?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let search = Charge::Effect { step: StepId::new("search")? };
    /// engine.reserve(&run, &lease.guard, search, Cost::tool_call(400))?;
    /// let book = engine.budget(&run)?;
    /// assert_eq!(book.limits, Some(limits));
    /// assert_eq!((book.reserved, book.open.len()), (Cost::tool_call(400), 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn budget(&self, run: &RunId) -> Result<BudgetBook> {
        self.read(|books| {
            crate::books::existing(books, run)?;
            // No book: no limits, nothing spent, and no time counted (a
            // book counts time running from when it is made).
            Ok(books
                .budget(run)
                .unwrap_or_else(|| BudgetBook::new(run.clone(), RunState::Pending, 0)))
        })
    }
}

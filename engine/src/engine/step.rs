//! `step`: the seven-point ceremony around one tool call, in one engine
//! call. The key comes from (run, step, attempt); a committed step returns
//! its stored receipt without acting; the intent (arguments digest,
//! rationale, compensation) is durable before the caller's closure runs;
//! the outcome is recorded after it; an intent found without a known
//! outcome is handled by the tool's class.
//!
//! The ceremony also comes in resumable halves, [`Engine::begin_step`] then
//! [`Engine::finish_step`] (or [`Engine::resolve_step`] after a query), for
//! callers that act outside a closure: a runtime that hands the act to
//! another task, or the simulator, which crashes and pauses workers between
//! the halves. `step` is exactly the two halves around the closure.
//!
//! **Invariant:** the act runs only on [`StepPlan::Act`]: after
//! `begin_effect` answered `Proceed` (a fresh intent, durable up to
//! [`EffectCtx::intent_lsn`]) or `Resend` (the same key, inside the tool's
//! dedup window); on every other answer it is not called.

use crate::books::Answer;
use crate::books::{
    BeginEffect, Begun, Command, Compensation, EffectKey, FencingToken, FinishEffect, Guard,
    Outcome, Reconcile, RunId, StepId, ToolClass, digest_of,
};
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::planted::PlantedBug;

use super::answers::unexpected;
use super::core::Engine;

/// What a step's act (or query) reports: confirmed with a receipt, failed
/// (retryable or not), or unknown.
pub type ToolOutcome = Outcome;

/// The tool a step calls: its name and how it treats duplicates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolSpec {
    /// The tool's name (recorded with the intent; a resume must match it).
    pub name: String,
    /// Idempotent within a window, queryable, or neither.
    pub class: ToolClass,
}

/// What the act (or query) receives: pass `key` and `token` to the tool, so
/// the outside world can deduplicate (`key`) and fence (`token`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectCtx {
    /// The idempotency key, stable across crashes and resends.
    pub key: EffectKey,
    /// The fencing token of the lease the act runs under.
    pub token: FencingToken,
    /// True if this is a resend of an earlier intent with the same key.
    pub resend: bool,
    /// The LSN of the record the plan rests on: for an act, the intent (or
    /// the resend) that is durable before the act may start, so
    /// `Engine::durable_lsn() >= intent_lsn` holds whenever the act runs.
    pub intent_lsn: Lsn,
    /// For a compensation (or its query): the receipt of the act it
    /// undoes (the booking reference to cancel, the charge to refund);
    /// `None` for an act.
    pub act_receipt: Option<Vec<u8>>,
}

/// One step's request: who, which step, which tool, with what and why.
#[derive(Clone, Debug)]
pub struct StepRequest<'a> {
    /// The lease the act runs under.
    pub guard: &'a Guard,
    /// The run.
    pub run: &'a RunId,
    /// The logical step (stable across retries: "charge-card", not a uuid).
    pub step: &'a StepId,
    /// The tool.
    pub tool: ToolSpec,
    /// The call's arguments: their digest is recorded with the intent, and
    /// the bytes are stored by that digest in the blob store
    /// ([`Engine::effect_args`]).
    pub args: &'a [u8],
    /// Why the agent chose this act (journaled).
    pub rationale: &'a str,
    /// What undoes the act, if anything.
    pub compensation: Option<Compensation>,
}

/// How a step ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepResult {
    /// The act happened (now, or before: `replayed`); here is its receipt.
    Done {
        /// The attempt's key.
        key: EffectKey,
        /// The tool's receipt.
        receipt: Vec<u8>,
        /// True if the receipt is the stored one (or found by a query) and
        /// the act was not called.
        replayed: bool,
    },
    /// The act failed and that is recorded; if `retryable`, the next `step`
    /// call opens attempt n+1 with a new key.
    Failed {
        /// The attempt's key.
        key: EffectKey,
        /// True if another attempt may be made.
        retryable: bool,
        /// Why.
        reason: String,
    },
    /// Nobody knows whether the act happened. On an idempotent tool the
    /// next `step` resends it with the same key while the dedup window
    /// lasts; on a queryable tool it queries; otherwise it is never
    /// re-called: resolve it with `Engine::reconcile`.
    Unknown {
        /// The ambiguous attempt.
        key: EffectKey,
        /// Why.
        reason: String,
    },
    /// An ambiguous intent on a queryable tool, and no query was given
    /// (`step` rather than `step_queryable`): query the tool, then
    /// `reconcile`.
    NeedsReconcile {
        /// The key to ask the tool about.
        key: EffectKey,
        /// The fencing token.
        token: FencingToken,
    },
    /// The act happened and was undone by its compensation.
    Compensated {
        /// The attempt.
        key: EffectKey,
    },
}

impl StepRequest<'_> {
    /// The command [`Engine::begin_step`] executes for this request.
    pub fn command(&self) -> Command {
        Command::BeginEffect(BeginEffect {
            run: self.run.clone(),
            step: self.step.clone(),
            guard: self.guard.clone(),
            tool: self.tool.name.clone(),
            tool_class: self.tool.class,
            args_digest: digest_of(self.args),
            args: Some(self.args.to_vec()),
            rationale: self.rationale.to_string(),
            compensation: self.compensation.clone(),
        })
    }
}

impl EffectCtx {
    /// The result [`Engine::finish_step`] (and
    /// [`Engine::finish_step_with`]) returns for `outcome`: what a caller
    /// builds the step's follow-up commands from.
    pub fn result(&self, outcome: &Outcome) -> StepResult {
        result_of(self.key.clone(), outcome.clone(), false)
    }

    /// The command [`Engine::finish_step`] executes to record `outcome`.
    pub fn finish_command(&self, guard: &Guard, outcome: Outcome) -> Command {
        Command::FinishEffect(FinishEffect {
            key: self.key.clone(),
            guard: guard.clone(),
            outcome,
        })
    }

    /// The command [`Engine::resolve_step`] executes to record what a query
    /// `found`; `None` for an unknown answer, which records nothing.
    pub fn reconcile_command(&self, guard: &Guard, found: Outcome) -> Option<Command> {
        if matches!(found, Outcome::Unknown { .. }) {
            return None;
        }
        Some(Command::Reconcile(Reconcile {
            key: self.key.clone(),
            guard: guard.clone(),
            outcome: found,
            note: "resolved by the tool's query on resume".to_string(),
        }))
    }
}

/// What a step needs next, from [`Engine::begin_step`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepPlan {
    /// Act now (the intent is durable): call the tool with the context,
    /// then report its outcome with [`Engine::finish_step`].
    Act(EffectCtx),
    /// An ambiguous intent on a queryable tool: ask the tool about
    /// `ctx.key` (never act), then report what it found with
    /// [`Engine::resolve_step`].
    Query(EffectCtx),
    /// Nothing to call: the step's result is already known.
    Done(StepResult),
}

impl Engine {
    /// The whole ceremony around `act` (see the module docs). A queryable
    /// tool's ambiguous intent yields `NeedsReconcile`; use
    /// [`Engine::step_queryable`] to resolve it in the same call.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, RunState, StepId, ToolClass, Transition, WorkerId, Outcome, digest_of};
    /// use actum::engine::{Engine, EngineOptions, StepRequest, StepResult, ToolSpec};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("order-17")?;
    /// engine.create_run(CreateRun {
    ///     run: run.clone(),
    ///     input_digest: digest_of(b"buy a lamp"),
    ///     agent_version: "shop-agent 1.0".into(),
    ///     trace_id: "t-1".into(),
    ///     parent: None,
    ///     input: None,
    /// })?;
    /// let lease = engine.acquire_lease(&run, &WorkerId::new("w1")?, 60_000)?;
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let step = StepId::new("charge")?;
    /// let request = StepRequest {
    ///     guard: &lease.guard,
    ///     run: &run,
    ///     step: &step,
    ///     tool: ToolSpec { name: "stripe.charge".into(), class: ToolClass::Idempotent { dedup_window_ms: 86_400_000 } },
    ///     args: b"4200 EUR",
    ///     rationale: "the user confirmed the cart",
    ///     compensation: None,
    /// };
    /// let mut charges = 0;
    /// let first = engine.step(&request, |ctx| {
    ///     charges += 1;
    ///     assert_eq!(ctx.key.encode(), "order-17/charge/1");
    ///     Outcome::Confirmed { receipt: b"ch_1".to_vec() }
    /// })?;
    /// // The same step again: the stored receipt, and no second charge.
    /// let again = engine.step(&request, |_| unreachable!("never charged twice"))?;
    /// assert!(matches!(again, StepResult::Done { replayed: true, .. }));
    /// assert_eq!(charges, 1);
    /// # drop(first);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn step(
        &self,
        request: &StepRequest<'_>,
        act: impl FnOnce(&EffectCtx) -> ToolOutcome,
    ) -> Result<StepResult> {
        match self.begin_step(request)? {
            StepPlan::Act(ctx) => self.finish_step(request.guard, &ctx, act(&ctx)),
            StepPlan::Query(ctx) => Ok(StepResult::NeedsReconcile {
                key: ctx.key,
                token: ctx.token,
            }),
            StepPlan::Done(result) => Ok(result),
        }
    }

    /// Like [`Engine::step`], with `query` to resolve an ambiguous intent on
    /// a queryable tool: it is asked about the key (never acts); a
    /// confirmed or failed answer is recorded as a reconcile, an unknown one
    /// leaves the intent open and yields `Unknown`.
    ///
    /// ```
    /// use actum::books::{Outcome, StepId, ToolClass};
    /// use actum::engine::{Engine, EngineOptions, StepPlan, StepRequest, StepResult, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("payout-3")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"3"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let request = StepRequest { guard: &lease.guard, run: &run, step: &StepId::new("transfer")?,
    ///     tool: ToolSpec { name: "bank.transfer".into(), class: ToolClass::Queryable },
    ///     args: b"eur 300", rationale: "payout", compensation: None };
    /// // A worker wrote the intent, sent the transfer, and crashed before recording it.
    /// let StepPlan::Act(_) = engine.begin_step(&request)? else { panic!("a fresh step acts") };
    /// // Resumed: the bank is asked about the key, and the transfer is not sent again.
    /// let result = engine.step_queryable(&request, |_| unreachable!("never sent twice"), |ctx| {
    ///     assert_eq!(ctx.key.encode(), "payout-3/transfer/1");
    ///     Outcome::Confirmed { receipt: b"tr-9".to_vec() }
    /// })?;
    /// assert!(matches!(result, StepResult::Done { replayed: true, .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn step_queryable(
        &self,
        request: &StepRequest<'_>,
        act: impl FnOnce(&EffectCtx) -> ToolOutcome,
        query: impl FnOnce(&EffectCtx) -> ToolOutcome,
    ) -> Result<StepResult> {
        match self.begin_step(request)? {
            StepPlan::Act(ctx) => self.finish_step(request.guard, &ctx, act(&ctx)),
            StepPlan::Query(ctx) => self.resolve_step(request.guard, &ctx, query(&ctx)),
            StepPlan::Done(result) => Ok(result),
        }
    }

    /// Ceremony points 1 to 3, 6 and 7 for `request`: derives the key,
    /// checks the ledger and writes the intent durably; says what to do.
    ///
    /// ```
    /// use actum::books::{Outcome, StepId, ToolClass};
    /// use actum::engine::{Engine, EngineOptions, StepPlan, StepRequest, StepResult, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("mail-2")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"2"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let request = StepRequest { guard: &lease.guard, run: &run, step: &StepId::new("send")?,
    ///     tool: ToolSpec { name: "mail.send".into(), class: ToolClass::NotIdempotent },
    ///     args: b"to: ann", rationale: "reply", compensation: None };
    /// let StepPlan::Act(ctx) = engine.begin_step(&request)? else { panic!("a fresh step acts") };
    /// assert_eq!((ctx.key.encode(), ctx.resend), ("mail-2/send/1".to_string(), false));
    /// assert!(engine.durable_lsn() >= ctx.intent_lsn, "the intent is durable");
    /// engine.finish_step(&lease.guard, &ctx, Outcome::Confirmed { receipt: b"m-1".to_vec() })?;
    /// // Begun again (a resumed worker): nothing to call, the receipt is known.
    /// let again = engine.begin_step(&request)?;
    /// assert!(matches!(again, StepPlan::Done(StepResult::Done { replayed: true, .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn begin_step(&self, request: &StepRequest<'_>) -> Result<StepPlan> {
        let plan = self.plan(request.command(), request.guard)?;
        if let StepPlan::Act(ctx) | StepPlan::Query(ctx) = &plan {
            assert_eq!(ctx.key.run(), request.run);
            assert_eq!(ctx.key.step(), request.step);
        }
        Ok(plan)
    }

    /// Ceremony point 5: records the outcome of the act `ctx` planned.
    ///
    /// ```
    /// use actum::books::{EffectStatus, Outcome, StepId, ToolClass};
    /// use actum::engine::{Engine, EngineOptions, StepPlan, StepRequest, StepResult, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("sync-5")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"5"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let request = StepRequest { guard: &lease.guard, run: &run, step: &StepId::new("upload")?,
    ///     tool: ToolSpec { name: "s3.put".into(), class: ToolClass::Queryable },
    ///     args: b"report.pdf", rationale: "archive", compensation: None };
    /// let StepPlan::Act(ctx) = engine.begin_step(&request)? else { panic!("a fresh step acts") };
    /// let busy = Outcome::Failed { retryable: true, reason: "503".into() };
    /// let result = engine.finish_step(&lease.guard, &ctx, busy)?;
    /// assert!(matches!(result, StepResult::Failed { retryable: true, .. }));
    /// // The failure is recorded: the next begin opens attempt 2, under a new key.
    /// let StepPlan::Act(retry) = engine.begin_step(&request)? else { panic!("retryable") };
    /// assert_eq!(retry.key.attempt(), 2);
    /// engine.finish_step(&lease.guard, &retry, Outcome::Confirmed { receipt: b"etag-1".to_vec() })?;
    /// let entry = engine.effect(&retry.key)?.expect("in the ledger");
    /// assert_eq!(entry.status, EffectStatus::Confirmed { receipt: b"etag-1".to_vec() });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn finish_step(
        &self,
        guard: &Guard,
        ctx: &EffectCtx,
        outcome: ToolOutcome,
    ) -> Result<StepResult> {
        self.answer(ctx.finish_command(guard, outcome.clone()))?;
        Ok(result_of(ctx.key.clone(), outcome, false))
    }

    /// Ceremony point 5 and what follows it in **one** WAL record: the
    /// outcome of the act `ctx` planned, then `then` (typically the
    /// checkpoint of the agent's new state, and the run's transition when
    /// the step was its last), committed atomically, so a step costs two
    /// fsyncs (intent; outcome with checkpoint) instead of three or four.
    /// Build `then` from [`EffectCtx::result`], the result this call
    /// returns.
    ///
    /// The outcome is a fact and is always recorded: if a command of
    /// `then` is refused (say a checkpoint under a lease that expired
    /// while the act ran), the outcome is recorded alone, in its own
    /// record, and [`FinishedStep::then`] holds the refusal
    /// ([`Error::BatchRefused`], indexed within `then`). A refusal of the
    /// outcome itself is returned as [`Engine::finish_step`] returns it.
    ///
    /// ```
    /// use actum::books::{
    ///     Answer, Command, CreateRun, Outcome, Part, RunId, RunState, SaveCheckpoint, StepId,
    ///     ToolClass, Transition, WorkerId, digest_of,
    /// };
    /// use actum::engine::{Engine, EngineOptions, StepPlan, StepRequest, StepResult, ToolSpec};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("refund-9")?;
    /// engine.create_run(CreateRun {
    ///     run: run.clone(),
    ///     input_digest: digest_of(b"refund order 9"),
    ///     agent_version: "refund-agent 2.1".into(),
    ///     trace_id: "t-9".into(),
    ///     parent: None,
    ///     input: None,
    /// })?;
    /// let lease = engine.acquire_lease(&run, &WorkerId::new("w1")?, 60_000)?;
    /// let guard = lease.guard.clone();
    /// engine.transition(Transition {
    ///     run: run.clone(), guard: guard.clone(), to: RunState::Running,
    ///     expected_version: None, reason: "claimed".into(),
    /// })?;
    /// let step = StepId::new("refund")?;
    /// let request = StepRequest {
    ///     guard: &guard,
    ///     run: &run,
    ///     step: &step,
    ///     tool: ToolSpec { name: "psp.refund".into(), class: ToolClass::Queryable },
    ///     args: b"order 9, 25 EUR",
    ///     rationale: "the item came back",
    ///     compensation: None,
    /// };
    /// let StepPlan::Act(ctx) = engine.begin_step(&request)? else { unreachable!() };
    /// let outcome = Outcome::Confirmed { receipt: b"re_1".to_vec() };
    /// let fsyncs = engine.wal_stats().fsyncs;
    /// // The outcome, the agent's new state and the run's end: one record.
    /// let then = match ctx.result(&outcome) {
    ///     StepResult::Done { receipt, .. } => vec![
    ///         Command::SaveCheckpoint(SaveCheckpoint {
    ///             run: run.clone(), guard: guard.clone(), schema_version: 1,
    ///             parts: vec![Part::whole("refund", receipt)],
    ///         }),
    ///         Command::Transition(Transition {
    ///             run: run.clone(), guard: guard.clone(), to: RunState::Completed,
    ///             expected_version: None, reason: "refunded".into(),
    ///         }),
    ///     ],
    ///     _ => Vec::new(),
    /// };
    /// let finished = engine.finish_step_with(&guard, &ctx, outcome, then)?;
    /// assert!(matches!(finished.result, StepResult::Done { .. }));
    /// assert!(matches!(finished.then?.as_slice(), [Answer::CheckpointSaved { .. }, Answer::Transitioned { .. }]));
    /// assert_eq!(engine.wal_stats().fsyncs, fsyncs + 1, "one record, one fsync");
    /// assert_eq!(engine.run(&run)?.map(|r| r.state), Some(RunState::Completed));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn finish_step_with(
        &self,
        guard: &Guard,
        ctx: &EffectCtx,
        outcome: ToolOutcome,
        then: Vec<Command>,
    ) -> Result<FinishedStep> {
        let result = ctx.result(&outcome);
        let finish = ctx.finish_command(guard, outcome);
        if then.is_empty() {
            self.answer(finish)?;
            return Ok(FinishedStep {
                result,
                then: Ok(Vec::new()),
            });
        }
        let mut batch = Vec::with_capacity(1 + then.len());
        batch.push(finish.clone());
        batch.extend(then);
        match self.commit_batch(batch) {
            Ok(mut answers) => {
                answers.remove(0);
                Ok(FinishedStep {
                    result,
                    then: Ok(answers),
                })
            }
            Err(Error::BatchRefused { index: 0, cause }) => Err(*cause),
            Err(Error::BatchRefused { index, cause }) => {
                if !self.planted(PlantedBug::LoseOutcomeWithRefusedFollowUps) {
                    self.answer(finish)?;
                }
                Ok(FinishedStep {
                    result,
                    then: Err(Error::BatchRefused {
                        index: index - 1,
                        cause,
                    }),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Records what the query `ctx` planned found: confirmed or failed is
    /// a reconcile; unknown leaves the intent open (`Unknown`).
    ///
    /// ```
    /// use actum::books::{EffectStatus, Outcome, StepId, ToolClass};
    /// use actum::engine::{Engine, EngineOptions, StepPlan, StepRequest, StepResult, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("payout-4")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"4"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let request = StepRequest { guard: &lease.guard, run: &run, step: &StepId::new("transfer")?,
    ///     tool: ToolSpec { name: "bank.transfer".into(), class: ToolClass::Queryable },
    ///     args: b"eur 300", rationale: "payout", compensation: None };
    /// engine.begin_step(&request)?; // the intent; then a crash before the outcome
    /// let StepPlan::Query(ctx) = engine.begin_step(&request)? else { panic!("ask the bank") };
    /// // The bank cannot say yet: nothing is recorded, the intent stays open.
    /// let unsure = engine.resolve_step(&lease.guard, &ctx, Outcome::Unknown { reason: "".into() })?;
    /// assert!(matches!(unsure, StepResult::Unknown { .. }));
    /// assert_eq!(engine.effect(&ctx.key)?.expect("intended").status, EffectStatus::Intended);
    /// // It finds the transfer: recorded, as a reconcile.
    /// let found = Outcome::Confirmed { receipt: b"tr-9".to_vec() };
    /// let done = engine.resolve_step(&lease.guard, &ctx, found)?;
    /// assert!(matches!(done, StepResult::Done { replayed: true, .. }));
    /// assert!(matches!(engine.effect(&ctx.key)?.expect("settled").status, EffectStatus::Confirmed { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve_step(
        &self,
        guard: &Guard,
        ctx: &EffectCtx,
        found: ToolOutcome,
    ) -> Result<StepResult> {
        let Some(cmd) = ctx.reconcile_command(guard, found.clone()) else {
            return Ok(result_of(ctx.key.clone(), found, false));
        };
        self.answer(cmd)?;
        Ok(result_of(ctx.key.clone(), found, true))
    }

    /// Executes a begin command (act or compensation) and turns its answer
    /// into a plan.
    pub(crate) fn plan(&self, cmd: Command, guard: &Guard) -> Result<StepPlan> {
        let (answer, rests_on) = self.commit(cmd)?;
        let crate::books::Answer::Begun(begun) = answer else {
            unexpected(&answer, "begin")
        };
        let ctx = |key: EffectKey, token, resend| EffectCtx {
            key,
            token,
            resend,
            intent_lsn: rests_on,
            act_receipt: None,
        };
        let skip_ledger = self.planted(PlantedBug::SkipLedgerOnResume);
        Ok(match begun {
            Begun::Proceed { key, token } => StepPlan::Act(ctx(key, token, false)),
            Begun::Resend { key, token } => {
                let key = if self.planted(PlantedBug::ResendWithFreshKey) {
                    key.next_attempt()?
                } else {
                    key
                };
                StepPlan::Act(ctx(key, token, true))
            }
            Begun::Replay { key, .. } | Begun::Unknown { key, .. } if skip_ledger => {
                StepPlan::Act(ctx(key, guard.token, true))
            }
            Begun::Replay { key, receipt } => StepPlan::Done(StepResult::Done {
                key,
                receipt,
                replayed: true,
            }),
            Begun::Reconcile { key, token } => StepPlan::Query(ctx(key, token, false)),
            Begun::Unknown { key, reason } => StepPlan::Done(StepResult::Unknown { key, reason }),
            Begun::Failed { key, reason } => StepPlan::Done(StepResult::Failed {
                key,
                retryable: false,
                reason,
            }),
            Begun::Compensated { key } => StepPlan::Done(StepResult::Compensated { key }),
        })
    }
}

/// What [`Engine::finish_step_with`] recorded.
#[derive(Debug)]
pub struct FinishedStep {
    /// The step's result, as [`Engine::finish_step`] returns it.
    pub result: StepResult,
    /// The answers to the follow-up commands, committed in the outcome's
    /// record; or why one was refused, in which case the outcome was
    /// recorded alone and none of them was.
    pub then: Result<Vec<Answer>>,
}

/// The result of a step whose act (or query) reported `outcome`.
pub(crate) fn result_of(key: EffectKey, outcome: Outcome, replayed: bool) -> StepResult {
    match outcome {
        Outcome::Confirmed { receipt } => StepResult::Done {
            key,
            receipt,
            replayed,
        },
        Outcome::Failed { retryable, reason } => StepResult::Failed {
            key,
            retryable,
            reason,
        },
        Outcome::Unknown { reason } => StepResult::Unknown { key, reason },
    }
}

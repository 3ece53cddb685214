//! `step`: the seven-point ceremony around one tool call, in one engine
//! call. The key comes from (run, step, attempt); a committed step returns
//! its stored receipt without acting; the intent (arguments digest,
//! rationale, compensation) is durable before the caller's closure runs;
//! the outcome is recorded after it; an intent found without an outcome is
//! handled by the tool's class.
//!
//! **Invariant:** the act closure runs only after `begin_effect` answered
//! `Proceed` (a fresh, durable intent) or `Resend` (the same key, inside
//! the tool's dedup window); on every other answer it is not called.

use crate::books::{
    BeginEffect, Compensation, EffectKey, FencingToken, FinishEffect, Guard, Outcome, Reconcile,
    RunId, StepId, ToolClass, digest_of,
};
use crate::error::Result;

use super::core::Engine;
use crate::books::Begun;

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

/// What the act closure receives: pass both to the tool, so the outside
/// world can deduplicate (`key`) and fence (`token`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectCtx {
    /// The idempotency key, stable across crashes and resends.
    pub key: EffectKey,
    /// The fencing token of the lease the act runs under.
    pub token: FencingToken,
    /// True if this is a resend of an earlier intent with the same key.
    pub resend: bool,
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
    /// The call's arguments; their digest is recorded with the intent.
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
        /// True if the receipt is the stored one and nothing was called.
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
    /// Nobody knows whether the act happened; it is never re-called.
    /// Resolve it with `Engine::reconcile`.
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

impl Engine {
    /// The whole ceremony around `act` (see the module docs). A queryable
    /// tool's ambiguous intent yields `NeedsReconcile`; use
    /// [`Engine::step_queryable`] to resolve it in the same call.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, StepId, ToolClass, WorkerId, Outcome, digest_of};
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
    /// })?;
    /// let lease = engine.acquire_lease(&run, &WorkerId::new("w1")?, 60_000)?;
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
        self.step_inner(request, act, None::<fn(&EffectCtx) -> ToolOutcome>)
    }

    /// Like [`Engine::step`], with `query` to resolve an ambiguous intent on
    /// a queryable tool: it is asked about the key (never acts); a
    /// confirmed or failed answer is recorded as a reconcile, an unknown one
    /// leaves the intent open and yields `Unknown`.
    pub fn step_queryable(
        &self,
        request: &StepRequest<'_>,
        act: impl FnOnce(&EffectCtx) -> ToolOutcome,
        query: impl FnOnce(&EffectCtx) -> ToolOutcome,
    ) -> Result<StepResult> {
        self.step_inner(request, act, Some(query))
    }

    fn step_inner(
        &self,
        request: &StepRequest<'_>,
        act: impl FnOnce(&EffectCtx) -> ToolOutcome,
        query: Option<impl FnOnce(&EffectCtx) -> ToolOutcome>,
    ) -> Result<StepResult> {
        let begun = self.begin_effect(BeginEffect {
            run: request.run.clone(),
            step: request.step.clone(),
            guard: request.guard.clone(),
            tool: request.tool.name.clone(),
            tool_class: request.tool.class,
            args_digest: digest_of(request.args),
            rationale: request.rationale.to_string(),
            compensation: request.compensation.clone(),
        })?;
        let (key, token, resend) = match begun {
            Begun::Proceed { key, token } => (key, token, false),
            Begun::Resend { key, token } => (key, token, true),
            Begun::Replay { key, receipt } => {
                return Ok(StepResult::Done {
                    key,
                    receipt,
                    replayed: true,
                });
            }
            Begun::Reconcile { key, token } => {
                return match query {
                    Some(query) => self.resolve_by_query(request.guard, key, token, query),
                    None => Ok(StepResult::NeedsReconcile { key, token }),
                };
            }
            Begun::Unknown { key, reason } => return Ok(StepResult::Unknown { key, reason }),
            Begun::Compensated { key } => return Ok(StepResult::Compensated { key }),
        };
        assert_eq!(key.run(), request.run);
        assert_eq!(key.step(), request.step);
        let ctx = EffectCtx {
            key: key.clone(),
            token,
            resend,
        };
        let outcome = act(&ctx);
        self.finish_effect(FinishEffect {
            key: key.clone(),
            guard: request.guard.clone(),
            outcome: outcome.clone(),
        })?;
        Ok(result_of(key, outcome, false))
    }

    fn resolve_by_query(
        &self,
        guard: &Guard,
        key: EffectKey,
        token: FencingToken,
        query: impl FnOnce(&EffectCtx) -> ToolOutcome,
    ) -> Result<StepResult> {
        let ctx = EffectCtx {
            key: key.clone(),
            token,
            resend: false,
        };
        let found = query(&ctx);
        if let Outcome::Unknown { reason } = found {
            return Ok(StepResult::Unknown { key, reason });
        }
        self.reconcile(Reconcile {
            key: key.clone(),
            guard: guard.clone(),
            outcome: found.clone(),
            note: "resolved by the tool's query on resume".to_string(),
        })?;
        Ok(result_of(key, found, true))
    }
}

fn result_of(key: EffectKey, outcome: Outcome, replayed: bool) -> StepResult {
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

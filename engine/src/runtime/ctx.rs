//! [`RunCtx`]: what a handler calls. Every call first checks the run's
//! journal (the audit, read once when the handler starts): the handler's
//! n-th call must be the journal's n-th (a step, a model call, a wait), so a
//! handler changed under a run in flight is caught before it acts; calls
//! past the journal's end are new work. Each call then asks the engine,
//! which answers from the books what is already done.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::books::{
    AuditEntry, AuditWhat, Charge, Compensation, Cost, EffectKey, EffectKind, EffectStatus,
    FencingToken, Guard, Join, Outcome, Part, RecordDecision, Reserved, RunId, RunState,
    SaveCheckpoint, StepId, ToolClass, Usage, WaitBook, WaitFor, WaitStatus, children_run_ids,
    digest_of,
};
use crate::engine::{ChildSpec, EffectCtx, StepPlan, StepRequest, StepResult, ToolSpec};
use crate::error::Error;
use crate::planted::PlantedBug;

use super::Shared;
use super::fail::{Divergence, Fail, Stop};
use super::lease::LeaseWatch;

/// The schema version of the checkpoints the runtime writes: a handler's
/// state (part [`STATE_PART`]) and a run's output (part [`OUTPUT_PART`]).
pub const RUNTIME_SCHEMA: u32 = 1;
/// The part a [`RunCtx::checkpoint`] is saved as.
pub const STATE_PART: &str = "state";
/// The part a completed run's output is saved as (its last checkpoint).
pub const OUTPUT_PART: &str = "output";

/// How one child of a fan-out ([`RunCtx::children`]) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildOutput {
    /// The child run (`<run>:<step>.<i>`).
    pub run: RunId,
    /// Its position among the calls, from 0.
    pub index: usize,
    /// Its terminal state.
    pub state: RunState,
    /// Its output if it completed (empty if it saved none); `None` if it
    /// failed or was cancelled.
    pub output: Option<Vec<u8>>,
}

/// A tool a step calls: its name, how it treats duplicates, how to ask it
/// about an ambiguous request (a queryable tool must say), and how many
/// attempts a retryable failure gets.
#[derive(Clone)]
pub struct Tool {
    spec: ToolSpec,
    pub(super) query: Option<Arc<QueryFn>>,
    attempts: u32,
    backoff: Backoff,
    hold: Cost,
    fencing: Fencing,
}

/// Whether a tool refuses a request under an old fencing token, and if it
/// does not, how long a request it was sent can still arrive and take
/// effect (docs/API.md, "Tools that ignore fencing tokens").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fencing {
    /// The tool refuses a request whose token is older than one it has
    /// seen for the run (the default): a successor's query, under a newer
    /// token, also fences its predecessor's request still on its way.
    #[default]
    Checks,
    /// The tool ignores tokens (most real APIs do), so a predecessor's
    /// request still on its way takes effect after a successor took over.
    /// Before a query about an ambiguous act, the step waits on a durable
    /// timer until the request can no longer arrive: the act's deadline
    /// ([`Call::deadline_ms`]) plus `request_lifetime_ms`. With no lifetime
    /// (`None`) no wait makes a query's "not found" final: the step's
    /// outcome is unknown and the run is paused for a person.
    Ignores {
        /// How long after it is sent a request can still arrive and take
        /// effect, ms (the service's queue, the client's retries, the
        /// network): `None` if no bound is known.
        request_lifetime_ms: Option<u64>,
    },
}

/// How long a step waits before it tries a retryable failure again: a
/// durable timer (the run parks and holds no worker), the first one
/// `first_ms`, each next one twice as long up to `max_ms`, each drawn
/// between half and all of that from the run, step and attempt (seeded
/// jitter: the same on every replay, different across runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first wait's ceiling, ms; 0 retries at once.
    pub first_ms: u64,
    /// No wait is longer, ms.
    pub max_ms: u64,
}

impl Default for Backoff {
    /// 1 s, doubling up to a minute.
    fn default() -> Backoff {
        Backoff {
            first_ms: 1_000,
            max_ms: 60_000,
        }
    }
}

impl Backoff {
    /// The wait before the attempt after `attempt` of `step` in `run`, ms.
    pub fn delay_ms(&self, run: &RunId, step: &str, attempt: u32) -> u64 {
        if self.first_ms == 0 {
            return 0;
        }
        let doublings = attempt.saturating_sub(1).min(63);
        let ceiling = self
            .first_ms
            .saturating_mul(1u64 << doublings)
            .min(self.max_ms.max(self.first_ms));
        let seed = digest_of(format!("{run}/{step}/{attempt}").as_bytes());
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&seed.0[..8]);
        let half = ceiling / 2;
        half + u64::from_le_bytes(bytes) % (ceiling - half + 1)
    }
}

/// A queryable tool's query: what happened to the request `call.key`
/// names (never an act).
pub type QueryFn = dyn Fn(&Call<'_>) -> Outcome + Send + Sync;

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("spec", &self.spec)
            .field("query", &self.query.is_some())
            .field("attempts", &self.attempts)
            .field("backoff", &self.backoff)
            .field("hold", &self.hold)
            .field("fencing", &self.fencing)
            .finish()
    }
}

impl Tool {
    /// A tool named `name` of `class`, one attempt. A
    /// [`ToolClass::Queryable`] tool needs [`Tool::with_query`].
    pub fn new(name: impl Into<String>, class: ToolClass) -> Tool {
        Tool {
            spec: ToolSpec {
                name: name.into(),
                class,
            },
            query: None,
            attempts: 1,
            backoff: Backoff::default(),
            hold: Cost::tool_call(0),
            fencing: Fencing::Checks,
        }
    }

    /// The tool ignores fencing tokens; a request it was sent can still
    /// arrive and take effect until `request_lifetime_ms` after it left
    /// (`None`: no bound is known). Its client must check
    /// [`Call::deadline_ms`] right before it sends (a client that stalls
    /// after the check sends later than the runtime can bound). Before the
    /// step queries about an ambiguous act, it waits out the act's deadline
    /// plus the lifetime on a durable timer (the run parks, holding no
    /// worker); with no lifetime, the outcome is unknown and the run is
    /// paused for a person. See [`Fencing::Ignores`].
    pub fn ignores_tokens(mut self, request_lifetime_ms: Option<u64>) -> Tool {
        self.fencing = Fencing::Ignores {
            request_lifetime_ms,
        };
        self
    }

    /// Whether the tool checks fencing tokens.
    pub fn fencing(&self) -> Fencing {
        self.fencing
    }

    /// How to ask the tool about an ambiguous request.
    pub fn with_query(
        mut self,
        query: impl Fn(&Call<'_>) -> Outcome + Send + Sync + 'static,
    ) -> Tool {
        self.query = Some(Arc::new(query));
        self
    }

    /// Up to `attempts` attempts (at least one) when the tool answers a
    /// retryable failure; each is a new key (`run/step/n`).
    pub fn attempts(mut self, attempts: u32) -> Tool {
        self.attempts = attempts.max(1);
        self
    }

    /// How long to wait between attempts (default: [`Backoff::default`]);
    /// `backoff(0, 0)` retries at once.
    pub fn backoff(mut self, first_ms: u64, max_ms: u64) -> Tool {
        self.backoff = Backoff { first_ms, max_ms };
        self
    }

    /// What one call of the tool holds of a run's budget before it is
    /// made, and is charged once it is confirmed (default: one tool call,
    /// no money). Only runs with a budget (or an ancestor with one) reserve.
    pub fn hold(mut self, cost: Cost) -> Tool {
        self.hold = cost;
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }
}

/// What a step's act (or a query) receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call<'a> {
    /// The attempt's key.
    pub key: &'a EffectKey,
    /// The idempotency key to send: `key.tool_key()`, at most 255 bytes
    /// (`run/step/attempt`, or its digest form when names are long).
    pub idempotency_key: String,
    /// The fencing token to send, for tools that check it.
    pub token: FencingToken,
    /// True if this resends an earlier attempt's request (same key).
    pub resend: bool,
    /// The last instant (engine clock, ms) the request may be sent: the
    /// lease's expiry less a margin. The runtime checks it before calling
    /// the act; a tool client that can stall should check it again.
    pub deadline_ms: u64,
}

/// When a wait ends by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// At this instant, ms since the epoch (engine clock).
    At(u64),
    /// This long after the wait was first opened. Stable: a resumed handler
    /// asking again gets the deadline recorded then, not a new one.
    In(u64),
}

/// How an approval ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Approval {
    /// Approved by `approver`.
    Approved {
        /// Who.
        approver: String,
        /// Their note.
        note: String,
    },
    /// Rejected by `approver`.
    Rejected {
        /// Who.
        approver: String,
        /// Their note.
        note: String,
    },
    /// Nobody decided before the deadline.
    Expired,
}

/// One call of a handler as the run's journal records it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Journaled {
    Step(StepId),
    Decision(u64),
    /// A wait, by step and kind ([`WaitFor::kind`]): a step may wait once
    /// for each kind (an approval, then its asynchronous act's reply).
    Wait(StepId, &'static str),
}

impl std::fmt::Display for Journaled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Journaled::Step(step) => write!(f, "step {step}"),
            Journaled::Decision(position) => write!(f, "model call {position}"),
            Journaled::Wait(step, "reply") => write!(f, "reply wait {step}"),
            Journaled::Wait(step, _) => write!(f, "wait {step}"),
        }
    }
}

/// The calls a run's audit records, in order: each step's first intent,
/// each model call, each wait opened.
/// What an operator's retries and forks did to a run, from its audit:
/// the attempt each reopened step failed at, and how many of its
/// checkpoint versions were saved by them rather than by its handler.
pub(crate) fn retries_of(audit: &[AuditEntry]) -> (BTreeMap<StepId, u32>, u64) {
    let mut reopened = BTreeMap::new();
    let mut restored = 0;
    for entry in audit {
        match &entry.what {
            AuditWhat::Retried {
                reopened: keys,
                restored: version,
                ..
            } => {
                for key in keys {
                    reopened.insert(key.step().clone(), key.attempt());
                }
                restored += u64::from(version.is_some());
            }
            AuditWhat::Forked { checkpoint, .. } => restored += u64::from(checkpoint.is_some()),
            _ => {}
        }
    }
    (reopened, restored)
}

pub(crate) fn journal_of(audit: &[AuditEntry]) -> Vec<Journaled> {
    audit
        .iter()
        .filter_map(|entry| match &entry.what {
            AuditWhat::Intended { key, .. }
                if key.kind() == EffectKind::Act && key.attempt() == 1 =>
            {
                Some(Journaled::Step(key.step().clone()))
            }
            AuditWhat::DecisionRecorded { position, .. } => Some(Journaled::Decision(*position)),
            AuditWhat::WaitOpened { step, wait_for, .. } => {
                Some(Journaled::Wait(step.clone(), wait_for.kind()))
            }
            _ => None,
        })
        .collect()
}

/// What a handler works with: its run, its input, and the calls that make
/// the run durable. See the module docs and docs/API.md, "The runtime".
pub struct RunCtx<'r> {
    pub(crate) shared: &'r Shared,
    pub(crate) run: RunId,
    pub(crate) agent: String,
    pub(crate) trace_id: String,
    pub(crate) watch: Arc<LeaseWatch>,
    pub(crate) input: Vec<u8>,
    pub(crate) journal: Vec<Journaled>,
    pub(crate) calls: u64,
    pub(crate) decisions: u64,
    pub(crate) checkpoints: u64,
    pub(crate) saved_checkpoints: u64,
    pub(crate) pending: Option<Vec<u8>>,
    pub(crate) used: BTreeSet<Journaled>,
    /// The run or an ancestor has budget limits: calls reserve and settle.
    pub(crate) budgeted: bool,
    /// The attempt an operator's retry reopened, per step (the latest
    /// retry's): the step's attempts count from it.
    pub(crate) reopened: BTreeMap<StepId, u32>,
}

impl std::fmt::Debug for RunCtx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunCtx")
            .field("run", &self.run)
            .field("agent", &self.agent)
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

impl RunCtx<'_> {
    /// The run.
    pub fn run_id(&self) -> &RunId {
        &self.run
    }

    /// The input the run was started with.
    pub fn input(&self) -> &[u8] {
        &self.input
    }

    /// The fencing token of the lease the handler runs under.
    pub fn token(&self) -> FencingToken {
        self.watch.guard.token
    }

    /// True while the handler's calls are answered from the journal (a
    /// resumed run that has not yet reached new work).
    pub fn replaying(&self) -> bool {
        self.calls < self.journal.len() as u64
    }

    /// A model call, journaled: the first time `model` is called and its
    /// output recorded at this position; on every resume the recorded output
    /// is returned and the model is not asked again. `name` and `input`
    /// (the prompt, tools, parameters) must be the same on resume, else the
    /// run diverged.
    pub fn decide(
        &mut self,
        name: &str,
        input: &[u8],
        model: impl FnOnce() -> Result<Vec<u8>, Fail>,
    ) -> Result<Vec<u8>, Fail> {
        self.decide_with_usage(name, input, || model().map(|out| (out, Usage::default())))
    }

    /// [`decide`](RunCtx::decide), recording what the call cost.
    pub fn decide_with_usage(
        &mut self,
        name: &str,
        input: &[u8],
        model: impl FnOnce() -> Result<(Vec<u8>, Usage), Fail>,
    ) -> Result<Vec<u8>, Fail> {
        let position = self.decisions;
        let journaled = self.enter(Journaled::Decision(position))?;
        self.decisions += 1;
        let input_digest = digest_of(&[name.as_bytes(), &[0], input].concat());
        let engine = &self.shared.engine;
        let at = || format!("model call {name}");
        // Only a journaled call has a recorded output to read (and a read
        // waits for durability): past the journal's end the call is new.
        if journaled {
            match engine.replay_decision(&self.run, position, &input_digest) {
                Ok(Some(record)) => return Ok(record.output),
                Ok(None) => {}
                Err(e) => return Err(self.engine_stop(e, &at())),
            }
        }
        self.flush()?;
        let charge = Charge::Decision { position };
        if self.budgeted {
            let hold = self.shared.options.decision_hold;
            if let Reserved::Replayed { .. } = self.reserve(charge.clone(), hold, &at())? {
                // Recorded before (a journal cut short): never asked again.
                let recorded = engine
                    .read(|books| Ok(books.decision_at(&self.run, position)))
                    .map_err(|e| self.engine_stop(e, &at()))?;
                if let Some(record) = recorded.filter(|r| r.input_digest == input_digest) {
                    return Ok(record.output);
                }
            }
        }
        let (output, usage) = match model() {
            Ok(answered) => answered,
            Err(failed) => {
                // Nothing was recorded: the position is not spent, so the
                // handler may ask again (or call something else) there.
                self.calls -= 1;
                self.decisions -= 1;
                return Err(failed);
            }
        };
        self.live(&at())?;
        let recorded = engine.record_decision(RecordDecision {
            run: self.run.clone(),
            guard: self.watch.guard.clone(),
            position,
            input_digest,
            output: output.clone(),
            rationale: name.to_string(),
            usage,
        });
        let output = match recorded {
            Ok(crate::engine::Recorded::Replay(record)) => return Ok(record.output),
            Ok(crate::engine::Recorded::New { .. }) => output,
            Err(e) => return Err(self.engine_stop(e, &at())),
        };
        if self.budgeted {
            let actual = Cost {
                tokens_in: usage.tokens_in,
                tokens_out: usage.tokens_out,
                cost_micros: usage.cost_micros,
                tool_calls: 0,
            };
            self.settle(charge, actual, &at())?;
        }
        Ok(output)
    }

    /// Holds `amount` of the run's budget for `charge`; a budget with no
    /// room stops the handler (the engine paused the run).
    fn reserve(&self, charge: Charge, amount: Cost, at: &str) -> Result<Reserved, Fail> {
        let engine = &self.shared.engine;
        let reserved = engine
            .reserve(&self.run, &self.watch.guard, charge, amount)
            .map_err(|e| self.engine_stop(e, at))?;
        match reserved {
            Reserved::Exhausted { reason } => Err(Stop::BudgetExhausted { reason }.into()),
            other => Ok(other),
        }
    }

    /// Charges what the call cost and lets the rest of its hold go.
    fn settle(&self, charge: Charge, actual: Cost, at: &str) -> Result<(), Fail> {
        self.shared
            .engine
            .settle(&self.run, &self.watch.guard, charge, actual)
            .map(|_| ())
            .map_err(|e| self.engine_stop(e, at))
    }

    /// A step: `act` is called at most once per attempt, only after the
    /// intent is durable, and never again once its outcome is recorded
    /// (a resumed handler gets the stored receipt). Returns the receipt.
    /// A failure for good fails the run (`Fail::Failed`, or handle it); an
    /// ambiguous outcome is resent, queried or left to an operator by the
    /// tool's class.
    pub fn step(
        &mut self,
        name: &str,
        tool: &Tool,
        args: &[u8],
        act: impl FnMut(&Call<'_>) -> Outcome,
    ) -> Result<Vec<u8>, Fail> {
        self.step_inner(name, tool, args, None, act)
    }

    /// A step that `undo` compensates if the run fails or is cancelled
    /// later: the runtime's saga calls the undo handler registered for
    /// `undo.tool` ([`Runtime::register_undo`](super::Runtime::register_undo)).
    pub fn step_with_undo(
        &mut self,
        name: &str,
        tool: &Tool,
        args: &[u8],
        undo: Compensation,
        act: impl FnMut(&Call<'_>) -> Outcome,
    ) -> Result<Vec<u8>, Fail> {
        self.step_inner(name, tool, args, Some(undo), act)
    }

    /// A step whose tool answers later (an asynchronous tool: a screening
    /// service, a payment provider): `send` sends the request, at most once
    /// per attempt and only after the intent is durable, as
    /// [`step`](RunCtx::step)'s act; then the run parks, holding no
    /// worker, until the tool's reply arrives through
    /// [`Engine::deliver_reply`](crate::Engine::deliver_reply) for the
    /// attempt's key ([`Call::key`]), or until `within` passes. Returns the
    /// reply's receipt.
    ///
    /// `send` answers what the tool said when it was sent the request:
    /// `Unknown` if it took it (or the acknowledgement was lost): the step
    /// waits for the reply; `Confirmed` or `Failed` if it answered at once
    /// (a request it refused is retried as [`Tool::attempts`] and
    /// [`Tool::backoff`] say, as a step's). A reply that failed fails the
    /// step for good, retryable or not: a step waits for one reply (retry
    /// with a step of another name).
    ///
    /// Once the step waited for its reply, the books say the request was
    /// sent: a resumed handler never sends it again, and answers a reply
    /// delivered meanwhile (or before the wait was opened) from the ledger.
    /// A crash between the send and the wait leaves only the intent: the
    /// tool's class decides, as for an ambiguous act, except that nothing
    /// is resent that the class forbids: an idempotent tool is resent the
    /// same key, a queryable one asked (a query that cannot tell waits for
    /// the reply), and a tool that is neither is not sent again: the step
    /// waits for the reply the request, if it left, will bring. If `within`
    /// passes with no reply, the outcome is unknown and the run is paused
    /// for a person ([`Stop::OutcomeUnknown`]): a reply that comes later,
    /// or the person's, settles it, and the resumed handler answers it.
    ///
    /// ```
    /// use actum::books::{Outcome, RunState, ToolClass};
    /// use actum::runtime::{Deadline, Driven, Runtime, Tool};
    /// use actum::{Engine, EngineOptions};
    /// use std::sync::{Arc, Mutex};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Arc::new(Engine::open(dir.path(), EngineOptions::default())?);
    /// let rt = Runtime::new(Arc::clone(&engine));
    /// let sent = Arc::new(Mutex::new(Vec::new()));
    /// let outbox = Arc::clone(&sent);
    /// rt.register("onboard", "1", move |ctx| {
    ///     let kyc = Tool::new("kyc.screen", ToolClass::Idempotent { dedup_window_ms: 86_400_000 });
    ///     let verdict = ctx.step_async("screen", &kyc, b"acme gmbh",
    ///         Some(Deadline::In(3_600_000)), |call| {
    ///             outbox.lock().unwrap().push(call.key.clone());
    ///             Outcome::Unknown { reason: "accepted".into() } // 202: the verdict comes later
    ///         })?;
    ///     Ok(verdict)
    /// })?;
    /// let run = rt.start("onboard", "acme", b"acme gmbh")?.run;
    /// let worker = actum::books::WorkerId::new("w1")?;
    /// assert!(matches!(rt.work_once(&worker)?, Some((_, Driven::Parked(_)))));
    /// assert_eq!(engine.run(&run)?.map(|r| r.state), Some(RunState::WaitingTool));
    /// // The screening service's webhook: the run wakes, and the request is not sent again.
    /// let key = sent.lock().unwrap()[0].clone();
    /// engine.deliver_reply(&key, Outcome::Confirmed { receipt: b"clear".to_vec() }, "kyc-webhook")?;
    /// assert!(matches!(rt.work_once(&worker)?, Some((_, Driven::Completed))));
    /// assert_eq!(rt.output(&run)?, Some(b"clear".to_vec()));
    /// assert_eq!(sent.lock().unwrap().len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn step_async(
        &mut self,
        name: &str,
        tool: &Tool,
        args: &[u8],
        within: Option<Deadline>,
        mut send: impl FnMut(&Call<'_>) -> Outcome,
    ) -> Result<Vec<u8>, Fail> {
        let (step, journaled) = self.enter_step(name, tool)?;
        let rationale = format!("step {name} of {}", self.agent);
        let at = || format!("step {name}");
        let mut ambiguous = 0;
        let mut sent: Option<(EffectKey, u64)> = None;
        if journaled {
            // The step waited for a reply before: the request was sent, and
            // its wait is next in the journal, after the retries before it.
            let awaited = self.awaited_reply(&step, &at())?;
            self.resume_retries(name, &step, tool, awaited.is_some())?;
            if let Some(key) = awaited {
                if self.shared.engine.planted(PlantedBug::ResendAwaitedRequest) {
                    let call = Call {
                        key: &key,
                        idempotency_key: key.tool_key(),
                        token: self.watch.guard.token,
                        resend: true,
                        deadline_ms: self.watch.act_deadline_ms(),
                    };
                    let _thrown_away = send(&call);
                }
                self.await_reply(name, tool, &key, within)?;
            }
        }
        loop {
            self.live(&at())?;
            let guard = self.watch.guard.clone();
            let request = StepRequest {
                guard: &guard,
                run: &self.run,
                step: &step,
                tool: tool.spec.clone(),
                args,
                rationale: &rationale,
                compensation: None,
            };
            let engine = &self.shared.engine;
            let (held, plan) = self.begin_attempt(&request, tool, &at())?;
            let result = match plan {
                // Neither resent nor asked: the request, if it left, brings
                // its reply.
                StepPlan::Done(StepResult::Unknown { key, .. })
                    if !self.used.contains(&Journaled::Wait(step.clone(), "reply")) =>
                {
                    self.await_reply(name, tool, &key, within)?;
                    continue;
                }
                StepPlan::Done(result) => result,
                StepPlan::Act(ctx) => {
                    let deadline_ms = self.send_deadline(&at())?;
                    let call = Call {
                        key: &ctx.key,
                        idempotency_key: ctx.key.tool_key(),
                        token: ctx.token,
                        resend: ctx.resend,
                        deadline_ms,
                    };
                    sent = Some((ctx.key.clone(), deadline_ms));
                    let outcome = send(&call);
                    if let Outcome::Unknown { .. } = outcome {
                        // Taken (or the acknowledgement lost): the reply
                        // settles it.
                        self.await_reply(name, tool, &ctx.key, within)?;
                        continue;
                    }
                    self.finish_act(&guard, &ctx, outcome, &at())?
                }
                StepPlan::Query(ctx) => {
                    let found = self.ask_open(name, tool, &ctx, sent.as_ref())?;
                    if let Outcome::Unknown { .. } = found {
                        // The tool cannot say yet: its reply will.
                        self.await_reply(name, tool, &ctx.key, within)?;
                        continue;
                    }
                    engine
                        .resolve_step(&guard, &ctx, found)
                        .map_err(|e| self.engine_stop(e, &at()))?
                }
            };
            match self.step_result(name, tool, &step, result, held)? {
                Next::Done(receipt) => return Ok(receipt),
                Next::Retried(_) => {}
                Next::Unknown { key, reason } => {
                    ambiguous += 1;
                    if ambiguous > tool.attempts {
                        return Err(Stop::OutcomeUnknown { key, reason }.into());
                    }
                }
            }
        }
    }

    /// Enters the step `name` through `tool` in the journal: its id, and
    /// whether the journal holds it (a resumed step). A queryable tool with
    /// no query is refused, as no ambiguous act of it could be settled.
    fn enter_step(&mut self, name: &str, tool: &Tool) -> Result<(StepId, bool), Fail> {
        let step = self.step_id(name)?;
        let journaled = self.enter(Journaled::Step(step.clone()))?;
        if matches!(tool.spec.class, ToolClass::Queryable) && tool.query.is_none() {
            return Err(Fail::failed(format!(
                "tool {} is queryable but has no query (Tool::with_query)",
                tool.spec.name
            )));
        }
        Ok((step, journaled))
    }

    /// Begins an attempt of `request`: on a budgeted run, first reserves
    /// the tool's hold (the charge is held only if granted: a replayed call
    /// answers `Replayed`, and nothing is held), then asks the engine what
    /// to do.
    fn begin_attempt(
        &self,
        request: &StepRequest<'_>,
        tool: &Tool,
        at: &str,
    ) -> Result<(Option<Charge>, StepPlan), Fail> {
        let charge = Charge::Effect {
            step: request.step.clone(),
        };
        let held = self.budgeted
            && matches!(
                self.reserve(charge.clone(), tool.hold, at)?,
                Reserved::Granted { .. }
            );
        let plan = self
            .shared
            .engine
            .begin_step(request)
            .map_err(|e| self.engine_stop(e, at))?;
        Ok((held.then_some(charge), plan))
    }

    /// What a step's `result` means for its loop, the same for
    /// [`RunCtx::step`] and [`RunCtx::step_async`]: its receipt (settling
    /// the budget `held` for it), a retry after the backoff of a retryable
    /// failure with attempts left, an ambiguous outcome for the caller to
    /// weigh, or an error that ends the step.
    fn step_result(
        &mut self,
        name: &str,
        tool: &Tool,
        step: &StepId,
        result: StepResult,
        held: Option<Charge>,
    ) -> Result<Next, Fail> {
        let at = || format!("step {name}");
        match result {
            StepResult::Done { receipt, .. } => {
                if let Some(charge) = held {
                    self.settle(charge, tool.hold, &at())?;
                }
                Ok(Next::Done(receipt))
            }
            StepResult::Failed {
                key,
                retryable: true,
                ..
            } if self.attempts_used(step, key.attempt()) < tool.attempts => {
                self.backoff(name, tool, key.attempt())?;
                Ok(Next::Retried(key))
            }
            StepResult::Failed { key, reason, .. } => {
                Err(failed_for_good(name, tool, key.attempt(), &reason))
            }
            StepResult::Unknown { key, reason } => Ok(Next::Unknown { key, reason }),
            StepResult::NeedsReconcile { key, .. } => {
                let reason = "the tool was not asked".to_string();
                Err(Stop::OutcomeUnknown { key, reason }.into())
            }
            StepResult::Compensated { key } => Err(Fail::failed(format!(
                "step {name} was undone by its compensation ({key})"
            ))),
        }
    }

    /// The deadline a request sent now is sent by: the lease's, once it is
    /// renewed. A lost lease, or a deadline already past, stops the handler
    /// before it sends: too late to send, the intent stays open for the
    /// successor, who resends, queries or asks a person.
    fn send_deadline(&self, at: &str) -> Result<u64, Fail> {
        let engine = &self.shared.engine;
        if !self.watch.keep(engine) {
            return Err(Stop::LeaseLost { at: at.to_string() }.into());
        }
        let deadline_ms = self.watch.act_deadline_ms();
        if engine.clock().now_ms() > deadline_ms {
            return Err(Stop::LeaseLost { at: at.to_string() }.into());
        }
        Ok(deadline_ms)
    }

    /// Records the outcome of the act `ctx` planned, with the pending
    /// checkpoint in the same batch, and answers the step's result. The
    /// checkpoint counts as saved only if its commands were applied: a
    /// refused follow-up leaves it pending, and the outcome recorded.
    fn finish_act(
        &mut self,
        guard: &Guard,
        ctx: &EffectCtx,
        outcome: Outcome,
        at: &str,
    ) -> Result<StepResult, Fail> {
        let then = self.pending_commands();
        let finished = self
            .shared
            .engine
            .finish_step_with(guard, ctx, outcome, then)
            .map_err(|e| self.engine_stop(e, at))?;
        if finished.then.is_ok() && self.pending.take().is_some() {
            self.saved_checkpoints += 1;
        }
        Ok(finished.result)
    }

    /// Asks the queryable `tool` what became of the open act `ctx`, once a
    /// request that may still be on its way can no longer arrive (`sent`:
    /// the attempt this handler sent, and the deadline it sent it by).
    fn ask_open(
        &mut self,
        name: &str,
        tool: &Tool,
        ctx: &EffectCtx,
        sent: Option<&(EffectKey, u64)>,
    ) -> Result<Outcome, Fail> {
        let Some(query) = &tool.query else {
            unreachable!("a queryable tool without a query was refused above")
        };
        let sent_by = sent
            .filter(|(key, _)| *key == ctx.key)
            .map(|(_, deadline)| *deadline);
        self.outlive_request(name, tool, &ctx.key, sent_by)?;
        let call = Call {
            key: &ctx.key,
            idempotency_key: ctx.key.tool_key(),
            token: ctx.token,
            resend: false,
            deadline_ms: self.watch.act_deadline_ms(),
        };
        Ok(query(&call))
    }

    /// The key whose reply `step` waited for, if it waited for one: the
    /// books' word that its request was sent.
    fn awaited_reply(&self, step: &StepId, at: &str) -> Result<Option<EffectKey>, Fail> {
        let book = self
            .shared
            .engine
            .waits(&self.run)
            .map_err(|e| self.engine_stop(e, at))?;
        Ok(book.waits.iter().find_map(|w| match &w.wait_for {
            WaitFor::Reply { key } if w.step == *step => Some(key.clone()),
            _ => None,
        }))
    }

    /// Waits for the reply to `key`, sent by step `name` (parks the run
    /// while none is in), and returns once the ledger holds it confirmed:
    /// the step's next begin answers its receipt. A failed reply fails the
    /// step for good (a step waits for one reply); none by the deadline
    /// leaves the outcome unknown, for a person.
    fn await_reply(
        &mut self,
        name: &str,
        tool: &Tool,
        key: &EffectKey,
        within: Option<Deadline>,
    ) -> Result<(), Fail> {
        let reason = format!(
            "step {name} waits for the reply of {} to {key}",
            tool.spec.name
        );
        let wait_for = WaitFor::Reply { key: key.clone() };
        let status = self.wait(name, wait_for, within, &reason)?;
        // The ledger has the last word: a reply may have come after the
        // deadline, or a person settled it.
        let at = || format!("step {name}");
        let entry = self
            .shared
            .engine
            .effect(key)
            .map_err(|e| self.engine_stop(e, &at()))?;
        match entry.map(|e| e.status) {
            Some(EffectStatus::Confirmed { .. } | EffectStatus::ConfirmedStored { .. }) => Ok(()),
            Some(EffectStatus::Failed { reason, .. }) => Err(Fail::failed(format!(
                "step {name} ({}) failed for good at attempt {}: its reply says {reason} (a \
                 step waits for one reply)",
                tool.spec.name,
                key.attempt()
            ))),
            Some(EffectStatus::Compensated { .. } | EffectStatus::CompensatedStored { .. }) => {
                Err(Fail::failed(format!(
                    "step {name} was undone by its compensation ({key})"
                )))
            }
            Some(EffectStatus::Intended | EffectStatus::Unknown { .. }) | None => match status {
                WaitStatus::Elapsed => Err(Stop::OutcomeUnknown {
                    key: key.clone(),
                    reason: format!("no reply from {} before the deadline", tool.spec.name),
                }
                .into()),
                other => Err(unexpected_wait(name, &other)),
            },
        }
    }

    fn step_inner(
        &mut self,
        name: &str,
        tool: &Tool,
        args: &[u8],
        undo: Option<Compensation>,
        mut act: impl FnMut(&Call<'_>) -> Outcome,
    ) -> Result<Vec<u8>, Fail> {
        let (step, journaled) = self.enter_step(name, tool)?;
        let rationale = format!("step {name} of {}", self.agent);
        let at = || format!("step {name}");
        let mut ambiguous = 0;
        let mut failed_key: Option<EffectKey> = None;
        // The attempt this handler sent, and the deadline it sent it by.
        let mut sent: Option<(EffectKey, u64)> = None;
        if journaled {
            failed_key = self.resume_retries(name, &step, tool, false)?;
        }
        loop {
            self.live(&at())?;
            let guard = self.watch.guard.clone();
            let request = StepRequest {
                guard: &guard,
                run: &self.run,
                step: &step,
                tool: tool.spec.clone(),
                args,
                rationale: &rationale,
                compensation: undo.clone(),
            };
            let engine = &self.shared.engine;
            let (held, plan) = self.begin_attempt(&request, tool, &at())?;
            let result = match plan {
                StepPlan::Done(result) => {
                    let resends = engine.planted(PlantedBug::ResendConfirmedStep)
                        || (engine.planted(PlantedBug::RetryResendsConfirmed)
                            && !self.reopened.is_empty());
                    if let StepResult::Done { key, .. } = &result
                        && resends
                    {
                        let call = Call {
                            key,
                            idempotency_key: key.tool_key(),
                            token: guard.token,
                            resend: true,
                            deadline_ms: self.watch.act_deadline_ms(),
                        };
                        let _thrown_away = act(&call);
                    }
                    result
                }
                StepPlan::Act(ctx) => {
                    let deadline_ms = self.send_deadline(&at())?;
                    let sent_key = match &failed_key {
                        Some(failed) if engine.planted(PlantedBug::RetryReusesFailedKey) => {
                            failed.clone()
                        }
                        _ => ctx.key.clone(),
                    };
                    let call = Call {
                        key: &sent_key,
                        idempotency_key: sent_key.tool_key(),
                        token: ctx.token,
                        resend: ctx.resend,
                        deadline_ms,
                    };
                    sent = Some((ctx.key.clone(), deadline_ms));
                    let outcome = act(&call);
                    self.finish_act(&guard, &ctx, outcome, &at())?
                }
                StepPlan::Query(ctx) => {
                    let found = self.ask_open(name, tool, &ctx, sent.as_ref())?;
                    engine
                        .resolve_step(&guard, &ctx, found)
                        .map_err(|e| self.engine_stop(e, &at()))?
                }
            };
            match self.step_result(name, tool, &step, result, held)? {
                Next::Done(receipt) => return Ok(receipt),
                Next::Retried(key) => failed_key = Some(key),
                Next::Unknown { key, reason } => {
                    // An idempotent tool is resent the same key (inside its
                    // window), a queryable one asked: by the next begin.
                    ambiguous += 1;
                    let settles = !matches!(tool.spec.class, ToolClass::NotIdempotent);
                    if !settles || ambiguous > tool.attempts {
                        return Err(Stop::OutcomeUnknown { key, reason }.into());
                    }
                }
            }
        }
    }

    /// A resumed step: the backoffs of its failed attempts again, in order,
    /// as the journal holds them (each answered by its elapsed timer, or
    /// opened if the crash came first); if its latest attempt failed for
    /// good, or was the last, the failure answers as it did the first time.
    /// Returns the latest attempt's key if it failed and is retried.
    /// `awaited`: the latest attempt's reply was awaited (an asynchronous
    /// step, [`RunCtx::step_async`]): its wait comes next in the journal,
    /// and its outcome is the reply's.
    fn resume_retries(
        &mut self,
        name: &str,
        step: &StepId,
        tool: &Tool,
        awaited: bool,
    ) -> Result<Option<EffectKey>, Fail> {
        let engine = &self.shared.engine;
        let latest = engine
            .read(|books| Ok(books.latest_effect(&self.run, step, EffectKind::Act)))
            .map_err(|e| self.engine_stop(e, &format!("step {name}")))?;
        let Some(entry) = latest else {
            return Ok(None);
        };
        let attempt = entry.key.attempt();
        // Every attempt before the latest failed and was waited out, each
        // after the wait for its request's lifetime if it had one, as the
        // journal holds them.
        // (Only a tool that ignores tokens waits so: the others' resumes
        // read no wait book.)
        let book = match tool.fencing {
            Fencing::Checks => None,
            Fencing::Ignores { .. } => Some(
                engine
                    .waits(&self.run)
                    .map_err(|e| self.engine_stop(e, &format!("step {name}")))?,
            ),
        };
        for earlier in 1..attempt {
            if let Some(book) = &book {
                self.replay_lifetime_wait(name, book, earlier)?;
            }
            self.backoff(name, tool, earlier)?;
        }
        if let Some(book) = &book {
            self.replay_lifetime_wait(name, book, attempt)?;
        }
        if awaited {
            return Ok(None);
        }
        let EffectStatus::Failed { retryable, reason } = &entry.status else {
            return Ok(None);
        };
        // An operator's retry reopened the attempt it failed at: the tool's
        // attempts count again from there.
        if !retryable || self.attempts_used(step, attempt) >= tool.attempts {
            return Err(failed_for_good(name, tool, attempt, reason));
        }
        self.backoff(name, tool, attempt)?;
        Ok(Some(entry.key.clone()))
    }

    /// The attempts of `step` up to `attempt` that count against its
    /// tool's: all of them, or those since the attempt an operator's retry
    /// reopened.
    fn attempts_used(&self, step: &StepId, attempt: u32) -> u32 {
        let base = self.reopened.get(step).copied().unwrap_or(0);
        attempt.saturating_sub(base)
    }

    /// A resumed step: the wait for the request lifetime of `attempt`
    /// again, if the step opened one (answered by its elapsed timer, or
    /// parked again until its recorded deadline).
    fn replay_lifetime_wait(
        &mut self,
        name: &str,
        book: &WaitBook,
        attempt: u32,
    ) -> Result<(), Fail> {
        let wait = lifetime_wait_name(name, attempt);
        let step = self.step_id(&wait)?;
        let Some(until) = book
            .wait_like(&step, &WaitFor::Timer)
            .and_then(|w| w.deadline_ms)
        else {
            return Ok(());
        };
        self.lifetime_wait(&wait, until)
    }

    /// Before a query about `key`, an ambiguous act of a tool that ignores
    /// fencing tokens: waits on a durable timer until the request can no
    /// longer arrive, the deadline it was sent by plus the tool's request
    /// lifetime (`sent_by` if this handler sent it, else bounded by the
    /// lease its sender held, from the run's journal). The timer's
    /// deadline is recorded with the wait, so a resumed handler waits for
    /// the same instant. A tool with no lifetime cannot be asked: the
    /// outcome is unknown and the run is paused for a person.
    fn outlive_request(
        &mut self,
        name: &str,
        tool: &Tool,
        key: &EffectKey,
        sent_by: Option<u64>,
    ) -> Result<(), Fail> {
        let Fencing::Ignores {
            request_lifetime_ms,
        } = tool.fencing
        else {
            return Ok(());
        };
        let Some(lifetime_ms) = request_lifetime_ms else {
            return Err(Stop::OutcomeUnknown {
                key: key.clone(),
                reason: format!(
                    "tool {} ignores fencing tokens and declares no request lifetime, so no \
                     query can tell whether the request is still on its way",
                    tool.spec.name
                ),
            }
            .into());
        };
        let engine = &self.shared.engine;
        if engine.planted(PlantedBug::QueryBeforeRequestLifetime) {
            return Ok(());
        }
        let wait = lifetime_wait_name(name, key.attempt());
        let step = self.step_id(&wait)?;
        if self
            .used
            .contains(&Journaled::Wait(step.clone(), WaitFor::Timer.kind()))
        {
            return Ok(()); // waited out already, on resume
        }
        let at = || format!("step {name}");
        let recorded = engine
            .waits(&self.run)
            .map_err(|e| self.engine_stop(e, &at()))?
            .wait_like(&step, &WaitFor::Timer)
            .and_then(|w| w.deadline_ms);
        let until = match recorded {
            Some(until) => until,
            None => {
                let sent_by = match sent_by {
                    Some(deadline) => deadline,
                    None => self.sender_lease_end(key, &at())?,
                };
                let until = sent_by.saturating_add(lifetime_ms);
                if until <= engine.clock().now_ms() {
                    return Ok(());
                }
                until
            }
        };
        self.lifetime_wait(&wait, until)
    }

    /// The latest instant the sender of `key`'s request could send it
    /// ([`request_sent_by`]).
    fn sender_lease_end(&self, key: &EffectKey, at: &str) -> Result<u64, Fail> {
        request_sent_by(
            &self.shared.engine,
            &self.run,
            key,
            self.watch.guard.token,
            self.watch.expires_ms(),
        )
        .map_err(|e| self.engine_stop(e, at))
    }

    /// The durable timer `wait` until `until`: returns once it elapsed,
    /// else parks the run.
    fn lifetime_wait(&mut self, wait: &str, until: u64) -> Result<(), Fail> {
        let reason = format!(
            "{wait}: a request to a tool that ignores fencing tokens may arrive until {until} ms"
        );
        match self.wait(wait, WaitFor::Timer, Some(Deadline::At(until)), &reason)? {
            WaitStatus::Elapsed => Ok(()),
            other => Err(unexpected_wait(wait, &other)),
        }
    }

    /// Waits out the backoff after `attempt` of step `name` failed: a
    /// durable timer named `<name>:retry-<attempt>` (none if it is zero).
    fn backoff(&mut self, name: &str, tool: &Tool, attempt: u32) -> Result<(), Fail> {
        let delay_ms = tool.backoff.delay_ms(&self.run, name, attempt);
        if delay_ms == 0 {
            return Ok(());
        }
        let wait = format!("{name}:retry-{attempt}");
        let reason = format!(
            "step {name} waits {delay_ms} ms before attempt {}",
            attempt + 1
        );
        match self.wait(&wait, WaitFor::Timer, Some(Deadline::In(delay_ms)), &reason)? {
            WaitStatus::Elapsed => Ok(()),
            other => Err(unexpected_wait(&wait, &other)),
        }
    }

    /// Waits for a person of `role` to approve `args` (the digest the
    /// approval is bound to; a step of the same name with the same
    /// arguments is then allowed to act). The run parks until the approval
    /// or the deadline.
    pub fn approval(
        &mut self,
        name: &str,
        args: &[u8],
        role: &str,
        deadline: Deadline,
    ) -> Result<Approval, Fail> {
        let wait_for = WaitFor::Approval {
            args_digest: digest_of(args),
            role: role.to_string(),
        };
        let reason = format!("step {name} needs the approval of a {role}");
        match self.wait(name, wait_for, Some(deadline), &reason)? {
            WaitStatus::Approved { approver, note } => Ok(Approval::Approved { approver, note }),
            WaitStatus::Rejected { approver, note } => Ok(Approval::Rejected { approver, note }),
            WaitStatus::Elapsed => Ok(Approval::Expired),
            other => Err(unexpected_wait(name, &other)),
        }
    }

    /// Sleeps until the deadline: a durable timer (the run holds no worker
    /// meanwhile, and survives restarts).
    pub fn sleep(&mut self, name: &str, until: Deadline) -> Result<(), Fail> {
        let reason = format!("step {name} sleeps");
        match self.wait(name, WaitFor::Timer, Some(until), &reason)? {
            WaitStatus::Elapsed => Ok(()),
            other => Err(unexpected_wait(name, &other)),
        }
    }

    /// Waits for the signal `name` (a webhook, a person; `Engine::signal`)
    /// and returns its payload, or `None` if `within` passed first.
    pub fn signal(
        &mut self,
        name: &str,
        within: Option<Deadline>,
    ) -> Result<Option<Vec<u8>>, Fail> {
        let wait_for = WaitFor::Signal {
            name: name.to_string(),
        };
        let reason = format!("waits for the signal {name}");
        match self.wait(name, wait_for, within, &reason)? {
            WaitStatus::Signalled { signal } => Ok(Some(signal.payload)),
            WaitStatus::Elapsed => Ok(None),
            other => Err(unexpected_wait(name, &other)),
        }
    }

    /// Starts a child run of `kind` (the version the runtime starts new runs
    /// of that kind with) on `input`, waits for its end, and returns its
    /// output. A child that failed or was cancelled fails this call.
    pub fn child(&mut self, name: &str, kind: &str, input: &[u8]) -> Result<Vec<u8>, Fail> {
        let step = self.step_id(name)?;
        let journaled = self.enter(Journaled::Wait(step.clone(), "child"))?;
        let at = || format!("child {name}");
        let child =
            crate::books::child_run_id(&self.run, &step).map_err(|e| self.engine_stop(e, &at()))?;
        let spec = self.child_spec(journaled, &child, kind, input, &at())?;
        self.flush()?;
        self.live(&at())?;
        let reason = format!("step {name} runs a child {kind}");
        let engine = &self.shared.engine;
        let started = engine
            .start_child(&self.run, &self.watch.guard, &step, spec, None, &reason)
            .map_err(|e| self.engine_stop(e, &at()))?;
        match started.wait.status {
            WaitStatus::Open => {
                self.watch.let_go();
                Err(Stop::Parked {
                    step: name.to_string(),
                }
                .into())
            }
            WaitStatus::ChildEnded {
                state: RunState::Completed,
                checkpoint,
            } => {
                let Some(version) = checkpoint else {
                    return Ok(Vec::new());
                };
                let saved = engine
                    .load_version(&started.child, version, RUNTIME_SCHEMA)
                    .map_err(|e| self.engine_stop(e, &at()))?;
                Ok(part(&saved.parts, OUTPUT_PART).unwrap_or_default())
            }
            WaitStatus::ChildEnded { state, .. } => Err(Fail::failed(format!(
                "child {} of step {name} ended {state}",
                started.child
            ))),
            WaitStatus::Elapsed => Err(Fail::failed(format!(
                "child {} of step {name} did not end in time",
                started.child
            ))),
            other => Err(unexpected_wait(name, &other)),
        }
    }

    /// The spec `child` of `kind` starts with: the version the runtime
    /// starts new runs of `kind` at, or, for a child started before (the
    /// call is `journaled`), the version it started at (a later deploy
    /// starts new children at its own).
    fn child_spec(
        &self,
        journaled: bool,
        child: &RunId,
        kind: &str,
        input: &[u8],
        at: &str,
    ) -> Result<ChildSpec, Fail> {
        let existing = if journaled {
            self.shared
                .engine
                .run(child)
                .map_err(|e| self.engine_stop(e, at))?
                .map(|r| r.agent_version)
        } else {
            None
        };
        let agent_version = existing
            .or_else(|| self.shared.current_agent(kind))
            .ok_or_else(|| {
                Fail::failed(format!(
                    "no agent of kind {kind} is registered for {at} (run {child})"
                ))
            })?;
        Ok(ChildSpec {
            input_digest: digest_of(input),
            agent_version,
            trace_id: self.trace_id.clone(),
            input: Some(input.to_vec()),
        })
    }

    /// Starts several child runs at once (a fan-out), one per `(kind,
    /// input)` in `calls`, and waits for all of them ([`Join::All`]) or for
    /// the first to end ([`Join::First`]; the others are cancelled in the
    /// same commit, compensating what they did). The children and the wait are one commit; the run parks
    /// and holds no worker until the join is met. Returns how each awaited
    /// child ended, in the order of `calls` (for `First`, the one): a
    /// child that failed or was cancelled is reported, not raised, so the
    /// handler decides what a partial result is worth. A cancel of this
    /// run while it waits cancels every child it awaits.
    pub fn children(
        &mut self,
        name: &str,
        calls: &[(&str, &[u8])],
        join: Join,
    ) -> Result<Vec<ChildOutput>, Fail> {
        let step = self.step_id(name)?;
        let journaled = self.enter(Journaled::Wait(step.clone(), "child"))?;
        let at = || format!("children {name}");
        let ids = children_run_ids(&self.run, &step, calls.len())
            .map_err(|e| self.engine_stop(e, &at()))?;
        let specs = calls
            .iter()
            .zip(&ids)
            .map(|((kind, input), id)| self.child_spec(journaled, id, kind, input, &at()))
            .collect::<Result<Vec<_>, Fail>>()?;
        self.flush()?;
        self.live(&at())?;
        let reason = format!(
            "step {name} runs {} children, waits for {join}",
            calls.len()
        );
        let engine = &self.shared.engine;
        let started = engine
            .start_children(
                &self.run,
                &self.watch.guard,
                &step,
                specs,
                join,
                None,
                &reason,
            )
            .map_err(|e| self.engine_stop(e, &at()))?;
        let ended = match started.wait.status {
            WaitStatus::Open => {
                self.watch.let_go();
                return Err(Stop::Parked {
                    step: name.to_string(),
                }
                .into());
            }
            WaitStatus::ChildrenEnded { ended } => ended,
            other => return Err(unexpected_wait(name, &other)),
        };
        let expected = match join {
            Join::All => calls.len(),
            Join::First => 1,
        };
        if ended.len() != expected {
            return Err(Fail::failed(format!(
                "the wait for {join} of the {} children of step {name} ended with {}",
                calls.len(),
                ended.len()
            )));
        }
        let mut outputs = Vec::with_capacity(ended.len());
        for end in ended {
            let index = ids.iter().position(|id| *id == end.run).ok_or_else(|| {
                Fail::failed(format!(
                    "the wait of step {name} ended with run {}, not one of its children",
                    end.run
                ))
            })?;
            let output = match (end.state, end.checkpoint) {
                (RunState::Completed, Some(version)) => {
                    let saved = engine
                        .load_version(&end.run, version, RUNTIME_SCHEMA)
                        .map_err(|e| self.engine_stop(e, &at()))?;
                    Some(part(&saved.parts, OUTPUT_PART).unwrap_or_default())
                }
                (RunState::Completed, None) => Some(Vec::new()),
                _ => None,
            };
            outputs.push(ChildOutput {
                run: end.run,
                index,
                state: end.state,
                output,
            });
        }
        Ok(outputs)
    }

    /// Saves the handler's state as the run's next checkpoint, in the
    /// commit of the next step's outcome (or of the next wait, model call or
    /// end, whichever comes first). A resumed handler's calls before the
    /// last saved one write nothing.
    pub fn checkpoint(&mut self, state: &[u8]) -> Result<(), Fail> {
        self.checkpoints += 1;
        if self.checkpoints <= self.saved_checkpoints {
            return Ok(());
        }
        // Two in a row: the first is saved now, so each call is one version
        // and a resume counts them the same.
        self.flush()?;
        self.pending = Some(state.to_vec());
        Ok(())
    }

    /// The state of the run's latest saved checkpoint, if any.
    pub fn last_checkpoint(&self) -> Result<Option<Vec<u8>>, Fail> {
        let engine = &self.shared.engine;
        match engine.load_latest(&self.run, RUNTIME_SCHEMA) {
            Ok(saved) => Ok(saved.and_then(|saved| part(&saved.parts, STATE_PART))),
            Err(e) => Err(self.engine_stop(e, "reading the last checkpoint")),
        }
    }

    /// Opens (or asks again about) the wait at `name`.
    fn wait(
        &mut self,
        name: &str,
        wait_for: WaitFor,
        deadline: Option<Deadline>,
        reason: &str,
    ) -> Result<WaitStatus, Fail> {
        let step = self.step_id(name)?;
        let journaled = self.enter(Journaled::Wait(step.clone(), wait_for.kind()))?;
        self.flush()?;
        let at = || format!("wait {name}");
        self.live(&at())?;
        let engine = &self.shared.engine;
        let deadline_ms = match deadline {
            None => None,
            Some(Deadline::At(ms)) => Some(ms),
            // Stable: the deadline the wait was opened with, if the
            // journal says it was.
            Some(Deadline::In(ms)) if journaled => {
                let book = engine
                    .waits(&self.run)
                    .map_err(|e| self.engine_stop(e, &at()))?;
                let opened = book.wait_like(&step, &wait_for);
                Some(match opened.and_then(|w| w.deadline_ms) {
                    Some(recorded) => recorded,
                    None => engine.clock().now_ms().saturating_add(ms),
                })
            }
            Some(Deadline::In(ms)) => Some(engine.clock().now_ms().saturating_add(ms)),
        };
        let waited = engine
            .open_wait(
                &self.run,
                &self.watch.guard,
                &step,
                wait_for,
                deadline_ms,
                reason,
            )
            .map_err(|e| self.engine_stop(e, &at()))?;
        if waited.wait.status == WaitStatus::Open {
            self.watch.let_go();
            return Err(Stop::Parked {
                step: name.to_string(),
            }
            .into());
        }
        Ok(waited.wait.status)
    }

    /// Checks the handler's next call against the journal, and that the
    /// runtime may go on; returns whether the journal holds the call (it
    /// was made before), false past the journal's end.
    fn enter(&mut self, called: Journaled) -> Result<bool, Fail> {
        if self.shared.stopping() {
            return Err(Stop::ShuttingDown.into());
        }
        let call = self.calls;
        self.calls += 1;
        // Steps and waits are named once in a run; model calls are counted.
        if !matches!(called, Journaled::Decision(_)) && !self.used.insert(called.clone()) {
            return Err(self.diverged(
                format!("{called} once"),
                format!("{called} a second time (step names are unique in a run)"),
            ));
        }
        match self.journal.get(call as usize) {
            Some(recorded)
                if *recorded != called
                    && !self.shared.engine.planted(PlantedBug::SkipJournalCheck) =>
            {
                Err(self.diverged(recorded.to_string(), called.to_string()))
            }
            // Planted `SkipJournalCheck`: a call the journal does not hold
            // there is taken for new work.
            Some(recorded) if *recorded != called => Ok(false),
            recorded => Ok(recorded.is_some()),
        }
    }

    /// The handler diverged from the journal at its latest call.
    fn diverged(&self, recorded: String, called: String) -> Fail {
        Fail::Stopped(Stop::Diverged(Divergence {
            run: self.run.clone(),
            call: self.calls,
            recorded,
            called,
        }))
    }

    /// Stops the handler if the runtime is shutting down or the lease is
    /// lost; renews it if it is due.
    fn live(&self, at: &str) -> Result<(), Fail> {
        if self.shared.stopping() {
            return Err(Stop::ShuttingDown.into());
        }
        if !self.watch.keep(&self.shared.engine) {
            return Err(Stop::LeaseLost { at: at.to_string() }.into());
        }
        Ok(())
    }

    /// The commands that save the pending checkpoint, if there is one.
    fn pending_commands(&self) -> Vec<crate::books::Command> {
        self.pending
            .as_ref()
            .map(|state| vec![self.save_command(STATE_PART, state)])
            .unwrap_or_default()
    }

    pub(crate) fn save_command(&self, part_name: &str, bytes: &[u8]) -> crate::books::Command {
        crate::books::Command::SaveCheckpoint(self.save(part_name, bytes))
    }

    fn save(&self, part_name: &str, bytes: &[u8]) -> SaveCheckpoint {
        SaveCheckpoint {
            run: self.run.clone(),
            guard: self.watch.guard.clone(),
            schema_version: RUNTIME_SCHEMA,
            parts: vec![Part {
                name: part_name.to_string(),
                bytes: bytes.to_vec(),
                extends: None,
                inline: false,
            }],
        }
    }

    /// Saves the pending checkpoint now.
    pub(crate) fn flush(&mut self) -> Result<(), Fail> {
        let Some(state) = self.pending.take() else {
            return Ok(());
        };
        self.shared
            .engine
            .save_checkpoint(self.save(STATE_PART, &state))
            .map_err(|e| self.engine_stop(e, "saving a checkpoint"))?;
        self.saved_checkpoints += 1;
        Ok(())
    }

    fn step_id(&self, name: &str) -> Result<StepId, Fail> {
        StepId::new(name).map_err(|e| Fail::failed(format!("step name {name:?}: {e}")))
    }

    /// What an engine error at `at` means for the handler.
    pub(crate) fn engine_stop(&self, e: Error, at: &str) -> Fail {
        let diverged = |recorded, called| self.diverged(recorded, called);
        match e {
            Error::LeaseLost { .. } | Error::Fenced { .. } | Error::GuardOfAnotherRun { .. } => {
                self.watch.let_go();
                Fail::Stopped(Stop::LeaseLost { at: at.to_string() })
            }
            Error::BudgetExhausted { .. } => Fail::Stopped(Stop::BudgetExhausted {
                reason: e.to_string(),
            }),
            Error::RunTerminal { .. } | Error::RunNotRunning { .. } => {
                Fail::Stopped(Stop::LeaseLost {
                    at: format!("{at} ({e})"),
                })
            }
            Error::ArgsMismatch {
                recorded,
                presented,
                ..
            } => diverged(
                format!("{at} with {recorded}"),
                format!("{at} with {presented}"),
            ),
            Error::Divergence {
                recorded,
                attempted,
                ..
            } => diverged(
                format!("{at} with input {}", recorded.short()),
                format!("{at} with input {}", attempted.short()),
            ),
            Error::WaitMismatch { .. } | Error::RunInputMismatch { .. } => {
                diverged(format!("{at} as recorded"), format!("{at}: {e}"))
            }
            other => Fail::Stopped(Stop::Engine(other)),
        }
    }
}

fn part(parts: &[Part], name: &str) -> Option<Vec<u8>> {
    parts
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.bytes.clone())
}

/// The latest instant the sender of `key`'s request on `run` could send
/// it: the last expiry the journal records for the lease it wrote the
/// intent under (an act's deadline is its lease's expiry less a margin).
/// With no such record, the latest expiry of any lease before `mine`, and
/// at least `my_expiry`.
pub(super) fn request_sent_by(
    engine: &crate::engine::Engine,
    run: &RunId,
    key: &EffectKey,
    mine: FencingToken,
    my_expiry: u64,
) -> crate::error::Result<u64> {
    let audit = engine.read(|books| Ok(books.audit(run, 1)))?;
    let sender = audit.iter().find_map(|entry| match &entry.what {
        AuditWhat::Intended { key: intended, .. } if intended == key => entry.token,
        _ => None,
    });
    let expiry = |entry: &AuditEntry| match entry.what {
        AuditWhat::LeaseAcquired { expires_ms, .. } | AuditWhat::LeaseRenewed { expires_ms } => {
            Some(expires_ms)
        }
        _ => None,
    };
    let by_sender = sender.and_then(|token| {
        audit
            .iter()
            .filter(|e| e.token == Some(token))
            .filter_map(expiry)
            .max()
    });
    Ok(by_sender.unwrap_or_else(|| {
        audit
            .iter()
            .filter(|e| e.token.is_some_and(|t| t < mine))
            .filter_map(expiry)
            .chain(std::iter::once(my_expiry))
            .max()
            .unwrap_or(u64::MAX)
    }))
}

/// The wait before a query about `attempt` of step `name`, whose tool
/// ignores fencing tokens: `<name>:lifetime-<attempt>`.
fn lifetime_wait_name(name: &str, attempt: u32) -> String {
    format!("{name}:lifetime-{attempt}")
}

fn unexpected_wait(name: &str, status: &WaitStatus) -> Fail {
    Fail::failed(format!("the wait at {name} ended {}", status.name()))
}

/// Where a step's loop goes after a result ([`RunCtx::step_result`]).
enum Next {
    /// The step is done: its receipt.
    Done(Vec<u8>),
    /// The attempt `key` failed and is tried again (its backoff waited).
    Retried(EffectKey),
    /// The attempt's outcome is not known.
    Unknown {
        /// The attempt.
        key: EffectKey,
        /// Why it is not known.
        reason: String,
    },
}

/// The failure of a step whose attempts are spent or whose tool refused
/// for good: the same words the first time and on every replay.
fn failed_for_good(name: &str, tool: &Tool, attempt: u32, reason: &str) -> Fail {
    Fail::failed(format!(
        "step {name} ({}) failed for good at attempt {attempt}: {reason}",
        tool.spec.name
    ))
}

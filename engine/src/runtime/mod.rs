//! The durable runtime: an agent is a function.
//!
//! A [`Runtime`] serves registered agent functions (handlers) over an
//! [`Engine`]: it claims the runs of the kinds and versions it serves,
//! moves a new run to running, calls the handler with a [`RunCtx`], keeps
//! the lease alive, parks the run when the handler waits, records the
//! output and ends the run, fails it when the handler fails or panics, and
//! drives a failed or cancelled run's saga with the undo handlers
//! registered for its tools.
//!
//! **Resumption is replay.** A handler is called again from the top after
//! any crash, lease loss or wait; every call it makes before the first
//! unfinished one answers from the books (a step's stored receipt, a model
//! call's recorded output, a wait's decision), so the handler reaches the
//! call where it stopped having acted nowhere twice. What a handler must
//! keep deterministic is the sequence of its calls (names, tools,
//! arguments, model inputs) given the answers of the earlier ones; a
//! handler whose calls no longer match the run's journal is stopped with a
//! [`Divergence`] naming both, and the run is paused for an operator.
//!
//! **Agents.** A run's `agent_version` is `kind@version`; it keeps the
//! version it started with and only a handler registered for that version
//! resumes it. New runs of a kind start with the version registered last.

mod ctx;
mod fail;
mod lease;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use crate::books::{
    Command, Cost, CreateRun, OperatorAction, RunId, RunState, Transition, WorkerId, digest_of,
};
use crate::books::{SagaNext, ToolClass};
use crate::engine::{
    EffectCtx, Engine, LeaseGrant, SagaProgress, StepPlan, StepRequest, ToolOutcome, ToolSpec,
};
use crate::error::{Error, Result};

pub use crate::books::Join;
pub use ctx::{
    Approval, Backoff, Call, ChildOutput, Deadline, Fencing, OUTPUT_PART, QueryFn, RUNTIME_SCHEMA,
    RunCtx, STATE_PART, Tool,
};
pub use fail::{Divergence, Fail, Stop};

use lease::{Keeper, LeaseWatch};

/// How many open acts one saga pass resolves before it lets the run go (a
/// saga has at most one per compensable step).
const SAGA_RESOLVES_MAX: usize = 64;

/// A handler: the agent's code, straight-line over its [`RunCtx`],
/// returning the run's output.
pub type Handler = dyn Fn(&mut RunCtx<'_>) -> std::result::Result<Vec<u8>, Fail> + Send + Sync;

/// Undoes a compensable step's act: gets the compensation's key and
/// arguments and the act's receipt (the booking reference, the charge id).
pub type UndoFn = dyn Fn(&UndoCall<'_>) -> ToolOutcome + Send + Sync;

/// What an undo handler receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UndoCall<'a> {
    /// The compensation's key and token (`run/step/undo/n`).
    pub ctx: &'a EffectCtx,
    /// The compensation's arguments, as the step registered them.
    pub args: &'a [u8],
    /// The receipt of the act being undone, if it was confirmed.
    pub receipt: Option<&'a [u8]>,
    /// True if this asks about an earlier undo request rather than sending
    /// one (a queryable undo tool after a crash): answer what happened.
    pub query: bool,
    /// The instant the undo request must be sent by, as for an act
    /// ([`Call::deadline_ms`]): the runtime checks it before it calls the
    /// handler, and the client of a tool that ignores fencing tokens checks
    /// it again right before it sends.
    pub deadline_ms: u64,
}

/// How a runtime runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeOptions {
    /// The workers' name: thread `n` claims as `<worker>-<n>`.
    pub worker: String,
    /// The lease a handler runs under, renewed at a third of it.
    pub lease_ttl_ms: u64,
    /// How long an idle worker pauses before it looks for work again, in
    /// real milliseconds (pacing only: no decision reads the wall clock).
    pub idle_ms: u64,
    /// What a model call of a run with a budget holds before it is made
    /// (settled to its usage after). Zero by default: the call is refused
    /// only once the budget is spent, so a run may pass a limit by one
    /// call's usage; hold a call's most to fail closed before it.
    pub decision_hold: Cost,
}

impl Default for RuntimeOptions {
    fn default() -> RuntimeOptions {
        RuntimeOptions {
            worker: "runtime".to_string(),
            lease_ttl_ms: 30_000,
            idle_ms: 10,
            decision_hold: Cost::default(),
        }
    }
}

/// What [`Runtime::start`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// The run.
    pub run: RunId,
    /// False if the run existed with this input already.
    pub created: bool,
    /// The agent (`kind@version`) the run is served by.
    pub agent: String,
}

/// How long a worker waits after a failure of the server's or the
/// network's before it tries again.
const TRANSIENT_BACKOFF: Duration = Duration::from_millis(50);

/// What driving one claimed run came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Driven {
    /// The handler returned its output; the run completed.
    Completed,
    /// The run ended in this state (failed or cancelled, its saga done).
    Ended(RunState),
    /// The run failed and its saga is not over (an undo is ambiguous or
    /// failed): the lease is kept until it runs out, then the saga is tried
    /// again.
    Compensating,
    /// The run waits at this step, holding no worker.
    Parked(String),
    /// The run was paused for an operator, for this reason.
    Paused(String),
    /// The lease was lost (or the run ended under the handler): whoever
    /// holds the run now goes on.
    LeaseLost,
    /// The runtime is shutting down; the lease was released.
    ShutDown,
    /// Claimed, but there was nothing for this runtime to do (the run was
    /// paused, waiting or over by the time it was read, or its agent is not
    /// served here); the lease was released.
    Skipped(String),
    /// The server or the network failed under the handler (the books in
    /// PostgreSQL: [`Error::is_transient`]), for this reason: the run is as
    /// its last acknowledged command left it; its lease runs out and it is
    /// claimed again, where an act whose outcome was not recorded is
    /// resent, asked about or reported by its tool's class.
    Interrupted(String),
}

/// Counters of what the runtime's workers did, since it was made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Runs claimed.
    pub claimed: u64,
    /// Runs completed.
    pub completed: u64,
    /// Runs that ended failed or cancelled.
    pub ended: u64,
    /// Times a run parked on a wait.
    pub parked: u64,
    /// Runs paused for an operator (divergence, unknown outcome).
    pub paused: u64,
    /// Handlers stopped by a lost lease.
    pub lease_lost: u64,
    /// Handlers that panicked (their runs failed).
    pub panicked: u64,
}

#[derive(Default)]
struct Counters {
    claimed: AtomicU64,
    completed: AtomicU64,
    ended: AtomicU64,
    parked: AtomicU64,
    paused: AtomicU64,
    lease_lost: AtomicU64,
    panicked: AtomicU64,
}

/// What every worker thread shares.
pub(crate) struct Shared {
    pub(crate) engine: Arc<Engine>,
    options: RuntimeOptions,
    /// `kind@version` → handler.
    agents: RwLock<BTreeMap<String, Arc<Handler>>>,
    /// kind → the version new runs start with.
    current: RwLock<BTreeMap<String, String>>,
    /// compensation tool → undo handler.
    undos: RwLock<BTreeMap<String, Arc<UndoFn>>>,
    /// tool name → the tool, for the saga's calls ([`Runtime::register_tool`]).
    tools: RwLock<BTreeMap<String, Tool>>,
    stop: Arc<AtomicBool>,
    keeper: Keeper,
    counters: Counters,
}

impl Shared {
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The `kind@version` new runs of `kind` start with.
    pub(crate) fn current_agent(&self, kind: &str) -> Option<String> {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        current.get(kind).map(|version| agent_name(kind, version))
    }

    fn handler(&self, agent: &str) -> Option<Arc<Handler>> {
        let agents = self.agents.read().unwrap_or_else(PoisonError::into_inner);
        agents.get(agent).cloned()
    }

    /// The tool registered as `name` ([`Runtime::register_tool`]), for the
    /// saga's calls.
    fn registered_tool(&self, name: &str) -> Option<Tool> {
        let tools = self.tools.read().unwrap_or_else(PoisonError::into_inner);
        tools.get(name).cloned()
    }

    fn served(&self) -> Vec<String> {
        let agents = self.agents.read().unwrap_or_else(PoisonError::into_inner);
        agents.keys().cloned().collect()
    }
}

/// Shuts a runtime down from inside (see [`Runtime::shutdown_handle`]).
#[derive(Clone, Debug)]
pub struct ShutdownHandle(Arc<AtomicBool>);

impl ShutdownHandle {
    /// What [`Runtime::shutdown`] does.
    pub fn shutdown(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// `kind@version`, the `agent_version` of the runs a runtime serves.
pub fn agent_name(kind: &str, version: &str) -> String {
    format!("{kind}@{version}")
}

/// The durable runtime (see the module docs). Cheap to clone: clones share
/// the registry, the workers and the shutdown.
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("options", &self.shared.options)
            .field("agents", &self.shared.served())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime over `engine` with the default options.
    pub fn new(engine: Arc<Engine>) -> Runtime {
        Runtime::with_options(engine, RuntimeOptions::default())
    }

    /// A runtime over `engine`.
    pub fn with_options(engine: Arc<Engine>, options: RuntimeOptions) -> Runtime {
        Runtime {
            shared: Arc::new(Shared {
                engine,
                options,
                agents: RwLock::default(),
                current: RwLock::default(),
                undos: RwLock::default(),
                tools: RwLock::default(),
                stop: Arc::new(AtomicBool::new(false)),
                keeper: Keeper::default(),
                counters: Counters::default(),
            }),
        }
    }

    /// The engine the runtime serves.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }

    /// Serves `kind` at `version` with `handler`; new runs of `kind` start
    /// at the version registered last. Names must be non-empty, without
    /// `@`, and registered once (`InvalidCommand` otherwise).
    pub fn register(
        &self,
        kind: &str,
        version: &str,
        handler: impl Fn(&mut RunCtx<'_>) -> std::result::Result<Vec<u8>, Fail> + Send + Sync + 'static,
    ) -> Result<()> {
        self.register_compatible(kind, version, &[], handler)
    }

    /// [`register`](Runtime::register), and the same handler also resumes
    /// the runs started at each of the `compatible` versions of `kind`: a
    /// run keeps the version it started with (its record says so), and
    /// only a handler of that version, or one registered as compatible
    /// with it, drives it. Compatible means it replays the older runs'
    /// journals: the same calls in the same order up to where they stand
    /// (new calls after that are fine); a run whose journal it does not
    /// match stops with a divergence and waits for an operator.
    pub fn register_compatible(
        &self,
        kind: &str,
        version: &str,
        compatible: &[&str],
        handler: impl Fn(&mut RunCtx<'_>) -> std::result::Result<Vec<u8>, Fail> + Send + Sync + 'static,
    ) -> Result<()> {
        for (what, name) in std::iter::once(("kind", kind))
            .chain(std::iter::once(("version", version)))
            .chain(compatible.iter().map(|v| ("version", *v)))
        {
            if name.is_empty() || name.contains('@') {
                return Err(Error::InvalidCommand {
                    reason: format!("agent {what} {name:?} must be non-empty and without '@'"),
                });
            }
        }
        let served: Vec<String> = std::iter::once(version)
            .chain(compatible.iter().copied())
            .map(|v| agent_name(kind, v))
            .collect();
        let mut agents = self
            .shared
            .agents
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(taken) = served.iter().find(|agent| agents.contains_key(*agent)) {
            return Err(Error::InvalidCommand {
                reason: format!("agent {taken} is registered already"),
            });
        }
        let handler: Arc<Handler> = Arc::new(handler);
        for agent in served {
            agents.insert(agent, Arc::clone(&handler));
        }
        let mut current = self
            .shared
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        current.insert(kind.to_string(), version.to_string());
        Ok(())
    }

    /// Registers what undoes the acts whose compensation names `tool`.
    pub fn register_undo(
        &self,
        tool: &str,
        undo: impl Fn(&UndoCall<'_>) -> ToolOutcome + Send + Sync + 'static,
    ) {
        let mut undos = self
            .shared
            .undos
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        undos.insert(tool.to_string(), Arc::new(undo));
    }

    /// Declares `tool` for the calls the runtime makes outside a handler,
    /// in a compensating run's saga:
    ///
    /// - an act the run left without an outcome (its worker died, or the
    ///   run was cancelled mid-step) is asked about with the tool's query
    ///   ([`Tool::with_query`]) before anything earlier is undone; an act on
    ///   a tool that is not registered, or not queryable, waits for a
    ///   person (`actum reconcile`), as the saga cannot resend it;
    /// - the fencing of a tool an undo names ([`Tool::ignores_tokens`])
    ///   decides when the saga may ask about an undo request: not before
    ///   the request can no longer arrive (its sender's deadline plus the
    ///   request lifetime), and never with no lifetime.
    ///
    /// A compensating run cannot park on a timer, so until then the saga
    /// records the outcome as unknown for now and keeps the run's lease
    /// until it runs out; the next worker to claim the run asks again.
    /// Registering a tool again replaces it.
    pub fn register_tool(&self, tool: Tool) {
        let mut tools = self
            .shared
            .tools
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        tools.insert(tool.name().to_string(), tool);
    }

    /// Starts a run of `kind` named `run` on `input`, stored with it
    /// ([`RunCtx::input`]). Idempotent: the same input again answers the
    /// existing run (whatever version it runs at); another input is
    /// `RunInputMismatch`. `NotFound` if no version of `kind` is registered.
    pub fn start(&self, kind: &str, run: &str, input: &[u8]) -> Result<Started> {
        let run = RunId::new(run)?;
        let engine = &self.shared.engine;
        let agent = self
            .shared
            .current_agent(kind)
            .ok_or_else(|| Error::NotFound {
                what: format!("a registered agent of kind {kind}"),
            })?;
        let created = engine.create_run(CreateRun {
            run: run.clone(),
            input_digest: digest_of(input),
            agent_version: agent.clone(),
            trace_id: run.as_str().to_string(),
            parent: None,
            input: Some(input.to_vec()),
        });
        match created {
            Ok(created) => Ok(Started {
                run,
                created: !created.existed,
                agent,
            }),
            // The run exists at another version: the same input is still
            // the same run (no read before the create, the common case).
            Err(mismatch @ Error::RunInputMismatch { .. }) => match engine.run(&run)? {
                Some(found) if found.input_digest == digest_of(input) => Ok(Started {
                    run,
                    created: false,
                    agent: found.agent_version,
                }),
                _ => Err(mismatch),
            },
            Err(e) => Err(e),
        }
    }

    /// The output of a completed run (its handler's return value).
    pub fn output(&self, run: &RunId) -> Result<Option<Vec<u8>>> {
        let engine = &self.shared.engine;
        match engine.run(run)? {
            Some(found) if found.state == RunState::Completed => {}
            _ => return Ok(None),
        }
        match engine.load_latest(run, RUNTIME_SCHEMA) {
            Ok(saved) => Ok(saved.and_then(|saved| {
                saved
                    .parts
                    .into_iter()
                    .find(|p| p.name == OUTPUT_PART)
                    .map(|p| p.bytes)
            })),
            Err(e) => Err(e),
        }
    }

    /// Serves the registered agents on `threads` worker threads (and one
    /// that renews leases) until [`shutdown`](Runtime::shutdown); returns
    /// the first error that stopped a worker (the engine halted), after
    /// stopping the others.
    pub fn run(&self, threads: usize) -> Result<()> {
        if self.shared.engine.options.operator_channel {
            self.shared.engine.serve_operators()?;
        }
        let threads = threads.max(1);
        let idle = Duration::from_millis(self.shared.options.idle_ms.max(1));
        std::thread::scope(|scope| {
            let keeper = scope.spawn(|| {
                while !self.shared.stopping() {
                    self.shared.keeper.keep_all(&self.shared.engine);
                    std::thread::sleep(idle);
                }
            });
            let workers: Vec<_> = (0..threads)
                .map(|n| {
                    scope.spawn(move || -> Result<()> {
                        let worker = WorkerId::new(format!("{}-{n}", self.shared.options.worker))?;
                        while !self.shared.stopping() {
                            match self.work_once(&worker) {
                                Ok(Some(_)) => {}
                                Ok(None) => std::thread::sleep(idle),
                                // The server or the network failed (the
                                // books in PostgreSQL): the next call
                                // connects again.
                                Err(e) if e.is_transient() => {
                                    std::thread::sleep(idle.max(TRANSIENT_BACKOFF));
                                }
                                Err(e) => {
                                    self.shutdown();
                                    return Err(e);
                                }
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            let mut first = Ok(());
            for worker in workers {
                let result = worker.join().unwrap_or_else(|_| {
                    Err(Error::Inconsistent {
                        what: "a runtime worker thread panicked outside a handler".into(),
                    })
                });
                if first.is_ok() {
                    first = result;
                }
            }
            self.shutdown();
            let _ = keeper.join();
            first
        })
    }

    /// Asks every worker to stop: each handler stops at its next call, its
    /// lease is released, and [`run`](Runtime::run) returns.
    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::Release);
    }

    /// A handle that shuts this runtime down, for code the runtime itself
    /// holds (a handler, a tool client): unlike a clone of the runtime, it
    /// does not keep the engine open.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shared.stop.clone())
    }

    /// Clears a [`shutdown`](Runtime::shutdown), so the runtime can serve
    /// again.
    pub fn restart(&self) {
        self.shared.stop.store(false, Ordering::Release);
    }

    /// What the workers did so far.
    pub fn stats(&self) -> RuntimeStats {
        let c = &self.shared.counters;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        RuntimeStats {
            claimed: get(&c.claimed),
            completed: get(&c.completed),
            ended: get(&c.ended),
            parked: get(&c.parked),
            paused: get(&c.paused),
            lease_lost: get(&c.lease_lost),
            panicked: get(&c.panicked),
        }
    }

    /// Claims one run of a served agent as `worker` and drives it until it
    /// ends, parks or stops; `None` if nothing was claimable (or the
    /// runtime is shutting down). For a caller
    /// that paces its own loop (tests, a simulator, one-shot tools);
    /// [`run`](Runtime::run) calls it on each thread.
    pub fn work_once(&self, worker: &WorkerId) -> Result<Option<(RunId, Driven)>> {
        let served = self.shared.served();
        if served.is_empty() || self.shared.stopping() {
            return Ok(None);
        }
        let engine = &self.shared.engine;
        let ttl = self.shared.options.lease_ttl_ms;
        let Some(grant) = engine.claim_next_of(worker, ttl, &served)? else {
            return Ok(None);
        };
        self.shared.counters.claimed.fetch_add(1, Ordering::Relaxed);
        let run = grant.run.clone();
        let driven = self.drive(grant)?;
        self.count(&driven);
        Ok(Some((run, driven)))
    }

    fn count(&self, driven: &Driven) {
        let c = &self.shared.counters;
        let counter = match driven {
            Driven::Completed => &c.completed,
            Driven::Ended(_) => &c.ended,
            Driven::Parked(_) => &c.parked,
            Driven::Paused(_) => &c.paused,
            Driven::LeaseLost => &c.lease_lost,
            Driven::Compensating
            | Driven::ShutDown
            | Driven::Skipped(_)
            | Driven::Interrupted(_) => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Drives one claimed run.
    fn drive(&self, grant: LeaseGrant) -> Result<Driven> {
        let engine = &self.shared.engine;
        let watch = Arc::new(LeaseWatch::new(
            grant.run.clone(),
            grant.guard.clone(),
            self.shared.options.lease_ttl_ms,
            grant.expires_ms,
        ));
        self.shared.keeper.hold(watch.clone());
        let driven = self.drive_held(&watch);
        self.shared.keeper.drop_run(&grant.run);
        let driven = driven?;
        if matches!(
            driven,
            Driven::ShutDown | Driven::Paused(_) | Driven::Skipped(_)
        ) && !watch.lost()
        {
            watch.let_go();
            match engine.release_lease(&grant.run, &grant.guard) {
                Ok(_) => {}
                Err(e) if stops_the_worker(&e) => return Err(e),
                Err(_) => {} // lost or ended meanwhile: nothing to give up
            }
        }
        Ok(driven)
    }

    fn drive_held(&self, watch: &Arc<LeaseWatch>) -> Result<Driven> {
        let engine = &self.shared.engine;
        let run = &watch.run;
        // One read for all the handler starts from: each read waits until
        // what it saw is durable, so under many writers one is cheaper
        // than four.
        let (record, input, audit, saved, budgeted) = engine.read(|books| {
            let record = books.run(run).ok_or_else(|| Error::NotFound {
                what: format!("run {run}, just claimed"),
            })?;
            let input = books.blob(&record.input_digest).unwrap_or_default();
            let audit = books.audit(run, 1);
            let saved = books.checkpoint_latest(run).map_or(0, |m| m.version);
            let budgeted = has_budget(books, &record);
            Ok((record, input, audit, saved, budgeted))
        })?;
        let Some(handler) = self.shared.handler(&record.agent_version) else {
            // Claimed by the filter, so registered; a race with nothing.
            return Ok(Driven::Skipped(format!(
                "no handler of {} is registered here",
                record.agent_version
            )));
        };
        match record.state {
            RunState::Pending => {
                let moved = engine.transition(Transition {
                    run: run.clone(),
                    guard: watch.guard.clone(),
                    to: RunState::Running,
                    expected_version: None,
                    reason: format!("{} starts", record.agent_version),
                });
                if let Err(e) = moved {
                    return settle_refusal(e);
                }
            }
            RunState::Compensating => return self.compensate(watch, "the run failed"),
            RunState::Running => {}
            // Paused, waiting or over: nothing for a worker to do.
            other => return Ok(Driven::Skipped(format!("the run is {other}"))),
        }
        let journal = ctx::journal_of(&audit);
        // Versions an operator's retry or fork saved are not the handler's.
        let (reopened, restored) = ctx::retries_of(&audit);
        let mut ctx = RunCtx {
            shared: &self.shared,
            run: run.clone(),
            agent: record.agent_version.clone(),
            trace_id: record.trace_id.clone(),
            watch: watch.clone(),
            input,
            journal,
            calls: 0,
            decisions: 0,
            checkpoints: 0,
            saved_checkpoints: saved.saturating_sub(restored),
            pending: None,
            used: Default::default(),
            budgeted,
            reopened,
        };
        let returned = catch_unwind(AssertUnwindSafe(|| handler(&mut ctx)));
        let returned = match returned {
            Ok(returned) => returned,
            Err(panic) => {
                self.shared
                    .counters
                    .panicked
                    .fetch_add(1, Ordering::Relaxed);
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_string());
                Err(Fail::failed(format!("the handler panicked: {what}")))
            }
        };
        match returned {
            Ok(output) => self.complete(&mut ctx, &output),
            Err(Fail::Failed { reason }) => self.fail(watch, &reason),
            Err(Fail::Stopped(stop)) => self.stopped(watch, stop),
        }
    }

    /// The handler returned: the pending checkpoint, the output and the
    /// move to completed land in one commit, if the journal was used up.
    fn complete(&self, ctx: &mut RunCtx<'_>, output: &[u8]) -> Result<Driven> {
        if let Some(recorded) = ctx.journal.get(ctx.calls as usize) {
            let divergence = Divergence {
                run: ctx.run.clone(),
                call: ctx.calls + 1,
                recorded: recorded.to_string(),
                called: "nothing: the handler returned".to_string(),
            };
            return self.stopped(&ctx.watch, Stop::Diverged(divergence));
        }
        let mut batch = Vec::new();
        if let Some(state) = ctx.pending.take() {
            batch.push(ctx.save_command(STATE_PART, &state));
        }
        batch.push(ctx.save_command(OUTPUT_PART, output));
        batch.push(Command::Transition(Transition {
            run: ctx.run.clone(),
            guard: ctx.watch.guard.clone(),
            to: RunState::Completed,
            expected_version: None,
            reason: format!("{} returned", ctx.agent),
        }));
        match self.shared.engine.commit_batch(batch) {
            Ok(_) => {
                ctx.watch.let_go();
                Ok(Driven::Completed)
            }
            Err(Error::BatchRefused { cause, .. }) if refuses_the_output(&cause) => {
                let watch = ctx.watch.clone();
                self.fail(&watch, &format!("the run's output was refused: {cause}"))
            }
            Err(e) => settle_refusal(e),
        }
    }

    /// The handler failed the run: it moves to failed, or to compensating
    /// first if its saga has acts to undo, which this worker then drives.
    fn fail(&self, watch: &Arc<LeaseWatch>, reason: &str) -> Result<Driven> {
        let engine = &self.shared.engine;
        let moved = engine.transition(Transition {
            run: watch.run.clone(),
            guard: watch.guard.clone(),
            to: RunState::Failed,
            expected_version: None,
            reason: reason.to_string(),
        });
        match moved {
            Ok(moved) if moved.to == RunState::Compensating => self.compensate(watch, reason),
            Ok(moved) => {
                watch.let_go();
                Ok(Driven::Ended(moved.to))
            }
            Err(e) => settle_refusal(e),
        }
    }

    /// Runs the saga of a compensating run with the registered undo
    /// handlers; an undo tool nobody registered fails for good (the saga
    /// then waits for an operator: `actum stuck` lists it).
    fn compensate(&self, watch: &Arc<LeaseWatch>, rationale: &str) -> Result<Driven> {
        let engine = &self.shared.engine;
        let call = |ctx: &EffectCtx, c: &crate::books::Compensation, query: bool| {
            // As for a step's act: an undo is sent only under a live lease,
            // else a successor may send it too.
            // Unknown, not failed: a resend's earlier request may have
            // landed, and whoever holds the run now resends or asks.
            if !query && !watch.keep(engine) {
                return ToolOutcome::Unknown {
                    reason: "not sent: the lease was lost".to_string(),
                };
            }
            let deadline_ms = watch.act_deadline_ms();
            if !query && engine.clock().now_ms() > deadline_ms {
                return ToolOutcome::Unknown {
                    reason: "not sent: past the undo's deadline".to_string(),
                };
            }
            if query && let Some(reason) = self.not_yet_asked(watch, &ctx.key, &c.tool) {
                return ToolOutcome::Unknown { reason };
            }
            let undos = self
                .shared
                .undos
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            let Some(undo) = undos.get(&c.tool).cloned() else {
                return ToolOutcome::Failed {
                    retryable: false,
                    reason: format!("no undo handler is registered for tool {}", c.tool),
                };
            };
            drop(undos);
            undo(&UndoCall {
                ctx,
                args: &c.args,
                receipt: ctx.act_receipt.as_deref(),
                query,
                deadline_ms,
            })
        };
        // Each pass resolves at most one open act, then the saga goes on;
        // a saga has at most one open act per step.
        for _ in 0..SAGA_RESOLVES_MAX {
            let progress = engine.run_saga(
                &watch.guard,
                &watch.run,
                rationale,
                |ctx, c| call(ctx, c, false),
                |ctx, c| call(ctx, c, true),
            );
            match progress {
                Ok(SagaProgress::Ended { state, .. }) => {
                    watch.let_go();
                    return Ok(Driven::Ended(state));
                }
                Ok(SagaProgress::Blocked {
                    next: SagaNext::Resolve { key },
                    ..
                }) => match self.resolve_open_act(watch, &key, rationale) {
                    Ok(true) => {}
                    Ok(false) => return Ok(Driven::Compensating),
                    Err(e) => return settle_refusal(e),
                },
                Ok(_) => return Ok(Driven::Compensating),
                Err(e) => return settle_refusal(e),
            }
        }
        Ok(Driven::Compensating)
    }

    /// Asks the registered query of `key`'s tool about an act a
    /// compensating run left without an outcome, and records what it
    /// found; false if it cannot be asked (yet): no registered query, or a
    /// request that may still arrive.
    fn resolve_open_act(
        &self,
        watch: &Arc<LeaseWatch>,
        key: &crate::books::EffectKey,
        rationale: &str,
    ) -> Result<bool> {
        let engine = &self.shared.engine;
        let Some(entry) = engine.effect(key)? else {
            return Ok(false);
        };
        let Some(tool) = self.shared.registered_tool(&entry.tool) else {
            return Ok(false);
        };
        let Some(query) = tool.query.clone() else {
            return Ok(false);
        };
        if entry.tool_class != ToolClass::Queryable
            || self.not_yet_asked(watch, key, &entry.tool).is_some()
        {
            return Ok(false);
        }
        let Some(args) = engine.effect_args(key)? else {
            return Ok(false);
        };
        let request = StepRequest {
            guard: &watch.guard,
            run: &watch.run,
            step: key.step(),
            tool: ToolSpec {
                name: entry.tool.clone(),
                class: entry.tool_class,
            },
            args: &args,
            rationale,
            compensation: entry.compensation.clone(),
        };
        match engine.begin_step(&request)? {
            StepPlan::Query(ctx) => {
                let found = query(&Call {
                    key: &ctx.key,
                    idempotency_key: ctx.key.tool_key(),
                    token: ctx.token,
                    resend: false,
                    deadline_ms: watch.act_deadline_ms(),
                });
                engine.resolve_step(&watch.guard, &ctx, found)?;
                Ok(true)
            }
            StepPlan::Done(_) => Ok(true),
            // A queryable tool's open act is asked, never acted again.
            StepPlan::Act(_) => Ok(false),
        }
    }

    /// Why the saga may not ask about `key`'s request yet: its tool
    /// (registered) ignores fencing tokens and the request may still
    /// arrive, or it declares no lifetime; `None` if it may ask.
    fn not_yet_asked(
        &self,
        watch: &LeaseWatch,
        key: &crate::books::EffectKey,
        tool: &str,
    ) -> Option<String> {
        let fencing = self.shared.registered_tool(tool)?.fencing();
        let Fencing::Ignores {
            request_lifetime_ms,
        } = fencing
        else {
            return None;
        };
        let engine = &self.shared.engine;
        if engine.planted(crate::planted::PlantedBug::SagaQueriesAtOnce) {
            return None;
        }
        let Some(lifetime_ms) = request_lifetime_ms else {
            return Some(format!(
                "tool {tool} ignores fencing tokens and declares no request lifetime, so no \
                 query can tell whether the request is still on its way: reconcile it"
            ));
        };
        let sent_by = match ctx::request_sent_by(
            engine,
            &watch.run,
            key,
            watch.guard.token,
            watch.expires_ms(),
        ) {
            Ok(sent_by) => sent_by,
            Err(e) => return Some(format!("the journal could not be read: {e}")),
        };
        let until = sent_by.saturating_add(lifetime_ms);
        (engine.clock().now_ms() < until).then(|| {
            format!(
                "not asked yet: a request to {tool}, which ignores fencing tokens, may arrive \
                 until {until} ms"
            )
        })
    }

    /// The runtime stopped the handler: what becomes of the run.
    fn stopped(&self, watch: &Arc<LeaseWatch>, stop: Stop) -> Result<Driven> {
        match stop {
            Stop::Parked { step } => Ok(Driven::Parked(step)),
            Stop::LeaseLost { .. } => Ok(Driven::LeaseLost),
            Stop::ShuttingDown => Ok(Driven::ShutDown),
            Stop::Diverged(divergence) => self.pause(watch, divergence.to_string()),
            Stop::OutcomeUnknown { key, reason } => self.pause(
                watch,
                format!(
                    "the outcome of {key} is unknown ({reason}): reconcile it, then resume the run"
                ),
            ),
            // A refused hold paused the run in its commit; a refused begin
            // did not: pausing again changes nothing, so pause either way.
            // The lease is released, so a resume makes it claimable at once.
            Stop::BudgetExhausted { reason } => self.pause(
                watch,
                format!(
                    "the budget has no room for the next call ({reason}): raise it, then \
                     resume the run"
                ),
            ),
            Stop::Engine(e) if e.is_transient() => Ok(Driven::Interrupted(e.to_string())),
            Stop::Engine(e) if stops_the_worker(&e) => Err(e),
            Stop::Engine(e) => self.fail(watch, &format!("the engine refused a call: {e}")),
        }
    }

    /// Pauses the run for an operator, journaling why.
    fn pause(&self, watch: &Arc<LeaseWatch>, reason: String) -> Result<Driven> {
        match self.shared.engine.operate(
            &watch.run,
            OperatorAction::Pause,
            &self.shared.options.worker,
            &reason,
        ) {
            Ok(_) => Ok(Driven::Paused(reason)),
            Err(e) => settle_refusal(e),
        }
    }
}

/// True if the run or an ancestor it draws on has budget limits: its model
/// calls and acts then reserve and settle (an unlimited run pays nothing
/// for the check but this read).
fn has_budget(books: &dyn crate::books::BooksRead, run: &crate::books::Run) -> bool {
    const ANCESTORS_MAX: usize = 32;
    let limited = |id: &RunId| books.budget(id).is_some_and(|b| b.limits.is_some());
    if limited(&run.id) {
        return true;
    }
    let mut parent = run.parent.clone();
    for _ in 0..ANCESTORS_MAX {
        let Some(id) = parent else {
            return false;
        };
        if limited(&id) {
            return true;
        }
        parent = books.run(&id).and_then(|r| r.parent);
    }
    false
}

/// An engine error that stops a worker rather than a run: the engine
/// halted, or cannot read or write its files.
fn stops_the_worker(e: &Error) -> bool {
    matches!(
        e,
        Error::Halted { .. }
            | Error::Io { .. }
            | Error::Poisoned { .. }
            | Error::StateStore { .. }
            | Error::Corrupt { .. }
            | Error::Inconsistent { .. }
    )
}

/// A refusal of the output itself (too large), not of the lease.
fn refuses_the_output(cause: &Error) -> bool {
    matches!(cause, Error::TooLarge { .. } | Error::InvalidCommand { .. })
}

/// A refused end (complete, fail, pause): the lease was lost or the run
/// moved meanwhile, so whoever holds it now goes on; an engine failure
/// stops the worker.
fn settle_refusal(e: Error) -> Result<Driven> {
    let cause = match &e {
        Error::BatchRefused { cause, .. } => cause.as_ref(),
        other => other,
    };
    if cause.is_transient() {
        return Ok(Driven::Interrupted(cause.to_string()));
    }
    if stops_the_worker(cause) {
        return Err(e);
    }
    Ok(Driven::LeaseLost)
}

#[cfg(test)]
mod tests;

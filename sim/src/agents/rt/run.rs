//! One seed of the runtime family: the phases and the end checks.
//!
//! The first process starts the runs (`Runtime::start`). The fault phase
//! then draws events from the seed: a worker's turn (`work_once`), time
//! passing, a person answering a wait (an approval, possibly a rejection;
//! the bank's signal), a person settling the outcome of a paused run from
//! the world's records, a power cut armed some I/O calls ahead, or one
//! now. Inside the turns, the tools' fates, stalls, deaths just after a
//! send and the clock's jumps come from the seed too ([`super::world`],
//! [`super::clock`]). After every crash the process comes back: the disk
//! tears what was not synced, the engine recovers, a new runtime registers
//! the same handlers, and every run it answered completed must still be
//! completed, with its output. Then the faults stop and every run must
//! end; the books and the world are compared at the end.
//!
//! **Invariant:** one seed determines the whole run: one thread, every
//! choice drawn from generators forked from the seed in a fixed order.

use std::path::Path;
use std::sync::Arc;

use actum::books::{
    BooksRead, BooksWrite, EffectStatus, Join, MemBooks, OperatorAction, RunId, RunState, WaitFor,
    WorkerId,
};
use actum::db::DbOptions;
use actum::runtime::{Runtime, RuntimeOptions};
use actum::wal::WalOptions;
use actum::{Clock, DatabaseId, Engine, EngineOptions, Storage};

use super::agents::{self, Kind};
use super::clock::TickingClock;
use super::report::RuntimeReport;
use super::versions::{
    DIVERGED_NEVER_ACTS, Deploy, MOVE_JOURNALED, diverged_never_acts, moves_are_journaled,
};
use super::world::Shared;
use crate::agents::sim::research_budget;
use crate::agents::worker::DECISION_HOLD;
use crate::agents::{AgentConfig, AgentFailure, DB_DIR, History, Origin, START_MS};
use crate::check;
use crate::clock::SimClock;
use crate::disk::{FaultConfig, SimDisk};
use crate::rng::Rng;
use crate::world::CALL_TIMEOUT_MS;

/// The invariant a wait ended off its terms breaks (a wait for all of a
/// fan-out's children ended early, ...).
pub const WAITS_KEEP_TERMS: &str = "a wait ends only on its own terms";
/// The lease the runtime's handlers hold: longer than a call can take
/// (a timeout), so only a stall or a jump lets it run out under a call.
pub const LEASE_TTL_MS: u64 = 4 * CALL_TIMEOUT_MS;
/// Workers (ids `rt0`, `rt1`, ...).
const WORKERS: usize = 3;
/// Runs a seed starts, at most.
const RUNS_MAX: u64 = 6;
/// Chance per clock read of a jump in the fault phase, ppm.
const JUMP_PPM: u32 = 20_000;
/// The most I/O calls ahead a power cut is armed.
const CRASH_AFTER_OPS_MAX: u64 = 80;
/// Recoveries tried before faults are switched off to let one succeed.
const RECOVERY_ATTEMPTS_MAX: u32 = 8;
/// Rounds of the calm phase before a run still going is a failure.
const CALM_ROUNDS_MAX: u32 = 400;
/// One hour, in ms.
const HOUR_MS: u64 = 3_600_000;
/// The person's name in operator commands.
const PERSON: &str = "sim-operator";

/// Runs one seed of the runtime family.
pub fn run_runtime_seed(seed: u64, config: &AgentConfig) -> Result<RuntimeReport, AgentFailure> {
    let mut sim = RtSim::new(seed, config);
    let result = sim.run();
    sim.shared.set_runtime(None);
    result
}

/// The lines of a seed's history (to replay a failure).
pub fn runtime_history(seed: u64, config: &AgentConfig) -> Result<Vec<String>, AgentFailure> {
    let config = AgentConfig {
        history: true,
        ..config.clone()
    };
    let mut sim = RtSim::new(seed, &config);
    let result = sim.run();
    let lines = sim.shared.state().history.lines().to_vec();
    sim.shared.set_runtime(None);
    result.map(|_| lines)
}

struct RtSim {
    seed: u64,
    config: AgentConfig,
    shared: Arc<Shared>,
    storage: Arc<dyn Storage>,
    events: Rng,
    crashes: Rng,
    runs: Vec<(RunId, Kind)>,
    /// The searches each research run's budget allows (its child's too).
    budgets: Vec<(RunId, u64)>,
    /// Each run's input, in the order of `runs`.
    inputs: Vec<Vec<u8>>,
    checkpoint_every_records: u64,
    /// What the process serves: version 1, then, once it came back as a
    /// redeploy, version 2 too (and stays so).
    deploy: Deploy,
}

impl RtSim {
    fn new(seed: u64, config: &AgentConfig) -> RtSim {
        let mut root = Rng::new(seed ^ 0x5255_4e54_494d_4521);
        let mut faults = FaultConfig::crash_only();
        faults.sector_atomic_suffixes = vec![".redb".to_owned()];
        let disk = SimDisk::new(root.fork("disk"), faults);
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let clock = Arc::new(TickingClock::new(
            SimClock::new(START_MS),
            root.fork("clock"),
            JUMP_PPM,
            (LEASE_TTL_MS / 2, 2 * LEASE_TTL_MS),
        ));
        let workers = (0..WORKERS)
            .map(|w| WorkerId::new(format!("rt{w}")).expect("a valid worker id"))
            .collect();
        let history = History::new(config.history, START_MS);
        let fates = root.fork("fates");
        let mut plan = root.fork("runs");
        let count = 2 + plan.below(RUNS_MAX - 1);
        let runs: Vec<(RunId, Kind)> = (0..count)
            .map(|i| {
                let kind = *plan.pick(&Kind::ALL);
                let run = RunId::new(format!("{}-{i}", kind.name())).expect("a valid run id");
                (run, kind)
            })
            .collect();
        // What each run starts from: its id and a topic (a research run's
        // fan-out is drawn from it).
        let inputs = runs
            .iter()
            .map(|(run, _)| format!("{run} on topic {}", plan.below(1_000)).into_bytes())
            .collect();
        let budgets = runs
            .iter()
            .filter(|(_, kind)| *kind == Kind::Research)
            .map(|(run, _)| (run.clone(), plan.below(6)))
            .collect();
        let checkpoint_every_records = 8 + plan.below(120);
        let events = root.fork("events");
        let crashes = root.fork("crashes");
        let operator = root.fork("operator");
        let shared = Arc::new(Shared::new(
            clock,
            disk,
            workers,
            LEASE_TTL_MS,
            (fates, operator),
            history,
        ));
        RtSim {
            seed,
            config: config.clone(),
            shared,
            storage,
            events,
            crashes,
            runs,
            budgets,
            inputs,
            checkpoint_every_records,
            deploy: Deploy::First,
        }
    }

    fn fail(&self, invariant: &'static str, detail: impl Into<String>) -> AgentFailure {
        AgentFailure {
            seed: self.seed,
            invariant,
            detail: detail.into(),
            planted: self.config.planted,
            history: self.shared.state().history.lines().to_vec(),
            origin: Origin::Runtime,
        }
    }

    /// The first violation the handlers' calls recorded, as a failure.
    fn violated(&self) -> Result<(), AgentFailure> {
        let violation = self.shared.state().violation.clone();
        match violation {
            Some((invariant, detail)) => Err(self.fail(invariant, detail)),
            None => Ok(()),
        }
    }

    fn options(&self) -> EngineOptions {
        EngineOptions {
            db: DbOptions {
                wal: WalOptions {
                    segment_size_bytes: 32 * 1024,
                    max_record_bytes: 8 * 1024,
                    planted_bug: self.config.planted,
                    ..WalOptions::default()
                },
                database_id: Some(DatabaseId(u128::from(self.seed) << 2 | 1)),
            },
            verify_state_on_open: true,
            checkpoint_every_records: self.checkpoint_every_records,
            checkpoint_every_bytes: 0,
            retention: actum::engine::Retention::default(),
            // The operators send their requests to `Engine::carry_out`, the
            // handler the channel calls; a socket is no simulated file.
            operator_channel: false,
            // Every clean close that finds a sixteenth of the state store
            // free (after a session that wrote a sixteenth of it) compacts
            // it, under the simulator's faults.
            compact_at_close_free_bytes: 1,
            // Every open checks the claim rows against the run rows.
            check_live_claims: true,
        }
    }

    fn run(&mut self) -> Result<RuntimeReport, AgentFailure> {
        self.recover()?;
        let runtime = self.shared.runtime().expect("recovered");
        for ((run, kind), input) in self.runs.iter().zip(&self.inputs) {
            runtime
                .start(kind.name(), run.as_str(), input)
                .map_err(|e| self.fail("runs can be started", e.to_string()))?;
        }
        for (run, searches) in &self.budgets {
            runtime
                .engine()
                .set_budget(
                    run,
                    research_budget(*searches),
                    PERSON,
                    "the research budget",
                )
                .map_err(|e| self.fail("budgets can be set", e.to_string()))?;
        }
        drop(runtime);
        self.shared.state().report.runs = self.runs.len() as u64;
        for _ in 0..self.config.events {
            self.event()?;
            if self.shared.state().serves_v2 && !self.shared.dead() {
                let live: Vec<RunId> = self.live_runs().into_iter().map(|(r, _)| r).collect();
                self.shared.maybe_move_some(&live);
            }
            self.violated()?;
            if self.shared.dead() {
                self.crash()?;
            }
        }
        self.calm()?;
        self.finish()
    }

    /// One event of the fault phase.
    fn event(&mut self) -> Result<(), AgentFailure> {
        self.deliver();
        let roll = self.events.below(100);
        match roll {
            0..66 => {
                let w = self.events.below(WORKERS as u64) as usize;
                self.shared.turn(w);
            }
            66..80 => {
                let ms = 1 + self.events.below(HOUR_MS / 4);
                self.shared.clock.advance_ms(ms);
            }
            80..88 => {
                let rejects = self.events.below(8) == 0;
                self.answer_waits(rejects)?;
            }
            88..94 => self.settle_for_person()?,
            94 => self.cancel_one(),
            95..99 => {
                let after = self.events.below(CRASH_AFTER_OPS_MAX);
                self.shared
                    .note(|| format!("a power cut is armed {after} I/O calls ahead"));
                self.shared.disk.set_crash_after_ops(after);
            }
            _ => {
                self.shared.note(|| "the power goes".to_string());
                self.shared.disk.set_crash_after_ops(0);
            }
        }
        Ok(())
    }

    /// The world delivers the requests due (those whose senders died
    /// arrive all the same).
    fn deliver(&self) {
        let now = self.shared.clock.peek();
        self.shared.state().world.deliver_due(now);
    }

    /// The process dies: the runtime and engine go, the disk loses what was
    /// not synced, the world's replies go unread; then it comes back.
    fn crash(&mut self) -> Result<(), AgentFailure> {
        self.shared.note(|| "CRASH".to_string());
        if !self.shared.dead() {
            self.shared.disk.set_crash_after_ops(0);
        }
        self.shared.set_runtime(None);
        self.shared.disk.crash(&mut self.crashes);
        {
            let mut state = self.shared.state();
            state.report.crashes += 1;
            state.world.forget_replies();
        }
        self.recover()
    }

    /// Opens the engine (perhaps crashing again during recovery), starts a
    /// runtime with every handler, and checks the completed runs survived.
    fn recover(&mut self) -> Result<(), AgentFailure> {
        let calm = self.shared.state().calm;
        let mut last_error = String::new();
        for attempt in 0..=RECOVERY_ATTEMPTS_MAX {
            if attempt == RECOVERY_ATTEMPTS_MAX {
                self.shared.disk.stop_faults();
            } else if !calm && self.crashes.below(8) == 0 {
                let after = self.crashes.below(CRASH_AFTER_OPS_MAX);
                self.shared.disk.set_crash_after_ops(after);
            }
            let clock: Arc<dyn Clock> = self.shared.clock.clone();
            let opened = Engine::open_with(
                Arc::clone(&self.storage),
                clock,
                Path::new(DB_DIR),
                self.options(),
            );
            match opened {
                Ok(engine) => {
                    self.shared.disk.disarm_crash();
                    let options = RuntimeOptions {
                        worker: "rt".to_string(),
                        lease_ttl_ms: LEASE_TTL_MS,
                        idle_ms: 0,
                        decision_hold: DECISION_HOLD,
                    };
                    let runtime = Runtime::with_options(Arc::new(engine), options);
                    // A crashed process may come back as a redeploy.
                    if self.deploy == Deploy::First
                        && self.shared.state().report.crashes > 0
                        && self.crashes.below(2) == 0
                    {
                        // Half of the redeploys ship the broken research
                        // handler; the rest keep version 1 beside version 2
                        // or register 2 as compatible with it.
                        self.deploy = match self.shared.state().operator.below(4) {
                            0 => Deploy::SideBySide,
                            1 => Deploy::Compatible,
                            _ => Deploy::Broken,
                        };
                    }
                    agents::register(&runtime, &self.shared, self.deploy)
                        .map_err(|e| self.fail("handlers register", e.to_string()))?;
                    self.shared.state().serves_v2 = self.deploy != Deploy::First;
                    self.shared.set_runtime(Some(Arc::new(runtime)));
                    return self.completed_survive();
                }
                Err(e) if self.shared.dead() => {
                    self.shared.note(|| format!("CRASH during recovery: {e}"));
                    last_error = e.to_string();
                    self.shared.disk.crash(&mut self.crashes);
                    self.shared.state().report.crashes += 1;
                }
                Err(e) => {
                    return Err(self.fail(
                        "recovery succeeds without faults",
                        format!("opening the engine failed with the power on: {e}"),
                    ));
                }
            }
        }
        Err(self.fail(
            "recovery succeeds without faults",
            format!("recovery still failed after faults were switched off: {last_error}"),
        ))
    }

    /// Every run the runtime answered completed is completed in the
    /// recovered books, and its output is there.
    fn completed_survive(&self) -> Result<(), AgentFailure> {
        const INVARIANT: &str = "a run the runtime completed stays completed, with its output";
        let runtime = self.shared.runtime().expect("recovered");
        let completed: Vec<RunId> = self.shared.state().completed.iter().cloned().collect();
        for run in completed {
            let state = runtime.engine().run(&run).ok().flatten().map(|r| r.state);
            if state != Some(RunState::Completed) {
                return Err(self.fail(INVARIANT, format!("{run} is {state:?} after recovery")));
            }
            match runtime.output(&run) {
                Ok(Some(_)) => {}
                other => {
                    return Err(self.fail(INVARIANT, format!("{run}'s output reads {other:?}")));
                }
            }
            self.shared.state().report.checks += 1;
        }
        Ok(())
    }

    /// The runs not over, with their state.
    fn live_runs(&self) -> Vec<(RunId, RunState)> {
        let Some(engine) = self.shared.engine() else {
            return Vec::new();
        };
        let mut live = Vec::new();
        let mut after: Option<RunId> = None;
        loop {
            let Ok(page) = engine.runs(None, after.as_ref(), 50) else {
                return live;
            };
            let Some(last) = page.last() else {
                return live;
            };
            after = Some(last.id.clone());
            live.extend(
                page.iter()
                    .filter(|r| !r.state.is_terminal())
                    .map(|r| (r.id.clone(), r.state)),
            );
        }
    }

    /// A person answers the open waits: approves what finance is asked
    /// (or, if `rejects`, rejects it), and the bank signals.
    fn answer_waits(&mut self, rejects: bool) -> Result<(), AgentFailure> {
        let Some(engine) = self.shared.engine() else {
            return Ok(());
        };
        for (run, state) in self.live_runs() {
            if self.shared.dead() {
                continue;
            }
            let waiting = matches!(state, RunState::WaitingTool | RunState::WaitingHuman);
            if !waiting {
                // The screening service's webhook may come before its
                // caller waits for it.
                if self.events.below(4) == 0 {
                    self.shared.webhook(&run, false);
                }
                continue;
            }
            let Ok(book) = engine.waits(&run) else {
                continue;
            };
            let Some(wait) = book.open_wait().cloned() else {
                continue;
            };
            let answered = match &wait.wait_for {
                WaitFor::Approval { args_digest, role } => engine
                    .decide_approval(
                        &run,
                        &wait.step,
                        *args_digest,
                        "ann",
                        role,
                        !rejects,
                        "checked the invoice",
                    )
                    .map(|_| ()),
                WaitFor::Signal { name } => engine
                    .signal(
                        &run,
                        name,
                        format!("{name} for {run}").as_bytes(),
                        "bank-webhook",
                    )
                    .map(|_| ()),
                WaitFor::Reply { .. } => {
                    // The webhook comes late (not this time), once, or
                    // twice.
                    match self.events.below(4) {
                        0 => {}
                        1 => self.shared.webhook(&run, true),
                        _ => self.shared.webhook(&run, false),
                    }
                    continue;
                }
                _ => continue,
            };
            self.shared.note(|| {
                format!(
                    "a person answers {run}'s wait at {}: {answered:?}",
                    wait.step
                )
            });
            if answered.is_ok() {
                self.shared.state().report.answers += 1;
            }
        }
        Ok(())
    }

    /// The team rolls back a broken deploy: the process restarts serving
    /// version 1's code for the runs of version 1 and version 2's beside it
    /// ([`Deploy::RolledBack`]); the runs paused as diverged are resumed by
    /// the person afterwards.
    fn roll_back(&mut self) -> Result<(), AgentFailure> {
        self.shared
            .note(|| "the team rolls back the broken deploy".to_string());
        self.deploy = Deploy::RolledBack;
        self.shared.state().report.rollbacks += 1;
        let Some(engine) = self.shared.engine() else {
            return self.recover();
        };
        self.shared.set_runtime(None);
        let closed = Arc::try_unwrap(engine).map(actum::Engine::close);
        match closed {
            Ok(Ok(())) => self.recover(),
            // The power went while it closed (or a call still holds it):
            // the restart is a crash.
            _ => self.crash(),
        }
    }

    /// A person settles what a paused or compensating run waits on: each
    /// outcome the books do not know, from the world's records; then
    /// resumes the paused runs.
    fn settle_for_person(&mut self) -> Result<(), AgentFailure> {
        let Some(engine) = self.shared.engine() else {
            return Ok(());
        };
        let mut roll_back = false;
        for (run, state) in self.live_runs() {
            if !matches!(state, RunState::Paused | RunState::Compensating) || self.shared.dead() {
                continue;
            }
            let Ok(effects) = engine.effects(&run) else {
                continue;
            };
            for entry in effects {
                if !matches!(
                    entry.status,
                    EffectStatus::Unknown { .. } | EffectStatus::Intended
                ) {
                    continue;
                }
                let found = self.shared.state().world.person_checks(&entry.key);
                let Some(found) = found else {
                    continue; // a request is still on its way
                };
                let settled = engine.deliver_reply(&entry.key, found, "a person checked");
                self.shared
                    .note(|| format!("a person settles {}: {settled:?}", entry.key));
                if settled.is_ok() {
                    self.shared.state().report.reconciled += 1;
                }
            }
            if state == RunState::Paused {
                if self.shared.state().diverged.contains(&run) {
                    if self.deploy == Deploy::Broken {
                        // The fix is a deploy, not a resume: roll back first.
                        roll_back = true;
                        continue;
                    }
                    // This version's handler cannot replay the run's
                    // journal: put the run where the code that wrote it runs.
                    self.shared.move_to_matching_version(&run);
                }
                self.raise_spent_budget(&engine, &run);
                let resumed = engine.operate(&run, OperatorAction::Resume, PERSON, "settled");
                self.shared
                    .note(|| format!("a person resumes {run}: {resumed:?}"));
            }
        }
        drop(engine);
        if roll_back {
            self.roll_back()?;
        }
        super::retries::retry_some(&self.shared)
            .map_err(|(invariant, detail)| self.fail(invariant, detail))
    }

    /// Raises by one search, or by one model call's tokens, the budget
    /// that stops `run`, its own or the nearest ancestor's it draws on, if
    /// its searches or its tokens are spent (settled or held).
    fn raise_spent_budget(&self, engine: &Engine, run: &RunId) {
        let mut next = Some(run.clone());
        while let Some(id) = next {
            next = engine.run(&id).ok().flatten().and_then(|r| r.parent);
            let Ok(book) = engine.budget(&id) else {
                continue;
            };
            let Some(limits) = book.limits else {
                continue;
            };
            let used = book.spent.tool_calls + book.reserved.tool_calls;
            let tokens = book.spent.tokens_in + book.reserved.tokens_in;
            let ask = DECISION_HOLD.tokens_in;
            let raised = if limits.tool_calls.is_some_and(|c| c <= used) {
                actum::books::BudgetLimits {
                    tool_calls: Some(used + 1),
                    ..limits
                }
            } else if limits.tokens_in.is_some_and(|t| t < tokens + ask) {
                actum::books::BudgetLimits {
                    tokens_in: Some(tokens + ask),
                    ..limits
                }
            } else {
                continue;
            };
            let set = engine.set_budget(&id, raised, PERSON, "one more call");
            self.shared.note(|| {
                format!(
                    "a person raises {id}'s budget to {:?} searches, {:?} tokens in: {set:?}",
                    raised.tool_calls, raised.tokens_in
                )
            });
            if set.is_ok() {
                self.shared.state().report.budgets_raised += 1;
            }
            return;
        }
    }

    /// An operator cancels one run not over, drawn from the seed: a
    /// running one stops at its holder's next call, a waiting parent takes
    /// its child along, one with acts to undo compensates first.
    fn cancel_one(&mut self) {
        let live = self.live_runs();
        if live.is_empty() {
            return;
        }
        let (run, state) = live[self.events.below(live.len() as u64) as usize].clone();
        let Some(engine) = self.shared.engine() else {
            return;
        };
        let cancelled = engine.operate(&run, OperatorAction::Cancel, PERSON, "no longer wanted");
        self.shared
            .note(|| format!("an operator cancels {run} ({state}): {cancelled:?}"));
        if cancelled.is_ok() {
            self.shared.state().report.cancels += 1;
        }
    }

    /// The faults stop; every run must end.
    fn calm(&mut self) -> Result<(), AgentFailure> {
        self.shared.note(|| "the faults stop".to_string());
        self.shared.disk.stop_faults();
        self.shared.disk.disarm_crash();
        self.shared.clock.calm();
        self.shared.state().calm = true;
        if self.shared.dead() {
            self.crash()?;
        }
        let rejects = self.events.below(6) == 0;
        for _ in 0..CALM_ROUNDS_MAX {
            let live = self.live_runs();
            if live.is_empty() {
                return Ok(());
            }
            self.deliver();
            self.settle_for_person()?;
            self.answer_waits(rejects)?;
            let before = self.shared.state().report.turns;
            for w in 0..WORKERS {
                self.shared.turn(w);
            }
            self.violated()?;
            if self.shared.dead() {
                return Err(self.fail(
                    "no error without a fault",
                    "the process died after the faults stopped",
                ));
            }
            if self.shared.state().report.turns == before {
                // Nothing to claim: let time run to the next deadline.
                self.shared.clock.advance_ms(HOUR_MS);
            }
        }
        let live = self.live_runs();
        // A run stuck because a wait ended off its terms (a parent gone on
        // without its children) is named by that cause.
        if let Some(engine) = self.shared.engine() {
            let books = self.books(&engine)?;
            check::waits_keep_their_terms(&books).map_err(|e| self.fail(WAITS_KEEP_TERMS, e))?;
            diverged_never_acts(&books).map_err(|e| self.fail(DIVERGED_NEVER_ACTS, e))?;
        }
        Err(self.fail(
            "every run ends once the faults stop",
            format!("after {CALM_ROUNDS_MAX} calm rounds still going: {live:?}"),
        ))
    }

    /// The books as a reference model holds them, read from the engine.
    fn books(&self, engine: &Engine) -> Result<MemBooks, AgentFailure> {
        let mut ids = Vec::new();
        let mut after: Option<RunId> = None;
        loop {
            let page = engine
                .runs(None, after.as_ref(), 50)
                .map_err(|e| self.fail("the books can be read", e.to_string()))?;
            let Some(last) = page.last() else { break };
            after = Some(last.id.clone());
            ids.extend(page.into_iter().map(|r| r.id));
        }
        engine
            .read(|books| {
                let mut mem = MemBooks::new();
                for id in &ids {
                    let Some(run) = books.run(id) else { continue };
                    mem.put_run(run);
                    for entry in books.effects_of(id) {
                        // A receipt kept by digest comes with its blob.
                        for receipt in entry.status.stored_receipts() {
                            if let Some(bytes) = books.blob(&receipt.digest) {
                                mem.put_blob(receipt.digest, bytes);
                            }
                        }
                        mem.put_effect(entry);
                    }
                    if let Some(waits) = books.waits(id) {
                        mem.put_waits(waits);
                    }
                    if let Some(saga) = books.saga(id) {
                        mem.put_saga(saga);
                    }
                    if let Some(budget) = books.budget(id) {
                        mem.put_budget(budget);
                    }
                    for position in 0..books.decision_count(id) {
                        if let Some(record) = books.decision_at(id, position) {
                            mem.put_decision(record);
                        }
                    }
                }
                Ok(mem)
            })
            .map_err(|e| self.fail("the books can be read", e.to_string()))
    }

    /// A clean close and a reopen, then the end-of-run invariants.
    fn finish(&mut self) -> Result<RuntimeReport, AgentFailure> {
        let engine = self.shared.engine().expect("a process is up");
        self.shared.set_runtime(None);
        let engine = Arc::try_unwrap(engine)
            .map_err(|_| self.fail("a clean close succeeds", "the engine is still shared"))?;
        engine
            .close()
            .map_err(|e| self.fail("a clean close succeeds", e.to_string()))?;
        self.recover()?;
        let engine = self.shared.engine().expect("recovered");
        let books = self.books(&engine)?;
        let (log, deliveries, moves) = {
            let state = self.shared.state();
            (
                state.world.log().to_vec(),
                state.world.deliveries().to_vec(),
                state.moves.clone(),
            )
        };
        type Check<'a> = (&'static str, Box<dyn Fn() -> Result<(), String> + 'a>);
        let checks: Vec<Check<'_>> = vec![
            (
                DIVERGED_NEVER_ACTS,
                Box::new(|| diverged_never_acts(&books)),
            ),
            (
                "every run ends once the faults stop",
                Box::new(|| check::every_run_ends_settled(&books)),
            ),
            (
                "every done effect happened exactly once",
                Box::new(|| check::effect_applied_exactly_once(&books, &log)),
            ),
            (
                "no step is applied twice in the world",
                Box::new(|| check::effect_applied_at_most_once(&log)),
            ),
            (
                "the world applied only what the books intended",
                Box::new(|| check::applications_have_intents(&books, &log)),
            ),
            (
                "a saga undoes what its run did, last first, each once",
                Box::new(|| check::sagas_undo_last_first(&books, &log)),
            ),
            (
                WAITS_KEEP_TERMS,
                Box::new(|| check::waits_keep_their_terms(&books)),
            ),
            (
                "a parent's step starts its children, and waits for them",
                Box::new(|| check::children_are_awaited(&books)),
            ),
            (
                "the world refuses stale tokens",
                Box::new(|| check::world_refuses_stale_tokens(&deliveries)),
            ),
            (
                "a budget is never passed",
                Box::new(|| check::budgets_hold(&books, None)),
            ),
            (
                "every call the world saw was paid for",
                Box::new(|| check::calls_are_paid_once(&books, &log)),
            ),
            (
                "a resend carries the same payload",
                Box::new(|| check::resends_carry_the_same_payload(&deliveries)),
            ),
            (
                MOVE_JOURNALED,
                Box::new(|| moves_are_journaled(&engine, &moves)),
            ),
        ];
        for (invariant, check) in &checks {
            check().map_err(|e| self.fail(invariant, e))?;
        }
        self.completed_survive()?;
        let completed_have_output =
            books
                .runs()
                .filter(|r| r.state == RunState::Completed)
                .all(|r| {
                    engine
                        .load_latest(&r.id, actum::runtime::RUNTIME_SCHEMA)
                        .ok()
                        .flatten()
                        .is_some()
                });
        if !completed_have_output {
            return Err(self.fail(
                "a run the runtime completed stays completed, with its output",
                "a completed run has no checkpoint",
            ));
        }
        self.violated()?;
        let mut state = self.shared.state();
        state.report.checks += checks.len() as u64 + 1;
        state.report.applications = log.len() as u64;
        for run in books.runs() {
            let book = BooksRead::waits(&books, &run.id);
            for wait in book.iter().flat_map(|b| &b.waits) {
                if wait.wait_for == WaitFor::Timer && wait.step.as_str().contains(":lifetime-") {
                    state.report.lifetime_waits += 1;
                }
                if let WaitFor::Reply { .. } = wait.wait_for {
                    state.report.reply_waits += 1;
                    state.report.replies_elapsed +=
                        u64::from(wait.status == actum::books::WaitStatus::Elapsed);
                }
                if let WaitFor::Children { join, .. } = wait.wait_for {
                    state.report.fan_outs += 1;
                    state.report.fan_outs_first += u64::from(join == Join::First);
                }
            }
        }
        state.report.jumps = self.shared.clock.jumps();
        Ok(state.report.clone())
    }
}

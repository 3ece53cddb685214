//! [`Sim`]: everything one agent run owns (the simulated disk and clock,
//! the engine process, the world, the workers, the reference model), and
//! the two things every step goes through: [`Sim::call`], which runs one
//! engine call and holds its answer to the reference model, and
//! [`Sim::crash`], the process dying and coming back.
//!
//! **Invariant:** `model` is the books the acknowledged commands build,
//! decided by the same pure `decide` over `MemBooks`; after every recovery
//! the engine's books equal it (with the one command a crash cut off either
//! landed or not).

use actum::Clock;
use std::path::Path;
use std::sync::Arc;

use actum::books::{
    Answer, BooksRead, BooksWrite, BudgetLimits, Command, CreateRun, MemBooks, Reserve, RunId,
    SetBudget, Settle, apply, decide, digest_of,
};
use actum::db::DbOptions;
use actum::engine::{FinishedStep, Look};
use actum::wal::WalOptions;
use actum::{DatabaseId, Engine, EngineOptions, Error, Storage};

use super::config::AgentConfig;
use super::failure::{AgentFailure, Origin};
use super::history::History;
use super::migration::{self, MIGRATION_KEEPS_STATE, SCHEMA_1, SCHEMA_2};
use super::report::AgentReport;
use super::schedule::AgentSchedule;
use super::worker::{DECISION_HOLD, Worker};
use super::workflow::{RESEARCH_ROUNDS, Workflow};
use crate::check::{self, InFlight};
use crate::clock::SimClock;
use crate::disk::SimDisk;
use crate::rng::{PPM_ONE, Rng};
use crate::world::World;

/// The budget of a research run allowed `calls` searches, its summary
/// child's included: its model calls and its child's always fit.
pub fn research_budget(calls: u64) -> BudgetLimits {
    BudgetLimits {
        tool_calls: Some(calls),
        tokens_in: Some(u64::from(RESEARCH_ROUNDS + 1) * DECISION_HOLD.tokens_in),
        ..BudgetLimits::default()
    }
}

/// The database directory on the simulated disk.
pub const DB_DIR: &str = "/agents";
/// Virtual time when a run starts (ms since the epoch).
pub const START_MS: u64 = 1_767_225_600_000;
/// Recoveries tried before faults are switched off to let one succeed.
const RECOVERY_ATTEMPTS_MAX: u32 = 8;
/// I/O calls ahead at most that a power cut during recovery is armed.
const RECOVERY_CRASH_AFTER_OPS_MAX: u64 = 120;

/// What an engine call came to.
pub enum Called<T> {
    /// Acknowledged.
    Ok(T),
    /// Refused by the books (fenced, lease lost, failed step, ...).
    Refused(Error),
    /// The process died during the call (power cut, halted engine).
    Died,
}

/// One agent run in progress.
pub struct Sim<'s> {
    pub(crate) schedule: &'s AgentSchedule,
    pub(crate) config: AgentConfig,
    pub(crate) disk: SimDisk,
    storage: Arc<dyn Storage>,
    pub(crate) clock: SimClock,
    crash_rng: Rng,
    pub(crate) engine: Option<Engine>,
    pub(crate) world: World,
    /// The books the acknowledged commands build (the reference model).
    pub(crate) model: MemBooks,
    /// Every row of the runs retention removed, as the model held them
    /// when they went: the checks of what the world saw need them.
    pub(crate) pruned: MemBooks,
    /// The command a crash may cut off.
    inflight: Option<InFlight>,
    /// Set when the process died; the runner crashes and recovers it.
    pub(crate) dead: bool,
    pub(crate) workers: Vec<Worker>,
    /// The checkpoint schema the process's code writes: schema 1 until
    /// the redeploy (`migration`), schema 2 after it.
    pub(crate) schema: u32,
    pub(crate) runs: Vec<(RunId, Workflow)>,
    /// Tool calls made so far in the fault phase (indexes the fates).
    pub(crate) calls_made: usize,
    /// True once the faults have stopped.
    pub(crate) calm: bool,
    /// Indexes of the fault phase's events at which a worker acted.
    pub(crate) acted_at: Vec<usize>,
    pub(crate) report: AgentReport,
    pub(crate) history: History,
    /// Operators' requests sent so far (names the next request's id).
    pub(crate) requests_sent: u64,
    /// Requests whose answer never came (the process died under them):
    /// their senders send them again, under the same ids, once it is up.
    pub(crate) unanswered: Vec<actum::operator::Request>,
    /// Decides which operator's answers are lost on their way back.
    pub(crate) answer_rng: Rng,
    /// The disk's call count after the last live read passed (`live_read`);
    /// `None` since a crash. No call since then means the same files and
    /// the same process: the snapshot would read what it read, and is not
    /// taken again.
    live_read_at: Option<u64>,
}

impl<'s> Sim<'s> {
    /// A fresh run of `schedule`: an empty disk, the workers, no process.
    pub fn new(schedule: &'s AgentSchedule, config: &AgentConfig) -> Sim<'s> {
        let mut root = Rng::new(schedule.seed);
        let mut faults = schedule.faults.clone();
        // redb needs atomic sector writes for its header (docs/SIMULATION.md).
        faults.sector_atomic_suffixes = vec![".redb".to_owned()];
        let disk = SimDisk::new(root.fork("disk"), faults);
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let runs = schedule
            .runs
            .iter()
            .enumerate()
            .map(|(i, w)| (w.run_id(i), *w))
            .collect();
        let workers = (0..schedule.workers).map(Worker::new).collect();
        Sim {
            schedule,
            config: config.clone(),
            disk,
            storage,
            clock: SimClock::new(START_MS),
            crash_rng: root.fork("crashes"),
            engine: None,
            world: World::new(),
            model: MemBooks::new(),
            pruned: MemBooks::new(),
            inflight: None,
            dead: false,
            workers,
            schema: SCHEMA_1,
            runs,
            calls_made: 0,
            calm: false,
            acted_at: Vec::new(),
            report: AgentReport::default(),
            history: History::new(config.history, START_MS),
            requests_sent: 0,
            unanswered: Vec::new(),
            answer_rng: root.fork("operators' answers"),
            live_read_at: None,
        }
    }

    /// A failure of `invariant`, with the seed, the replay command and, if
    /// recorded, the history.
    pub fn fail(&self, invariant: &'static str, detail: impl Into<String>) -> AgentFailure {
        AgentFailure {
            seed: self.schedule.seed,
            invariant,
            detail: detail.into(),
            planted: self.config.planted,
            history: self.history.lines().to_vec(),
            origin: Origin::Schedule(Box::new(self.schedule.clone())),
        }
    }

    /// Records a history line at the current virtual time.
    pub fn note(&mut self, line: impl FnOnce() -> String) {
        let now = self.clock.now_ms();
        self.history.note(now, line);
    }

    /// The engine options of the campaign: small segments and frequent
    /// checkpoints, so rotation, GC and crashes inside them happen often.
    fn options(&self) -> EngineOptions {
        EngineOptions {
            db: DbOptions {
                wal: WalOptions {
                    segment_size_bytes: 32 * 1024,
                    max_record_bytes: 8 * 1024,
                    planted_bug: self.config.planted,
                    ..WalOptions::default()
                },
                database_id: Some(DatabaseId(u128::from(self.schedule.seed) << 2 | 3)),
            },
            verify_state_on_open: true,
            checkpoint_every_records: self.schedule.checkpoint_every_records,
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

    /// The first process: opens the engine and creates the runs.
    pub fn start(&mut self) -> Result<(), AgentFailure> {
        self.recover()?;
        let mut budgets = Rng::new(self.schedule.seed).fork("budgets");
        for (run, workflow) in self.runs.clone() {
            let cmd = Command::CreateRun(CreateRun {
                run: run.clone(),
                input_digest: digest_of(run.as_str().as_bytes()),
                agent_version: format!("{} agent 1.0", workflow.name()),
                trace_id: format!("trace-{run}"),
                parent: None,
                // Kept in the blob store, so its reference is counted and
                // pruned with the run's, under crashes like the rest.
                input: Some(run.as_str().as_bytes().to_vec()),
            });
            let Command::CreateRun(create) = cmd.clone() else {
                unreachable!()
            };
            match self.call(Some(&cmd), |e| e.create_run(create))? {
                Called::Ok(_) => {}
                Called::Refused(e) => return Err(self.fail("runs can be created", e.to_string())),
                Called::Died => unreachable!("no fault is armed before the first event"),
            }
            self.report.runs += 1;
            if workflow == Workflow::Research {
                // From none of its searches to all of them (its summary's
                // one included): most research runs, or their summaries,
                // exhaust the budget somewhere mid-run.
                let calls = budgets.below(u64::from(RESEARCH_ROUNDS) + 2);
                self.set_budget(&run, research_budget(calls), "its creator")?;
            }
        }
        Ok(())
    }

    /// An operator sets the budget of `run`, held to the model like every
    /// call; a refusal (the run is over) is part of the game.
    pub fn set_budget(
        &mut self,
        run: &RunId,
        limits: BudgetLimits,
        who: &'static str,
    ) -> Result<(), AgentFailure> {
        let set = SetBudget {
            run: run.clone(),
            limits,
            by: "ops".into(),
            reason: format!("set by {who}"),
        };
        let cmd = Command::SetBudget(set.clone());
        let outcome = match self.call(Some(&cmd), |e| {
            e.set_budget(&set.run, set.limits, &set.by, &set.reason)
        })? {
            Called::Ok(()) => "set".to_string(),
            Called::Refused(e) => format!("refused: {e}"),
            Called::Died => "the process died".to_string(),
        };
        self.note(|| format!("{who} sets the budget of {run} to {limits}: {outcome}"));
        Ok(())
    }

    /// Runs one engine call. With `cmd` (the command the call executes),
    /// the reference model decides it too: an acknowledged command must be
    /// one the model accepts (and is applied to it), a refused one one the
    /// model refuses. An error that is not a refusal means the process died.
    pub fn call<T>(
        &mut self,
        cmd: Option<&Command>,
        f: impl FnOnce(&Engine) -> actum::Result<T>,
    ) -> Result<Called<T>, AgentFailure> {
        let now_ms = self.clock.now_ms();
        let engine = self
            .engine
            .as_ref()
            .expect("a process is up between events");
        let expected = cmd.map(|c| decide(&self.model, c, now_ms));
        match f(engine) {
            Ok(value) => {
                if let (Some(cmd), Some(expected)) = (cmd, expected) {
                    self.acknowledged(cmd, expected)?;
                }
                Ok(Called::Ok(value))
            }
            Err(e) if is_refusal(&e) => {
                if let Some(Ok(decided)) = expected {
                    return Err(self.fail(
                        "the engine decides as the reference model does",
                        format!(
                            "the engine refused ({e}) a command the model accepts with {:?}",
                            decided.answer
                        ),
                    ));
                }
                Ok(Called::Refused(e))
            }
            Err(e) => {
                let powered_off = self.disk.is_powered_off();
                if !powered_off && !self.disk.faults().injects_io_errors() {
                    return Err(self.fail(
                        "no error without a fault",
                        format!("the engine failed with no fault injected: {e}"),
                    ));
                }
                self.note(|| format!("   the process dies: {e}"));
                self.inflight = cmd.map(|c| (c.clone(), now_ms));
                self.dead = true;
                Ok(Called::Died)
            }
        }
    }

    /// Runs `finish_step_with`: `finish` (a step's outcome) and `then` (its
    /// follow-ups) committed as one batch, or, if the model refuses the
    /// batch for a follow-up, `finish` alone, as the engine falls back to.
    /// The model decides which command the call commits; the engine must
    /// agree (the follow-ups acknowledged exactly when the model accepts
    /// the batch).
    pub fn call_finish_with(
        &mut self,
        finish: &Command,
        then: Vec<Command>,
        f: impl FnOnce(&Engine, Vec<Command>) -> actum::Result<FinishedStep>,
    ) -> Result<Called<FinishedStep>, AgentFailure> {
        let now_ms = self.clock.now_ms();
        let batch = Command::Batch(
            std::iter::once(finish.clone())
                .chain(then.clone())
                .collect(),
        );
        let batch_accepted = decide(&self.model, &batch, now_ms).is_ok();
        let committed = if batch_accepted { &batch } else { finish };
        let called = self.call(Some(committed), |e| f(e, then))?;
        if let Called::Ok(finished) = &called
            && finished.then.is_ok() != batch_accepted
        {
            return Err(self.fail(
                "the engine decides as the reference model does",
                format!(
                    "the model {} a step's follow-ups the engine answered with {:?}",
                    if batch_accepted { "accepts" } else { "refuses" },
                    finished.then
                ),
            ));
        }
        Ok(called)
    }

    /// Holds an acknowledged `cmd` to the model and applies it there.
    fn acknowledged(
        &mut self,
        cmd: &Command,
        expected: actum::Result<actum::books::Decided>,
    ) -> Result<(), AgentFailure> {
        self.report
            .checked("no mutation accepted from a stale lease");
        check::stale_lease_refused(&self.model, cmd)
            .map_err(|e| self.fail("no mutation accepted from a stale lease", e))?;
        self.report
            .checked("no effect begins unless its run is running");
        check::effect_begins_on_a_running_run(&self.model, cmd)
            .map_err(|e| self.fail("no effect begins unless its run is running", e))?;
        self.report
            .checked("an approval binds the exact effect it approves");
        check::approval_binds_its_effect(&self.model, cmd, self.clock.now_ms())
            .map_err(|e| self.fail("an approval binds the exact effect it approves", e))?;
        let appended = super::appends::appended_parts(&self.model, cmd);
        self.report.appended_parts += appended.all;
        self.report.appended_on_blobs += appended.on_blobs;
        if migration::saves_checkpoint(cmd) {
            self.report.checked(MIGRATION_KEEPS_STATE);
            migration::schema_never_goes_back(&self.model, cmd)
                .map_err(|e| self.fail(MIGRATION_KEEPS_STATE, e))?;
        }
        self.report
            .checked("the engine decides as the reference model does");
        let decided = expected.map_err(|e| {
            self.fail(
                "the engine decides as the reference model does",
                format!("the engine acknowledged a command the model refuses ({e}): {cmd:?}"),
            )
        })?;
        for op in &decided.ops {
            apply(&mut self.model as &mut dyn BooksWrite, op).map_err(|e| {
                self.fail(
                    "the engine decides as the reference model does",
                    e.to_string(),
                )
            })?;
        }
        if let Command::Reserve(Reserve { run, .. })
        | Command::Settle(Settle { run, .. })
        | Command::SetBudget(SetBudget { run, .. }) = cmd
        {
            let model = self.model.clone();
            self.check_budgets(&model, Some(run))?;
        }
        self.report.commands += u64::from(!decided.ops.is_empty());
        if let Answer::Begun(actum::books::Begun::Resend { .. }) = decided.answer {
            self.report.resends += 1;
        }
        self.count_window_edges(&decided);
        Ok(())
    }

    /// Counts a begin decided near the end of its tool's dedup window: a
    /// resend within one margin of the horizon, or an act left unknown
    /// past the horizon while the window was still open.
    fn count_window_edges(&mut self, decided: &actum::books::Decided) {
        let now_ms = self.clock.now_ms();
        let key = match &decided.answer {
            Answer::Begun(actum::books::Begun::Resend { key, .. }) => key,
            Answer::Begun(actum::books::Begun::Unknown { key, .. }) if !decided.ops.is_empty() => {
                key
            }
            _ => return,
        };
        let Some(entry) = self.model.effect(key) else {
            return;
        };
        let class = entry.tool_class;
        let (Some(window), Some(margin), Some(horizon)) = (
            class.dedup_window_ms(),
            class.resend_margin_ms(),
            class.resend_horizon_ms(),
        ) else {
            return;
        };
        let age = now_ms.saturating_sub(entry.intended_ms);
        match decided.answer {
            Answer::Begun(actum::books::Begun::Resend { .. }) => {
                self.report.edge_resends += u64::from(age.saturating_add(margin) >= horizon);
            }
            _ => self.report.edge_unknowns += u64::from(age >= horizon && age < window),
        }
    }

    /// The process dies here: the engine is dropped and the power cut
    /// (unsynced writes lost or torn), every worker forgets what it held;
    /// then the process comes back and recovers.
    pub fn crash(&mut self, why: &str) -> Result<(), AgentFailure> {
        self.note(|| format!("CRASH {why}"));
        self.engine = None;
        if !self.disk.is_powered_off() {
            self.disk.set_crash_after_ops(0);
        }
        self.disk.crash(&mut self.crash_rng);
        self.live_read_at = None;
        self.report.crashes += 1;
        for worker in &mut self.workers {
            worker.restart();
        }
        self.world.forget_replies();
        self.dead = false;
        self.redeploy();
        self.recover()
    }

    /// The process comes back as a redeploy whose code writes checkpoint
    /// schema 2, if it has not yet: every worker at once, since they all
    /// live in the one process. Draws nothing from the seed.
    pub(crate) fn redeploy(&mut self) {
        if self.schema == SCHEMA_2 {
            return;
        }
        self.schema = SCHEMA_2;
        self.report.redeploys += 1;
        self.note(|| format!("the process comes back redeployed: checkpoint schema {SCHEMA_2}"));
    }

    /// Opens the engine, possibly crashing again during recovery, then
    /// holds the recovered books to the model.
    pub fn recover(&mut self) -> Result<(), AgentFailure> {
        let mut crash = false;
        let mut last_error = String::new();
        for attempt in 0..=RECOVERY_ATTEMPTS_MAX {
            if crash {
                self.disk.crash(&mut self.crash_rng);
                self.report.crashes += 1;
            }
            if attempt == RECOVERY_ATTEMPTS_MAX {
                // Faults stop, so the run shows the system heals.
                self.disk.stop_faults();
            } else if !self.calm && self.crash_rng.chance_ppm(PPM_ONE / 8) {
                let after = self.crash_rng.below(RECOVERY_CRASH_AFTER_OPS_MAX);
                self.disk.set_crash_after_ops(after);
            }
            let storage = Arc::clone(&self.storage);
            let clock = Arc::new(self.clock.clone());
            match Engine::open_with(storage, clock, Path::new(DB_DIR), self.options()) {
                Ok(engine) => {
                    self.disk.disarm_crash();
                    self.engine = Some(engine);
                    return self.verify_recovery();
                }
                Err(e) if self.disk.is_powered_off() => {
                    self.note(|| format!("CRASH during recovery: {e}"));
                    last_error = e.to_string();
                    crash = true;
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

    /// `books` with the runs retention removed from them put back: what
    /// the checks of the world's history read (the world remembers the
    /// acts of a pruned run).
    pub(crate) fn whole<'b>(&self, books: &'b MemBooks) -> std::borrow::Cow<'b, MemBooks> {
        use actum::books::BooksRead;
        let missing: Vec<&RunId> = self
            .pruned
            .runs()
            .map(|run| &run.id)
            .filter(|id| books.run(id).is_none())
            .collect();
        if missing.is_empty() {
            return std::borrow::Cow::Borrowed(books);
        }
        let mut whole = books.clone();
        for id in missing {
            whole.copy_run(&self.pruned, id);
        }
        std::borrow::Cow::Owned(whole)
    }

    /// The budget invariants over `books` (or `only` one run's budget)
    /// and the world's calls.
    pub(crate) fn check_budgets(
        &mut self,
        books: &MemBooks,
        only: Option<&RunId>,
    ) -> Result<(), AgentFailure> {
        let whole = self.whole(books);
        let books = whole.as_ref();
        self.report.checked("a budget is never overspent");
        check::budgets_hold(books, only)
            .map_err(|e| self.fail("a budget is never overspent", e))?;
        self.report
            .checked("every call is paid for, and a replay is never charged again");
        check::calls_are_paid_once(books, self.world.log()).map_err(|e| {
            self.fail(
                "every call is paid for, and a replay is never charged again",
                e,
            )
        })
    }

    /// The engine's sweep of stuck runs (a minute's SLA, so the waits of
    /// the fault phase count) against `books`.
    pub(crate) fn check_stuck(&mut self, books: &MemBooks) -> Result<(), AgentFailure> {
        const SLA_MS: u64 = 60_000;
        let now_ms = self.clock.now_ms();
        let engine = self.engine.as_ref().expect("a process is up");
        let found = engine
            .stuck(SLA_MS)
            .map_err(|e| self.fail("reads succeed", e.to_string()))?;
        self.report.checked("the stuck runs swept are the books'");
        check::stuck_runs_are_the_books(books, &found, now_ms, SLA_MS)
            .map_err(|e| self.fail("the stuck runs swept are the books'", e))
    }

    /// The recovered books against the model and the world.
    fn verify_recovery(&mut self) -> Result<(), AgentFailure> {
        let engine = self.engine.as_ref().expect("just opened");
        let found = engine
            .snapshot()
            .map_err(|e| self.fail("recovery succeeds without faults", e.to_string()))?;
        let whole = self.whole(&found);
        self.report.checked("a wait ends only on its own terms");
        check::waits_keep_their_terms(&whole)
            .map_err(|e| self.fail("a wait ends only on its own terms", e))?;
        self.report
            .checked("a parent's step starts one child, and waits for it");
        check::children_are_awaited(&whole)
            .map_err(|e| self.fail("a parent's step starts one child, and waits for it", e))?;
        self.check_budgets(&whole, None)?;
        self.check_stuck(&found)?;
        self.report
            .checked("after every recovery the books equal the model");
        let inflight = self.inflight.take();
        let opened_ms = self.clock.now_ms();
        self.model = check::books_match_model(&found, &self.model, inflight.as_ref(), opened_ms)
            .map_err(|e| self.fail("after every recovery the books equal the model", e))?;
        self.report
            .checked("no application without a durable intent");
        check::applications_have_intents(&whole, self.world.log())
            .map_err(|e| self.fail("no application without a durable intent", e))?;
        self.report.recoveries += 1;
        let replayed = self
            .engine
            .as_ref()
            .map_or(0, |e| e.recovery().replayed_records);
        self.note(|| format!("   recovered: {replayed} records replayed, books equal the model"));
        Ok(())
    }

    /// An operator reads the live database beside the process: a snapshot
    /// (`Engine::open_snapshot`) on the same disk must be as of the
    /// process's durable LSN (every call has returned, so everything is
    /// acknowledged) and hold exactly the books the process holds, which
    /// every recovery holds to the model; and the engine's look at its books
    /// must be theirs (`check_look`). In the fault phase it runs inside
    /// `SimDisk::quietly`, so its reads shift neither the disk's fault draws
    /// nor its call count. The snapshot is not taken again while the disk
    /// has seen no call since the last one found the books whole (the same
    /// files beside the same process); the look, which also depends on the
    /// instant, is checked every time.
    pub(crate) fn check_live_snapshot(&mut self) -> Result<(), AgentFailure> {
        const INVARIANT: &str = "a snapshot of the live database holds its books at its LSN";
        let calls = self.disk.ops_count();
        let engine = self.engine.as_ref().expect("a process is up");
        let durable = engine.durable_lsn();
        let live = engine.snapshot();
        // The look depends on the instant too (which leases are live), so
        // it is checked every time.
        if let Ok(books) = &live {
            self.check_look(books, durable.0)?;
        }
        if self.live_read_at == Some(calls) {
            // No call since the last snapshot found the books whole: the
            // same files beside the same process, and a snapshot would read
            // what it read.
            return Ok(());
        }
        self.report.checked(INVARIANT);
        let storage = Arc::clone(&self.storage);
        let clock = Arc::new(self.clock.clone());
        let snapshot =
            Engine::open_snapshot_with(storage, clock, Path::new(DB_DIR), self.options())
                .map_err(|e| self.fail(INVARIANT, format!("the snapshot failed: {e}")))?;
        let lsn = snapshot.snapshot_lsn();
        if lsn != Some(durable) {
            return Err(self.fail(
                INVARIANT,
                format!("a snapshot as of {lsn:?} beside a process durable to {durable}"),
            ));
        }
        let seen = snapshot.snapshot();
        match (seen, live) {
            (Ok(seen), Ok(live)) if seen == live => {}
            (Ok(seen), Ok(live)) => {
                let differ: Vec<String> = live
                    .runs()
                    .filter(|run| seen.run(&run.id).as_ref() != Some(*run))
                    .map(|run| format!("{} ({} live)", run.id, run.state))
                    .take(5)
                    .collect();
                // (The first difference names its table and row: runs
                // alike can differ elsewhere, a run's blob references say.)
                let first = seen.diff(&live).unwrap_or_default();
                return Err(self.fail(
                    INVARIANT,
                    format!(
                        "the snapshot at {durable} differs from the live books: runs {differ:?}; \
                         first, the snapshot's against the live books': {first}"
                    ),
                ));
            }
            (Err(e), _) | (_, Err(e)) => {
                return Err(self.fail(INVARIANT, format!("reading the books failed: {e}")));
            }
        }
        self.note(|| format!("   an operator's snapshot at LSN {durable} holds the live books"));
        Ok(())
    }

    /// An operator's read of the live database (`check_live_snapshot`):
    /// `quietly` in the fault phase, where the disk must not count it. Once
    /// it passed, the disk's call count after it (its own reads aside) is
    /// what the next read compares with.
    pub(crate) fn live_read(&mut self, quietly: bool) -> Result<(), AgentFailure> {
        if quietly {
            let disk = self.disk.clone();
            disk.quietly(|| self.check_live_snapshot())?;
        } else {
            self.check_live_snapshot()?;
        }
        self.live_read_at = Some(self.disk.ops_count());
        Ok(())
    }

    /// The operator's other read of the live database: the engine's own
    /// look at its books (`Engine::look`, what the operator channel serves
    /// `actum inspect`), which reads the runs in memory under the lock and
    /// the rest from the state store after it, must be the look at `books`,
    /// the live books as of `durable`, at the same instant.
    fn check_look(&mut self, books: &MemBooks, durable: u64) -> Result<(), AgentFailure> {
        const INVARIANT: &str = "the engine's look at its live books is theirs at its LSN";
        self.report.checked(INVARIANT);
        let engine = self.engine.as_ref().expect("a process is up");
        let look = engine
            .look()
            .map_err(|e| self.fail(INVARIANT, format!("the look failed: {e}")))?;
        let want = Look::of_books(books, durable, self.clock.now_ms());
        if look == want {
            return Ok(());
        }
        let differs = if look.lsn != want.lsn {
            format!(
                "as of LSN {} beside books durable to {}",
                look.lsn, want.lsn
            )
        } else if look.runs_by_state != want.runs_by_state {
            format!(
                "runs by state {:?}, the books {:?}",
                look.runs_by_state, want.runs_by_state
            )
        } else if look.runs_by_agent != want.runs_by_agent {
            format!(
                "runs by agent {:?}, the books {:?}",
                look.runs_by_agent, want.runs_by_agent
            )
        } else if look.leases != want.leases {
            format!(
                "{} live leases, the books {}",
                look.leases.len(),
                want.leases.len()
            )
        } else if look.open_effects != want.open_effects {
            let keys = |l: &Look| -> Vec<String> {
                l.open_effects.iter().map(|e| e.key.to_string()).collect()
            };
            format!(
                "open effects {:?}, the books {:?}",
                keys(&look),
                keys(&want)
            )
        } else {
            format!(
                "{} open waits, the books {}",
                look.waits.len(),
                want.waits.len()
            )
        };
        Err(self.fail(INVARIANT, format!("at LSN {durable}: {differs}")))
    }

    /// True if every run (children included) is terminal in the model's
    /// books.
    pub fn all_runs_over(&self) -> bool {
        self.model.runs().all(|r| r.state.is_terminal())
    }

    /// The workflow of `run`: a schedule's run, or a research run's
    /// summary child.
    pub fn workflow_of(&self, run: &RunId) -> Workflow {
        self.runs
            .iter()
            .find(|(id, _)| id == run)
            .map_or(Workflow::Summary, |(_, w)| *w)
    }
}

/// True for the errors with which the books refuse a command: the state
/// says no, nothing failed.
pub fn is_refusal(error: &Error) -> bool {
    matches!(
        error,
        Error::NotFound { .. }
            | Error::RunInputMismatch { .. }
            | Error::RunTerminal { .. }
            | Error::RunNotRunning { .. }
            | Error::IllegalTransition { .. }
            | Error::VersionConflict { .. }
            | Error::LeaseHeld { .. }
            | Error::LeaseLost { .. }
            | Error::Fenced { .. }
            | Error::GuardOfAnotherRun { .. }
            | Error::ArgsMismatch { .. }
            | Error::EffectNotOpen { .. }
            | Error::Divergence { .. }
            | Error::SchemaMismatch { .. }
            | Error::TooLarge { .. }
            | Error::BatchRefused { .. }
            | Error::InvalidCommand { .. }
            | Error::InvalidName { .. }
            | Error::WaitMismatch { .. }
            | Error::WaitOpen { .. }
            | Error::WaitEnded { .. }
            | Error::ApprovalExpired { .. }
            | Error::ApprovalMismatch { .. }
            | Error::ApproverRole { .. }
            | Error::NotApproved { .. }
            | Error::NotReserved { .. }
            | Error::BudgetExhausted { .. }
            | Error::SagaOutstanding { .. }
            | Error::ResourceHeld { .. }
            | Error::ResourceNotHeld { .. }
            | Error::SharedVersionConflict { .. }
    )
}

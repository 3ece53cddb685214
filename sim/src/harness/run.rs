//! [`check_workflow`]: runs a user's workflow under the simulator's faults,
//! seed after seed, re-running it from the top after every crash and every
//! lost lease, as a durable runtime would, then holds the books and the
//! world to the exactly-once invariants in `check/`.
//!
//! **Invariant:** a seed and the workflow determine the whole run;
//! `ACTUM_SEED=N` runs that one seed.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use actum::books::{BooksRead, CreateRun, RunId, digest_of};
use actum::db::DbOptions;
use actum::wal::WalOptions;
use actum::{DatabaseId, Engine, EngineOptions, Error, Storage};

use super::env::{CallFaults, WorkflowEnv};
use crate::agents::is_refusal;
use crate::check;
use crate::clock::SimClock;
use crate::disk::{FaultConfig, SimDisk};
use crate::rng::{PPM_ONE, Rng};
use crate::world::World;

/// How the harness runs a workflow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HarnessConfig {
    /// Seeds to run (each a fresh disk, engine and world).
    pub seeds: u64,
    /// The first seed.
    pub first_seed: u64,
    /// Runs of the workflow with faults on, per seed; then faults stop and
    /// the workflow must finish.
    pub faulty_attempts: u32,
    /// The lease the harness takes for the workflow's run, in ms.
    pub lease_ttl_ms: u64,
}

impl Default for HarnessConfig {
    fn default() -> Self {
        HarnessConfig {
            seeds: 64,
            first_seed: 0,
            faulty_attempts: 8,
            lease_ttl_ms: 30_000,
        }
    }
}

/// What the seeds did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HarnessReport {
    /// Seeds run.
    pub seeds: u64,
    /// Runs of the workflow (first runs and re-runs).
    pub attempts: u64,
    /// Process crashes (engine dropped, power cut).
    pub crashes: u64,
    /// Re-runs because the lease was lost.
    pub leases_lost: u64,
    /// Tool calls the workflow made.
    pub tool_calls: u64,
    /// Acts that happened in the world.
    pub applications: u64,
}

/// A violated invariant of a user's workflow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HarnessFailure {
    /// The seed.
    pub seed: u64,
    /// What broke.
    pub invariant: &'static str,
    /// How.
    pub detail: String,
}

impl fmt::Display for HarnessFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: invariant `{}` violated: {}\n  replay: ACTUM_SEED={} cargo test <this test>",
            self.seed, self.invariant, self.detail, self.seed
        )
    }
}

/// The run every seed creates for the workflow.
pub const HARNESS_RUN: &str = "run-under-test";
/// Attempts after the faults stop before the workflow must have finished.
const CALM_ATTEMPTS_MAX: u32 = 8;
/// The faults of the faulty attempts.
const FAULTS: CallFaults = CallFaults {
    ack_dropped_ppm: 100_000,
    request_lost_ppm: 50_000,
    declined_ppm: 50_000,
    crash_after_act_ppm: 100_000,
    lease_expires_ppm: 50_000,
};

/// Runs `workflow` under faults for every seed of `config` (or only
/// `ACTUM_SEED`), then checks that no effect fired twice, every confirmed
/// effect happened exactly once with the recorded receipt, every act had
/// its intent, and the workflow finished its run once the faults stopped.
///
/// The workflow is run from the top on every attempt: it must take its
/// steps through the engine (`Engine::step`, ...) so a re-run replays what
/// is done, and finish by moving its run to a terminal state.
pub fn check_workflow(
    config: &HarnessConfig,
    mut workflow: impl FnMut(&mut WorkflowEnv<'_>) -> actum::Result<()>,
) -> Result<HarnessReport, HarnessFailure> {
    let seeds = match std::env::var("ACTUM_SEED") {
        Ok(seed) => {
            let seed = seed.trim().parse().map_err(|e| HarnessFailure {
                seed: 0,
                invariant: "ACTUM_SEED is a number",
                detail: format!("{seed:?}: {e}"),
            })?;
            seed..seed + 1
        }
        Err(_) => config.first_seed..config.first_seed.saturating_add(config.seeds),
    };
    let mut report = HarnessReport::default();
    for seed in seeds {
        Seed::new(seed, config).run(&mut workflow, &mut report)?;
        report.seeds += 1;
    }
    Ok(report)
}

/// One seed's simulated disk, clock and world.
struct Seed {
    seed: u64,
    config: HarnessConfig,
    disk: SimDisk,
    clock: SimClock,
    world: World,
    calls: Rng,
    crashes: Rng,
}

impl Seed {
    fn new(seed: u64, config: &HarnessConfig) -> Seed {
        let mut root = Rng::new(seed);
        let faults = FaultConfig {
            sector_atomic_suffixes: vec![".redb".to_owned()],
            ..FaultConfig::crash_only()
        };
        Seed {
            seed,
            config: config.clone(),
            disk: SimDisk::new(root.fork("disk"), faults),
            clock: SimClock::new(crate::agents::START_MS),
            world: World::new(),
            calls: root.fork("calls"),
            crashes: root.fork("crashes"),
        }
    }

    fn fail(&self, invariant: &'static str, detail: impl Into<String>) -> HarnessFailure {
        HarnessFailure {
            seed: self.seed,
            invariant,
            detail: detail.into(),
        }
    }

    fn open(&mut self) -> Result<Engine, HarnessFailure> {
        let options = EngineOptions {
            db: DbOptions {
                wal: WalOptions {
                    segment_size_bytes: 64 * 1024,
                    max_record_bytes: 16 * 1024,
                    ..WalOptions::default()
                },
                database_id: Some(DatabaseId(u128::from(self.seed) << 2 | 1)),
            },
            checkpoint_every_records: 8,
            checkpoint_every_bytes: 0,
            ..EngineOptions::default()
        };
        for _ in 0..8 {
            let storage: Arc<dyn Storage> = Arc::new(self.disk.clone());
            let clock = Arc::new(self.clock.clone());
            match Engine::open_with(storage, clock, Path::new("/harness"), options.clone()) {
                Ok(engine) => return Ok(engine),
                Err(_) if self.disk.is_powered_off() => self.disk.crash(&mut self.crashes),
                Err(e) => return Err(self.fail("recovery succeeds", e.to_string())),
            }
        }
        Err(self.fail("recovery succeeds", "eight recoveries in a row were cut"))
    }

    fn run(
        mut self,
        workflow: &mut impl FnMut(&mut WorkflowEnv<'_>) -> actum::Result<()>,
        report: &mut HarnessReport,
    ) -> Result<(), HarnessFailure> {
        let mut engine = Arc::new(self.open()?);
        let run = RunId::new(HARNESS_RUN).expect("a valid run id");
        engine
            .create_run(CreateRun {
                run: run.clone(),
                input_digest: digest_of(b"the workflow under test"),
                agent_version: "under test".into(),
                trace_id: format!("harness-{}", self.seed),
                parent: None,
                input: None,
            })
            .map_err(|e| self.fail("the run can be created", e.to_string()))?;
        let attempts = self.config.faulty_attempts + CALM_ATTEMPTS_MAX;
        for attempt in 0..attempts {
            let calm = attempt >= self.config.faulty_attempts;
            report.attempts += 1;
            if !calm && self.crashes.chance_ppm(PPM_ONE / 4) {
                let after = 1 + self.crashes.below(80);
                self.disk.set_crash_after_ops(after);
            }
            match self.attempt(&engine, &run, calm, workflow, report) {
                Ok(true) => return self.finish(engine, &run, report),
                Ok(false) => {}
                Err(AttemptEnd::Failed(failure)) => return Err(failure),
                Err(AttemptEnd::Died) => {
                    drop(engine);
                    self.disk.set_crash_after_ops(0);
                    self.disk.crash(&mut self.crashes);
                    report.crashes += 1;
                    // No wait for the dead process's lease to run out: the
                    // open releases it, and the next attempt claims at once.
                    engine = Arc::new(self.open()?);
                    let books = engine
                        .snapshot()
                        .map_err(|e| self.fail("reads", e.to_string()))?;
                    check::applications_have_intents(&books, self.world.log())
                        .map_err(|e| self.fail("no application without a durable intent", e))?;
                }
            }
        }
        Err(self.fail(
            "the workflow finishes once the faults stop",
            format!("{CALM_ATTEMPTS_MAX} fault-free runs of the workflow did not finish its run"),
        ))
    }

    /// One run of the workflow; `Ok(true)` once it finished its run.
    fn attempt(
        &mut self,
        engine: &Arc<Engine>,
        run: &RunId,
        calm: bool,
        workflow: &mut impl FnMut(&mut WorkflowEnv<'_>) -> actum::Result<()>,
        report: &mut HarnessReport,
    ) -> Result<bool, AttemptEnd> {
        // The run may have finished just before a crash took the process.
        match engine.run(run) {
            Ok(record) if record.as_ref().is_some_and(|r| r.state.is_terminal()) => {
                return Ok(true);
            }
            Ok(_) => {}
            Err(e) => return self.died(&e),
        }
        let worker = actum::books::WorkerId::new("harness-worker").expect("a valid worker id");
        let grant = match engine.claim_next(&worker, self.config.lease_ttl_ms) {
            Ok(Some(grant)) => grant,
            Ok(None) => {
                // Someone's lease is still live: let it run out.
                self.clock.advance_ms(self.config.lease_ttl_ms + 1);
                return Ok(false);
            }
            Err(e) => return self.died(&e),
        };
        let result = {
            let mut env = WorkflowEnv {
                engine: Arc::clone(engine),
                run: grant.run.clone(),
                guard: grant.guard.clone(),
                lease_ttl_ms: self.config.lease_ttl_ms,
                world: &mut self.world,
                clock: &self.clock,
                disk: &self.disk,
                rng: &mut self.calls,
                faults: (!calm).then_some(FAULTS),
                calls: &mut report.tool_calls,
            };
            workflow(&mut env)
        };
        self.disk.disarm_crash();
        if self.disk.is_powered_off() {
            return Err(AttemptEnd::Died);
        }
        match result {
            Ok(()) => match engine.run(run) {
                Ok(record) if record.as_ref().is_some_and(|r| r.state.is_terminal()) => Ok(true),
                Ok(record) => Err(AttemptEnd::Failed(self.fail(
                    "the workflow finishes its run",
                    format!(
                        "the workflow returned Ok but left its run {:?}",
                        record.map(|r| r.state)
                    ),
                ))),
                Err(e) => self.died(&e),
            },
            Err(Error::LeaseLost { .. } | Error::Fenced { .. }) => {
                report.leases_lost += 1;
                Ok(false)
            }
            Err(e) if is_refusal(&e) => Err(AttemptEnd::Failed(self.fail(
                "the workflow's engine calls are accepted",
                format!("the workflow failed: {e}"),
            ))),
            Err(e) => self.died(&e),
        }
    }

    fn died<T>(&self, error: &Error) -> Result<T, AttemptEnd> {
        if self.disk.is_powered_off() {
            return Err(AttemptEnd::Died);
        }
        Err(AttemptEnd::Failed(self.fail(
            "no error without a fault",
            format!("the engine failed with the power on: {error}"),
        )))
    }

    /// A clean close, a reopen, and the end-of-seed invariants.
    fn finish(
        mut self,
        engine: Arc<Engine>,
        run: &RunId,
        report: &mut HarnessReport,
    ) -> Result<(), HarnessFailure> {
        let engine = Arc::try_unwrap(engine)
            .map_err(|_| self.fail("a clean close", "the workflow kept a handle to the engine"))?;
        engine
            .close()
            .map_err(|e| self.fail("a clean close", e.to_string()))?;
        let engine = self.open()?;
        let books = engine
            .snapshot()
            .map_err(|e| self.fail("reads", e.to_string()))?;
        let log = self.world.log();
        let checks = [
            (
                "no side effect fires twice",
                check::effect_applied_at_most_once(log),
            ),
            (
                "every done effect happened exactly once",
                check::effect_applied_exactly_once(&books, log),
            ),
            (
                "no application without a durable intent",
                check::applications_have_intents(&books, log),
            ),
            (
                "no world mutation under a stale token",
                check::world_refuses_stale_tokens(self.world.deliveries()),
            ),
        ];
        for (invariant, result) in checks {
            result.map_err(|e| self.fail(invariant, e))?;
        }
        assert!(books.run(run).is_some_and(|r| r.state.is_terminal()));
        report.applications += log.len() as u64;
        engine
            .close()
            .map_err(|e| self.fail("a clean close", e.to_string()))
    }
}

/// How an attempt ended other than normally.
enum AttemptEnd {
    Died,
    Failed(HarnessFailure),
}

//! Runs one seed of the storage campaign and checks every invariant.
//!
//! Invariant: everything random in a run comes from `Rng::new(seed)`, so a
//! failure replays exactly with `cargo run --release -p actum-sim -- --seed N`.

use std::fmt;
use std::sync::Arc;

use actum::{DatabaseId, Storage};

use super::config::CampaignConfig;
use super::model::{Model, Put};
use super::node::{DB_DIR, Node, Observed};
use crate::check;
use crate::clock::SimClock;
use crate::disk::{FaultConfig, SimDisk};
use crate::rng::{PPM_ONE, Rng};

/// Power cuts armed per workload step, in parts per million.
const CRASH_ARM_PPM: u32 = PPM_ONE / 12;
/// The furthest ahead (in I/O calls) a power cut is armed.
const CRASH_AFTER_OPS_MAX: u64 = 80;
/// Recoveries tried before faults are switched off to let one succeed.
const RECOVERY_ATTEMPTS_MAX: u32 = 8;
/// Records per appended batch, at most.
const BATCH_RECORDS_MAX: u64 = 6;
/// Value bytes per record, at most.
const VALUE_BYTES_MAX: u64 = 1_500;
/// Distinct keys the workload writes (small, so keys are overwritten).
const KEYS: u64 = 64;

/// A violated invariant, with everything needed to replay it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The seed of the failing run.
    pub seed: u64,
    /// The invariant (or stage) that failed.
    pub invariant: &'static str,
    /// What was found.
    pub detail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {seed}: invariant `{}` violated: {}\n  replay: cargo run --release -p \
             actum-sim -- --seed {seed}",
            self.invariant,
            self.detail,
            seed = self.seed
        )
    }
}

/// What one passing seed did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// Power cuts survived (including during recovery).
    pub crashes: u64,
    /// Successful recoveries, each checked against the model.
    pub recoveries: u64,
    /// Appends acknowledged.
    pub acked_batches: u64,
    /// Checkpoints acknowledged.
    pub checkpoints: u64,
    /// Errors from injected I/O faults that the engine reported.
    pub io_errors: u64,
    /// Whether bit rot was injected and a reopen refused the damage.
    pub rot_detected: bool,
    /// Hash of every disk operation, for the determinism check.
    pub trace_hash: u64,
}

/// Everything one run owns.
struct World {
    seed: u64,
    config: CampaignConfig,
    disk: SimDisk,
    storage: Arc<dyn Storage>,
    clock: SimClock,
    workload: Rng,
    crashes: Rng,
    model: Model,
    report: SeedReport,
}

/// Runs `seed` under `config`.
pub fn run_seed(seed: u64, config: &CampaignConfig) -> Result<SeedReport, Failure> {
    let mut root = Rng::new(seed);
    let mut faults = FaultConfig::swarm(&mut root.fork("faults"));
    // redb needs atomic sector writes for its header (docs/SIMULATION.md).
    faults.sector_atomic_suffixes = vec![".redb".to_owned()];
    let disk = SimDisk::new(root.fork("disk"), faults);
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let mut world = World {
        seed,
        config: config.clone(),
        disk,
        storage,
        clock: SimClock::new(1_700_000_000_000),
        workload: root.fork("workload"),
        crashes: root.fork("crashes"),
        model: Model::new(),
        report: SeedReport::default(),
    };
    world.run()?;
    world.report.trace_hash = world.disk.trace_hash();
    Ok(world.report)
}

impl World {
    fn fail(&self, invariant: &'static str, detail: impl Into<String>) -> Failure {
        Failure {
            seed: self.seed,
            invariant,
            detail: detail.into(),
        }
    }

    fn database_id(&self) -> DatabaseId {
        DatabaseId(u128::from(self.seed) << 1 | 1)
    }

    fn run(&mut self) -> Result<(), Failure> {
        let mut node = Some(self.recover(false)?);
        for _ in 0..self.config.steps {
            self.clock.advance_ms(self.workload.below(1_000));
            if self.workload.chance_ppm(CRASH_ARM_PPM) {
                let after = self.workload.below(CRASH_AFTER_OPS_MAX);
                self.disk.set_crash_after_ops(after);
            }
            let current = node.as_mut().expect("a node is open between steps");
            let choice = self.workload.below(100);
            let outcome = if choice < 80 {
                self.append(current)
            } else if choice < 95 {
                self.checkpoint(current)
            } else {
                Err(None)
            };
            match outcome {
                Ok(()) => {}
                Err(None) => {
                    // A clean reopen without power loss.
                    drop(node.take());
                    node = Some(self.recover(false)?);
                }
                Err(Some(error)) => {
                    drop(node.take());
                    let power_lost = self.disk.is_powered_off();
                    if !power_lost {
                        self.expect_injected(&error)?;
                    }
                    node = Some(self.recover(power_lost)?);
                }
            }
        }
        self.finish(node.take().expect("a node is open after the workload"))
    }

    /// Appends one random batch; `Err(Some)` if the engine refused.
    fn append(&mut self, node: &mut Node) -> Result<(), Option<actum::Error>> {
        let count = 1 + self.workload.below(BATCH_RECORDS_MAX);
        let batch: Vec<Put> = (0..count)
            .map(|_| {
                let mut value = vec![0u8; self.workload.below(VALUE_BYTES_MAX) as usize];
                self.workload.fill(&mut value);
                Put {
                    key: self.workload.below(KEYS),
                    value,
                }
            })
            .collect();
        self.model.begin(batch.clone());
        let last = node.append(&batch).map_err(Some)?;
        self.model.acknowledge(last);
        self.report.acked_batches += 1;
        Ok(())
    }

    fn checkpoint(&mut self, node: &mut Node) -> Result<(), Option<actum::Error>> {
        let lsn = node.checkpoint().map_err(Some)?;
        self.model.checkpointed(lsn);
        self.report.checkpoints += 1;
        Ok(())
    }

    /// With power on, an error must come from an injected fault.
    fn expect_injected(&mut self, error: &actum::Error) -> Result<(), Failure> {
        if self.disk.faults().injects_io_errors() {
            self.report.io_errors += 1;
            return Ok(());
        }
        Err(self.fail(
            "no error without a fault",
            format!("the engine failed with no fault injected: {error}"),
        ))
    }

    fn open(&self) -> Result<(Node, Observed), actum::Error> {
        Node::open(
            Arc::clone(&self.storage),
            &self.clock,
            &self.config,
            self.database_id(),
        )
    }

    /// Recovers (after a power cut if `crash`), possibly crashing again
    /// during recovery, then checks every invariant against the model.
    fn recover(&mut self, crash: bool) -> Result<Node, Failure> {
        let mut crash = crash;
        let mut last_error = String::new();
        for attempt in 0..=RECOVERY_ATTEMPTS_MAX {
            if crash {
                self.disk.crash(&mut self.crashes);
                self.report.crashes += 1;
            }
            if attempt == RECOVERY_ATTEMPTS_MAX {
                // Faults stop, so the run shows the system heals.
                self.disk.disarm_crash();
                self.disk.set_faults(FaultConfig {
                    sector_atomic_suffixes: self.disk.faults().sector_atomic_suffixes,
                    ..FaultConfig::none()
                });
            } else if self.crashes.chance_ppm(PPM_ONE / 4) {
                let after = self.crashes.below(CRASH_AFTER_OPS_MAX);
                self.disk.set_crash_after_ops(after);
            }
            match self.open() {
                Ok((node, observed)) => {
                    self.disarm();
                    return self.verify(node, observed);
                }
                Err(error) if self.disk.is_powered_off() => {
                    last_error = error.to_string();
                    crash = true;
                }
                Err(error) => {
                    last_error = error.to_string();
                    self.expect_injected(&error).map_err(|mut failure| {
                        failure.invariant = "recovery succeeds without faults";
                        failure
                    })?;
                    crash = false;
                }
            }
        }
        Err(self.fail(
            "recovery succeeds without faults",
            format!("recovery still failed after faults were switched off: {last_error}"),
        ))
    }

    fn disarm(&self) {
        // A power cut armed during recovery must not fire later.
        self.disk.disarm_crash();
    }

    fn verify(&mut self, node: Node, observed: Observed) -> Result<Node, Failure> {
        check::acked_appends_survive(&self.model, &observed)
            .map_err(|e| self.fail("every acknowledged append survives", e))?;
        check::redb_committed_state_survives(&self.model, &observed)
            .map_err(|e| self.fail("redb's committed state survives", e))?;
        let landed = check::nothing_unacknowledged_is_half_visible(&self.model, &observed)
            .map_err(|e| self.fail("nothing unacknowledged is half-visible", e))?;
        self.model.resolve(landed);
        self.report.recoveries += 1;
        if !self.crashes.chance_ppm(PPM_ONE / 4) {
            return Ok(node);
        }
        // Crash right after recovery, with nothing new written: the next
        // recovery must observe the same.
        self.disk.set_crash_after_ops(0);
        drop(node);
        self.disk.crash(&mut self.crashes);
        self.report.crashes += 1;
        match self.open() {
            Ok((node, again)) => {
                check::recovery_is_idempotent(&observed, &again)
                    .map_err(|e| self.fail("recovery is idempotent", e))?;
                self.report.recoveries += 1;
                Ok(node)
            }
            Err(error) => {
                self.expect_injected(&error)?;
                self.recover(false)
            }
        }
    }

    /// Faults stop; the store closes cleanly and reopens with everything
    /// acknowledged; then, with `rot`, one durable bit flips and the reopen
    /// must fail or return exactly what was acknowledged.
    fn finish(&mut self, node: Node) -> Result<(), Failure> {
        self.disarm();
        self.disk.set_faults(FaultConfig {
            sector_atomic_suffixes: self.disk.faults().sector_atomic_suffixes,
            ..FaultConfig::none()
        });
        node.close()
            .map_err(|e| self.fail("clean close succeeds without faults", e.to_string()))?;
        let node = self.recover(false)?;
        if self.model.inflight().is_some() || !self.config.rot {
            return Ok(());
        }
        node.close()
            .map_err(|e| self.fail("clean close succeeds without faults", e.to_string()))?;
        let files = self.durable_files();
        let target = self.workload.pick(&files).clone();
        let Some(rot) = self
            .disk
            .rot(std::path::Path::new(&target), &mut self.workload)
            .map_err(|e| self.fail("bit rot", e.to_string()))?
        else {
            return Ok(());
        };
        let what = format!("{} byte {} bit {}", target, rot.offset_bytes, rot.bit);
        let reopened = self.open().map(|(_, observed)| observed);
        check::corruption_is_detected(&self.model, &reopened, &what)
            .map_err(|e| self.fail("damage gives an error, never wrong data", e))?;
        self.report.rot_detected = reopened.is_err();
        Ok(())
    }

    /// The database's files, for bit rot (the lock file holds nothing).
    fn durable_files(&self) -> Vec<String> {
        let files: Vec<String> = self
            .disk
            .snapshot()
            .into_keys()
            .filter(|path| path.starts_with(DB_DIR) && !path.ends_with("LOCK"))
            .collect();
        assert!(!files.is_empty(), "a database has files");
        files
    }
}

//! Runs one seed of the storage campaign and checks every invariant.
//!
//! Invariant: everything random in a run comes from `Rng::new(seed)`, so a
//! failure replays exactly with
//! `cargo run --release -p actum-sim -- storage --seed N`.

use std::fmt;
use std::sync::Arc;

use actum::{DatabaseId, Storage};

use super::config::CampaignConfig;
use super::model::{Model, Put};
use super::node::{DB_DIR, Node, Observed};
use super::schedule::{Schedule, Step};
use crate::check;
use crate::clock::SimClock;
use crate::disk::SimDisk;
use crate::rng::{PPM_ONE, Rng};

/// Recoveries tried before faults are switched off to let one succeed.
const RECOVERY_ATTEMPTS_MAX: u32 = 8;
/// I/O calls ahead at most that a power cut during recovery is armed.
const RECOVERY_CRASH_AFTER_OPS_MAX: u64 = 80;
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
             actum-sim -- storage --seed {seed}",
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
    /// Grows of the WAL's active segment made ahead of need.
    pub grows: u64,
    /// Errors from injected I/O faults that the engine reported.
    pub io_errors: u64,
    /// Whether bit rot was injected and a reopen refused the damage.
    pub rot_detected: bool,
    /// Whether a repair then cut the log past the damage (and an ordinary
    /// reopen found the cut in place).
    pub repaired: bool,
    /// Whether the cleanly closed database was restored as an unsynced
    /// copy, written to and cut by a power loss (`restore_a_copy`).
    pub copy_restored: bool,
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
    values: Rng,
    crashes: Rng,
    model: Model,
    report: SeedReport,
    recovery_crashes: bool,
    clean_finish: bool,
}

/// Runs the schedule `seed` stands for, under `config`.
pub fn run_seed(seed: u64, config: &CampaignConfig) -> Result<SeedReport, Failure> {
    run_schedule(&Schedule::from_seed(seed, config), config)
}

/// Runs `schedule` under `config`.
pub fn run_schedule(schedule: &Schedule, config: &CampaignConfig) -> Result<SeedReport, Failure> {
    let mut root = Rng::new(schedule.seed);
    let mut faults = schedule.faults.clone();
    // redb needs atomic sector writes for its header (docs/SIMULATION.md).
    faults.sector_atomic_suffixes = vec![".redb".to_owned()];
    let disk = SimDisk::new(root.fork("disk"), faults);
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let mut world = World {
        seed: schedule.seed,
        config: config.clone(),
        disk,
        storage,
        clock: SimClock::new(1_700_000_000_000),
        values: root.fork("values"),
        crashes: root.fork("crashes"),
        model: Model::new(),
        report: SeedReport::default(),
        recovery_crashes: schedule.recovery_crashes,
        clean_finish: schedule.clean_finish,
    };
    world.run(&schedule.steps)?;
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

    fn run(&mut self, steps: &[Step]) -> Result<(), Failure> {
        let mut node = Some(self.recover(false)?);
        for step in steps {
            self.clock.advance_ms(250);
            let current = node.as_mut().expect("a node is open between steps");
            let outcome = match step {
                Step::ArmCrash { after_ops } => {
                    self.disk.set_crash_after_ops(u64::from(*after_ops));
                    Ok(())
                }
                Step::Append { records } => self.append(current, *records),
                Step::Checkpoint => self.checkpoint(current),
                Step::Reopen => Err(None),
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

    /// Appends a batch of `records` random puts; `Err(Some)` if the engine
    /// refused.
    fn append(&mut self, node: &mut Node, records: u8) -> Result<(), Option<actum::Error>> {
        assert!(records >= 1, "a batch holds at least one record");
        let batch: Vec<Put> = (0..records)
            .map(|_| {
                let mut value = vec![0u8; self.values.below(VALUE_BYTES_MAX) as usize];
                self.values.fill(&mut value);
                Put {
                    key: self.values.below(KEYS),
                    value,
                }
            })
            .collect();
        self.model.begin(batch.clone());
        let last = node.append(&batch).map_err(Some)?;
        self.model.acknowledge(last);
        self.report.acked_batches += 1;
        // As the engine does after an acknowledged commit: grow the
        // segment ahead of need, so crashes and faults land in grows too.
        if node.grow_ahead().map_err(Some)? {
            self.report.grows += 1;
        }
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
        self.open_with(false)
    }

    /// Opens, in repair mode if `repair`.
    fn open_with(&self, repair: bool) -> Result<(Node, Observed), actum::Error> {
        Node::open(
            Arc::clone(&self.storage),
            &self.clock,
            &self.config,
            self.database_id(),
            repair,
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
                self.disk.stop_faults();
            } else if self.recovery_crashes && self.crashes.chance_ppm(PPM_ONE / 4) {
                let after = self.crashes.below(RECOVERY_CRASH_AFTER_OPS_MAX);
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
        if !self.recovery_crashes || !self.crashes.chance_ppm(PPM_ONE / 4) {
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

    /// Faults stop; the store shuts down (cleanly, or half the time by a
    /// power cut, so that no clean-shutdown LSN vouches for the log) and
    /// reopens with everything acknowledged; then, with `rot`, one durable
    /// bit flips and the reopen must fail or return exactly what was
    /// acknowledged.
    fn finish(&mut self, node: Node) -> Result<(), Failure> {
        // A last step `ArmCrash { after_ops: 0 }` cut the power with no
        // operation left to notice: that is a crash like any other.
        let node = if self.disk.is_powered_off() {
            drop(node);
            self.recover(true)?
        } else {
            node
        };
        self.disk.stop_faults();
        let clean = self.clean_finish;
        self.shut_down(node, clean)?;
        let node = self.recover(false)?;
        let node = if clean {
            self.restore_a_copy(node)?
        } else {
            node
        };
        if self.model.inflight().is_some() || !self.config.rot {
            return Ok(());
        }
        self.shut_down(node, clean)?;
        let (target, within) = self.rot_target();
        let Some(rot) = self
            .disk
            .rot_within(std::path::Path::new(&target), within, &mut self.crashes)
            .map_err(|e| self.fail("bit rot", e.to_string()))?
        else {
            return Ok(());
        };
        let what = format!("{} byte {} bit {}", target, rot.offset_bytes, rot.bit);
        let reopened = self.open().map(|(_, observed)| observed);
        check::corruption_is_detected(&self.model, &reopened, &what, clean)
            .map_err(|e| self.fail("damage gives an error, never wrong data", e))?;
        if let Err(error) = &reopened {
            check::refused_open_leaves_no_file_open(&self.disk.open_files(), error, &what)
                .map_err(|e| self.fail("a refused open leaves no file open", e))?;
        }
        self.report.rot_detected = reopened.is_err();
        if reopened.is_err() && target.ends_with(".wal") {
            self.repair(&what)?;
        }
        Ok(())
    }

    /// A cleanly closed database restored as a copy: every file rewritten
    /// in place as `cp` leaves it (a new file, nothing synced, not even its
    /// directory entry), opened (an open of a cleanly closed database,
    /// which syncs none of what it reads), one batch appended and
    /// acknowledged, then the power cut: the copy must recover with every
    /// acknowledged append (docs/DURABILITY.md, "Opening a cleanly closed
    /// database"). Its crash outcomes come from a generator of its own, so
    /// the rest of the run draws what it drew before this phase was added.
    fn restore_a_copy(&mut self, node: Node) -> Result<Node, Failure> {
        node.close()
            .map_err(|e| self.fail("clean close succeeds without faults", e.to_string()))?;
        for (path, bytes) in self.database_files() {
            let path = std::path::Path::new(&path);
            let copied = self
                .storage
                .remove_file(path)
                .and_then(|()| self.storage.open(path, actum::OpenMode::CreateNew))
                .and_then(|file| file.write_at(0, &bytes));
            copied.map_err(|e| {
                self.fail(
                    "recovery succeeds without faults",
                    format!("restoring {} as a copy: {e}", path.display()),
                )
            })?;
        }
        let crashes = std::mem::replace(&mut self.crashes, Rng::new(self.seed).fork("copy"));
        let copied = self.write_to_the_copy_and_cut_the_power();
        self.crashes = crashes;
        self.report.copy_restored = copied.is_ok();
        copied
    }

    fn write_to_the_copy_and_cut_the_power(&mut self) -> Result<Node, Failure> {
        let mut node = self.recover(false)?;
        self.append(&mut node, 1).map_err(|e| {
            let error = e.map_or_else(|| "no error".to_string(), |e| e.to_string());
            self.fail(
                "recovery succeeds without faults",
                format!("an append to the copy: {error}"),
            )
        })?;
        drop(node);
        self.recover(true)
    }

    /// After damage in the log an open refused: a repair either refuses too,
    /// or keeps a prefix of what was acknowledged (the records before the
    /// damage, exactly); and what it cut stays cut, so an ordinary reopen
    /// finds the same log and the same state.
    fn repair(&mut self, what: &str) -> Result<(), Failure> {
        let Ok((node, repaired)) = self.open_with(true) else {
            // Damage a repair cannot cut past (a segment's header, a log
            // that would end before the checkpoint) stays an error.
            return Ok(());
        };
        let kept = repaired.durable_lsn;
        if kept > self.model.last_lsn() || repaired.state != self.model.state_at(kept) {
            return Err(self.fail(
                "a repair keeps exactly a prefix of the acknowledged log",
                format!(
                    "after bit rot at {what} the repair kept the log up to {kept} with {} keys; \
                     acknowledged up to {} (the state at {kept} has {} keys)",
                    repaired.state.len(),
                    self.model.last_lsn(),
                    self.model.state_at(kept).len()
                ),
            ));
        }
        node.close()
            .map_err(|e| self.fail("clean close succeeds without faults", e.to_string()))?;
        let again = self.open().map(|(_, observed)| observed);
        match again {
            Ok(observed) if observed.durable_lsn == kept && observed.state == repaired.state => {
                self.report.repaired = true;
                Ok(())
            }
            other => Err(self.fail(
                "a repaired log opens again as repaired",
                format!(
                    "after bit rot at {what} and a repair that kept the log up to {kept}, an \
                     ordinary reopen gave {}",
                    match other {
                        Ok(o) => format!(
                            "the log up to {} with {} keys",
                            o.durable_lsn,
                            o.state.len()
                        ),
                        Err(e) => format!("an error: {e}"),
                    }
                ),
            )),
        }
    }

    /// A clean close, or a power cut (recovered by the caller).
    fn shut_down(&mut self, node: Node, clean: bool) -> Result<(), Failure> {
        if clean {
            return node
                .close()
                .map_err(|e| self.fail("clean close succeeds without faults", e.to_string()));
        }
        self.disk.set_crash_after_ops(0);
        drop(node);
        self.disk.crash(&mut self.crashes);
        self.report.crashes += 1;
        Ok(())
    }

    /// Every file of the database (its lock aside) and its bytes, as the
    /// page cache holds them.
    fn database_files(&self) -> Vec<(String, Vec<u8>)> {
        self.disk
            .snapshot()
            .into_iter()
            .filter(|(path, _)| path.starts_with(DB_DIR) && !path.ends_with("LOCK"))
            .collect()
    }

    /// Where to flip a bit: half the time anywhere in any database file,
    /// half the time inside the written records of a WAL segment, where
    /// acknowledged data lives (the rest of a segment is zeros).
    fn rot_target(&mut self) -> (String, std::ops::Range<u64>) {
        let files = self.database_files();
        assert!(!files.is_empty(), "a database has files");
        let written: Vec<(String, std::ops::Range<u64>)> = files
            .iter()
            .filter(|(path, _)| path.ends_with(".wal"))
            .filter_map(|(path, bytes)| {
                let end = bytes.iter().rposition(|&b| b != 0)? as u64 + 1;
                let start = actum::wal::format::SEGMENT_HEADER_BYTES;
                (end > start).then(|| (path.clone(), start..end))
            })
            .collect();
        if !written.is_empty() && self.crashes.chance_ppm(PPM_ONE / 2) {
            return self.crashes.pick(&written).clone();
        }
        // Half of the rest: the bytes of a value the state store holds (its
        // live copy, or one an older page kept), which only a check of
        // each page as it is read stands between and a wrong answer.
        let held = state_store_values(&files, self.model.state());
        if !held.is_empty() && self.crashes.chance_ppm(PPM_ONE / 2) {
            return self.crashes.pick(&held).clone();
        }
        let (path, _) = self.crashes.pick(&files);
        (path.clone(), 0..u64::MAX)
    }
}

/// Where the state store's file holds one of `values` (those of 8 bytes or
/// more, so a match is theirs, not chance): every occurrence, by value in
/// key order, then by offset.
fn state_store_values(
    files: &[(String, Vec<u8>)],
    values: &std::collections::BTreeMap<u64, Vec<u8>>,
) -> Vec<(String, std::ops::Range<u64>)> {
    let Some((path, bytes)) = files.iter().find(|(path, _)| path.ends_with(".redb")) else {
        return Vec::new();
    };
    let mut spots = Vec::new();
    for value in values.values().filter(|v| v.len() >= 8) {
        let mut from = 0;
        while let Some(at) = bytes.get(from..).and_then(|rest| {
            rest.windows(value.len())
                .position(|w| w == value.as_slice())
        }) {
            let start = (from + at) as u64;
            spots.push((path.clone(), start..start + value.len() as u64));
            from += at + 1;
        }
    }
    spots
}

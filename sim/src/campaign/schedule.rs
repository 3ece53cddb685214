//! A run's script: the fault configuration and the sequence of workload
//! steps, either drawn from a seed or generated (and shrunk) by proptest.
//!
//! Invariant: a schedule plus its seed determines the whole run; the seed
//! only supplies what the steps leave open (value bytes, crash outcomes).

use super::config::CampaignConfig;
use crate::disk::FaultConfig;
use crate::rng::{PPM_ONE, Rng};

/// Power cuts armed per workload step, in parts per million.
const CRASH_ARM_PPM: u32 = PPM_ONE / 12;
/// The furthest ahead (in I/O calls) a power cut is armed.
pub const CRASH_AFTER_OPS_MAX: u8 = 80;
/// Records per appended batch, at most.
pub const BATCH_RECORDS_MAX: u8 = 6;

/// One workload step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Append a batch of `records` puts (1..=6) and apply it.
    Append {
        /// Records in the batch.
        records: u8,
    },
    /// Make the state durable, update the manifest, drop covered segments.
    Checkpoint,
    /// Close without a power cut and open again.
    Reopen,
    /// Cut the power after `after_ops` more I/O calls.
    ArmCrash {
        /// I/O calls until the cut (0 cuts at once).
        after_ops: u8,
    },
}

/// Everything a run does, apart from the bytes it writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Seeds value bytes, crash outcomes and crashes during recovery.
    pub seed: u64,
    /// The disk's faults for the run.
    pub faults: FaultConfig,
    /// The workload, in order.
    pub steps: Vec<Step>,
    /// Whether power is also cut during and right after recoveries.
    pub recovery_crashes: bool,
    /// Whether the run ends with a clean close (else with a power cut, so
    /// no clean-shutdown LSN vouches for the log).
    pub clean_finish: bool,
}

impl Schedule {
    /// The schedule seed `seed` stands for: a swarm fault configuration and
    /// `config.steps` random steps.
    pub fn from_seed(seed: u64, config: &CampaignConfig) -> Schedule {
        let mut root = Rng::new(seed);
        let faults = FaultConfig::swarm(&mut root.fork("faults"));
        let mut workload = root.fork("workload");
        let mut steps = Vec::with_capacity(config.steps as usize * 2);
        for _ in 0..config.steps {
            if workload.chance_ppm(CRASH_ARM_PPM) {
                let after_ops = workload.below(u64::from(CRASH_AFTER_OPS_MAX)) as u8;
                steps.push(Step::ArmCrash { after_ops });
            }
            let choice = workload.below(100);
            steps.push(if choice < 80 {
                let records = 1 + workload.below(u64::from(BATCH_RECORDS_MAX)) as u8;
                Step::Append { records }
            } else if choice < 95 {
                Step::Checkpoint
            } else {
                Step::Reopen
            });
        }
        assert!(steps.len() >= config.steps as usize);
        let recovery_crashes = workload.chance_ppm(PPM_ONE / 8 * 7);
        let clean_finish = workload.chance_ppm(PPM_ONE / 2);
        Schedule {
            seed,
            faults,
            steps,
            recovery_crashes,
            clean_finish,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_stands_for_the_same_schedule() {
        let config = CampaignConfig::default();
        let a = Schedule::from_seed(7, &config);
        assert_eq!(a, Schedule::from_seed(7, &config));
        assert_ne!(a.steps, Schedule::from_seed(8, &config).steps);
        assert!(a.steps.iter().any(|s| matches!(s, Step::Append { .. })));
    }
}

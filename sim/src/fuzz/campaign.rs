//! Fuzz target `campaign`: one short storage crash campaign whose seed and
//! length come from the fuzzer's bytes.
//!
//! **Invariant:** every seed passes; a failure panics with the failure's
//! `Display`, which names the seed, the invariant and the replay command.

use super::bytes::Bytes;
use crate::campaign::{CampaignConfig, run_seed};
use crate::fnv::fnv1a64;

/// The shortest campaign the target runs, in workload steps.
const STEPS_MIN: u32 = 20;
/// The longest campaign the target runs, in workload steps.
const STEPS_MAX: u32 = 60;

/// Runs the `campaign` target on `data`.
pub fn campaign(data: &[u8]) {
    let steps = STEPS_MIN + u32::from(Bytes::new(data).u8()) % (STEPS_MAX - STEPS_MIN + 1);
    assert!((STEPS_MIN..=STEPS_MAX).contains(&steps));
    let seed = fnv1a64(data);
    let config = CampaignConfig {
        steps,
        ..CampaignConfig::default()
    };
    if let Err(failure) = run_seed(seed, &config) {
        panic!("campaign failed: {failure}\n  (this run had --steps {steps})");
    }
}

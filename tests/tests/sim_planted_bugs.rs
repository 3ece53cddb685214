//! The harness bites: each known bug, planted in the engine behind the
//! test-only `planted-bugs` feature, is caught by the storage campaign
//! within a stated number of seeds (docs/SIMULATION.md lists the figures).

use actum::planted::PlantedBug;
use actum_sim::campaign::{CampaignConfig, run_seed};

/// The most seeds any planted bug may survive before it is caught.
const SEEDS_TO_CATCH_MAX: u64 = 40;

/// The first seed that catches `bug`, if any within the budget.
fn first_catching_seed(bug: PlantedBug) -> Option<(u64, String)> {
    let config = CampaignConfig {
        planted: Some(bug),
        ..CampaignConfig::default()
    };
    (0..SEEDS_TO_CATCH_MAX).find_map(|seed| {
        run_seed(seed, &config)
            .err()
            .map(|failure| (seed, failure.to_string()))
    })
}

fn assert_caught(bug: PlantedBug) {
    let (seed, failure) = first_catching_seed(bug).unwrap_or_else(|| {
        panic!(
            "planted bug {} survived {SEEDS_TO_CATCH_MAX} seeds",
            bug.name()
        )
    });
    println!("{} caught at seed {seed}: {failure}", bug.name());
    assert!(failure.contains("replay: cargo run"), "{failure}");
}

#[test]
fn acknowledging_before_fsync_is_caught() {
    assert_caught(PlantedBug::AckBeforeFsync);
}

#[test]
fn accepting_a_record_whose_checksum_fails_is_caught() {
    assert_caught(PlantedBug::AcceptBadChecksum);
}

#[test]
fn skipping_the_directory_sync_after_creating_a_segment_is_caught() {
    assert_caught(PlantedBug::SkipSegmentDirSync);
}

#[test]
fn treating_mid_log_corruption_as_a_torn_tail_is_caught() {
    assert_caught(PlantedBug::CorruptionAsTornTail);
}

#[test]
fn recycling_a_segment_file_without_its_new_header_is_caught() {
    assert_caught(PlantedBug::RecycleKeepsOldHeader);
}

//! The harness bites: each known bug, planted in the engine behind the
//! test-only `planted-bugs` feature, is caught by the storage campaign
//! within a stated number of seeds (docs/SIMULATION.md lists the figures),
//! by the invariant that names what the bug breaks.

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

/// Asserts that `bug` is caught, and by the invariant meant for it.
fn assert_caught(bug: PlantedBug, invariant: &str) {
    let (seed, failure) = first_catching_seed(bug).unwrap_or_else(|| {
        panic!(
            "planted bug {} survived {SEEDS_TO_CATCH_MAX} seeds",
            bug.name()
        )
    });
    println!("{} caught at seed {seed}: {failure}", bug.name());
    assert!(failure.contains("replay: cargo run"), "{failure}");
    assert!(
        failure.contains(&format!("invariant `{invariant}`")),
        "{} was caught, but not by `{invariant}`: {failure}",
        bug.name()
    );
}

#[test]
fn acknowledging_before_fsync_is_caught() {
    assert_caught(
        PlantedBug::AckBeforeFsync,
        "recovery succeeds without faults",
    );
}

#[test]
fn accepting_a_record_whose_checksum_fails_is_caught() {
    assert_caught(
        PlantedBug::AcceptBadChecksum,
        "recovery succeeds without faults",
    );
}

#[test]
fn skipping_the_directory_sync_after_creating_a_segment_is_caught() {
    assert_caught(
        PlantedBug::SkipSegmentDirSync,
        "every acknowledged append survives",
    );
}

#[test]
fn treating_mid_log_corruption_as_a_torn_tail_is_caught() {
    assert_caught(
        PlantedBug::CorruptionAsTornTail,
        "damage gives an error, never wrong data",
    );
}

#[test]
fn recycling_a_segment_file_without_its_new_header_is_caught() {
    assert_caught(
        PlantedBug::RecycleKeepsOldHeader,
        "recovery succeeds without faults",
    );
}

#[test]
fn a_repair_whose_cut_does_not_last_is_caught() {
    assert_caught(
        PlantedBug::RepairCutDoesNotLast,
        "a repaired log opens again as repaired",
    );
}

#[test]
fn growing_a_segment_from_a_stale_size_is_caught() {
    assert_caught(
        PlantedBug::GrowFromStaleSize,
        "recovery succeeds without faults",
    );
}

#[test]
fn reading_a_page_whose_sum_does_not_match_is_caught() {
    assert_caught(
        PlantedBug::PageSumsUnchecked,
        "damage gives an error, never wrong data",
    );
}

#[test]
fn a_first_write_that_skips_the_syncs_an_open_left_is_caught() {
    assert_caught(
        PlantedBug::FirstWriteSkipsOpenSyncs,
        "every acknowledged append survives",
    );
}

#[test]
fn a_refused_store_that_keeps_its_handle_is_caught() {
    assert_caught(
        PlantedBug::KeepRefusedStore,
        "a refused open leaves no file open",
    );
}

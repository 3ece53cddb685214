//! The runtime family of the agent campaign, run by `cargo test`: the
//! workflows as `actum::runtime` handlers under crashes, dropped acks,
//! stalls past the lease and clock jumps keep every invariant; one seed
//! replays the same run and history; and each planted runtime bug is
//! caught, in every block of seeds, within a stated number of seeds, by
//! the invariant that names what it breaks (docs/SIMULATION.md lists the
//! measured seeds-to-catch).
//!
//! `.ci/run` runs 2000 more seeds in release:
//! `cargo run --release -p actum-sim -- runtime --seeds 2000`.

use actum_sim::agents::rt::{
    AWAITED_NOT_SENT, CONFIRMED_NOT_SENT, DIVERGED_NEVER_ACTS, LIVE_LEASE, MOVED_RUN_NEW_HANDLER,
    RuntimeReport, WAITS_KEEP_TERMS, run_runtime_seed, runtime_history,
};
use actum_sim::agents::{AgentConfig, PlantedBug};

/// Fresh seeds per `cargo test` run.
const SEEDS_PER_TEST_RUN: u64 = 100;
/// The most seeds a planted runtime bug may survive from the start of a
/// block.
const SEEDS_TO_CATCH_MAX: u64 = 100;
/// Blocks each planted bug is tried in (starting at 0, 1000, 2000, ...).
const BLOCKS: u64 = 10;

fn run(seed: u64) -> RuntimeReport {
    match run_runtime_seed(seed, &AgentConfig::default()) {
        Ok(report) => report,
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn a_block_of_seeds_keeps_every_invariant_on_the_runtime() {
    let first = 3_000_000;
    let mut total = RuntimeReport::default();
    for seed in first..first + SEEDS_PER_TEST_RUN {
        total.add(&run(seed));
    }
    // The block exercises what it claims to.
    assert!(total.crashes > 0 && total.died_after_send > 0, "{total}");
    assert!(
        total.stalls > 0 && total.jumps > 0 && total.leases_lost > 0,
        "{total}"
    );
    assert!(total.parked > 0 && total.answers > 0, "{total}");
    assert!(total.paused > 0 && total.reconciled > 0, "{total}");
    assert!(total.cancels > 0, "{total}");
    assert!(
        total.fan_outs > total.fan_outs_first && total.fan_outs_first > 0,
        "{total}"
    );
    assert!(total.completed > 0 && total.model_calls > 0, "{total}");
    assert!(total.moves > 0, "{total}");
    assert!(total.diverged > 0 && total.rollbacks > 0, "{total}");
    assert!(total.retries > 0 && total.retries_refused > 0, "{total}");
    assert!(total.forks > 0, "{total}");
    assert!(total.late > 0 && total.lifetime_waits > 0, "{total}");
    assert!(
        total.reply_waits > total.replies_elapsed && total.replies_elapsed > 0,
        "{total}"
    );
    assert!(
        total.webhooks_repeated > 0 && total.replies_early > 0,
        "{total}"
    );
}

#[test]
fn the_same_seed_replays_the_same_run_and_history() {
    let config = AgentConfig::default();
    for seed in [3, 58, 901] {
        assert_eq!(run(seed), run(seed), "seed {seed}");
        let a = runtime_history(seed, &config).expect("seed passes");
        let b = runtime_history(seed, &config).expect("seed passes");
        assert!(a.len() > 10, "seed {seed}: a history worth reading");
        assert_eq!(a, b, "seed {seed}: the history is byte-identical");
    }
}

/// The seed (from the block's start) and invariant that catch `bug` in
/// each block.
fn caught_in_every_block(bug: PlantedBug) -> Vec<(u64, &'static str)> {
    let config = AgentConfig {
        planted: Some(bug),
        ..AgentConfig::default()
    };
    (0..BLOCKS)
        .map(|block| {
            let start = block * 1000;
            let (seed, failure) = (start..start + SEEDS_TO_CATCH_MAX)
                .find_map(|seed| run_runtime_seed(seed, &config).err().map(|f| (seed, f)))
                .unwrap_or_else(|| {
                    panic!(
                        "planted bug {} survived seeds {start}..{}",
                        bug.name(),
                        start + SEEDS_TO_CATCH_MAX
                    )
                });
            assert!(
                failure.to_string().contains(&format!(
                    "cargo run --release -p actum-sim -- runtime --seed {seed} --planted {}",
                    bug.name()
                )),
                "a failure names the command that replays it: {failure}"
            );
            (seed - start, failure.invariant)
        })
        .collect()
}

fn assert_caught_by(bug: PlantedBug, invariant: &str) {
    let caught = caught_in_every_block(bug);
    println!(
        "{}: seeds from each block's start, invariant: {caught:?}",
        bug.name()
    );
    for (offset, by) in caught {
        assert_eq!(by, invariant, "{} at +{offset}", bug.name());
    }
}

#[test]
fn a_keeper_that_renews_after_loss_is_caught_sending_without_a_live_lease() {
    assert_caught_by(PlantedBug::RenewAfterLoss, LIVE_LEASE);
}

#[test]
fn a_resumed_handler_resending_a_confirmed_step_is_caught_at_the_tool() {
    assert_caught_by(PlantedBug::ResendConfirmedStep, CONFIRMED_NOT_SENT);
}

#[test]
fn a_retry_reusing_the_failed_key_is_caught_by_the_worlds_record() {
    assert_caught_by(
        PlantedBug::RetryReusesFailedKey,
        "every done effect happened exactly once",
    );
}

#[test]
fn a_wait_for_all_children_ended_at_the_first_is_caught_by_the_waits_terms() {
    assert_caught_by(PlantedBug::JoinAllAtFirstEnd, WAITS_KEEP_TERMS);
}

#[test]
fn a_move_under_a_live_lease_is_caught_when_the_old_handler_acts_on_the_moved_run() {
    assert_caught_by(PlantedBug::MoveLeasedRun, MOVED_RUN_NEW_HANDLER);
}

#[test]
fn a_runtime_that_skips_its_journal_check_is_caught_acting_on_a_diverged_run() {
    assert_caught_by(PlantedBug::SkipJournalCheck, DIVERGED_NEVER_ACTS);
}

#[test]
fn a_retry_that_resends_what_the_run_had_confirmed_is_caught_at_the_tool() {
    assert_caught_by(PlantedBug::RetryResendsConfirmed, CONFIRMED_NOT_SENT);
}

#[test]
fn a_query_before_a_token_ignoring_requests_lifetime_is_caught_when_the_late_request_lands() {
    assert_caught_by(
        PlantedBug::QueryBeforeRequestLifetime,
        "every done effect happened exactly once",
    );
}

#[test]
fn a_saga_that_asks_about_a_token_ignoring_undo_at_once_is_caught_when_the_late_recall_lands() {
    assert_caught_by(
        PlantedBug::SagaQueriesAtOnce,
        "every done effect happened exactly once",
    );
}

#[test]
fn a_resumed_async_step_resending_its_awaited_request_is_caught_at_the_tool() {
    assert_caught_by(PlantedBug::ResendAwaitedRequest, AWAITED_NOT_SENT);
}

//! The agent campaign, run by `cargo test`: a block of seeds, the
//! determinism check (same seed, same report and the same history, byte for
//! byte), and the readable history a failure carries.
//!
//! Every failure prints its seed and the command that replays it. Set
//! `ACTUM_SEED=N` to run one seed here instead of the block.

use actum_sim::agents::{AgentConfig, PlantedBug, replay_history, run_agent_seed};

/// Fresh seeds per `cargo test` run; `.ci/run` runs 2000 more in release.
const SEEDS_PER_TEST_RUN: u64 = 64;

fn run(seed: u64) -> actum_sim::agents::AgentReport {
    match run_agent_seed(seed, &AgentConfig::default()) {
        Ok(report) => report,
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn a_block_of_seeds_keeps_every_invariant() {
    if let Ok(value) = std::env::var("ACTUM_SEED") {
        let seed = value.trim().parse().expect("ACTUM_SEED is a u64");
        run(seed);
        return;
    }
    let first = 2_000_000;
    let mut total = actum_sim::agents::AgentReport::default();
    for seed in first..first + SEEDS_PER_TEST_RUN {
        total.add(&run(seed));
    }
    // The block exercises what it claims to: crashes, zombies, lost acks,
    // resends, queries, compensations and journaled decisions all happen.
    assert!(
        total.crashes > 0 && total.recoveries > total.crashes / 2,
        "{total:?}"
    );
    assert!(total.zombies_fenced > 0, "{total:?}");
    assert!(
        total.acks_dropped > 0 && total.resends > 0 && total.queries > 0,
        "{total:?}"
    );
    assert!(
        total.decisions_replayed > 0 && total.model_calls > 0,
        "{total:?}"
    );
    assert!(total.completed > 0, "{total:?}");
    // An operator read the live database beside the process, and the
    // snapshot held the live books.
    let live_reads = total
        .checks
        .get("a snapshot of the live database holds its books at its LSN")
        .copied();
    assert!(live_reads.is_some_and(|n| n > 0), "{total:?}");
}

#[test]
fn the_same_seed_replays_the_same_run_and_the_same_history() {
    let config = AgentConfig::default();
    for seed in [5, 77, 1234] {
        let first = run_agent_seed(seed, &config).expect("seed passes");
        let second = run_agent_seed(seed, &config).expect("seed passes");
        assert_eq!(first, second, "seed {seed} did not replay identically");
        let a = replay_history(seed, &config).expect("seed passes");
        let b = replay_history(seed, &config).expect("seed passes");
        assert!(a.len() > 20, "seed {seed}: a history worth reading");
        assert_eq!(a, b, "seed {seed}: the history is byte-identical");
    }
    let a = run_agent_seed(5, &config).expect("seed passes");
    let b = run_agent_seed(6, &config).expect("seed passes");
    assert_ne!(a, b, "different seeds should take different paths");
}

#[test]
fn a_failure_names_the_seed_the_invariant_and_the_replay_command_with_its_history() {
    let config = AgentConfig {
        planted: Some(PlantedBug::SkipLedgerOnResume),
        ..AgentConfig::default()
    };
    let failure = (0..40)
        .find_map(|seed| run_agent_seed(seed, &config).err())
        .expect("the planted bug is caught");
    let text = failure.to_string();
    assert!(
        text.starts_with(&format!("seed {}:", failure.seed)),
        "{text}"
    );
    assert!(text.contains("invariant `"), "{text}");
    assert!(
        text.contains(&format!(
            "replay: cargo run --release -p actum-sim -- agents --seed {} --planted \
             skip-ledger-on-resume --history",
            failure.seed
        )),
        "{text}"
    );
    assert!(!failure.history.is_empty(), "a failure carries its history");
    assert!(
        text.contains(" claims "),
        "the history tells the story: {text}"
    );
}

//! proptest over agent workflows and fault schedules: any schedule keeps
//! every invariant, and a failing one shrinks to a short schedule whose
//! history a person can read.
//!
//! Failures proptest finds are persisted beside this file
//! (`sim_agents_proptest.proptest-regressions`) and replayed first on every
//! run; commit that file when it appears.

use actum::books::OperatorAction;
use actum_sim::FaultConfig;
use actum_sim::agents::{
    AgentConfig, AgentSchedule, CRASH_AFTER_OPS_MAX, Event, JUMP_MS_MAX, PlantedBug, RUNS_MAX,
    TICK_MS_MAX, WORKERS_MAX, Workflow, run_agent_schedule,
};
use actum_sim::rng::PPM_ONE;
use actum_sim::world::{Fate, REQUEST_LIFETIME_MS_MAX};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};

/// An event of the fault phase; `operator_weight` 0 leaves out what comes
/// from outside the workers (operators, approvers, webhooks).
fn event(operator_weight: u32) -> impl Strategy<Value = Event> {
    let worker = 0..WORKERS_MAX;
    prop_oneof![
        12 => worker.clone().prop_map(Event::Advance),
        4 => (1..=TICK_MS_MAX).prop_map(Event::Tick),
        1 => (30_000..=JUMP_MS_MAX).prop_map(Event::Jump),
        1 => Just(Event::Crash),
        1 => (1..=CRASH_AFTER_OPS_MAX).prop_map(Event::ArmIoCrash),
        1 => worker.clone().prop_map(Event::Pause),
        1 => worker.prop_map(Event::Resume),
        1 => Just(Event::Checkpoint),
        operator_weight => (
            prop_oneof![
                Just(OperatorAction::Pause),
                Just(OperatorAction::Resume),
                Just(OperatorAction::Cancel)
            ],
            0..RUNS_MAX as u8
        )
            .prop_map(|(action, run)| Event::Operate(action, run)),
        // From outside the runs: an approver's decision, a webhook's signal.
        // (One arm: `prop_oneof!` takes a weight of 0 only up to ten arms.)
        2 * operator_weight => prop_oneof![
            (0..4u8, 0..RUNS_MAX as u8).prop_map(|(code, run)| Event::Approve(code, run)),
            (0..3u8, 0..RUNS_MAX as u8).prop_map(|(code, run)| Event::Signal(code, run)),
        ],
    ]
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        6 => Just(Fate::Delivered),
        1 => Just(Fate::AckDropped),
        1 => Just(Fate::RequestLost),
        1 => Just(Fate::Declined),
        1 => (1..=REQUEST_LIFETIME_MS_MAX as u32).prop_map(|delay_ms| Fate::Slow { delay_ms }),
    ]
}

/// Crash faults only, each a quarter of `PPM_ONE` per unit, so they shrink
/// towards zero.
fn faults() -> impl Strategy<Value = FaultConfig> {
    (0..=4u32, 0..=4u32, 0..=4u32, 0..=4u32).prop_map(|(lost, torn, garbage, dir)| {
        let quarter = PPM_ONE / 4;
        FaultConfig {
            crash_write_lost_ppm: lost * quarter,
            crash_write_torn_ppm: torn.min(4 - lost) * quarter,
            torn_sector_garbage_ppm: garbage * quarter,
            crash_size_change_lost_ppm: lost * quarter,
            crash_dir_flushed_ppm: dir * quarter,
            ..FaultConfig::none()
        }
    })
}

fn schedule(events_max: usize, operator_weight: u32) -> impl Strategy<Value = AgentSchedule> {
    (
        any::<u64>(),
        prop::collection::vec(prop::sample::select(Workflow::ALL.to_vec()), 1..=RUNS_MAX),
        1..=WORKERS_MAX,
        faults(),
        prop::collection::vec(event(operator_weight), 0..events_max),
        prop::collection::vec(fate(), 0..events_max / 2),
        prop::sample::select(vec![4u64, 16, 64]),
    )
        .prop_map(
            |(seed, runs, workers, faults, events, fates, checkpoint_every_records)| {
                AgentSchedule {
                    seed,
                    runs,
                    workers,
                    faults,
                    events,
                    fates,
                    checkpoint_every_records,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_agent_schedule_keeps_every_invariant(schedule in schedule(240, 1)) {
        let result = run_agent_schedule(&schedule, &AgentConfig::default());
        prop_assert!(result.is_ok(), "{}\nschedule: {schedule:?}", result.err().map(|f| f.to_string()).unwrap_or_default());
    }
}

/// With a planted bug, proptest finds a failing schedule and shrinks it: the
/// shrunk schedule, and the history its failure prints, are what a person
/// debugs.
#[test]
fn a_failing_agent_schedule_shrinks_to_a_short_readable_history() {
    let config = AgentConfig {
        planted: Some(PlantedBug::SkipLedgerOnResume),
        ..AgentConfig::default()
    };
    // A fixed proptest seed, so the search and its shrinking are the same
    // on every run.
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 256,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    // Without operators: they would keep the runs they name from shrinking
    // away, and the planted bug does not need them.
    let outcome = runner.run(&schedule(120, 0), |schedule| {
        prop_assert!(run_agent_schedule(&schedule, &config).is_ok());
        Ok(())
    });
    let minimal = match outcome {
        Err(TestError::Fail(_, minimal)) => minimal,
        other => panic!("the planted bug was not found: {other:?}"),
    };
    let failure = run_agent_schedule(&minimal, &config).expect_err("the shrunk schedule fails");
    println!("shrunk to {minimal:?}\n{failure}");
    assert!(
        minimal.events.len() <= 24,
        "shrinking left {} events: {minimal:?}",
        minimal.events.len()
    );
    assert!(minimal.runs.len() == 1, "one run is enough: {minimal:?}");
    assert!(
        failure.history.len() <= 60,
        "a short story: {} lines\n{failure}",
        failure.history.len()
    );
}

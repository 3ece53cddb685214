//! A run parked in a wait costs its stored bytes, not memory: once a
//! checkpoint wrote it, it leaves the hot books (keeping only its
//! deadline in the claim index), across a restart too, and whatever wakes
//! it (a signal, a reply, an approval, its deadline, an operator) brings it
//! back with nothing lost.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

mod support;

use std::sync::Arc;

use actum::books::{OperatorAction, Outcome, RunState, WaitFor, WaitStatus};
use actum::engine::StepPlan;
use actum::{Engine, ManualClock};
use support::*;

const WEEK_MS: u64 = 7 * DAY_MS;
const RUNS: usize = 300;

/// Run `n` of the test, parked: a third sleep a week, a third wait for a
/// signal, a third for an asynchronous tool's reply.
fn park(engine: &Engine, n: usize) {
    let run = format!("run-{n:03}");
    let grant = create_and_lease(engine, &run, "w1");
    let step = sid("wait");
    let wait_for = match n % 3 {
        0 => WaitFor::Timer,
        1 => WaitFor::Signal {
            name: "paid".into(),
        },
        _ => {
            let args = format!("screen {run}").into_bytes();
            let plan = engine
                .begin_step(&request(
                    &grant.guard,
                    &rid(&run),
                    &step,
                    "kyc.screen",
                    idempotent(),
                    &args,
                ))
                .unwrap();
            let StepPlan::Act(ctx) = plan else {
                panic!("{plan:?}")
            };
            WaitFor::Reply { key: ctx.key }
        }
    };
    let deadline = n.is_multiple_of(3).then_some(START_MS + WEEK_MS);
    let waited = engine
        .open_wait(&rid(&run), &grant.guard, &step, wait_for, deadline, "park")
        .unwrap();
    assert_eq!(waited.wait.status, WaitStatus::Open);
}

fn state_of(engine: &Engine, n: usize) -> RunState {
    engine
        .run(&rid(&format!("run-{n:03}")))
        .unwrap()
        .unwrap()
        .state
}

#[test]
fn parked_runs_leave_memory_at_a_checkpoint_and_come_back_when_woken() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    for n in 0..RUNS {
        park(&engine, n);
    }
    assert_eq!(engine.runs_in_memory(), RUNS);
    engine.checkpoint().unwrap();
    assert_eq!(engine.runs_in_memory(), 0, "parked runs left memory");
    // Nothing is claimable before the week is out.
    assert!(engine.claim_next(&wid("w2"), LEASE_MS).unwrap().is_none());

    // A signal, a reply and an operator's pause reach runs out of memory.
    let signalled = engine
        .signal(&rid("run-001"), "paid", b"ok", "psp")
        .unwrap();
    assert_eq!(signalled.taken_by, Some(sid("wait")));
    let reply = Outcome::Confirmed {
        receipt: b"clear".to_vec(),
    };
    let screen = engine.waits(&rid("run-002")).unwrap();
    let WaitFor::Reply { key } = &screen.waits[0].wait_for else {
        panic!("{screen:?}")
    };
    assert_eq!(
        engine.deliver_reply(key, reply, "kyc").unwrap(),
        Some(sid("wait"))
    );
    engine
        .operate(&rid("run-005"), OperatorAction::Pause, "ops", "look")
        .unwrap();
    assert_eq!(engine.runs_in_memory(), 3);
    assert_eq!(state_of(&engine, 1), RunState::Running);
    assert_eq!(state_of(&engine, 2), RunState::Running);
    assert_eq!(state_of(&engine, 5), RunState::Paused);
    let woken: Vec<String> = (0..2)
        .map(|_| {
            let grant = engine.claim_next(&wid("w2"), LEASE_MS).unwrap().unwrap();
            grant.run.as_str().to_string()
        })
        .collect();
    assert_eq!(woken, ["run-001", "run-002"]);
    assert!(engine.claim_next(&wid("w2"), LEASE_MS).unwrap().is_none());

    // A restart keeps them out of memory, and their deadlines in the
    // claim index.
    engine.close().unwrap();
    let engine = open_fs(dir.path(), &clock);
    assert_eq!(engine.runs_in_memory(), 3, "the woken and the paused");
    clock.advance_ms(WEEK_MS);
    let mut claimed = Vec::new();
    while let Some(grant) = engine.claim_next(&wid("w3"), LEASE_MS).unwrap() {
        claimed.push(grant.run);
    }
    let sleepers: Vec<_> = (0..RUNS)
        .filter(|n| n.is_multiple_of(3))
        .map(|n| rid(&format!("run-{n:03}")))
        .collect();
    // First the two woken runs whose leases ran out meanwhile, then each
    // timer once, in the order they became due.
    let expected: Vec<_> = [rid("run-001"), rid("run-002")]
        .into_iter()
        .chain(sleepers.iter().cloned())
        .collect();
    assert_eq!(claimed, expected);
    for n in (0..RUNS).step_by(3) {
        let book = engine.waits(&rid(&format!("run-{n:03}"))).unwrap();
        assert_eq!(book.waits[0].status, WaitStatus::Elapsed);
    }
    // The runs still waiting for a signal or a reply are still out of
    // memory; the books hold every run.
    assert_eq!(engine.runs_in_memory(), 3 + sleepers.len());
    assert_eq!(engine.runs(None, None, 1000).unwrap().len(), RUNS);
    assert_eq!(
        engine
            .runs(Some(RunState::WaitingTool), None, 1000)
            .unwrap()
            .len(),
        RUNS - 3 - sleepers.len()
    );
}

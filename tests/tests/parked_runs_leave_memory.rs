//! A run parked in a wait costs its stored bytes, not memory: once a
//! checkpoint wrote it, it leaves the hot books (keeping only its
//! deadline in the claim index), across a restart too, and whatever wakes
//! it (a signal, a reply, an approval, its deadline, an operator) brings it
//! back with nothing lost.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

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
    // claim index; the paused run, which no lease holds, stays out too.
    engine.close().unwrap();
    let engine = open_fs(dir.path(), &clock);
    assert_eq!(
        engine.runs_in_memory(),
        2,
        "the woken, whose leases the open released"
    );
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
    assert_eq!(engine.runs_in_memory(), 2 + sleepers.len());
    assert_eq!(state_of(&engine, 5), RunState::Paused);
    assert_eq!(engine.runs(None, None, 1000).unwrap().len(), RUNS);
    assert_eq!(
        engine
            .runs(Some(RunState::WaitingTool), None, 1000)
            .unwrap()
            .len(),
        RUNS - 3 - sleepers.len()
    );
}

#[test]
fn an_open_leaves_runs_no_lease_holds_out_of_memory_claimable_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    // Queued runs, created a second apart; one started and then let go
    // (running, claimable at once); one held.
    for n in 0..RUNS {
        engine
            .create_run(create_cmd(&format!("queued-{n:03}")))
            .unwrap();
        clock.advance_ms(1_000);
    }
    let orphan = create_and_lease(&engine, "orphan", "w1");
    engine.release_lease(&rid("orphan"), &orphan.guard).unwrap();
    clock.advance_ms(1_000);
    let held = create_and_lease(&engine, "held", "w1");
    engine.close().unwrap();

    // Only the held run comes into memory (to have its lease released).
    let engine = open_fs(dir.path(), &clock);
    assert_eq!(engine.recovery().leases_released, 1);
    assert_eq!(engine.runs_in_memory(), 1);
    // Reads reach the runs out of memory without bringing them in.
    assert_eq!(
        engine
            .runs(Some(RunState::Pending), None, 1000)
            .unwrap()
            .len(),
        RUNS
    );
    assert_eq!(
        engine.run(&rid("orphan")).unwrap().unwrap().state,
        RunState::Running
    );
    assert_eq!(engine.runs_in_memory(), 1);
    // The claim order is the order they became claimable, as before the
    // restart: the queue first to last, then the orphan, then the held run
    // (released at open, so claimable from then on).
    let first = engine.claim_next(&wid("w2"), LEASE_MS).unwrap().unwrap();
    assert_eq!(first.run, rid("queued-000"));
    assert_eq!(engine.runs_in_memory(), 2, "a claim brings its run in");
    // A crash (no close) before a checkpoint: the replayed claim is in
    // memory again, the queue stays out.
    drop(engine);
    let engine = open_fs(dir.path(), &clock);
    assert_eq!(engine.recovery().leases_released, 1, "queued-000's");
    let mut claimed = Vec::new();
    while let Some(grant) = engine.claim_next(&wid("w3"), LEASE_MS).unwrap() {
        if grant.run == rid("held") {
            assert!(
                grant.guard.token > held.guard.token,
                "the old token stays fenced"
            );
        }
        claimed.push(grant.run);
    }
    // The rest of the queue, the orphan, then the two runs whose leases an
    // open released at the same instant, by name.
    let expected: Vec<_> = (1..RUNS)
        .map(|n| rid(&format!("queued-{n:03}")))
        .chain([rid("orphan"), rid("held"), rid("queued-000")])
        .collect();
    assert_eq!(claimed, expected);
    assert_eq!(engine.runs_in_memory(), RUNS + 2);
}

#[test]
fn a_claim_for_some_agents_finds_its_run_behind_thousands_parked_of_others() {
    const OTHERS: usize = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let open = || open_fs(dir.path(), &clock);
    let engine = open();
    // Runs of another agent, claimable and claimed first by anyone, then
    // one of ours.
    for n in 0..OTHERS {
        let mut cmd = create_cmd(&format!("thread-{n:04}"));
        cmd.agent_version = "langgraph-thread".into();
        engine.create_run(cmd).unwrap();
    }
    clock.advance_ms(1_000);
    engine.create_run(create_cmd("mine")).unwrap();
    engine.close().unwrap();

    let engine = open();
    assert_eq!(engine.runs_in_memory(), 0);
    let ours = ["agent 1.0".to_string()];
    // (The others are passed by on the agent version the claim index keeps
    // for a parked run, unread: `hot::view`'s unit test.)
    let grant = engine
        .claim_next_of(&wid("w1"), LEASE_MS, &ours)
        .unwrap()
        .unwrap();
    assert_eq!(grant.run, rid("mine"));
    assert!(
        engine
            .claim_next_of(&wid("w1"), LEASE_MS, &ours)
            .unwrap()
            .is_none(),
        "nothing else of ours"
    );
    // A claim for every agent still finds the others, oldest first.
    let any = engine.claim_next(&wid("w2"), LEASE_MS).unwrap().unwrap();
    assert_eq!(any.run, rid("thread-0000"));
}

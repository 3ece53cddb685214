//! An operator pauses, resumes and cancels runs without holding their
//! leases, and the lifecycle rules hold across a crash: a paused run begins
//! no effect and is handed to no worker; a resumed one is claimed again and
//! goes on; a cancel fences the holder, whose in-flight act still reports
//! its outcome.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::sync::Arc;

use actum::books::{EffectStatus, OperatorAction, Outcome, RunState};
use actum::engine::StepPlan;
use actum::{Error, ManualClock};
use support::*;

#[test]
fn a_paused_run_waits_for_its_operator_across_a_crash_and_a_cancel_fences_its_worker() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let run = rid("refund-7");
    let (first, second) = (sid("refund"), sid("mail"));
    let ctx = {
        let engine = open_fs(dir.path(), &clock);
        let lease = create_and_lease(&engine, "refund-7", "w1");
        let req = request(
            &lease.guard,
            &run,
            &first,
            "bank.refund",
            idempotent(),
            b"12 EUR",
        );
        let StepPlan::Act(ctx) = engine.begin_step(&req).unwrap() else {
            panic!("a fresh step acts")
        };
        // The act is in flight when an operator pauses the run.
        let paused = engine
            .operate(
                &run,
                OperatorAction::Pause,
                "ops-anna",
                "refund over the limit",
            )
            .unwrap();
        assert_eq!((paused.state, paused.changed), (RunState::Paused, true));
        let next = request(
            &lease.guard,
            &run,
            &second,
            "mail.send",
            idempotent(),
            b"done",
        );
        let err = engine.begin_step(&next).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::RunNotRunning {
                    state: RunState::Paused,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("refund-7"), "{err}");
        // The act's outcome is a fact: recorded while paused.
        let outcome = Outcome::Confirmed {
            receipt: b"rf_1".to_vec(),
        };
        engine.finish_step(&lease.guard, &ctx, outcome).unwrap();
        ctx
        // Crash: dropped without closing.
    };
    clock.advance_ms(LEASE_MS + 1);
    let engine = open_fs(dir.path(), &clock);
    assert_eq!(engine.run(&run).unwrap().unwrap().state, RunState::Paused);
    assert!(
        engine.claim_next(&wid("w2"), LEASE_MS).unwrap().is_none(),
        "a paused run is handed to no worker, even with its lease gone"
    );
    let audit = engine.audit(&run).unwrap();
    assert!(
        audit.iter().any(|e| e
            .why
            .contains("operator ops-anna (pause): refund over the limit")),
        "{audit:?}"
    );
    let resumed = engine
        .operate(
            &run,
            OperatorAction::Resume,
            "ops-anna",
            "approved by finance",
        )
        .unwrap();
    assert_eq!(resumed.state, RunState::Running);
    let w2 = engine.claim_next(&wid("w2"), LEASE_MS).unwrap().unwrap();
    assert_eq!(w2.run, run);
    // The first step is done: it replays, the second begins.
    let again = request(
        &w2.guard,
        &run,
        &first,
        "bank.refund",
        idempotent(),
        b"12 EUR",
    );
    assert!(matches!(
        engine.begin_step(&again).unwrap(),
        StepPlan::Done(_)
    ));
    let next = request(&w2.guard, &run, &second, "mail.send", idempotent(), b"done");
    let StepPlan::Act(mail) = engine.begin_step(&next).unwrap() else {
        panic!("the second step acts")
    };
    // Cancelled while the mail is in flight: the worker is fenced, the
    // mail's outcome still lands.
    let cancelled = engine
        .operate(
            &run,
            OperatorAction::Cancel,
            "ops-anna",
            "customer withdrew",
        )
        .unwrap();
    assert_eq!(cancelled.state, RunState::Cancelled);
    let third = sid("survey");
    let late = request(
        &w2.guard,
        &run,
        &third,
        "mail.send",
        idempotent(),
        b"survey",
    );
    assert!(matches!(
        engine.begin_step(&late).unwrap_err(),
        Error::RunTerminal {
            state: RunState::Cancelled,
            ..
        }
    ));
    engine
        .finish_step(
            &w2.guard,
            &mail,
            Outcome::Confirmed {
                receipt: b"m_1".to_vec(),
            },
        )
        .unwrap();
    assert!(matches!(
        engine.effect(&mail.key).unwrap().unwrap().status,
        EffectStatus::Confirmed { .. }
    ));
    assert!(matches!(
        engine.effect(&ctx.key).unwrap().unwrap().status,
        EffectStatus::Confirmed { .. }
    ));
    // Asking again changes nothing; resuming a cancelled run is refused.
    assert!(
        !engine
            .operate(&run, OperatorAction::Cancel, "ops-anna", "again")
            .unwrap()
            .changed
    );
    assert!(matches!(
        engine.operate(&run, OperatorAction::Resume, "ops-anna", "oops"),
        Err(Error::RunTerminal { .. })
    ));
    engine.close().unwrap();
}

//! Durable waits across a crash: a run waiting for a person holds no lease
//! and no worker; the approval arrives after the process died and came
//! back; the approved effect happens once, with the approved arguments.
//! A week-long timer wakes its run on the clock after a restart, and a
//! signal sent before the wait is opened is waiting for it.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::sync::Arc;

use actum::books::{RunState, WaitFor, WaitStatus, digest_of};
use actum::engine::StepPlan;
use actum::{Error, ManualClock};
use support::*;

#[test]
fn an_approval_after_a_crash_wakes_the_run_and_binds_its_one_effect() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let run = rid("vendor-3");
    let pay = sid("pay");
    let args = b"pay acme 4,800 EUR";
    let approval = WaitFor::Approval {
        args_digest: digest_of(args),
        role: "finance".into(),
    };
    let expiry = START_MS + 2 * DAY_MS;
    {
        let engine = open_fs(dir.path(), &clock);
        let lease = create_and_lease(&engine, "vendor-3", "w1");
        let waited = engine
            .open_wait(
                &run,
                &lease.guard,
                &pay,
                approval.clone(),
                Some(expiry),
                "new vendor",
            )
            .unwrap();
        assert_eq!(waited.state, RunState::WaitingHuman);
        assert!(engine.run(&run).unwrap().unwrap().lease.is_none());
        // The process dies without a clean close.
    }
    clock.advance_ms(DAY_MS);
    let engine = open_fs(dir.path(), &clock);
    assert!(
        engine.claim_next(&wid("w2"), LEASE_MS).unwrap().is_none(),
        "a run waiting for a person is handed to no worker"
    );
    let stale = engine.decide_approval(
        &run,
        &pay,
        digest_of(b"pay acme 48,000 EUR"),
        "ann",
        "finance",
        true,
        "",
    );
    assert!(
        matches!(stale, Err(Error::ApprovalMismatch { .. })),
        "{stale:?}"
    );
    assert!(
        engine
            .decide_approval(
                &run,
                &pay,
                digest_of(args),
                "ann",
                "finance",
                true,
                "invoice checked"
            )
            .unwrap()
    );
    let lease = engine.claim_next(&wid("w2"), LEASE_MS).unwrap().unwrap();
    let again = engine
        .open_wait(&run, &lease.guard, &pay, approval, Some(expiry), "")
        .unwrap();
    assert!(
        matches!(again.wait.status, WaitStatus::Approved { ref approver, .. } if approver == "ann")
    );
    let other = request(
        &lease.guard,
        &run,
        &pay,
        "bank.pay",
        idempotent(),
        b"pay acme 48,000 EUR",
    );
    assert!(matches!(
        engine.begin_step(&other),
        Err(Error::ApprovalMismatch { .. })
    ));
    let req = request(&lease.guard, &run, &pay, "bank.pay", idempotent(), args);
    assert!(matches!(engine.begin_step(&req).unwrap(), StepPlan::Act(_)));
    let audit = engine.audit(&run).unwrap();
    assert!(
        audit.iter().any(|e| e.why == "ann: invoice checked"),
        "{audit:?}"
    );
    engine.close().unwrap();
}

#[test]
fn a_week_long_timer_wakes_its_run_after_a_restart_and_an_early_signal_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let run = rid("vendor-4");
    let due = START_MS + 7 * DAY_MS;
    {
        let engine = open_fs(dir.path(), &clock);
        let lease = create_and_lease(&engine, "vendor-4", "w1");
        // The webhook fires before the run waits for it.
        let sent = engine.signal(&run, "verified", b"iban ok", "bank").unwrap();
        assert_eq!(sent.taken_by, None);
        engine
            .open_wait(
                &run,
                &lease.guard,
                &sid("cool-off"),
                WaitFor::Timer,
                Some(due),
                "a week",
            )
            .unwrap();
        engine.close().unwrap();
    }
    clock.advance_ms(7 * DAY_MS - 1);
    let engine = open_fs(dir.path(), &clock);
    assert!(
        engine.claim_next(&wid("w2"), LEASE_MS).unwrap().is_none(),
        "not due yet"
    );
    clock.advance_ms(1);
    let lease = engine.claim_next(&wid("w2"), LEASE_MS).unwrap().unwrap();
    assert_eq!(engine.run(&run).unwrap().unwrap().state, RunState::Running);
    let verified = WaitFor::Signal {
        name: "verified".into(),
    };
    let waited = engine
        .open_wait(
            &run,
            &lease.guard,
            &sid("verify"),
            verified,
            None,
            "webhook",
        )
        .unwrap();
    let WaitStatus::Signalled { signal } = waited.wait.status else {
        panic!("{waited:?}")
    };
    assert_eq!(
        (signal.payload.as_slice(), waited.state),
        (&b"iban ok"[..], RunState::Running)
    );
    let book = engine.waits(&run).unwrap();
    assert_eq!(book.waits[0].status, WaitStatus::Elapsed);
    assert_eq!(book.waits[0].ended_ms, Some(due));
    assert!(book.inbox.is_empty());
    engine.close().unwrap();
}

//! Scenarios from the seeds: a worker paused past its lease is fenced and
//! its late write refused (002, zombie workers); the treasury sweep whose
//! key would change on retry cannot double-sweep, because the key comes from
//! the engine's (run, step, attempt), not from the arguments (002, the
//! treasury agent).

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::sync::Arc;

use actum::books::{
    BeginEffect, EffectKey, EffectStatus, FinishEffect, Guard, Outcome, RunState, Transition,
    digest_of,
};
use actum::engine::{Begun, StepResult};
use actum::{Error, ManualClock};
use support::*;

/// Worker `guard` begins `step` (mail.send, idempotent) and gets its key.
fn begin_mail(engine: &actum::Engine, guard: &Guard, step: &str) -> EffectKey {
    let begun = engine
        .begin_effect(BeginEffect {
            run: rid("r"),
            step: sid(step),
            guard: guard.clone(),
            tool: "mail.send".into(),
            tool_class: idempotent(),
            args_digest: digest_of(step.as_bytes()),
            args: None,
            rationale: "follow up".into(),
            compensation: None,
        })
        .unwrap();
    let Begun::Proceed { key, .. } = begun else {
        panic!("{begun:?}")
    };
    key
}

fn sent(key: &EffectKey, guard: &Guard) -> FinishEffect {
    FinishEffect {
        key: key.clone(),
        guard: guard.clone(),
        outcome: Outcome::Confirmed {
            receipt: b"sent".to_vec(),
        },
    }
}

#[test]
fn a_worker_paused_past_its_lease_is_fenced_and_its_late_write_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let a = create_and_lease(&engine, "r", "worker-a");
    let run = rid("r");
    let email = begin_mail(&engine, &a.guard, "email");
    let sms = begin_mail(&engine, &a.guard, "sms");
    // Worker A pauses (GC, partition) past its lease, its acts in flight.
    clock.advance_ms(LEASE_MS + 1);
    let late_move = Transition {
        run: run.clone(),
        guard: a.guard.clone(),
        to: RunState::Completed,
        expected_version: None,
        reason: "late".into(),
    };
    // Before anyone else claims the run, a new mutation is LeaseLost...
    let err = engine.transition(late_move.clone()).unwrap_err();
    assert!(
        matches!(&err, Error::LeaseLost { run: r, token } if r == &run && *token == a.guard.token),
        "{err}"
    );
    // ...but the outcome of an act that already happened is a fact, and
    // the token is still the run's latest: it is recorded, receipt kept.
    engine.finish_effect(sent(&email, &a.guard)).unwrap();
    assert!(matches!(
        engine.effect(&email).unwrap().unwrap().status,
        EffectStatus::Confirmed { .. }
    ));
    // Worker B claims the run with a newer token.
    let b = engine
        .claim_next(&wid("worker-b"), LEASE_MS)
        .unwrap()
        .unwrap();
    assert!(b.guard.token > a.guard.token);
    // A wakes up and writes late: fenced, naming the run and both tokens.
    let err = engine.finish_effect(sent(&sms, &a.guard)).unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { run: r, presented, current } if r == &run && *presented == a.guard.token && *current == b.guard.token),
        "{err}"
    );
    assert!(
        err.to_string().contains("r:"),
        "the message names the run: {err}"
    );
    let err = engine.transition(late_move).unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err}");
    // Nothing A sent after B took over landed.
    let entry = engine.effect(&sms).unwrap().unwrap();
    assert_eq!(entry.status, EffectStatus::Intended);
    assert_eq!(engine.run(&run).unwrap().unwrap().state, RunState::Running);
    // B carries on under its own token: the step resends A's key.
    let step = sid("sms");
    let req = request(&b.guard, &run, &step, "mail.send", idempotent(), b"sms");
    let done = engine
        .step(&req, |ctx| {
            assert_eq!(ctx.key, sms);
            assert!(ctx.resend);
            assert_eq!(
                ctx.token, b.guard.token,
                "tools receive the new token, to fence too"
            );
            Outcome::Confirmed {
                receipt: b"sent".to_vec(),
            }
        })
        .unwrap();
    assert!(matches!(done, StepResult::Done { .. }));
    let audit = engine.audit(&run).unwrap();
    assert!(
        audit.iter().any(|e| e.token == Some(b.guard.token)),
        "{audit:?}"
    );
}

#[test]
fn the_treasury_sweep_cannot_double_sweep_because_the_key_comes_from_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut bank = Bank::default();
    let (run, step) = (rid("treasury-2025-03-14"), sid("sweep-acct-7"));
    // Day one, first try: the sweep amount is computed from balances at
    // 09:00; the wire leaves, then the process dies before the ack.
    {
        let engine = open_fs(dir.path(), &clock);
        let lease = create_and_lease(&engine, "treasury-2025-03-14", "w1");
        let req = request(
            &lease.guard,
            &run,
            &step,
            "bank.wire",
            idempotent(),
            b"sweep 1000000 to MMF-A",
        );
        let key = std::cell::RefCell::new(String::new());
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            engine.step(&req, |ctx| {
                *key.borrow_mut() = ctx.key.encode();
                bank.charge_idempotent(&ctx.key.encode(), b"sweep 1000000 to MMF-A");
                panic!("process killed before the bank's ack");
            })
        }));
        assert!(result.is_err());
        // The key is the step's identity, not a hash of the arguments.
        assert_eq!(key.borrow().as_str(), "treasury-2025-03-14/sweep-acct-7/1");
        drop(engine);
    }
    clock.advance_ms(LEASE_MS + 1);
    let engine = open_fs(dir.path(), &clock);
    let lease = engine.claim_next(&wid("w2"), LEASE_MS).unwrap().unwrap();
    // On retry the model recomputes from fresher balances: the amount (and
    // so any argument-derived key) changed. The engine refuses the act.
    let req = request(
        &lease.guard,
        &run,
        &step,
        "bank.wire",
        idempotent(),
        b"sweep 1000050 to MMF-A",
    );
    let err = engine
        .step(&req, |_| panic!("a second sweep went out"))
        .unwrap_err();
    assert!(
        matches!(&err, Error::ArgsMismatch { key, .. } if key.encode() == "treasury-2025-03-14/sweep-acct-7/1"),
        "{err}"
    );
    assert_eq!(bank.charges.len(), 1, "one wire: {:?}", bank.charges);
    // Retrying the recorded call resends the SAME key; the bank dedups.
    let req = request(
        &lease.guard,
        &run,
        &step,
        "bank.wire",
        idempotent(),
        b"sweep 1000000 to MMF-A",
    );
    let done = engine
        .step(&req, |ctx| Outcome::Confirmed {
            receipt: bank.charge_idempotent(&ctx.key.encode(), b"sweep 1000000 to MMF-A"),
        })
        .unwrap();
    assert!(matches!(done, StepResult::Done { .. }), "{done:?}");
    assert_eq!(bank.charges.len(), 1, "still one wire");
}

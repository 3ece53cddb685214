//! Scenarios from the seeds (002: the seven-point ceremony) proving that a
//! side effect happens once across crashes: a crash right after a charge,
//! and a crash between the durable intent and the recorded outcome, for
//! each tool class. A "crash" is dropping the engine without `close` on the
//! real file system; the next open recovers from the log.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::sync::Arc;

use actum::books::{
    BeginEffect, Guard, Outcome, Part, Reconcile, SaveCheckpoint, ToolClass, digest_of,
};
use actum::engine::{Begun, StepResult};
use actum::{Engine, ManualClock};
use support::*;

/// The shop agent's plan: charge the card, then ship. The cursor (next step
/// index) is checkpointed after each step.
fn run_shop_agent(engine: &Engine, guard: &Guard, bank: &mut Bank, shipped: &mut u32) {
    let run = rid("order-17");
    let cursor = engine
        .load_latest(&run, 1)
        .unwrap()
        .map_or(0, |c| c.parts[0].bytes[0]);
    for index in cursor..2 {
        let (step, tool) =
            [("charge", "stripe.charge"), ("ship", "warehouse.ship")][index as usize];
        let step = sid(step);
        let req = request(guard, &run, &step, tool, idempotent(), b"4200 EUR");
        let result = engine
            .step(&req, |ctx| {
                let receipt = if index == 0 {
                    bank.charge_idempotent(&ctx.key.encode(), b"4200 EUR")
                } else {
                    *shipped += 1;
                    b"parcel-1".to_vec()
                };
                Outcome::Confirmed { receipt }
            })
            .unwrap();
        assert!(matches!(result, StepResult::Done { .. }), "{result:?}");
        engine
            .save_checkpoint(SaveCheckpoint {
                run: run.clone(),
                guard: guard.clone(),
                schema_version: 1,
                parts: vec![Part {
                    name: "cursor".into(),
                    bytes: vec![index + 1],
                    extends: None,
                    inline: false,
                }],
            })
            .unwrap();
    }
}

#[test]
fn crash_right_after_the_charge_charges_once_and_resumes_at_the_next_step() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut bank = Bank::default();
    let mut shipped = 0u32;
    {
        let engine = open_fs(dir.path(), &clock);
        let lease = create_and_lease(&engine, "order-17", "w1");
        let run = rid("order-17");
        let step = sid("charge");
        let req = request(
            &lease.guard,
            &run,
            &step,
            "stripe.charge",
            idempotent(),
            b"4200 EUR",
        );
        let done = engine
            .step(&req, |ctx| Outcome::Confirmed {
                receipt: bank.charge_idempotent(&ctx.key.encode(), b"4200 EUR"),
            })
            .unwrap();
        assert!(matches!(
            done,
            StepResult::Done {
                replayed: false,
                ..
            }
        ));
        // Crash: the process dies right after the charge, before the cursor
        // checkpoint and before the ship step.
        drop(engine);
    }
    clock.advance_ms(LEASE_MS + 1);
    let engine = open_fs(dir.path(), &clock);
    // Dropping redb may flush its non-durable commits, so the log may have
    // nothing left to replay; either way the state covers the whole log.
    assert!(!engine.recovery().created);
    if !on_postgres() {
        assert_eq!(
            engine.recovery().durable_lsn.0,
            5,
            "create, lease, start, intent, outcome"
        );
    }
    let lease = engine.claim_next(&wid("w2"), LEASE_MS).unwrap().unwrap();
    assert_eq!(lease.run, rid("order-17"));
    // The restarted agent runs from its last checkpoint (none: the top).
    run_shop_agent(&engine, &lease.guard, &mut bank, &mut shipped);
    assert_eq!(
        bank.charges.len(),
        1,
        "charged exactly once: {:?}",
        bank.charges
    );
    assert_eq!(shipped, 1);
    let charge = engine
        .effect(&actum::books::EffectKey::new(rid("order-17"), sid("charge"), 1).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(charge.resends, 0, "the replay did not even resend");
    // A further restart resumes after the last step: nothing is called.
    let cursor = engine.load_latest(&rid("order-17"), 1).unwrap().unwrap();
    assert_eq!(cursor.parts[0].bytes, vec![2]);
    engine.close().unwrap();
}

/// Begins `step` of run `r` on `class`, performs the act at the bank, and
/// crashes (drops the engine) before the outcome is recorded. Returns the
/// key the act used.
fn act_then_crash(
    dir: &std::path::Path,
    clock: &Arc<ManualClock>,
    class: ToolClass,
    bank: &mut Bank,
) -> String {
    let engine = open_fs(dir, clock);
    let lease = create_and_lease(&engine, "r", "w1");
    let begun = engine
        .begin_effect(BeginEffect {
            run: rid("r"),
            step: sid("pay"),
            guard: lease.guard.clone(),
            tool: "bank.pay".into(),
            tool_class: class,
            args_digest: digest_of(b"100 USD"),
            args: None,
            rationale: "invoice 9 is due".into(),
            compensation: None,
        })
        .unwrap();
    let Begun::Proceed { key, .. } = begun else {
        panic!("{begun:?}")
    };
    bank.charge_blindly(&key.encode(), b"100 USD");
    drop(engine); // crash between the act and its outcome
    key.encode()
}

/// Reopens after the lease expired and claims the run for worker w2.
fn resume(dir: &std::path::Path, clock: &Arc<ManualClock>) -> (Engine, Guard) {
    clock.advance_ms(LEASE_MS + 1);
    let engine = open_fs(dir, clock);
    let lease = engine.claim_next(&wid("w2"), LEASE_MS).unwrap().unwrap();
    assert_eq!(lease.run, rid("r"));
    (engine, lease.guard)
}

#[test]
fn intent_without_outcome_on_an_idempotent_tool_is_resent_with_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut bank = Bank::default();
    let first_key = act_then_crash(dir.path(), &clock, idempotent(), &mut bank);
    let (engine, guard) = resume(dir.path(), &clock);
    let (run, step) = (rid("r"), sid("pay"));
    let req = request(&guard, &run, &step, "bank.pay", idempotent(), b"100 USD");
    let mut calls = 0;
    let result = engine
        .step(&req, |ctx| {
            calls += 1;
            assert!(ctx.resend, "the closure knows it is a resend");
            assert_eq!(ctx.key.encode(), first_key, "resent with the SAME key");
            assert_eq!(ctx.token, guard.token, "under the new lease's token");
            Outcome::Confirmed {
                receipt: bank.charge_idempotent(&ctx.key.encode(), b"100 USD"),
            }
        })
        .unwrap();
    assert_eq!(calls, 1);
    assert!(
        matches!(
            result,
            StepResult::Done {
                replayed: false,
                ..
            }
        ),
        "{result:?}"
    );
    assert_eq!(bank.charges.len(), 1, "the bank deduplicated the resend");
    // And from now on the receipt is replayed.
    let again = engine
        .step(&req, |_| panic!("acted after confirmation"))
        .unwrap();
    assert!(matches!(again, StepResult::Done { replayed: true, .. }));
}

#[test]
fn intent_without_outcome_outside_the_dedup_window_is_unknown_and_not_resent() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut bank = Bank::default();
    let class = ToolClass::Idempotent {
        dedup_window_ms: 1_000,
    };
    act_then_crash(dir.path(), &clock, class, &mut bank);
    let (engine, guard) = resume(dir.path(), &clock); // LEASE_MS > 1 s later
    let (run, step) = (rid("r"), sid("pay"));
    let req = request(&guard, &run, &step, "bank.pay", class, b"100 USD");
    let result = engine
        .step(&req, |_| panic!("resent outside the window"))
        .unwrap();
    assert!(matches!(result, StepResult::Unknown { .. }), "{result:?}");
    assert_eq!(bank.charges.len(), 1);
}

#[test]
fn intent_without_outcome_on_a_queryable_tool_is_reconciled_by_a_query() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut bank = Bank::default();
    let first_key = act_then_crash(dir.path(), &clock, ToolClass::Queryable, &mut bank);
    let (engine, guard) = resume(dir.path(), &clock);
    let (run, step) = (rid("r"), sid("pay"));
    let req = request(
        &guard,
        &run,
        &step,
        "bank.pay",
        ToolClass::Queryable,
        b"100 USD",
    );
    // Without a query the step says what to do and does nothing.
    let pending = engine
        .step(&req, |_| panic!("acted on an ambiguous intent"))
        .unwrap();
    assert!(
        matches!(pending, StepResult::NeedsReconcile { .. }),
        "{pending:?}"
    );
    let mut queried = Vec::new();
    let result = engine
        .step_queryable(
            &req,
            |_| panic!("acted on an ambiguous intent"),
            |ctx| {
                queried.push(ctx.key.encode());
                match bank.query(&ctx.key.encode()) {
                    Some(receipt) => Outcome::Confirmed { receipt },
                    None => Outcome::Failed {
                        retryable: true,
                        reason: "no such payment".into(),
                    },
                }
            },
        )
        .unwrap();
    assert_eq!(queried, vec![first_key]);
    assert!(
        matches!(&result, StepResult::Done { receipt, .. } if receipt == b"ch_0"),
        "{result:?}"
    );
    assert_eq!(bank.charges.len(), 1);
    let audit = engine.audit(&rid("r")).unwrap();
    assert!(
        audit
            .iter()
            .any(|e| e.what.to_string().contains("confirmed")),
        "{audit:?}"
    );
}

#[test]
fn intent_without_outcome_on_a_non_idempotent_tool_is_unknown_never_resent() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut bank = Bank::default();
    let first_key = act_then_crash(dir.path(), &clock, ToolClass::NotIdempotent, &mut bank);
    let (engine, guard) = resume(dir.path(), &clock);
    let (run, step) = (rid("r"), sid("pay"));
    let req = request(
        &guard,
        &run,
        &step,
        "bank.pay",
        ToolClass::NotIdempotent,
        b"100 USD",
    );
    for _ in 0..3 {
        let result = engine
            .step(&req, |_| panic!("a non-idempotent act was resent"))
            .unwrap();
        assert!(
            matches!(&result, StepResult::Unknown { key, .. } if key.encode() == first_key),
            "{result:?}"
        );
    }
    assert_eq!(bank.charges.len(), 1);
    // An operator checks the bank and reconciles; the step is then done.
    let key = actum::books::EffectKey::parse(&first_key).unwrap();
    engine
        .reconcile(Reconcile {
            key,
            guard: guard.clone(),
            outcome: Outcome::Confirmed {
                receipt: bank.query(&first_key).unwrap(),
            },
            note: "operator checked the bank statement".into(),
        })
        .unwrap();
    let result = engine
        .step(&req, |_| panic!("acted after reconcile"))
        .unwrap();
    assert!(
        matches!(result, StepResult::Done { replayed: true, .. }),
        "{result:?}"
    );
}

#[test]
fn a_step_that_failed_for_good_answers_the_same_failure_every_time_and_across_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let (run, step) = (rid("r"), sid("pay"));
    let declined = || StepResult::Failed {
        key: actum::books::EffectKey::new(rid("r"), sid("pay"), 1).unwrap(),
        retryable: false,
        reason: "card declined".into(),
    };
    {
        let engine = open_fs(dir.path(), &clock);
        let grant = create_and_lease(&engine, "r", "w1");
        let req = request(
            &grant.guard,
            &run,
            &step,
            "bank.pay",
            ToolClass::NotIdempotent,
            b"100 USD",
        );
        let first = engine
            .step(&req, |_| Outcome::Failed {
                retryable: false,
                reason: "card declined".into(),
            })
            .unwrap();
        assert_eq!(first, declined(), "the first time");
        let again = engine
            .step(&req, |_| panic!("a step failed for good was acted again"))
            .unwrap();
        assert_eq!(again, declined(), "replayed: the same answer, not an error");
    }
    let (engine, guard) = resume(dir.path(), &clock);
    let req = request(
        &guard,
        &run,
        &step,
        "bank.pay",
        ToolClass::NotIdempotent,
        b"100 USD",
    );
    let resumed = engine
        .step(&req, |_| panic!("acted again after the crash"))
        .unwrap();
    assert_eq!(resumed, declined(), "after a crash: the same answer");
}

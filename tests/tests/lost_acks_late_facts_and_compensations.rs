//! The holes the agent simulator was built to close, each as a scenario on
//! the public API: a lost ack is resolved by the tool's class on the next
//! step (resend with the same key inside an idempotent tool's window, query
//! a queryable tool, `Unknown` only for a tool that can do neither); an
//! outcome reported after the lease expired, under the run's current token,
//! is recorded; a compensation is an effect with its own key and survives a
//! crash between its intent and its outcome without running twice.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::sync::Arc;

use actum::books::{
    Answer, Command, Compensation, EffectKey, EffectStatus, Outcome, Part, SaveCheckpoint,
    ToolClass,
};
use actum::engine::{CompensationRequest, StepPlan, StepResult};
use actum::{Engine, Error, ManualClock};
use support::*;

fn lost_ack() -> Outcome {
    Outcome::Unknown {
        reason: "the connection dropped after the request was sent".into(),
    }
}

fn setup() -> (
    tempfile::TempDir,
    Arc<ManualClock>,
    Engine,
    actum::engine::LeaseGrant,
) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let lease = create_and_lease(&engine, "order-17", "w1");
    (dir, clock, engine, lease)
}

#[test]
fn a_lost_ack_on_an_idempotent_tool_is_resent_with_the_same_key_by_the_next_step() {
    let (_dir, _clock, engine, lease) = setup();
    let (run, step) = (rid("order-17"), sid("charge"));
    let req = request(
        &lease.guard,
        &run,
        &step,
        "stripe.charge",
        idempotent(),
        b"42",
    );
    let mut bank = Bank::default();
    let first = engine
        .step(&req, |ctx| {
            bank.charge_idempotent(&ctx.key.encode(), b"42");
            lost_ack()
        })
        .unwrap();
    assert!(matches!(first, StepResult::Unknown { .. }), "{first:?}");
    let mut keys = Vec::new();
    let second = engine
        .step(&req, |ctx| {
            keys.push((ctx.key.encode(), ctx.resend));
            Outcome::Confirmed {
                receipt: bank.charge_idempotent(&ctx.key.encode(), b"42"),
            }
        })
        .unwrap();
    assert!(matches!(second, StepResult::Done { .. }), "{second:?}");
    assert_eq!(keys, vec![("order-17/charge/1".to_string(), true)]);
    assert_eq!(bank.charges.len(), 1, "the tool deduplicated the resend");
}

#[test]
fn a_lost_ack_on_a_queryable_tool_is_queried_by_the_next_step_never_re_acted() {
    let (_dir, _clock, engine, lease) = setup();
    let (run, step) = (rid("order-17"), sid("charge"));
    let req = request(
        &lease.guard,
        &run,
        &step,
        "bank.wire",
        ToolClass::Queryable,
        b"42",
    );
    let mut bank = Bank::default();
    engine
        .step(&req, |ctx| {
            bank.charge_blindly(&ctx.key.encode(), b"42");
            lost_ack()
        })
        .unwrap();
    let found = engine
        .step_queryable(
            &req,
            |_| unreachable!("never acted again"),
            |ctx| match bank.query(&ctx.key.encode()) {
                Some(receipt) => Outcome::Confirmed { receipt },
                None => lost_ack(),
            },
        )
        .unwrap();
    assert!(
        matches!(found, StepResult::Done { replayed: true, .. }),
        "{found:?}"
    );
    assert_eq!(bank.charges.len(), 1);
}

#[test]
fn a_lost_ack_on_a_tool_that_is_not_idempotent_stays_unknown() {
    let (_dir, _clock, engine, lease) = setup();
    let (run, step) = (rid("order-17"), sid("fax"));
    let req = request(
        &lease.guard,
        &run,
        &step,
        "fax.send",
        ToolClass::NotIdempotent,
        b"x",
    );
    engine.step(&req, |_| lost_ack()).unwrap();
    let again = engine
        .step(&req, |_| unreachable!("never re-sent"))
        .unwrap();
    assert!(matches!(again, StepResult::Unknown { .. }), "{again:?}");
}

#[test]
fn an_outcome_reported_after_the_lease_expired_is_recorded_under_the_current_token() {
    let (_dir, clock, engine, lease) = setup();
    let (run, step) = (rid("order-17"), sid("charge"));
    let req = request(
        &lease.guard,
        &run,
        &step,
        "bank.wire",
        ToolClass::Queryable,
        b"42",
    );
    let done = engine
        .step(&req, |_| {
            // The call outlives the lease; nobody else claimed the run.
            clock.advance_ms(LEASE_MS + 5);
            Outcome::Confirmed {
                receipt: b"wire-1".to_vec(),
            }
        })
        .unwrap();
    assert!(matches!(done, StepResult::Done { .. }), "{done:?}");
    let key = EffectKey::new(run, step, 1).unwrap();
    assert_eq!(
        engine.effect(&key).unwrap().unwrap().status,
        EffectStatus::Confirmed {
            receipt: b"wire-1".to_vec()
        }
    );
}

/// One commit per step: the outcome and its follow-up checkpoint land in
/// one record; when the follow-up is refused (the lease expired while the
/// act ran), the outcome, a fact, is still recorded, alone.
#[test]
fn a_late_fact_is_recorded_even_when_its_follow_up_checkpoint_is_refused() {
    let (_dir, clock, engine, lease) = setup();
    let (run, step) = (rid("order-17"), sid("charge"));
    let req = request(
        &lease.guard,
        &run,
        &step,
        "bank.wire",
        ToolClass::Queryable,
        b"42",
    );
    let save = |receipt: Vec<u8>| {
        vec![Command::SaveCheckpoint(SaveCheckpoint {
            run: run.clone(),
            guard: lease.guard.clone(),
            schema_version: 1,
            parts: vec![Part {
                name: "receipt".into(),
                bytes: receipt,
                extends: None,
                inline: false,
            }],
        })]
    };
    // In time: outcome and checkpoint in one record, one fsync.
    let StepPlan::Act(ctx) = engine.begin_step(&req).unwrap() else {
        panic!("a fresh step acts")
    };
    let outcome = Outcome::Confirmed {
        receipt: b"wire-1".to_vec(),
    };
    let fsyncs = engine.wal_stats().fsyncs;
    let finished = engine
        .finish_step_with(&lease.guard, &ctx, outcome, save(b"wire-1".to_vec()))
        .unwrap();
    assert!(matches!(finished.result, StepResult::Done { .. }));
    assert!(matches!(
        finished.then.unwrap().as_slice(),
        [Answer::CheckpointSaved { .. }]
    ));
    if !on_postgres() {
        assert_eq!(
            engine.wal_stats().fsyncs,
            fsyncs + 1,
            "one record, one fsync"
        );
    }
    let saved = engine.load_latest(&run, 1).unwrap().unwrap();
    assert_eq!(saved.parts[0].bytes, b"wire-1");

    // Late: the lease ran out during the act; the checkpoint is refused,
    // the outcome is not lost.
    let step2 = sid("ship");
    let req2 = request(
        &lease.guard,
        &run,
        &step2,
        "bank.wire",
        ToolClass::Queryable,
        b"43",
    );
    let StepPlan::Act(ctx) = engine.begin_step(&req2).unwrap() else {
        panic!("a fresh step acts")
    };
    clock.advance_ms(LEASE_MS + 5);
    let outcome = Outcome::Confirmed {
        receipt: b"wire-2".to_vec(),
    };
    let finished = engine
        .finish_step_with(&lease.guard, &ctx, outcome, save(b"wire-2".to_vec()))
        .unwrap();
    assert!(matches!(finished.result, StepResult::Done { .. }));
    match finished.then {
        Err(Error::BatchRefused { index: 0, .. }) => {}
        other => panic!("the checkpoint is refused: {other:?}"),
    }
    let key = EffectKey::new(run.clone(), step2, 1).unwrap();
    assert_eq!(
        engine.effect(&key).unwrap().unwrap().status,
        EffectStatus::Confirmed {
            receipt: b"wire-2".to_vec()
        }
    );
    let latest = engine.load_latest(&run, 1).unwrap().unwrap();
    assert_eq!(
        latest.parts[0].bytes, b"wire-1",
        "the refused save left no trace"
    );
}

#[test]
fn a_compensation_interrupted_by_a_crash_completes_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut unsweeps = Bank::default();
    let (run, sweep) = (rid("eod"), sid("sweep"));
    {
        let engine = open_fs(dir.path(), &clock);
        let lease = create_and_lease(&engine, "eod", "w1");
        let mut req = request(
            &lease.guard,
            &run,
            &sweep,
            "bank.sweep",
            idempotent(),
            b"1m",
        );
        req.compensation = Some(Compensation {
            tool: "bank.unsweep".into(),
            args: b"1m back".to_vec(),
            class: idempotent(),
        });
        engine
            .step(&req, |_| Outcome::Confirmed {
                receipt: b"sw".to_vec(),
            })
            .unwrap();
        let undo = CompensationRequest {
            guard: &lease.guard,
            run: &run,
            step: &sweep,
            rationale: "the hedge was declined",
        };
        let (plan, compensation) = engine.begin_compensation(&undo).unwrap();
        let StepPlan::Act(ctx) = plan else {
            panic!("{plan:?}")
        };
        assert_eq!(ctx.key.encode(), "eod/sweep/undo/1");
        assert!(
            engine.durable_lsn() >= ctx.intent_lsn,
            "intent durable first"
        );
        unsweeps.charge_idempotent(&ctx.key.encode(), &compensation.args);
        // Crash after the undo happened, before its outcome is recorded.
        drop(engine);
    }
    clock.advance_ms(LEASE_MS + 1);
    let engine = open_fs(dir.path(), &clock);
    let lease = engine.claim_next(&wid("w2"), LEASE_MS).unwrap().unwrap();
    let undo = CompensationRequest {
        guard: &lease.guard,
        run: &run,
        step: &sweep,
        rationale: "the hedge was declined",
    };
    let result = engine
        .compensate(
            &undo,
            |ctx, compensation| {
                assert!(ctx.resend, "the same key, resent");
                Outcome::Confirmed {
                    receipt: unsweeps.charge_idempotent(&ctx.key.encode(), &compensation.args),
                }
            },
            |_, _| unreachable!("an idempotent tool is resent, not queried"),
        )
        .unwrap();
    assert!(matches!(result, StepResult::Done { .. }), "{result:?}");
    assert_eq!(unsweeps.charges.len(), 1, "undone exactly once");
    let act = EffectKey::new(run, sweep, 1).unwrap();
    assert!(matches!(
        engine.effect(&act).unwrap().unwrap().status,
        EffectStatus::Compensated { .. }
    ));
}

//! Sagas on the public API (seed 002's treasury day): the run sweeps cash
//! and funds the subsidiaries, each registering what undoes it; the FX
//! desk refuses the hedge, so the run fails, and compensates first. The
//! process dies in the middle of the saga, between a compensation's act and
//! its outcome; a new worker claims the compensating run and finishes the
//! saga. Each compensation reaches the bank once, the funding is undone
//! before the sweep, and the run ends failed. An operator's cancel of a run
//! with a confirmed act compensates it the same way and ends it cancelled.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::sync::Arc;

use actum::books::{
    Compensation, EffectStatus, OperatorAction, Outcome, RunState, SagaNext, Transition,
};
use actum::engine::{CompensationRequest, SagaProgress, StepPlan, StepRequest};
use actum::{Engine, ManualClock};
use support::*;

/// Sweeps and funds under `guard`, each confirmed by `bank`, each
/// registering its compensation.
fn sweep_and_fund(engine: &Engine, guard: &actum::books::Guard, run: &str, bank: &mut Bank) {
    let run = rid(run);
    for (step, tool, undo) in [
        ("sweep", "bank.sweep", "bank.unsweep"),
        ("fund", "bank.fund", "bank.unfund"),
    ] {
        let step = sid(step);
        let request = StepRequest {
            compensation: Some(Compensation {
                tool: undo.into(),
                args: format!("undo {step}").into_bytes(),
                class: idempotent(),
            }),
            ..request(
                guard,
                &run,
                &step,
                tool,
                idempotent(),
                step.as_str().as_bytes(),
            )
        };
        engine
            .step(&request, |ctx| Outcome::Confirmed {
                receipt: bank.charge_idempotent(&ctx.key.encode(), tool.as_bytes()),
            })
            .unwrap();
    }
}

fn state(engine: &Engine, run: &str) -> RunState {
    engine.run(&rid(run)).unwrap().unwrap().state
}

#[test]
fn a_refused_hedge_fails_the_run_and_its_saga_survives_a_crash_undoing_last_first() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let lease = create_and_lease(&engine, "eod-1", "w1");
    let mut bank = Bank::default();
    sweep_and_fund(&engine, &lease.guard, "eod-1", &mut bank);
    let (run, hedge) = (rid("eod-1"), sid("hedge"));
    let declined = engine
        .step(
            &request(&lease.guard, &run, &hedge, "fx.hedge", idempotent(), b"aud"),
            |_| Outcome::Failed {
                retryable: false,
                reason: "the FX desk refuses the counterparty".into(),
            },
        )
        .unwrap();
    assert!(matches!(
        declined,
        actum::engine::StepResult::Failed {
            retryable: false,
            ..
        }
    ));
    engine
        .transition(Transition {
            run: run.clone(),
            guard: lease.guard.clone(),
            to: RunState::Failed,
            expected_version: None,
            reason: "the hedge was refused".into(),
        })
        .unwrap();
    assert_eq!(state(&engine, "eod-1"), RunState::Compensating);
    assert_eq!(
        engine.saga_next(&run).unwrap(),
        SagaNext::Undo { step: sid("fund") }
    );

    // The funding's compensation reaches the bank; the process dies before
    // its outcome is recorded.
    let fund = sid("fund");
    let undo = CompensationRequest {
        guard: &lease.guard,
        run: &run,
        step: &fund,
        rationale: "saga",
    };
    let (plan, compensation) = engine.begin_compensation(&undo).unwrap();
    let StepPlan::Act(ctx) = plan else {
        panic!("{plan:?}")
    };
    assert_eq!(ctx.key.encode(), "eod-1/fund/undo/1");
    bank.charge_idempotent(&ctx.key.encode(), compensation.tool.as_bytes());
    drop(engine);

    // A new worker claims the compensating run once the lease runs out.
    clock.advance_ms(LEASE_MS);
    let engine = open_fs(dir.path(), &clock);
    assert_eq!(state(&engine, "eod-1"), RunState::Compensating);
    let grant = engine.claim_next(&wid("w2"), LEASE_MS).unwrap().unwrap();
    assert_eq!(grant.run, run);
    let progress = engine
        .run_saga(
            &grant.guard,
            &run,
            "the hedge was refused",
            |ctx, c| Outcome::Confirmed {
                receipt: bank.charge_idempotent(&ctx.key.encode(), c.tool.as_bytes()),
            },
            |_, _| unreachable!("an idempotent bank needs no query"),
        )
        .unwrap();
    assert_eq!(
        progress,
        SagaProgress::Ended {
            state: RunState::Failed,
            undone: vec![sid("fund"), sid("sweep")]
        }
    );
    // The bank saw each compensation once (the resent one deduplicated),
    // the funding undone before the sweep.
    let keys: Vec<&str> = bank.charges.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "eod-1/sweep/1",
            "eod-1/fund/1",
            "eod-1/fund/undo/1",
            "eod-1/sweep/undo/1"
        ]
    );
    for step in ["sweep", "fund"] {
        let act = engine
            .effects(&run)
            .unwrap()
            .into_iter()
            .find(|e| e.key.encode() == format!("eod-1/{step}/1"))
            .unwrap();
        assert!(
            matches!(act.status, EffectStatus::Compensated { .. }),
            "{step}: {:?}",
            act.status
        );
    }
    assert_eq!(state(&engine, "eod-1"), RunState::Failed);
    engine.close().unwrap();
}

#[test]
fn an_operators_cancel_compensates_what_the_run_did_and_ends_it_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let lease = create_and_lease(&engine, "eod-2", "w1");
    let mut bank = Bank::default();
    sweep_and_fund(&engine, &lease.guard, "eod-2", &mut bank);
    let done = engine
        .operate(
            &rid("eod-2"),
            OperatorAction::Cancel,
            "ops-anna",
            "wrong day",
        )
        .unwrap();
    assert_eq!(done.state, RunState::Compensating);
    assert_eq!(
        engine.saga(&rid("eod-2")).unwrap().end,
        Some(RunState::Cancelled)
    );
    // The holder's next forward step is refused; it runs the saga instead.
    let post = sid("post");
    let refused = engine.step(
        &request(
            &lease.guard,
            &rid("eod-2"),
            &post,
            "ledger.post",
            idempotent(),
            b"gl",
        ),
        |_| unreachable!(),
    );
    assert!(
        matches!(
            refused,
            Err(actum::Error::RunNotRunning {
                state: RunState::Compensating,
                ..
            })
        ),
        "{refused:?}"
    );
    let progress = engine
        .run_saga(
            &lease.guard,
            &rid("eod-2"),
            "cancelled by ops",
            |ctx, c| Outcome::Confirmed {
                receipt: bank.charge_idempotent(&ctx.key.encode(), c.tool.as_bytes()),
            },
            |_, _| unreachable!(),
        )
        .unwrap();
    assert!(
        matches!(
            progress,
            SagaProgress::Ended {
                state: RunState::Cancelled,
                ..
            }
        ),
        "{progress:?}"
    );
    assert_eq!(bank.charges.len(), 4);
    assert_eq!(state(&engine, "eod-2"), RunState::Cancelled);
}

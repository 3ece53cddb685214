//! The user harness runs a user's own workflow under the simulator's
//! faults, and bites: a correct workflow keeps every invariant; one that
//! acts outside the ceremony, or retries an ambiguous act under a key of
//! its own, is caught naming the invariant and the seed.

use actum::books::{RunState, StepId, Transition};
use actum::engine::{EffectCtx, StepPlan, StepRequest, StepResult, ToolSpec};
use actum_sim::harness::{HarnessConfig, WorkflowEnv, check_workflow};
use actum_sim::world::Tool;

const CHARGE: Tool = Tool::queryable("bank.charge", false);

/// The shop's charge step, then completion; `careless` marks how the
/// workflow gets the charge wrong, if it does.
fn shop(env: &mut WorkflowEnv<'_>, careless: Option<Careless>) -> actum::Result<()> {
    let engine = env.engine();
    let (run, guard) = (env.run().clone(), env.guard().clone());
    let move_to = |to| Transition {
        run: run.clone(),
        guard: guard.clone(),
        to,
        expected_version: None,
        reason: "shop".into(),
    };
    if engine
        .run(&run)?
        .is_some_and(|r| r.state == RunState::Pending)
    {
        engine.transition(move_to(RunState::Running))?;
    }
    let step = StepId::new("charge")?;
    let request = StepRequest {
        guard: &guard,
        run: &run,
        step: &step,
        tool: ToolSpec {
            name: CHARGE.name.into(),
            class: CHARGE.class,
        },
        args: b"42 EUR",
        rationale: "cart confirmed",
        compensation: None,
    };
    loop {
        let result = match careless {
            None => env.step(&request, CHARGE)?,
            Some(Careless::ActsBeforeTheIntent) => {
                // Charges first, then asks the engine: a crash in between
                // leaves a charge the books never heard of.
                let early = EffectCtx {
                    key: actum::books::EffectKey::new(run.clone(), step.clone(), 1)?,
                    token: guard.token,
                    resend: false,
                    intent_lsn: actum::Lsn::ZERO,
                    act_receipt: None,
                };
                env.act(CHARGE, &early, request.args);
                env.step(&request, CHARGE)?
            }
            Some(Careless::RetriesUnderAFreshKey) => match engine.begin_step(&request)? {
                StepPlan::Act(ctx) => {
                    let outcome = env.act(CHARGE, &ctx, request.args);
                    engine.finish_step(&guard, &ctx, outcome)?
                }
                StepPlan::Query(ctx) => {
                    // Instead of asking, it charges again under a key of
                    // its own: the old charge may have happened.
                    let fresh = EffectCtx {
                        key: ctx.key.next_attempt()?,
                        ..ctx.clone()
                    };
                    let outcome = env.act(CHARGE, &fresh, request.args);
                    engine.resolve_step(&guard, &ctx, outcome)?
                }
                StepPlan::Done(result) => result,
            },
        };
        if matches!(result, StepResult::Done { .. }) {
            break;
        }
    }
    engine.transition(move_to(RunState::Completed))?;
    Ok(())
}

#[derive(Clone, Copy)]
enum Careless {
    ActsBeforeTheIntent,
    RetriesUnderAFreshKey,
}

fn config() -> HarnessConfig {
    HarnessConfig {
        seeds: 48,
        ..HarnessConfig::default()
    }
}

#[test]
fn a_workflow_through_the_ceremony_keeps_every_invariant_under_faults() {
    let report = check_workflow(&config(), |env| shop(env, None)).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.seeds, 48);
    assert!(report.crashes > 0, "{report:?}");
    assert!(report.leases_lost > 0, "{report:?}");
    assert!(report.attempts > report.seeds, "{report:?}");
}

#[test]
fn a_workflow_that_acts_before_its_intent_is_caught() {
    let failure = check_workflow(&config(), |env| {
        shop(env, Some(Careless::ActsBeforeTheIntent))
    })
    .expect_err("caught");
    assert!(
        [
            "no side effect fires twice",
            "no application without a durable intent"
        ]
        .contains(&failure.invariant),
        "{failure}"
    );
    assert!(failure.to_string().contains("ACTUM_SEED="), "{failure}");
}

#[test]
fn a_workflow_that_retries_under_a_fresh_key_is_caught() {
    let failure = check_workflow(&config(), |env| {
        shop(env, Some(Careless::RetriesUnderAFreshKey))
    })
    .expect_err("caught");
    assert!(
        [
            "no side effect fires twice",
            "every done effect happened exactly once",
            "no application without a durable intent"
        ]
        .contains(&failure.invariant),
        "{failure}"
    );
}

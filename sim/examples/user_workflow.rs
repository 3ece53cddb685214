//! Your own agent under the simulator's faults: the vendor onboarding run
//! of seed 003 (create the vendor record, file the purchase order, send
//! the welcome mail), written against the public engine API and run by the
//! user harness over many seeds. Run it with
//! `cargo run --release -p actum-sim --example user_workflow [SEEDS]`.

use std::process::ExitCode;

use actum::books::{RunState, StepId, Transition};
use actum::engine::{StepRequest, StepResult, ToolSpec};
use actum_sim::harness::{HarnessConfig, WorkflowEnv, check_workflow};
use actum_sim::world::Tool;

/// The vendor system deduplicates by key for a day.
const VENDOR: Tool = Tool::idempotent("netsuite.vendor");
/// Finance's purchase orders can be looked up by key.
const PURCHASE_ORDER: Tool = Tool::queryable("finance.purchase-order", false);
/// The mailer can neither deduplicate nor be asked.
const MAIL: Tool = Tool::not_idempotent("mail.welcome");

/// The onboarding agent. It runs from the top after every crash: every
/// step goes through the engine, so a re-run replays what is done.
fn onboard(env: &mut WorkflowEnv<'_>) -> actum::Result<()> {
    let engine = env.engine();
    let (run, guard) = (env.run().clone(), env.guard().clone());
    let move_to = |to: RunState, reason: &str| Transition {
        run: run.clone(),
        guard: guard.clone(),
        to,
        expected_version: None,
        reason: reason.to_string(),
    };
    if engine
        .run(&run)?
        .is_some_and(|r| r.state == RunState::Pending)
    {
        engine.transition(move_to(RunState::Running, "onboarding starts"))?;
    }
    let steps = [
        ("vendor", VENDOR, &b"Harbor Logistics, W-9 on file"[..]),
        ("purchase-order", PURCHASE_ORDER, &b"PO 84000 USD"[..]),
        ("welcome", MAIL, &b"welcome aboard"[..]),
    ];
    for (name, tool, args) in steps {
        let step = StepId::new(name)?;
        let request = StepRequest {
            guard: &guard,
            run: &run,
            step: &step,
            tool: ToolSpec {
                name: tool.name.to_string(),
                class: tool.class,
            },
            args,
            rationale: "the onboarding checklist",
            compensation: None,
        };
        loop {
            match env.step(&request, tool)? {
                StepResult::Done { .. } => break,
                // A lost ack on the mailer: nobody can say whether it went
                // out. Never resend; a person reconciles it.
                StepResult::Unknown { .. } if tool.class == MAIL.class => {
                    engine.transition(move_to(RunState::Failed, "welcome mail unknown"))?;
                    return Ok(());
                }
                // Otherwise the next step resends with the same key,
                // queries, or opens a new attempt.
                _ => {}
            }
        }
    }
    engine.transition(move_to(RunState::Completed, "vendor onboarded"))?;
    Ok(())
}

fn main() -> ExitCode {
    let seeds = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let config = HarnessConfig {
        seeds,
        ..HarnessConfig::default()
    };
    match check_workflow(&config, onboard) {
        Ok(report) => {
            println!(
                "onboarding kept every invariant over {} seeds: {} runs of the workflow, {} \
                 crashes, {} leases lost mid-run, {} tool calls, {} acts in the world, none twice",
                report.seeds,
                report.attempts,
                report.crashes,
                report.leases_lost,
                report.tool_calls,
                report.applications
            );
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("FAILED {failure}");
            ExitCode::FAILURE
        }
    }
}

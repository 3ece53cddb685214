//! The user harness: run **your own** workflow under the simulator's faults
//! from your own `cargo test`. Your workflow is a closure over a
//! [`WorkflowEnv`] (the engine on a simulated disk and clock, the run and
//! its lease, simulated tools); the harness runs it seed after seed, cuts
//! the power at I/O calls and right after acts, drops acks, loses requests,
//! declines calls and lets leases expire mid-call, re-runs the workflow from
//! the top after every crash or lost lease, and then checks that no effect
//! fired twice, every confirmed effect happened exactly once with its
//! recorded receipt, every act had a durable intent, and the run finished
//! once the faults stopped.
//!
//! ```
//! use actum::books::{RunState, StepId, Transition};
//! use actum::engine::{StepRequest, StepResult, ToolSpec};
//! use actum_sim::harness::{HarnessConfig, check_workflow};
//! use actum_sim::world::Tool;
//!
//! const CHARGE: Tool = Tool::idempotent("stripe.charge");
//! const SHIP: Tool = Tool::queryable("warehouse.ship", false);
//!
//! let config = HarnessConfig { seeds: 16, ..HarnessConfig::default() };
//! let report = check_workflow(&config, |env| {
//!     let engine = env.engine();
//!     let (run, guard) = (env.run().clone(), env.guard().clone());
//!     let move_to = |to: RunState| Transition {
//!         run: run.clone(),
//!         guard: guard.clone(),
//!         to,
//!         expected_version: None,
//!         reason: "the shop agent".into(),
//!     };
//!     if engine.run(&run)?.is_some_and(|r| r.state == RunState::Pending) {
//!         engine.transition(move_to(RunState::Running))?;
//!     }
//!     for (name, tool) in [("charge", CHARGE), ("ship", SHIP)] {
//!         let step = StepId::new(name)?;
//!         let request = StepRequest {
//!             guard: &guard,
//!             run: &run,
//!             step: &step,
//!             tool: ToolSpec { name: tool.name.into(), class: tool.class },
//!             args: b"order 17: one lamp",
//!             rationale: "the cart is confirmed",
//!             compensation: None,
//!         };
//!         // A lost ack or a transient decline: the next step resends with
//!         // the same key, queries, or opens a new attempt, by tool class.
//!         while !matches!(env.step(&request, tool)?, StepResult::Done { .. }) {}
//!     }
//!     engine.transition(move_to(RunState::Completed))?;
//!     Ok(())
//! })
//! .unwrap_or_else(|failure| panic!("{failure}"));
//! assert_eq!(report.seeds, 16);
//! assert!(report.crashes > 0 && report.attempts > report.seeds);
//! ```
//!
//! A failure names the seed, the invariant and what broke; `ACTUM_SEED=N`
//! re-runs that one seed. `sim/examples/user_workflow.rs` is a runnable
//! example (`cargo run -p actum-sim --example user_workflow`).
//!
//! **Invariant:** the harness checks the same invariants, from the same
//! `check/` files, as the agent campaign does.

mod env;
mod run;

pub use env::WorkflowEnv;
pub use run::{HARNESS_RUN, HarnessConfig, HarnessFailure, HarnessReport, check_workflow};

//! The agent campaign: the product's promise under fire. Simulated workers
//! run the seeds' agent workflows through the public engine API on the
//! simulated disk and clock, against a simulated world of tools, while the
//! schedule crashes the process at step boundaries and I/O calls, drops
//! acks, loses and delays requests, pauses workers past their leases and
//! jumps the clock. The invariants in `check/` hold the books to a
//! reference model and the world's ground truth.
//!
//! Layout: `schedule` (events and fates, from a seed), `workflow` (what the
//! agents do), `worker` (how a worker steps through the engine API), `sim`
//! (the run's state, engine calls, crashes and recoveries), `run` (the
//! phases and the end checks), `migration` (the checkpoint schemas and the
//! redeploy's migration), `report`, `history`, `failure`, `config`.
//!
//! **Invariant:** one seed (or one schedule) determines the whole run.

mod appends;
mod config;
mod exhaustive;
mod failure;
mod history;
mod migration;
mod report;
pub mod rt;
mod run;
mod schedule;
mod sim;
mod worker;
mod workflow;

pub use appends::CHECKPOINT_LOADS_AS_SAVED;
pub use config::{AgentConfig, PlantedBug};
pub use exhaustive::exhaustive_schedules;
pub use failure::{AgentFailure, Origin};
pub use history::History;
pub use migration::{MIGRATION_KEEPS_STATE, SCHEMA_1, SCHEMA_2};
pub use report::AgentReport;
pub use run::{PANICKED, replay_history, run_agent_schedule, run_agent_seed, schedule_history};
pub use schedule::{
    AgentSchedule, ApproverMove, CRASH_AFTER_OPS_MAX, EdgeAge, Event, JUMP_MS_MAX, RUNS_MAX,
    SignalMove, TICK_MS_MAX, WORKERS_MAX,
};
pub use sim::{DB_DIR, START_MS, is_refusal};
pub use worker::LEASE_TTL_MS;
pub use workflow::{Action, AgentState, Workflow};

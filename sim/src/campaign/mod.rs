//! The storage crash campaign: WAL + manifest + redb on the simulated disk.
//!
//! One seed drives one run: a swarm of faults, a workload of batched appends
//! and checkpoints, power cuts at chosen I/O calls (also during recovery),
//! and after every recovery the invariants in `check/` compared against a
//! reference model. A failure carries its seed and the command replaying it.

mod config;
mod kv;
mod model;
mod node;
mod run;
mod schedule;

pub use config::{CampaignConfig, PlantedBug};
pub use model::{Model, Put};
pub use node::{Node, Observed};
pub use run::{Failure, SeedReport, run_schedule, run_seed};
pub use schedule::{BATCH_RECORDS_MAX, CRASH_AFTER_OPS_MAX, Schedule, Step};

//! The PostgreSQL backend under real faults: several worker processes on
//! one database, each serving an agent with the runtime on several
//! threads, SIGKILLed at random moments and restarted, while the server is
//! crashed (`pg_ctl stop -m immediate`) and restarted and connections are
//! cut; then the same kind of world checks as the agent simulator's
//! ([`check`]). `actum-pg-kill` runs it (docs/POSTGRES.md, "The kill
//! loop"); `sim/tests/pg_kill_loop.rs` runs its quick mode and shows it
//! catches the backend's planted bugs.

pub mod check;
mod driver;
pub mod worker;
pub mod world;

pub use driver::{KillConfig, KillReport, drive};

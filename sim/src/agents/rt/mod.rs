//! The runtime family of the agent campaign: the workflows written as a
//! user writes them, as functions on `actum::runtime` (`agents.rs`), driven
//! by `Runtime::work_once` on the simulated disk, under a clock that ticks
//! on every read and jumps past the lease now and then (`clock.rs`), against
//! the world's tools with dropped acknowledgements, lost and slow
//! requests, declines, stalls past the lease with another worker's turn in
//! between, and the process dying just after a send or at any I/O call
//! (`world.rs`, `run.rs`).
//!
//! The hand-written family (`worker.rs`) holds the engine to a reference
//! model command by command; this family holds the runtime to what the
//! world saw: the runtime's promises are checked at the moment it hands a
//! call to a tool (live lease, a confirmed step never resent, a request
//! whose reply is awaited never resent, a journaled model call never asked
//! again), and the books against the world's log
//! at the end (every done effect exactly once, no step twice, sagas last
//! first, every run ends).
//!
//! **Invariant:** one seed (and the planted bug, if any) determines the
//! whole run.

mod agents;
mod clock;
mod report;
mod retries;
mod run;
mod versions;
mod world;

pub use report::RuntimeReport;
pub use retries::{FORK_JOURNALED, RETRY_REFUSED_RIGHTLY};
pub use run::{LEASE_TTL_MS, WAITS_KEEP_TERMS, run_runtime_seed, runtime_history};
pub use versions::{DIVERGED_NEVER_ACTS, MOVE_JOURNALED, MOVED_RUN_NEW_HANDLER};
pub use world::{AWAITED_NOT_SENT, CONFIRMED_NOT_SENT, DECISION_ONCE, ERRS_ONLY_DEAD, LIVE_LEASE};

//! The engine: the agent's books made durable. [`Engine`] joins the pure
//! decision core (`books`) to the database directory (`db`: lock, manifest,
//! WAL) and the redb state store (`state`): every command is decided
//! against the state, logged as one WAL record, applied, then answered;
//! opening replays the log after the state's `applied_lsn`.
//!
//! **Invariant:** the live path and recovery apply records through the same
//! function (`books::apply`, driven by the durable pipeline), so a recovered
//! engine holds exactly the books the acknowledged commands built.
//! **Boundary:** no I/O of its own; everything goes through the
//! `db::Pipeline` and the `Clock`.

mod answers;
mod budgets;
mod children;
mod commands;
mod commit;
mod compensate;
mod coordination;
mod core;
mod existing;
mod leases_at_open;
mod log_reads;
mod look;
mod operations;
mod options;
#[cfg(feature = "postgres")]
mod postgres;
mod reads;
mod retention;
mod retries;
mod sagas;
mod snapshot;
mod step;
mod versions;
mod waits;

pub use crate::books::Begun;
pub use crate::db::Recovery;
pub use answers::{Created, LeaseGrant, Moved, Operated, Recorded, SavedCheckpoint};
pub use children::{
    ChildSpec, ChildStarted, ChildrenStarted, start_child_command, start_children_command,
};
pub use compensate::CompensationRequest;
pub use coordination::ResourceGrant;
pub use core::Engine;
pub(crate) use existing::require_database;
pub use log_reads::LoggedCommit;
pub use look::{AgentRuns, Look};
pub use operations::{Metrics, Stuck, StuckReason, WAIT_SAMPLES_MAX};
pub use options::{
    CHECKPOINT_EVERY_BYTES_DEFAULT, CHECKPOINT_EVERY_RECORDS_DEFAULT,
    COMPACT_AT_CLOSE_FREE_BYTES_DEFAULT, EngineOptions, MAX_RECORD_BYTES_DEFAULT,
    SEGMENT_SIZE_BYTES_DEFAULT,
};
#[cfg(feature = "postgres")]
pub use postgres::RETENTION_EVERY_COMMITS;
#[cfg(feature = "postgres")]
pub(crate) use postgres::not_on_postgres;
pub use retention::{Pruned, Retention};
pub use retries::{Forked, Retried};
pub use sagas::SagaProgress;
pub use snapshot::SNAPSHOT_ATTEMPTS;
pub(crate) use snapshot::with_copy;
pub use step::{EffectCtx, FinishedStep, StepPlan, StepRequest, StepResult, ToolOutcome, ToolSpec};
pub use versions::VersionMoved;
pub use waits::{Signalled, Waited};

//! The agent's books as a pure decision core: commands are validated against
//! the current state by [`decide`], which returns the [`Op`]s to log; the
//! same [`apply`] turns ops into state on the live path and on recovery. No
//! I/O, no clock (time arrives as `now_ms`), no randomness.
//!
//! **Invariant:** validation happens only in `decide`; `apply` never fails
//! on a decided op. **Boundary:** this module knows nothing of the WAL or
//! redb; a store joins by implementing [`BooksRead`] and [`BooksWrite`].

mod apply;
mod audit;
mod budget;
mod checkpoint;
mod command;
mod compensation;
mod coord;
mod decide;
mod decision;
mod digest;
mod effect;
mod ids;
mod lease;
mod ledger;
mod limits;
mod mem;
mod op;
mod overlay;
mod retention;
mod run;
mod saga;
mod state;
#[cfg(test)]
pub(crate) mod test_support;
mod wait;

pub use apply::{ApplyError, apply};
pub use audit::{AuditEntry, AuditWhat, describe as audit_line_of};
pub(crate) use budget::decide_reserve_charging_replays;
pub use budget::{BudgetBook, BudgetLimits, Charge, Cost, Reservation, Reserved, SettledCharge};
pub use checkpoint::{
    CheckpointMeta, LoadedCheckpoint, Part, PartRef, check_schema, load_latest, load_parts,
};
pub use command::{
    AcquireLease, AcquireResource, BeginCompensation, BeginEffect, ClaimNext, Command, CreateRun,
    DecideApproval, DeliverReply, EndSaga, FinishEffect, Guard, OpenWait, Operate, OperatorAction,
    Prune, Reconcile, RecordDecision, ReleaseLease, ReleaseResource, RenewLease, Reserve,
    SaveCheckpoint, SendSignal, SetBudget, SetShared, Settle, SharedSetter, Transition,
};
pub use coord::{ResourceBook, ResourceHold, SharedChange, SharedEntry, live_hold};
pub use decide::{Answer, Begun, Decided, decide};
pub use decision::{DecisionRecord, Usage, replay_at};
pub use digest::{DIGEST_LEN_BYTES, Digest, digest_of};
pub use ids::{
    EffectKey, EffectKind, FencingToken, ResourceId, RunId, SharedKeyId, StepId, WorkerId,
    child_run_id,
};
pub use lease::{Lease, claim_order, claimable, claimable_from_ms};
pub use ledger::{Compensation, EffectEntry, EffectStatus, Outcome, ToolClass};
pub use limits::*;
pub use mem::MemBooks;
pub(crate) use op::versions_text;
pub use op::{
    Op, PAYLOAD_VERSION, PAYLOAD_VERSIONS_READ, decode_ops, encode_ops, unsupported_payload_version,
};
pub use overlay::{Overlay, Writes};
pub use retention::BlobRefs;
pub(crate) use run::existing;
pub use run::{Run, RunState, transition_allowed};
pub use saga::{SagaBook, SagaNext, next as saga_next};
pub(crate) use saga::{next_walking as saga_next_walking, skip_sagas};
pub use state::{BooksRead, BooksWrite};
pub use wait::{SignalRecord, WaitBook, WaitFor, WaitRecord, WaitStatus, wake_ms};

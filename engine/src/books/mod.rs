//! The agent's books as a pure decision core: commands are validated against
//! the current state by [`decide`], which returns the [`Op`]s to log; the
//! same [`apply`] turns ops into state on the live path and on recovery. No
//! I/O, no clock (time arrives as `now_ms`), no randomness.
//!
//! Built in floors, one folder each; a file uses only its own floor and
//! those below, with no circle between files (checked by
//! `tests/tests/the_books_are_layered.rs`; ARCHITECTURE.md has the map):
//! `base` (ids, limits, digests) < `records` (the plain data of each domain)
//! < `vocabulary` (`Command`, `Op`, `Answer`, the state traits) < `views`
//! (`MemBooks`, `Overlay`) < `fold` (`apply`) < `rules` (one file of
//! `decide_*` per domain) < `dispatch` (`decide`). This file is the front
//! door: it re-exports the public names.
//!
//! **Invariant:** validation happens only in the rules, reached through
//! `decide`; `apply` never fails on a decided op. **Boundary:** this module
//! knows nothing of the WAL or redb; a store joins by implementing
//! [`BooksRead`] and [`BooksWrite`].

mod base;
mod dispatch;
mod fold;
mod records;
mod rules;
#[cfg(test)]
pub(crate) mod test_support;
mod views;
mod vocabulary;

pub use base::digest::{DIGEST_LEN_BYTES, Digest, digest_of, digest_of_chunks};
pub use base::ids::{
    EffectKey, EffectKind, FencingToken, ResourceId, RunId, SharedKeyId, StepId,
    TOOL_KEY_BYTES_MAX, WorkerId, child_run_id, children_run_ids,
};
pub use base::limits::*;
pub use dispatch::decide::decide;
pub use fold::apply::{ApplyError, apply};
pub use fold::describe::describe as audit_line_of;
pub use records::audit::{AuditEntry, AuditWhat};
pub use records::budget::{
    BudgetBook, BudgetLimits, Charge, Cost, Reservation, Reserved, SettledCharge,
};
pub use records::checkpoint::{
    CheckpointMeta, ChunkRef, LoadedCheckpoint, META_LAYOUT, Part, PartBase, PartRef, check_schema,
};
pub use records::coord::{ResourceBook, ResourceHold, SharedChange, SharedEntry};
pub use records::decision::{DecisionRecord, Usage};
pub use records::lease::Lease;
pub use records::ledger::{
    Compensation, EffectEntry, EffectStatus, Outcome, RESEND_MARGIN_DEFAULT_MAX_MS, Receipt,
    StoredReceipt, ToolClass, compensated,
};
pub use records::retention::BlobRefs;
pub use records::run::{
    Run, RunState, claim_order, claimable, claimable_from_ms, may_park, transition_allowed,
};
pub use records::saga::{SagaBook, SagaNext};
pub use records::wait::{
    ChildEnd, Join, SignalRecord, WaitBook, WaitFor, WaitRecord, WaitStatus, wake_ms,
};
pub(crate) use rules::budget::decide_reserve_charging_replays;
pub use rules::checkpoint::{load_latest, load_parts};
pub(crate) use rules::checks::existing;
pub use rules::coord::live_hold;
pub use rules::decision::replay_at;
pub use rules::saga::next as saga_next;
pub(crate) use rules::saga::{next_walking as saga_next_walking, skip_sagas};
pub(crate) use rules::wait::wake_all_joins_at_first_end;
pub use views::mem::MemBooks;
pub use views::overlay::{Overlay, Writes};
pub use vocabulary::answer::{Answer, Begun, Decided};
pub use vocabulary::command::{
    AcquireLease, AcquireResource, BeginCompensation, BeginEffect, ClaimNext, Command, CreateRun,
    DecideApproval, DeliverReply, EndSaga, FinishEffect, Guard, OpenWait, Operate, OperatorAction,
    Prune, Reconcile, RecordDecision, ReleaseLease, ReleaseResource, RenewLease, Reserve,
    SaveCheckpoint, SendSignal, SetBudget, SetShared, Settle, SharedSetter, Transition,
};
pub use vocabulary::command::{ForkRun, MoveVersion, RetryRun};
pub(crate) use vocabulary::op::versions_text;
pub use vocabulary::op::{
    Op, PAYLOAD_VERSION, PAYLOAD_VERSIONS_READ, decode_ops, encode_ops, unsupported_payload_version,
};
pub use vocabulary::state::{BooksRead, BooksWrite};

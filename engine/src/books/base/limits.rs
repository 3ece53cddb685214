//! Named limits of the books: every size a caller controls is bounded here,
//! so one oversized command is refused with a clear error instead of growing
//! a log record or a table row without bound.
//!
//! Invariant: each per-item limit is no larger than the aggregate limit that
//! contains it (checked at compile time below).

use crate::error::Result;

/// Refuses text longer than the free-text limit, naming it.
pub(crate) fn check_text(what: &str, text: &str) -> Result<()> {
    check_size(|| what.to_string(), text.len(), TEXT_LEN_BYTES_MAX)
}

/// Longest run, step, worker, tool or checkpoint-part name, in bytes.
pub const NAME_LEN_BYTES_MAX: usize = 128;

/// Longest free text (rationale, reason, agent version, trace id), in bytes.
pub const TEXT_LEN_BYTES_MAX: usize = 64 * 1024;

/// Largest tool receipt, in bytes: 3 MiB, so that the record confirming
/// it (the receipt's blob and the few ops around it) fits the default
/// 4 MiB WAL record (`MAX_RECORD_BYTES_DEFAULT`; a smaller
/// `max_record_bytes` lowers it, the commit refused with
/// `RecordTooLarge`). A larger receipt is refused (`TooLarge`, naming the
/// effect's key, run and step): nothing is written, the effect stays open
/// (docs/API.md, "Receipts").
pub const RECEIPT_LEN_BYTES_MAX: usize = 3 * 1024 * 1024;

/// Largest receipt the ledger keeps inline in its entry, in bytes; a larger
/// one goes to the blob store by digest (`EffectStatus::ConfirmedStored`),
/// written in the same record as the status naming it. Most receipts (an
/// id, a status line, a small JSON object) are far smaller, and stay in
/// the entry with no blob row to write or count.
pub const RECEIPT_INLINE_BYTES_MAX: usize = 1024;

/// Largest compensation arguments an intent registers, in bytes (kept
/// inline in the ledger entry).
pub const COMPENSATION_ARGS_BYTES_MAX: usize = 1024 * 1024;

/// Largest single checkpoint part, in bytes.
pub const CHECKPOINT_PART_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Largest whole checkpoint (sum of its parts), in bytes.
pub const CHECKPOINT_TOTAL_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Most parts in one checkpoint.
pub const CHECKPOINT_PARTS_MAX: usize = 1024;

/// Most chunks a part saved in append form is stored as: an append past it
/// stores the whole value as one chunk again, so a load reads at most this
/// many blobs per part however long the chain of appends.
pub const CHECKPOINT_PART_CHUNKS_MAX: usize = 64;

/// Largest checkpoint part, in bytes, the metadata holds itself instead of
/// a blob when the part asks (`Part::held_inline`; metadata layout 4). A
/// blob costs an index entry and a record header (about 80 bytes) and, at a
/// load, a look-up wherever the blob store put it; a run's metadata rows lie
/// side by side, so a load of many small parts (a journal of small records,
/// one per checkpoint) reads a few leaves. Such a part is not shared by
/// digest: an unchanged one is written again with each checkpoint, up to
/// this many bytes, which is why a part must ask.
pub const CHECKPOINT_INLINE_BYTES_MAX: usize = 1024;

/// Largest recorded model output, in bytes.
pub const DECISION_OUTPUT_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Most commands in one atomic batch.
pub const BATCH_COMMANDS_MAX: usize = 256;

/// Largest signal payload, in bytes.
pub const SIGNAL_PAYLOAD_BYTES_MAX: usize = 64 * 1024;

/// Largest arguments an intent stores with it, in bytes (they go to the
/// blob store by digest, like a checkpoint part).
pub const ARGS_BYTES_MAX: usize = CHECKPOINT_PART_BYTES_MAX;

/// Most runs one page of `Engine::runs` holds.
pub const RUNS_PAGE_MAX: usize = 1_000;

/// Most signals a run keeps waiting in its inbox (untaken by any wait).
pub const INBOX_SIGNALS_MAX: usize = 64;

/// Most reservations a run holds open at once.
pub const RESERVATIONS_OPEN_MAX: usize = 64;

/// Most ancestors whose budgets a run's reservation is counted in.
pub const BUDGET_ANCESTORS_MAX: usize = 32;

/// Most levels of awaited children an operator's cancel of a run cancels
/// with it (a child's id grows with each level, so real trees are far
/// shallower).
pub const CHILD_DEPTH_MAX: usize = 32;

/// Most children one step starts together and awaits in one wait (a
/// fan-out: their creations and the wait are one batch, within
/// [`BATCH_COMMANDS_MAX`]).
pub const CHILDREN_MAX: usize = 64;

/// Most steps of one run that register a compensation: the steps a saga
/// may have to undo (`SagaBook::steps`).
pub const SAGA_STEPS_MAX: usize = 1_024;

/// Largest value of a shared key, in bytes.
pub const SHARED_VALUE_BYTES_MAX: usize = 64 * 1024;

/// Most changes a shared key keeps with it (older ones drop off; a run's
/// changes stay in its audit).
pub const SHARED_CHANGES_MAX: usize = 32;

/// Most runs one prune command names.
pub const PRUNE_RUNS_MAX: usize = 256;

/// Longest lease a worker may take or renew, in milliseconds (one day).
pub const LEASE_TTL_MS_MAX: u64 = 24 * 60 * 60 * 1000;

const _: () = assert!(CHECKPOINT_PART_BYTES_MAX <= CHECKPOINT_TOTAL_BYTES_MAX);

// An append needs room for its base (at least one chunk) and its new bytes.
const _: () = assert!(CHECKPOINT_PART_CHUNKS_MAX >= 2);

const _: () = assert!(CHECKPOINT_INLINE_BYTES_MAX <= CHECKPOINT_PART_BYTES_MAX);

const _: () = assert!(NAME_LEN_BYTES_MAX <= TEXT_LEN_BYTES_MAX);

const _: () = assert!(TEXT_LEN_BYTES_MAX <= RECEIPT_LEN_BYTES_MAX);

const _: () = assert!(RECEIPT_INLINE_BYTES_MAX <= RECEIPT_LEN_BYTES_MAX);

const _: () = assert!(RECEIPT_LEN_BYTES_MAX <= CHECKPOINT_PART_BYTES_MAX);

const _: () = assert!(LEASE_TTL_MS_MAX > 0);

/// Refuses `size_bytes` above `max_bytes`, naming `what` in the error.
pub(crate) fn check_size(
    what: impl FnOnce() -> String,
    size_bytes: usize,
    max_bytes: usize,
) -> crate::Result<()> {
    if size_bytes <= max_bytes {
        return Ok(());
    }
    Err(crate::Error::TooLarge {
        what: what(),
        size_bytes: size_bytes as u64,
        max_bytes: max_bytes as u64,
    })
}

//! Ops: the decided, loggable records. The log holds ops, never commands, so
//! replay never re-validates; an op carries every value apply needs
//! (timestamps, tokens, versions), so apply reads no clock.
//!
//! A WAL record's payload is one commit's ops behind a version byte,
//! `[PAYLOAD_VERSION][postcard(Vec<Op>)]` (docs/FORMAT.md, "Record payload"
//! pins every byte, and `tests/tests/golden_bytes_pin_the_formats.rs` holds
//! the bytes of every variant).
//!
//! Invariant: `decode(encode(op)) == op`, and decoding any bytes returns an
//! `Err` rather than panicking (names and keys are re-validated on decode).
//! Postcard encodes an enum by its variant's index, so variants are only
//! ever appended, never reordered or removed, and no field changes within a
//! payload version; the one layout change so far (checkpoint metadata,
//! version 10, and its digest rule in version 11) is told apart by its
//! first field and its layout byte.

use serde::{Deserialize, Serialize};

use crate::books::base::digest::Digest;
use crate::books::base::ids::{EffectKey, FencingToken, ResourceId, RunId, SharedKeyId, StepId};
use crate::books::records::budget::{BudgetLimits, Charge, Cost, Reservation};
use crate::books::records::checkpoint::CheckpointMeta;
use crate::books::records::coord::SharedChange;
use crate::books::records::decision::DecisionRecord;
use crate::books::records::lease::Lease;
use crate::books::records::ledger::{EffectEntry, EffectStatus};
use crate::books::records::run::{Run, RunState};
use crate::books::records::wait::{SignalRecord, WaitRecord, WaitStatus};
use crate::error::{Error, Result};

/// One decided change to the books.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// A run was created (version 1, pending, no lease).
    RunCreated {
        /// The whole initial record.
        run: Run,
    },
    /// A run changed state; a terminal state drops the lease.
    RunTransitioned {
        /// The run.
        run: RunId,
        /// Its state before.
        from: RunState,
        /// Its state after.
        to: RunState,
        /// Its version after.
        version: u64,
        /// When, ms since the epoch.
        at_ms: u64,
        /// The lease token that made the change.
        token: FencingToken,
        /// Why.
        reason: String,
    },
    /// A lease was granted (acquire or claim).
    LeaseAcquired {
        /// The run.
        run: RunId,
        /// The new lease; its token is the run's `next_token`.
        lease: Lease,
        /// The run's version after.
        version: u64,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// A live lease was extended.
    LeaseRenewed {
        /// The run.
        run: RunId,
        /// The lease's token.
        token: FencingToken,
        /// The new expiry, ms since the epoch.
        expires_ms: u64,
        /// The run's version after.
        version: u64,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// A live lease was given up.
    LeaseReleased {
        /// The run.
        run: RunId,
        /// The lease's token.
        token: FencingToken,
        /// The run's version after.
        version: u64,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// An intent was recorded (status `Intended`).
    EffectIntended {
        /// The new entry.
        entry: EffectEntry,
    },
    /// An intent was handed out again with the same key (inside the dedup
    /// window).
    EffectResent {
        /// The attempt.
        key: EffectKey,
        /// The token it was resent under.
        token: FencingToken,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// An entry settled (finish, reconcile, expiry into unknown, compensation).
    EffectSettled {
        /// The attempt.
        key: EffectKey,
        /// Its new status.
        status: EffectStatus,
        /// When, ms since the epoch.
        at_ms: u64,
        /// The token it was settled under.
        token: FencingToken,
        /// How it was found (reconcile), or empty.
        note: String,
    },
    /// Content-addressed bytes were stored.
    BlobPut {
        /// `digest_of(bytes)`.
        digest: Digest,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A checkpoint's metadata was stored (its blobs already are).
    CheckpointSaved {
        /// The metadata.
        meta: CheckpointMeta,
    },
    /// A model call was journaled.
    DecisionRecorded {
        /// The record.
        record: DecisionRecord,
    },
    /// A wait was opened (status `Open`), appended to the run's waits.
    WaitOpened {
        /// The run.
        run: RunId,
        /// The new wait.
        wait: WaitRecord,
    },
    /// The run's open wait ended.
    WaitEnded {
        /// The run.
        run: RunId,
        /// The step of the wait.
        step: StepId,
        /// How it ended (not `Open`); a `Signalled` one takes its signal
        /// out of the inbox.
        status: WaitStatus,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// A signal arrived and went to the run's inbox.
    SignalReceived {
        /// The run.
        run: RunId,
        /// The signal.
        signal: SignalRecord,
    },
    /// An operator set a run's budget limits.
    BudgetSet {
        /// The run.
        run: RunId,
        /// Its new limits.
        limits: BudgetLimits,
        /// Who set them.
        by: String,
        /// Why.
        reason: String,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// Budget was reserved for a call, in every book the reservation names.
    BudgetReserved {
        /// The run.
        run: RunId,
        /// The new open reservation.
        reservation: Reservation,
    },
    /// A reserved call's cost was recorded and its reservation closed.
    BudgetSettled {
        /// The run.
        run: RunId,
        /// What the call was.
        charge: Charge,
        /// What it cost.
        actual: Cost,
        /// When, ms since the epoch.
        at_ms: u64,
        /// The token it was settled under.
        token: FencingToken,
    },
    /// The run's saga began: it moved to `compensating` (a
    /// `RunTransitioned` just before, in the same record) and reaches
    /// `end` once its compensations are done.
    SagaOpened {
        /// The run.
        run: RunId,
        /// Failed or cancelled.
        end: RunState,
        /// When, ms since the epoch.
        at_ms: u64,
        /// The token the move was made under.
        token: FencingToken,
    },
    /// A run took a resource's lease (a new hold, with the resource's next
    /// token).
    ResourceAcquired {
        /// The resource.
        resource: ResourceId,
        /// The holding run.
        run: RunId,
        /// The hold's token.
        token: FencingToken,
        /// When it dies unless renewed, ms since the epoch.
        expires_ms: u64,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// The holding run extended its hold.
    ResourceRenewed {
        /// The resource.
        resource: ResourceId,
        /// The holding run.
        run: RunId,
        /// The hold's token.
        token: FencingToken,
        /// The new expiry, ms since the epoch.
        expires_ms: u64,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// The holding run gave its hold up.
    ResourceReleased {
        /// The resource.
        resource: ResourceId,
        /// The holding run.
        run: RunId,
        /// The hold's token.
        token: FencingToken,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// A shared key was set (or cleared) at `version`.
    SharedSet {
        /// The key.
        key: SharedKeyId,
        /// Its version after (its version before plus one).
        version: u64,
        /// The value, or `None`: cleared.
        value: Option<Vec<u8>>,
        /// Who, when and why (kept with the key).
        change: SharedChange,
    },
    /// A run that was over and old enough left the books, with every row
    /// of it and the blobs only it referenced.
    RunPruned {
        /// The run.
        run: RunId,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// An operator moved a run that is not over, and that no worker held,
    /// from one agent version to another (`kind@1` to `kind@2`): the next
    /// claim resumes it with the new version's handler.
    RunVersionMoved {
        /// The run.
        run: RunId,
        /// The agent version it ran at.
        from: String,
        /// The agent version it runs at now.
        to: String,
        /// Its version (the record's change counter) after.
        version: u64,
        /// When, ms since the epoch.
        at_ms: u64,
        /// The run's current token (journaled; no lease is needed).
        token: FencingToken,
        /// Who moved it.
        operator: String,
        /// Why.
        reason: String,
    },
    /// An operator put a failed run back to pending. Each act in
    /// `reopened` (the latest attempt of its step, failed) becomes
    /// retryable, so the step's next begin opens the next attempt; its
    /// entry keeps its status and reason. `restored`, if set, is the
    /// checkpoint version the op that follows saves again as the newest.
    RunRetried {
        /// The run.
        run: RunId,
        /// Its version (the record's change counter) after.
        version: u64,
        /// When, ms since the epoch.
        at_ms: u64,
        /// The run's current token (journaled; no lease is needed).
        token: FencingToken,
        /// The failed acts reopened, in key order.
        reopened: Vec<EffectKey>,
        /// The checkpoint version saved again as the newest, if any.
        restored: Option<u64>,
        /// Who retried it.
        operator: String,
        /// Why.
        reason: String,
    },
    /// An operator forked `from` into `run`, created just before in the
    /// same record (`RunCreated`); `checkpoint`, if set, is the version of
    /// `from` the op that follows saves as `run`'s first.
    RunForked {
        /// The new run.
        run: RunId,
        /// The run it was forked from.
        from: RunId,
        /// The checkpoint version of `from` it starts from, if any.
        checkpoint: Option<u64>,
        /// When, ms since the epoch.
        at_ms: u64,
        /// Who forked it.
        operator: String,
        /// Why.
        reason: String,
    },
}

fn decode_error(err: postcard::Error) -> Error {
    Error::OpDecode {
        reason: err.to_string(),
    }
}

fn decode_exact<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T> {
    let (value, rest) = postcard::take_from_bytes::<T>(bytes).map_err(decode_error)?;
    if !rest.is_empty() {
        return Err(Error::OpDecode {
            reason: format!("{} trailing bytes after the op", rest.len()),
        });
    }
    Ok(value)
}

impl Op {
    /// The variant's name, for messages (`EffectSettled`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Op::RunCreated { .. } => "RunCreated",
            Op::RunTransitioned { .. } => "RunTransitioned",
            Op::LeaseAcquired { .. } => "LeaseAcquired",
            Op::LeaseRenewed { .. } => "LeaseRenewed",
            Op::LeaseReleased { .. } => "LeaseReleased",
            Op::EffectIntended { .. } => "EffectIntended",
            Op::EffectResent { .. } => "EffectResent",
            Op::EffectSettled { .. } => "EffectSettled",
            Op::BlobPut { .. } => "BlobPut",
            Op::CheckpointSaved { .. } => "CheckpointSaved",
            Op::DecisionRecorded { .. } => "DecisionRecorded",
            Op::WaitOpened { .. } => "WaitOpened",
            Op::WaitEnded { .. } => "WaitEnded",
            Op::SignalReceived { .. } => "SignalReceived",
            Op::BudgetSet { .. } => "BudgetSet",
            Op::BudgetReserved { .. } => "BudgetReserved",
            Op::BudgetSettled { .. } => "BudgetSettled",
            Op::SagaOpened { .. } => "SagaOpened",
            Op::ResourceAcquired { .. } => "ResourceAcquired",
            Op::ResourceRenewed { .. } => "ResourceRenewed",
            Op::ResourceReleased { .. } => "ResourceReleased",
            Op::SharedSet { .. } => "SharedSet",
            Op::RunPruned { .. } => "RunPruned",
            Op::RunVersionMoved { .. } => "RunVersionMoved",
            Op::RunRetried { .. } => "RunRetried",
            Op::RunForked { .. } => "RunForked",
        }
    }

    /// The run the op changes; `None` for a blob, which belongs to no run.
    pub fn run(&self) -> Option<&RunId> {
        match self {
            Op::RunCreated { run } => Some(&run.id),
            Op::RunTransitioned { run, .. }
            | Op::LeaseAcquired { run, .. }
            | Op::LeaseRenewed { run, .. }
            | Op::LeaseReleased { run, .. }
            | Op::WaitOpened { run, .. }
            | Op::WaitEnded { run, .. }
            | Op::SignalReceived { run, .. }
            | Op::BudgetSet { run, .. }
            | Op::BudgetReserved { run, .. }
            | Op::BudgetSettled { run, .. }
            | Op::SagaOpened { run, .. }
            | Op::ResourceAcquired { run, .. }
            | Op::ResourceRenewed { run, .. }
            | Op::ResourceReleased { run, .. }
            | Op::RunPruned { run, .. }
            | Op::RunVersionMoved { run, .. }
            | Op::RunRetried { run, .. }
            | Op::RunForked { run, .. } => Some(run),
            Op::SharedSet { change, .. } => change.run.as_ref(),
            Op::EffectIntended { entry } => Some(entry.key.run()),
            Op::EffectResent { key, .. } | Op::EffectSettled { key, .. } => Some(key.run()),
            Op::BlobPut { .. } => None,
            Op::CheckpointSaved { meta } => Some(&meta.run),
            Op::DecisionRecorded { record } => Some(&record.run),
        }
    }

    /// The op's bytes (postcard).
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("encoding an op into a Vec cannot fail")
    }

    /// Inverts [`Op::encode`]; bytes that are not exactly one op are an `Err`.
    pub fn decode(bytes: &[u8]) -> Result<Op> {
        decode_exact(bytes)
    }
}

/// The record payload version this build writes: the first byte of every
/// payload [`encode_ops`] makes. Version 2 appended the wait and signal
/// ops (`WaitOpened`, `WaitEnded`, `SignalReceived`) to version 1's, and
/// version 3 the budget ops (`BudgetSet`, `BudgetReserved`,
/// `BudgetSettled`), version 4 the child-run wait (`WaitFor::Child`,
/// `WaitStatus::ChildEnded`), and version 5 the wait for an asynchronous
/// tool's reply (`WaitFor::Reply`, `WaitStatus::Replied`), and version 6
/// sagas (`RunState::Compensating`, `SagaOpened`) and coordination
/// (`ResourceAcquired`, `ResourceRenewed`, `ResourceReleased`,
/// `SharedSet`) and retention (`RunPruned`), and version 7 the idempotent
/// tool with a resend margin of its own (`ToolClass::IdempotentWithMargin`),
/// and version 8 the wait for several children (`WaitFor::Children`,
/// `WaitStatus::ChildrenEnded`) and an operator's move of a run to another
/// agent version (`RunVersionMoved`), and version 9 a receipt kept in the
/// blob store by digest (`EffectStatus::ConfirmedStored`,
/// `EffectStatus::CompensatedStored`, written after the `BlobPut` of its
/// bytes in the same record) and an operator's retry and fork of a run
/// (`RunRetried`, `RunForked`), and version 10 checkpoint metadata in
/// layout 2, whose parts may be stored as chunks (`PartRef::chunks`: a part
/// saved in append form), and version 11 checkpoint metadata in layout 3,
/// where a chunked part's digest names its chunk list instead of its whole
/// bytes (so an append need not read its base), and version 12 checkpoint
/// metadata in layout 4, whose small parts are held in it
/// (`PartRef::inline`), so that an older build refuses a log holding them
/// by name instead of as damage.
pub const PAYLOAD_VERSION: u8 = 12;

/// Every record payload version this build reads, oldest first. A build
/// that introduces a version keeps reading the ones before it
/// (docs/FORMAT.md, "Versioning of the payload"). Each version's ops are a
/// prefix of the next one's, every one encoded alike, except the checkpoint
/// metadata of versions 10 to 12, whose first field tells its layout from
/// the older one and whose layout byte tells 2, 3 and 4 apart
/// (`records/checkpoint.rs`), so one decoder reads them all.
pub const PAYLOAD_VERSIONS_READ: [u8; 12] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, PAYLOAD_VERSION];

const _: () = assert!(PAYLOAD_VERSIONS_READ[PAYLOAD_VERSIONS_READ.len() - 1] == PAYLOAD_VERSION);

/// The bytes of one commit's ops, in order: [`PAYLOAD_VERSION`], then the
/// postcard encoding of the list.
pub fn encode_ops(ops: &[Op]) -> Vec<u8> {
    // Postcard writes a `u8` as one raw byte and a tuple as its fields in
    // order, so this is the version byte followed by the list's encoding.
    // Sized for a command's usual ops (an intent and its journal line
    // encode to about 200 bytes), not grown byte by byte from empty.
    let payload = postcard::to_extend(&(PAYLOAD_VERSION, ops), Vec::with_capacity(512))
        .expect("encoding ops into a Vec cannot fail");
    assert_eq!(payload[0], PAYLOAD_VERSION);
    payload
}

/// The version byte of `payload` if it names a version this build does not
/// read; `None` if this build reads it, or if the payload is empty (which
/// [`decode_ops`] refuses as damage, not as another version).
pub fn unsupported_payload_version(payload: &[u8]) -> Option<u8> {
    let version = *payload.first()?;
    (!PAYLOAD_VERSIONS_READ.contains(&version)).then_some(version)
}

/// Payload versions in words, for messages: `version 1`, `versions 1, 2`.
pub(crate) fn versions_text(versions: &[u8]) -> String {
    let list: Vec<String> = versions.iter().map(u8::to_string).collect();
    match list.as_slice() {
        [one] => format!("version {one}"),
        many => format!("versions {}", many.join(", ")),
    }
}

/// Inverts [`encode_ops`]. An empty payload, a version this build does not
/// read (the error names it and the versions this build reads), or bytes
/// that are not exactly one op list are an `Err`.
pub fn decode_ops(bytes: &[u8]) -> Result<Vec<Op>> {
    let Some((&version, list)) = bytes.split_first() else {
        return Err(Error::OpDecode {
            reason: "the record payload is empty: it lacks its version byte".to_string(),
        });
    };
    if let Some(found) = unsupported_payload_version(bytes) {
        assert_eq!(found, version);
        return Err(Error::OpDecode {
            reason: format!(
                "record payload version {found}; this build reads {}",
                versions_text(&PAYLOAD_VERSIONS_READ)
            ),
        });
    }
    decode_exact(list)
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests;

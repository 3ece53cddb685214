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
//! payload version.

use serde::{Deserialize, Serialize};

use super::budget::{BudgetLimits, Charge, Cost, Reservation};
use super::checkpoint::CheckpointMeta;
use super::coord::SharedChange;
use super::decision::DecisionRecord;
use super::digest::Digest;
use super::ids::{EffectKey, FencingToken, ResourceId, RunId, SharedKeyId, StepId};
use super::lease::Lease;
use super::ledger::{EffectEntry, EffectStatus};
use super::run::{Run, RunState};
use super::wait::{SignalRecord, WaitRecord, WaitStatus};
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
            | Op::RunPruned { run, .. } => Some(run),
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
/// `SharedSet`) and retention (`RunPruned`), so that an older build refuses
/// a log holding them by name instead of as damage.
pub const PAYLOAD_VERSION: u8 = 6;

/// Every record payload version this build reads, oldest first. A build
/// that introduces a version keeps reading the ones before it
/// (docs/FORMAT.md, "Versioning of the payload"). Each version's ops are a
/// prefix of the next one's, every one encoded alike, so one decoder reads
/// them all.
pub const PAYLOAD_VERSIONS_READ: [u8; 6] = [1, 2, 3, 4, 5, PAYLOAD_VERSION];

const _: () = assert!(PAYLOAD_VERSIONS_READ[PAYLOAD_VERSIONS_READ.len() - 1] == PAYLOAD_VERSION);

/// The bytes of one commit's ops, in order: [`PAYLOAD_VERSION`], then the
/// postcard encoding of the list.
pub fn encode_ops(ops: &[Op]) -> Vec<u8> {
    // Postcard writes a `u8` as one raw byte and a tuple as its fields in
    // order, so this is the version byte followed by the list's encoding.
    let payload =
        postcard::to_stdvec(&(PAYLOAD_VERSION, ops)).expect("encoding ops into a Vec cannot fail");
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
mod tests {
    use super::*;
    use crate::books::checkpoint::PartRef;
    use crate::books::decision::Usage;
    use crate::books::ids::{EffectKind, StepId, WorkerId};
    use crate::books::ledger::{Compensation, ToolClass};
    use crate::books::wait::WaitFor;
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9._:-]{1,12}"
    }
    fn run_id() -> impl Strategy<Value = RunId> {
        name().prop_map(|n| RunId::new(n).unwrap())
    }
    fn token() -> impl Strategy<Value = FencingToken> {
        any::<u64>().prop_map(FencingToken)
    }
    fn digest() -> impl Strategy<Value = Digest> {
        any::<[u8; 32]>().prop_map(Digest)
    }
    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..24)
    }
    fn key() -> impl Strategy<Value = EffectKey> {
        let kind = proptest::sample::select(vec![EffectKind::Act, EffectKind::Undo]);
        (run_id(), name(), kind, 1..u32::MAX)
            .prop_map(|(r, s, k, a)| EffectKey::of_kind(r, StepId::new(s).unwrap(), k, a).unwrap())
    }
    fn state() -> impl Strategy<Value = RunState> {
        proptest::sample::select(RunState::ALL.to_vec())
    }
    fn lease() -> impl Strategy<Value = Lease> {
        (name(), token(), any::<u64>()).prop_map(|(w, token, expires_ms)| Lease {
            worker: WorkerId::new(w).unwrap(),
            token,
            expires_ms,
        })
    }
    fn status() -> impl Strategy<Value = EffectStatus> {
        prop_oneof![
            Just(EffectStatus::Intended),
            bytes().prop_map(|receipt| EffectStatus::Confirmed { receipt }),
            (any::<bool>(), ".{0,8}")
                .prop_map(|(retryable, reason)| EffectStatus::Failed { retryable, reason }),
            ".{0,8}".prop_map(|reason| EffectStatus::Unknown { reason }),
            (bytes(), bytes()).prop_map(|(receipt, compensation_receipt)| {
                EffectStatus::Compensated {
                    receipt,
                    compensation_receipt,
                }
            }),
        ]
    }
    fn tool_class() -> impl Strategy<Value = ToolClass> {
        prop_oneof![
            any::<u64>().prop_map(|dedup_window_ms| ToolClass::Idempotent { dedup_window_ms }),
            Just(ToolClass::Queryable),
            Just(ToolClass::NotIdempotent),
        ]
    }
    fn run() -> impl Strategy<Value = Run> {
        (
            run_id(),
            state(),
            any::<u64>(),
            digest(),
            ".{0,8}",
            proptest::option::of(run_id()),
            any::<(u64, u64)>(),
            proptest::option::of(lease()),
            token(),
        )
            .prop_map(
                |(
                    id,
                    state,
                    version,
                    input_digest,
                    text,
                    parent,
                    (created_ms, updated_ms),
                    lease,
                    next_token,
                )| Run {
                    id,
                    state,
                    version,
                    input_digest,
                    agent_version: text.clone(),
                    trace_id: text,
                    parent,
                    created_ms,
                    updated_ms,
                    lease,
                    next_token,
                },
            )
    }
    fn entry() -> impl Strategy<Value = EffectEntry> {
        (
            key(),
            name(),
            tool_class(),
            digest(),
            ".{0,8}",
            proptest::option::of((name(), bytes(), tool_class())),
            status(),
            any::<(u64, u32)>(),
            token(),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(
                |(
                    key,
                    tool,
                    tool_class,
                    args_digest,
                    rationale,
                    comp,
                    status,
                    (intended_ms, resends),
                    token,
                    settled_ms,
                )| EffectEntry {
                    key,
                    tool,
                    tool_class,
                    args_digest,
                    rationale,
                    compensation: comp.map(|(tool, args, class)| Compensation {
                        tool,
                        args,
                        class,
                    }),
                    status,
                    intended_ms,
                    token,
                    resends,
                    settled_ms,
                },
            )
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            run().prop_map(|run| Op::RunCreated { run }),
            (
                run_id(),
                state(),
                state(),
                any::<(u64, u64)>(),
                token(),
                ".{0,8}"
            )
                .prop_map(|(run, from, to, (version, at_ms), token, reason)| {
                    Op::RunTransitioned {
                        run,
                        from,
                        to,
                        version,
                        at_ms,
                        token,
                        reason,
                    }
                }),
            (run_id(), lease(), any::<(u64, u64)>()).prop_map(|(run, lease, (version, at_ms))| {
                Op::LeaseAcquired {
                    run,
                    lease,
                    version,
                    at_ms,
                }
            }),
            (run_id(), token(), any::<(u64, u64, u64)>()).prop_map(
                |(run, token, (expires_ms, version, at_ms))| Op::LeaseRenewed {
                    run,
                    token,
                    expires_ms,
                    version,
                    at_ms
                }
            ),
            (run_id(), token(), any::<(u64, u64)>()).prop_map(|(run, token, (version, at_ms))| {
                Op::LeaseReleased {
                    run,
                    token,
                    version,
                    at_ms,
                }
            }),
            entry().prop_map(|entry| Op::EffectIntended { entry }),
            (key(), token(), any::<u64>()).prop_map(|(key, token, at_ms)| Op::EffectResent {
                key,
                token,
                at_ms
            }),
            (key(), status(), any::<u64>(), token(), ".{0,8}").prop_map(
                |(key, status, at_ms, token, note)| Op::EffectSettled {
                    key,
                    status,
                    at_ms,
                    token,
                    note
                }
            ),
            (digest(), bytes()).prop_map(|(digest, bytes)| Op::BlobPut { digest, bytes }),
            (
                run_id(),
                any::<(u64, u32, u64)>(),
                proptest::collection::vec((name(), digest(), any::<u64>()), 0..3),
                token()
            )
                .prop_map(
                    |(run, (version, schema_version, saved_ms), parts, token)| {
                        Op::CheckpointSaved {
                            meta: CheckpointMeta {
                                run,
                                version,
                                schema_version,
                                parts: parts
                                    .into_iter()
                                    .map(|(name, digest, size_bytes)| PartRef {
                                        name,
                                        digest,
                                        size_bytes,
                                    })
                                    .collect(),
                                saved_ms,
                                token,
                            },
                        }
                    }
                ),
            (
                run_id(),
                any::<(u64, u64, u64, u64, u64)>(),
                digest(),
                bytes(),
                ".{0,8}",
                token()
            )
                .prop_map(
                    |(
                        run,
                        (position, tokens_in, tokens_out, cost_micro_usd, recorded_ms),
                        input_digest,
                        output,
                        rationale,
                        token,
                    )| Op::DecisionRecorded {
                        record: DecisionRecord {
                            run,
                            position,
                            input_digest,
                            output,
                            rationale,
                            usage: Usage {
                                tokens_in,
                                tokens_out,
                                cost_micro_usd
                            },
                            recorded_ms,
                            token
                        },
                    }
                ),
            (run_id(), wait_record()).prop_map(|(run, wait)| Op::WaitOpened { run, wait }),
            (run_id(), name(), wait_status(), any::<u64>()).prop_map(
                |(run, step, status, at_ms)| Op::WaitEnded {
                    run,
                    step: StepId::new(step).unwrap(),
                    status,
                    at_ms
                }
            ),
            (run_id(), signal()).prop_map(|(run, signal)| Op::SignalReceived { run, signal }),
            (run_id(), limits(), name(), ".{0,8}", any::<u64>()).prop_map(
                |(run, limits, by, reason, at_ms)| Op::BudgetSet {
                    run,
                    limits,
                    by,
                    reason,
                    at_ms
                }
            ),
            (run_id(), reservation())
                .prop_map(|(run, reservation)| Op::BudgetReserved { run, reservation }),
            (run_id(), charge(), cost(), any::<u64>(), token()).prop_map(
                |(run, charge, actual, at_ms, token)| Op::BudgetSettled {
                    run,
                    charge,
                    actual,
                    at_ms,
                    token
                }
            ),
            (run_id(), state(), any::<u64>(), token()).prop_map(|(run, end, at_ms, token)| {
                Op::SagaOpened {
                    run,
                    end,
                    at_ms,
                    token,
                }
            }),
        ]
    }

    fn cost() -> impl Strategy<Value = Cost> {
        any::<(u64, u64, u64, u64)>().prop_map(
            |(tokens_in, tokens_out, cost_micros, tool_calls)| Cost {
                tokens_in,
                tokens_out,
                cost_micros,
                tool_calls,
            },
        )
    }

    fn limits() -> impl Strategy<Value = BudgetLimits> {
        proptest::array::uniform5(proptest::option::of(any::<u64>())).prop_map(|l| BudgetLimits {
            tokens_in: l[0],
            tokens_out: l[1],
            cost_micros: l[2],
            tool_calls: l[3],
            wall_ms: l[4],
        })
    }

    fn charge() -> impl Strategy<Value = Charge> {
        prop_oneof![
            any::<u64>().prop_map(|position| Charge::Decision { position }),
            name().prop_map(|step| Charge::Effect {
                step: StepId::new(step).unwrap()
            }),
        ]
    }

    fn reservation() -> impl Strategy<Value = Reservation> {
        (
            charge(),
            cost(),
            any::<(u64, u32)>(),
            token(),
            proptest::collection::vec(run_id(), 0..3),
        )
            .prop_map(|(charge, amount, (reserved_ms, attempt), token, charged)| {
                Reservation {
                    charge,
                    amount,
                    reserved_ms,
                    token,
                    attempt,
                    charged,
                }
            })
    }

    fn signal() -> impl Strategy<Value = SignalRecord> {
        (any::<(u64, u64)>(), name(), bytes(), name()).prop_map(
            |((seq, sent_ms), name, payload, sender)| SignalRecord {
                seq,
                name,
                payload,
                sender,
                sent_ms,
            },
        )
    }

    fn wait_status() -> impl Strategy<Value = WaitStatus> {
        prop_oneof![
            Just(WaitStatus::Open),
            (name(), ".{0,8}").prop_map(|(approver, note)| WaitStatus::Approved { approver, note }),
            (name(), ".{0,8}").prop_map(|(approver, note)| WaitStatus::Rejected { approver, note }),
            signal().prop_map(|signal| WaitStatus::Signalled { signal }),
            Just(WaitStatus::Elapsed),
            (state(), proptest::option::of(any::<u64>()))
                .prop_map(|(state, checkpoint)| WaitStatus::ChildEnded { state, checkpoint }),
            status().prop_map(|status| WaitStatus::Replied { status }),
        ]
    }

    fn wait_record() -> impl Strategy<Value = WaitRecord> {
        let wait_for = prop_oneof![
            (digest(), name())
                .prop_map(|(args_digest, role)| WaitFor::Approval { args_digest, role }),
            name().prop_map(|name| WaitFor::Signal { name }),
            Just(WaitFor::Timer),
            run_id().prop_map(|run| WaitFor::Child { run }),
            key().prop_map(|key| WaitFor::Reply { key }),
        ];
        (
            name(),
            any::<(u64, u64)>(),
            wait_for,
            proptest::option::of(any::<u64>()),
            token(),
            ".{0,8}",
            wait_status(),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(
                |(
                    step,
                    (seq, opened_ms),
                    wait_for,
                    deadline_ms,
                    token,
                    reason,
                    status,
                    ended_ms,
                )| {
                    WaitRecord {
                        step: StepId::new(step).unwrap(),
                        seq,
                        wait_for,
                        deadline_ms,
                        opened_ms,
                        token,
                        reason,
                        status,
                        ended_ms,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn op_round_trips(op in op()) {
            let bytes = op.encode();
            prop_assert_eq!(Op::decode(&bytes).unwrap(), op.clone());
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert!(Op::decode(&longer).is_err());
            if !bytes.is_empty() {
                prop_assert!(Op::decode(&bytes[..bytes.len() - 1]).is_err());
            }
        }

        #[test]
        fn op_lists_round_trip(ops in proptest::collection::vec(op(), 0..6)) {
            prop_assert_eq!(decode_ops(&encode_ops(&ops)).unwrap(), ops);
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            // Whatever decodes must re-encode to something that decodes equal.
            if let Ok(op) = Op::decode(&bytes) {
                prop_assert_eq!(Op::decode(&op.encode()).unwrap(), op);
            }
            // Behind a known version byte, so the list decoder sees them too.
            let payload = [&[PAYLOAD_VERSION][..], &bytes].concat();
            for bytes in [&bytes, &payload] {
                if let Ok(ops) = decode_ops(bytes) {
                    prop_assert_eq!(decode_ops(&encode_ops(&ops)).unwrap(), ops);
                }
            }
        }

        #[test]
        fn mutated_encodings_never_panic(op in op(), at in any::<usize>(), byte in any::<u8>()) {
            let mut bytes = op.encode();
            let at = at % bytes.len();
            bytes[at] = byte;
            let _ = Op::decode(&bytes);
            prop_assert!(Op::decode(&op.encode()).is_ok());
        }
    }

    #[test]
    fn a_payload_is_its_version_byte_then_the_list_and_other_versions_are_refused() {
        let ops = vec![Op::LeaseReleased {
            run: RunId::new("ab").unwrap(),
            token: FencingToken(1),
            version: 2,
            at_ms: 3,
        }];
        let payload = encode_ops(&ops);
        assert_eq!(payload[0], PAYLOAD_VERSION);
        assert_eq!(payload[1..], postcard::to_stdvec(&ops).unwrap());
        assert_eq!(decode_ops(&payload).unwrap(), ops);
        assert_eq!(unsupported_payload_version(&payload), None);
        for old in [1u8, 2, 3, 4, 5] {
            let mut before = payload.clone();
            before[0] = old;
            assert_eq!(
                decode_ops(&before).unwrap(),
                ops,
                "version {old} is still read"
            );
        }
        for version in [0u8, 7, 8, 255] {
            let mut other = payload.clone();
            other[0] = version;
            assert_eq!(unsupported_payload_version(&other), Some(version));
            let err = decode_ops(&other).unwrap_err();
            let expected = format!(
                "record payload version {version}; this build reads versions 1, 2, 3, 4, 5, 6"
            );
            assert!(err.to_string().contains(&expected), "{err}");
        }
    }

    #[test]
    fn empty_and_truncated_payloads_are_errors() {
        assert_eq!(unsupported_payload_version(&[]), None);
        let err = decode_ops(&[]).unwrap_err();
        assert!(err.to_string().contains("lacks its version byte"), "{err}");
        let payload = encode_ops(&[Op::BlobPut {
            digest: Digest([7; 32]),
            bytes: vec![1, 2, 3],
        }]);
        for len in 0..payload.len() {
            assert!(
                decode_ops(&payload[..len]).is_err(),
                "prefix of {len} bytes"
            );
        }
        assert_eq!(decode_ops(&[PAYLOAD_VERSION, 0]).unwrap(), Vec::new());
    }

    #[test]
    fn invalid_names_inside_an_op_are_refused_on_decode() {
        let op = Op::LeaseReleased {
            run: RunId::new("ab").unwrap(),
            token: FencingToken(1),
            version: 2,
            at_ms: 3,
        };
        let mut bytes = op.encode();
        // Byte 1 is the length of "ab", bytes 2..4 the name; put a '/' in it.
        assert_eq!(&bytes[2..4], b"ab");
        bytes[2] = b'/';
        assert!(matches!(Op::decode(&bytes), Err(Error::OpDecode { .. })));
        assert!(Op::decode(&[]).is_err());
    }
}

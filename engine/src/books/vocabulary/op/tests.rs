use super::*;
use crate::books::Usage;
use crate::books::{ChildEnd, Join, WaitFor};
use crate::books::{ChunkRef, PartRef};
use crate::books::{Compensation, Receipt, StoredReceipt, ToolClass};
use crate::books::{EffectKind, StepId, WorkerId};
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
        (digest(), any::<u64>()).prop_map(|(digest, len_bytes)| EffectStatus::ConfirmedStored {
            receipt: StoredReceipt { digest, len_bytes }
        }),
        (receipt(), receipt()).prop_map(|(receipt, compensation_receipt)| {
            EffectStatus::CompensatedStored {
                receipt,
                compensation_receipt,
            }
        }),
    ]
}
fn receipt() -> impl Strategy<Value = Receipt> {
    prop_oneof![
        bytes().prop_map(Receipt::Inline),
        (digest(), any::<u64>())
            .prop_map(|(digest, len_bytes)| Receipt::Stored(StoredReceipt { digest, len_bytes })),
    ]
}
fn tool_class() -> impl Strategy<Value = ToolClass> {
    prop_oneof![
        any::<u64>().prop_map(|dedup_window_ms| ToolClass::Idempotent { dedup_window_ms }),
        Just(ToolClass::Queryable),
        Just(ToolClass::NotIdempotent),
        any::<(u64, u64)>().prop_map(|(dedup_window_ms, resend_margin_ms)| {
            ToolClass::IdempotentWithMargin {
                dedup_window_ms,
                resend_margin_ms,
            }
        }),
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
                compensation: comp.map(|(tool, args, class)| Compensation { tool, args, class }),
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
            proptest::collection::vec(
                (
                    name(),
                    digest(),
                    any::<u64>(),
                    proptest::collection::vec((digest(), 0..1_000u64), 0..4),
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40))
                ),
                0..3
            ),
            token()
        )
            .prop_map(|(run, (version, schema_version, saved_ms), parts, token)| {
                Op::CheckpointSaved {
                    meta: CheckpointMeta {
                        run,
                        version,
                        schema_version,
                        parts: parts
                            .into_iter()
                            .map(|(name, digest, size_bytes, chunks, held)| {
                                // A chunked part has two chunks or more, and
                                // its size is theirs; a part held inline has
                                // no chunks, and its size is its bytes'.
                                let chunks: Vec<ChunkRef> = chunks
                                    .into_iter()
                                    .map(|(digest, size_bytes)| ChunkRef { digest, size_bytes })
                                    .collect();
                                let chunks = if chunks.len() < 2 { Vec::new() } else { chunks };
                                let size_bytes = if chunks.is_empty() {
                                    size_bytes
                                } else {
                                    chunks.iter().map(|c| c.size_bytes).sum()
                                };
                                let inline = held.filter(|_| chunks.is_empty());
                                let size_bytes =
                                    inline.as_ref().map_or(size_bytes, |b| b.len() as u64);
                                PartRef {
                                    name,
                                    digest,
                                    size_bytes,
                                    chunks,
                                    inline,
                                }
                            })
                            .collect(),
                        saved_ms,
                        token,
                    },
                }
            }),
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
                    (position, tokens_in, tokens_out, cost_micros, recorded_ms),
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
                            cost_micros
                        },
                        recorded_ms,
                        token
                    },
                }
            ),
        (run_id(), wait_record()).prop_map(|(run, wait)| Op::WaitOpened { run, wait }),
        (run_id(), name(), wait_status(), any::<u64>()).prop_map(|(run, step, status, at_ms)| {
            Op::WaitEnded {
                run,
                step: StepId::new(step).unwrap(),
                status,
                at_ms,
            }
        }),
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
        (
            run_id(),
            (".{0,8}", ".{0,8}"),
            any::<(u64, u64)>(),
            token(),
            (name(), ".{0,8}")
        )
            .prop_map(
                |(run, (from, to), (version, at_ms), token, (operator, reason))| {
                    Op::RunVersionMoved {
                        run,
                        from,
                        to,
                        version,
                        at_ms,
                        token,
                        operator,
                        reason,
                    }
                }
            ),
        (
            run_id(),
            any::<(u64, u64)>(),
            token(),
            (proptest::collection::vec(key(), 0..3), any::<Option<u64>>()),
            (name(), ".{0,8}")
        )
            .prop_map(
                |(run, (version, at_ms), token, (reopened, restored), (operator, reason))| {
                    Op::RunRetried {
                        run,
                        version,
                        at_ms,
                        token,
                        reopened,
                        restored,
                        operator,
                        reason,
                    }
                }
            ),
        (
            (run_id(), run_id()),
            any::<(Option<u64>, u64)>(),
            (name(), ".{0,8}")
        )
            .prop_map(|((run, from), (checkpoint, at_ms), (operator, reason))| {
                Op::RunForked {
                    run,
                    from,
                    checkpoint,
                    at_ms,
                    operator,
                    reason,
                }
            }),
    ]
}

fn cost() -> impl Strategy<Value = Cost> {
    any::<(u64, u64, u64, u64)>().prop_map(|(tokens_in, tokens_out, cost_micros, tool_calls)| {
        Cost {
            tokens_in,
            tokens_out,
            cost_micros,
            tool_calls,
        }
    })
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
        .prop_map(
            |(charge, amount, (reserved_ms, attempt), token, charged)| Reservation {
                charge,
                amount,
                reserved_ms,
                token,
                attempt,
                charged,
            },
        )
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
        proptest::collection::vec(
            (run_id(), state(), proptest::option::of(any::<u64>())),
            0..3
        )
        .prop_map(|ended| WaitStatus::ChildrenEnded {
            ended: ended
                .into_iter()
                .map(|(run, state, checkpoint)| ChildEnd {
                    run,
                    state,
                    checkpoint
                })
                .collect()
        }),
    ]
}

fn wait_record() -> impl Strategy<Value = WaitRecord> {
    let wait_for = prop_oneof![
        (digest(), name()).prop_map(|(args_digest, role)| WaitFor::Approval { args_digest, role }),
        name().prop_map(|name| WaitFor::Signal { name }),
        Just(WaitFor::Timer),
        run_id().prop_map(|run| WaitFor::Child { run }),
        key().prop_map(|key| WaitFor::Reply { key }),
        (proptest::collection::vec(run_id(), 0..3), any::<bool>()).prop_map(|(runs, first)| {
            WaitFor::Children {
                runs,
                join: if first { Join::First } else { Join::All },
            }
        }),
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
            |(step, (seq, opened_ms), wait_for, deadline_ms, token, reason, status, ended_ms)| {
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
    for old in [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11] {
        let mut before = payload.clone();
        before[0] = old;
        assert_eq!(
            decode_ops(&before).unwrap(),
            ops,
            "version {old} is still read"
        );
    }
    for version in [0u8, 13, 14, 255] {
        let mut other = payload.clone();
        other[0] = version;
        assert_eq!(unsupported_payload_version(&other), Some(version));
        let err = decode_ops(&other).unwrap_err();
        let expected = format!(
            "record payload version {version}; this build reads versions 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"
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

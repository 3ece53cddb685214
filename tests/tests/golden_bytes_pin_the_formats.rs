//! Golden bytes: the encoding of every books op variant (and of every
//! variant of the enums inside ops), of a WAL record payload, and of a row
//! of every state-store table that holds rows, checked in below as hex. Each fixture is
//! encoded and compared with its hex, and its hex is decoded and compared
//! with the value, so a change to any encoding, in either direction, fails
//! here and prints the new bytes. docs/FORMAT.md ("Record payload", "State
//! store tables") describes these bytes and the policy for changing them:
//! a change is a new payload version, never an edit of this table alone.
//!
//! A deliberate change is blessed with one command, which rewrites the
//! table in this file in place (then review the diff; the committed table
//! is the reference):
//!
//! ```text
//! ACTUM_BLESS_GOLDEN=1 cargo test -p actum-tests --test scenarios golden_bytes_pin_the_formats::
//! ```
//!
//! Fixture values need not be states the books can reach: every field
//! differs from its default and from its neighbours, so two swapped fields
//! change the bytes. Digests are fixed, ascending bytes, not real hashes.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::Path;

use actum::books::{
    AuditEntry, AuditWhat, BlobRefs, BudgetBook, BudgetLimits, Charge, CheckpointMeta, ChildEnd,
    ChunkRef, Compensation, Cost, DecisionRecord, Digest, EffectEntry, EffectKey, EffectKind,
    EffectStatus, FencingToken, Join, Lease, Op, PAYLOAD_VERSION, PartRef, Receipt, Reservation,
    ResourceBook, ResourceHold, ResourceId, Run, RunId, RunState, SagaBook, SharedChange,
    SharedEntry, SharedKeyId, SignalRecord, StepId, StoredReceipt, ToolClass, Usage, WaitBook,
    WaitFor, WaitRecord, WaitStatus, WorkerId, decode_ops, encode_ops,
};
use actum::state::rows::{RowTable, decode_audit_row, decode_row, encode_audit_row, encode_row};

/// The committed bytes: one fixture a line, its name then its hex.
/// Rewritten in place by `ACTUM_BLESS_GOLDEN=1` (see the module docs).
const GOLDEN: &str = "
op.run_created                        000272310407101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f02613102743101027031e807d00f0102773103b81704
op.run_created.bare                   000272320001202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f02613202743200dc0bdc0b0001
op.run_transitioned                   01027231010308a01f0303776879
op.run_transitioned.failed            010272310206098420030178
op.run_transitioned.cancelled         0102723104070ae820030179
op.lease_acquired                     0202723102773103b81708c413
op.lease_renewed                      0302723103f02e098827
op.lease_released                     04027231030ad836
op.effect_intended.act                050272310273310002037061790080b89929303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f037768790106726566756e640201020100c03e030501a846
op.effect_intended.margin             050272310273310002037061790380dddb01c0a907303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f037768790106726566756e640201020100c03e030501a846
op.effect_intended.undo               05027231027331010106726566756e6402404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f04756e646f0000904e030000
op.effect_resent                      06027231027331000203f855
op.effect_settled.confirmed           0702723102733100020102aabbe05d03016e
op.effect_settled.failed              0702723102733100020201026e6fe05d03016e
op.effect_settled.unknown             07027231027331000203046c6f7374e05d03016e
op.effect_settled.compensated         0702723102733100020401aa01cce05d03016e
op.effect_settled.confirmed_stored    070272310273310002056162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f8080808001e05d03016e
op.effect_settled.compensated_stored  07027231027331000206016162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f80808080010001cce05d03016e
op.blob_put                           08606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f02dead
op.checkpoint_saved                   09000402723102060304706c616e505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f020000046d736773707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8fac02027172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f90c80172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f909164000473746570909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeaf03000103732037c86503
op.decision_recorded                  0a02723105909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeaf026f6b017264c801ac02b06d03
op.wait_opened.approval               0b0272310273320200b0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7c8c9cacbcccdcecf0766696e616e636501c03ef02e03037768790000
op.wait_opened.signal                 0b0272310273320201047061696400f02e03037768790000
op.wait_opened.timer                  0b027231027332020201a846f02e03037768790000
op.wait_ended.approved                0c0272310273320103616e6e026f6bd836
op.wait_ended.rejected                0c0272310273320203626f62026e6fd836
op.wait_ended.signalled               0c0272310273320304047061696402beef037073708827d836
op.wait_ended.elapsed                 0c02723102733204d836
op.wait_opened.child                  0b02723102733202030572313a733200f02e03037768790000
op.wait_ended.child_ended             0c02723102733205050103d836
op.wait_ended.child_ended_bare        0c027231027332050700d836
op.wait_opened.children               0b0272310273320205020772313a73322e310772313a73322e320100f02e03037768790000
op.wait_ended.children_ended          0c02723102733207020772313a73322e310501030772313a73322e320600d836
op.wait_opened.reply                  0b0272310273320204027231027331000200f02e03037768790000
op.wait_ended.replied                 0c027231027332060102aabbd836
op.signal_received                    0d02723104047061696402beef037073708827
op.budget_set                         0e02723101a08d060001c096b10201280180dddb01036f707303776879c865
op.budget_reserved                    0f0272310102733314151617e05d030202027231027031
op.budget_settled                     1002723100070a0b0c0db06d03
op.run_transitioned.compensating      01027231010809987503017a
op.saga_opened                        1102723107807d03
op.resource_acquired                  120b637573746f6d65723a343202723104e88401f48001
op.resource_renewed                   130b637573746f6d65723a343202723104d08c01dc8801
op.resource_released                  140b637573746f6d65723a343202723104c49001
op.run_pruned                         16027231a09c01
op.shared_set                         1507646e633a633432020103646e6302ba940102723101027231010301d0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef0177
op.shared_set.cleared_by_operator     1507646e633a633432030003bb9401036f70730000000177
op.run_version_moved                  170272310673686f7040310673686f7040320988a40105086f70732d616e6e610f763220726f756e6473207269676874
op.run_retried                        180272310af0ab010501027231047368697000020103086f70732d616e6e6109726573746f636b6564
op.run_forked                         19086f726465722d31620272310102d8b301086f70732d616e6e610e61207365636f6e64206f72646572
payload.two_ops                       0c020302723103f02e09882704027231030ad836
payload.no_ops                        0c00
row.run                               931ba2220272310407101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f02613102743101027031e807d00f0102773103b81704
row.run.bare                          a53e15bb0272320001202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f02613202743200dc0bdc0b0001
row.effect                            f6aa6e9d0272310273310002037061790080b89929303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f037768790106726566756e640201020100c03e030501a846
row.checkpoint                        e3f56fec000402723102060304706c616e505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f020000046d736773707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8fac02027172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f90c80172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f909164000473746570909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeaf03000103732037c86503
row.decision                          a394c08102723105909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeaf026f6b017264c801ac02b06d03
row.audit.created                     5cc219fc0198750000026131101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f0179
row.audit.transitioned                20019d0702987501030101050179
row.audit.lease_acquired              b555c932039875010302027731b8170179
row.audit.lease_renewed               c4fa817a049875010303f02e0179
row.audit.lease_released              1badf4fa0598750103040179
row.audit.intended                    09aadf33069875010305027231027331000203706179303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f0179
row.audit.resent                      2db3151e07987501030602723102733101010179
row.audit.settled                     7c5091bb089875010307027231027331000209636f6e6669726d65640179
row.audit.checkpoint_saved            c9d529740998750103080206020179
row.audit.decision_recorded           16f4f9350a987501030905909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeaf0179
row.audit.wait_opened                 144f24c30b987501030a02733200b0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7c8c9cacbcccdcecf0766696e616e636501c03e0179
row.audit.wait_ended                  e291489c0c9875000b02733208617070726f7665640179
row.audit.signal_received             a4a97b950d9875000c040470616964037073700179
row.audit.budget_set                  faecc98e0e9875000d01a08d060001c096b10201280180dddb01036f70730179
row.audit.reserved                    45d8285d0f987501030e01027333141516170179
row.audit.charge_settled              5bde0d5510987501030f00070a0b0c0d0179
row.audit.saga_opened                 9a2dbabd119875010310060179
row.audit.resource_acquired           f52f96e61298750103110b637573746f6d65723a3432e884010179
row.audit.resource_renewed            ebc386c31398750103120b637573746f6d65723a3432d08c010179
row.audit.resource_released           f1d24ad01498750103130b637573746f6d65723a34320179
row.audit.shared_set                  746f1a4c15987501031407646e633a6334320201d0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef0179
row.audit.version_moved               3c67dfb31698750103150673686f7040310673686f704032086f70732d616e6e610179
row.audit.retried                     c03a878d17987501031601027231047368697000020103086f70732d616e6e610179
row.audit.forked                      dc7ee94a18987500170272310102086f70732d616e6e610179
row.audit_chunk                       4aa60849020198750000026131101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f017902987501030101050179
row.waits                             1c8a99cc02723102027332020201a846f02e03037768790103616e6e026f6b01d8360273320200b0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7c8c9cacbcccdcecf0766696e616e636501c03ef02e030377687900000104047061696402beef03707370882704
row.budgets                           9ff5e5850272310101a08d060001c096b10201280180dddb011e1f202114151617010102733314151617e05d030202027231027031d0860301e0d403
row.sagas                             e7e4351a027231020273310273320106
row.resources                         15b551610b637573746f6d65723a34320102723104e88401f4800105
row.shared                            2d135b5f07646e633a6334320103646e63020201b99401036f7073000001d0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef017702ba940102723101027231010301d0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef0177
row.blob_refs                         682dea5002723102101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f
";

// ---------------------------------------------------------------- values

fn digest(first: u8) -> Digest {
    Digest(std::array::from_fn(|i| first + i as u8))
}

fn run_id() -> RunId {
    RunId::new("r1").unwrap()
}

fn token() -> FencingToken {
    FencingToken(3)
}

fn act_key() -> EffectKey {
    EffectKey::of_kind(run_id(), StepId::new("s1").unwrap(), EffectKind::Act, 2).unwrap()
}

fn undo_key() -> EffectKey {
    EffectKey::of_kind(run_id(), StepId::new("s1").unwrap(), EffectKind::Undo, 1).unwrap()
}

fn lease() -> Lease {
    Lease {
        worker: WorkerId::new("w1").unwrap(),
        token: token(),
        expires_ms: 3_000,
    }
}

/// A run with every optional field present.
fn run() -> Run {
    Run {
        id: run_id(),
        state: RunState::Paused,
        version: 7,
        input_digest: digest(0x10),
        agent_version: "a1".into(),
        trace_id: "t1".into(),
        parent: Some(RunId::new("p1").unwrap()),
        created_ms: 1_000,
        updated_ms: 2_000,
        lease: Some(lease()),
        next_token: FencingToken(4),
    }
}

/// A run with every optional field absent.
fn bare_run() -> Run {
    Run {
        id: RunId::new("r2").unwrap(),
        state: RunState::Pending,
        version: 1,
        input_digest: digest(0x20),
        agent_version: "a2".into(),
        trace_id: "t2".into(),
        parent: None,
        created_ms: 1_500,
        updated_ms: 1_500,
        lease: None,
        next_token: FencingToken::FIRST,
    }
}

/// An act's entry with a registered compensation (two tool classes).
fn act_entry() -> EffectEntry {
    EffectEntry {
        key: act_key(),
        tool: "pay".into(),
        tool_class: ToolClass::Idempotent {
            dedup_window_ms: 86_400_000,
        },
        args_digest: digest(0x30),
        rationale: "why".into(),
        compensation: Some(Compensation {
            tool: "refund".into(),
            args: vec![0x01, 0x02],
            class: ToolClass::Queryable,
        }),
        status: EffectStatus::Intended,
        intended_ms: 8_000,
        token: token(),
        resends: 5,
        settled_ms: Some(9_000),
    }
}

/// An act's entry on a tool that declares its resend margin (version 7).
fn margin_entry() -> EffectEntry {
    EffectEntry {
        tool_class: ToolClass::IdempotentWithMargin {
            dedup_window_ms: 3_600_000,
            resend_margin_ms: 120_000,
        },
        ..act_entry()
    }
}

/// A compensation's own entry: no compensation, never settled.
fn undo_entry() -> EffectEntry {
    EffectEntry {
        key: undo_key(),
        tool: "refund".into(),
        tool_class: ToolClass::NotIdempotent,
        args_digest: digest(0x40),
        rationale: "undo".into(),
        compensation: None,
        status: EffectStatus::Intended,
        intended_ms: 10_000,
        token: token(),
        resends: 0,
        settled_ms: None,
    }
}

/// The fixture's metadata: two parts in blobs (`checkpoint_meta_in_blobs`)
/// and a third held inline (layout 4).
fn checkpoint_meta() -> CheckpointMeta {
    let mut meta = checkpoint_meta_in_blobs();
    meta.parts.push(PartRef {
        name: "step".into(),
        digest: digest(0x90),
        size_bytes: 3,
        chunks: Vec::new(),
        inline: Some(b"s 7".to_vec()),
    });
    meta
}

/// The fixture's metadata as layouts 1 to 3 held it: its parts in blobs.
fn checkpoint_meta_in_blobs() -> CheckpointMeta {
    CheckpointMeta {
        run: run_id(),
        version: 2,
        schema_version: 6,
        parts: vec![
            PartRef {
                name: "plan".into(),
                digest: digest(0x50),
                size_bytes: 2,
                chunks: Vec::new(),
                inline: None,
            },
            // A part saved in append form: two chunks (sizes adding up to
            // the whole), the chunk list's digest first.
            PartRef {
                name: "msgs".into(),
                digest: digest(0x70),
                size_bytes: 300,
                chunks: vec![
                    ChunkRef {
                        digest: digest(0x71),
                        size_bytes: 200,
                    },
                    ChunkRef {
                        digest: digest(0x72),
                        size_bytes: 100,
                    },
                ],
                inline: None,
            },
        ],
        saved_ms: 13_000,
        token: token(),
    }
}

fn decision_record() -> DecisionRecord {
    DecisionRecord {
        run: run_id(),
        position: 5,
        input_digest: digest(0x90),
        output: b"ok".to_vec(),
        rationale: "r".into(),
        usage: Usage {
            tokens_in: 100,
            tokens_out: 200,
            cost_micros: 300,
        },
        recorded_ms: 14_000,
        token: token(),
    }
}

fn settled(status: EffectStatus) -> Op {
    Op::EffectSettled {
        key: act_key(),
        status,
        at_ms: 12_000,
        token: token(),
        note: "n".into(),
    }
}

fn lease_renewed() -> Op {
    Op::LeaseRenewed {
        run: run_id(),
        token: token(),
        expires_ms: 6_000,
        version: 9,
        at_ms: 5_000,
    }
}

fn lease_released() -> Op {
    Op::LeaseReleased {
        run: run_id(),
        token: token(),
        version: 10,
        at_ms: 7_000,
    }
}

/// One op per variant, and one per variant of the enums inside them.
fn signal() -> SignalRecord {
    SignalRecord {
        seq: 4,
        name: "paid".into(),
        payload: vec![0xbe, 0xef],
        sender: "psp".into(),
        sent_ms: 5_000,
    }
}

fn wait(wait_for: WaitFor, deadline_ms: Option<u64>, status: WaitStatus) -> WaitRecord {
    WaitRecord {
        step: StepId::new("s2").unwrap(),
        seq: 2,
        wait_for,
        deadline_ms,
        opened_ms: 6_000,
        token: token(),
        reason: "why".into(),
        ended_ms: (status != WaitStatus::Open).then_some(7_000),
        status,
    }
}

fn approval() -> WaitFor {
    WaitFor::Approval {
        args_digest: digest(0xb0),
        role: "finance".into(),
    }
}

fn wait_ended(status: WaitStatus) -> Op {
    Op::WaitEnded {
        run: run_id(),
        step: StepId::new("s2").unwrap(),
        status,
        at_ms: 7_000,
    }
}

fn wait_book() -> WaitBook {
    WaitBook {
        run: run_id(),
        waits: vec![
            wait(
                WaitFor::Timer,
                Some(9_000),
                WaitStatus::Approved {
                    approver: "ann".into(),
                    note: "ok".into(),
                },
            ),
            wait(approval(), Some(8_000), WaitStatus::Open),
        ],
        inbox: vec![signal()],
        signals_received: 4,
    }
}

fn limits() -> BudgetLimits {
    BudgetLimits {
        tokens_in: Some(100_000),
        tokens_out: None,
        cost_micros: Some(5_000_000),
        tool_calls: Some(40),
        wall_ms: Some(3_600_000),
    }
}

fn cost(base: u64) -> Cost {
    Cost {
        tokens_in: base,
        tokens_out: base + 1,
        cost_micros: base + 2,
        tool_calls: base + 3,
    }
}

fn effect_charge() -> Charge {
    Charge::Effect {
        step: StepId::new("s3").unwrap(),
    }
}

fn reservation() -> Reservation {
    Reservation {
        charge: effect_charge(),
        amount: cost(20),
        reserved_ms: 12_000,
        token: token(),
        attempt: 2,
        charged: vec![run_id(), RunId::new("p1").unwrap()],
    }
}

fn budget_book() -> BudgetBook {
    BudgetBook {
        run: run_id(),
        limits: Some(limits()),
        spent: cost(30),
        reserved: cost(20),
        open: vec![reservation()],
        ran_ms: 50_000,
        running_since_ms: Some(60_000),
    }
}

fn ops() -> Vec<(&'static str, Op)> {
    vec![
        ("op.run_created", Op::RunCreated { run: run() }),
        ("op.run_created.bare", Op::RunCreated { run: bare_run() }),
        (
            "op.run_transitioned",
            Op::RunTransitioned {
                run: run_id(),
                from: RunState::Running,
                to: RunState::WaitingHuman,
                version: 8,
                at_ms: 4_000,
                token: token(),
                reason: "why".into(),
            },
        ),
        (
            "op.run_transitioned.failed",
            Op::RunTransitioned {
                run: run_id(),
                from: RunState::WaitingTool,
                to: RunState::Failed,
                version: 9,
                at_ms: 4_100,
                token: token(),
                reason: "x".into(),
            },
        ),
        (
            "op.run_transitioned.cancelled",
            Op::RunTransitioned {
                run: run_id(),
                from: RunState::Paused,
                to: RunState::Cancelled,
                version: 10,
                at_ms: 4_200,
                token: token(),
                reason: "y".into(),
            },
        ),
        (
            "op.lease_acquired",
            Op::LeaseAcquired {
                run: run_id(),
                lease: lease(),
                version: 8,
                at_ms: 2_500,
            },
        ),
        ("op.lease_renewed", lease_renewed()),
        ("op.lease_released", lease_released()),
        (
            "op.effect_intended.act",
            Op::EffectIntended { entry: act_entry() },
        ),
        (
            "op.effect_intended.margin",
            Op::EffectIntended {
                entry: margin_entry(),
            },
        ),
        (
            "op.effect_intended.undo",
            Op::EffectIntended {
                entry: undo_entry(),
            },
        ),
        (
            "op.effect_resent",
            Op::EffectResent {
                key: act_key(),
                token: token(),
                at_ms: 11_000,
            },
        ),
        (
            "op.effect_settled.confirmed",
            settled(EffectStatus::Confirmed {
                receipt: vec![0xaa, 0xbb],
            }),
        ),
        (
            "op.effect_settled.failed",
            settled(EffectStatus::Failed {
                retryable: true,
                reason: "no".into(),
            }),
        ),
        (
            "op.effect_settled.unknown",
            settled(EffectStatus::Unknown {
                reason: "lost".into(),
            }),
        ),
        (
            "op.effect_settled.compensated",
            settled(EffectStatus::Compensated {
                receipt: vec![0xaa],
                compensation_receipt: vec![0xcc],
            }),
        ),
        (
            "op.effect_settled.confirmed_stored",
            settled(EffectStatus::ConfirmedStored {
                receipt: StoredReceipt {
                    digest: digest(0x61),
                    len_bytes: 2 << 20,
                },
            }),
        ),
        (
            "op.effect_settled.compensated_stored",
            settled(EffectStatus::CompensatedStored {
                receipt: Receipt::Stored(StoredReceipt {
                    digest: digest(0x61),
                    len_bytes: 2 << 20,
                }),
                compensation_receipt: Receipt::Inline(vec![0xcc]),
            }),
        ),
        (
            "op.blob_put",
            Op::BlobPut {
                digest: digest(0x60),
                bytes: vec![0xde, 0xad],
            },
        ),
        (
            "op.checkpoint_saved",
            Op::CheckpointSaved {
                meta: checkpoint_meta(),
            },
        ),
        (
            "op.decision_recorded",
            Op::DecisionRecorded {
                record: decision_record(),
            },
        ),
        (
            "op.wait_opened.approval",
            Op::WaitOpened {
                run: run_id(),
                wait: wait(approval(), Some(8_000), WaitStatus::Open),
            },
        ),
        (
            "op.wait_opened.signal",
            Op::WaitOpened {
                run: run_id(),
                wait: wait(
                    WaitFor::Signal {
                        name: "paid".into(),
                    },
                    None,
                    WaitStatus::Open,
                ),
            },
        ),
        (
            "op.wait_opened.timer",
            Op::WaitOpened {
                run: run_id(),
                wait: wait(WaitFor::Timer, Some(9_000), WaitStatus::Open),
            },
        ),
        (
            "op.wait_ended.approved",
            wait_ended(WaitStatus::Approved {
                approver: "ann".into(),
                note: "ok".into(),
            }),
        ),
        (
            "op.wait_ended.rejected",
            wait_ended(WaitStatus::Rejected {
                approver: "bob".into(),
                note: "no".into(),
            }),
        ),
        (
            "op.wait_ended.signalled",
            wait_ended(WaitStatus::Signalled { signal: signal() }),
        ),
        ("op.wait_ended.elapsed", wait_ended(WaitStatus::Elapsed)),
        (
            "op.wait_opened.child",
            Op::WaitOpened {
                run: run_id(),
                wait: wait(
                    WaitFor::Child {
                        run: RunId::new("r1:s2").unwrap(),
                    },
                    None,
                    WaitStatus::Open,
                ),
            },
        ),
        (
            "op.wait_ended.child_ended",
            wait_ended(WaitStatus::ChildEnded {
                state: RunState::Completed,
                checkpoint: Some(3),
            }),
        ),
        (
            "op.wait_ended.child_ended_bare",
            wait_ended(WaitStatus::ChildEnded {
                state: RunState::Cancelled,
                checkpoint: None,
            }),
        ),
        (
            "op.wait_opened.children",
            Op::WaitOpened {
                run: run_id(),
                wait: wait(
                    WaitFor::Children {
                        runs: vec![
                            RunId::new("r1:s2.1").unwrap(),
                            RunId::new("r1:s2.2").unwrap(),
                        ],
                        join: Join::First,
                    },
                    None,
                    WaitStatus::Open,
                ),
            },
        ),
        (
            "op.wait_ended.children_ended",
            wait_ended(WaitStatus::ChildrenEnded {
                ended: vec![
                    ChildEnd {
                        run: RunId::new("r1:s2.1").unwrap(),
                        state: RunState::Completed,
                        checkpoint: Some(3),
                    },
                    ChildEnd {
                        run: RunId::new("r1:s2.2").unwrap(),
                        state: RunState::Failed,
                        checkpoint: None,
                    },
                ],
            }),
        ),
        (
            "op.wait_opened.reply",
            Op::WaitOpened {
                run: run_id(),
                wait: wait(WaitFor::Reply { key: act_key() }, None, WaitStatus::Open),
            },
        ),
        (
            "op.wait_ended.replied",
            wait_ended(WaitStatus::Replied {
                status: EffectStatus::Confirmed {
                    receipt: vec![0xaa, 0xbb],
                },
            }),
        ),
        (
            "op.signal_received",
            Op::SignalReceived {
                run: run_id(),
                signal: signal(),
            },
        ),
        (
            "op.budget_set",
            Op::BudgetSet {
                run: run_id(),
                limits: limits(),
                by: "ops".into(),
                reason: "why".into(),
                at_ms: 13_000,
            },
        ),
        (
            "op.budget_reserved",
            Op::BudgetReserved {
                run: run_id(),
                reservation: reservation(),
            },
        ),
        (
            "op.budget_settled",
            Op::BudgetSettled {
                run: run_id(),
                charge: Charge::Decision { position: 7 },
                actual: cost(10),
                at_ms: 14_000,
                token: token(),
            },
        ),
        (
            "op.run_transitioned.compensating",
            Op::RunTransitioned {
                run: run_id(),
                from: RunState::Running,
                to: RunState::Compensating,
                version: 9,
                at_ms: 15_000,
                token: token(),
                reason: "z".into(),
            },
        ),
        (
            "op.saga_opened",
            Op::SagaOpened {
                run: run_id(),
                end: RunState::Cancelled,
                at_ms: 16_000,
                token: token(),
            },
        ),
        (
            "op.resource_acquired",
            Op::ResourceAcquired {
                resource: resource_id(),
                run: run_id(),
                token: FencingToken(4),
                expires_ms: 17_000,
                at_ms: 16_500,
            },
        ),
        (
            "op.resource_renewed",
            Op::ResourceRenewed {
                resource: resource_id(),
                run: run_id(),
                token: FencingToken(4),
                expires_ms: 18_000,
                at_ms: 17_500,
            },
        ),
        (
            "op.resource_released",
            Op::ResourceReleased {
                resource: resource_id(),
                run: run_id(),
                token: FencingToken(4),
                at_ms: 18_500,
            },
        ),
        (
            "op.run_pruned",
            Op::RunPruned {
                run: run_id(),
                at_ms: 20_000,
            },
        ),
        (
            "op.shared_set",
            Op::SharedSet {
                key: shared_key(),
                version: 2,
                value: Some(b"dnc".to_vec()),
                change: shared_change(2, Some(run_id())),
            },
        ),
        (
            "op.shared_set.cleared_by_operator",
            Op::SharedSet {
                key: shared_key(),
                version: 3,
                value: None,
                change: SharedChange {
                    value_digest: None,
                    ..shared_change(3, None)
                },
            },
        ),
        (
            "op.run_version_moved",
            Op::RunVersionMoved {
                run: run_id(),
                from: "shop@1".into(),
                to: "shop@2".into(),
                version: 9,
                at_ms: 21_000,
                token: FencingToken(5),
                operator: "ops-anna".into(),
                reason: "v2 rounds right".into(),
            },
        ),
        (
            "op.run_retried",
            Op::RunRetried {
                run: run_id(),
                version: 10,
                at_ms: 22_000,
                token: FencingToken(5),
                reopened: vec![EffectKey::new(run_id(), StepId::new("ship").unwrap(), 2).unwrap()],
                restored: Some(3),
                operator: "ops-anna".into(),
                reason: "restocked".into(),
            },
        ),
        (
            "op.run_forked",
            Op::RunForked {
                run: RunId::new("order-1b").unwrap(),
                from: run_id(),
                checkpoint: Some(2),
                at_ms: 23_000,
                operator: "ops-anna".into(),
                reason: "a second order".into(),
            },
        ),
    ]
}

fn resource_id() -> ResourceId {
    ResourceId::new("customer:42").unwrap()
}

fn shared_key() -> SharedKeyId {
    SharedKeyId::new("dnc:c42").unwrap()
}

fn shared_change(version: u64, run: Option<RunId>) -> SharedChange {
    let token = run.as_ref().map(|_| token());
    SharedChange {
        version,
        at_ms: 19_000 + version,
        by: run.as_ref().map_or("ops".to_string(), |r| r.to_string()),
        run,
        token,
        value_digest: Some(digest(0xd0)),
        why: "w".into(),
    }
}

fn resource_book() -> ResourceBook {
    ResourceBook {
        resource: resource_id(),
        hold: Some(ResourceHold {
            run: run_id(),
            token: FencingToken(4),
            expires_ms: 17_000,
            acquired_ms: 16_500,
        }),
        next_token: FencingToken(5),
    }
}

fn shared_entry() -> SharedEntry {
    SharedEntry {
        key: shared_key(),
        value: Some(b"dnc".to_vec()),
        version: 2,
        changes: vec![shared_change(1, None), shared_change(2, Some(run_id()))],
    }
}

fn saga_book() -> SagaBook {
    SagaBook {
        run: run_id(),
        steps: vec![StepId::new("s1").unwrap(), StepId::new("s2").unwrap()],
        end: Some(RunState::Failed),
    }
}

fn audit(seq: u64, token: Option<FencingToken>, what: AuditWhat) -> AuditEntry {
    AuditEntry {
        seq,
        at_ms: 15_000,
        token,
        what,
        why: "y".into(),
    }
}

/// One audit row per variant of what it records.
fn audit_entries() -> Vec<(&'static str, AuditEntry)> {
    let tok = Some(token());
    vec![
        (
            "row.audit.created",
            audit(
                1,
                None,
                AuditWhat::Created {
                    agent_version: "a1".into(),
                    input: digest(0x10),
                },
            ),
        ),
        (
            "row.audit.transitioned",
            audit(
                2,
                tok,
                AuditWhat::Transitioned {
                    from: RunState::Running,
                    to: RunState::Completed,
                },
            ),
        ),
        (
            "row.audit.lease_acquired",
            audit(
                3,
                tok,
                AuditWhat::LeaseAcquired {
                    worker: WorkerId::new("w1").unwrap(),
                    expires_ms: 3_000,
                },
            ),
        ),
        (
            "row.audit.lease_renewed",
            audit(4, tok, AuditWhat::LeaseRenewed { expires_ms: 6_000 }),
        ),
        (
            "row.audit.lease_released",
            audit(5, tok, AuditWhat::LeaseReleased),
        ),
        (
            "row.audit.intended",
            audit(
                6,
                tok,
                AuditWhat::Intended {
                    key: act_key(),
                    tool: "pay".into(),
                    args: digest(0x30),
                },
            ),
        ),
        (
            "row.audit.resent",
            audit(7, tok, AuditWhat::Resent { key: undo_key() }),
        ),
        (
            "row.audit.settled",
            audit(
                8,
                tok,
                AuditWhat::Settled {
                    key: act_key(),
                    status: Cow::Borrowed("confirmed"),
                },
            ),
        ),
        (
            "row.audit.checkpoint_saved",
            audit(
                9,
                tok,
                AuditWhat::CheckpointSaved {
                    version: 2,
                    schema_version: 6,
                    parts: 2,
                },
            ),
        ),
        (
            "row.audit.decision_recorded",
            audit(
                10,
                tok,
                AuditWhat::DecisionRecorded {
                    position: 5,
                    input: digest(0x90),
                },
            ),
        ),
        (
            "row.audit.wait_opened",
            audit(
                11,
                tok,
                AuditWhat::WaitOpened {
                    step: StepId::new("s2").unwrap(),
                    wait_for: approval(),
                    deadline_ms: Some(8_000),
                },
            ),
        ),
        (
            "row.audit.wait_ended",
            audit(
                12,
                None,
                AuditWhat::WaitEnded {
                    step: StepId::new("s2").unwrap(),
                    status: Cow::Borrowed("approved"),
                },
            ),
        ),
        (
            "row.audit.signal_received",
            audit(
                13,
                None,
                AuditWhat::SignalReceived {
                    seq: 4,
                    name: "paid".into(),
                    sender: "psp".into(),
                },
            ),
        ),
        (
            "row.audit.budget_set",
            audit(
                14,
                None,
                AuditWhat::BudgetSet {
                    limits: limits(),
                    by: "ops".into(),
                },
            ),
        ),
        (
            "row.audit.reserved",
            audit(
                15,
                tok,
                AuditWhat::Reserved {
                    charge: effect_charge(),
                    amount: cost(20),
                },
            ),
        ),
        (
            "row.audit.charge_settled",
            audit(
                16,
                tok,
                AuditWhat::ChargeSettled {
                    charge: Charge::Decision { position: 7 },
                    actual: cost(10),
                },
            ),
        ),
        (
            "row.audit.saga_opened",
            audit(
                17,
                tok,
                AuditWhat::SagaOpened {
                    end: RunState::Failed,
                },
            ),
        ),
        (
            "row.audit.resource_acquired",
            audit(
                18,
                tok,
                AuditWhat::ResourceAcquired {
                    resource: resource_id(),
                    expires_ms: 17_000,
                },
            ),
        ),
        (
            "row.audit.resource_renewed",
            audit(
                19,
                tok,
                AuditWhat::ResourceRenewed {
                    resource: resource_id(),
                    expires_ms: 18_000,
                },
            ),
        ),
        (
            "row.audit.resource_released",
            audit(
                20,
                tok,
                AuditWhat::ResourceReleased {
                    resource: resource_id(),
                },
            ),
        ),
        (
            "row.audit.shared_set",
            audit(
                21,
                tok,
                AuditWhat::SharedSet {
                    key: shared_key(),
                    version: 2,
                    value: Some(digest(0xd0)),
                },
            ),
        ),
        (
            "row.audit.version_moved",
            audit(
                22,
                tok,
                AuditWhat::VersionMoved {
                    from: "shop@1".into(),
                    to: "shop@2".into(),
                    operator: "ops-anna".into(),
                },
            ),
        ),
        (
            "row.audit.retried",
            audit(
                23,
                tok,
                AuditWhat::Retried {
                    reopened: vec![
                        EffectKey::new(run_id(), StepId::new("ship").unwrap(), 2).unwrap(),
                    ],
                    restored: Some(3),
                    operator: "ops-anna".into(),
                },
            ),
        ),
        (
            "row.audit.forked",
            audit(
                24,
                None,
                AuditWhat::Forked {
                    from: run_id(),
                    checkpoint: Some(2),
                    operator: "ops-anna".into(),
                },
            ),
        ),
    ]
}

// ---------------------------------------------------------------- cases

/// Checks that bytes decode to a fixture's value; `Err` says what they
/// gave instead.
type DecodeCheck = Box<dyn Fn(&[u8]) -> Result<(), String>>;

/// One fixture: its name, the bytes its value encodes to now, and a check
/// that given bytes decode to its value.
struct Case {
    name: String,
    bytes: Vec<u8>,
    decodes_to_value: DecodeCheck,
}

fn case<T: PartialEq + Debug + 'static>(
    name: &str,
    value: T,
    encode: impl Fn(&T) -> Vec<u8>,
    decode: impl Fn(&[u8]) -> Result<T, String> + 'static,
) -> Case {
    let bytes = encode(&value);
    Case {
        name: name.to_string(),
        bytes,
        decodes_to_value: Box::new(move |bytes| match decode(bytes) {
            Ok(decoded) if decoded == value => Ok(()),
            Ok(decoded) => Err(format!("give {decoded:?}, not {value:?}")),
            Err(e) => Err(format!("do not decode: {e}")),
        }),
    }
}

/// A row fixture of `table`. The row codec is generic over serde's traits,
/// which this crate does not depend on, so each call names its row type
/// through its value instead of through a generic bound.
macro_rules! row_case {
    ($name:expr, $table:expr, $value:expr) => {
        case(
            $name,
            $value,
            |v| encode_row($table, v),
            |bytes| decode_row($table, bytes),
        )
    };
}

fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = ops()
        .into_iter()
        .map(|(name, op)| {
            case(name, op, Op::encode, |bytes| {
                Op::decode(bytes).map_err(|e| e.to_string())
            })
        })
        .collect();
    let payload = |name: &str, ops: Vec<Op>| {
        case(
            name,
            ops,
            |ops| encode_ops(ops),
            |bytes| decode_ops(bytes).map_err(|e| e.to_string()),
        )
    };
    cases.push(payload(
        "payload.two_ops",
        vec![lease_renewed(), lease_released()],
    ));
    cases.push(payload("payload.no_ops", Vec::new()));
    cases.push(row_case!("row.run", RowTable::Run, run()));
    cases.push(row_case!("row.run.bare", RowTable::Run, bare_run()));
    cases.push(row_case!("row.effect", RowTable::Effect, act_entry()));
    cases.push(row_case!(
        "row.checkpoint",
        RowTable::Checkpoint,
        checkpoint_meta()
    ));
    cases.push(row_case!(
        "row.decision",
        RowTable::Decision,
        decision_record()
    ));
    let entries = audit_entries();
    // Since schema 12 a checkpoint writes a run's new entries as one row
    // (table 12); the one-entry rows above (table 5) are what older stores
    // hold, and are still read.
    let chunk: Vec<AuditEntry> = entries.iter().take(2).map(|(_, e)| e.clone()).collect();
    for (name, entry) in entries {
        cases.push(row_case!(name, RowTable::Audit, entry));
    }
    cases.push(case(
        "row.audit_chunk",
        chunk,
        |entries| encode_audit_row(entries),
        |bytes| decode_audit_row(bytes, 2),
    ));
    cases.push(row_case!("row.waits", RowTable::Waits, wait_book()));
    cases.push(row_case!("row.budgets", RowTable::Budgets, budget_book()));
    cases.push(row_case!("row.sagas", RowTable::Sagas, saga_book()));
    cases.push(row_case!(
        "row.resources",
        RowTable::Resources,
        resource_book()
    ));
    cases.push(row_case!("row.shared", RowTable::Shared, shared_entry()));
    cases.push(row_case!(
        "row.blob_refs",
        RowTable::BlobRefs,
        BlobRefs {
            run: run_id(),
            digests: vec![digest(0x10), digest(0x30)],
        }
    ));
    cases
}

// ---------------------------------------------------------------- checking

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The committed table, by name; a malformed line is a failure.
fn committed() -> BTreeMap<&'static str, &'static str> {
    let mut table = BTreeMap::new();
    for line in GOLDEN.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let (Some(name), Some(hex), None) = (words.next(), words.next(), words.next()) else {
            panic!("a golden line is `name hex`, not {line:?}");
        };
        assert!(
            table.insert(name, hex).is_none(),
            "fixture {name} is committed twice"
        );
    }
    table
}

/// The table as it should read for `cases`.
fn table_text(cases: &[Case]) -> String {
    let width = cases.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut text = String::from("\n");
    for case in cases {
        text.push_str(&format!("{:width$}  {}\n", case.name, hex(&case.bytes)));
    }
    text
}

/// What is wrong with `case` against its committed hex, if anything.
fn problems_of(case: &Case, committed: Option<&str>) -> Vec<String> {
    let Some(committed) = committed else {
        return vec![format!(
            "{}: no committed bytes\n    now:       {}",
            case.name,
            hex(&case.bytes)
        )];
    };
    let mut problems = Vec::new();
    if committed != hex(&case.bytes) {
        problems.push(format!(
            "{}: the encoding changed\n    committed: {committed}\n    now:       {}",
            case.name,
            hex(&case.bytes)
        ));
    }
    match unhex(committed) {
        None => problems.push(format!("{}: the committed hex is malformed", case.name)),
        Some(bytes) => {
            if let Err(e) = (case.decodes_to_value)(&bytes) {
                problems.push(format!("{}: the committed bytes {e}", case.name));
            }
        }
    }
    problems
}

/// Rewrites the `GOLDEN` literal of this file with `text`.
fn bless(text: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden_bytes_pin_the_formats.rs");
    let source = std::fs::read_to_string(&path).unwrap();
    let start_marker = "const GOLDEN: &str = \"";
    let start = source.find(start_marker).unwrap() + start_marker.len();
    let end = start + source[start..].find("\";").unwrap();
    let blessed = format!("{}{text}{}", &source[..start], &source[end..]);
    std::fs::write(&path, blessed).unwrap();
    eprintln!("blessed {}: review the diff", path.display());
}

#[test]
fn every_encoding_equals_its_committed_bytes_and_decodes_back() {
    let cases = cases();
    let committed = committed();
    let mut problems = Vec::new();
    for case in &cases {
        problems.extend(problems_of(
            case,
            committed.get(case.name.as_str()).copied(),
        ));
    }
    for name in committed.keys() {
        if !cases.iter().any(|c| c.name == *name) {
            problems.push(format!("{name}: committed, but no fixture has this name"));
        }
    }
    if problems.is_empty() {
        return;
    }
    if std::env::var("ACTUM_BLESS_GOLDEN").as_deref() == Ok("1") {
        eprintln!("{}", problems.join("\n"));
        bless(&table_text(&cases));
        return;
    }
    panic!(
        "{} golden fixture problem(s); an encoding on disk changed. If that is deliberate, \
         introduce a new payload version (docs/FORMAT.md) and bless with \
         ACTUM_BLESS_GOLDEN=1.\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The checkpoint metadata of payload versions 1 to 9 and state schemas 1 to
/// 9 (layout 1, every part whole), as the table above held them before
/// version 10: still decoded, as the same metadata with no chunks.
const LAYOUT_1_OP: &str = "0902723102060204706c616e505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f02046d736773707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8fac02c86503";
const LAYOUT_1_ROW: &str = "1ce9ce6202723102060204706c616e505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f02046d736773707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8fac02c86503";

#[test]
fn checkpoint_metadata_of_layout_1_still_decodes_from_old_payloads_and_rows() {
    let mut whole = checkpoint_meta_in_blobs();
    whole.parts[1].chunks.clear();
    let op = unhex(LAYOUT_1_OP).unwrap();
    let expected = Op::CheckpointSaved {
        meta: whole.clone(),
    };
    assert_eq!(Op::decode(&op).unwrap(), expected);
    for version in 1..=9u8 {
        let mut payload = vec![version, 1];
        payload.extend_from_slice(&op);
        assert_eq!(
            decode_ops(&payload).unwrap(),
            std::slice::from_ref(&expected)
        );
    }
    let row = unhex(LAYOUT_1_ROW).unwrap();
    assert_eq!(
        decode_row::<CheckpointMeta>(RowTable::Checkpoint, &row),
        Ok(whole)
    );
}

/// The checkpoint metadata of payload version 10 and state schema 10 (layout
/// 2: chunked parts, each chunked part's digest naming its whole bytes), as
/// the table above held them before version 11: still decoded, as the same
/// metadata.
const LAYOUT_2_OP: &str = "09000202723102060204706c616e505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f0200046d736773707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8fac02027172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f90c80172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f909164c86503";
const LAYOUT_2_ROW: &str = "c29e20f4000202723102060204706c616e505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f0200046d736773707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8fac02027172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f90c80172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f909164c86503";

#[test]
fn checkpoint_metadata_of_layout_2_still_decodes_from_old_payloads_and_rows() {
    let meta = checkpoint_meta_in_blobs();
    let op = unhex(LAYOUT_2_OP).unwrap();
    // The marker, then layout byte 2.
    assert_eq!(op[..3], [9, 0, 2]);
    let expected = Op::CheckpointSaved { meta: meta.clone() };
    assert_eq!(Op::decode(&op).unwrap(), expected);
    let payload = [&[10u8, 1][..], &op].concat();
    assert_eq!(
        decode_ops(&payload).unwrap(),
        std::slice::from_ref(&expected)
    );
    let row = unhex(LAYOUT_2_ROW).unwrap();
    assert_eq!(
        decode_row::<CheckpointMeta>(RowTable::Checkpoint, &row),
        Ok(meta)
    );
}

/// The checkpoint metadata of payload version 11 and state schemas 11 to 13
/// (layout 3: parts in blobs, a chunked part's digest naming its chunk
/// list), as the table above held them before version 12: still decoded, as
/// the same metadata with no part held inline.
const LAYOUT_3_OP: &str = "09000302723102060204706c616e505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f0200046d736773707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8fac02027172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f90c80172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f909164c86503";
const LAYOUT_3_ROW: &str = "86507de9000302723102060204706c616e505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f0200046d736773707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8fac02027172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f90c80172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f909164c86503";

#[test]
fn checkpoint_metadata_of_layout_3_still_decodes_from_old_payloads_and_rows() {
    let meta = checkpoint_meta_in_blobs();
    let op = unhex(LAYOUT_3_OP).unwrap();
    // The marker, then layout byte 3.
    assert_eq!(op[..3], [9, 0, 3]);
    let expected = Op::CheckpointSaved { meta: meta.clone() };
    assert_eq!(Op::decode(&op).unwrap(), expected);
    let payload = [&[11u8, 1][..], &op].concat();
    assert_eq!(
        decode_ops(&payload).unwrap(),
        std::slice::from_ref(&expected)
    );
    let row = unhex(LAYOUT_3_ROW).unwrap();
    assert_eq!(
        decode_row::<CheckpointMeta>(RowTable::Checkpoint, &row),
        Ok(meta)
    );
}

// ---------------------------------------------------------------- coverage

/// The variant index postcard writes for `op`. Exhaustive, so a new variant
/// does not compile until it has a fixture here.
fn op_index(op: &Op) -> u8 {
    match op {
        Op::RunCreated { .. } => 0,
        Op::RunTransitioned { .. } => 1,
        Op::LeaseAcquired { .. } => 2,
        Op::LeaseRenewed { .. } => 3,
        Op::LeaseReleased { .. } => 4,
        Op::EffectIntended { .. } => 5,
        Op::EffectResent { .. } => 6,
        Op::EffectSettled { .. } => 7,
        Op::BlobPut { .. } => 8,
        Op::CheckpointSaved { .. } => 9,
        Op::DecisionRecorded { .. } => 10,
        Op::WaitOpened { .. } => 11,
        Op::WaitEnded { .. } => 12,
        Op::SignalReceived { .. } => 13,
        Op::BudgetSet { .. } => 14,
        Op::BudgetReserved { .. } => 15,
        Op::BudgetSettled { .. } => 16,
        Op::SagaOpened { .. } => 17,
        Op::ResourceAcquired { .. } => 18,
        Op::ResourceRenewed { .. } => 19,
        Op::ResourceReleased { .. } => 20,
        Op::SharedSet { .. } => 21,
        Op::RunPruned { .. } => 22,
        Op::RunVersionMoved { .. } => 23,
        Op::RunRetried { .. } => 24,
        Op::RunForked { .. } => 25,
    }
}

fn wait_status_index(status: &WaitStatus) -> u8 {
    match status {
        WaitStatus::Open => 0,
        WaitStatus::Approved { .. } => 1,
        WaitStatus::Rejected { .. } => 2,
        WaitStatus::Signalled { .. } => 3,
        WaitStatus::Elapsed => 4,
        WaitStatus::ChildEnded { .. } => 5,
        WaitStatus::Replied { .. } => 6,
        WaitStatus::ChildrenEnded { .. } => 7,
    }
}

fn wait_for_index(wait_for: &WaitFor) -> u8 {
    match wait_for {
        WaitFor::Approval { .. } => 0,
        WaitFor::Signal { .. } => 1,
        WaitFor::Timer => 2,
        WaitFor::Child { .. } => 3,
        WaitFor::Reply { .. } => 4,
        WaitFor::Children { .. } => 5,
    }
}

fn status_index(status: &EffectStatus) -> u8 {
    match status {
        EffectStatus::Intended => 0,
        EffectStatus::Confirmed { .. } => 1,
        EffectStatus::Failed { .. } => 2,
        EffectStatus::Unknown { .. } => 3,
        EffectStatus::Compensated { .. } => 4,
        EffectStatus::ConfirmedStored { .. } => 5,
        EffectStatus::CompensatedStored { .. } => 6,
    }
}

fn class_index(class: &ToolClass) -> u8 {
    match class {
        ToolClass::Idempotent { .. } => 0,
        ToolClass::Queryable => 1,
        ToolClass::NotIdempotent => 2,
        ToolClass::IdempotentWithMargin { .. } => 3,
    }
}

fn audit_index(what: &AuditWhat) -> u8 {
    match what {
        AuditWhat::Created { .. } => 0,
        AuditWhat::Transitioned { .. } => 1,
        AuditWhat::LeaseAcquired { .. } => 2,
        AuditWhat::LeaseRenewed { .. } => 3,
        AuditWhat::LeaseReleased => 4,
        AuditWhat::Intended { .. } => 5,
        AuditWhat::Resent { .. } => 6,
        AuditWhat::Settled { .. } => 7,
        AuditWhat::CheckpointSaved { .. } => 8,
        AuditWhat::DecisionRecorded { .. } => 9,
        AuditWhat::WaitOpened { .. } => 10,
        AuditWhat::WaitEnded { .. } => 11,
        AuditWhat::SignalReceived { .. } => 12,
        AuditWhat::BudgetSet { .. } => 13,
        AuditWhat::Reserved { .. } => 14,
        AuditWhat::ChargeSettled { .. } => 15,
        AuditWhat::SagaOpened { .. } => 16,
        AuditWhat::ResourceAcquired { .. } => 17,
        AuditWhat::ResourceRenewed { .. } => 18,
        AuditWhat::ResourceReleased { .. } => 19,
        AuditWhat::SharedSet { .. } => 20,
        AuditWhat::VersionMoved { .. } => 21,
        AuditWhat::Retried { .. } => 22,
        AuditWhat::Forked { .. } => 23,
    }
}

fn charge_index(charge: &Charge) -> u8 {
    match charge {
        Charge::Decision { .. } => 0,
        Charge::Effect { .. } => 1,
    }
}

fn state_index(state: RunState) -> u8 {
    match state {
        RunState::Pending => 0,
        RunState::Running => 1,
        RunState::WaitingTool => 2,
        RunState::WaitingHuman => 3,
        RunState::Paused => 4,
        RunState::Completed => 5,
        RunState::Failed => 6,
        RunState::Cancelled => 7,
        RunState::Compensating => 8,
    }
}

fn assert_all<T: Ord + Copy + Debug>(seen: impl IntoIterator<Item = T>, all: &[T], what: &str) {
    let seen: std::collections::BTreeSet<T> = seen.into_iter().collect();
    let all: std::collections::BTreeSet<T> = all.iter().copied().collect();
    assert_eq!(seen, all, "the fixtures cover these {what} variants");
}

#[test]
fn every_op_variant_starts_with_its_index_and_has_a_fixture() {
    let ops = ops();
    for (name, op) in &ops {
        assert_eq!(op.encode()[0], op_index(op), "{name}");
    }
    assert_all(
        ops.iter().map(|(_, op)| op_index(op)),
        &[
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
            24, 25,
        ],
        "op",
    );
}

#[test]
fn every_variant_of_the_enums_inside_ops_and_rows_has_a_fixture() {
    let ops = ops();
    let entries: Vec<EffectEntry> = ops
        .iter()
        .filter_map(|(_, op)| match op {
            Op::EffectIntended { entry } => Some(entry.clone()),
            _ => None,
        })
        .collect();
    let statuses = ops.iter().filter_map(|(_, op)| match op {
        Op::EffectSettled { status, .. } => Some(status_index(status)),
        Op::EffectIntended { entry } => Some(status_index(&entry.status)),
        _ => None,
    });
    assert_all(statuses, &[0, 1, 2, 3, 4, 5, 6], "effect status");
    let receipts = ops.iter().filter_map(|(_, op)| match op {
        Op::EffectSettled {
            status:
                EffectStatus::CompensatedStored {
                    receipt,
                    compensation_receipt,
                },
            ..
        } => Some([receipt, compensation_receipt].map(|r| match r {
            Receipt::Inline(_) => 0u8,
            Receipt::Stored(_) => 1,
        })),
        _ => None,
    });
    assert_all(receipts.flatten(), &[0, 1], "receipt");
    let classes = entries.iter().flat_map(|entry| {
        let compensation = entry.compensation.as_ref().map(|c| class_index(&c.class));
        std::iter::once(class_index(&entry.tool_class)).chain(compensation)
    });
    assert_all(classes, &[0, 1, 2, 3], "tool class");
    let kinds = entries.iter().map(|entry| entry.key.kind());
    assert_all(kinds, &[EffectKind::Act, EffectKind::Undo], "effect kind");
    let audits = audit_entries();
    let whats = audits.iter().map(|(_, entry)| audit_index(&entry.what));
    assert_all(
        whats,
        &[
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
        ],
        "audit",
    );
    let charges = ops.iter().filter_map(|(_, op)| match op {
        Op::BudgetReserved { reservation, .. } => Some(charge_index(&reservation.charge)),
        Op::BudgetSettled { charge, .. } => Some(charge_index(charge)),
        _ => None,
    });
    assert_all(charges, &[0, 1], "charge");
    let wait_statuses = ops.iter().filter_map(|(_, op)| match op {
        Op::WaitOpened { wait, .. } => Some(wait_status_index(&wait.status)),
        Op::WaitEnded { status, .. } => Some(wait_status_index(status)),
        _ => None,
    });
    assert_all(wait_statuses, &[0, 1, 2, 3, 4, 5, 6, 7], "wait status");
    let wait_fors = ops.iter().filter_map(|(_, op)| match op {
        Op::WaitOpened { wait, .. } => Some(wait_for_index(&wait.wait_for)),
        _ => None,
    });
    assert_all(wait_fors, &[0, 1, 2, 3, 4, 5], "wait for");
    let mut states = Vec::new();
    for (_, op) in &ops {
        match op {
            Op::RunCreated { run } => states.push(run.state),
            Op::RunTransitioned { from, to, .. } => states.extend([*from, *to]),
            _ => {}
        }
    }
    for (_, entry) in &audits {
        if let AuditWhat::Transitioned { from, to } = entry.what {
            states.extend([from, to]);
        }
    }
    let all: Vec<u8> = RunState::ALL.into_iter().map(state_index).collect();
    assert_eq!(
        all,
        [0, 1, 2, 3, 4, 5, 6, 7, 8],
        "RunState::ALL is in index order"
    );
    assert_all(states.into_iter().map(state_index), &all, "run state");
}

#[test]
fn a_payload_is_the_version_byte_then_the_op_list() {
    let ops = vec![lease_renewed(), lease_released()];
    let payload = encode_ops(&ops);
    assert_eq!(payload[0], PAYLOAD_VERSION);
    assert_eq!(payload[1], 2, "the list's length, a varint");
    assert_eq!(payload[2..], [ops[0].encode(), ops[1].encode()].concat());
}

/// Versions 2 to 8 only appended variants, so the payload of a record of
/// an older version (the bytes `payload.two_ops` had when those versions
/// were written) still decodes to the same ops.
#[test]
fn version_1_to_7_payloads_still_decode() {
    let v1 = unhex("01020302723103f02e09882704027231030ad836").unwrap();
    let v2 = unhex("02020302723103f02e09882704027231030ad836").unwrap();
    let v3 = unhex("03020302723103f02e09882704027231030ad836").unwrap();
    let v4 = unhex("04020302723103f02e09882704027231030ad836").unwrap();
    let v5 = unhex("05020302723103f02e09882704027231030ad836").unwrap();
    let v6 = unhex("06020302723103f02e09882704027231030ad836").unwrap();
    let v7 = unhex("07020302723103f02e09882704027231030ad836").unwrap();
    assert_eq!(
        (v1[0], v2[0], v3[0], v4[0], v5[0], v6[0], v7[0]),
        (1, 2, 3, 4, 5, 6, 7)
    );
    for old in [&v1, &v2, &v3, &v4, &v5, &v6, &v7] {
        assert_eq!(
            decode_ops(old).unwrap(),
            vec![lease_renewed(), lease_released()]
        );
    }
    let mut now = v1.clone();
    now[0] = PAYLOAD_VERSION;
    assert_eq!(encode_ops(&[lease_renewed(), lease_released()]), now);
}

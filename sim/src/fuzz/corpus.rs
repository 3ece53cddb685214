//! The seed corpus: a handful of meaningful inputs per fuzz target, built
//! from the real encoders so they stay valid as the formats evolve.
//!
//! `tests/tests/fuzz_corpus_replay.rs` checks that every input listed here
//! is committed under `fuzz/corpus/<target>/seed-<name>` (and writes the
//! missing ones when `ACTUM_WRITE_FUZZ_CORPUS=1` is set).
//!
//! **Invariant:** every seed input passes its target's entry function.

use actum::books::{
    BudgetLimits, Charge, ChildEnd, Cost, Digest, EffectKey, FencingToken, Join, Lease, Op,
    Reservation, ResourceId, RunId, RunState, SharedChange, SharedKeyId, SignalRecord, StepId,
    WaitFor, WaitRecord, WaitStatus, WorkerId, digest_of, encode_ops,
};
use actum::manifest::{self, COPY_SLOT_BYTES, Manifest};
use actum::wal::format::{self, SegmentHeader};
use actum::{DatabaseId, Lsn, SegmentId};

/// One seed input of one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedInput {
    /// The fuzz target it belongs to.
    pub target: &'static str,
    /// Its file name under `fuzz/corpus/<target>/`.
    pub file_name: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Every seed input, target by target.
pub fn seed_inputs() -> Vec<SeedInput> {
    let mut out = Vec::new();
    let mut add = |target: &'static str, name: &str, bytes: Vec<u8>| {
        out.push(SeedInput {
            target,
            file_name: format!("seed-{name}"),
            bytes,
        });
    };
    for (name, bytes) in wal_record_inputs() {
        add("wal_record", name, bytes);
    }
    for (name, bytes) in manifest_inputs() {
        add("manifest_copy", name, bytes);
    }
    for (name, bytes) in op_inputs() {
        add("ops", name, bytes);
    }
    for (name, bytes) in recover_image_inputs() {
        add("recover_image", name, bytes);
    }
    for (name, bytes) in campaign_inputs() {
        add("campaign", name, bytes);
    }
    for (name, bytes) in agents_inputs() {
        add("agents", name, bytes);
    }
    for (name, bytes) in state_store_inputs() {
        add("state_store", name, bytes);
    }
    out
}

/// `wal_record` input: seed, mode, flip mask, body.
fn wal_input(seed: u32, mode: u8, body: &[u8]) -> Vec<u8> {
    let mut out = seed.to_le_bytes().to_vec();
    out.extend_from_slice(&[mode, 0x5a]);
    out.extend_from_slice(body);
    out
}

fn wal_record_inputs() -> Vec<(&'static str, Vec<u8>)> {
    let seed = format::record_seed(DatabaseId(1), SegmentId(1));
    let record = |lsn: u64, ack: u64, more: bool, payload: &[u8]| {
        let mut out = Vec::new();
        let meta = format::RecordMeta {
            lsn: Lsn(lsn),
            ack: Lsn(ack),
            epoch: 1,
            more,
            group_end: !more,
        };
        format::encode_record(&mut out, seed, meta, payload);
        out
    };
    let long: Vec<u8> = (0..=255u8).collect();
    let header = SegmentHeader {
        database: DatabaseId(1),
        segment: SegmentId(1),
        first_lsn: Lsn(1),
    };
    let mut built = Vec::new();
    built.extend_from_slice(&9u64.to_le_bytes());
    built.extend_from_slice(&4u64.to_le_bytes());
    built.extend_from_slice(&2u64.to_le_bytes());
    built.push(1);
    built.extend_from_slice(b"built payload");
    vec![
        (
            "record-more",
            wal_input(seed, 0, &record(5, 3, true, b"hello")),
        ),
        (
            "record-last",
            wal_input(seed, 0, &record(6, 5, false, &long)),
        ),
        (
            "record-empty",
            wal_input(seed, 0, &record(1, 0, false, b"")),
        ),
        ("record-zeros", wal_input(seed, 0, &[0u8; 48])),
        ("segment-header", wal_input(seed, 0, &header.encode()[..64])),
        ("build", wal_input(seed, 1, &built)),
    ]
}

fn manifest_inputs() -> Vec<(&'static str, Vec<u8>)> {
    let fresh = Manifest::new(DatabaseId(7), "state.redb");
    let mut later = fresh.next().next();
    later.applied_lsn = Lsn(1000);
    later.first_live_segment = SegmentId(3);
    later.clean_shutdown_lsn = Some(Lsn(1200));
    let mut slot = manifest::encode(&later);
    slot.resize(COPY_SLOT_BYTES, 0);
    vec![
        ("fresh", manifest::encode(&fresh)),
        ("clean-shutdown", manifest::encode(&later)),
        ("slot-padded", slot),
    ]
}

fn op_inputs() -> Vec<(&'static str, Vec<u8>)> {
    let run = RunId::new("run-1").expect("a valid run name");
    let key = EffectKey::new(
        run.clone(),
        StepId::new("step-1").expect("a valid step name"),
        1,
    )
    .expect("a valid effect key");
    let transitioned = Op::RunTransitioned {
        run: run.clone(),
        from: RunState::Pending,
        to: RunState::Running,
        version: 2,
        at_ms: 1_700_000_000_000,
        token: FencingToken(1),
        reason: "started".to_string(),
    };
    let acquired = Op::LeaseAcquired {
        run: run.clone(),
        lease: Lease {
            worker: WorkerId::new("worker-a").expect("a valid worker name"),
            token: FencingToken(3),
            expires_ms: 1_700_000_030_000,
        },
        version: 3,
        at_ms: 1_700_000_000_500,
    };
    let reply_wait = Op::WaitOpened {
        run: RunId::new("run-1").expect("a valid run name"),
        wait: WaitRecord {
            step: key.step().clone(),
            seq: 3,
            wait_for: WaitFor::Reply { key: key.clone() },
            deadline_ms: None,
            opened_ms: 1_700_000_008_000,
            token: FencingToken(3),
            reason: "the screening answers by webhook".to_string(),
            status: WaitStatus::Open,
            ended_ms: None,
        },
    };
    let replied = Op::WaitEnded {
        run: RunId::new("run-1").expect("a valid run name"),
        step: key.step().clone(),
        status: WaitStatus::Replied {
            status: actum::books::EffectStatus::Confirmed {
                receipt: b"clear".to_vec(),
            },
        },
        at_ms: 1_700_000_009_000,
    };
    // A receipt larger than the ledger keeps inline: its blob, then the
    // status naming it by digest, in one record (payload version 9); and
    // the act undone with it.
    let large: Vec<u8> = (0..actum::books::RECEIPT_INLINE_BYTES_MAX + 77)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let stored = actum::books::StoredReceipt {
        digest: digest_of(&large),
        len_bytes: large.len() as u64,
    };
    let receipt_stored = encode_ops(&[
        Op::BlobPut {
            digest: stored.digest,
            bytes: large,
        },
        Op::EffectSettled {
            key: key.clone(),
            status: actum::books::EffectStatus::ConfirmedStored { receipt: stored },
            at_ms: 1_700_000_000_800,
            token: FencingToken(3),
            note: String::new(),
        },
    ]);
    let receipt_compensated = Op::EffectSettled {
        key: key.clone(),
        status: actum::books::EffectStatus::CompensatedStored {
            receipt: actum::books::Receipt::Stored(stored),
            compensation_receipt: actum::books::Receipt::Inline(b"refund 7".to_vec()),
        },
        at_ms: 1_700_000_000_900,
        token: FencingToken(3),
        note: "undone by run-1/step-1/undo/1".to_string(),
    };
    let resent = Op::EffectResent {
        key,
        token: FencingToken(3),
        at_ms: 1_700_000_001_000,
    };
    let blob = Op::BlobPut {
        digest: Digest([0xab; 32]),
        bytes: b"checkpoint part".to_vec(),
    };
    let released = Op::LeaseReleased {
        run,
        token: FencingToken(3),
        version: 4,
        at_ms: 1_700_000_002_000,
    };
    let signal = SignalRecord {
        seq: 1,
        name: "paid".to_string(),
        payload: b"psp ref 41".to_vec(),
        sender: "psp".to_string(),
        sent_ms: 1_700_000_003_000,
    };
    let wait_step = StepId::new("await-payment").expect("a valid step name");
    let opened = Op::WaitOpened {
        run: RunId::new("run-1").expect("a valid run name"),
        wait: WaitRecord {
            step: wait_step.clone(),
            seq: 1,
            wait_for: WaitFor::Signal {
                name: "paid".to_string(),
            },
            deadline_ms: Some(1_700_086_400_000),
            opened_ms: 1_700_000_002_500,
            token: FencingToken(3),
            reason: "webhook".to_string(),
            status: WaitStatus::Open,
            ended_ms: None,
        },
    };
    let received = Op::SignalReceived {
        run: RunId::new("run-1").expect("a valid run name"),
        signal: signal.clone(),
    };
    let ended = Op::WaitEnded {
        run: RunId::new("run-1").expect("a valid run name"),
        step: wait_step,
        status: WaitStatus::Signalled { signal },
        at_ms: 1_700_000_003_000,
    };
    let budget_set = Op::BudgetSet {
        run: RunId::new("run-1").expect("a valid run name"),
        limits: BudgetLimits {
            tool_calls: Some(5),
            cost_micros: Some(2_000_000),
            ..BudgetLimits::default()
        },
        by: "ops".to_string(),
        reason: "cap".to_string(),
        at_ms: 1_700_000_003_500,
    };
    let charge = Charge::Effect {
        step: StepId::new("pay").expect("a valid step name"),
    };
    let reserved = Op::BudgetReserved {
        run: RunId::new("run-1").expect("a valid run name"),
        reservation: Reservation {
            charge: charge.clone(),
            amount: Cost::tool_call(900),
            reserved_ms: 1_700_000_004_000,
            token: FencingToken(3),
            attempt: 1,
            charged: vec![RunId::new("run-1").expect("a valid run name")],
        },
    };
    let settled = Op::BudgetSettled {
        run: RunId::new("run-1").expect("a valid run name"),
        charge,
        actual: Cost::tool_call(700),
        at_ms: 1_700_000_005_000,
        token: FencingToken(3),
    };
    let child = RunId::new("run-1:summarize").expect("a valid run name");
    let child_step = StepId::new("summarize").expect("a valid step name");
    let child_wait = Op::WaitOpened {
        run: RunId::new("run-1").expect("a valid run name"),
        wait: WaitRecord {
            step: child_step.clone(),
            seq: 2,
            wait_for: WaitFor::Child { run: child },
            deadline_ms: None,
            opened_ms: 1_700_000_006_000,
            token: FencingToken(3),
            reason: "fan out".to_string(),
            status: WaitStatus::Open,
            ended_ms: None,
        },
    };
    let child_ended = Op::WaitEnded {
        run: RunId::new("run-1").expect("a valid run name"),
        step: child_step,
        status: WaitStatus::ChildEnded {
            state: RunState::Completed,
            checkpoint: Some(2),
        },
        at_ms: 1_700_000_007_000,
    };
    let fan_step = StepId::new("quotes").expect("a valid step name");
    let fanned: Vec<RunId> = (1..=2)
        .map(|i| RunId::new(format!("run-1:quotes.{i}")).expect("a valid run name"))
        .collect();
    let fan_out_wait = Op::WaitOpened {
        run: RunId::new("run-1").expect("a valid run name"),
        wait: WaitRecord {
            step: fan_step.clone(),
            seq: 3,
            wait_for: WaitFor::Children {
                runs: fanned.clone(),
                join: Join::All,
            },
            deadline_ms: None,
            opened_ms: 1_700_000_007_500,
            token: FencingToken(3),
            reason: "ask two vendors".to_string(),
            status: WaitStatus::Open,
            ended_ms: None,
        },
    };
    let fan_out_ended = Op::WaitEnded {
        run: RunId::new("run-1").expect("a valid run name"),
        step: fan_step,
        status: WaitStatus::ChildrenEnded {
            ended: fanned
                .into_iter()
                .map(|run| ChildEnd {
                    run,
                    state: RunState::Completed,
                    checkpoint: Some(1),
                })
                .collect(),
        },
        at_ms: 1_700_000_007_900,
    };
    let compensating = Op::RunTransitioned {
        run: RunId::new("run-1").expect("a valid run name"),
        from: RunState::Running,
        to: RunState::Compensating,
        version: 9,
        at_ms: 1_700_000_008_000,
        token: FencingToken(3),
        reason: "the hedge was refused".to_string(),
    };
    let saga = Op::SagaOpened {
        run: RunId::new("run-1").expect("a valid run name"),
        end: RunState::Failed,
        at_ms: 1_700_000_008_000,
        token: FencingToken(3),
    };
    let sagas = encode_ops(&[compensating, saga.clone()]);
    let customer = ResourceId::new("customer:42").expect("a valid resource name");
    let held = Op::ResourceAcquired {
        resource: customer.clone(),
        run: RunId::new("run-1").expect("a valid run name"),
        token: FencingToken(1),
        expires_ms: 1_700_000_190_000,
        at_ms: 1_700_000_010_000,
    };
    let let_go = Op::ResourceReleased {
        resource: customer,
        run: RunId::new("run-1").expect("a valid run name"),
        token: FencingToken(1),
        at_ms: 1_700_000_011_000,
    };
    let shared = Op::SharedSet {
        key: SharedKeyId::new("dnc:customer-42").expect("a valid key"),
        version: 1,
        value: Some(b"do not contact".to_vec()),
        change: SharedChange {
            version: 1,
            at_ms: 1_700_000_012_000,
            by: "ops".to_string(),
            run: None,
            token: None,
            value_digest: Some(digest_of(b"do not contact")),
            why: "asked by phone".to_string(),
        },
    };
    let coordination = encode_ops(&[held.clone(), let_go, shared.clone()]);
    let pruned = Op::RunPruned {
        run: RunId::new("run-1").expect("a valid run name"),
        at_ms: 1_700_000_090_000,
    };
    let retried = Op::RunRetried {
        run: RunId::new("run-1").expect("a valid run name"),
        version: 10,
        at_ms: 1_700_000_013_000,
        token: FencingToken(3),
        reopened: vec![
            EffectKey::new(
                RunId::new("run-1").expect("a valid run name"),
                StepId::new("ship").expect("a valid step name"),
                1,
            )
            .expect("a valid key"),
        ],
        restored: Some(1),
        operator: "ops".to_string(),
        reason: "restocked".to_string(),
    };
    let forked = Op::RunForked {
        run: RunId::new("run-2").expect("a valid run name"),
        from: RunId::new("run-1").expect("a valid run name"),
        checkpoint: Some(1),
        at_ms: 1_700_000_014_000,
        operator: "ops".to_string(),
        reason: "a second try".to_string(),
    };
    // A checkpoint whose messages part was saved in append form: the new
    // chunk's blob, then the metadata naming both chunks and the digest of
    // their list (metadata layout 3 in payload version 11, layout 4 with
    // no part held inline since version 12).
    let (first, second) = (b"hello; ".to_vec(), b"how are you?".to_vec());
    let chunk = |bytes: &[u8]| actum::books::ChunkRef {
        digest: digest_of(bytes),
        size_bytes: bytes.len() as u64,
    };
    let chunked = encode_ops(&[
        Op::BlobPut {
            digest: digest_of(&second),
            bytes: second.clone(),
        },
        Op::CheckpointSaved {
            meta: actum::books::CheckpointMeta {
                run: RunId::new("run-1").expect("a valid run name"),
                version: 2,
                schema_version: 1,
                parts: vec![actum::books::PartRef {
                    name: "messages".to_string(),
                    digest: actum::books::digest_of_chunks(
                        [&first, &second].map(|b| (digest_of(b), b.len() as u64)),
                    ),
                    size_bytes: (first.len() + second.len()) as u64,
                    chunks: vec![chunk(&first), chunk(&second)],
                    inline: None,
                }],
                saved_ms: 1_700_000_015_000,
                token: FencingToken(3),
            },
        },
    ]);
    // A checkpoint whose small part is held in its metadata, no blob
    // (payload version 12, metadata layout 4).
    let step = b"step 3".to_vec();
    let held_inline = Op::CheckpointSaved {
        meta: actum::books::CheckpointMeta {
            run: RunId::new("run-1").expect("a valid run name"),
            version: 3,
            schema_version: 1,
            parts: vec![actum::books::PartRef {
                name: "cursor".to_string(),
                digest: digest_of(&step),
                size_bytes: step.len() as u64,
                chunks: Vec::new(),
                inline: Some(step.clone()),
            }],
            saved_ms: 1_700_000_016_000,
            token: FencingToken(3),
        },
    };
    let budgets = encode_ops(&[budget_set.clone(), reserved.clone(), settled.clone()]);
    let list = encode_ops(&[transitioned.clone(), acquired.clone(), released.clone()]);
    let waits = encode_ops(&[opened.clone(), received.clone(), ended.clone()]);
    vec![
        ("wait-opened", opened.encode()),
        ("signal-received", received.encode()),
        ("wait-ended", ended.encode()),
        ("wait-list", waits),
        ("budget-set", budget_set.encode()),
        ("budget-reserved", reserved.encode()),
        ("budget-settled", settled.encode()),
        ("budget-list", budgets),
        ("child-wait-opened", child_wait.encode()),
        ("child-wait-ended", child_ended.encode()),
        ("fan-out-wait-opened", fan_out_wait.encode()),
        ("fan-out-wait-ended", fan_out_ended.encode()),
        ("reply-wait-opened", reply_wait.encode()),
        ("reply-wait-ended", replied.encode()),
        ("saga-opened", saga.encode()),
        ("saga-list", sagas),
        ("resource-acquired", held.encode()),
        ("shared-set", shared.encode()),
        ("coordination-list", coordination),
        ("run-pruned", pruned.encode()),
        ("run-retried", retried.encode()),
        ("run-forked", forked.encode()),
        ("checkpoint-chunked-list", chunked),
        ("checkpoint-inline", held_inline.encode()),
        ("transitioned", transitioned.encode()),
        ("lease-acquired", acquired.encode()),
        ("effect-resent", resent.encode()),
        ("blob-put", blob.encode()),
        ("receipt-stored-list", receipt_stored),
        ("receipt-compensated-stored", receipt_compensated.encode()),
        ("lease-released", released.encode()),
        ("op-list", list),
    ]
}

/// An input of a target that damages an image: its shape byte, then its
/// edits' bytes.
fn with_edits(shape: u8, edits: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![shape];
    for one in edits {
        out.extend_from_slice(one);
    }
    out
}

fn recover_image_inputs() -> Vec<(&'static str, Vec<u8>)> {
    // Edits: kind (0..=5 xor, 6 set, 7 cut), file index (sorted paths:
    // 0 LOCK, 1 MANIFEST-0, 2 MANIFEST-1, 3.. segments), offset, value.
    let edit = |kind: u8, file: u8, offset: u16, value: u8| {
        let mut out = vec![kind, file];
        out.extend_from_slice(&offset.to_le_bytes());
        out.push(value);
        out
    };
    let with = with_edits;
    vec![
        ("clean", with(0x03, &[])),
        ("checkpoint-prepared-unclean", with(0x3f, &[])),
        ("record-bit-flip", with(0x03, &[edit(0, 3, 4200, 0x01)])),
        ("tail-torn", with(0x27, &[edit(7, 4, 5000, 0)])),
        ("header-damaged", with(0x05, &[edit(6, 3, 20, 0xff)])),
        (
            "manifest-damaged",
            with(0x0b, &[edit(0, 1, 30, 0x80), edit(7, 2, 10, 0)]),
        ),
    ]
}

fn campaign_inputs() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("short", vec![0]),
        ("long", vec![40, 1, 2, 3]),
        ("text", b"actum campaign".to_vec()),
    ]
}

/// `agents` inputs: the schedules of a few seeds, and an empty schedule
/// (the calm phase alone).
fn agents_inputs() -> Vec<(&'static str, Vec<u8>)> {
    use crate::agents::AgentSchedule;
    let seed = |n: u64| super::agents::encode(&AgentSchedule::from_seed(n, 160));
    vec![
        ("seed-1", seed(1)),
        ("seed-2", seed(2)),
        ("seed-3", seed(3)),
        ("calm-only", vec![0; 12]),
    ]
}

/// `state_store` inputs: each image intact, and damaged in the state store
/// (a run of garbage, flipped bytes) and in a manifest copy.
fn state_store_inputs() -> Vec<(&'static str, Vec<u8>)> {
    // Edits: kind (0 cut, 1..=5 xor, 6..=8 set, else garbage), file (below
    // 192: the state store), offset, length, value.
    let edit = |kind: u8, file: u8, offset: u32, len: u8, value: u8| {
        let mut out = vec![kind, file];
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&[len, value]);
        out
    };
    let with = with_edits;
    vec![
        ("clean-intact", with(0x00, &[])),
        ("crashed-intact", with(0x01, &[])),
        (
            "crashed-garbage-in-state",
            with(0x01, &[edit(12, 0, 0x0001_3000, 200, 0x5a)]),
        ),
        (
            "clean-flips-in-state",
            with(
                0x00,
                &[edit(1, 0, 0x2_1000, 0, 0x40), edit(2, 0, 0x3_1234, 0, 0x01)],
            ),
        ),
        (
            "crashed-long-garbage-in-state",
            with(0x01, &[edit(12, 0, 0x0002_8000, 255, 0x33)]),
        ),
        (
            "clean-manifest-set",
            with(0x00, &[edit(6, 200, 40, 0, 0xff)]),
        ),
    ]
}

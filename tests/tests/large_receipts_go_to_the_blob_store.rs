//! Receipts larger than `RECEIPT_INLINE_BYTES_MAX` are kept in the blob
//! store by digest (issue 22, 2.1): a 2 MiB receipt is confirmed, survives a
//! crash (replayed from the log) and a checkpoint (read from the state
//! store), and is read back whole through the engine's reads, a replayed
//! begin, the runtime's `ctx.step` and an undo handler; runs with the same
//! receipt share one blob, which retention frees with the last of them and
//! `verify` finds neither leaked nor dangling; a receipt over
//! `RECEIPT_LEN_BYTES_MAX` is refused naming its effect, and the effect
//! stays open.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::path::Path;
use std::sync::{Arc, Mutex};

use actum::books::{
    BeginEffect, Compensation, EffectKey, EffectStatus, FinishEffect, Outcome,
    RECEIPT_INLINE_BYTES_MAX, RECEIPT_LEN_BYTES_MAX, RunState, StoredReceipt, ToolClass,
    Transition, digest_of,
};
use actum::engine::Begun;
use actum::runtime::{Driven, Fail, Runtime, RuntimeOptions, Tool};
use actum::{Engine, Error, FsStorage, ManualClock};
use support::*;

/// A receipt of `len` bytes that no shorter or shifted one equals.
fn receipt(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ salt ^ (i >> 16) as u8)
        .collect()
}

const TWO_MIB: usize = 2 << 20;

/// Begins step `step` of the running `run` (leased by `grant`).
fn begin(engine: &Engine, grant: &actum::engine::LeaseGrant, step: &str) -> Begun {
    let args = format!("{step} of {}", grant.run).into_bytes();
    engine
        .begin_effect(BeginEffect {
            run: grant.run.clone(),
            step: sid(step),
            guard: grant.guard.clone(),
            tool: "archive.fetch".into(),
            tool_class: ToolClass::Queryable,
            args_digest: digest_of(&args),
            args: Some(args),
            rationale: "the report needs it".into(),
            compensation: None,
        })
        .unwrap()
}

/// Confirms step `step` of `grant`'s run with `receipt`; returns its key.
fn confirm(
    engine: &Engine,
    grant: &actum::engine::LeaseGrant,
    step: &str,
    receipt: &[u8],
) -> EffectKey {
    let Begun::Proceed { key, .. } = begin(engine, grant, step) else {
        panic!("a fresh step proceeds")
    };
    engine
        .finish_effect(FinishEffect {
            key: key.clone(),
            guard: grant.guard.clone(),
            outcome: Outcome::Confirmed {
                receipt: receipt.to_vec(),
            },
        })
        .unwrap();
    key
}

/// Checks that `key` reads back confirmed with `receipt`, whole, through
/// every read that hands a receipt out, and that the books keep it by
/// digest.
fn reads_back_whole(engine: &Engine, key: &EffectKey, receipt: &[u8], when: &str) {
    let whole = EffectStatus::Confirmed {
        receipt: receipt.to_vec(),
    };
    assert_eq!(engine.effect(key).unwrap().unwrap().status, whole, "{when}");
    let listed = engine.effects(key.run()).unwrap();
    assert!(
        listed.iter().any(|e| &e.key == key && e.status == whole),
        "{when}: effects"
    );
    let stored = StoredReceipt {
        digest: digest_of(receipt),
        len_bytes: receipt.len() as u64,
    };
    let raw = engine.read(|b| Ok(b.effect(key))).unwrap().unwrap();
    assert_eq!(
        raw.status,
        EffectStatus::ConfirmedStored { receipt: stored },
        "{when}: the books keep it by digest"
    );
    assert_eq!(
        engine
            .read(|b| Ok(b.blob(&stored.digest)))
            .unwrap()
            .as_deref(),
        Some(receipt),
        "{when}: the blob"
    );
}

/// `verify` of the directory finds nothing damaged (on PostgreSQL, where
/// there is no directory, the reads above decoded every row they met).
fn verify_clean(dir: &Path) {
    if on_postgres() {
        return;
    }
    let report = actum::verify::verify_dir(Arc::new(FsStorage::new()), dir).unwrap();
    assert!(!report.damaged(), "{:?}", report.findings);
}

#[test]
fn a_two_mib_receipt_survives_a_crash_and_a_checkpoint_and_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let grant = create_and_lease(&engine, "report-1", "w1");
    let big = receipt(TWO_MIB, 1);
    let key = confirm(&engine, &grant, "fetch", &big);
    reads_back_whole(&engine, &key, &big, "live");
    // A begin of the same step answers from the ledger with the bytes.
    let again = begin(&engine, &grant, "fetch");
    assert_eq!(
        again,
        Begun::Replay {
            key: key.clone(),
            receipt: big.clone()
        }
    );
    // A crash: the record is replayed from the log.
    drop(engine);
    let engine = open_fs(dir.path(), &clock);
    reads_back_whole(&engine, &key, &big, "replayed from the log");
    let grant = take_back(&engine, &grant);
    assert!(
        matches!(begin(&engine, &grant, "fetch"), Begun::Replay { receipt, .. } if receipt == big)
    );
    // A checkpoint, a crash: read from the state store.
    engine.checkpoint().unwrap();
    drop(engine);
    let engine = open_fs(dir.path(), &clock);
    reads_back_whole(&engine, &key, &big, "read from the state store");
    engine.close().unwrap();
    verify_clean(dir.path());
}

#[test]
fn runs_with_the_same_large_receipt_share_one_blob_until_the_last_is_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let big = receipt(TWO_MIB, 2);
    let digest = digest_of(&big);
    let mut keys = Vec::new();
    for name in ["share-a", "share-b"] {
        let grant = create_and_lease(&engine, name, "w1");
        keys.push(confirm(&engine, &grant, "fetch", &big));
        engine
            .transition(Transition {
                run: grant.run.clone(),
                guard: grant.guard.clone(),
                to: RunState::Completed,
                expected_version: None,
                reason: "done".into(),
            })
            .unwrap();
    }
    let holders = |engine: &Engine| engine.read(|b| Ok(b.blob_holders(&digest))).unwrap();
    assert_eq!(holders(&engine), Some(2), "one blob, named by both runs");
    engine.checkpoint().unwrap();
    engine.close().unwrap();
    verify_clean(dir.path());
    let engine = open_fs(dir.path(), &clock);
    assert_eq!(
        engine.prune_runs(vec![rid("share-a")], 0).unwrap().pruned,
        [rid("share-a")]
    );
    assert_eq!(holders(&engine), Some(1));
    reads_back_whole(&engine, &keys[1], &big, "the other run's, after a prune");
    // Across a crash (the prune replayed) and a checkpoint.
    drop(engine);
    let engine = open_fs(dir.path(), &clock);
    reads_back_whole(&engine, &keys[1], &big, "after the prune is replayed");
    engine.checkpoint().unwrap();
    engine.close().unwrap();
    verify_clean(dir.path());
    let engine = open_fs(dir.path(), &clock);
    assert_eq!(
        engine.prune_runs(vec![rid("share-b")], 0).unwrap().pruned,
        [rid("share-b")]
    );
    assert!(engine.read(|b| Ok(b.blob(&digest).is_none())).unwrap());
    assert_eq!(holders(&engine), None);
    engine.checkpoint().unwrap();
    engine.close().unwrap();
    verify_clean(dir.path());
}

#[test]
fn a_receipt_over_the_limit_is_refused_naming_its_effect_and_the_effect_stays_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let grant = create_and_lease(&engine, "huge-1", "w1");
    let Begun::Proceed { key, .. } = begin(&engine, &grant, "fetch") else {
        panic!("a fresh step proceeds")
    };
    let finish = |receipt: Vec<u8>| {
        engine.finish_effect(FinishEffect {
            key: key.clone(),
            guard: grant.guard.clone(),
            outcome: Outcome::Confirmed { receipt },
        })
    };
    let err = finish(vec![9; RECEIPT_LEN_BYTES_MAX + 1]).unwrap_err();
    let Error::TooLarge {
        what,
        size_bytes,
        max_bytes,
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(
        (*size_bytes, *max_bytes),
        (
            RECEIPT_LEN_BYTES_MAX as u64 + 1,
            RECEIPT_LEN_BYTES_MAX as u64
        )
    );
    assert!(
        what.contains("huge-1/fetch/1")
            && what.contains("run huge-1")
            && what.contains("step fetch"),
        "{err}"
    );
    // Nothing was written: the effect is still open, and the caller, who
    // holds the receipt, records one within the limit.
    assert_eq!(
        engine.effect(&key).unwrap().unwrap().status,
        EffectStatus::Intended
    );
    let largest = receipt(RECEIPT_LEN_BYTES_MAX, 3);
    finish(largest.clone()).unwrap();
    reads_back_whole(&engine, &key, &largest, "the largest receipt");
    // A receipt of exactly the inline limit stays in the entry.
    let small = receipt(RECEIPT_INLINE_BYTES_MAX, 4);
    let key = confirm(&engine, &grant, "small", &small);
    let raw = engine.read(|b| Ok(b.effect(&key))).unwrap().unwrap();
    assert_eq!(raw.status, EffectStatus::Confirmed { receipt: small });
    engine.close().unwrap();
}

#[test]
fn the_runtime_replays_a_large_receipt_and_hands_it_to_the_undo_handler() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let booking = receipt(TWO_MIB, 5);
    let cancellation = receipt(RECEIPT_INLINE_BYTES_MAX + 1, 6);
    // What each handler pass got from `ctx.step`, and how often the tool acted.
    let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let acted: Arc<Mutex<u32>> = Arc::default();
    let undone: Arc<Mutex<Vec<Option<Vec<u8>>>>> = Arc::default();
    let runtime = |engine: &Arc<Engine>| {
        let rt = Runtime::with_options(
            engine.clone(),
            RuntimeOptions {
                worker: "test".into(),
                lease_ttl_ms: LEASE_MS,
                idle_ms: 1,
                ..RuntimeOptions::default()
            },
        );
        let (seen, acted, undone) = (seen.clone(), acted.clone(), undone.clone());
        let (booking, cancellation) = (booking.clone(), cancellation.clone());
        rt.register_undo("hotel.cancel", move |call| {
            undone
                .lock()
                .unwrap()
                .push(call.receipt.map(<[u8]>::to_vec));
            Outcome::Confirmed {
                receipt: cancellation.clone(),
            }
        });
        rt.register("stay", "1", move |ctx| {
            let class = ToolClass::Idempotent {
                dedup_window_ms: DAY_MS,
            };
            let undo = Compensation {
                tool: "hotel.cancel".into(),
                args: b"cancel".to_vec(),
                class,
            };
            let got = ctx.step_with_undo(
                "book",
                &Tool::new("hotel.book", class),
                b"2 nights",
                undo,
                |_| {
                    *acted.lock().unwrap() += 1;
                    Outcome::Confirmed {
                        receipt: booking.clone(),
                    }
                },
            )?;
            seen.lock().unwrap().push(got);
            if ctx.signal("go", None)?.as_deref() == Some(&b"fail"[..]) {
                return Err(Fail::failed("the trip is off"));
            }
            Ok(Vec::new())
        })
        .unwrap();
        rt
    };
    let drain = |rt: &Runtime| {
        let worker = wid("test-0");
        let mut passes = Vec::new();
        while let Some(pass) = rt.work_once(&worker).unwrap() {
            passes.push(pass);
            assert!(passes.len() < 100, "{passes:?}");
        }
        passes
    };
    let open = || Arc::new(open_fs(dir.path(), &clock));
    let engine = open();
    let rt = runtime(&engine);
    let run = rt.start("stay", "stay-1", b"").unwrap().run;
    drain(&rt);
    assert_eq!(*seen.lock().unwrap(), std::slice::from_ref(&booking));
    // A crash while the run waits; the handler runs again once signalled,
    // and its step answers from the ledger.
    drop(rt);
    drop(engine);
    let engine = open();
    engine.checkpoint().unwrap();
    let rt = runtime(&engine);
    engine.signal(&run, "go", b"fail", "test").unwrap();
    let passes = drain(&rt);
    assert_eq!(
        passes.last(),
        Some(&(run.clone(), Driven::Ended(RunState::Failed)))
    );
    assert_eq!(*seen.lock().unwrap(), [booking.clone(), booking.clone()]);
    assert_eq!(*acted.lock().unwrap(), 1, "the hotel was booked once");
    // The saga's undo handler got the act's whole receipt.
    assert_eq!(*undone.lock().unwrap(), [Some(booking.clone())]);
    let act = engine
        .effects(&run)
        .unwrap()
        .into_iter()
        .find(|e| e.key.encode() == "stay-1/book/1")
        .unwrap();
    assert_eq!(
        act.status,
        EffectStatus::Compensated {
            receipt: booking.clone(),
            compensation_receipt: cancellation.clone(),
        }
    );
    drop(rt);
    Arc::into_inner(engine).unwrap().close().unwrap();
    verify_clean(dir.path());
}

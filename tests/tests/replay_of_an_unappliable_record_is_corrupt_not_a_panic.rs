//! A record that passes its checksums but whose ops do not apply to the
//! books (what a `decide`/`apply` disagreement would have logged, or bytes
//! from another version) must make `Engine::open` fail with `Corrupt`
//! naming the segment file and the record's offset: never a panic, and
//! never an engine that cannot be opened without saying where. A record in
//! a payload version this build does not read is not damage but another
//! build's: `UnsupportedPayload`, naming the version, file and offset.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::Arc;

use actum::books::{
    EffectKey, EffectStatus, FencingToken, Op, PAYLOAD_VERSION, RunId, StepId, encode_ops,
};
use actum::db::Db;
use actum::{Engine, EngineOptions, Error, FsStorage, Lsn, ManualClock, Storage};

use crate::support;
use support::*;

fn logged_then_reopened(payload: &[u8]) -> Error {
    let dir = tempfile::tempdir().unwrap();
    let options = EngineOptions::default();
    let engine = Engine::open(dir.path(), options.clone()).unwrap();
    engine.create_run(create_cmd("r1")).unwrap();
    engine.close().unwrap();
    // Log a record behind the engine's back, through the storage core.
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    let clock = ManualClock::new(START_MS);
    let (db, _) = Db::open(storage, &clock, dir.path(), options.db.clone()).unwrap();
    db.wal().append(&[payload]).unwrap();
    drop(db);
    Engine::open(dir.path(), options).unwrap_err()
}

fn assert_names_the_record(err: &Error, why: &str) {
    let Error::Corrupt {
        file,
        offset,
        reason,
    } = err
    else {
        panic!("expected Corrupt, got {err}")
    };
    assert_eq!(
        file.extension().and_then(|e| e.to_str()),
        Some("wal"),
        "{err}"
    );
    assert!(
        *offset > 0,
        "the record's offset, past the segment header: {err}"
    );
    assert!(reason.contains(why), "{err}");
    assert!(err.to_string().contains(&offset.to_string()));
}

#[test]
fn a_record_whose_ops_do_not_apply_is_corrupt_at_its_file_and_offset() {
    let key = EffectKey::new(RunId::new("r1").unwrap(), StepId::new("pay").unwrap(), 1);
    let settle_missing = Op::EffectSettled {
        key: key.unwrap(),
        status: EffectStatus::Failed {
            retryable: false,
            reason: "declined".into(),
        },
        at_ms: START_MS,
        token: FencingToken(1),
        note: String::new(),
    };
    let err = logged_then_reopened(&encode_ops(&[settle_missing]));
    assert_names_the_record(&err, "does not apply to the books");
}

#[test]
fn a_record_that_is_not_a_list_of_ops_is_corrupt_at_its_file_and_offset() {
    let mut garbage = vec![PAYLOAD_VERSION];
    garbage.extend_from_slice(&[0xff; 8]);
    let err = logged_then_reopened(&garbage);
    assert_names_the_record(&err, "is not a list of books ops");
    let err = logged_then_reopened(&[]);
    assert_names_the_record(&err, "lacks its version byte");
    let err = logged_then_reopened(&encode_ops(&[]));
    assert_names_the_record(&err, "holds no ops");
}

#[test]
fn a_record_in_an_unknown_payload_version_is_refused_naming_version_file_and_offset() {
    let mut payload = encode_ops(&[Op::LeaseReleased {
        run: RunId::new("r1").unwrap(),
        token: FencingToken(1),
        version: 2,
        at_ms: START_MS,
    }]);
    payload[0] = 13;
    let err = logged_then_reopened(&payload);
    let Error::UnsupportedPayload {
        file,
        offset,
        lsn,
        found,
        supported,
    } = &err
    else {
        panic!("expected UnsupportedPayload, got {err}")
    };
    assert_eq!(
        file.extension().and_then(|e| e.to_str()),
        Some("wal"),
        "{err}"
    );
    assert!(*offset > 0, "the record's offset: {err}");
    assert_eq!(
        (*lsn, *found, *supported),
        (Lsn(2), 13, &[1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12][..])
    );
    let message = err.to_string();
    assert!(
        message.contains(
            "record payload version 13; this build reads versions 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"
        ),
        "{message}"
    );
    assert!(
        message.contains(&format!("byte offset {offset}")),
        "{message}"
    );
    assert!(message.contains("a newer build"), "{message}");
}

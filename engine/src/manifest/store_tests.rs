//! Tests of `ManifestStore` creation, rotation, crash recovery and the
//! refusals (foreign copies, unknown versions, misuse).
//!
//! **Invariant checked:** every update is durable in the older slot before
//! it returns, and an update that never completed leaves the previous
//! manifest as the one that reopens.

use super::codec::testing::with_version;
use super::codec::{COPY_SLOT_BYTES, DATABASE_ID_OFFSET, SEQUENCE_OFFSET, decode, encode};
use super::content::Manifest;
use super::copy::copy_path;
use super::store::ManifestStore;
use super::testkit::{Db, advanced, garbage, initial, new_db, read_all, write_raw};
use crate::error::Error;
use crate::ids::DatabaseId;
use crate::storage::OpenMode;

fn decode_copy(db: &Db, slot: usize) -> Manifest {
    decode(&read_all(db.storage.as_ref(), &copy_path(&db.dir, slot))).expect("valid copy")
}

#[test]
fn create_writes_sequence_one_to_copy_zero_and_sequence_zero_to_copy_one() {
    let db = new_db();
    let store = ManifestStore::create(db.storage.clone(), &db.dir, initial()).expect("create");
    assert_eq!(store.current(), &initial());
    assert_eq!(store.current_path(), copy_path(&db.dir, 0));
    for slot in 0..2 {
        let bytes = read_all(db.storage.as_ref(), &copy_path(&db.dir, slot));
        assert_eq!(bytes.len(), COPY_SLOT_BYTES, "copy {slot} fills its slot");
    }
    assert_eq!(decode_copy(&db, 0), initial());
    assert_eq!(
        decode_copy(&db, 1),
        Manifest {
            sequence: 0,
            ..initial()
        }
    );
    drop(store);
    let (_, manifest, report) = ManifestStore::open(db.storage.clone(), &db.dir).expect("open");
    assert_eq!(manifest, initial());
    assert_eq!(report.chosen, copy_path(&db.dir, 0));
    assert!(report.rejected.is_empty());
}

#[test]
fn create_refuses_a_directory_holding_either_copy() {
    for slot in 0..2 {
        let db = new_db();
        db.storage
            .open(&copy_path(&db.dir, slot), OpenMode::CreateNew)
            .expect("stray copy");
        let result = ManifestStore::create(db.storage.clone(), &db.dir, initial());
        assert!(
            matches!(&result, Err(Error::Io { path, .. }) if *path == copy_path(&db.dir, slot)),
            "slot {slot}: {result:?}"
        );
        // The stray file is left alone and no other copy was created.
        assert_eq!(
            read_all(db.storage.as_ref(), &copy_path(&db.dir, slot)).len(),
            0
        );
        assert!(
            !db.storage
                .exists(&copy_path(&db.dir, 1 - slot))
                .expect("exists")
        );
    }
}

#[test]
fn updates_alternate_copies_and_each_reopen_returns_the_latest() {
    let db = new_db();
    let mut store = ManifestStore::create(db.storage.clone(), &db.dir, initial()).expect("create");
    let mut previous = initial();
    for step in 1..=12usize {
        let next = advanced(&previous);
        store.update(next.clone()).expect("update");
        let written_slot = step % 2;
        assert_eq!(store.current(), &next);
        assert_eq!(store.current_path(), copy_path(&db.dir, written_slot));
        // The update overwrote the older copy and left the previous one.
        assert_eq!(decode_copy(&db, written_slot), next, "step {step}");
        assert_eq!(decode_copy(&db, 1 - written_slot), previous, "step {step}");

        let (_, reopened, report) =
            ManifestStore::open(db.storage.clone(), &db.dir).expect("reopen");
        assert_eq!(reopened, next, "step {step}");
        assert_eq!(report.chosen, copy_path(&db.dir, written_slot));
        assert!(report.rejected.is_empty());
        previous = next;
    }
}

/// Simulates a crash during the update from a manifest to its successor by
/// writing only `torn` (offset and bytes) of the new copy over the slot the
/// update would write, then reopens and checks what comes back: the new
/// manifest only if its whole copy happens to be on disk (the torn write
/// changed nothing else), the previous one otherwise.
fn check_torn_update(torn: impl Fn(&[u8]) -> (u64, Vec<u8>), case: &str) -> Manifest {
    let db = new_db();
    let mut store = ManifestStore::create(db.storage.clone(), &db.dir, initial()).expect("create");
    let previous = advanced(&initial());
    store.update(previous.clone()).expect("update");
    let target = copy_path(&db.dir, 0);
    assert_ne!(store.current_path(), target);
    let next = advanced(&previous);
    let encoded = encode(&next);
    let (offset, bytes) = torn(&encoded);
    write_raw(db.storage.as_ref(), &target, offset, &bytes);
    drop(store);
    let on_disk = read_all(db.storage.as_ref(), &target);
    let complete = on_disk.get(..encoded.len()) == Some(encoded.as_slice());

    let (mut store, reopened, _) =
        ManifestStore::open(db.storage.clone(), &db.dir).expect("reopen after crash");
    let expected = if complete { &next } else { &previous };
    assert_eq!(&reopened, expected, "{case}");
    // Whatever the crash left, the store carries on from what it reopened.
    let after = advanced(&reopened);
    store.update(after.clone()).expect("update after crash");
    let (_, again, _) = ManifestStore::open(db.storage.clone(), &db.dir).expect("reopen");
    assert_eq!(again, after, "{case}");
    reopened
}

#[test]
fn a_crash_mid_update_reopens_the_previous_manifest() {
    let len = encode(&advanced(&advanced(&initial()))).len();
    let mut previous_count = 0;
    for written in 0..len {
        // Only a prefix of the new copy reached the disk.
        let reopened = check_torn_update(
            |bytes| (0, bytes[..written].to_vec()),
            &format!("prefix of {written} bytes"),
        );
        previous_count += usize::from(reopened.sequence == 2);
        // Only a suffix did (sectors can land out of order).
        check_torn_update(
            |bytes| (written as u64 + 1, bytes[written + 1..].to_vec()),
            &format!("suffix from byte {}", written + 1),
        );
    }
    // No prefix short of the whole copy may install the new manifest.
    assert_eq!(previous_count, len);
    let reopened = check_torn_update(|bytes| (0, garbage(bytes.len(), 7)), "garbage");
    assert_eq!(reopened.sequence, 2);
    // Control: had the whole copy landed, the new manifest would win.
    let reopened = check_torn_update(|bytes| (0, bytes.to_vec()), "complete");
    assert_eq!(reopened.sequence, 3);
}

#[test]
fn copies_of_different_databases_are_refused_as_corrupt() {
    let db = new_db();
    drop(ManifestStore::create(db.storage.clone(), &db.dir, initial()).expect("create"));
    let foreign = Manifest {
        database_id: DatabaseId(0xf0),
        sequence: 2,
        ..initial()
    };
    write_raw(
        db.storage.as_ref(),
        &copy_path(&db.dir, 1),
        0,
        &encode(&foreign),
    );
    match ManifestStore::open(db.storage.clone(), &db.dir) {
        Err(Error::Corrupt {
            file,
            offset,
            reason,
        }) => {
            assert_eq!(file, copy_path(&db.dir, 1));
            assert_eq!(offset, DATABASE_ID_OFFSET as u64);
            assert!(reason.contains("different databases"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn two_valid_copies_with_the_same_sequence_are_refused_as_corrupt() {
    let db = new_db();
    drop(ManifestStore::create(db.storage.clone(), &db.dir, initial()).expect("create"));
    write_raw(
        db.storage.as_ref(),
        &copy_path(&db.dir, 1),
        0,
        &encode(&initial()),
    );
    match ManifestStore::open(db.storage.clone(), &db.dir) {
        Err(Error::Corrupt { offset, .. }) => assert_eq!(offset, SEQUENCE_OFFSET as u64),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn an_intact_copy_in_an_unknown_version_is_refused_without_fallback() {
    for slot in 0..2 {
        // Newer (sequence 2) or older (sequence 0) than the valid copy 0.
        for sequence in [0, 2] {
            let db = new_db();
            drop(ManifestStore::create(db.storage.clone(), &db.dir, initial()).expect("create"));
            let copy = with_version(
                encode(&Manifest {
                    sequence,
                    ..initial()
                }),
                2,
            );
            let path = copy_path(&db.dir, slot);
            write_raw(db.storage.as_ref(), &path, 0, &copy);
            match ManifestStore::open(db.storage.clone(), &db.dir) {
                Err(Error::UnsupportedFormat {
                    file,
                    found,
                    supported,
                }) => {
                    assert_eq!((file, found, supported), (path, 2, 1));
                }
                other => panic!("slot {slot}, sequence {sequence}: got {other:?}"),
            }
        }
    }
}

#[test]
#[should_panic(expected = "advance the sequence by exactly one")]
fn update_panics_unless_the_sequence_advances_by_exactly_one() {
    let db = new_db();
    let mut store = ManifestStore::create(db.storage.clone(), &db.dir, initial()).expect("create");
    let mut skipping = initial().next().next();
    skipping.applied_lsn = initial().applied_lsn;
    let _ = store.update(skipping);
}

#[test]
fn update_with_an_invalid_state_file_is_refused_and_writes_nothing() {
    let db = new_db();
    let mut store = ManifestStore::create(db.storage.clone(), &db.dir, initial()).expect("create");
    let before = read_all(db.storage.as_ref(), &copy_path(&db.dir, 1));
    let mut next = initial().next();
    next.state_file = "../elsewhere".to_string();
    assert!(matches!(
        store.update(next),
        Err(Error::InvalidConfig { .. })
    ));
    assert_eq!(store.current(), &initial());
    assert_eq!(
        read_all(db.storage.as_ref(), &copy_path(&db.dir, 1)),
        before
    );
}

#[test]
fn bytes_beyond_the_declared_length_are_ignored() {
    let db = new_db();
    drop(ManifestStore::create(db.storage.clone(), &db.dir, initial()).expect("create"));
    // A stale or stray tail, even a whole valid-looking copy, past the slot.
    let path = copy_path(&db.dir, 0);
    let stale = encode(&Manifest {
        sequence: 99,
        ..initial()
    });
    write_raw(db.storage.as_ref(), &path, COPY_SLOT_BYTES as u64, &stale);
    let (_, manifest, _) = ManifestStore::open(db.storage.clone(), &db.dir).expect("open");
    assert_eq!(manifest, initial());
}

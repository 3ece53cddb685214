//! Table-driven test of `ManifestStore::open` over every combination of
//! damage to the older and the newer copy, with the newer copy in either
//! slot.
//!
//! **Invariant checked:** open picks the newer copy when it is intact,
//! falls back to the older one when only the newer is damaged, and fails
//! with `NoValidManifest` naming both files when neither is intact; every
//! rejection names its file and the byte offset of the damage.

use std::path::Path;

use super::codec::{APPLIED_LSN_OFFSET, SEQUENCE_OFFSET, encode};
use super::content::Manifest;
use super::copy::copy_path;
use super::store::ManifestStore;
use super::testkit::{Db, advanced, garbage, initial, new_db, truncate, write_raw};
use crate::error::Error;
use crate::storage::Storage;

/// One way a copy file can be damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    Intact,
    Missing,
    ZeroLength,
    Truncated,
    HeaderBitFlip,
    BodyBitFlip,
    CrcBitFlip,
    Garbage,
    WrongMagic,
}

const ALL_DAMAGE: [Damage; 9] = [
    Damage::Intact,
    Damage::Missing,
    Damage::ZeroLength,
    Damage::Truncated,
    Damage::HeaderBitFlip,
    Damage::BodyBitFlip,
    Damage::CrcBitFlip,
    Damage::Garbage,
    Damage::WrongMagic,
];

/// Applies `damage` to the copy at `path`, which holds `manifest`.
fn apply(storage: &dyn Storage, path: &Path, manifest: &Manifest, damage: Damage) {
    let len = encode(manifest).len() as u64;
    match damage {
        Damage::Intact => {}
        Damage::Missing => storage.remove_file(path).expect("remove"),
        Damage::ZeroLength => truncate(storage, path, 0),
        Damage::Truncated => truncate(storage, path, len - 1),
        // The top bit of the sequence: without the CRC this copy would win.
        Damage::HeaderBitFlip => flip(storage, path, SEQUENCE_OFFSET as u64 + 7, 0x80),
        Damage::BodyBitFlip => flip(storage, path, APPLIED_LSN_OFFSET as u64, 0x01),
        Damage::CrcBitFlip => flip(storage, path, len - 2, 0x10),
        Damage::Garbage => write_raw(storage, path, 0, &garbage(512, len)),
        Damage::WrongMagic => write_raw(storage, path, 0, b"NOTMANIF"),
    }
}

fn flip(storage: &dyn Storage, path: &Path, offset: u64, mask: u8) {
    let file = storage
        .open(path, crate::storage::OpenMode::Existing)
        .expect("open");
    let mut byte = [0u8; 1];
    file.read_at(offset, &mut byte).expect("read");
    write_raw(storage, path, offset, &[byte[0] ^ mask]);
}

/// The text the rejection of a copy holding `manifest` with `damage` must
/// contain, beyond its path.
fn expected_reason(manifest: &Manifest, damage: Damage) -> String {
    let len = encode(manifest).len();
    match damage {
        Damage::Intact => unreachable!("an intact copy is not rejected"),
        Damage::Missing => "file is missing".to_string(),
        Damage::ZeroLength => "byte offset 0: truncated".to_string(),
        Damage::Truncated => format!("byte offset {}: truncated", len - 1),
        Damage::HeaderBitFlip | Damage::BodyBitFlip | Damage::CrcBitFlip => {
            format!("byte offset {}: CRC mismatch", len - 4)
        }
        Damage::Garbage | Damage::WrongMagic => "byte offset 0: wrong magic".to_string(),
    }
}

/// A database whose copy in `new_slot` holds the newer manifest and whose
/// other copy holds the one before it. Returns (old, new).
fn two_generations(db: &Db, new_slot: usize) -> (Manifest, Manifest) {
    let first = initial();
    let mut store =
        ManifestStore::create(db.storage.clone(), &db.dir, first.clone()).expect("create");
    let second = advanced(&first);
    store.update(second.clone()).expect("update to 2");
    if new_slot == 1 {
        return (first, second);
    }
    let third = advanced(&second);
    store.update(third.clone()).expect("update to 3");
    (second, third)
}

#[test]
fn open_picks_the_newest_valid_copy_under_every_combination_of_damage() {
    let mut cases = 0;
    for new_slot in 0..2 {
        let old_slot = 1 - new_slot;
        for old_damage in ALL_DAMAGE {
            for new_damage in ALL_DAMAGE {
                let case =
                    format!("new in slot {new_slot}, old {old_damage:?}, new {new_damage:?}");
                let db = new_db();
                let (old, new) = two_generations(&db, new_slot);
                let old_path = copy_path(&db.dir, old_slot);
                let new_path = copy_path(&db.dir, new_slot);
                apply(db.storage.as_ref(), &old_path, &old, old_damage);
                apply(db.storage.as_ref(), &new_path, &new, new_damage);

                let result = ManifestStore::open(db.storage.clone(), &db.dir);
                let reason_for = |path: &Path, manifest: &Manifest, damage: Damage| {
                    format!("{}: {}", path.display(), expected_reason(manifest, damage))
                };
                match (old_damage, new_damage) {
                    (_, Damage::Intact) => {
                        let (store, manifest, report) = result.expect(&case);
                        assert_eq!(manifest, new, "{case}");
                        assert_eq!(store.current(), &new, "{case}");
                        assert_eq!(report.chosen, new_path, "{case}");
                        let expected: Vec<String> = (old_damage != Damage::Intact)
                            .then(|| reason_for(&old_path, &old, old_damage))
                            .into_iter()
                            .collect();
                        assert_prefixes(&report.rejected, &expected, &case);
                    }
                    (Damage::Intact, _) => {
                        let (store, manifest, report) = result.expect(&case);
                        assert_eq!(manifest, old, "{case}");
                        assert_eq!(store.current(), &old, "{case}");
                        assert_eq!(report.chosen, old_path, "{case}");
                        let expected = vec![reason_for(&new_path, &new, new_damage)];
                        assert_prefixes(&report.rejected, &expected, &case);
                    }
                    _ => match result {
                        Err(Error::NoValidManifest { dir, reasons }) => {
                            assert_eq!(dir, db.dir, "{case}");
                            let mut expected = vec![
                                reason_for(&old_path, &old, old_damage),
                                reason_for(&new_path, &new, new_damage),
                            ];
                            // Reasons are listed by slot.
                            if new_slot == 0 {
                                expected.reverse();
                            }
                            assert_prefixes(&reasons, &expected, &case);
                        }
                        other => panic!("{case}: expected NoValidManifest, got {other:?}"),
                    },
                }
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 2 * ALL_DAMAGE.len() * ALL_DAMAGE.len());
}

/// Each actual reason starts with the expected path-and-offset text (the
/// rest is detail such as the CRC values).
fn assert_prefixes(actual: &[String], expected: &[String], case: &str) {
    assert_eq!(actual.len(), expected.len(), "{case}: {actual:?}");
    for (actual, expected) in actual.iter().zip(expected) {
        assert!(
            actual.starts_with(expected.as_str()),
            "{case}: reason {actual:?} should start with {expected:?}"
        );
    }
}

#[test]
fn after_a_fallback_the_next_update_repairs_the_damaged_copy() {
    for damage in ALL_DAMAGE {
        let db = new_db();
        let (old, new) = two_generations(&db, 1);
        apply(db.storage.as_ref(), &copy_path(&db.dir, 1), &new, damage);
        let (mut store, current, _) =
            ManifestStore::open(db.storage.clone(), &db.dir).expect("open");
        let expected_current = if damage == Damage::Intact { &new } else { &old };
        assert_eq!(&current, expected_current, "{damage:?}");
        let next = advanced(&current);
        store.update(next.clone()).expect("update");
        drop(store);
        let (_, reopened, report) =
            ManifestStore::open(db.storage.clone(), &db.dir).expect("reopen");
        assert_eq!(reopened, next, "{damage:?}");
        assert!(
            report.rejected.is_empty(),
            "{damage:?}: {:?}",
            report.rejected
        );
    }
}

//! Tests of the order of writes, file syncs and directory syncs that
//! creation and updates issue, and of a failed `sync_data` mid-update.
//!
//! **Invariant checked:** every step named in docs/DURABILITY.md ("Manifest
//! update") happens, in that order, and nothing else writes.

use std::sync::Arc;

use super::copy::copy_path;
use super::store::ManifestStore;
use super::testkit::{RecordingStorage, advanced, initial, new_db};
use crate::error::Error;
use crate::storage::Storage;

fn strings(ops: &[&str]) -> Vec<String> {
    ops.iter().map(|op| op.to_string()).collect()
}

#[test]
fn create_and_update_issue_the_documented_syncs_in_order() {
    let db = new_db();
    let recording = Arc::new(RecordingStorage::default());
    let storage: Arc<dyn Storage> = recording.clone();
    let mut store = ManifestStore::create(storage.clone(), &db.dir, initial()).expect("create");
    assert_eq!(
        recording.take_log(),
        strings(&[
            "open CreateNew MANIFEST-0",
            "write MANIFEST-0",
            "sync_data MANIFEST-0",
            "open CreateNew MANIFEST-1",
            "write MANIFEST-1",
            "sync_data MANIFEST-1",
            "sync_dir",
        ])
    );
    let second = advanced(&initial());
    store.update(second.clone()).expect("update");
    assert_eq!(
        recording.take_log(),
        strings(&["write MANIFEST-1", "sync_data MANIFEST-1"])
    );
    store.update(advanced(&second)).expect("update");
    assert_eq!(
        recording.take_log(),
        strings(&["write MANIFEST-0", "sync_data MANIFEST-0"])
    );
    drop(store);
    ManifestStore::open(storage, &db.dir).expect("open");
    // Open writes nothing, but syncs the directory and both copies before
    // trusting what it reads (a previous process's writes may be unsynced).
    assert_eq!(
        recording.take_log(),
        strings(&["sync_dir", "sync_data MANIFEST-0", "sync_data MANIFEST-1"])
    );
}

#[test]
fn recreating_a_missing_copy_syncs_the_directory_even_after_a_failed_attempt() {
    let db = new_db();
    let recording = Arc::new(RecordingStorage::default());
    let storage: Arc<dyn Storage> = recording.clone();
    let mut store = ManifestStore::create(storage.clone(), &db.dir, initial()).expect("create");
    let second = advanced(&initial());
    store.update(second.clone()).expect("update");
    drop(store);
    storage
        .remove_file(&copy_path(&db.dir, 0))
        .expect("remove copy 0");
    let (mut store, current, report) = ManifestStore::open(storage.clone(), &db.dir).expect("open");
    assert_eq!(current, second);
    assert_eq!(report.rejected.len(), 1);
    recording.take_log();

    let third = advanced(&second);
    recording.fail_next_sync();
    let result = store.update(third.clone());
    assert!(matches!(result, Err(Error::Io { .. })), "{result:?}");
    assert_eq!(store.current(), &second, "a failed update changes nothing");
    assert_eq!(
        recording.take_log(),
        strings(&[
            "open OpenOrCreate MANIFEST-0",
            "write MANIFEST-0",
            "failed sync_data MANIFEST-0",
        ])
    );

    store.update(third.clone()).expect("retry");
    assert_eq!(
        recording.take_log(),
        strings(&["write MANIFEST-0", "sync_data MANIFEST-0", "sync_dir"])
    );
    assert_eq!(store.current(), &third);
    drop(store);
    let (_, reopened, report) = ManifestStore::open(storage, &db.dir).expect("reopen");
    assert_eq!(reopened, third);
    assert!(report.rejected.is_empty());
}

//! Scenario tests of the WAL through its public facade: round trips across
//! rotations, torn tails, acknowledged corruption, concurrency, poisoning,
//! foreign and stale files, garbage collection.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use proptest::prelude::*;

use super::format::{self, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, SegmentHeader};
use super::{Wal, WalOptions};
use crate::error::Error;
use crate::ids::{DatabaseId, Lsn, SegmentId};
use crate::storage::{DirLock, FsStorage, OpenMode, Storage, StorageFile};

const DB: DatabaseId = DatabaseId(0xac7u128 << 64 | 0x42);

fn fs() -> Arc<dyn Storage> {
    Arc::new(FsStorage::new())
}

/// Small segments, created at a first step of a header and 2 KiB, so most
/// tests' writes grow their segments (inline: these tests do not call
/// `grow_ahead` unless they say so).
fn small(segment_size_bytes: u64, max_record_bytes: u64) -> WalOptions {
    WalOptions {
        segment_size_bytes,
        segment_first_step_bytes: SEGMENT_HEADER_BYTES + 2048,
        max_record_bytes,
        ..WalOptions::default()
    }
}

/// `Wal::open` with an epoch above every earlier open's, as the database
/// keeps it (each call takes the next one; tests share the counter).
fn reopen(
    storage: Arc<dyn Storage>,
    dir: &Path,
    db: DatabaseId,
    options: WalOptions,
    first_segment: SegmentId,
    covered: Lsn,
) -> crate::error::Result<(Wal, super::RecoveryReport)> {
    static EPOCH: AtomicU64 = AtomicU64::new(super::FIRST_EPOCH);
    let epoch = EPOCH.fetch_add(1, Ordering::Relaxed) + 1;
    let root = super::LogRoot {
        first_segment,
        covered,
        clean_end: None,
    };
    Wal::open(storage, dir, db, options, root, epoch)
}

/// [`reopen`] of a log a clean shutdown at `clean_end` left, as the
/// database opens it when both manifest copies are valid.
fn reopen_clean(
    dir: &Path,
    options: WalOptions,
    clean_end: Lsn,
) -> crate::error::Result<(Wal, super::RecoveryReport)> {
    static EPOCH: AtomicU64 = AtomicU64::new(super::FIRST_EPOCH);
    let epoch = EPOCH.fetch_add(1, Ordering::Relaxed) + 1;
    let root = super::LogRoot {
        first_segment: SegmentId(1),
        covered: Lsn::ZERO,
        clean_end: Some(clean_end),
    };
    Wal::open(fs(), dir, DB, options, root, epoch)
}

fn read_all(wal: &Wal) -> Vec<(Lsn, Vec<u8>)> {
    wal.read_from(Lsn(1))
        .expect("read_from")
        .collect::<Result<Vec<_>, _>>()
        .expect("records")
}

fn seg_path(dir: &Path, id: u64) -> PathBuf {
    format::segment_path(dir, SegmentId(id))
}

/// Raw file access for damage injection, through the storage seam.
fn read_file(path: &Path) -> Vec<u8> {
    let file = FsStorage::new()
        .open(path, OpenMode::Existing)
        .expect("open");
    let mut buf = vec![0u8; usize::try_from(file.len().expect("len")).expect("usize")];
    file.read_at(0, &mut buf).expect("read");
    buf
}

/// Cuts the file at `path` to `len` bytes, through the storage seam.
fn cut_file(path: &Path, len: u64) {
    let file = FsStorage::new()
        .open(path, OpenMode::Existing)
        .expect("open");
    file.set_len(len).expect("cut");
}

fn write_file(path: &Path, bytes: &[u8]) {
    let file = FsStorage::new()
        .open(path, OpenMode::OpenOrCreate)
        .expect("open");
    file.set_len(0).expect("truncate");
    file.write_at(0, bytes).expect("write");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn batches_round_trip_across_rotations_and_reopen(
        batches in prop::collection::vec(
            prop::collection::vec(
                prop_oneof![
                    prop::collection::vec(any::<u8>(), 0..48),
                    prop::collection::vec(any::<u8>(), 2000..=2048),
                    Just(Vec::new()),
                ],
                1..4,
            ),
            1..40,
        )
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = small(16 * 1024, 2048);
        let mut expected = Vec::new();
        {
            let wal = Wal::create(fs(), dir.path(), DB, options.clone()).expect("create");
            for batch in &batches {
                let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
                let last = wal.append(&refs).expect("append");
                let first = last.0 + 1 - batch.len() as u64;
                prop_assert_eq!(first, expected.len() as u64 + 1, "LSNs continue");
                for (i, payload) in batch.iter().enumerate() {
                    expected.push((Lsn(first + i as u64), payload.clone()));
                }
            }
            prop_assert_eq!(read_all(&wal), expected.clone());
        }
        let (wal, report) =
            reopen(fs(), dir.path(), DB, options, SegmentId(1), Lsn::ZERO).expect("open");
        prop_assert_eq!(report.last_lsn, Lsn(expected.len() as u64));
        prop_assert_eq!(report.truncated_bytes, 0);
        prop_assert_eq!(read_all(&wal), expected.clone());
        let next = wal.append(&[b"after"]).expect("append after reopen");
        prop_assert_eq!(next, Lsn(expected.len() as u64 + 1));
    }
}

/// A log of three batches; the last has two records. Returns the offsets
/// (start, end) of the last record in segment 1.
fn three_batches(dir: &Path) -> (u64, u64) {
    let wal = Wal::create(fs(), dir, DB, small(64 * 1024, 1024)).expect("create");
    wal.append(&[b"first".as_slice()]).expect("append");
    wal.append(&[b"second".as_slice(), b"third"])
        .expect("append");
    wal.append(&[b"fourth".as_slice(), b"the last record"])
        .expect("append");
    // Each append is its own group, so each starts at a group boundary.
    let header = RECORD_HEADER_BYTES as u64;
    let second = format::align_up(SEGMENT_HEADER_BYTES + header + 5);
    let third = format::align_up(second + 2 * header + 6 + 5);
    let start = third + header + 6;
    (start, start + header + 15)
}

#[test]
fn torn_last_record_drops_its_whole_batch_and_nothing_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (start, end) = three_batches(dir.path());
    let path = seg_path(dir.path(), 1);
    let pristine = read_file(&path);
    let prefix: Vec<Vec<u8>> = vec![b"first".to_vec(), b"second".to_vec(), b"third".to_vec()];
    for offset in start..end {
        for garble in [false, true] {
            let mut bytes = pristine.clone();
            let at = usize::try_from(offset).expect("usize");
            if garble {
                bytes[at] ^= 0xff;
            } else {
                bytes[at..usize::try_from(end).expect("usize")].fill(0);
            }
            write_file(&path, &bytes);
            let opened = reopen(
                fs(),
                dir.path(),
                DB,
                small(64 * 1024, 1024),
                SegmentId(1),
                Lsn::ZERO,
            );
            let (wal, report) =
                opened.unwrap_or_else(|e| panic!("offset {offset} garble {garble}: {e}"));
            assert_eq!(report.last_lsn, Lsn(3), "offset {offset} garble {garble}");
            if garble || offset > start {
                assert!(
                    report.truncated_bytes > 0,
                    "offset {offset} garble {garble}"
                );
                let (file, cut) = report.truncated_at.clone().expect("where");
                assert_eq!(
                    (file, cut),
                    (path.clone(), start - RECORD_HEADER_BYTES as u64 - 6)
                );
            }
            let got: Vec<Vec<u8>> = read_all(&wal).into_iter().map(|(_, p)| p).collect();
            assert_eq!(got, prefix, "offset {offset} garble {garble}");
            drop(wal);
        }
    }
    // After truncation the log continues right after the prefix.
    let (wal, _) = reopen(
        fs(),
        dir.path(),
        DB,
        small(64 * 1024, 1024),
        SegmentId(1),
        Lsn::ZERO,
    )
    .expect("reopen");
    assert_eq!(wal.append(&[b"again"]).expect("append"), Lsn(4));
}

#[test]
fn damaged_acknowledged_record_is_corrupt_and_repair_drops_it_with_a_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    three_batches(dir.path());
    let path = seg_path(dir.path(), 1);
    let mut bytes = read_file(&path);
    let damaged_at = SEGMENT_HEADER_BYTES as usize + RECORD_HEADER_BYTES + 2;
    bytes[damaged_at] ^= 0x01; // Inside the payload of LSN 1.
    write_file(&path, &bytes);
    let opened = reopen(
        fs(),
        dir.path(),
        DB,
        small(64 * 1024, 1024),
        SegmentId(1),
        Lsn::ZERO,
    );
    match opened {
        Err(Error::Corrupt {
            file,
            offset,
            reason,
        }) => {
            assert_eq!(file, path);
            assert_eq!(offset, SEGMENT_HEADER_BYTES);
            assert!(reason.contains("lsn 1"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let mut repair = small(64 * 1024, 1024);
    repair.repair = true;
    let (wal, report) =
        reopen(fs(), dir.path(), DB, repair, SegmentId(1), Lsn::ZERO).expect("repair");
    assert_eq!(report.last_lsn, Lsn::ZERO);
    let dropped = report.repair_dropped.expect("repair says what it dropped");
    assert!(
        dropped.contains("lsn 1") && dropped.contains("lsn 5"),
        "{dropped}"
    );
    assert!(read_all(&wal).is_empty());
    drop(wal);
    // The cut lasts: with nothing written since, an ordinary open finds a
    // log that ends before the damage, not the damage again.
    let (wal, report) = reopen(
        fs(),
        dir.path(),
        DB,
        small(64 * 1024, 1024),
        SegmentId(1),
        Lsn::ZERO,
    )
    .expect("an ordinary open after the repair");
    assert_eq!(report.last_lsn, Lsn::ZERO);
    assert!(report.repair_dropped.is_none());
    assert!(read_all(&wal).is_empty());
}

#[test]
fn a_log_ending_at_its_clean_shutdown_keeps_its_prepared_segment_and_takes_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    three_batches(dir.path());
    {
        let (wal, _) = reopen_clean(dir.path(), small(64 * 1024, 1024), Lsn(5)).expect("open");
        wal.prepare_next_segment().expect("prepare");
    }
    let (wal, report) = reopen_clean(dir.path(), small(64 * 1024, 1024), Lsn(5)).expect("open");
    assert_eq!(report.last_lsn, Lsn(5));
    assert_eq!((report.truncated_bytes, report.truncated_at), (0, None));
    assert!(seg_path(dir.path(), 2).exists(), "the empty prepared segment is kept");
    assert_eq!(wal.append(&[b"after"]).expect("append"), Lsn(6));
    assert_eq!(read_all(&wal).len(), 6);
}

#[test]
fn a_clean_shutdown_the_log_does_not_reach_still_looks_for_later_acks() {
    let dir = tempfile::tempdir().expect("tempdir");
    three_batches(dir.path());
    let path = seg_path(dir.path(), 1);
    let mut bytes = read_file(&path);
    // Inside the payload of LSN 1: the chain stops at LSN 0, short of the
    // clean end, so the later writes' ack watermarks are looked for.
    bytes[SEGMENT_HEADER_BYTES as usize + RECORD_HEADER_BYTES + 2] ^= 0x01;
    write_file(&path, &bytes);
    match reopen_clean(dir.path(), small(64 * 1024, 1024), Lsn(5)) {
        Err(Error::Corrupt { file, offset, .. }) => {
            assert_eq!((file, offset), (path, SEGMENT_HEADER_BYTES));
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_checkpoint_past_the_end_of_the_log_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    three_batches(dir.path());
    let opened = reopen(
        fs(),
        dir.path(),
        DB,
        small(64 * 1024, 1024),
        SegmentId(1),
        Lsn(9),
    );
    assert!(matches!(opened, Err(Error::Corrupt { .. })), "{opened:?}");
}

#[test]
fn concurrent_appenders_share_fsyncs_and_every_ack_survives() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = small(64 * 1024, 1024);
    let wal = Arc::new(Wal::create(fs(), dir.path(), DB, options.clone()).expect("create"));
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let wal = Arc::clone(&wal);
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0..60u8 {
                    let a = [t, i, 0];
                    let b = [t, i, 1];
                    let batch: Vec<&[u8]> = if i % 3 == 0 { vec![&a, &b] } else { vec![&a] };
                    let last = wal.append(&batch).expect("append");
                    let first = last.0 + 1 - batch.len() as u64;
                    for (k, payload) in batch.iter().enumerate() {
                        acked.push((Lsn(first + k as u64), payload.to_vec()));
                    }
                    if i % 20 == 0 {
                        wal.prepare_next_segment().expect("prepare");
                    }
                }
                acked
            })
        })
        .collect();
    let mut acked: Vec<(Lsn, Vec<u8>)> = threads
        .into_iter()
        .flat_map(|h| h.join().expect("join"))
        .collect();
    acked.sort();
    let stats = wal.stats();
    assert_eq!(stats.appends, 8 * 60);
    assert!(
        stats.fsyncs < stats.appends,
        "group commit shares fsyncs: {stats:?}"
    );
    assert!(wal.first_segment() == SegmentId(1));
    drop(wal);
    let (wal, report) =
        reopen(fs(), dir.path(), DB, options, SegmentId(1), Lsn::ZERO).expect("open");
    assert!(report.segments_scanned > 1, "the test must rotate");
    let all = read_all(&wal);
    assert_eq!(
        all, acked,
        "every acknowledged LSN holds its payload, gap-free"
    );
    assert_eq!(all.last().map(|r| r.0), Some(Lsn(all.len() as u64)));
}

/// `FsStorage` whose files fail `sync_data` while the switch is on.
#[derive(Debug)]
struct FailingSync {
    inner: FsStorage,
    fail: Arc<AtomicBool>,
}

#[derive(Debug)]
struct FailingFile {
    inner: Box<dyn StorageFile>,
    fail: Arc<AtomicBool>,
}

impl StorageFile for FailingFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, data)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.inner.set_len(len_bytes)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected EIO"));
        }
        self.inner.sync_data()
    }
}

impl Storage for FailingSync {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.inner.open(path, mode)?;
        Ok(Box::new(FailingFile {
            inner,
            fail: Arc::clone(&self.fail),
        }))
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.inner.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        self.inner.lock_dir(dir)
    }
}

#[test]
fn fsync_failure_poisons_until_reopen_which_keeps_the_acknowledged_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fail = Arc::new(AtomicBool::new(false));
    let storage: Arc<dyn Storage> = Arc::new(FailingSync {
        inner: FsStorage::new(),
        fail: Arc::clone(&fail),
    });
    let wal = Wal::create(storage, dir.path(), DB, small(64 * 1024, 1024)).expect("create");
    assert_eq!(wal.append(&[b"one"]).expect("append"), Lsn(1));
    assert_eq!(wal.append(&[b"two"]).expect("append"), Lsn(2));
    fail.store(true, Ordering::SeqCst);
    match wal.append(&[b"three"]) {
        Err(Error::Poisoned { cause }) => {
            // The flush's own error, typed: an I/O error naming the segment.
            let Error::Io { path, source, .. } = cause.as_ref() else {
                panic!("the poison is the flush's I/O error: {cause:?}");
            };
            assert!(source.to_string().contains("injected EIO"), "{cause}");
            assert!(path.ends_with("00000000000000000001.wal"), "{cause}");
        }
        other => panic!("expected Poisoned, got {other:?}"),
    }
    fail.store(false, Ordering::SeqCst);
    assert!(matches!(
        wal.append(&[b"four"]),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(wal.append(&[]), Err(Error::Poisoned { .. })));
    assert_eq!(wal.durable_lsn(), Lsn(2));
    drop(wal);
    let (wal, report) = reopen(
        fs(),
        dir.path(),
        DB,
        small(64 * 1024, 1024),
        SegmentId(1),
        Lsn::ZERO,
    )
    .expect("reopen");
    assert!(report.last_lsn >= Lsn(2));
    let all = read_all(&wal);
    assert_eq!(
        all[..2],
        [(Lsn(1), b"one".to_vec()), (Lsn(2), b"two".to_vec())]
    );
}

/// A log whose records spill into segments 1..=3.
fn three_segments(dir: &Path) -> WalOptions {
    let options = small(8 * 1024, 1024);
    let wal = Wal::create(fs(), dir, DB, options.clone()).expect("create");
    let payload = [7u8; 1000];
    for _ in 0..10 {
        wal.append(&[&payload]).expect("append");
    }
    assert!(wal.stats().inline_prepares >= 2);
    options
}

#[test]
fn foreign_version_and_gap_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = three_segments(dir.path());
    let opened = reopen(
        fs(),
        dir.path(),
        DatabaseId(1),
        options.clone(),
        SegmentId(1),
        Lsn::ZERO,
    );
    assert!(matches!(opened, Err(Error::ForeignFile { found, .. }) if found == DB));

    let path = seg_path(dir.path(), 2);
    let pristine = read_file(&path);
    let mut bytes = pristine.clone();
    bytes[8] = 3; // The format version field.
    write_file(&path, &bytes);
    let opened = reopen(
        fs(),
        dir.path(),
        DB,
        options.clone(),
        SegmentId(1),
        Lsn::ZERO,
    );
    assert!(
        matches!(
            opened,
            Err(Error::UnsupportedFormat {
                found: 3,
                supported: 2,
                ..
            })
        ),
        "{opened:?}"
    );
    write_file(&path, &pristine);

    FsStorage::new().remove_file(&path).expect("remove");
    match reopen(fs(), dir.path(), DB, options, SegmentId(1), Lsn::ZERO) {
        Err(Error::Corrupt { file, .. }) => assert_eq!(file, path),
        other => panic!("expected Corrupt for the gap, got {other:?}"),
    }
}

/// A stale manifest (an older copy chosen after the newer one was damaged)
/// names segments and a checkpoint that the log has moved past. Recovery
/// must refuse it: opened as an empty log, the next append would take an
/// LSN below its segment header's first one, and the open after that would
/// drop the acknowledged record (found by the `recover_image` fuzz target,
/// `fuzz/corpus/recover_image/reopen-lost-ack-after-empty-recovery`).
#[test]
fn a_log_whose_oldest_records_are_gone_is_corrupt_not_restarted_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = three_segments(dir.path());
    // Garbage collection let segment 1 go; the stale manifest names it.
    FsStorage::new()
        .remove_file(&seg_path(dir.path(), 1))
        .expect("remove");
    match reopen(fs(), dir.path(), DB, options.clone(), SegmentId(1), Lsn::ZERO) {
        Err(Error::Corrupt { file, reason, .. }) => {
            assert_eq!(file, seg_path(dir.path(), 1));
            assert!(reason.contains("missing"), "{reason}");
        }
        other => panic!("expected Corrupt for the missing first segment, got {other:?}"),
    }
    // Segment 2 lost its records too, and nothing follows it: the log
    // would read as empty, yet its header says records 1.. came before.
    let header = read_file(&seg_path(dir.path(), 2));
    let promised = SegmentHeader::decode(&header[..SEGMENT_HEADER_BYTES as usize])
        .expect("an intact header")
        .first_lsn;
    assert!(promised > Lsn(1), "segment 2 starts past LSN 1: {promised}");
    cut_file(&seg_path(dir.path(), 2), SEGMENT_HEADER_BYTES + 10);
    for name in FsStorage::new().list_dir(dir.path()).expect("list") {
        if format::parse_segment_file_name(&name).is_some_and(|id| id > SegmentId(2)) {
            FsStorage::new()
                .remove_file(&dir.path().join(name))
                .expect("remove");
        }
    }
    match reopen(fs(), dir.path(), DB, options, SegmentId(2), Lsn::ZERO) {
        Err(Error::Corrupt { file, offset, reason }) => {
            assert_eq!((&file, offset), (&seg_path(dir.path(), 2), 0), "{reason}");
            assert!(reason.contains(&format!("start at {promised}")), "{reason}");
        }
        other => panic!("expected Corrupt for the missing records, got {other:?}"),
    }
}

#[test]
fn oversized_records_and_batches_are_refused_with_both_sizes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::create(fs(), dir.path(), DB, small(8 * 1024, 1024)).expect("create");
    let big = vec![0u8; 1025];
    assert!(matches!(
        wal.append(&[&big]),
        Err(Error::RecordTooLarge {
            size_bytes: 1025,
            max_bytes: 1024
        })
    ));
    let ok = vec![0u8; 1024];
    let five: Vec<&[u8]> = vec![&ok; 5];
    assert!(matches!(
        wal.append(&five),
        Err(Error::RecordTooLarge {
            size_bytes: 5320,
            max_bytes: 4096
        })
    ));
    assert_eq!(wal.append(&[]).expect("empty batch"), Lsn::ZERO);
    let bad = Wal::create(fs(), &dir.path().join("x"), DB, small(8 * 1024, 4096));
    assert!(matches!(bad, Err(Error::InvalidConfig { .. })));
}

#[test]
fn stale_records_of_a_recycled_segment_file_are_not_accepted() {
    let old = tempfile::tempdir().expect("tempdir");
    let options = small(16 * 1024, 1024);
    {
        let wal = Wal::create(fs(), old.path(), DB, options.clone()).expect("create");
        for i in 1..=10u8 {
            wal.append(&[&[i]]).expect("append");
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let wal = Wal::create(fs(), dir.path(), DB, options.clone()).expect("create");
        for i in 1..=5u8 {
            wal.append(&[&[i + 100]]).expect("append");
        }
    }
    // Segment 2 reuses the old segment 1's file: new header, old records
    // (LSNs 6..=10 would even continue the sequence).
    let mut recycled = read_file(&seg_path(old.path(), 1));
    let header = SegmentHeader {
        database: DB,
        segment: SegmentId(2),
        first_lsn: Lsn(6),
    };
    recycled[..SEGMENT_HEADER_BYTES as usize].copy_from_slice(&header.encode());
    write_file(&seg_path(dir.path(), 2), &recycled);
    let (wal, report) =
        reopen(fs(), dir.path(), DB, options, SegmentId(1), Lsn::ZERO).expect("open");
    assert_eq!(report.last_lsn, Lsn(5));
    let payloads: Vec<Vec<u8>> = read_all(&wal).into_iter().map(|(_, p)| p).collect();
    assert_eq!(payloads, (101..=105u8).map(|i| vec![i]).collect::<Vec<_>>());
}

/// The records of `wal` from `from` on, their LSNs and first bytes.
fn lsns_and_bytes(wal: &Wal, from: Lsn) -> Vec<(Lsn, u8)> {
    wal.read_from(from)
        .expect("read")
        .map(|r| r.map(|(lsn, bytes)| (lsn, bytes[0])))
        .collect::<Result<Vec<_>, _>>()
        .expect("records read back")
}

/// A checkpoint names the oldest live segment in the manifest, then removes
/// the segments before it, while commits go on: a rotation in between,
/// when the active segment ended exactly at the covered LSN, makes that
/// segment covered too, and it must stay (the manifest names it). Found by
/// `snapshots_of_a_live_database`, where the engine asserted that the
/// removal matched the manifest.
#[test]
fn a_rotation_between_naming_the_oldest_live_segment_and_removing_keeps_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::create(fs(), dir.path(), DB, small(8 * 1024, 1024)).expect("create");
    // Four records of 1024 bytes fill a segment: 12 fill segments 1..=3.
    let payload = |byte: u8| [byte; 1024 - RECORD_HEADER_BYTES];
    for k in 1..=12u8 {
        wal.append(&[&payload(k)]).expect("append");
    }
    let named = wal.first_live_segment_after(Lsn(12));
    assert_eq!(named, SegmentId(3), "segment 3 is still the active one");
    // The rotation: record 13 opens segment 4, and segment 3 is covered.
    wal.append(&[&payload(13)]).expect("append");
    assert_eq!(wal.first_live_segment_after(Lsn(12)), SegmentId(4));
    assert_eq!(wal.remove_segments_before(named).expect("gc"), named);
    assert!(
        FsStorage::new()
            .exists(&seg_path(dir.path(), 3))
            .expect("exists")
    );
    let kept = wal
        .read_from(Lsn(9))
        .expect("records 9.. are live")
        .collect::<Result<Vec<_>, _>>()
        .expect("records");
    assert_eq!(kept.len(), 5, "records 9..=13 stay");
}

#[test]
fn covered_segments_become_spares_that_later_rotations_recycle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = small(8 * 1024, 1024);
    let wal = Wal::create(fs(), dir.path(), DB, options.clone()).expect("create");
    // A record of 1024 bytes fills its group's space exactly: segments hold
    // four, 12 fill segments 1..=3, and the next three go to the prepared
    // segment 4.
    let payload = |byte: u8| [byte; 1024 - RECORD_HEADER_BYTES];
    for k in 1..=12u8 {
        wal.append(&[&payload(k)]).expect("append");
    }
    wal.prepare_next_segment().expect("prepare");
    let before = wal.stats().inline_prepares;
    for k in 13..=15u8 {
        wal.append(&[&payload(k)]).expect("append");
    }
    assert_eq!(
        wal.stats().inline_prepares,
        before,
        "rotation used the prepared segment"
    );
    let first = wal.remove_covered_segments(Lsn(9)).expect("gc");
    assert_eq!(first, SegmentId(3));
    let exists = |id| {
        FsStorage::new()
            .exists(&seg_path(dir.path(), id))
            .expect("exists")
    };
    assert!(
        exists(1) && exists(2),
        "covered segments are kept as spares"
    );
    assert!(matches!(
        wal.read_from(Lsn(1)),
        Err(Error::LsnOutOfRange { .. })
    ));
    assert!(matches!(
        wal.remove_covered_segments(Lsn(99)),
        Err(Error::InvalidConfig { .. })
    ));
    // Records 16..=20 fill segment 4 and rotate into segment 5, made from
    // the newest spare: renamed, its header rewritten, its old records
    // left in place but seeded with segment 2's number.
    for k in 16..=20u8 {
        wal.append(&[&payload(k)]).expect("append");
    }
    let stats = wal.stats();
    assert_eq!(stats.recycled, 1, "{stats:?}");
    assert_eq!(stats.inline_prepares, before + 1, "made on the commit path");
    assert!(exists(1) && !exists(2) && exists(5));
    let expected: Vec<(Lsn, u8)> = (9..=20u8).map(|k| (Lsn(u64::from(k)), k)).collect();
    assert_eq!(lsns_and_bytes(&wal, Lsn(9)), expected);
    drop(wal);
    // Reopen: the old records in segment 5 are not read as the log's, and
    // a leftover of the wrong size below the first segment is a spare
    // that the next rotation removes instead of reusing.
    write_file(&seg_path(dir.path(), 2), &[0u8; 10]);
    let (wal, report) = reopen(fs(), dir.path(), DB, options.clone(), first, Lsn(9)).expect("open");
    assert_eq!(report.last_lsn, Lsn(20));
    assert_eq!(lsns_and_bytes(&wal, Lsn(9)), expected);
    for k in 21..=28u8 {
        wal.append(&[&payload(k)]).expect("append");
    }
    let stats = wal.stats();
    assert_eq!(stats.recycled, 1, "segment 1 became segment 6: {stats:?}");
    assert_eq!(stats.inline_prepares, 2, "segment 7 was zero-filled");
    assert!(!exists(1) && !exists(2) && exists(6) && exists(7));
    drop(wal);
    let (wal, report) = reopen(fs(), dir.path(), DB, options, first, Lsn(9)).expect("open");
    assert_eq!(report.last_lsn, Lsn(28));
    let expected: Vec<(Lsn, u8)> = (9..=28u8).map(|k| (Lsn(u64::from(k)), k)).collect();
    assert_eq!(lsns_and_bytes(&wal, Lsn(9)), expected);
}

#[test]
fn wal_is_send_and_sync_and_reads_from_the_middle_of_a_segment() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Wal>();
    let dir = tempfile::tempdir().expect("tempdir");
    let options = three_segments(dir.path());
    let (wal, _) = reopen(fs(), dir.path(), DB, options, SegmentId(1), Lsn::ZERO).expect("open");
    let from_five: Vec<Lsn> = wal
        .read_from(Lsn(5))
        .expect("read")
        .map(|r| r.expect("record").0)
        .collect();
    assert_eq!(from_five, (5..=10).map(Lsn).collect::<Vec<_>>());
    assert_eq!(wal.read_from(Lsn(11)).expect("read at end").count(), 0);
    assert!(matches!(
        wal.read_from(Lsn(12)),
        Err(Error::LsnOutOfRange { .. })
    ));
}

/// Found by the storage campaign (seed 83): a batch torn at the end of a
/// segment is dropped by recovery; the next writer, in a higher epoch,
/// writes the next batch at the start of the next segment because it does
/// not fit the rest of this one. The torn batch's surviving records stay in
/// the old segment; the next recovery must continue in the new segment, not
/// stop at the old batch and call the newer records damage.
#[test]
fn a_torn_batch_rewritten_in_the_next_segment_continues_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = small(8 * 1024, 2048);
    {
        let wal = Wal::create(fs(), dir.path(), DB, options.clone()).expect("create");
        wal.append(&[&[1u8; 1500]]).expect("append");
        // A two-record batch: the second record will be torn.
        wal.append(&[&[2u8; 500], &[3u8; 500]]).expect("append");
    }
    let path = seg_path(dir.path(), 1);
    let mut bytes = read_file(&path);
    let second_group = format::align_up(SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES as u64 + 1500);
    let torn = second_group + RECORD_HEADER_BYTES as u64 + 500 + 100;
    bytes[usize::try_from(torn).expect("usize")] ^= 0xff;
    write_file(&path, &bytes);
    {
        let (wal, report) = reopen(
            fs(),
            dir.path(),
            DB,
            options.clone(),
            SegmentId(1),
            Lsn::ZERO,
        )
        .expect("open");
        assert_eq!(report.last_lsn, Lsn(1));
        assert!(report.truncated_bytes > 0, "{report:?}");
        // Too big for the rest of segment 1: it goes to segment 2.
        assert_eq!(wal.append(&[&[4u8; 2048]]).expect("append"), Lsn(2));
        assert_eq!(wal.append(&[&[5u8; 10]]).expect("append"), Lsn(3));
    }
    let (wal, report) =
        reopen(fs(), dir.path(), DB, options, SegmentId(1), Lsn::ZERO).expect("reopen");
    assert_eq!(report.last_lsn, Lsn(3));
    let payloads: Vec<Vec<u8>> = read_all(&wal).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        payloads,
        vec![vec![1u8; 1500], vec![4u8; 2048], vec![5u8; 10]]
    );
}

/// A write holding two batches is torn in its second batch: recovery keeps
/// the first, drops the second from its start (mid-write, not on a group
/// boundary), and zeroes the bytes up to the boundary, where the next
/// writer starts. Without the zeroing, the dropped batch's first record
/// would still follow the kept one (same epoch) on the next open.
#[test]
fn a_write_torn_in_its_second_batch_keeps_the_first_and_the_next_writer_follows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = small(16 * 1024, 1024);
    {
        let wal = Wal::create(fs(), dir.path(), DB, options.clone()).expect("create");
        wal.append(&[b"one".as_slice()]).expect("append");
    }
    // Craft the next write by hand: batch [2], batch [3, 4], 4 torn.
    let path = seg_path(dir.path(), 1);
    let mut bytes = read_file(&path);
    let seed = format::record_seed(DB, SegmentId(1));
    let at = format::align_up(SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES as u64 + 3);
    let mut write = Vec::new();
    for (lsn, more, group_end, payload) in [
        (2, false, false, b"two".as_slice()),
        (3, true, false, b"three".as_slice()),
        (4, false, true, b"four".as_slice()),
    ] {
        let meta = format::RecordMeta {
            lsn: Lsn(lsn),
            ack: Lsn(1),
            epoch: super::FIRST_EPOCH,
            more,
            group_end,
        };
        format::encode_record(&mut write, seed, meta, payload);
    }
    let start = usize::try_from(at).expect("usize");
    bytes[start..start + write.len()].copy_from_slice(&write);
    let last = bytes.len().min(start + write.len()) - 1;
    bytes[last] ^= 0xff; // The payload of LSN 4.
    write_file(&path, &bytes);
    let third_at = at + RECORD_HEADER_BYTES as u64 + 3;
    {
        let (wal, report) = reopen(
            fs(),
            dir.path(),
            DB,
            options.clone(),
            SegmentId(1),
            Lsn::ZERO,
        )
        .expect("open");
        assert_eq!(report.last_lsn, Lsn(2));
        assert_eq!(report.truncated_at, Some((path.clone(), third_at)));
        assert_eq!(
            wal.append(&[b"three again".as_slice()]).expect("append"),
            Lsn(3)
        );
    }
    let after = read_file(&path);
    let gap = usize::try_from(third_at).expect("usize")
        ..usize::try_from(format::align_up(third_at)).expect("usize");
    assert!(
        after[gap].iter().all(|&b| b == 0),
        "the gap up to the boundary is zeroed"
    );
    let (wal, report) =
        reopen(fs(), dir.path(), DB, options, SegmentId(1), Lsn::ZERO).expect("reopen");
    assert_eq!(report.last_lsn, Lsn(3));
    let payloads: Vec<Vec<u8>> = read_all(&wal).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        payloads,
        vec![b"one".to_vec(), b"two".to_vec(), b"three again".to_vec()]
    );
}

/// A segment file cut short a few bytes after its last record, before the
/// next group boundary: recovery keeps both records and the writer goes on
/// in the next segment instead of writing past the file's end. Found by
/// the `recover_image` fuzz target.
#[test]
fn a_segment_cut_short_between_boundaries_reopens_and_takes_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = small(8 * 1024, 1024);
    let wal = Wal::create(fs(), dir.path(), DB, options.clone()).expect("create");
    let payload = [7u8; 100];
    assert_eq!(wal.append(&[&payload]).expect("append"), Lsn(1));
    assert_eq!(wal.append(&[&payload]).expect("append"), Lsn(2));
    drop(wal);
    // Record 2 starts at the first boundary after record 1.
    let end = SEGMENT_HEADER_BYTES + 512 + (RECORD_HEADER_BYTES + payload.len()) as u64;
    cut_file(&seg_path(dir.path(), 1), end + 10);
    let (wal, report) = reopen(
        fs(),
        dir.path(),
        DB,
        options.clone(),
        SegmentId(1),
        Lsn::ZERO,
    )
    .expect("open");
    assert_eq!(report.last_lsn, Lsn(2));
    assert_eq!(wal.append(&[&payload]).expect("append"), Lsn(3));
    drop(wal);
    let (wal, report) =
        reopen(fs(), dir.path(), DB, options, SegmentId(1), Lsn::ZERO).expect("reopen");
    assert_eq!(report.last_lsn, Lsn(3));
    assert_eq!(
        lsns_and_bytes(&wal, Lsn(1)),
        vec![(Lsn(1), 7), (Lsn(2), 7), (Lsn(3), 7)]
    );
}

/// An empty prepared segment cut short: recovery hands the writer its
/// (synced) length as its space, and the writer grows it before writing
/// past it, never past its end. Found by the `recover_image` fuzz target
/// (when such a file was removed instead).
#[test]
fn a_prepared_segment_cut_short_grows_before_it_is_written_past_its_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = small(8 * 1024, 1024);
    let wal = Wal::create(fs(), dir.path(), DB, options.clone()).expect("create");
    let payload = [5u8; 1024 - RECORD_HEADER_BYTES];
    for _ in 0..2 {
        wal.append(&[&payload]).expect("append");
    }
    wal.prepare_next_segment().expect("prepare");
    drop(wal);
    cut_file(&seg_path(dir.path(), 2), SEGMENT_HEADER_BYTES + 100);
    let (wal, report) = reopen(
        fs(),
        dir.path(),
        DB,
        options.clone(),
        SegmentId(1),
        Lsn::ZERO,
    )
    .expect("open");
    assert_eq!(report.last_lsn, Lsn(2));
    for _ in 0..6 {
        wal.append(&[&payload]).expect("append across the rotation");
    }
    drop(wal);
    let (wal, report) =
        reopen(fs(), dir.path(), DB, options, SegmentId(1), Lsn::ZERO).expect("reopen");
    assert_eq!(report.last_lsn, Lsn(8));
    assert_eq!(lsns_and_bytes(&wal, Lsn(1)).len(), 8);
}

/// A segment starts at its first step and doubles ahead of need, each step
/// zero-filled and synced off the commit path, up to the segment size; a
/// write that finds the space too short grows it on the commit path
/// (counted apart); a recycled file keeps the size it grew to; every
/// record reads back after a reopen.
#[test]
fn a_segment_grows_ahead_in_doubling_steps_up_to_its_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = WalOptions {
        segment_size_bytes: 64 * 1024,
        segment_first_step_bytes: 8 * 1024,
        max_record_bytes: 8 * 1024,
        ..WalOptions::default()
    };
    let wal = Wal::create(fs(), dir.path(), DB, options.clone()).expect("create");
    let len = |id| read_file(&seg_path(dir.path(), id)).len() as u64;
    assert_eq!(len(1), 8 * 1024, "a new segment is its first step");
    assert!(!wal.grow_wanted());
    assert!(!wal.grow_ahead().expect("grow"), "nothing to grow yet");
    let payload = [7u8; 1000];
    let mut sizes = vec![len(1)];
    let mut appended = 0u64;
    // 64 KiB of records fill segment 1: every step is taken ahead of need.
    while wal.stats().grows < 3 {
        wal.append(&[&payload]).expect("append");
        appended += 1;
        if wal.grow_wanted() {
            assert!(wal.grow_ahead().expect("grow"));
            sizes.push(len(1));
        }
        assert!(appended < 64, "grows stopped");
    }
    assert_eq!(sizes, vec![8 * 1024, 16 * 1024, 32 * 1024, 64 * 1024]);
    assert_eq!(wal.stats().inline_grows, 0, "{:?}", wal.stats());
    // The next segment, prepared at its first step, is too short for a
    // batch of 6 KiB: the writer grows it itself.
    wal.prepare_next_segment().expect("prepare");
    assert_eq!(len(2), 8 * 1024);
    let big = [9u8; 6 * 1024];
    // Bounded: segment 1 holds at most 64 KiB of them.
    while len(2) == 8 * 1024 {
        wal.append(&[&big]).expect("append a big record");
        appended += 1;
        assert!(appended < 100, "never rotated");
    }
    let stats = wal.stats();
    assert_eq!(stats.inline_prepares, 0, "{stats:?}");
    assert!(stats.inline_grows >= 1, "{stats:?}");
    assert!(len(2) <= 64 * 1024);
    drop(wal);
    let (wal, report) =
        reopen(fs(), dir.path(), DB, options, SegmentId(1), Lsn::ZERO).expect("reopen");
    assert_eq!(report.last_lsn, Lsn(appended));
    assert_eq!(read_all(&wal).len() as u64, appended);
}

#[test]
fn a_close_shrinks_a_covered_log_to_first_steps_and_it_reopens_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = small(8 * 1024, 1024);
    let first_step = options.first_step_bytes();
    let wal = Wal::create(fs(), dir.path(), DB, options.clone()).expect("create");
    // Four records of 1024 bytes fill a segment: 15 fill segments 1..=3
    // and grow segment 4 past its first step.
    let payload = |byte: u8| [byte; 1024 - RECORD_HEADER_BYTES];
    for k in 1..=15u8 {
        wal.append(&[&payload(k)]).expect("append");
    }
    assert!(
        !wal.shrink_at_close(Lsn(15)).expect("shrink"),
        "segments 1..=3 are still live"
    );
    // Segments 1 and 2 are kept as spares, 3 removed; 2 becomes segment 5.
    assert_eq!(
        wal.remove_covered_segments(Lsn(14)).expect("gc"),
        SegmentId(4)
    );
    wal.prepare_next_segment().expect("prepare");
    assert!(
        !wal.shrink_at_close(Lsn(14)).expect("shrink"),
        "record 15 is not covered"
    );
    assert_eq!(wal.append(&[&payload(16)]).expect("append"), Lsn(16));
    let len = |id| read_file(&seg_path(dir.path(), id)).len() as u64;
    assert!(len(4) > first_step && len(5) > first_step);
    assert!(wal.shrink_at_close(Lsn(16)).expect("shrink"));
    assert!(matches!(
        wal.append(&[&payload(17)]),
        Err(Error::Poisoned { .. })
    ));
    drop(wal);
    let exists = |id| {
        FsStorage::new()
            .exists(&seg_path(dir.path(), id))
            .expect("exists")
    };
    assert!(!exists(1) && !exists(2) && !exists(3), "the spares are gone");
    assert_eq!((len(4), len(5)), (first_step, first_step));
    // The covered records are gone with the old segment 4; the log ends
    // at the checkpoint and goes on from it.
    let (wal, report) = reopen(fs(), dir.path(), DB, options.clone(), SegmentId(4), Lsn(16))
        .expect("open");
    assert_eq!(report.last_lsn, Lsn(16));
    assert_eq!(report.truncated_bytes, 0);
    assert!(lsns_and_bytes(&wal, Lsn::ZERO).is_empty());
    for k in 17..=22u8 {
        assert_eq!(wal.append(&[&payload(k)]).expect("append"), Lsn(u64::from(k)));
    }
    drop(wal);
    let (wal, report) =
        reopen(fs(), dir.path(), DB, options, SegmentId(4), Lsn(16)).expect("open");
    assert_eq!(report.last_lsn, Lsn(22));
    let expected: Vec<(Lsn, u8)> = (17..=22u8).map(|k| (Lsn(u64::from(k)), k)).collect();
    assert_eq!(lsns_and_bytes(&wal, Lsn::ZERO), expected);
}

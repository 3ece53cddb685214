//! Fuzz target `recover_image`: damage a real database directory image on
//! the simulated disk, then recover it.
//!
//! Input: a shape byte (how many batches, whether to checkpoint, prepare a
//! spare segment and close cleanly), then edits of five bytes each (kind,
//! file, offset as `u16`, value) applied to the image's files: xor a byte,
//! set a byte, or cut the file short. The edits are synced, then
//! `Db::open` runs recovery on the damaged image.
//!
//! **Invariant:** `Db::open` returns `Ok` or `Err`, never panics; if it
//! opens, every record it reads back is one that was appended, at the LSN it
//! was given (the record checksums are seeded, so damage cannot forge one),
//! the log reads back without error, takes a new append, and reopens to
//! the same records.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use actum::db::{Db, DbOptions};
use actum::wal::WalOptions;
use actum::{DatabaseId, Lsn, OpenMode, Storage};

use super::bytes::Bytes;
use crate::clock::SimClock;
use crate::disk::{FaultConfig, SimDisk};
use crate::rng::Rng;

/// The database directory on the simulated disk.
const DB_DIR: &str = "/db";
/// Small segments, so a few batches span several of them.
const SEGMENT_SIZE_BYTES: u64 = 8192;
/// The largest record payload the image's log accepts.
const RECORD_BYTES_MAX: u64 = 1024;
/// Edits applied per input, at most.
const EDITS_MAX: usize = 64;
/// The payload appended after a successful recovery.
const AFTER_RECOVERY: &[u8] = b"appended after recovery";

/// Every record the image's log acknowledged, by LSN.
type Written = BTreeMap<Lsn, Vec<u8>>;

/// Runs the `recover_image` target on `data`.
pub fn recover_image(data: &[u8]) {
    let mut input = Bytes::new(data);
    let shape = input.u8();
    let disk = SimDisk::new(Rng::new(0), FaultConfig::none());
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let clock = SimClock::new(1_700_000_000_000);
    let mut written = build_image(&storage, &clock, shape);
    let files: Vec<String> = disk.snapshot().into_keys().collect();
    assert!(!files.is_empty(), "the image holds files");
    let mut edits = Vec::new();
    while !input.is_empty() && edits.len() < EDITS_MAX {
        let edit = Edit {
            kind: input.u8(),
            file: input.u8(),
            offset: input.u16(),
            value: input.u8(),
        };
        edit.apply(&storage, &files);
        edits.push(edit);
    }
    let Ok((db, _report)) = Db::open(Arc::clone(&storage), &clock, Path::new(DB_DIR), options())
    else {
        return; // Damage detected: what recovery is for.
    };
    let context = format!("shape {shape:#04x}, edits {edits:?}");
    let durable = read_back(&db, &written, &context);
    let lsn = db
        .wal()
        .append(&[AFTER_RECOVERY])
        .unwrap_or_else(|error| panic!("append after recovery failed: {error}; {context}"));
    assert_eq!(
        lsn,
        durable.next(),
        "the next append follows the log; {context}"
    );
    written.insert(lsn, AFTER_RECOVERY.to_vec());
    assert_eq!(read_back(&db, &written, &context), lsn);
    drop(db);
    let (db, _report) = Db::open(Arc::clone(&storage), &clock, Path::new(DB_DIR), options())
        .unwrap_or_else(|error| panic!("a recovered log failed to reopen: {error}; {context}"));
    assert_eq!(
        read_back(&db, &written, &context),
        lsn,
        "reopen lost records; {context}"
    );
}

/// The options the image is written and recovered with.
fn options() -> DbOptions {
    DbOptions {
        wal: WalOptions {
            segment_size_bytes: SEGMENT_SIZE_BYTES,
            max_record_bytes: RECORD_BYTES_MAX,
            ..WalOptions::default()
        },
        database_id: Some(DatabaseId(0xac70_0f0a_2200)),
    }
}

/// Creates a database and appends batches to it as `shape` says; returns
/// what was acknowledged.
fn build_image(storage: &Arc<dyn Storage>, clock: &SimClock, shape: u8) -> Written {
    let (db, report) = Db::open(Arc::clone(storage), clock, Path::new(DB_DIR), options())
        .expect("creating a database on a fault-free disk succeeds");
    assert!(report.created);
    let batches = 4 + u64::from(shape & 0x07);
    let mut written = Written::new();
    for batch in 0..batches {
        let payloads: Vec<Vec<u8>> = (0..1 + batch % 3).map(|at| payload(batch, at)).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let last = db
            .wal()
            .append(&refs)
            .expect("appending on a fault-free disk succeeds");
        let first = last.0 + 1 - payloads.len() as u64;
        for (lsn, payload) in (first..=last.0).zip(payloads) {
            written.insert(Lsn(lsn), payload);
        }
        if shape & 0x08 != 0 && batch == batches / 2 {
            db.checkpoint(last)
                .expect("a checkpoint on a fault-free disk succeeds");
        }
    }
    if shape & 0x10 != 0 {
        db.wal()
            .prepare_next_segment()
            .expect("preparing a segment on a fault-free disk succeeds");
    }
    if shape & 0x20 == 0 {
        db.close()
            .expect("a clean close on a fault-free disk succeeds");
    }
    assert_eq!(
        written.len() as u64,
        written.keys().last().map_or(0, |l| l.0)
    );
    written
}

/// The payload of record `at` of batch `batch`: sized so a few batches
/// fill a segment, and distinct, so a record moved elsewhere is noticed.
fn payload(batch: u64, at: u64) -> Vec<u8> {
    let len = 40 + (batch * 97 + at * 31) % 400;
    let text = format!("batch {batch} record {at};");
    text.bytes().cycle().take(len as usize).collect()
}

/// Reads the whole log; every record must be one that was written, at its
/// LSN, in order, without a read error. Returns the durable LSN.
fn read_back(db: &Db, written: &Written, context: &str) -> Lsn {
    let durable = db.wal().durable_lsn();
    let records = db
        .wal()
        .read_from(Lsn::ZERO)
        .unwrap_or_else(|error| panic!("a recovered log refused to read: {error}; {context}"));
    let mut previous: Option<Lsn> = None;
    for record in records {
        let (lsn, payload) = record
            .unwrap_or_else(|error| panic!("a recovered log failed mid-read: {error}; {context}"));
        assert!(
            previous.is_none_or(|p| lsn == p.next()),
            "read {lsn} after {previous:?}; {context}"
        );
        assert!(
            written.get(&lsn) == Some(&payload),
            "recovery returned a record never written at {lsn} ({} bytes); {context}",
            payload.len()
        );
        previous = Some(lsn);
    }
    assert!(
        previous.is_none_or(|p| p == durable),
        "read up to {previous:?}, durable {durable}"
    );
    durable
}

/// One change to one file of the image.
#[derive(Clone, Copy, Debug)]
struct Edit {
    kind: u8,
    file: u8,
    offset: u16,
    value: u8,
}

impl Edit {
    /// Applies the edit to one of `files` (chosen modulo their number) and
    /// syncs it; an edit of an empty file or a failed call changes nothing.
    fn apply(&self, storage: &Arc<dyn Storage>, files: &[String]) {
        let path = Path::new(&files[usize::from(self.file) % files.len()]);
        let Ok(file) = storage.open(path, OpenMode::Existing) else {
            return;
        };
        let Ok(len) = file.len() else {
            return;
        };
        let offset = u64::from(self.offset);
        let done = match self.kind % 8 {
            7 => file.set_len(offset % (len + 1)),
            _ if len == 0 => return,
            6 => file.write_at(offset % len, &[self.value]),
            _ => {
                let at = offset % len;
                let mut byte = [0u8];
                if file.read_at(at, &mut byte).is_err() {
                    return;
                }
                file.write_at(at, &[byte[0] ^ self.value.max(1)])
            }
        };
        if done.is_ok() {
            // A fault-free disk cannot fail a sync; ignore it if it does.
            let _ = file.sync_data();
        }
    }
}

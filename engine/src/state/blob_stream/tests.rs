#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use redb::backends::InMemoryBackend;
use redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition, TableHandle, WriteTransaction};

use super::*;
use crate::books::digest_of;

const OLD_BLOBS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("books_blobs");

fn database() -> Database {
    Database::builder().create_with_backend(InMemoryBackend::new()).expect("in memory")
}

/// A blob of `len` bytes that differs with `seed`.
fn blob(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Runs `f` on a writer over `txn`'s blob tables (with the older blobs
/// table when `old` is set).
fn with_writer<T>(
    txn: &WriteTransaction,
    old: bool,
    f: impl FnOnce(&mut BlobWriter<'_, '_>) -> Result<T, redb::Error>,
) -> Result<T, redb::Error> {
    let mut index = txn.open_table(BLOB_INDEX_TABLE)?;
    let mut chunks = txn.open_table(BLOB_CHUNKS_TABLE)?;
    let mut counts = txn.open_table(BLOB_STREAM_TABLE)?;
    let mut old_table = if old { Some(txn.open_table(OLD_BLOBS)?) } else { None };
    let mut writer = BlobWriter {
        index: &mut index,
        chunks: &mut chunks,
        counts: &mut counts,
        old: old_table.as_mut(),
        loses_moves: false,
    };
    f(&mut writer)
}

fn write(db: &Database, f: impl FnOnce(&mut BlobWriter<'_, '_>) -> Result<(), redb::Error>) {
    let txn = db.begin_write().unwrap();
    with_writer(&txn, false, f).unwrap();
    txn.commit().unwrap();
}

/// The blob `digest` of `db`, read through a reader of a read snapshot.
fn try_read(db: &Database, digest: &Digest) -> Result<Option<Vec<u8>>, redb::Error> {
    let txn = db.begin_read()?;
    let index = txn.open_table(BLOB_INDEX_TABLE)?;
    let chunks = txn.open_table(BLOB_CHUNKS_TABLE)?;
    let reader = BlobReader::<_, _, redb::ReadOnlyTable<&[u8], &[u8]>> {
        index: Some(&index),
        chunks: Some(&chunks),
        old: None,
    };
    reader.read(digest)
}

fn read(db: &Database, digest: &Digest) -> Option<Vec<u8>> {
    try_read(db, digest).unwrap()
}

fn stream_of(db: &Database) -> Stream {
    let txn = db.begin_read().unwrap();
    Stream::read(&txn.open_table(BLOB_STREAM_TABLE).unwrap()).unwrap()
}

fn problems_of(db: &Database) -> Vec<String> {
    let txn = db.begin_read().unwrap();
    let index = txn.open_table(BLOB_INDEX_TABLE).unwrap();
    let chunks = txn.open_table(BLOB_CHUNKS_TABLE).unwrap();
    let counts = txn.open_table(BLOB_STREAM_TABLE).unwrap();
    problems(Some(&index), Some(&chunks), Some(&counts)).unwrap()
}

#[test]
fn blobs_of_every_size_read_back_across_chunk_edges_and_are_kept_once() {
    let db = database();
    let sizes = [0usize, 1, 35, 36, 1000, 4043, 4044, 4080, 4081, 9000, 20_000, 3];
    let blobs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, n)| blob(i as u64, *n)).collect();
    write(&db, |w| {
        for bytes in &blobs {
            w.put(&digest_of(bytes), bytes)?;
        }
        Ok(())
    });
    let stream = stream_of(&db);
    let total: u64 = sizes.iter().map(|n| RECORD_HEADER + *n as u64).sum();
    assert_eq!(stream, Stream { head: 0, end: total, live: total });
    // The same bytes again, in another transaction: nothing is appended.
    write(&db, |w| w.put(&digest_of(&blobs[4]), &blobs[4]));
    assert_eq!(stream_of(&db), stream);
    for bytes in &blobs {
        assert_eq!(read(&db, &digest_of(bytes)).as_deref(), Some(bytes.as_slice()));
    }
    assert_eq!(read(&db, &digest_of(b"never stored")), None);
    assert_eq!(problems_of(&db), Vec::<String>::new());
}

/// The point of the stream: chunk rows fill their leaves, where rows keyed
/// by random digests left a third of the blobs table's leaves empty.
#[test]
fn the_chunks_of_a_thousand_1_kb_blobs_fill_their_leaves() {
    let db = database();
    for round in 0..100u64 {
        write(&db, |w| {
            for i in 0..10 {
                let bytes = blob(round * 10 + i, 900 + (i as usize * 37) % 300);
                w.put(&digest_of(&bytes), &bytes)?;
            }
            Ok(())
        });
    }
    let txn = db.begin_read().unwrap();
    let stats = txn.open_table(BLOB_CHUNKS_TABLE).unwrap().stats().unwrap();
    let fill = stats.stored_bytes() as f64 / (stats.leaf_pages() * 4096) as f64;
    assert!(fill > 0.97, "chunk leaves {fill:.3} full ({stats:?})");
    let old_style = {
        let db = database();
        for round in 0..100u64 {
            let txn = db.begin_write().unwrap();
            {
                let mut table = txn.open_table(OLD_BLOBS).unwrap();
                for i in 0..10 {
                    let bytes = blob(round * 10 + i, 900 + (i as usize * 37) % 300);
                    table.insert(digest_of(&bytes).0.as_slice(), bytes.as_slice()).unwrap();
                }
            }
            txn.commit().unwrap();
        }
        let txn = db.begin_read().unwrap();
        let stats = txn.open_table(OLD_BLOBS).unwrap().stats().unwrap();
        stats.stored_bytes() as f64 / (stats.leaf_pages() * 4096) as f64
    };
    assert!(old_style < 0.8, "rows by digest were {old_style:.3} full");
}

#[test]
fn deleting_most_blobs_cleans_the_head_and_keeps_the_stream_under_twice_its_live_bytes() {
    let db = database();
    let blobs: Vec<Vec<u8>> = (0..400).map(|i| blob(i, 300 + (i as usize * 53) % 2500)).collect();
    write(&db, |w| {
        for bytes in &blobs {
            w.put(&digest_of(bytes), bytes)?;
        }
        Ok(())
    });
    // Delete three of every four, a transaction per twenty, checking the
    // bound and the books after each.
    let doomed: Vec<&Vec<u8>> = blobs.iter().enumerate().filter(|(i, _)| i % 4 != 0).map(|(_, b)| b).collect();
    for group in doomed.chunks(20) {
        write(&db, |w| {
            for bytes in group {
                w.remove(&digest_of(bytes))?;
            }
            Ok(())
        });
        let s = stream_of(&db);
        assert!(
            s.end - s.head <= 2 * s.live + 2 * 2800 + CHUNK_BYTES,
            "kept {} bytes for {} live",
            s.end - s.head,
            s.live
        );
        assert_eq!(problems_of(&db), Vec::<String>::new());
    }
    let s = stream_of(&db);
    assert!(s.head > 0, "the head moved: {s:?}");
    for (i, bytes) in blobs.iter().enumerate() {
        let kept = read(&db, &digest_of(bytes));
        assert_eq!(kept.is_some(), i % 4 == 0, "blob {i}");
        if let Some(kept) = kept {
            assert_eq!(&kept, bytes);
        }
    }
    // Chunks behind the head are gone; everything then removed leaves an
    // empty stream whose chunks go as its head passes them.
    let txn = db.begin_read().unwrap();
    let first = txn.open_table(BLOB_CHUNKS_TABLE).unwrap().first().unwrap().unwrap().0.value();
    assert_eq!(first, s.head / CHUNK_BYTES);
    drop(txn);
    write(&db, |w| {
        for bytes in blobs.iter().step_by(4) {
            w.remove(&digest_of(bytes))?;
        }
        Ok(())
    });
    let s = stream_of(&db);
    assert_eq!((s.live, s.head), (0, s.end), "{s:?}");
    let txn = db.begin_read().unwrap();
    assert!(txn.open_table(BLOB_CHUNKS_TABLE).unwrap().len().unwrap() <= 1);
}

#[test]
fn a_store_of_the_older_blobs_table_is_read_deleted_from_and_not_written_twice() {
    let db = database();
    let old = blob(1, 700);
    let txn = db.begin_write().unwrap();
    txn.open_table(OLD_BLOBS).unwrap().insert(digest_of(&old).0.as_slice(), old.as_slice()).unwrap();
    txn.commit().unwrap();
    let txn = db.begin_write().unwrap();
    with_writer(&txn, true, |w| {
        w.put(&digest_of(&old), &old)?;
        assert_eq!(Stream::read(&*w.counts)?, Stream::default(), "kept where it was");
        let reader = BlobReader { index: Some(&*w.index), chunks: Some(&*w.chunks), old: w.old.as_deref() };
        assert_eq!(reader.find(&digest_of(&old))?, Some(Found::Table));
        assert_eq!(reader.read(&digest_of(&old))?, Some(old.clone()));
        assert_eq!(reader.count()?, 1);
        w.remove(&digest_of(&old))?;
        let reader = BlobReader { index: Some(&*w.index), chunks: Some(&*w.chunks), old: w.old.as_deref() };
        assert_eq!(reader.find(&digest_of(&old))?, None);
        Ok(())
    })
    .unwrap();
    txn.commit().unwrap();
}

#[test]
fn damaged_chunks_and_counts_are_errors_that_name_them_never_panics() {
    let db = database();
    let a = blob(1, 5000);
    let b = blob(2, 100);
    write(&db, |w| {
        w.put(&digest_of(&a), &a)?;
        w.put(&digest_of(&b), &b)
    });
    // A chunk lost: reading across it names it.
    let txn = db.begin_write().unwrap();
    txn.open_table(BLOB_CHUNKS_TABLE).unwrap().remove(1).unwrap();
    txn.commit().unwrap();
    let e = try_read(&db, &digest_of(&a)).unwrap_err().to_string();
    assert!(e.contains("chunk 1") && e.contains("missing"), "{e}");
    let found = problems_of(&db);
    assert!(found.iter().any(|p| p.contains("chunk 1")), "{found:?}");
    // A header naming another blob, a length past every chunk, and counts
    // that do not add up: each an error.
    let txn = db.begin_write().unwrap();
    {
        let mut chunks = txn.open_table(BLOB_CHUNKS_TABLE).unwrap();
        let mut zero = chunks.get(0).unwrap().unwrap().value().to_vec();
        zero[4] ^= 0xff;
        zero[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        chunks.insert(0, zero.as_slice()).unwrap();
        txn.open_table(BLOB_STREAM_TABLE).unwrap().insert("live", 1 << 40).unwrap();
    }
    let outcome = with_writer(&txn, false, |w| w.remove(&digest_of(&a)));
    let e = outcome.unwrap_err().to_string();
    assert!(e.contains("offset 0") && e.contains("not blob"), "{e}");
    let outcome = with_writer(&txn, false, |w| w.put(&digest_of(b"new"), b"new"));
    let e = outcome.unwrap_err().to_string();
    assert!(e.contains("counts do not hold"), "{e}");
}

/// The layout docs/FORMAT.md ("Blob stream") promises: records of `len`
/// (u32 LE), digest and bytes laid end to end, chunks of 4,080 bytes, and
/// the counts under `head`, `end` and `live`.
#[test]
fn the_stream_layout_is_pinned() {
    assert_eq!((CHUNK_BYTES, RECORD_HEADER), (4080, 36));
    assert_eq!(
        (BLOB_CHUNKS_TABLE.name(), BLOB_INDEX_TABLE.name(), BLOB_STREAM_TABLE.name()),
        ("books_blob_chunks", "books_blob_index", "books_blob_stream")
    );
    let db = database();
    let long = vec![0xabu8; 4060];
    write(&db, |w| {
        w.put(&digest_of(b"ab"), b"ab")?;
        w.put(&digest_of(&long), &long)
    });
    let mut expected = vec![2, 0, 0, 0];
    expected.extend_from_slice(&digest_of(b"ab").0);
    expected.extend_from_slice(b"ab");
    expected.extend_from_slice(&[0xdc, 0x0f, 0, 0]); // 4,060
    expected.extend_from_slice(&digest_of(&long).0);
    expected.extend_from_slice(&long);
    assert_eq!(expected.len(), 38 + 36 + 4060);
    let txn = db.begin_read().unwrap();
    let chunks = txn.open_table(BLOB_CHUNKS_TABLE).unwrap();
    assert_eq!(chunks.get(0).unwrap().unwrap().value(), &expected[..4080]);
    assert_eq!(chunks.get(1).unwrap().unwrap().value(), &expected[4080..]);
    let index = txn.open_table(BLOB_INDEX_TABLE).unwrap();
    assert_eq!(index.get(digest_of(&long).0.as_slice()).unwrap().unwrap().value(), 38);
    let counts = txn.open_table(BLOB_STREAM_TABLE).unwrap();
    let keys: Vec<(String, u64)> = counts
        .iter()
        .unwrap()
        .map(|row| {
            let (k, v) = row.unwrap();
            (k.value().to_string(), v.value())
        })
        .collect();
    // `head` is still 0, so it is not written.
    assert_eq!(keys, vec![("end".to_string(), 4134), ("live".to_string(), 4134)]);
}

//! One segment file: prepare (create, fill, sync, rename) or recycle (an
//! old segment file renamed, its header rewritten), and open and validate
//! its header.
//!
//! **Invariant:** a file under a final segment name always holds a durable,
//! valid header and a durable, preallocated length of at least its first
//! step: it is built under a temporary name, zero-filled to the first step
//! (or recycled from an old segment file, whatever length it grew to),
//! `fdatasync`ed, and only then renamed (and the directory synced). It
//! grows later only in zero-filled, synced steps past the space the writer
//! may use ([`grow`]), and shrinks back to its first step only when it
//! holds no record of the log ([`cut_back`]); a clean close replaces a
//! segment whose records a checkpoint covers by a new empty one under the
//! same name, by rename ([`prepare`]). A recycled file's old records never
//! validate: their checksums are seeded with the old segment number.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{self, HeaderError, SEGMENT_HEADER_BYTES, SegmentHeader};
use super::options::WalOptions;
use crate::error::{Error, Result};
use crate::ids::{DatabaseId, Lsn, SegmentId};
use crate::planted::{PlantedBug, planted};
use crate::storage::{OpenMode, Storage, StorageFile};

/// Zero-fill chunk size used while preallocating.
const FILL_CHUNK_BYTES: usize = 1 << 20;

/// An open segment file.
#[derive(Debug)]
pub struct SegmentFile {
    /// The segment's number.
    pub id: SegmentId,
    /// Its path.
    pub path: PathBuf,
    /// The open file.
    pub file: Box<dyn StorageFile>,
    /// The file's length in bytes when it was opened or made: durable
    /// (synced when made, grown or recovered) and zero-filled or written.
    pub size_bytes: u64,
    /// The record checksum seed of this segment.
    pub seed: u32,
}

/// Creates segment `id` in `dir`: temp name, header, zero fill to the
/// first step (`options.first_step_bytes()`), `fdatasync`, rename,
/// directory sync. A file already named `id` is replaced whole by the
/// rename (a clean close replaces the active segment so; see
/// `Context::shrink_locked`).
pub fn prepare(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    database: DatabaseId,
    id: SegmentId,
    first_lsn: Lsn,
    options: &WalOptions,
) -> Result<SegmentFile> {
    let size_bytes = options.first_step_bytes();
    assert!(
        size_bytes > SEGMENT_HEADER_BYTES,
        "segment smaller than its header"
    );
    let temp = dir.join(format::temp_file_name(id));
    if storage
        .exists(&temp)
        .map_err(|e| Error::io("stat temp segment", &temp, e))?
    {
        storage
            .remove_file(&temp)
            .map_err(|e| Error::io("remove stale temp segment", &temp, e))?;
    }
    let file = storage
        .open(&temp, OpenMode::CreateNew)
        .map_err(|e| Error::io("create segment", &temp, e))?;
    let header = SegmentHeader {
        database,
        segment: id,
        first_lsn,
    };
    file.write_at(0, &header.encode())
        .map_err(|e| Error::io("write segment header", &temp, e))?;
    zero_fill(file.as_ref(), SEGMENT_HEADER_BYTES, size_bytes)
        .map_err(|e| Error::io("preallocate segment", &temp, e))?;
    install(storage, dir, (&temp, file, size_bytes), database, id, options)
}

/// Writes zeros over `from..to` of `file`, in bounded chunks.
fn zero_fill(file: &dyn StorageFile, from: u64, to: u64) -> std::io::Result<()> {
    let zeros = vec![0u8; FILL_CHUNK_BYTES];
    let mut offset = from;
    // Bounded by (to - from) / FILL_CHUNK_BYTES chunks.
    while offset < to {
        let chunk = usize::try_from((to - offset).min(FILL_CHUNK_BYTES as u64))
            .expect("chunk fits usize");
        file.write_at(offset, &zeros[..chunk])?;
        offset += chunk as u64;
    }
    assert_eq!(offset, to.max(from));
    Ok(())
}

/// Grows a segment's file from `from` to `to` bytes: zeros over `from..to`,
/// then `fdatasync`, which makes the zeros and the new length durable.
/// Only then may the caller let the writer use the new space: a crash
/// before that leaves a longer file whose bytes past `from` hold zeros,
/// old bytes or garbage, none of it a record the log ever acknowledged,
/// and recovery syncs each segment before it takes its length.
pub fn grow(file: &dyn StorageFile, path: &Path, from: u64, to: u64) -> Result<()> {
    assert!(from >= SEGMENT_HEADER_BYTES, "a grow never touches the header");
    zero_fill(file, from, to).map_err(|e| Error::io("grow segment", path, e))?;
    file.sync_data()
        .map_err(|e| Error::io("sync grown segment", path, e))
}

/// Cuts the file of a segment that holds no record of the log (a prepared
/// one) back to `to` bytes, then `fdatasync`s, which makes the new length
/// durable. A no-op if it is no longer than that. A crash before the sync
/// leaves it at either length; recovery keeps an empty next segment at
/// any length up to the segment size.
pub fn cut_back(segment: &SegmentFile, to: u64) -> Result<()> {
    assert!(to > SEGMENT_HEADER_BYTES, "a cut never reaches the header");
    let path = &segment.path;
    let len = segment
        .file
        .len()
        .map_err(|e| Error::io("stat segment to cut it back", path, e))?;
    if len <= to {
        return Ok(());
    }
    segment
        .file
        .set_len(to)
        .map_err(|e| Error::io("cut segment back to its first step", path, e))?;
    segment
        .file
        .sync_data()
        .map_err(|e| Error::io("sync segment cut back", path, e))
}

/// The common end of `prepare` and `recycle`: `fdatasync` the file built
/// under `temp`, rename it to segment `id`'s name, sync the directory.
fn install(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    (temp, file, size_bytes): (&Path, Box<dyn StorageFile>, u64),
    database: DatabaseId,
    id: SegmentId,
    options: &WalOptions,
) -> Result<SegmentFile> {
    let path = format::segment_path(dir, id);
    file.sync_data()
        .map_err(|e| Error::io("sync new segment", temp, e))?;
    storage
        .rename(temp, &path)
        .map_err(|e| Error::io("rename new segment", &path, e))?;
    if !planted(options, PlantedBug::SkipSegmentDirSync) {
        storage
            .sync_dir(dir)
            .map_err(|e| Error::io("sync wal directory", dir, e))?;
    }
    Ok(SegmentFile {
        id,
        path,
        file,
        size_bytes,
        seed: format::record_seed(database, id),
    })
}

/// Turns the old segment file at `old` (no longer needed by the log) into
/// segment `id`: rename to a temporary name, new header, `fdatasync`,
/// rename, directory sync. Only the header block is written; the rest keeps
/// the old bytes, whose checksums are seeded with the old segment number,
/// and the file keeps the length it grew to. `None` (the file removed) if
/// it is longer than `options.segment_size_bytes` (left by an open with
/// other options) or holds no more than a header.
pub fn recycle(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    old: &Path,
    database: DatabaseId,
    id: SegmentId,
    first_lsn: Lsn,
    options: &WalOptions,
) -> Result<Option<SegmentFile>> {
    let temp = dir.join(format::temp_file_name(id));
    storage
        .rename(old, &temp)
        .map_err(|e| Error::io("rename segment for reuse", old, e))?;
    let file = storage
        .open(&temp, OpenMode::Existing)
        .map_err(|e| Error::io("open recycled segment", &temp, e))?;
    let size_bytes = file
        .len()
        .map_err(|e| Error::io("stat recycled segment", &temp, e))?;
    if size_bytes > options.segment_size_bytes || size_bytes <= SEGMENT_HEADER_BYTES {
        drop(file);
        storage
            .remove_file(&temp)
            .map_err(|e| Error::io("remove odd-sized old segment", &temp, e))?;
        return Ok(None);
    }
    let header = SegmentHeader {
        database,
        segment: id,
        first_lsn,
    };
    if !planted(options, PlantedBug::RecycleKeepsOldHeader) {
        file.write_at(0, &header.encode())
            .map_err(|e| Error::io("write recycled segment header", &temp, e))?;
    }
    install(storage, dir, (&temp, file, size_bytes), database, id, options).map(Some)
}

/// Opens segment `id` and validates its header against `database` and `id`.
pub fn open(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    database: DatabaseId,
    id: SegmentId,
) -> Result<(SegmentFile, SegmentHeader)> {
    let path = format::segment_path(dir, id);
    let file = storage
        .open(&path, OpenMode::Existing)
        .map_err(|e| Error::io("open segment", &path, e))?;
    let size_bytes = file
        .len()
        .map_err(|e| Error::io("stat segment", &path, e))?;
    if size_bytes <= SEGMENT_HEADER_BYTES {
        return Err(Error::corrupt(&path, 0, "segment shorter than its header"));
    }
    let mut raw = vec![0u8; SEGMENT_HEADER_BYTES as usize];
    file.read_at(0, &mut raw)
        .map_err(|e| Error::io("read segment header", &path, e))?;
    let header = match SegmentHeader::decode(&raw) {
        Ok(header) => header,
        Err(HeaderError::Version(found)) => {
            return Err(Error::UnsupportedFormat {
                file: path,
                found,
                supported: format::FORMAT_VERSION,
            });
        }
        Err(HeaderError::Damaged(reason)) => return Err(Error::corrupt(&path, 0, reason)),
    };
    if header.database != database {
        return Err(Error::ForeignFile {
            file: path,
            expected: database,
            found: header.database,
        });
    }
    if header.segment != id {
        return Err(Error::corrupt(
            &path,
            0,
            format!(
                "header names {} but the file name says {id}",
                header.segment
            ),
        ));
    }
    let seed = format::record_seed(database, id);
    Ok((
        SegmentFile {
            id,
            path,
            file,
            size_bytes,
            seed,
        },
        header,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::FsStorage;

    #[test]
    fn prepared_segment_is_its_first_step_and_reopens_with_its_header() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        let made = prepare(
            &storage,
            dir.path(),
            DatabaseId(9),
            SegmentId(3),
            Lsn(5),
            &WalOptions {
                segment_size_bytes: 16384,
                segment_first_step_bytes: 8192,
                ..WalOptions::default()
            },
        )
        .expect("prepare");
        assert_eq!(made.file.len().expect("len"), 8192);
        assert_eq!(made.size_bytes, 8192);
        grow(made.file.as_ref(), &made.path, 8192, 16384).expect("grow");
        assert_eq!(made.file.len().expect("len"), 16384);
        let (opened, header) =
            open(&storage, dir.path(), DatabaseId(9), SegmentId(3)).expect("open");
        assert_eq!(header.first_lsn, Lsn(5));
        assert_eq!(opened.seed, made.seed);
        assert!(matches!(
            open(&storage, dir.path(), DatabaseId(8), SegmentId(3)),
            Err(Error::ForeignFile { .. })
        ));
        let names = storage.list_dir(dir.path()).expect("list");
        assert_eq!(names, vec![format::segment_file_name(SegmentId(3))]);
    }
}

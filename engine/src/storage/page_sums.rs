//! `PageSums`: a CRC-32 for every 4 KiB block of the state store, checked on
//! every read redb makes, so the page check at open need not read the whole
//! file.
//!
//! redb keeps a checksum for every page but checks them only in
//! `check_integrity`, a read of the whole file (seconds per GiB). The
//! engine's storage backend sees every read and write redb makes, so it
//! keeps a sum of its own per block: a write sets the sums of the blocks it
//! touches, a read is checked against them before redb sees its bytes, and
//! a clean close writes them to a file beside the store
//! (`<state file>.sums`, docs/FORMAT.md, "Page sums"). The next open loads
//! that file and checks pages as they are read instead of all at open; the
//! first write or size change of the store spoils it durably (its magic
//! zeroed) before it touches the store, so a session that only reads leaves
//! it whole. Whenever the file is
//! missing, damaged, spoiled (a crash since it was loaded), or describes
//! another length of store, the open falls back to redb's whole check,
//! which is what every open did before.
//!
//! **Invariant:** a sums file that is read back whole (its CRC matches)
//! describes the durable bytes of the store exactly as a clean close left
//! them: it is written only after every write of the store is synced, with
//! no I/O error and no mismatch seen since the store was opened, and it is
//! spoiled (synced) before the store's first write or size change after it
//! was loaded, and when a mismatch or a failure is met.
//!
//! A block's sum is *known* once its bytes came from a write of this
//! process, from the loaded file, or from a read during the whole check
//! (redb verifies those pages itself). A read of a block not known is taken
//! as it is and its sum recorded: redb reads only pages its committed state
//! references, and after a whole check every one of those is known, so this
//! is a free page, as unchecked as every read was before.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::traits::StorageFile;

/// Bytes per block with one sum.
pub const BLOCK_BYTES: u64 = 4096;

/// The sums file's first eight bytes.
pub const MAGIC: [u8; 8] = *b"actumsum";

/// The sums file's layout version.
pub const VERSION: u32 = 1;

/// Bytes before the first entry: magic, version, block size, flags, the
/// store's length, the entry count.
const HEADER_BYTES: usize = 8 + 4 + 4 + 4 + 4 + 8 + 8;

/// Flag: every known sum rests on a whole check of the store (at this open
/// or an earlier one) or on writes since, never on a read taken as it was
/// by an open without any check.
const FLAG_CHECKED: u32 = 1;

/// An entry for a block whose sum is not known.
const UNKNOWN: u64 = 0;

/// The bit that marks an entry as known; the low 32 bits are the CRC.
const KNOWN: u64 = 1 << 32;

/// The sums of one store, kept in memory while it is open.
#[derive(Debug)]
pub struct PageSums {
    /// The store's path, for errors.
    store: PathBuf,
    table: Mutex<Table>,
    /// Where the sums go at a clean close (`None`: nowhere).
    file: Option<Box<dyn StorageFile>>,
    /// The planted `PageSumsUnchecked`: a mismatch is read as data.
    unchecked: bool,
}

#[derive(Debug)]
struct Table {
    /// The store's length as the sums see it.
    store_len: u64,
    /// One entry per block: `UNKNOWN`, or `KNOWN | crc`.
    entries: Vec<u64>,
    /// Whether the known sums rest on a whole check (`FLAG_CHECKED`).
    checked: bool,
    /// A write or size change not yet synced.
    unsynced: bool,
    /// An I/O error or a mismatch was seen: the sums are not written back.
    failed: bool,
    /// Bytes written to the store through these sums since it was opened.
    written_bytes: u64,
    /// The sums file on disk may still read back whole (loaded, and not
    /// spoiled since): it must be spoiled before the store changes.
    whole_on_disk: bool,
    /// The store was written or resized since the sums were loaded.
    changed: bool,
    /// Whether the known sums rested on a whole check when loaded: a close
    /// after a session that wrote nothing rewrites the file only if this
    /// changed.
    loaded_checked: bool,
    /// The first mismatch a read met.
    mismatch: Option<PageSumMismatch>,
}

/// What the loaded sums file allows at open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// A whole sums file from a clean close that rests on a whole check:
    /// pages can be checked as they are read.
    Checked,
    /// A whole sums file whose sums rest on reads nothing checked (an open
    /// with the page check off): usable, but no substitute for the check.
    Unchecked,
    /// No usable sums file (missing, empty, damaged, of another length of
    /// store, or its first block disagrees).
    None,
}

/// A read whose bytes do not match the sum kept for their block: the
/// `io::Error` a read of the state store fails with, naming the file and
/// the block's offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageSumMismatch {
    /// The state store.
    pub file: PathBuf,
    /// The offset of the first byte of the block.
    pub offset: u64,
    /// The sum kept for the block.
    pub expected: u32,
    /// The sum of the bytes read.
    pub found: u32,
}

impl fmt::Display for PageSumMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the {BLOCK_BYTES}-byte block at offset {} of {} does not match the checksum kept for \
             it (expected {:#010x}, read {:#010x}): the file changed after it was written",
            self.offset,
            self.file.display(),
            self.expected,
            self.found
        )
    }
}

impl std::error::Error for PageSumMismatch {}

/// The `PageSumMismatch` inside `error`, if that is what it is.
#[cfg(test)]
pub fn mismatch_in(error: &io::Error) -> Option<&PageSumMismatch> {
    error.get_ref()?.downcast_ref::<PageSumMismatch>()
}

fn block_count(len: u64) -> usize {
    usize::try_from(len.div_ceil(BLOCK_BYTES)).expect("a block count fits in memory")
}

/// The extent `[start, end)` of block `block` of a store `len` bytes long.
fn extent(block: usize, len: u64) -> (u64, u64) {
    let start = block as u64 * BLOCK_BYTES;
    (start, (start + BLOCK_BYTES).min(len))
}

fn known(crc: u32) -> u64 {
    KNOWN | u64::from(crc)
}

/// The sum of `len` zero bytes.
fn zeros_crc(len: u64) -> u32 {
    let zeros = [0u8; BLOCK_BYTES as usize];
    crc32fast::hash(zeros.get(..len as usize).unwrap_or_default())
}

/// Encodes the sums file (docs/FORMAT.md, "Page sums").
fn encode(store_len: u64, entries: &[u64], checked: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + entries.len() * 8 + 4);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(BLOCK_BYTES as u32).to_le_bytes());
    out.extend_from_slice(&(if checked { FLAG_CHECKED } else { 0 }).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&store_len.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for entry in entries {
        out.extend_from_slice(&entry.to_le_bytes());
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a sums file: `(store length, entries, checked)`, or `None` for
/// anything but a whole, valid file of this version.
fn decode(bytes: &[u8]) -> Option<(u64, Vec<u64>, bool)> {
    let body_len = bytes.len().checked_sub(4)?;
    let (body, crc) = bytes.split_at(body_len);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return None;
    }
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
    };
    if body.get(..8)? != MAGIC
        || u32_at(8)? != VERSION
        || u64::from(u32_at(12)?) != BLOCK_BYTES
        || u32_at(20)? != 0
    {
        return None;
    }
    let flags = u32_at(16)?;
    if flags & !FLAG_CHECKED != 0 {
        return None;
    }
    let store_len = u64_at(24)?;
    let count = u64_at(32)?;
    if count != store_len.div_ceil(BLOCK_BYTES)
        || (body.len() - HEADER_BYTES) as u64 != count.checked_mul(8)?
    {
        return None;
    }
    let entries = body
        .get(HEADER_BYTES..)?
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("eight bytes")))
        .collect::<Vec<_>>();
    if entries
        .iter()
        .any(|&e| e != UNKNOWN && e & !(KNOWN | 0xffff_ffff) != 0)
    {
        return None;
    }
    Some((store_len, entries, flags & FLAG_CHECKED != 0))
}

impl PageSums {
    /// Loads the sums `file` (beside the store `store`, whose file is
    /// `data`) left by a clean close. The file is left as it is: the first
    /// write or size change through these sums spoils it durably first
    /// (its magic zeroed), so from then on only this handle's clean close
    /// makes it whole again, and a session that changes nothing leaves it
    /// whole, still true of the store.
    ///
    /// Fails only if the file cannot be read; a file that is not whole is
    /// `Loaded::None`, not an error.
    pub fn load(
        store: &Path,
        data: &dyn StorageFile,
        file: Option<Box<dyn StorageFile>>,
    ) -> io::Result<(PageSums, Loaded)> {
        let store_len = data.len()?;
        let mut loaded = None;
        let mut whole_on_disk = false;
        if let Some(file) = &file {
            let len = file.len()?;
            if len > 0 {
                // Only a file of the length these sums take is read at all.
                let expected = (HEADER_BYTES + 8 * block_count(store_len) + 4) as u64;
                let mut head = vec![0; len.min(MAGIC.len() as u64) as usize];
                if len == expected {
                    let mut bytes = vec![0; len as usize];
                    file.read_at(0, &mut bytes)?;
                    loaded = decode(&bytes).filter(|(len, _, _)| *len == store_len);
                    let n = head.len();
                    head.copy_from_slice(&bytes[..n]);
                } else {
                    file.read_at(0, &mut head)?;
                }
                // A file whose magic is already zeros was spoiled by an
                // earlier open; any other may read back whole (a torn or
                // stale one is refused by its CRC or length, but spoiling
                // it costs one write, and keeps the rule simple).
                whole_on_disk = head.iter().any(|&b| b != 0);
            }
        }
        let (entries, state) = match loaded {
            Some((_, entries, checked)) => {
                let state = if checked {
                    Loaded::Checked
                } else {
                    Loaded::Unchecked
                };
                (entries, state)
            }
            None => (vec![UNKNOWN; block_count(store_len)], Loaded::None),
        };
        let sums = PageSums {
            store: store.to_path_buf(),
            table: Mutex::new(Table {
                store_len,
                entries,
                checked: state == Loaded::Checked,
                unsynced: false,
                failed: false,
                written_bytes: 0,
                whole_on_disk,
                changed: false,
                loaded_checked: state == Loaded::Checked,
                mismatch: None,
            }),
            file,
            unchecked: false,
        };
        // The first block holds redb's header: if it disagrees, the file is
        // not the one these sums were written for (or it was damaged since),
        // and the whole check decides which.
        if state != Loaded::None && store_len > 0 {
            let (start, end) = extent(0, store_len);
            let mut first = vec![0; (end - start) as usize];
            data.read_at(start, &mut first)?;
            let mut table = sums.lock();
            if table.entries.first() != Some(&known(crc32fast::hash(&first))) {
                table.entries = vec![UNKNOWN; block_count(store_len)];
                table.checked = false;
                drop(table);
                return Ok((sums, Loaded::None));
            }
        }
        Ok((sums, state))
    }

    /// Plants `PageSumsUnchecked` (tests of the simulator only).
    pub fn plant_unchecked(&mut self, unchecked: bool) {
        self.unchecked = unchecked;
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that a whole check of the store passed: every known sum now
    /// rests on it.
    pub fn note_checked(&self) {
        self.lock().checked = true;
    }

    /// Notes that the store must not be taken as whole at its next open
    /// (damage found): no sums are written at close.
    pub fn note_failed(&self) {
        let mut table = self.lock();
        self.fail(&mut table);
    }

    /// Marks the sums failed (never written back) and, if the file on disk
    /// may still read back whole, spoils it: the next open must not trust
    /// sums this handle found wanting. (A spoil that fails is left to the
    /// whole check's fallback: the sums' first block, or the damage itself,
    /// is met again by the next open's reads.)
    fn fail(&self, table: &mut Table) {
        table.failed = true;
        let _ = self.spoil_on_disk(table);
    }

    /// Spoils the sums file durably if it may still read back whole: its
    /// magic overwritten with zeros (the length kept: a truncation frees
    /// the file's blocks) and synced. Called before the store's first
    /// write or size change, under the lock writes hold.
    fn spoil_on_disk(&self, table: &mut Table) -> io::Result<()> {
        if !table.whole_on_disk {
            return Ok(());
        }
        if let Some(file) = &self.file {
            file.write_at(0, &MAGIC.map(|_| 0))?;
            file.sync_data()?;
        }
        table.whole_on_disk = false;
        Ok(())
    }

    /// Whether the sums file may still read back whole: nothing has
    /// changed the store since it was loaded.
    #[cfg(test)]
    pub fn whole_on_disk(&self) -> bool {
        self.lock().whole_on_disk
    }

    /// The first mismatch a read met, if any.
    pub fn mismatch(&self) -> Option<PageSumMismatch> {
        self.lock().mismatch.clone()
    }

    /// `error` as the engine reports it: `Error::Corrupt` naming the store
    /// and the block if a read met a mismatch (redb reports it as an I/O
    /// error of its own), else `error` itself.
    pub fn corrupt_or(&self, error: crate::Error) -> crate::Error {
        match self.mismatch() {
            Some(m) => crate::Error::corrupt(m.file.clone(), m.offset, m.to_string()),
            None => error,
        }
    }

    /// How many blocks have a known sum, and how many blocks there are.
    pub fn known_blocks(&self) -> (usize, usize) {
        let table = self.lock();
        let known = table.entries.iter().filter(|&&e| e != UNKNOWN).count();
        (known, table.entries.len())
    }

    /// Bytes written to the store since it was opened (every write goes
    /// through [`PageSums::write`]).
    pub fn written_bytes(&self) -> u64 {
        self.lock().written_bytes
    }

    /// Reads `out.len()` bytes at `offset` of `data`, checking every block
    /// they touch against its sum.
    pub fn read(&self, data: &dyn StorageFile, offset: u64, out: &mut [u8]) -> io::Result<()> {
        if out.is_empty() {
            return data.read_at(offset, out);
        }
        let end = offset + out.len() as u64;
        let store_len = self.lock().store_len;
        if end > store_len {
            // Past the end as the sums know it: the file says what it is.
            return data.read_at(offset, out);
        }
        let first = (offset / BLOCK_BYTES) as usize;
        let last = ((end - 1) / BLOCK_BYTES) as usize;
        let start = first as u64 * BLOCK_BYTES;
        let stop = ((last as u64 + 1) * BLOCK_BYTES).min(store_len);
        let aligned = start == offset && stop == end;
        let mut whole = Vec::new();
        let bytes: &mut [u8] = if aligned {
            data.read_at(offset, out)?;
            out
        } else {
            whole.resize((stop - start) as usize, 0);
            data.read_at(start, &mut whole)?;
            &mut whole
        };
        let crcs = bytes
            .chunks(BLOCK_BYTES as usize)
            .map(crc32fast::hash)
            .collect::<Vec<_>>();
        let mut table = self.lock();
        for (k, crc) in crcs.into_iter().enumerate() {
            let block = first + k;
            let Some(entry) = table.entries.get(block).copied() else {
                continue;
            };
            if entry == UNKNOWN {
                if let Some(slot) = table.entries.get_mut(block) {
                    *slot = known(crc);
                }
            } else if entry != known(crc) {
                // A write may have changed the block between the read and
                // the lock: read it again under the lock, which writes hold.
                let (b_start, b_end) = extent(block, table.store_len);
                let mut again = vec![0; (b_end - b_start) as usize];
                data.read_at(b_start, &mut again)?;
                let again_crc = crc32fast::hash(&again);
                if entry != known(again_crc) && !self.unchecked {
                    let mismatch = PageSumMismatch {
                        file: self.store.clone(),
                        offset: b_start,
                        expected: entry as u32,
                        found: again_crc,
                    };
                    table.mismatch.get_or_insert_with(|| mismatch.clone());
                    self.fail(&mut table);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, mismatch));
                }
                let within = (b_start - start) as usize;
                if let Some(dst) = bytes.get_mut(within..within + again.len()) {
                    dst.copy_from_slice(&again);
                }
            }
        }
        drop(table);
        if !aligned {
            let from = (offset - start) as usize;
            out.copy_from_slice(
                whole
                    .get(from..from + out.len())
                    .expect("within the blocks read"),
            );
        }
        Ok(())
    }

    /// Writes `bytes` at `offset` of `data` and sets the sums of the blocks
    /// they touch.
    pub fn write(&self, data: &dyn StorageFile, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut table = self.lock();
        self.before_change(&mut table)?;
        table.unsynced = true;
        if let Err(e) = data.write_at(offset, bytes) {
            table.failed = true;
            return Err(e);
        }
        if bytes.is_empty() {
            return Ok(());
        }
        table.written_bytes = table.written_bytes.saturating_add(bytes.len() as u64);
        let end = offset + bytes.len() as u64;
        let old_len = table.store_len;
        let new_len = old_len.max(end);
        if new_len > old_len {
            Self::resize(&mut table, data, new_len)?;
        }
        let first = (offset / BLOCK_BYTES) as usize;
        let last = ((end - 1) / BLOCK_BYTES) as usize;
        for block in first..=last {
            let (b_start, b_end) = extent(block, new_len);
            let crc = if b_start >= offset && b_end <= end {
                let from = (b_start - offset) as usize;
                crc32fast::hash(
                    bytes
                        .get(from..from + (b_end - b_start) as usize)
                        .expect("a block inside the write"),
                )
            } else {
                Self::sum_from_file(&mut table, data, block)?
            };
            if let Some(slot) = table.entries.get_mut(block) {
                *slot = known(crc);
            }
        }
        Ok(())
    }

    /// Before the store changes: the sums file spoiled durably, if it may
    /// still read back whole (a crash after the change must not find it
    /// whole). A failure to spoil fails the change, before the store is
    /// touched.
    fn before_change(&self, table: &mut Table) -> io::Result<()> {
        table.changed = true;
        if let Err(e) = self.spoil_on_disk(table) {
            table.failed = true;
            return Err(e);
        }
        Ok(())
    }

    /// Reads block `block` back from `data` and returns its sum.
    fn sum_from_file(table: &mut Table, data: &dyn StorageFile, block: usize) -> io::Result<u32> {
        let (start, end) = extent(block, table.store_len);
        let mut bytes = vec![0; (end - start) as usize];
        if let Err(e) = data.read_at(start, &mut bytes) {
            table.failed = true;
            return Err(e);
        }
        Ok(crc32fast::hash(&bytes))
    }

    /// Sets the sums' idea of the store's length to `len` (the file already
    /// has it): blocks past it go, new blocks are zeros, and a last block
    /// whose extent changed is read back.
    fn resize(table: &mut Table, data: &dyn StorageFile, len: u64) -> io::Result<()> {
        let old_len = table.store_len;
        let old_blocks = table.entries.len();
        table.store_len = len;
        table.entries.resize(block_count(len), UNKNOWN);
        let new_blocks = table.entries.len();
        // A grow of many blocks (redb grows its file in large steps, inside
        // a checkpoint's commit) hashes one block of zeros, not each.
        let zero_block = zeros_crc(BLOCK_BYTES);
        for block in old_blocks..new_blocks {
            let (start, end) = extent(block, len);
            let crc = if end - start == BLOCK_BYTES {
                zero_block
            } else {
                zeros_crc(end - start)
            };
            if let Some(slot) = table.entries.get_mut(block) {
                *slot = known(crc);
            }
        }
        // The block the old length or the new one ends inside.
        for edge in [old_len, len] {
            if edge % BLOCK_BYTES != 0 && edge <= len {
                let block = (edge / BLOCK_BYTES) as usize;
                let crc = Self::sum_from_file(table, data, block)?;
                if let Some(slot) = table.entries.get_mut(block) {
                    *slot = known(crc);
                }
            }
        }
        Ok(())
    }

    /// Sets `data`'s length to `len` and the sums with it.
    pub fn set_len(&self, data: &dyn StorageFile, len: u64) -> io::Result<()> {
        let mut table = self.lock();
        self.before_change(&mut table)?;
        table.unsynced = true;
        if let Err(e) = data.set_len(len) {
            table.failed = true;
            return Err(e);
        }
        Self::resize(&mut table, data, len)
    }

    /// Syncs `data`; after a failure the sums are never written back.
    pub fn sync_data(&self, data: &dyn StorageFile) -> io::Result<()> {
        let mut table = self.lock();
        match data.sync_data() {
            Ok(()) => {
                table.unsynced = false;
                Ok(())
            }
            Err(e) => {
                self.fail(&mut table);
                Err(e)
            }
        }
    }

    /// At a clean close (the store's last user gone): makes every write of
    /// `data` durable and writes the sums file whole. Nothing is written
    /// after an I/O error or a mismatch (the file is spoiled if it was not
    /// yet), nor after a session that changed nothing (the loaded file is
    /// still whole and true), and a failure here only means the next open
    /// checks the whole store.
    pub fn close(&self, data: &dyn StorageFile) {
        let Some(file) = &self.file else {
            return;
        };
        let mut table = self.lock();
        // A close while unwinding (redb panicked on its way out) is no
        // clean close.
        if table.failed || std::thread::panicking() {
            self.fail(&mut table);
            return;
        }
        if !table.changed && table.whole_on_disk && table.checked == table.loaded_checked {
            // Nothing changed the store since the file was loaded, and it
            // was not spoiled: it still says what it said, and is true.
            return;
        }
        if table.unsynced && data.sync_data().is_err() {
            table.failed = true;
            return;
        }
        let bytes = encode(table.store_len, &table.entries, table.checked);
        // (The file an open spoiled keeps its length: cut only when the
        // store shrank.)
        let written = file
            .write_at(0, &bytes)
            .and_then(|()| file.len())
            .and_then(|len| {
                if len > bytes.len() as u64 {
                    file.set_len(bytes.len() as u64)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| file.sync_data());
        if written.is_err() {
            // Whatever landed does not read back whole (its CRC), or reads
            // back as what was meant.
            table.failed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{FsStorage, OpenMode, Storage};

    fn files(dir: &Path) -> (Box<dyn StorageFile>, Box<dyn StorageFile>) {
        let storage = FsStorage::new();
        let data = storage
            .open(&dir.join("s.redb"), OpenMode::OpenOrCreate)
            .expect("data");
        let sums = storage
            .open(&dir.join("s.sums"), OpenMode::OpenOrCreate)
            .expect("sums");
        (data, sums)
    }

    /// A store of two blocks written through its sums, checked, and closed
    /// cleanly: its sums file whole.
    fn closed_cleanly(dir: &Path, store: &Path) {
        let (data, sums_file) = files(dir);
        let (sums, _) = PageSums::load(store, &*data, Some(sums_file)).expect("load");
        sums.write(&*data, 0, &[1; 8192]).expect("write");
        sums.note_checked();
        sums.close(&*data);
    }

    #[test]
    fn the_file_round_trips_and_any_flipped_bit_makes_it_unusable() {
        let entries = vec![known(7), UNKNOWN, known(0xdead_beef)];
        let bytes = encode(3 * BLOCK_BYTES - 100, &entries, true);
        assert_eq!(
            decode(&bytes),
            Some((3 * BLOCK_BYTES - 100, entries.clone(), true))
        );
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(decode(&bad), None, "bit {bit}");
        }
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
        }
    }

    /// The layout docs/FORMAT.md ("Page sums") describes, byte for byte: a
    /// change to it fails here first.
    #[test]
    fn the_file_layout_is_pinned() {
        let bytes = encode(5_000, &[known(0x0102_0304), UNKNOWN], true);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "616374756d73756d01000000001000000100000000000000881300000000000002000000000000000403\
             0201010000000000000000000000270be4d9"
        );
    }

    #[test]
    fn reads_are_checked_against_what_was_written_and_damage_names_its_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (data, sums_file) = files(dir.path());
        let store = dir.path().join("s.redb");
        let (sums, loaded) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
        assert_eq!(loaded, Loaded::None);
        sums.set_len(&*data, 3 * BLOCK_BYTES).expect("grow");
        sums.write(&*data, 100, &[5; 5000])
            .expect("write across two blocks");
        sums.sync_data(&*data).expect("sync");
        let mut out = vec![0; 5000];
        sums.read(&*data, 100, &mut out).expect("read back");
        assert_eq!(out, vec![5; 5000]);
        // Damage behind the sums' back, in the second block.
        data.write_at(BLOCK_BYTES + 10, &[9]).expect("damage");
        let mut page = vec![0; BLOCK_BYTES as usize];
        sums.read(&*data, 0, &mut page)
            .expect("the first block is intact");
        let err = sums
            .read(&*data, BLOCK_BYTES, &mut page)
            .expect_err("the second is not");
        let mismatch = mismatch_in(&err).expect("a mismatch");
        assert_eq!(mismatch.offset, BLOCK_BYTES);
        assert_eq!(mismatch.file, store);
        assert!(err.to_string().contains("s.redb"), "{err}");
        // A read that only touches the damaged block is refused too.
        sums.read(&*data, BLOCK_BYTES + 4000, &mut [0; 10])
            .expect_err("inside the damaged block");
    }

    #[test]
    fn a_clean_close_is_trusted_until_the_store_changes_and_a_crash_after_that_leaves_nothing_to_trust()
     {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.redb");
        let sums_bytes = || std::fs::read(dir.path().join("s.sums")).expect("read sums");
        {
            let (data, sums_file) = files(dir.path());
            let (sums, _) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
            sums.set_len(&*data, 2 * BLOCK_BYTES).expect("grow");
            sums.write(&*data, 0, &[1; 8192]).expect("write");
            sums.note_checked();
            sums.close(&*data);
        }
        let closed = sums_bytes();
        // A session that only reads, closed: the file is not written.
        {
            let (data, sums_file) = files(dir.path());
            let (sums, loaded) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
            assert_eq!(loaded, Loaded::Checked);
            sums.read(&*data, 0, &mut [0; 8192]).expect("read");
            assert!(sums.whole_on_disk());
            sums.close(&*data);
        }
        assert_eq!(
            sums_bytes(),
            closed,
            "a session that changed nothing wrote nothing"
        );
        // One that only reads, then crashes: nothing changed, still whole.
        {
            let (data, sums_file) = files(dir.path());
            let (sums, _) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
            sums.read(&*data, 0, &mut [0; 4096]).expect("read");
        }
        {
            let (data, sums_file) = files(dir.path());
            let (sums, loaded) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
            assert_eq!(loaded, Loaded::Checked, "a crash that changed nothing");
            assert_eq!(sums.known_blocks(), (2, 2));
            sums.write(&*data, 0, &[2; 4096]).expect("write");
            assert!(!sums.whole_on_disk(), "spoiled before the write");
            assert_eq!(
                &sums_bytes()[..8],
                &[0; 8],
                "durably, before the store changed"
            );
            // Dropped without `close`: a crash.
        }
        let (data, sums_file) = files(dir.path());
        let (_, loaded) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
        assert_eq!(
            loaded,
            Loaded::None,
            "spoiled by the last session's first write"
        );
    }

    #[test]
    fn a_mismatch_met_by_a_session_that_wrote_nothing_spoils_the_sums() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.redb");
        closed_cleanly(dir.path(), &store);
        {
            let (data, sums_file) = files(dir.path());
            let (sums, loaded) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
            assert_eq!(loaded, Loaded::Checked);
            data.write_at(5000, &[0])
                .expect("damage behind the sums' back");
            sums.read(&*data, BLOCK_BYTES, &mut [0; 4096])
                .expect_err("damaged");
            assert!(!sums.whole_on_disk());
            sums.close(&*data);
        }
        let (data, sums_file) = files(dir.path());
        let (_, loaded) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
        assert_eq!(loaded, Loaded::None, "the next open checks the whole store");
    }

    #[test]
    fn sums_of_another_store_or_after_a_mismatch_are_not_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.redb");
        closed_cleanly(dir.path(), &store);
        // The store's first block replaced behind the sums' back.
        let (data, _) = files(dir.path());
        data.write_at(0, &[3; 16]).expect("replace");
        drop(data);
        {
            let (data, sums_file) = files(dir.path());
            let (sums, loaded) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
            assert_eq!(loaded, Loaded::None);
            assert_eq!(sums.known_blocks(), (0, 2));
        }
        // A mismatch seen: nothing written at close.
        {
            let (data, sums_file) = files(dir.path());
            let (sums, _) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
            sums.write(&*data, 0, &[1; 8192]).expect("write");
            data.write_at(5000, &[0]).expect("damage");
            sums.read(&*data, BLOCK_BYTES, &mut [0; 4096])
                .expect_err("damaged");
            sums.close(&*data);
        }
        let (data, sums_file) = files(dir.path());
        let (_, loaded) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
        assert_eq!(loaded, Loaded::None);
    }

    #[test]
    fn partial_blocks_and_size_changes_keep_the_sums_true() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.redb");
        let (data, sums_file) = files(dir.path());
        let (sums, _) = PageSums::load(&store, &*data, Some(sums_file)).expect("load");
        sums.write(&*data, 10, &[1; 100]).expect("a short write");
        sums.set_len(&*data, 10_000).expect("grow inside a block");
        sums.write(&*data, 9_000, &[2; 500])
            .expect("write at the end");
        sums.set_len(&*data, 6_000).expect("shrink");
        sums.write(&*data, 7_000, &[3; 10]).expect("past the end");
        let len = data.len().expect("len");
        assert_eq!(len, 7_010);
        let mut all = vec![0; len as usize];
        sums.read(&*data, 0, &mut all).expect("every block agrees");
        assert_eq!(&all[10..110], &[1; 100][..]);
        assert!(all[6_000..7_000].iter().all(|&b| b == 0));
        assert_eq!(sums.known_blocks(), (2, 2));
    }
}

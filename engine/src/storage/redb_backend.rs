//! `RedbBackend`: redb's `StorageBackend` on top of a [`StorageFile`], so the
//! state store lives behind the same seam as the WAL (and on the simulated
//! disk under test).

use std::io;
use std::sync::Arc;

use super::page_sums::PageSums;
use super::traits::StorageFile;

/// Adapts any [`StorageFile`] to redb's [`redb::StorageBackend`].
#[derive(Debug)]
pub struct RedbBackend {
    file: Box<dyn StorageFile>,
    /// A sum per block, checked on every read (the state store's).
    sums: Option<Arc<PageSums>>,
    /// Whether dropping this backend writes the sums back (a clean close):
    /// not for a read-only handle, whose store another handle may write.
    closes_sums: bool,
}

impl RedbBackend {
    /// Wraps `file`; redb takes ownership of its contents.
    pub fn new(file: Box<dyn StorageFile>) -> Self {
        RedbBackend {
            file,
            sums: None,
            closes_sums: false,
        }
    }

    /// Wraps `file`, checking every read against `sums` and keeping them
    /// with every write; a clean close (redb dropping its backend after
    /// its last sync) writes them back.
    pub(crate) fn with_sums(file: Box<dyn StorageFile>, sums: Arc<PageSums>) -> Self {
        RedbBackend {
            file,
            sums: Some(sums),
            closes_sums: true,
        }
    }

    /// Wraps `file` for a read-only handle: every read checked against
    /// `sums`; dropping it writes nothing back (the writable handle's close
    /// does, if one was opened).
    pub(crate) fn reading(file: Box<dyn StorageFile>, sums: Arc<PageSums>) -> Self {
        RedbBackend {
            file,
            sums: Some(sums),
            closes_sums: false,
        }
    }
}

impl Drop for RedbBackend {
    fn drop(&mut self) {
        if let Some(sums) = self.sums.as_ref().filter(|_| self.closes_sums) {
            sums.close(&*self.file);
        }
    }
}

impl redb::StorageBackend for RedbBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        match &self.sums {
            Some(sums) => sums.read(&*self.file, offset, out),
            None => self.file.read_at(offset, out),
        }
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        match &self.sums {
            Some(sums) => sums.set_len(&*self.file, len),
            None => self.file.set_len(len),
        }
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        match &self.sums {
            Some(sums) => sums.sync_data(&*self.file),
            None => self.file.sync_data(),
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        match &self.sums {
            Some(sums) => sums.write(&*self.file, offset, data),
            None => self.file.write_at(offset, data),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{FsStorage, OpenMode, Storage};
    use redb::ReadableDatabase;

    const TABLE: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("t");

    #[test]
    fn redb_commits_survive_reopen_through_the_seam() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.redb");
        let storage = FsStorage::new();
        {
            let file = storage.open(&path, OpenMode::OpenOrCreate).expect("open");
            let db = redb::Database::builder()
                .create_with_backend(RedbBackend::new(file))
                .expect("create");
            let txn = db.begin_write().expect("begin");
            txn.open_table(TABLE)
                .expect("table")
                .insert(7, b"seven".as_slice())
                .expect("insert");
            txn.commit().expect("commit");
        }
        let file = storage.open(&path, OpenMode::Existing).expect("reopen");
        let db = redb::Database::builder()
            .create_with_backend(RedbBackend::new(file))
            .expect("open");
        let txn = db.begin_read().expect("read");
        let table = txn.open_table(TABLE).expect("table");
        let value = table.get(7).expect("get").expect("present");
        assert_eq!(value.value(), b"seven");
    }
}

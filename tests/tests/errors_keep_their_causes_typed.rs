//! A failure keeps its cause as a typed error, not as text: an fsync that
//! fails under a command halts the engine with `Halted`, whose cause is the
//! log's `Poisoned`, whose cause is the `Io` error naming the segment file;
//! every later command gets the same cause, and `source()` walks the chain
//! down to the operating system's error.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

mod support;

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use actum::storage::DirLock;
use actum::{Engine, EngineOptions, Error, FsStorage, OpenMode, Storage, StorageFile};
use support::*;

/// The file system, except that a log segment's `fdatasync` fails while
/// `fail` is set.
#[derive(Debug)]
struct FailingLogSync {
    inner: FsStorage,
    fail: Arc<AtomicBool>,
}

#[derive(Debug)]
struct FailingFile {
    inner: Box<dyn StorageFile>,
    fail: Option<Arc<AtomicBool>>,
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
        if self.fail.as_ref().is_some_and(|f| f.load(Ordering::SeqCst)) {
            return Err(io::Error::other("injected EIO"));
        }
        self.inner.sync_data()
    }
}

impl Storage for FailingLogSync {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.inner.open(path, mode)?;
        // A segment is prepared as `<name>.wal.tmp` and renamed.
        let is_log = path.to_string_lossy().contains(".wal");
        Ok(Box::new(FailingFile {
            inner,
            fail: is_log.then(|| Arc::clone(&self.fail)),
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

/// The chain of `err`'s sources, outermost first, as their messages.
fn chain(err: &Error) -> Vec<String> {
    let mut out = vec![err.to_string()];
    let mut next = std::error::Error::source(err);
    while let Some(cause) = next {
        out.push(cause.to_string());
        next = cause.source();
    }
    out
}

#[test]
fn a_failed_fsync_halts_the_engine_with_its_io_error_as_the_typed_cause() {
    let dir = tempfile::tempdir().unwrap();
    let fail = Arc::new(AtomicBool::new(false));
    let storage: Arc<dyn Storage> = Arc::new(FailingLogSync {
        inner: FsStorage::new(),
        fail: Arc::clone(&fail),
    });
    let clock = Arc::new(actum::ManualClock::new(START_MS));
    let engine = Engine::open_with(storage, clock, dir.path(), EngineOptions::default()).unwrap();
    engine.create_run(create_cmd("before")).unwrap();
    fail.store(true, Ordering::SeqCst);
    let first = engine.create_run(create_cmd("during")).unwrap_err();
    let Error::Halted {
        after,
        cause: Some(cause),
    } = &first
    else {
        panic!("{first:?}")
    };
    assert_eq!(*after, "a failed log append");
    let Error::Poisoned { cause: flush } = cause.as_ref() else {
        panic!("{cause:?}")
    };
    let Error::Io { path, source, .. } = flush.as_ref() else {
        panic!("{flush:?}")
    };
    assert!(path.to_string_lossy().contains(".wal"), "{path:?}");
    assert_eq!(source.to_string(), "injected EIO");
    let links = chain(&first);
    assert_eq!(links.len(), 4, "{links:#?}");
    assert_eq!(links[3], "injected EIO");
    // Every later command is refused with the same cause, even once the
    // disk is well again: the engine must be reopened.
    fail.store(false, Ordering::SeqCst);
    let later = engine.create_run(create_cmd("after")).unwrap_err();
    let Error::Halted {
        cause: Some(again), ..
    } = &later
    else {
        panic!("{later:?}")
    };
    assert!(Arc::ptr_eq(cause, again), "{first:?}\n{later:?}");
    drop(engine);
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    assert!(engine.run(&rid("before")).unwrap().is_some());
    assert!(engine.run(&rid("after")).unwrap().is_none());
}

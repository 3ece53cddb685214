//! The one guard every call into redb goes through: a panic inside redb
//! becomes `Error::StateStore` naming the state file and what the engine
//! was doing, instead of unwinding out of the caller's call.
//!
//! Why it is needed: redb checks its page checksums only in
//! `check_integrity` (the engine's `verify_state_on_open`), not on an
//! ordinary read. A read trusts the page it is handed, and damaged bytes
//! there (a length past the page, a node type that cannot be, a key that is
//! not UTF-8) make redb index past a slice, reach an `unreachable!` or
//! unwrap an error: a panic, not an `Err` (docs/DURABILITY.md, "State
//! store checks"). The books' rows carry their own checksums, so damage
//! that redb lets through to a value is caught as `Corrupt`; the guard is
//! for damage that redb itself trips on before a value is reached.
//!
//! The guard wraps redb's calls, not the engine's own code around them: an
//! assertion of the engine that fails is a bug and stays a panic.
//! Destructors of redb's handles (a database, a transaction, an open
//! table) may touch damaged pages too, and a panic in a destructor
//! unwinds from wherever the handle happens to be dropped, so the handles
//! the engine keeps are dropped through [`drop_guarded`].
//!
//! A panic is caught only if it unwinds: a program built with
//! `panic = "abort"` still dies on one, which is why opening with
//! `verify_state_on_open` (checked before any read) is the default.
//!
//! **Invariant:** no panic that starts inside redb unwinds out of the
//! state module; each one is reported once, as an `Err` of the call that
//! met it.

use std::any::Any;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use super::store::state_error;
use crate::error::{Error, Result};

/// Runs `call`, a call into redb, and returns what it returns; a panic
/// inside it is `Error::StateStore` naming `path` and `op`, with a
/// [`RedbPanicked`] carrying the panic's message as its source.
pub(crate) fn guard<R>(path: &Path, op: &'static str, call: impl FnOnce() -> R) -> Result<R> {
    // Unwind safety: after a panic the caller sees an `Err` and never
    // again trusts what `call` was changing (a failed read answers nothing,
    // a failed write transaction is dropped, a failed checkpoint halts the
    // engine), so no broken invariant is observed.
    panic::catch_unwind(AssertUnwindSafe(call)).map_err(|payload| Error::StateStore {
        file: path.to_path_buf(),
        op,
        source: Box::new(RedbPanicked {
            message: panic_message(payload.as_ref()),
        }),
    })
}

/// [`guard`] for a call that returns redb's `Result`: its error, too, is
/// `Error::StateStore` naming `path` and `op`.
pub(crate) fn guarded<T, E>(
    path: &Path,
    op: &'static str,
    call: impl FnOnce() -> std::result::Result<T, E>,
) -> Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    guard(path, op, call)?.map_err(|e| state_error(path, op, e))
}

/// Drops a redb handle; a panic in its destructor is swallowed (the call
/// that used the handle has already answered, and the next call that
/// needs redb meets the same damage and reports it).
pub(crate) fn drop_guarded<T>(handle: T) {
    let _ = panic::catch_unwind(AssertUnwindSafe(move || drop(handle)));
}

/// Lets go of a redb handle whose store was refused (its pages did not
/// match their sums, or redb found it corrupt) without closing it through
/// redb, as a crash would, and frees it. Dropped while this thread unwinds
/// (a silent unwind of its own, `resume_unwind` calls no panic hook, caught
/// here), redb's destructor writes nothing to the store and walks no page:
/// while the thread panics it makes no allocator-state commit and writes no
/// shutdown header (redb 4's `close_database`); the page sums' close counts
/// it as no clean close, as after any failed handle. Not for a handle redb panicked in: a lock the panic
/// poisoned would make its destructor panic again while this unwinds, which
/// aborts the process; such a handle is kept (`keep_unclosed`). Nor while
/// the thread already unwinds, for the same reason, nor in a program built
/// with `panic = "abort"`, where any unwind aborts.
pub(crate) fn let_go_unclosed(handle: redb::Database) {
    if std::thread::panicking() || cfg!(panic = "abort") {
        keep_unclosed(handle);
        return;
    }
    let unwound = panic::catch_unwind(AssertUnwindSafe(move || {
        let _dropped_while_unwinding = handle;
        panic::resume_unwind(Box::new(LettingGo));
    }));
    debug_assert!(
        unwound.is_err_and(|payload| payload.is::<LettingGo>()),
        "the handle is let go by an unwind of its own"
    );
}

/// The payload of the unwind that lets a refused store's handle go.
struct LettingGo;

/// The redb handles met with a panic, kept open and never closed or
/// dropped (a panic poisoned a lock their destructor takes): one per such
/// store, until the process ends. Reachable, so a leak checker sees kept
/// handles, not lost ones.
static UNCLOSED: Mutex<Vec<redb::Database>> = Mutex::new(Vec::new());

/// Keeps `handle` unclosed until the process ends (`UNCLOSED`).
pub(crate) fn keep_unclosed(handle: redb::Database) {
    UNCLOSED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(handle);
}

/// The text of a panic's payload (`panic!` with a format gives a
/// `String`, with a literal a `&str`).
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// The source of an `Error::StateStore` for a panic inside redb: damaged
/// bytes that redb read without checking their checksum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedbPanicked {
    /// redb's panic message (say, a slice index out of range).
    pub message: String,
}

impl fmt::Display for RedbPanicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "redb panicked on the file's bytes ({}); the state store is damaged: \
             `actum verify` checks every page, and the engine refuses it at open \
             with verify_state_on_open",
            self.message
        )
    }
}

impl std::error::Error for RedbPanicked {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_the_guard_is_a_state_store_error_naming_file_and_op() {
        let path = Path::new("/db/state.redb");
        let result: Result<u32> = guard(path, "read run", || {
            let bytes = [0u8; 4];
            let at = bytes.len() + usize::from(bytes[0] == 0);
            usize::from(bytes[at]) as u32
        });
        let Err(error @ Error::StateStore { .. }) = result else {
            panic!("expected StateStore, got {result:?}");
        };
        let message = error.to_string();
        assert!(message.contains("/db/state.redb") && message.contains("read run"));
        let source = std::error::Error::source(&error).expect("a source");
        let panicked = source.downcast_ref::<RedbPanicked>().expect("typed");
        assert!(panicked.message.contains("index out of bounds"), "{panicked}");
    }

    #[test]
    fn a_call_that_returns_passes_through_untouched() {
        let value = guard(Path::new("/db/state.redb"), "read run", || 7).expect("no panic");
        assert_eq!(value, 7);
        drop_guarded(vec![1, 2, 3]);
    }

    /// The upstream reproduction (docs/DURABILITY.md, "State store
    /// checks"): redb 4.5 reads a leaf page without checking its checksum,
    /// takes a key's end offset from the page's bytes and slices with it,
    /// so one damaged offset is a panic instead of `StorageError::Corrupted`.
    /// `check_integrity` does see the damage. Should redb turn this into an
    /// error, the first assertion fails and the docs are to be updated.
    #[test]
    fn redb_panics_on_a_damaged_key_offset_and_the_guard_turns_it_into_an_error() {
        use redb::{ReadableDatabase, TableDefinition};
        const TABLE: TableDefinition<&str, u64> = TableDefinition::new("t");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("leaf.redb");
        {
            let db = redb::Database::create(&path).expect("create");
            let txn = db.begin_write().expect("begin write");
            {
                let mut table = txn.open_table(TABLE).expect("table");
                for k in 0..20u64 {
                    table.insert(format!("key-{k:02}").as_str(), k).expect("insert");
                }
            }
            txn.commit().expect("commit");
        }
        // The leaf holding the keys: its key section starts "key-00key-01".
        let mut bytes = std::fs::read(&path).expect("read");
        let at = bytes
            .windows(12)
            .position(|w| w == b"key-00key-01")
            .expect("the leaf's keys");
        let page = at - at % 4096;
        assert_eq!(bytes[page], 1, "a leaf page (type byte 1)");
        // The first key's end offset (after the 4-byte leaf header).
        bytes[page + 4..page + 8].copy_from_slice(&0x00ff_ffffu32.to_le_bytes());
        std::fs::write(&path, &bytes).expect("write");

        let read = |db: &redb::Database| -> std::result::Result<Option<u64>, redb::Error> {
            let txn = db.begin_read()?;
            let table = txn.open_table(TABLE)?;
            Ok(table.get("key-00")?.map(|v| v.value()))
        };
        let db = redb::Database::open(&path).expect("open: nothing is checked");
        let unguarded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&db)));
        assert!(unguarded.is_err(), "redb answered instead of panicking: {unguarded:?}");
        let guarded = guarded(&path, "read key-00", || read(&db));
        let Err(error @ Error::StateStore { .. }) = guarded else {
            panic!("expected StateStore, got {guarded:?}");
        };
        let source = std::error::Error::source(&error).expect("a source");
        assert!(source.downcast_ref::<RedbPanicked>().is_some(), "{error}");
        drop_guarded(db);
        let mut db = redb::Database::open(&path).expect("open");
        // Here redb finds both copies of its primary state damaged.
        let checked = db.check_integrity();
        assert!(!matches!(checked, Ok(true)), "the full check sees it: {checked:?}");
    }

    /// A database with a commit redb has not yet made durable (its close
    /// would): the file's bytes then, and the database.
    fn with_a_pending_commit(path: &Path) -> (Vec<u8>, redb::Database) {
        const TABLE: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("t");
        let db = redb::Database::create(path).expect("create");
        let mut txn = db.begin_write().expect("begin");
        txn.set_durability(redb::Durability::None).expect("durability");
        txn.open_table(TABLE)
            .expect("table")
            .insert("k", 7)
            .expect("insert");
        txn.commit().expect("commit");
        (std::fs::read(path).expect("read"), db)
    }

    #[test]
    fn a_handle_let_go_is_freed_and_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.redb");
        // The control: redb's own close makes the pending commit durable.
        let (before, db) = with_a_pending_commit(&path);
        drop(db);
        assert_ne!(std::fs::read(&path).expect("read"), before, "a close writes");
        std::fs::remove_file(&path).expect("remove");
        let (before, db) = with_a_pending_commit(&path);
        let_go_unclosed(db);
        assert!(
            std::fs::read(&path).expect("read") == before,
            "a handle let go writes nothing"
        );
        // Freed: redb holds a lock on the file while a handle is open.
        drop(redb::Database::open(&path).expect("the file is free again"));
    }

    #[test]
    fn a_panicking_destructor_is_swallowed() {
        struct Loud;
        impl Drop for Loud {
            fn drop(&mut self) {
                panic!("damaged page in a destructor");
            }
        }
        drop_guarded(Loud);
    }
}

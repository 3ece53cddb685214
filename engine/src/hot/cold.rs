//! [`ColdReader`]: reads of the state store for what the hot books do not
//! hold, through one read transaction opened on first use.
//!
//! **Invariant:** the books traits cannot return errors, so a failed read
//! answers "absent" and is kept; [`ColdReader::finish`] returns it, and the
//! engine refuses whatever it was deciding, so a storage error never passes
//! for an empty table.

use std::cell::{OnceCell, RefCell};

use redb::ReadTransaction;

use crate::books::{MemBooks, RunId};
use crate::error::{Error, Result};
use crate::state::{RedbBooks, StateStore, read_books};

/// Lazy reads of the state store.
pub(crate) struct ColdReader<'a> {
    state: &'a StateStore,
    txn: OnceCell<ReadTransaction>,
    error: RefCell<Option<Error>>,
}

impl<'a> ColdReader<'a> {
    /// A reader of `state` that has not opened a transaction yet.
    pub(crate) fn new(state: &'a StateStore) -> ColdReader<'a> {
        ColdReader {
            state,
            txn: OnceCell::new(),
            error: RefCell::new(None),
        }
    }

    fn fail(&self, error: Error) {
        let mut slot = self.error.borrow_mut();
        if slot.is_none() {
            *slot = Some(error);
        }
    }

    fn txn(&self) -> Option<&ReadTransaction> {
        if self.txn.get().is_none() {
            match self.state.read() {
                Ok(txn) => {
                    let _ = self.txn.set(txn);
                }
                Err(error) => {
                    self.fail(error);
                    return None;
                }
            }
        }
        self.txn.get()
    }

    /// Runs `read` over the state store's books; a failure is kept and
    /// `read` is answered with the default ("absent").
    pub(crate) fn with<T: Default>(&self, read: impl FnOnce(&RedbBooks<'_>) -> T) -> T {
        let Some(txn) = self.txn() else {
            return T::default();
        };
        let view = RedbBooks::reader(txn, self.state.path());
        let value = read(&view);
        match view.finish() {
            Ok(()) => value,
            Err(error) => {
                self.fail(error);
                T::default()
            }
        }
    }

    /// The ids of the runs the state store lists as live.
    pub(crate) fn live_runs(&self) -> Vec<RunId> {
        self.with(|books| books.live_run_ids())
    }

    /// Every table of the state store, as a `MemBooks`.
    pub(crate) fn read_all(&self) -> Result<MemBooks> {
        let Some(txn) = self.txn() else {
            return Err(self.take_error());
        };
        read_books(txn, self.state.path())
    }

    fn take_error(&self) -> Error {
        self.error
            .borrow_mut()
            .take()
            .unwrap_or_else(|| Error::Inconsistent {
                what: "a state store read failed without saying why".to_string(),
            })
    }

    /// `Err` with the first failure any read met.
    pub(crate) fn finish(self) -> Result<()> {
        match self.error.into_inner() {
            None => Ok(()),
            Some(error) => Err(error),
        }
    }
}

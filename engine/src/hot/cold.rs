//! [`ColdReader`]: reads of the state store for what the hot books do not
//! hold, through one read transaction opened on first use. A reader lives
//! for one hold of the engine lock (a batch of commands) or for a whole
//! replay, so one transaction serves many reads and keeps the tables it
//! opened, and it remembers whether its snapshot holds each of the last few
//! runs it looked up: a run the state store does not hold has no rows in
//! any of its tables, so the reads about it are answered without a lookup
//! (a run being created is the common case). The memory is a few runs, not
//! every run looked up: the reads about one run come together (applying a
//! record, then bringing its runs into memory), and once a run is in the hot
//! books it is answered there; a replay of thousands of created runs would
//! otherwise grow a map of them all and search it for every read.
//!
//! **Invariant:** the books traits cannot return errors, so a failed read
//! answers "absent" and is kept; [`ColdReader::check`] and
//! [`ColdReader::finish`] return it, and the engine refuses whatever it was
//! deciding, so a storage error never passes for an empty table. The
//! memory of runs is true of the reader's one snapshot: the state store's
//! rows of a run are written only together with its run row.

use std::cell::{OnceCell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;

use crate::books::{BooksRead, MemBooks, Run, RunId};
use crate::error::{Error, Result};
use crate::state::{LiveClaim, RedbBooks, SharedRead, StateStore, read_books};

/// Lazy reads of the state store.
pub(crate) struct ColdReader<'a> {
    state: &'a StateStore,
    /// Whether the reader takes the state store's shared transaction
    /// ([`StateStore::shared_read`]) or begins one of its own.
    shared: bool,
    /// The transaction, and the tables read through it so far, kept open
    /// for the reader's life.
    txn: OnceCell<Arc<SharedRead>>,
    error: RefCell<Option<Error>>,
    /// The last runs looked up (at most [`RECENT_RUNS_MAX`], the newest
    /// first), and whether the snapshot holds each.
    runs: RefCell<VecDeque<(RunId, bool)>>,
}

/// How many runs a [`ColdReader`] remembers: enough for the runs one record
/// or one command touches.
const RECENT_RUNS_MAX: usize = 8;

impl<'a> ColdReader<'a> {
    /// A reader of `state` that has not opened a transaction yet, and will
    /// begin one of its own.
    pub(crate) fn new(state: &'a StateStore) -> ColdReader<'a> {
        ColdReader {
            state,
            shared: false,
            txn: OnceCell::new(),
            error: RefCell::new(None),
            runs: RefCell::new(VecDeque::new()),
        }
    }

    /// A reader of `state` that will take the transaction the engine's
    /// readers share until the state store next commits: for a caller that
    /// holds the engine lock. The snapshot may predate a checkpoint's
    /// commit under way, as a new transaction begun now could; the runs
    /// that commit wrote are in the hot books until it evicts them, under
    /// the lock, after the shared transaction has been forgotten.
    pub(crate) fn shared(state: &'a StateStore) -> ColdReader<'a> {
        ColdReader {
            shared: true,
            ..ColdReader::new(state)
        }
    }

    /// Begins the read transaction now, if it has not begun: the reads
    /// that follow see the state store as it is at this instant (a failure
    /// is kept, as any read's).
    pub(crate) fn begin(&self) {
        let _ = self.txn();
    }

    /// The run `id` as the state store holds it.
    pub(crate) fn run(&self, id: &RunId) -> Option<Run> {
        if self.remembered(id) == Some(false) {
            return None;
        }
        let run = self.with(|books| books.run(id));
        // A failed read answers `None` but proves nothing: not remembered.
        if self.error.borrow().is_none() {
            self.remember(id, run.is_some());
        }
        run
    }

    /// True if the state store holds the run `id` (a run it does not hold
    /// has no ledger entries, decisions, checkpoints or audit entries).
    pub(crate) fn holds_run(&self, id: &RunId) -> bool {
        self.remembered(id)
            .unwrap_or_else(|| self.run(id).is_some())
    }

    /// True if `id` is one of the runs remembered and the snapshot does
    /// not hold it.
    pub(crate) fn known_absent(&self, id: &RunId) -> bool {
        self.remembered(id) == Some(false)
    }

    /// Whether the snapshot holds `id`, if `id` is one of the runs
    /// remembered.
    fn remembered(&self, id: &RunId) -> Option<bool> {
        let runs = self.runs.borrow();
        runs.iter()
            .find(|(run, _)| run == id)
            .map(|(_, held)| *held)
    }

    /// Remembers whether the snapshot holds `id`, forgetting the oldest
    /// run remembered if there are [`RECENT_RUNS_MAX`].
    fn remember(&self, id: &RunId, held: bool) {
        let mut runs = self.runs.borrow_mut();
        if let Some(at) = runs.iter().position(|(run, _)| run == id) {
            assert_eq!(runs[at].1, held, "one snapshot answers {id} one way");
            return;
        }
        if runs.len() == RECENT_RUNS_MAX {
            runs.pop_back();
        }
        runs.push_front((id.clone(), held));
        assert!(runs.len() <= RECENT_RUNS_MAX);
    }

    fn fail(&self, error: Error) {
        self.state.note_error(&error);
        let mut slot = self.error.borrow_mut();
        if slot.is_none() {
            *slot = Some(error);
        }
    }

    fn txn(&self) -> Option<&SharedRead> {
        if self.txn.get().is_none() {
            let read = if self.shared {
                self.state.shared_read()
            } else {
                self.state.own_read()
            };
            match read {
                Ok(txn) => {
                    let _ = self.txn.set(txn);
                }
                Err(error) => {
                    self.fail(error);
                    return None;
                }
            }
        }
        self.txn.get().map(|read| &**read)
    }

    /// Runs `read` over the state store's books; a failure is kept and
    /// `read` is answered with the default ("absent").
    pub(crate) fn with<T: Default>(&self, read: impl FnOnce(&RedbBooks<'_>) -> T) -> T {
        let Some(shared) = self.txn() else {
            return T::default();
        };
        let view = RedbBooks::reader_keeping(shared.txn(), self.state.path(), shared.tables());
        let value = read(&view);
        match view.finish() {
            Ok(()) => value,
            Err(error) => {
                self.fail(error);
                T::default()
            }
        }
    }

    /// The runs the state store lists as live, each with its claim row if
    /// it has one.
    pub(crate) fn live_claims(&self) -> Vec<(RunId, Option<LiveClaim>)> {
        self.with(|books| books.live_run_claims())
    }

    /// Whether `claim`, the claim row of the live run `id`, says what the
    /// run's row says (reading that row, which the claim row is there to
    /// spare: `EngineOptions::check_live_claims`); a disagreement, or no
    /// row, fails the reader, naming the run.
    pub(crate) fn claim_agrees(&self, id: &RunId, claim: &LiveClaim) -> bool {
        let found = self.run(id).map(|run| LiveClaim::of(&run));
        if found.as_ref() == Some(claim) {
            return true;
        }
        self.fail(Error::Inconsistent {
            what: format!(
                "the state store's live claim row of run {id} says {claim:?}, its run row \
                 {found:?}"
            ),
        });
        false
    }

    /// Every table of the state store, as a `MemBooks`.
    pub(crate) fn read_all(&self) -> Result<MemBooks> {
        let Some(read) = self.txn() else {
            return Err(self.take_error());
        };
        self.state.note(read_books(read.txn(), self.state.path()))
    }

    fn take_error(&self) -> Error {
        self.error
            .borrow_mut()
            .take()
            .unwrap_or_else(|| Error::Inconsistent {
                what: "a state store read failed without saying why".to_string(),
            })
    }

    /// `Err` with the first failure any read met since the last check; the
    /// reader goes on serving reads.
    pub(crate) fn check(&self) -> Result<()> {
        match self.error.borrow_mut().take() {
            None => Ok(()),
            Some(error) => Err(error),
        }
    }

    /// `Err` with the first failure any read met.
    pub(crate) fn finish(self) -> Result<()> {
        match self.error.take() {
            None => Ok(()),
            Some(error) => Err(error),
        }
    }
}

//! Retention at the engine's door: runs that are over leave the books once
//! they are old enough and every dedup window of their ledger has passed
//! (`books/rules/retention.rs`), by name ([`Engine::prune_runs`]), the oldest
//! first from the ended-runs index ([`Engine::prune`]), or by themselves
//! after each automatic checkpoint when [`Retention::prune_after_ms`] is
//! set. What they leave frees its pages in the state store, which redb
//! reuses, so a steady stream of runs stops growing the database.
//!
//! **Invariant:** a prune is a command like any other: decided, logged,
//! applied to the hot books, and checkpointed; nothing is deleted from the
//! state store except by a checkpoint writing a logged prune.

use std::collections::BTreeSet;

use crate::books::{Answer, Command, PRUNE_RUNS_MAX, Prune, RunId};
use crate::error::{Error, Result};

use super::core::Engine;

/// When runs that are over leave the books by themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// After each automatic checkpoint, prune the runs over for at least
    /// this long (up to [`PRUNE_RUNS_MAX`] of the oldest at a time); `None`
    /// (the default) keeps every run until pruned by a call. (On
    /// PostgreSQL, which has no checkpoints, each process prunes after
    /// every `RETENTION_EVERY_COMMITS` of its own commits instead.)
    pub prune_after_ms: Option<u64>,
}

/// What a prune removed and what it kept, with the reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// The runs that left the books.
    pub pruned: Vec<RunId>,
    /// The runs kept, each with the reason (not over, too young, a dedup
    /// window still open, not found).
    pub kept: Vec<(RunId, String)>,
}

impl Engine {
    /// Removes each of `runs` that is prunable: over for at least
    /// `older_than_ms` (by the engine's clock), every dedup window of its
    /// ledger passed. Each leaves with its ledger entries, checkpoints,
    /// decisions, audit journal, waits, budget and saga, and the blobs no
    /// kept run references; its name is free again. At most
    /// [`PRUNE_RUNS_MAX`] runs (`TooLarge`).
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("report-7")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"7"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.acquire_lease(&run, &WorkerId::new("w1")?, 60_000)?;
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard,
    ///     to: RunState::Cancelled, expected_version: None, reason: "not needed".into() })?;
    /// let done = engine.prune_runs(vec![run.clone()], 0)?;
    /// assert_eq!(done.pruned, [run.clone()]);
    /// assert!(engine.run(&run)?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn prune_runs(&self, runs: Vec<RunId>, older_than_ms: u64) -> Result<Pruned> {
        if runs.is_empty() {
            return Ok(Pruned::default());
        }
        let cmd = Command::Prune(Prune {
            runs,
            older_than_ms,
        });
        match self.answer(cmd)? {
            Answer::Pruned { pruned, kept } => Ok(Pruned { pruned, kept }),
            other => Err(Error::Inconsistent {
                what: format!("prune answered {other:?}"),
            }),
        }
    }

    /// Prunes up to `max_runs` (at most [`PRUNE_RUNS_MAX`]) of the runs
    /// over for at least `older_than_ms`, the longest over first, from the
    /// index of ended runs the state store keeps (a run ended since the
    /// last checkpoint, or under a build before the index, is not in it).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use actum::books::{CreateRun, OperatorAction, RunId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::{FsStorage, ManualClock};
    ///
    /// const HOUR: u64 = 3_600_000;
    /// let dir = tempfile::tempdir()?;
    /// let clock = Arc::new(ManualClock::new(1_000));
    /// let engine = Engine::open_with(Arc::new(FsStorage::new()), clock.clone(), dir.path(),
    ///     EngineOptions::default())?;
    /// let run = RunId::new("report-8")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"8"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// engine.operate(&run, OperatorAction::Cancel, "ops", "not needed")?;
    /// engine.checkpoint()?; // writes the index of ended runs that prune reads
    /// assert!(engine.prune(HOUR, 100)?.pruned.is_empty(), "over for less than an hour");
    /// clock.advance_ms(HOUR);
    /// assert_eq!(engine.prune(HOUR, 100)?.pruned, [run.clone()]);
    /// assert!(engine.run(&run)?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn prune(&self, older_than_ms: u64, max_runs: usize) -> Result<Pruned> {
        self.prune_passing_over(older_than_ms, max_runs, &BTreeSet::new())
    }

    /// Prunes every run over for at least `older_than_ms`, batch after
    /// batch of the longest over, passing over the runs a batch kept (a run
    /// whose dedup window is still open does not hold up the runs behind
    /// it), until a batch comes back short; `on_batch` sees each batch's
    /// result as it lands (for progress). Runs ended since the last
    /// checkpoint are not in the index it reads: checkpoint first to
    /// include them. Returns every run pruned and every run kept, with why.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use actum::books::{CreateRun, OperatorAction, RunId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::{FsStorage, ManualClock};
    ///
    /// const HOUR: u64 = 3_600_000;
    /// let dir = tempfile::tempdir()?;
    /// let clock = Arc::new(ManualClock::new(1_000));
    /// let engine = Engine::open_with(Arc::new(FsStorage::new()), clock.clone(), dir.path(),
    ///     EngineOptions::default())?;
    /// for n in 0..3u8 {
    ///     let run = RunId::new(format!("report-{n}"))?;
    ///     engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(&[n]),
    ///         agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    ///     engine.operate(&run, OperatorAction::Cancel, "ops", "not needed")?;
    /// }
    /// engine.checkpoint()?;
    /// clock.advance_ms(HOUR);
    /// let mut batches = 0;
    /// let done = engine.prune_all(HOUR, &mut |_batch| batches += 1)?;
    /// assert_eq!(done.pruned.len(), 3);
    /// assert_eq!(batches, 1);
    /// assert!(engine.run(&RunId::new("report-1")?)?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn prune_all(
        &self,
        older_than_ms: u64,
        on_batch: &mut dyn FnMut(&Pruned),
    ) -> Result<Pruned> {
        let mut all = Pruned::default();
        let mut considered = BTreeSet::new();
        // Bounded: every batch either prunes runs (which leave the index)
        // or adds its kept runs to `considered`, and a short batch ends it.
        loop {
            let done = self.prune_passing_over(older_than_ms, PRUNE_RUNS_MAX, &considered)?;
            on_batch(&done);
            let seen = done.pruned.len() + done.kept.len();
            considered.extend(done.kept.iter().map(|(run, _)| run.clone()));
            all.pruned.extend(done.pruned);
            all.kept.extend(done.kept);
            if seen < PRUNE_RUNS_MAX {
                return Ok(all);
            }
        }
    }

    /// [`Engine::prune`], passing over the runs in `considered` (kept by an
    /// earlier batch, so a run whose dedup window is still open does not
    /// hold up the runs behind it).
    fn prune_passing_over(
        &self,
        older_than_ms: u64,
        max_runs: usize,
        considered: &BTreeSet<RunId>,
    ) -> Result<Pruned> {
        let before_ms = self.clock.now_ms().saturating_sub(older_than_ms);
        let max_runs = max_runs.min(PRUNE_RUNS_MAX);
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            // (The server's clock: the ends it compares with are its own.)
            let candidates = pg.read_books(|books, now_ms| {
                let before_ms = now_ms.saturating_sub(older_than_ms);
                Ok(books.ended_before(before_ms, max_runs, |name| {
                    considered.iter().any(|c| c.as_str() == name)
                }))
            })?;
            return self.prune_runs(candidates, older_than_ms);
        }
        let candidates = self.read_hot(|hot, cold| {
            Ok(cold.with(|books| {
                books.ended_before(before_ms, max_runs, |name| {
                    // Pruned since the last checkpoint: still in the index.
                    hot.pruned.contains_key(name) || considered.contains(name)
                })
            }))
        })?;
        self.prune_runs(candidates, older_than_ms)
    }

    /// Retention after an automatic checkpoint: prunes batch after batch
    /// of the runs over for `after_ms`, passing over the ones kept, until
    /// a batch comes back short or `batches` have run.
    pub(super) fn prune_after_checkpoint(&self, after_ms: u64, batches: usize) {
        let mut considered = BTreeSet::new();
        for _ in 0..batches {
            let Ok(done) = self.prune_passing_over(after_ms, PRUNE_RUNS_MAX, &considered) else {
                // A refusal leaves the runs for the next checkpoint; a
                // failure halts the engine, and the next command says why.
                return;
            };
            let seen = done.pruned.len() + done.kept.len();
            considered.extend(done.kept.into_iter().map(|(run, _)| run));
            if seen < PRUNE_RUNS_MAX {
                return;
            }
        }
    }
}

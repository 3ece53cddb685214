//! A look at the whole books as of one durable LSN, read by the engine
//! that holds them ([`Engine::look`]): what `actum inspect` reports (runs by
//! state and by agent version, live leases, effects whose outcome is open,
//! open waits). The operator channel serves it to other processes, so a
//! look at a live database copies no file and replays no log.
//!
//! How, on the embedded engine, with the engine lock held only for what
//! memory holds: under the lock, the runs in memory are read (a run in
//! memory keeps its open ledger entries and its wait book there), the ids
//! of the runs in memory and of those pruned since the last checkpoint are
//! noted, and a read transaction of the state store is begun; then the lock
//! is let go and the runs only the state store holds are read from that
//! transaction. A run leaves memory only after a checkpoint's commit wrote
//! it, under the lock, and comes back before anything changes it; so every
//! run not in memory when the lock was held is, in the transaction begun
//! then, exactly as it was at that LSN, whatever commits and checkpoints
//! follow. On PostgreSQL a look is one read-only transaction.
//!
//! **Invariant:** a look equals [`Look::of_books`] over the books as of
//! its LSN, and returns once that LSN is durable.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::books::{BooksRead, EffectEntry, Lease, MemBooks, Run, RunId, RunState, WaitRecord};
use crate::error::Result;
use crate::hot::ColdReader;
use crate::planted::PlantedBug;

use super::core::Engine;

/// How many runs one read of the state store's runs table takes.
const RUNS_CHUNK: usize = 256;

/// The runs of one agent version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRuns {
    /// Its runs.
    pub runs: u64,
    /// Its runs not completed, failed or cancelled: what the version still
    /// serves.
    pub not_over: u64,
}

/// The whole books at a glance, as of one durable LSN ([`Engine::look`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Look {
    /// Every record up to this LSN is in the look, and durable; 0 on
    /// PostgreSQL (the server's snapshot has no LSN).
    pub lsn: u64,
    /// The instant leases were judged live at: the engine's clock (the
    /// server's on PostgreSQL).
    pub now_ms: u64,
    /// How many runs there are in each state, by `RunState::name`, every
    /// state listed.
    pub runs_by_state: BTreeMap<String, u64>,
    /// The runs of each agent version (a runtime's `kind@version`).
    pub runs_by_agent: BTreeMap<String, AgentRuns>,
    /// Every run whose lease is live at `now_ms`, with it, in run order.
    pub leases: Vec<(RunId, Lease)>,
    /// Every ledger entry whose outcome is open (intended, or unknown), of
    /// every run, in key order.
    pub open_effects: Vec<EffectEntry>,
    /// Every run not over that has an open wait, with it, in run order.
    pub waits: Vec<(RunId, WaitRecord)>,
}

impl Look {
    fn new(lsn: u64, now_ms: u64) -> Look {
        Look {
            lsn,
            now_ms,
            runs_by_state: RunState::ALL
                .iter()
                .map(|s| (s.name().to_string(), 0))
                .collect(),
            runs_by_agent: BTreeMap::new(),
            leases: Vec::new(),
            open_effects: Vec::new(),
            waits: Vec::new(),
        }
    }

    /// How many runs the look counted.
    pub fn runs(&self) -> u64 {
        self.runs_by_state.values().sum()
    }

    /// Counts `run`, with its ledger entries (only the open ones are kept)
    /// and its wait book.
    fn note<'e>(
        &mut self,
        run: &Run,
        effects: impl IntoIterator<Item = &'e EffectEntry>,
        wait: Option<&WaitRecord>,
    ) {
        *self
            .runs_by_state
            .entry(run.state.name().to_string())
            .or_default() += 1;
        let agent = self
            .runs_by_agent
            .entry(run.agent_version.clone())
            .or_default();
        agent.runs += 1;
        agent.not_over += u64::from(!run.state.is_terminal());
        if let Some(lease) = run.lease.as_ref().filter(|l| l.is_live(self.now_ms)) {
            self.leases.push((run.id.clone(), lease.clone()));
        }
        self.open_effects
            .extend(effects.into_iter().filter(|e| e.status.is_open()).cloned());
        if !run.state.is_terminal()
            && let Some(wait) = wait
        {
            self.waits.push((run.id.clone(), wait.clone()));
        }
    }

    /// Counts `run` as `books` hold it.
    fn note_from(&mut self, books: &dyn BooksRead, run: &Run) {
        let effects = books.effects_of(&run.id);
        // A run over has no open wait to show: its wait book is not read.
        let book = (!run.state.is_terminal())
            .then(|| books.waits(&run.id))
            .flatten();
        self.note(run, &effects, book.as_ref().and_then(|b| b.open_wait()));
    }

    /// Puts the lists in their order: runs noted from memory and from the
    /// state store come in two passes.
    fn finish(mut self) -> Look {
        self.leases.sort_by(|a, b| a.0.cmp(&b.0));
        self.open_effects.sort_by(|a, b| a.key.cmp(&b.key));
        self.waits.sort_by(|a, b| a.0.cmp(&b.0));
        self
    }

    /// The look at `books`, as of `lsn`, with leases judged at `now_ms`:
    /// what [`Engine::look`] must answer when its books are these.
    pub fn of_books(books: &MemBooks, lsn: u64, now_ms: u64) -> Look {
        let mut look = Look::new(lsn, now_ms);
        for run in books.runs() {
            look.note_from(books, run);
        }
        look.finish()
    }
}

impl Engine {
    /// The whole books at a glance, as of one durable LSN: runs by state and
    /// by agent version, live leases, open effects and open waits, which
    /// `actum inspect` prints and the operator channel serves to other
    /// processes. The engine lock is held only to read the runs in memory;
    /// the runs only the state store holds are read after it is let go,
    /// from a read transaction begun under it (see the module docs).
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// for name in ["a", "b"] {
    ///     engine.create_run(CreateRun { run: RunId::new(name)?, input_digest: digest_of(b"x"),
    ///         agent_version: "mail@2".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// }
    /// engine.acquire_lease(&RunId::new("b")?, &WorkerId::new("w1")?, 30_000)?;
    /// let look = engine.look()?;
    /// assert_eq!(look.lsn, engine.durable_lsn().0);
    /// assert_eq!((look.runs(), look.runs_by_state["pending"]), (2, 2));
    /// assert_eq!(look.runs_by_agent["mail@2"].not_over, 2);
    /// assert_eq!(look.leases.len(), 1);
    /// assert_eq!(look.leases[0].0.as_str(), "b");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn look(&self) -> Result<Look> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            return pg.read_books(|books, now_ms| {
                let mut look = Look::new(0, now_ms);
                let mut after: Option<RunId> = None;
                // Bounded by the number of runs: each page moves past its last.
                loop {
                    let page = books.runs_after(None, after.as_ref(), RUNS_CHUNK);
                    for run in &page {
                        look.note_from(books, run);
                    }
                    match page.last() {
                        Some(last) if page.len() == RUNS_CHUNK => after = Some(last.id.clone()),
                        _ => return Ok(look.finish()),
                    }
                }
            });
        }
        let state = self.local().pipeline.state();
        let cold = ColdReader::new(state);
        let stored_copies = self.planted(PlantedBug::LookCountsStoredCopies);
        let (mut look, in_memory) = {
            let mut inner = self.lock();
            self.check_running(&mut inner)?;
            // Now, under the lock: the transaction holds every run not in
            // memory as it is at `last_applied`.
            cold.begin();
            let mut look = Look::new(inner.last_applied.0, self.clock.now_ms());
            for hot in inner.hot.runs.values() {
                look.note(
                    &hot.run,
                    hot.effects.values().map(|(entry, _)| entry),
                    hot.waits.as_deref().and_then(|book| book.open_wait()),
                );
            }
            let in_memory: BTreeSet<RunId> = if stored_copies {
                inner.hot.pruned.keys().cloned().collect()
            } else {
                inner
                    .hot
                    .runs
                    .keys()
                    .chain(inner.hot.pruned.keys())
                    .cloned()
                    .collect()
            };
            (look, in_memory)
        };
        let mut after: Option<RunId> = None;
        // Bounded by the number of runs: each chunk moves past its last.
        loop {
            let chunk = cold.with(|books| {
                let chunk = books.runs_after(after.as_ref(), RUNS_CHUNK);
                for run in chunk.iter().filter(|r| !in_memory.contains(&r.id)) {
                    look.note_from(books, run);
                }
                chunk
            });
            match chunk.last() {
                Some(last) if chunk.len() == RUNS_CHUNK => after = Some(last.id.clone()),
                _ => break,
            }
        }
        cold.finish()?;
        self.wait_durable(crate::ids::Lsn(look.lsn))?;
        Ok(look.finish())
    }
}

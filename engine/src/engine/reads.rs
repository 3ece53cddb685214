//! Reads: a run, an effect, a run's audit journal, checkpoints and recorded
//! decisions, and a whole-books snapshot, all from the hot books (and the
//! state store for what left memory), under the engine lock.
//!
//! **Invariant:** a read sees every acknowledged command, and returns only
//! once everything it saw is durable (it waits for the records in flight
//! when it read, as a command without ops does), so it never reports what
//! a crash could undo; a failed read is an `Err`, never an empty answer.

use crate::books::{
    AuditEntry, BooksRead, DecisionRecord, Digest, EffectEntry, EffectKey, LoadedCheckpoint,
    MemBooks, Part, RUNS_PAGE_MAX, Run, RunId, RunState, check_schema, existing, load_parts,
    replay_at,
};
use crate::error::{Error, Result};
use crate::hot::{ColdReader, HotState, HotView};

use super::core::Engine;

impl Engine {
    /// Runs `read` over a consistent view of the books: every acknowledged
    /// command, and, once this returns, nothing a crash could undo.
    pub fn read<T>(&self, read: impl FnOnce(&dyn BooksRead) -> Result<T>) -> Result<T> {
        self.read_hot(|hot, cold| read(&HotView { hot, cold }))
    }

    /// Runs `read` over the hot books and a reader of the state store for
    /// what left memory, under the engine lock; the one way every read
    /// goes, so each sees every acknowledged command and returns once what
    /// it saw is durable. A failed state store read is an `Err`.
    pub(crate) fn read_hot<T>(
        &self,
        read: impl FnOnce(&HotState, &ColdReader<'_>) -> Result<T>,
    ) -> Result<T> {
        let (value, rests_on) = {
            let inner = self.lock();
            inner.check_running()?;
            let cold = ColdReader::new(self.pipeline.state());
            let value = read(&inner.hot, &cold);
            cold.finish()?;
            (value, inner.last_applied)
        };
        self.wait_durable(rests_on)?;
        value
    }

    /// The run named `run`, if it exists.
    pub fn run(&self, run: &RunId) -> Result<Option<Run>> {
        self.read(|books| Ok(books.run(run)))
    }

    /// The ledger entry of `key`, if it exists.
    pub fn effect(&self, key: &EffectKey) -> Result<Option<EffectEntry>> {
        self.read(|books| Ok(books.effect(key)))
    }

    /// The ordered journal of `run`: what happened, why, when and under
    /// which lease token, one entry per change, from the first.
    pub fn audit(&self, run: &RunId) -> Result<Vec<AuditEntry>> {
        self.read(|books| {
            existing(books, run)?;
            let entries = books.audit(run, 1);
            assert!(entries.iter().zip(1u64..).all(|(e, seq)| e.seq == seq));
            Ok(entries)
        })
    }

    /// The newest checkpoint of `run` (`None` if it has none), checking its
    /// schema version (`SchemaMismatch` if it is not `expected_schema`) and
    /// every part's digest.
    pub fn load_latest(
        &self,
        run: &RunId,
        expected_schema: u32,
    ) -> Result<Option<LoadedCheckpoint>> {
        self.read(|books| crate::books::load_latest(books, run, expected_schema))
    }

    /// Like [`Engine::load_latest`], but a checkpoint of another schema
    /// version is handed to `migrate` (found version, parts) instead of
    /// being refused; what it returns is the loaded state.
    pub fn load_latest_migrating(
        &self,
        run: &RunId,
        expected_schema: u32,
        migrate: impl FnOnce(u32, Vec<Part>) -> Result<Vec<Part>>,
    ) -> Result<Option<LoadedCheckpoint>> {
        let loaded = self.read(|books| {
            books
                .checkpoint_latest(run)
                .map(|meta| load_parts(books, meta))
                .transpose()
        })?;
        let Some(mut loaded) = loaded else {
            return Ok(None);
        };
        if loaded.meta.schema_version != expected_schema {
            loaded.parts = migrate(loaded.meta.schema_version, loaded.parts)?;
        }
        Ok(Some(loaded))
    }

    /// Checkpoint `version` of `run`, checking schema and digests;
    /// `NotFound` if there is no such version.
    pub fn load_version(
        &self,
        run: &RunId,
        version: u64,
        expected_schema: u32,
    ) -> Result<LoadedCheckpoint> {
        self.read(|books| {
            let meta = books
                .checkpoint_at(run, version)
                .ok_or_else(|| Error::NotFound {
                    what: format!("checkpoint {version} of run {run}"),
                })?;
            check_schema(&meta, expected_schema)?;
            load_parts(books, meta)
        })
    }

    /// The model call recorded for `run` at `position` if its input digest
    /// is `input_digest`; `None` if nothing is recorded there yet;
    /// `Divergence` if a call with another input is.
    pub fn replay_decision(
        &self,
        run: &RunId,
        position: u64,
        input_digest: &Digest,
    ) -> Result<Option<DecisionRecord>> {
        self.read(|books| replay_at(books, run, position, input_digest))
    }

    /// A page of runs, in id order: up to `limit` (at most
    /// [`RUNS_PAGE_MAX`](crate::books::RUNS_PAGE_MAX)) runs with ids after
    /// `after` (from the first, if `None`), only those in `state` if
    /// given. Pass the last id of a page as `after` to read the next; a
    /// page shorter than `limit` is the last. Runs of every age are
    /// listed, finished ones included (read from the state store); runs in
    /// other states are skipped at the cost of a read each.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, RunState, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// for n in 0..5 {
    ///     engine.create_run(CreateRun { run: RunId::new(format!("r{n}"))?,
    ///         input_digest: digest_of(&[n]), agent_version: "1".into(), trace_id: "t".into(),
    ///         parent: None })?;
    /// }
    /// engine.operate(&RunId::new("r1")?, actum::books::OperatorAction::Cancel, "ops", "dup")?;
    /// let first = engine.runs(Some(RunState::Pending), None, 2)?;
    /// let ids: Vec<&str> = first.iter().map(|r| r.id.as_str()).collect();
    /// assert_eq!(ids, ["r0", "r2"]);
    /// let next = engine.runs(Some(RunState::Pending), Some(&first[1].id), 2)?;
    /// let ids: Vec<&str> = next.iter().map(|r| r.id.as_str()).collect();
    /// assert_eq!(ids, ["r3", "r4"]);
    /// assert_eq!(engine.runs(Some(RunState::Cancelled), None, 10)?.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn runs(
        &self,
        state: Option<RunState>,
        after: Option<&RunId>,
        limit: usize,
    ) -> Result<Vec<Run>> {
        if limit == 0 || limit > RUNS_PAGE_MAX {
            return Err(Error::InvalidCommand {
                reason: format!("a page of runs holds 1 to {RUNS_PAGE_MAX} runs, not {limit}"),
            });
        }
        self.read_hot(|hot, cold| Ok(hot.runs_page(cold, state, after, limit)))
    }

    /// Every ledger entry of `run` (acts and compensations, every attempt),
    /// in the order their intents were written; `NotFound` if the run does
    /// not exist.
    pub fn effects(&self, run: &RunId) -> Result<Vec<EffectEntry>> {
        self.read_hot(|hot, cold| {
            existing(&HotView { hot, cold }, run)?;
            Ok(hot.effects_of(cold, run))
        })
    }

    /// The arguments the intent of `key` was written with, as the caller
    /// passed them (`StepRequest::args`, `BeginEffect::args`); `None` if it
    /// passed only their digest. `NotFound` if there is no such effect.
    ///
    /// ```
    /// use actum::books::{ToolClass, StepId};
    /// use actum::engine::{Engine, EngineOptions, StepRequest, ToolOutcome, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("refund-9")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"9"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let step = StepId::new("refund")?;
    /// let request = StepRequest { guard: &lease.guard, run: &run, step: &step,
    ///     tool: ToolSpec { name: "bank.refund".into(), class: ToolClass::Queryable },
    ///     args: br#"{"amount_eur": 900}"#, rationale: "policy 4.2", compensation: None };
    /// let done = engine.step(&request, |_| ToolOutcome::Confirmed { receipt: b"rf_1".to_vec() })?;
    /// let key = match done { actum::engine::StepResult::Done { key, .. } => key, _ => panic!() };
    /// assert_eq!(engine.effect_args(&key)?.as_deref(), Some(&br#"{"amount_eur": 900}"#[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn effect_args(&self, key: &EffectKey) -> Result<Option<Vec<u8>>> {
        self.read(|books| {
            let entry = books.effect(key).ok_or_else(|| Error::NotFound {
                what: format!("effect {key}"),
            })?;
            Ok(books.blob(&entry.args_digest))
        })
    }

    /// Every table of the books as a [`MemBooks`], to compare with the
    /// reference model.
    pub fn snapshot(&self) -> Result<MemBooks> {
        self.read_hot(|hot, cold| hot.snapshot(cold))
    }
}

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
    ///
    /// ```
    /// use actum::engine::{Engine, EngineOptions};
    /// # use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("read-1")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"1"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// engine.acquire_lease(&run, &WorkerId::new("w1")?, 30_000)?;
    /// // Several reads over one view: the run and its journal agree.
    /// let (version, journal) = engine.read(|books| {
    ///     let record = books.run(&run).expect("created");
    ///     Ok((record.version, books.audit_len(&run)))
    /// })?;
    /// assert_eq!((version, journal), (2, 2), "created, then leased");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read<T>(&self, read: impl FnOnce(&dyn BooksRead) -> Result<T>) -> Result<T> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            return pg.store.read(|books, _| read(books));
        }
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
            let mut inner = self.lock();
            self.check_running(&mut inner)?;
            let cold = ColdReader::shared(self.local().pipeline.state());
            let value = read(&inner.hot, &cold);
            cold.finish()?;
            (value, inner.last_applied)
        };
        self.wait_durable(rests_on)?;
        value
    }

    /// The run named `run`, if it exists.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, RunState, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("triage-81")?;
    /// assert!(engine.run(&run)?.is_none());
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"81"),
    ///     agent_version: "triage 2.0".into(), trace_id: "t-81".into(), parent: None, input: None })?;
    /// let record = engine.run(&run)?.expect("created");
    /// assert_eq!((record.state, record.version), (RunState::Pending, 1));
    /// assert_eq!((record.agent_version.as_str(), record.trace_id.as_str()), ("triage 2.0", "t-81"));
    /// assert!(record.lease.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run(&self, run: &RunId) -> Result<Option<Run>> {
        self.read(|books| Ok(books.run(run)))
    }

    /// The ledger entry of `key`, if it exists.
    ///
    /// ```
    /// use actum::books::{EffectStatus, Outcome, StepId, ToolClass};
    /// use actum::engine::{Engine, EngineOptions, StepRequest, StepResult, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("crm-2")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"2"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let request = StepRequest { guard: &lease.guard, run: &run, step: &StepId::new("update")?,
    ///     tool: ToolSpec { name: "crm.update".into(), class: ToolClass::Queryable },
    ///     args: b"stage: won", rationale: "deal signed", compensation: None };
    /// let done = engine.step(&request, |_| Outcome::Confirmed { receipt: b"ok".to_vec() })?;
    /// let StepResult::Done { key, .. } = done else { panic!("confirmed") };
    /// let entry = engine.effect(&key)?.expect("in the ledger");
    /// assert_eq!(entry.status, EffectStatus::Confirmed { receipt: b"ok".to_vec() });
    /// assert_eq!((entry.tool.as_str(), entry.rationale.as_str()), ("crm.update", "deal signed"));
    /// assert!(engine.effect(&key.next_attempt()?)?.is_none(), "no second attempt");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn effect(&self, key: &EffectKey) -> Result<Option<EffectEntry>> {
        self.read(|books| {
            books
                .effect(key)
                .map(|entry| entry.with_bytes(&|d| books.blob(d)))
                .transpose()
        })
    }

    /// The ordered journal of `run`: what happened, why, when and under
    /// which lease token, one entry per change, from the first.
    ///
    /// ```
    /// use actum::books::{AuditWhat, CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("audit-1")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"1"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.acquire_lease(&run, &WorkerId::new("w1")?, 30_000)?;
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let journal = engine.audit(&run)?;
    /// assert_eq!(journal.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    /// assert!(matches!(journal[0].what, AuditWhat::Created { .. }));
    /// assert!(matches!(journal[1].what, AuditWhat::LeaseAcquired { .. }));
    /// assert_eq!((journal[2].token, journal[2].why.as_str()), (Some(lease.guard.token), "start"));
    /// assert!(matches!(engine.audit(&RunId::new("nobody")?), Err(actum::Error::NotFound { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ///
    /// ```
    /// use actum::books::{Part, SaveCheckpoint};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("essay-2")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"2"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// assert!(engine.load_latest(&run, 1)?.is_none(), "no checkpoint yet: start over");
    /// for draft in [&b"draft 1"[..], b"draft 2"] {
    ///     engine.save_checkpoint(SaveCheckpoint { run: run.clone(), guard: lease.guard.clone(),
    ///         schema_version: 1, parts: vec![Part::whole("draft", draft.to_vec())] })?;
    /// }
    /// let latest = engine.load_latest(&run, 1)?.expect("saved");
    /// assert_eq!(latest.meta.version, 2);
    /// assert_eq!(latest.parts, [Part::whole("draft", b"draft 2".to_vec())]);
    /// // Parts saved under schema 1 are not handed out as schema 2.
    /// let newer = engine.load_latest(&run, 2);
    /// assert!(matches!(newer, Err(Error::SchemaMismatch { found: 1, expected: 2, .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ///
    /// ```
    /// use actum::books::{Part, SaveCheckpoint};
    /// use actum::engine::{Engine, EngineOptions};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("cart-2")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"2"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// // Schema 1 kept the total in euros as text; schema 2 keeps cents.
    /// engine.save_checkpoint(SaveCheckpoint { run: run.clone(), guard: lease.guard.clone(),
    ///     schema_version: 1, parts: vec![Part::whole("total", b"12.50".to_vec())] })?;
    /// let loaded = engine.load_latest_migrating(&run, 2, |found, parts| {
    ///     assert_eq!((found, parts[0].bytes.as_slice()), (1, &b"12.50"[..]));
    ///     Ok(vec![Part::whole("total", b"1250".to_vec())])
    /// })?;
    /// assert_eq!(loaded.expect("saved").parts[0].bytes, b"1250");
    /// // At the expected schema, the migration is not called.
    /// engine.load_latest_migrating(&run, 1, |_, _| unreachable!("already schema 1"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ///
    /// ```
    /// use actum::books::{Part, SaveCheckpoint};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("essay-3")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"3"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// for draft in [&b"draft 1"[..], b"draft 2"] {
    ///     engine.save_checkpoint(SaveCheckpoint { run: run.clone(), guard: lease.guard.clone(),
    ///         schema_version: 1, parts: vec![Part::whole("draft", draft.to_vec())] })?;
    /// }
    /// // Every version stays readable, not only the latest.
    /// assert_eq!(engine.load_version(&run, 1, 1)?.parts[0].bytes, b"draft 1");
    /// assert!(matches!(engine.load_version(&run, 3, 1), Err(Error::NotFound { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ///
    /// ```
    /// use actum::books::{RecordDecision, Usage, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("triage-12")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"12"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let prompt = digest_of(b"classify ticket 12");
    /// assert!(engine.replay_decision(&run, 0, &prompt)?.is_none(), "not recorded: call the model");
    /// engine.record_decision(RecordDecision { run: run.clone(), guard: lease.guard.clone(),
    ///     position: 0, input_digest: prompt, output: b"billing".to_vec(), rationale: "".into(),
    ///     usage: Usage::default() })?;
    /// let record = engine.replay_decision(&run, 0, &prompt)?.expect("recorded");
    /// assert_eq!(record.output, b"billing");
    /// let other = engine.replay_decision(&run, 0, &digest_of(b"classify ticket 13"));
    /// assert!(matches!(other, Err(Error::Divergence { position: 0, .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ///         parent: None, input: None })?;
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
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            return pg.runs_page(state, after, limit);
        }
        self.read_hot(|hot, cold| Ok(hot.runs_page(cold, state, after, limit)))
    }

    /// Every ledger entry of `run` (acts and compensations, every attempt),
    /// in the order their intents were written; `NotFound` if the run does
    /// not exist.
    ///
    /// ```
    /// use actum::books::{Outcome, StepId, ToolClass};
    /// use actum::engine::{Engine, EngineOptions, StepRequest, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("digest-4")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"4"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// for (step, receipt) in [("fetch", &b"12 items"[..]), ("post", b"posted")] {
    ///     let request = StepRequest { guard: &lease.guard, run: &run, step: &StepId::new(step)?,
    ///         tool: ToolSpec { name: step.into(), class: ToolClass::Queryable },
    ///         args: b"", rationale: "daily digest", compensation: None };
    ///     engine.step(&request, |_| Outcome::Confirmed { receipt: receipt.to_vec() })?;
    /// }
    /// let keys: Vec<String> = engine.effects(&run)?.iter().map(|e| e.key.encode()).collect();
    /// assert_eq!(keys, ["digest-4/fetch/1", "digest-4/post/1"]);
    /// assert!(matches!(engine.effects(&RunId::new("nobody")?), Err(actum::Error::NotFound { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn effects(&self, run: &RunId) -> Result<Vec<EffectEntry>> {
        self.read(|books| {
            existing(books, run)?;
            effects_by_intent(books, run)
                .into_iter()
                .map(|entry| entry.with_bytes(&|d| books.blob(d)))
                .collect()
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
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
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

    /// The input a run was created with, if its creation stored it
    /// ([`CreateRun::input`](crate::books::CreateRun::input), or the
    /// runtime's `start`): what a resumed worker starts from. `None` if
    /// only its digest was given; `NotFound` if there is no such run.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("trip-3")?;
    /// let input = br#"{"to": "Lisbon", "nights": 3}"#;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(input),
    ///     agent_version: "travel@1".into(), trace_id: "t".into(), parent: None,
    ///     input: Some(input.to_vec()) })?;
    /// drop(engine); // a crash: the input is in the log, then in the store
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// assert_eq!(engine.run_input(&run)?.as_deref(), Some(&input[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_input(&self, run: &RunId) -> Result<Option<Vec<u8>>> {
        self.read(|books| {
            let record = books.run(run).ok_or_else(|| Error::NotFound {
                what: format!("run {run}"),
            })?;
            Ok(books.blob(&record.input_digest))
        })
    }

    /// Every table of the books as a [`MemBooks`], to compare with the
    /// reference model.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// for name in ["a", "b"] {
    ///     engine.create_run(CreateRun { run: RunId::new(name)?, input_digest: digest_of(b"x"),
    ///         agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// }
    /// let snapshot = engine.snapshot()?;
    /// // The same books the reads return...
    /// let runs: Vec<_> = snapshot.runs().cloned().collect();
    /// assert_eq!(runs, engine.runs(None, None, 10)?);
    /// // ...and the same books after a crash and recovery.
    /// drop(engine);
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// assert_eq!(engine.snapshot()?, snapshot);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn snapshot(&self) -> Result<MemBooks> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            return pg.snapshot();
        }
        self.read_hot(|hot, cold| hot.snapshot(cold))
    }
}

/// Every ledger entry of `run` in the order their intents were written: the
/// time of the intent, then key order, which puts a step's attempts in
/// order and its compensation after its act (`Engine::effects`).
pub(crate) fn effects_by_intent(books: &dyn BooksRead, run: &RunId) -> Vec<EffectEntry> {
    let mut entries = books.effects_of(run);
    entries.sort_by(|a, b| (a.intended_ms, &a.key).cmp(&(b.intended_ms, &b.key)));
    entries
}

//! One typed method per command, each a thin wrapper over
//! [`Engine::execute`]: it builds the command, commits it and narrows the
//! answer to the call's result type.
//!
//! **Invariant:** no method here reads or writes state on its own; every
//! rule lives in `books::decide`, so the typed API and `execute` (and the
//! log replay) can never disagree.

use crate::books::{
    AcquireLease, Answer, BeginEffect, ClaimNext, Command, CreateRun, FinishEffect, Guard, Operate,
    OperatorAction, Reconcile, RecordDecision, ReleaseLease, RenewLease, RunId, SaveCheckpoint,
    Transition, WorkerId,
};
use crate::error::Result;

use super::answers::{Created, LeaseGrant, Moved, Operated, Recorded, SavedCheckpoint, unexpected};
use super::core::Engine;
use crate::books::Begun;

impl Engine {
    /// Creates a run in `pending`; creating it again with the same input is
    /// a no-op that reports `existed`, with another input an error.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, RunState, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let cmd = CreateRun { run: RunId::new("ticket-4")?, input_digest: digest_of(b"reset password"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None };
    /// let created = engine.create_run(cmd.clone())?;
    /// assert_eq!((created.version, created.state, created.existed), (1, RunState::Pending, false));
    /// // The same request again (a retry) changes nothing.
    /// assert!(engine.create_run(cmd.clone())?.existed);
    /// // Another input under the same name is refused.
    /// let other = engine.create_run(CreateRun { input_digest: digest_of(b"delete account"), ..cmd });
    /// assert!(matches!(other, Err(Error::RunInputMismatch { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_run(&self, cmd: CreateRun) -> Result<Created> {
        match self.answer(Command::CreateRun(cmd))? {
            Answer::RunCreated { run, version } => Ok(Created {
                run,
                version,
                state: crate::books::RunState::Pending,
                existed: false,
            }),
            Answer::RunExisted {
                run,
                version,
                state,
            } => Ok(Created {
                run,
                version,
                state,
                existed: true,
            }),
            other => unexpected(&other, "create_run"),
        }
    }

    /// Moves a run to another state under a live lease; returns its new
    /// version. Illegal moves are `IllegalTransition`.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("ticket-5")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"5"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.acquire_lease(&run, &WorkerId::new("w1")?, 60_000)?;
    /// let to = |to: RunState, expected_version: Option<u64>| Transition { run: run.clone(),
    ///     guard: lease.guard.clone(), to, expected_version, reason: "".into() };
    /// let version = engine.transition(to(RunState::Running, Some(lease.version)))?.version;
    /// assert_eq!(version, lease.version + 1);
    /// // A move based on a stale read is refused.
    /// let stale = engine.transition(to(RunState::Completed, Some(lease.version)));
    /// assert!(matches!(stale, Err(Error::VersionConflict { actual, .. }) if actual == version));
    /// // So is a move the state machine does not allow; neither changed the run.
    /// let illegal = engine.transition(to(RunState::Pending, None));
    /// assert!(matches!(illegal, Err(Error::IllegalTransition { from: RunState::Running, .. })));
    /// assert_eq!(engine.run(&run)?.expect("created").version, version);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn transition(&self, cmd: Transition) -> Result<Moved> {
        match self.answer(Command::Transition(cmd))? {
            Answer::Transitioned {
                run,
                from,
                to,
                version,
            } => Ok(Moved {
                run,
                from,
                to,
                version,
            }),
            other => unexpected(&other, "transition"),
        }
    }

    /// Takes the lease of `run` for `ttl_ms`, with a new fencing token.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::{Error, FsStorage, ManualClock};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let clock = Arc::new(ManualClock::new(1_000));
    /// let engine = Engine::open_with(Arc::new(FsStorage::new()), clock.clone(), dir.path(),
    ///     EngineOptions::default())?;
    /// let run = RunId::new("ticket-6")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"6"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let w1 = engine.acquire_lease(&run, &WorkerId::new("w1")?, 30_000)?;
    /// // While w1's lease lives, nobody else gets the run.
    /// let refused = engine.acquire_lease(&run, &WorkerId::new("w2")?, 30_000);
    /// assert!(matches!(refused, Err(Error::LeaseHeld { expires_ms: 31_000, .. })));
    /// clock.advance_ms(30_000); // w1 stalls and its lease runs out
    /// let w2 = engine.acquire_lease(&run, &WorkerId::new("w2")?, 30_000)?;
    /// assert!(w2.guard.token > w1.guard.token);
    /// // The stalled worker wakes up: its stale token is fenced off.
    /// let late = engine.transition(Transition { run: run.clone(), guard: w1.guard,
    ///     to: RunState::Running, expected_version: None, reason: "".into() });
    /// assert!(matches!(late, Err(Error::Fenced { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_lease(&self, run: &RunId, worker: &WorkerId, ttl_ms: u64) -> Result<LeaseGrant> {
        let cmd = Command::AcquireLease(AcquireLease {
            run: run.clone(),
            worker: worker.clone(),
            ttl_ms,
        });
        let answer = self.answer(cmd)?;
        Ok(LeaseGrant::from_answer(answer, worker, "acquire_lease"))
    }

    /// Takes the lease of the next claimable run, if any: pending, running
    /// or compensating with no live lease, or waiting with its wait's
    /// deadline passed (the claim ends the wait, `elapsed`, in the same
    /// commit), in the order they became claimable. Two workers never get
    /// the same run while a lease is live.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("ticket-7")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"7"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("a pending run");
    /// assert_eq!(lease.run, run);
    /// // The only run is leased: the next worker finds nothing to do.
    /// assert!(engine.claim_next(&WorkerId::new("w2")?, 30_000)?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn claim_next(&self, worker: &WorkerId, ttl_ms: u64) -> Result<Option<LeaseGrant>> {
        self.claim(worker, ttl_ms, None)
    }

    /// [`claim_next`](Engine::claim_next), of the runs whose
    /// `agent_version` is one of `agents` only: a runtime claims the agents
    /// it serves and leaves the others to theirs.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// for (name, agent) in [("mail-1", "mail@1"), ("trip-1", "travel@2")] {
    ///     engine.create_run(CreateRun { run: RunId::new(name)?, input_digest: digest_of(b"x"),
    ///         agent_version: agent.into(), trace_id: "t".into(), parent: None, input: None })?;
    /// }
    /// let travel = ["travel@1".to_string(), "travel@2".to_string()];
    /// let w = WorkerId::new("w1")?;
    /// // The older run is a mail; a travel worker passes over it.
    /// let lease = engine.claim_next_of(&w, 30_000, &travel)?.expect("a travel run");
    /// assert_eq!(lease.run.as_str(), "trip-1");
    /// assert!(engine.claim_next_of(&w, 30_000, &travel)?.is_none());
    /// assert_eq!(engine.claim_next(&w, 30_000)?.expect("the mail").run.as_str(), "mail-1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn claim_next_of(
        &self,
        worker: &WorkerId,
        ttl_ms: u64,
        agents: &[String],
    ) -> Result<Option<LeaseGrant>> {
        self.claim(worker, ttl_ms, Some(agents.to_vec()))
    }

    fn claim(
        &self,
        worker: &WorkerId,
        ttl_ms: u64,
        agents: Option<Vec<String>>,
    ) -> Result<Option<LeaseGrant>> {
        let cmd = Command::ClaimNext(ClaimNext {
            worker: worker.clone(),
            ttl_ms,
            agents,
        });
        match self.answer(cmd)? {
            Answer::NothingToClaim => Ok(None),
            answer => Ok(Some(LeaseGrant::from_answer(answer, worker, "claim_next"))),
        }
    }

    /// Extends a live lease to now + `ttl_ms`; returns the new expiry.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::{Error, FsStorage, ManualClock};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let clock = Arc::new(ManualClock::new(1_000));
    /// let engine = Engine::open_with(Arc::new(FsStorage::new()), clock.clone(), dir.path(),
    ///     EngineOptions::default())?;
    /// # let run = RunId::new("ticket-8")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"8"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.acquire_lease(&run, &WorkerId::new("w1")?, 30_000)?;
    /// assert_eq!(lease.expires_ms, 31_000);
    /// clock.advance_ms(20_000);
    /// assert_eq!(engine.renew_lease(&run, &lease.guard, 30_000)?, 51_000);
    /// // Past the first expiry, the renewed lease still keeps others out.
    /// clock.advance_ms(20_000);
    /// let other = engine.acquire_lease(&run, &WorkerId::new("w2")?, 30_000);
    /// assert!(matches!(other, Err(Error::LeaseHeld { expires_ms: 51_000, .. })));
    /// // A lease that ran out cannot be renewed.
    /// clock.advance_ms(10_000);
    /// let lost = engine.renew_lease(&run, &lease.guard, 30_000);
    /// assert!(matches!(lost, Err(Error::LeaseLost { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn renew_lease(&self, run: &RunId, guard: &Guard, ttl_ms: u64) -> Result<u64> {
        let cmd = Command::RenewLease(RenewLease {
            run: run.clone(),
            guard: guard.clone(),
            ttl_ms,
        });
        let answer = self.answer(cmd)?;
        Ok(LeaseGrant::from_answer(answer, &guard.worker, "renew_lease").expires_ms)
    }

    /// Gives a live lease up; returns the run's version.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("ticket-9")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"9"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let w1 = engine.acquire_lease(&run, &WorkerId::new("w1")?, 60_000)?;
    /// assert_eq!(engine.release_lease(&run, &w1.guard)?, w1.version + 1);
    /// // The run is free at once: another worker takes it, with a larger token.
    /// let w2 = engine.acquire_lease(&run, &WorkerId::new("w2")?, 60_000)?;
    /// assert!(w2.guard.token > w1.guard.token);
    /// // The lease w1 gave up is gone for good.
    /// assert!(matches!(engine.release_lease(&run, &w1.guard), Err(Error::Fenced { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn release_lease(&self, run: &RunId, guard: &Guard) -> Result<u64> {
        let cmd = Command::ReleaseLease(ReleaseLease {
            run: run.clone(),
            guard: guard.clone(),
        });
        match self.answer(cmd)? {
            Answer::Released { version, .. } => Ok(version),
            other => unexpected(&other, "release_lease"),
        }
    }

    /// Ceremony points 1 to 3, 6 and 7: derives the key, checks the ledger
    /// and writes the intent (with compensation and rationale) durably.
    ///
    /// ```
    /// use actum::books::{BeginEffect, Begun, FinishEffect, Outcome, StepId, ToolClass, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("booking-3")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"3"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let begin = BeginEffect { run: run.clone(), step: StepId::new("email")?,
    ///     guard: lease.guard.clone(), tool: "mail.send".into(),
    ///     tool_class: ToolClass::Idempotent { dedup_window_ms: 3_600_000 },
    ///     args_digest: digest_of(b"to: ann"), args: None, rationale: "confirm".into(), compensation: None };
    /// // A fresh step: the intent is durable; act now, under this key.
    /// let Begun::Proceed { key, .. } = engine.begin_effect(begin.clone())? else { panic!("fresh") };
    /// assert_eq!(key.encode(), "booking-3/email/1");
    /// // No outcome yet (a crash): inside the tool's window, resend with the same key.
    /// assert!(matches!(engine.begin_effect(begin.clone())?, Begun::Resend { key: k, .. } if k == key));
    /// let sent = Outcome::Confirmed { receipt: b"msg-1".to_vec() };
    /// engine.finish_effect(FinishEffect { key, guard: lease.guard.clone(), outcome: sent })?;
    /// // Done: the stored receipt, and no second email.
    /// assert!(matches!(engine.begin_effect(begin)?, Begun::Replay { receipt, .. } if receipt == b"msg-1"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn begin_effect(&self, cmd: BeginEffect) -> Result<Begun> {
        let answer = self.answer(Command::BeginEffect(cmd))?;
        match answer {
            Answer::Begun(begun) => Ok(begun),
            other => unexpected(&other, "begin_effect"),
        }
    }

    /// Ceremony point 5: records an act's outcome durably; returns the
    /// entry's status name.
    ///
    /// ```
    /// use actum::books::{BeginEffect, Begun, FinishEffect, Outcome, StepId, ToolClass, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("booking-4")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"4"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let begun = engine.begin_effect(BeginEffect { run: run.clone(), step: StepId::new("sms")?,
    ///     guard: lease.guard.clone(), tool: "sms.send".into(), tool_class: ToolClass::NotIdempotent,
    ///     args_digest: digest_of(b"code 1234"), args: None, rationale: "2fa".into(), compensation: None })?;
    /// let Begun::Proceed { key, .. } = begun else { panic!("a fresh step") };
    /// let finish = |outcome| FinishEffect { key: key.clone(), guard: lease.guard.clone(), outcome };
    /// let sent = Outcome::Confirmed { receipt: b"sms-1".to_vec() };
    /// assert_eq!(engine.finish_effect(finish(sent.clone()))?, "confirmed");
    /// // The same outcome again (a retry after a lost answer) is a no-op...
    /// assert_eq!(engine.finish_effect(finish(sent))?, "confirmed");
    /// // ...and another one is refused: an outcome is a fact.
    /// let failed = Outcome::Failed { retryable: false, reason: "bounced".into() };
    /// assert!(matches!(engine.finish_effect(finish(failed)), Err(Error::EffectNotOpen { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn finish_effect(&self, cmd: FinishEffect) -> Result<&'static str> {
        settled(self.answer(Command::FinishEffect(cmd))?, "finish_effect")
    }

    /// Resolves an ambiguous effect from what a query or an operator found.
    ///
    /// ```
    /// use actum::books::{BeginEffect, Begun, FinishEffect, Outcome, Reconcile, StepId, ToolClass, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("payout-2")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"2"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let begin = BeginEffect { run: run.clone(), step: StepId::new("wire")?, guard: lease.guard.clone(),
    ///     tool: "bank.wire".into(), tool_class: ToolClass::NotIdempotent,
    ///     args_digest: digest_of(b"eur 500"), args: None, rationale: "payout".into(), compensation: None };
    /// let Begun::Proceed { key, .. } = engine.begin_effect(begin.clone())? else { panic!("fresh") };
    /// let lost = Outcome::Unknown { reason: "the bank timed out".into() };
    /// engine.finish_effect(FinishEffect { key: key.clone(), guard: lease.guard.clone(), outcome: lost })?;
    /// // Nobody knows if the wire went out, and the tool cannot be asked: never resent.
    /// assert!(matches!(engine.begin_effect(begin.clone())?, Begun::Unknown { .. }));
    /// // A person finds it on the statement and settles it.
    /// let found = Reconcile { key, guard: lease.guard.clone(),
    ///     outcome: Outcome::Confirmed { receipt: b"stmt line 14".to_vec() }, note: "statement".into() };
    /// assert_eq!(engine.reconcile(found)?, "confirmed");
    /// assert!(matches!(engine.begin_effect(begin)?, Begun::Replay { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reconcile(&self, cmd: Reconcile) -> Result<&'static str> {
        settled(self.answer(Command::Reconcile(cmd))?, "reconcile")
    }

    /// Saves a checkpoint; parts already stored (same digest) are not
    /// written again, and a part in append form writes only its new bytes.
    /// A part that asks ([`Part::held_inline`]) and is at most
    /// [`CHECKPOINT_INLINE_BYTES_MAX`] bytes is held in the checkpoint's
    /// metadata instead of a blob (`parts_inline`): a run's small parts that
    /// change with each checkpoint load from its metadata rows, side by side.
    ///
    /// [`CHECKPOINT_INLINE_BYTES_MAX`]: crate::books::CHECKPOINT_INLINE_BYTES_MAX
    /// [`Part::held_inline`]: crate::books::Part::held_inline
    ///
    /// ```
    /// use actum::books::{Part, SaveCheckpoint};
    /// use actum::engine::{Engine, EngineOptions};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("essay-1")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"1"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let save = |outline: &[u8], draft: &[u8]| SaveCheckpoint { run: run.clone(),
    ///     guard: lease.guard.clone(), schema_version: 1,
    ///     parts: vec![Part::whole("outline", outline.to_vec()),
    ///         Part::whole("draft", draft.to_vec()),
    ///         Part::whole("cursor", outline.len().to_le_bytes()).held_inline()] };
    /// let first = engine.save_checkpoint(save(b"3 sections", b"intro"))?;
    /// assert_eq!((first.version, first.blobs_written, first.blobs_reused), (1, 2, 0));
    /// // The outline did not change: it is stored once, and only the draft is written.
    /// let second = engine.save_checkpoint(save(b"3 sections", b"intro, body"))?;
    /// assert_eq!((second.version, second.blobs_written, second.blobs_reused), (2, 1, 1));
    /// // The cursor asked to be held in each checkpoint's metadata: no blob.
    /// assert_eq!((first.parts_inline, second.parts_inline), (1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A part that grows by appending is saved in append form: the bytes of
    /// a part of any earlier checkpoint of the run, followed by new bytes.
    /// Only the new bytes are written; a load returns the whole part. A base
    /// that does not exist is refused as `NotFound`, naming the run, the
    /// version and the part.
    ///
    /// ```
    /// use actum::books::{Part, PartBase, SaveCheckpoint};
    /// use actum::engine::{Engine, EngineOptions};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("chat-1")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"1"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let save = |part: Part| SaveCheckpoint { run: run.clone(), guard: lease.guard.clone(),
    ///     schema_version: 1, parts: vec![part] };
    /// engine.save_checkpoint(save(Part::whole("messages", b"hi;".to_vec())))?;
    /// let grown = Part::append("messages", PartBase::new(1, "messages"), b"hello;".to_vec());
    /// let second = engine.save_checkpoint(save(grown))?;
    /// assert_eq!((second.version, second.bytes_written), (2, 6));
    /// let latest = engine.load_latest(&run, 1)?.expect("saved");
    /// assert_eq!(latest.parts, [Part::whole("messages", b"hi;hello;".to_vec())]);
    /// let gone = Part::append("messages", PartBase::new(9, "messages"), b"?".to_vec());
    /// assert!(matches!(engine.save_checkpoint(save(gone)), Err(actum::Error::NotFound { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn save_checkpoint(&self, cmd: SaveCheckpoint) -> Result<SavedCheckpoint> {
        match self.answer(Command::SaveCheckpoint(cmd))? {
            Answer::CheckpointSaved {
                run,
                version,
                blobs_written,
                bytes_written,
                blobs_reused,
                parts_inline,
            } => Ok(SavedCheckpoint {
                run,
                version,
                blobs_written,
                bytes_written,
                blobs_reused,
                parts_inline,
            }),
            other => unexpected(&other, "save_checkpoint"),
        }
    }

    /// Journals a model call at its position, or returns the recorded one
    /// (same input) or `Divergence` (another input).
    ///
    /// ```
    /// use actum::books::{RecordDecision, Usage, digest_of};
    /// use actum::engine::{Engine, EngineOptions, Recorded};
    /// use actum::Error;
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("trip-1")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"1"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let call = RecordDecision { run: run.clone(), guard: lease.guard.clone(), position: 0,
    ///     input_digest: digest_of(b"plan the trip"), output: b"fly on monday".to_vec(),
    ///     rationale: "cheapest".into(), usage: Usage { tokens_in: 900, tokens_out: 40, cost_micros: 1_200 } };
    /// assert_eq!(engine.record_decision(call.clone())?, Recorded::New { position: 0 });
    /// // A resumed worker asks again: the recorded output; do not call the model.
    /// let Recorded::Replay(record) = engine.record_decision(call.clone())? else { panic!("recorded") };
    /// assert_eq!(record.output, b"fly on monday");
    /// // Another input at that position: the agent diverged from its journal.
    /// let other = RecordDecision { input_digest: digest_of(b"plan another trip"), ..call };
    /// assert!(matches!(engine.record_decision(other), Err(Error::Divergence { position: 0, .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_decision(&self, cmd: RecordDecision) -> Result<Recorded> {
        match self.answer(Command::RecordDecision(cmd))? {
            Answer::DecisionRecorded { position, .. } => Ok(Recorded::New { position }),
            Answer::DecisionReplay { record } => Ok(Recorded::Replay(record)),
            other => unexpected(&other, "record_decision"),
        }
    }

    /// An operator's `action` on `run`, without its lease (see
    /// [`OperatorAction`]): journaled with `operator` and `reason`.
    /// Asking for the state the run is already in changes nothing.
    ///
    /// ```
    /// use actum::books::{CreateRun, OperatorAction, RunId, RunState, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("invoice-9")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"9"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let paused = engine.operate(&run, OperatorAction::Pause, "ops-anna", "fraud check")?;
    /// assert_eq!((paused.state, paused.changed), (RunState::Paused, true));
    /// // A paused run is not handed to workers.
    /// assert!(engine.claim_next(&WorkerId::new("w1")?, 30_000)?.is_none());
    /// let again = engine.operate(&run, OperatorAction::Pause, "ops-anna", "retry")?;
    /// assert!(!again.changed);
    /// engine.operate(&run, OperatorAction::Resume, "ops-anna", "cleared")?;
    /// assert!(engine.claim_next(&WorkerId::new("w1")?, 30_000)?.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn operate(
        &self,
        run: &RunId,
        action: OperatorAction,
        operator: &str,
        reason: &str,
    ) -> Result<Operated> {
        let cmd = Command::Operate(Operate {
            run: run.clone(),
            action,
            operator: operator.to_string(),
            reason: reason.to_string(),
        });
        match self.answer(cmd)? {
            Answer::Operated {
                run,
                state,
                version,
                changed,
            } => Ok(Operated {
                run,
                state,
                version,
                changed,
            }),
            other => unexpected(&other, "operate"),
        }
    }

    /// Commits `commands` atomically: all land in one WAL record, or none
    /// does (`BatchRefused` names the refused one). Returns their answers.
    ///
    /// ```
    /// use actum::books::{Answer, Command, Part, RunState, SaveCheckpoint, Transition};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    /// # use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("order-3")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"3"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// let move_to = |to: RunState| Command::Transition(Transition { run: run.clone(),
    ///     guard: lease.guard.clone(), to, expected_version: None, reason: "".into() });
    /// // Each command sees the ones before it: running -> pending is refused, and then
    /// // the first command does not land either.
    /// let refused = engine.commit_batch(vec![move_to(RunState::Running), move_to(RunState::Pending)]);
    /// assert!(matches!(refused, Err(Error::BatchRefused { index: 1, .. })));
    /// assert_eq!(engine.run(&run)?.expect("created").state, RunState::Pending);
    /// let save = Command::SaveCheckpoint(SaveCheckpoint { run: run.clone(), guard: lease.guard.clone(),
    ///     schema_version: 1, parts: vec![Part::whole("cart", b"lamp".to_vec())] });
    /// let answers = engine.commit_batch(vec![move_to(RunState::Running), save])?;
    /// assert!(matches!(answers.as_slice(), [Answer::Transitioned { .. }, Answer::CheckpointSaved { .. }]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn commit_batch(&self, commands: Vec<Command>) -> Result<Vec<Answer>> {
        let count = commands.len();
        match self.answer(Command::Batch(commands))? {
            Answer::Batch(answers) => {
                assert_eq!(answers.len(), count, "one answer per command");
                Ok(answers)
            }
            other => unexpected(&other, "commit_batch"),
        }
    }
}

fn settled(answer: Answer, call: &str) -> Result<&'static str> {
    match answer {
        Answer::Settled { status, .. } => Ok(status),
        other => unexpected(&other, call),
    }
}

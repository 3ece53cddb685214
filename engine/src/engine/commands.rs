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

use super::answers::{Created, LeaseGrant, Operated, Recorded, SavedCheckpoint, unexpected};
use super::core::Engine;
use crate::books::Begun;

impl Engine {
    /// Creates a run in `pending`; creating it again with the same input is
    /// a no-op that reports `existed`, with another input an error.
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
    pub fn transition(&self, cmd: Transition) -> Result<u64> {
        match self.answer(Command::Transition(cmd))? {
            Answer::Transitioned { version, .. } => Ok(version),
            other => unexpected(&other, "transition"),
        }
    }

    /// Takes the lease of `run` for `ttl_ms`, with a new fencing token.
    pub fn acquire_lease(&self, run: &RunId, worker: &WorkerId, ttl_ms: u64) -> Result<LeaseGrant> {
        let cmd = Command::AcquireLease(AcquireLease {
            run: run.clone(),
            worker: worker.clone(),
            ttl_ms,
        });
        let answer = self.answer(cmd)?;
        Ok(LeaseGrant::from_answer(answer, worker, "acquire_lease"))
    }

    /// Takes the lease of the next claimable run (pending, or running with
    /// an expired lease), if any.
    pub fn claim_next(&self, worker: &WorkerId, ttl_ms: u64) -> Result<Option<LeaseGrant>> {
        let cmd = Command::ClaimNext(ClaimNext {
            worker: worker.clone(),
            ttl_ms,
        });
        match self.answer(cmd)? {
            Answer::NothingToClaim => Ok(None),
            answer => Ok(Some(LeaseGrant::from_answer(answer, worker, "claim_next"))),
        }
    }

    /// Extends a live lease to now + `ttl_ms`; returns the new expiry.
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
    pub fn begin_effect(&self, cmd: BeginEffect) -> Result<Begun> {
        let answer = self.answer(Command::BeginEffect(cmd))?;
        match answer {
            Answer::Begun(begun) => Ok(begun),
            other => unexpected(&other, "begin_effect"),
        }
    }

    /// Ceremony point 5: records an act's outcome durably; returns the
    /// entry's status name.
    pub fn finish_effect(&self, cmd: FinishEffect) -> Result<&'static str> {
        settled(self.answer(Command::FinishEffect(cmd))?, "finish_effect")
    }

    /// Resolves an ambiguous effect from what a query or an operator found.
    pub fn reconcile(&self, cmd: Reconcile) -> Result<&'static str> {
        settled(self.answer(Command::Reconcile(cmd))?, "reconcile")
    }

    /// Saves a checkpoint; parts already stored (same digest) are not
    /// written again.
    pub fn save_checkpoint(&self, cmd: SaveCheckpoint) -> Result<SavedCheckpoint> {
        match self.answer(Command::SaveCheckpoint(cmd))? {
            Answer::CheckpointSaved {
                run,
                version,
                blobs_written,
                bytes_written,
                blobs_reused,
            } => Ok(SavedCheckpoint {
                run,
                version,
                blobs_written,
                bytes_written,
                blobs_reused,
            }),
            other => unexpected(&other, "save_checkpoint"),
        }
    }

    /// Journals a model call at its position, or returns the recorded one
    /// (same input) or `Divergence` (another input).
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
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None })?;
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

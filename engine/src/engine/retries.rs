//! An operator's retry of a failed run and fork of a run into a new one,
//! from a chosen checkpoint ([`Engine::retry_run`], [`Engine::fork_run`]),
//! with no lease, journaled with who and why.
//!
//! **Invariant:** like every typed method, these only build a command and
//! narrow its answer; the rules live in `books/rules/retry.rs`.

use crate::books::{Answer, Command, EffectKey, ForkRun, RetryRun, RunId};
use crate::error::Result;

use super::answers::unexpected;
use super::core::Engine;

/// What [`Engine::retry_run`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retried {
    /// The run, pending again.
    pub run: RunId,
    /// Its version (the record's change counter) now.
    pub version: u64,
    /// The failed acts reopened: each of their steps acts again with its
    /// next attempt (a new key).
    pub reopened: Vec<EffectKey>,
    /// The checkpoint version saved again as the newest, if the one chosen
    /// was not the latest.
    pub restored: Option<u64>,
}

/// What [`Engine::fork_run`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forked {
    /// The new run.
    pub run: RunId,
    /// The run it was forked from.
    pub from: RunId,
    /// The checkpoint version of `from` it starts from, if any.
    pub checkpoint: Option<u64>,
    /// False if this fork existed already (nothing changed).
    pub created: bool,
}

impl Engine {
    /// Puts the failed `run` back to `pending`, as the operator
    /// `operator`, journaled in its audit with the reason: its next claim
    /// goes on with it. A confirmed act stays confirmed and is replayed,
    /// never sent again; each step whose latest act failed is reopened (the
    /// entry keeps its failure; the step's next begin opens the next
    /// attempt, a new key). `checkpoint` chooses the state it goes on
    /// from: `None` its latest; another version is saved again as the
    /// newest (by reference: no part is copied). Refused, naming the run
    /// and changing nothing (`RetryRefused`): a run that is not failed, one
    /// whose saga undid anything (fork it instead), a child its parent
    /// waits or waited for; a checkpoint it does not have is `NotFound`.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("refund-7")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"7"),
    ///     agent_version: "refund@1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// for (to, why) in [(RunState::Running, "starts"), (RunState::Failed, "the answer did not parse")] {
    ///     engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(), to,
    ///         expected_version: None, reason: why.into() })?;
    /// }
    /// let retried = engine.retry_run(&run, None, "ops-anna", "the parser is fixed")?;
    /// assert!(retried.reopened.is_empty());
    /// assert_eq!(engine.run(&run)?.expect("kept").state, RunState::Pending);
    /// // Pending now, not failed: a second retry is refused.
    /// assert!(engine.retry_run(&run, None, "ops-anna", "again").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retry_run(
        &self,
        run: &RunId,
        checkpoint: Option<u64>,
        operator: &str,
        reason: &str,
    ) -> Result<Retried> {
        let cmd = Command::RetryRun(RetryRun {
            run: run.clone(),
            checkpoint,
            operator: operator.to_string(),
            reason: reason.to_string(),
        });
        match self.answer(cmd)? {
            Answer::Retried {
                run,
                version,
                reopened,
                restored,
            } => Ok(Retried {
                run,
                version,
                reopened,
                restored,
            }),
            other => unexpected(&other, "retry_run"),
        }
    }

    /// Starts `new_run` from `run` as the operator `operator`, journaled
    /// in the new run's audit with the reason: the same agent version and
    /// input, `pending`, with `run`'s checkpoint `checkpoint` (its latest
    /// if `None`; nothing if it has none) as its first, shared by
    /// reference. The new run has its own journal and ledger, so its steps
    /// act anew under its own keys; `run` is not touched (any state). A
    /// fork that exists already changes nothing (`created: false`); a
    /// `new_run` that exists as anything else is `InvalidCommand`, a
    /// checkpoint `run` does not have `NotFound`.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, RunState, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("trip-1")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"lisbon"),
    ///     agent_version: "trip@1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let again = RunId::new("trip-1b")?;
    /// let forked = engine.fork_run(&run, &again, None, "ops-anna", "another branch")?;
    /// assert!(forked.created);
    /// assert_eq!(forked.checkpoint, None, "trip-1 saved no checkpoint");
    /// let record = engine.run(&again)?.expect("created");
    /// assert_eq!((record.state, record.agent_version.as_str()), (RunState::Pending, "trip@1"));
    /// // Again: the same fork, nothing changes.
    /// assert!(!engine.fork_run(&run, &again, None, "ops-anna", "retried")?.created);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fork_run(
        &self,
        run: &RunId,
        new_run: &RunId,
        checkpoint: Option<u64>,
        operator: &str,
        reason: &str,
    ) -> Result<Forked> {
        let cmd = Command::ForkRun(ForkRun {
            run: run.clone(),
            new_run: new_run.clone(),
            checkpoint,
            operator: operator.to_string(),
            reason: reason.to_string(),
        });
        match self.answer(cmd)? {
            Answer::Forked {
                run,
                from,
                checkpoint,
                created,
            } => Ok(Forked {
                run,
                from,
                checkpoint,
                created,
            }),
            other => unexpected(&other, "fork_run"),
        }
    }
}

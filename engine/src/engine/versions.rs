//! Agent versions through the engine: an operator moves a run to another
//! agent version ([`Engine::move_version`]), with no lease, journaled with
//! who and why. A run keeps the version it started with; a runtime resumes
//! it only with a handler of that version (or one registered as compatible
//! with it), and reads the version each time it claims the run, so the
//! next claim after a move resumes it with the new version's handler.
//!
//! **Invariant:** like every typed method, this only builds a command and
//! narrows its answer; the rule lives in `books/rules/version.rs`.

use crate::books::{Answer, Command, MoveVersion, RunId};
use crate::error::Result;

use super::answers::unexpected;
use super::core::Engine;

/// What [`Engine::move_version`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionMoved {
    /// The run.
    pub run: RunId,
    /// The agent version it runs at now.
    pub agent_version: String,
    /// Its version (the record's change counter) now.
    pub version: u64,
    /// False if it ran at that agent version already (nothing changed).
    pub changed: bool,
}

impl Engine {
    /// Moves `run` from the agent version `from` to `to` (`kind@1` to
    /// `kind@2` for a runtime's runs), as the operator `operator`, with no
    /// lease; journaled in the run's audit with the reason. The run keeps
    /// its state, journal, ledger and checkpoints: the new version's
    /// handler replays them. A run at `to` already changes nothing
    /// (`changed: false`). Refused, naming the run: over
    /// (`RunTerminal`), at another version than `from`
    /// (`AgentVersionMismatch`), or held by a worker's live lease
    /// (`LeaseHeld`: the holder runs the old version's handler; move the
    /// run once it parks, ends, pauses or its lease runs out).
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("refund-7")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"7"),
    ///     agent_version: "refund@1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let moved = engine.move_version(&run, "refund@1", "refund@2", "ops-anna", "v2 rounds right")?;
    /// assert_eq!((moved.agent_version.as_str(), moved.changed), ("refund@2", true));
    /// // Again: nothing changes. From a version it is not at: refused.
    /// assert!(!engine.move_version(&run, "refund@1", "refund@2", "ops-anna", "retry")?.changed);
    /// assert!(engine.move_version(&run, "refund@1", "refund@3", "ops-anna", "no").is_err());
    /// // A run a worker holds waits for its holder to let go.
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// assert!(engine.move_version(&run, "refund@2", "refund@3", "ops-anna", "busy").is_err());
    /// engine.release_lease(&run, &lease.guard)?;
    /// assert!(engine.move_version(&run, "refund@2", "refund@3", "ops-anna", "free")?.changed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn move_version(
        &self,
        run: &RunId,
        from: &str,
        to: &str,
        operator: &str,
        reason: &str,
    ) -> Result<VersionMoved> {
        let cmd = Command::MoveVersion(MoveVersion {
            run: run.clone(),
            from: from.to_string(),
            to: to.to_string(),
            operator: operator.to_string(),
            reason: reason.to_string(),
        });
        match self.answer(cmd)? {
            Answer::VersionMoved {
                run,
                agent_version,
                version,
                changed,
            } => Ok(VersionMoved {
                run,
                agent_version,
                version,
                changed,
            }),
            other => unexpected(&other, "move_version"),
        }
    }
}

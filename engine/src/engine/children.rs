//! Child runs through the engine: a parent's step starts a child run and
//! waits for its end in one commit ([`Engine::start_child`]). The child is
//! an ordinary run (claimed, leased, budgeted on its own and drawing on its
//! ancestors' budgets); when it reaches a terminal state, the same commit
//! ends the parent's wait with the child's state and the version of its
//! last checkpoint, and the parent becomes claimable again.
//!
//! **Invariant:** a parent's step starts at most one child. The child's id
//! is derived from the parent and the step ([`child_run_id`]), and the
//! child and the parent's wait for it are committed together, so a crash
//! leaves both or neither, and a parent re-running the step after a crash
//! names the same child (created already: the create changes nothing) and
//! is answered with its wait as it stands.

use crate::books::{
    Answer, CHILDREN_MAX, Command, CreateRun, Digest, Guard, Join, OpenWait, RunId, RunState,
    StepId, WaitFor, WaitRecord, child_run_id, children_run_ids,
};
use crate::error::{Error, Result};
use crate::planted::PlantedBug;

use super::answers::unexpected;
use super::core::Engine;

/// The child run a parent's step starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildSpec {
    /// Digest of the child's input (a re-run of the step must present the
    /// same one).
    pub input_digest: Digest,
    /// The agent build that runs the child.
    pub agent_version: String,
    /// The child's trace id (the parent's, typically).
    pub trace_id: String,
    /// The child's input itself, kept in the blob store like
    /// [`CreateRun::input`] (`None` keeps the digest only).
    pub input: Option<Vec<u8>>,
}

/// What [`Engine::start_child`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildStarted {
    /// The child run: `<parent>:<step>`.
    pub child: RunId,
    /// False if the child existed already (the step ran before).
    pub created: bool,
    /// The parent's wait for the child. `Open`: the parent is waiting and
    /// the caller's lease is gone, so the worker drops the parent.
    /// `ChildEnded`: the child had ended; the parent goes on under the
    /// caller's lease with the child's state and last checkpoint.
    pub wait: WaitRecord,
    /// The parent's state now.
    pub state: RunState,
}

/// The commands [`Engine::start_child`] commits as one batch: the child's
/// `CreateRun` (the child named by [`child_run_id`]) and the parent's
/// `OpenWait` for it. A runtime or a test that mirrors the engine's
/// decisions holds this batch to its model.
pub fn start_child_command(
    parent: &RunId,
    guard: &Guard,
    step: &StepId,
    spec: ChildSpec,
    deadline_ms: Option<u64>,
    reason: &str,
) -> Result<Command> {
    let child = child_run_id(parent, step)?;
    let commands = child_commands(parent, &child, guard, step, spec, deadline_ms, reason);
    Ok(Command::Batch(commands.into()))
}

/// The creation of `parent`'s child `child` as `spec` says.
fn create_child(parent: &RunId, child: &RunId, spec: ChildSpec) -> Command {
    Command::CreateRun(CreateRun {
        run: child.clone(),
        input_digest: spec.input_digest,
        agent_version: spec.agent_version,
        trace_id: spec.trace_id,
        parent: Some(parent.clone()),
        input: spec.input,
    })
}

/// The child's creation and the parent's wait for it.
fn child_commands(
    parent: &RunId,
    child: &RunId,
    guard: &Guard,
    step: &StepId,
    spec: ChildSpec,
    deadline_ms: Option<u64>,
    reason: &str,
) -> [Command; 2] {
    [
        create_child(parent, child, spec),
        Command::OpenWait(OpenWait {
            run: parent.clone(),
            guard: guard.clone(),
            step: step.clone(),
            wait_for: WaitFor::Child { run: child.clone() },
            deadline_ms,
            reason: reason.to_string(),
        }),
    ]
}

impl Engine {
    /// Starts the child run of `step` of the running run `parent` and
    /// waits for its end, in one commit: the child is created `pending`
    /// with `parent` as its parent, and the parent moves to
    /// `waiting_tool`, its lease released. The child's end (completed,
    /// failed or cancelled) ends the wait and wakes the parent; so does
    /// `deadline_ms` passing first. Asking again (after a crash, or once
    /// woken) creates nothing and answers with the wait as it stands. A
    /// refusal is the refused half's error (`RunNotRunning` for a parent
    /// an operator paused, `Fenced`, `RunInputMismatch`, ...), and then
    /// neither half landed.
    ///
    /// ```
    /// use actum::books::{CreateRun, Part, RunId, RunState, SaveCheckpoint, StepId, Transition,
    ///     WaitStatus, WorkerId, digest_of};
    /// use actum::engine::{ChildSpec, Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let parent = RunId::new("research-1")?;
    /// engine.create_run(CreateRun { run: parent.clone(), input_digest: digest_of(b"1"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let start = |run: &RunId, lease: &actum::engine::LeaseGrant| engine.transition(Transition {
    ///     run: run.clone(), guard: lease.guard.clone(), to: RunState::Running,
    ///     expected_version: None, reason: "start".into() });
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// start(&parent, &lease)?;
    /// let step = StepId::new("summarize")?;
    /// let spec = ChildSpec { input_digest: digest_of(b"notes"), agent_version: "1".into(),
    ///     trace_id: "t".into(), input: Some(b"notes".to_vec()) };
    /// let started = engine.start_child(&parent, &lease.guard, &step, spec.clone(), None, "fan out")?;
    /// assert_eq!((started.created, started.state), (true, RunState::WaitingTool));
    /// // The child is the only run to claim; it runs, saves its result and ends.
    /// let child_lease = engine.claim_next(&WorkerId::new("w2")?, 30_000)?.expect("the child");
    /// assert_eq!(child_lease.run, started.child);
    /// start(&started.child, &child_lease)?;
    /// engine.save_checkpoint(SaveCheckpoint { run: started.child.clone(),
    ///     guard: child_lease.guard.clone(), schema_version: 1,
    ///     parts: vec![Part::whole("summary", b"three findings".to_vec())] })?;
    /// engine.transition(Transition { run: started.child.clone(), guard: child_lease.guard,
    ///     to: RunState::Completed, expected_version: None, reason: "done".into() })?;
    /// // Its end woke the parent; asking again hands over the result.
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("woken");
    /// let again = engine.start_child(&parent, &lease.guard, &step, spec, None, "fan out")?;
    /// assert!(!again.created);
    /// let WaitStatus::ChildEnded { state, checkpoint: Some(version) } = again.wait.status else {
    ///     panic!("the child ended")
    /// };
    /// assert_eq!(state, RunState::Completed);
    /// let result = engine.load_version(&again.child, version, 1)?;
    /// assert_eq!(result.parts[0].bytes, b"three findings");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start_child(
        &self,
        parent: &RunId,
        guard: &Guard,
        step: &StepId,
        spec: ChildSpec,
        deadline_ms: Option<u64>,
        reason: &str,
    ) -> Result<ChildStarted> {
        let planted_split = self.planted(PlantedBug::SpawnChildTwice);
        let child = if planted_split {
            // A fresh id per lease: the very bug the derived id prevents.
            RunId::new(format!("{parent}:{step}.{}", guard.token.0))?
        } else {
            child_run_id(parent, step)?
        };
        let [create, wait] = child_commands(parent, &child, guard, step, spec, deadline_ms, reason);
        let answers = if planted_split {
            // Planted `SpawnChildTwice`: two commits, so a crash between
            // them leaves a child no wait names.
            vec![self.answer(create)?, self.answer(wait)?]
        } else {
            // The batch is how the two land together, not the caller's
            // business: a refusal is answered as the refused command's.
            let answered =
                self.answer(Command::Batch(vec![create, wait]))
                    .map_err(|e| match e {
                        Error::BatchRefused { cause, .. } => *cause,
                        other => other,
                    })?;
            match answered {
                Answer::Batch(answers) => answers,
                other => unexpected(&other, "start_child"),
            }
        };
        match answers.as_slice() {
            [created, Answer::Waited { wait, state }] => Ok(ChildStarted {
                child,
                created: matches!(created, Answer::RunCreated { .. }),
                wait: wait.clone(),
                state: *state,
            }),
            _ => unexpected(&Answer::Batch(answers), "start_child"),
        }
    }

    /// Starts the children of a fan-out at `step` of the running run
    /// `parent`, one per spec, and waits for all of them or the first to
    /// end ([`Join`]), in one commit: every child is created `pending` with
    /// `parent` as its parent (named by [`children_run_ids`], in the order
    /// of `specs`), and the parent moves to `waiting_tool`, its lease
    /// released. The join ends the wait and wakes the parent with how each
    /// awaited child ended; so does `deadline_ms` passing first (the
    /// children run on). With [`Join::First`] the commit that ends the
    /// first child cancels the others (a run that acted compensates first):
    /// their work is no longer wanted, and a child must not go on drawing
    /// on the budget of a parent that may have ended. A cancel of the
    /// parent while it waits cancels every child it awaits. Asking again creates nothing and answers with the wait as
    /// it stands. Between 1 and [`CHILDREN_MAX`] children.
    ///
    /// ```
    /// use actum::books::{CreateRun, Join, RunId, RunState, StepId, Transition, WaitStatus,
    ///     WorkerId, digest_of};
    /// use actum::engine::{ChildSpec, Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let parent = RunId::new("compare-1")?;
    /// engine.create_run(CreateRun { run: parent.clone(), input_digest: digest_of(b"1"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let start = |run: &RunId, lease: &actum::engine::LeaseGrant| engine.transition(Transition {
    ///     run: run.clone(), guard: lease.guard.clone(), to: RunState::Running,
    ///     expected_version: None, reason: "start".into() });
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// start(&parent, &lease)?;
    /// let spec = |vendor: &[u8]| ChildSpec { input_digest: digest_of(vendor),
    ///     agent_version: "1".into(), trace_id: "t".into(), input: Some(vendor.to_vec()) };
    /// let step = StepId::new("quotes")?;
    /// let specs = vec![spec(b"acme"), spec(b"globex")];
    /// let started = engine.start_children(&parent, &lease.guard, &step, specs.clone(),
    ///     Join::All, None, "ask two vendors")?;
    /// assert_eq!(started.children.len(), 2);
    /// assert_eq!(started.state, RunState::WaitingTool);
    /// // Both children run; the parent wakes once the second ends.
    /// for _ in 0..2 {
    ///     let child = engine.claim_next(&WorkerId::new("w2")?, 30_000)?.expect("a child");
    ///     start(&child.run, &child)?;
    ///     engine.transition(Transition { run: child.run.clone(), guard: child.guard,
    ///         to: RunState::Completed, expected_version: None, reason: "quoted".into() })?;
    /// }
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("woken");
    /// let again = engine.start_children(&parent, &lease.guard, &step, specs, Join::All, None,
    ///     "ask two vendors")?;
    /// let WaitStatus::ChildrenEnded { ended } = again.wait.status else { panic!("both ended") };
    /// assert_eq!(ended.iter().map(|e| e.state).collect::<Vec<_>>(),
    ///     [RunState::Completed, RunState::Completed]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[expect(
        clippy::too_many_arguments,
        reason = "the fan-out's terms: the parent's guard and step, the children, the join, the deadline and why"
    )]
    pub fn start_children(
        &self,
        parent: &RunId,
        guard: &Guard,
        step: &StepId,
        specs: Vec<ChildSpec>,
        join: Join,
        deadline_ms: Option<u64>,
        reason: &str,
    ) -> Result<ChildrenStarted> {
        let command =
            start_children_command(parent, guard, step, specs, join, deadline_ms, reason)?;
        let answered = self.answer(command).map_err(|e| match e {
            Error::BatchRefused { cause, .. } => *cause,
            other => other,
        })?;
        let mut answers = match answered {
            Answer::Batch(answers) => answers,
            other => unexpected(&other, "start_children"),
        };
        match answers.pop() {
            Some(Answer::Waited { wait, state }) => {
                let created = answers
                    .iter()
                    .filter(|a| matches!(a, Answer::RunCreated { .. }))
                    .count();
                let children = wait.wait_for.awaited_children().to_vec();
                Ok(ChildrenStarted {
                    children,
                    created,
                    wait,
                    state,
                })
            }
            other => unexpected(
                &Answer::Batch(other.into_iter().collect()),
                "start_children",
            ),
        }
    }
}

/// What [`Engine::start_children`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildrenStarted {
    /// The children, in the order of the specs: `<parent>:<step>.<i>`.
    pub children: Vec<RunId>,
    /// How many of them this call created (none if the step ran before).
    pub created: usize,
    /// The parent's wait for them, as [`ChildStarted::wait`].
    pub wait: WaitRecord,
    /// The parent's state now.
    pub state: RunState,
}

/// The commands [`Engine::start_children`] commits as one batch: each
/// child's `CreateRun` and the parent's `OpenWait` for all of them.
pub fn start_children_command(
    parent: &RunId,
    guard: &Guard,
    step: &StepId,
    specs: Vec<ChildSpec>,
    join: Join,
    deadline_ms: Option<u64>,
    reason: &str,
) -> Result<Command> {
    if specs.is_empty() || specs.len() > CHILDREN_MAX {
        return Err(Error::InvalidCommand {
            reason: format!(
                "step {step} of run {parent} starts {} children: between 1 and {CHILDREN_MAX}",
                specs.len()
            ),
        });
    }
    let children = children_run_ids(parent, step, specs.len())?;
    let mut commands: Vec<Command> = specs
        .into_iter()
        .zip(&children)
        .map(|(spec, child)| create_child(parent, child, spec))
        .collect();
    commands.push(Command::OpenWait(OpenWait {
        run: parent.clone(),
        guard: guard.clone(),
        step: step.clone(),
        wait_for: WaitFor::Children {
            runs: children,
            join,
        },
        deadline_ms,
        reason: reason.to_string(),
    }));
    Ok(Command::Batch(commands))
}

//! Commands: what callers ask the books to do. A command is a request, not a
//! fact; [`decide`](crate::books::decide) validates it against the current
//! state and turns it into the ops that get logged.
//!
//! Invariant: every command that mutates an existing run carries a [`Guard`]
//! (worker and fencing token), except `AcquireLease` and `ClaimNext`, which
//! are how a guard is obtained, `CreateRun`, `Operate` (an operator's
//! pause, resume or cancel, which overrides the holder), `SetBudget` (an
//! operator's too), and the three that come from outside the run:
//! `DecideApproval`, `SendSignal` and `DeliverReply`; and `MoveVersion`,
//! an operator's move of a run no worker holds to another agent version,
//! `RetryRun` (a failed run back to pending) and `ForkRun` (a new run from
//! another's checkpoint), both an operator's too.

use serde::{Deserialize, Serialize};

use crate::books::base::digest::Digest;
use crate::books::base::ids::{
    EffectKey, FencingToken, ResourceId, RunId, SharedKeyId, StepId, WorkerId,
};
use crate::books::records::budget::{BudgetLimits, Charge, Cost};
use crate::books::records::checkpoint::Part;
use crate::books::records::decision::Usage;
use crate::books::records::ledger::{Compensation, Outcome, ToolClass};
use crate::books::records::run::RunState;
use crate::books::records::wait::WaitFor;

/// The proof of ownership a mutation presents: the run it was granted for,
/// the worker and the fencing token of its lease. Tokens count per run, so
/// one worker holding two runs may hold the same token on both: the run in
/// the guard is what keeps a guard of one from acting on the other
/// (`GuardOfAnotherRun`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guard {
    /// The run the lease was granted on.
    pub run: RunId,
    /// The worker making the call.
    pub worker: WorkerId,
    /// The token its lease acquisition returned.
    pub token: FencingToken,
}

/// Create a run in `pending` (idempotent for the same input).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateRun {
    /// The run's name.
    pub run: RunId,
    /// Digest of its input.
    pub input_digest: Digest,
    /// The agent build.
    pub agent_version: String,
    /// The observability trace id.
    pub trace_id: String,
    /// The spawning run, which must exist.
    pub parent: Option<RunId>,
    /// The input itself, to keep in the blob store (by `input_digest`, which
    /// it must hash to; at most [`ARGS_BYTES_MAX`](crate::books::ARGS_BYTES_MAX)),
    /// so a resumed worker reads what the run started from
    /// ([`Engine::run_input`](crate::Engine::run_input)). `None` keeps the
    /// digest only.
    pub input: Option<Vec<u8>>,
}

/// Move a run to another state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The run.
    pub run: RunId,
    /// Ownership proof.
    pub guard: Guard,
    /// The target state.
    pub to: RunState,
    /// If set, the run's version must equal it (optimistic concurrency).
    pub expected_version: Option<u64>,
    /// Why (journaled in the audit).
    pub reason: String,
}

/// Take the lease of a named run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireLease {
    /// The run.
    pub run: RunId,
    /// The worker asking.
    pub worker: WorkerId,
    /// How long the lease lasts, in milliseconds.
    pub ttl_ms: u64,
}

/// Take the lease of the next claimable run, whichever it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimNext {
    /// The worker asking.
    pub worker: WorkerId,
    /// How long the lease lasts, in milliseconds.
    pub ttl_ms: u64,
    /// Only runs whose `agent_version` is one of these (a runtime claims
    /// only the agents it serves), in the same order as without it; `None`
    /// claims any run.
    pub agents: Option<Vec<String>>,
}

/// Extend a live lease to now + `ttl_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenewLease {
    /// The run.
    pub run: RunId,
    /// Ownership proof.
    pub guard: Guard,
    /// The new remaining lifetime, in milliseconds.
    pub ttl_ms: u64,
}

/// Give a lease up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseLease {
    /// The run.
    pub run: RunId,
    /// Ownership proof.
    pub guard: Guard,
}

/// Ceremony points 1 to 3, 6 and 7: derive the key, check the ledger, write
/// the intent with its compensation and rationale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BeginEffect {
    /// The run.
    pub run: RunId,
    /// The logical step.
    pub step: StepId,
    /// Ownership proof.
    pub guard: Guard,
    /// The tool to call.
    pub tool: String,
    /// How the tool treats duplicates.
    pub tool_class: ToolClass,
    /// Digest of the call's arguments.
    pub args_digest: Digest,
    /// The arguments themselves, if the caller has them: stored by digest
    /// in the blob store with the intent (once; a blob the store holds is
    /// not written again), so a resumed worker or an operator reads exactly
    /// what was sent ([`crate::Engine::effect_args`]). Must hash to
    /// `args_digest`; at most [`ARGS_BYTES_MAX`](crate::books::ARGS_BYTES_MAX).
    pub args: Option<Vec<u8>>,
    /// Why the agent chose this act.
    pub rationale: String,
    /// What undoes it.
    pub compensation: Option<Compensation>,
}

/// Ceremony point 5: record the outcome of an act.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishEffect {
    /// The attempt's key (from `Begun::Proceed` or `Begun::Resend`).
    pub key: EffectKey,
    /// Ownership proof.
    pub guard: Guard,
    /// What happened.
    pub outcome: Outcome,
}

/// Resolve an ambiguous (intended or unknown) effect from what the tool's
/// query or an operator found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconcile {
    /// The attempt's key.
    pub key: EffectKey,
    /// Ownership proof.
    pub guard: Guard,
    /// What was found: confirmed or failed.
    pub outcome: Outcome,
    /// How it was found (journaled).
    pub note: String,
}

/// Begin undoing the confirmed act of a step with the compensation its
/// intent registered: the undo side's key, ledger check and intent, exactly
/// as [`BeginEffect`] does for the act. Its outcome is recorded with
/// [`FinishEffect`] (or [`Reconcile`]) under the undo key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BeginCompensation {
    /// The run.
    pub run: RunId,
    /// The step whose act is undone.
    pub step: StepId,
    /// Ownership proof.
    pub guard: Guard,
    /// Why it is undone (journaled).
    pub rationale: String,
}

/// Save a checkpoint of the run's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaveCheckpoint {
    /// The run.
    pub run: RunId,
    /// Ownership proof.
    pub guard: Guard,
    /// The caller's schema version of the parts.
    pub schema_version: u32,
    /// The parts.
    pub parts: Vec<Part>,
}

/// What an operator does to a run, without holding its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OperatorAction {
    /// Stop the run where it stands: a pending, running or waiting run
    /// becomes `paused`. Its lease holder keeps the lease, but no effect
    /// begins and no worker moves the run until an operator resumes it.
    Pause,
    /// Let a paused run go on: it becomes `running`, and is claimable once
    /// no live lease holds it.
    Resume,
    /// End the run: it becomes `cancelled` (terminal) and its lease is
    /// dropped, so the holder's next call is refused. Effects already
    /// committed stand, and outcomes of acts in flight are still recorded.
    Cancel,
    /// Give up the saga of a `compensating` run: it ends now, at the end
    /// its saga was headed for, and the compensations not yet done are
    /// not done (the audit names what was left). For a saga a person has
    /// settled by hand, or one that cannot go on.
    Abandon,
}

impl OperatorAction {
    /// The action's name as written in docs and the audit.
    pub fn name(self) -> &'static str {
        match self {
            OperatorAction::Pause => "pause",
            OperatorAction::Resume => "resume",
            OperatorAction::Cancel => "cancel",
            OperatorAction::Abandon => "abandon",
        }
    }
}

/// A run, under its live lease, takes (or renews) the lease of a named
/// resource until `ttl_ms` from now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireResource {
    /// The resource.
    pub resource: ResourceId,
    /// The run that holds it.
    pub run: RunId,
    /// The run's lease.
    pub guard: Guard,
    /// How long the hold lasts, in milliseconds.
    pub ttl_ms: u64,
}

/// A run gives up its hold on a resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseResource {
    /// The resource.
    pub resource: ResourceId,
    /// The run that holds it.
    pub run: RunId,
    /// The run's lease.
    pub guard: Guard,
}

/// Who sets a shared key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SharedSetter {
    /// A run, under its live lease.
    Run {
        /// The run.
        run: RunId,
        /// Its lease.
        guard: Guard,
    },
    /// An operator, with no lease, named.
    Operator {
        /// The operator's name.
        name: String,
    },
}

/// Compare-and-set of a shared key: `value` (`None` clears it) if the key
/// is at `expected_version` (0 for a key never set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetShared {
    /// The key.
    pub key: SharedKeyId,
    /// The version the setter read.
    pub expected_version: u64,
    /// The new value, or `None` to clear it.
    pub value: Option<Vec<u8>>,
    /// Who sets it.
    pub by: SharedSetter,
    /// Why (journaled).
    pub reason: String,
}

/// Remove the named runs from the books, each one that is prunable (over,
/// ended `older_than_ms` ago or more, every dedup window of its ledger
/// passed); the others are kept, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prune {
    /// The runs to remove.
    pub runs: Vec<RunId>,
    /// How long a run must have been over.
    pub older_than_ms: u64,
}

/// End the saga of a compensating run whose compensations are all done:
/// the run reaches the end its saga recorded (failed or cancelled).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndSaga {
    /// The run.
    pub run: RunId,
    /// Ownership proof.
    pub guard: Guard,
    /// Why (journaled).
    pub reason: String,
}

/// An operator pauses, resumes or cancels a run. Idempotent: asking for the
/// state the run is already in changes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operate {
    /// The run.
    pub run: RunId,
    /// What to do.
    pub action: OperatorAction,
    /// Who asks (journaled with the reason).
    pub operator: String,
    /// Why (journaled).
    pub reason: String,
}

/// Stop a running run at a step until an approval, a signal or a deadline
/// (see [`crate::books::WaitBook`]); the holder's lease is released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenWait {
    /// The run.
    pub run: RunId,
    /// Ownership proof.
    pub guard: Guard,
    /// The step that waits (one wait per step).
    pub step: StepId,
    /// What it waits for.
    pub wait_for: WaitFor,
    /// When the wait ends by itself, ms since the epoch: required for an
    /// approval (its expiry) and a timer, optional for a signal.
    pub deadline_ms: Option<u64>,
    /// Why (journaled).
    pub reason: String,
}

/// An approver approves or rejects the open approval at a step, with no
/// lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecideApproval {
    /// The run.
    pub run: RunId,
    /// The step whose approval is decided.
    pub step: StepId,
    /// The digest of the arguments the approver saw: must be the one the
    /// wait is bound to.
    pub args_digest: Digest,
    /// Who decides (journaled).
    pub approver: String,
    /// The role they decide in: must be the one the wait asks for.
    pub role: String,
    /// True to approve, false to reject.
    pub approve: bool,
    /// What they note (journaled).
    pub note: String,
}

/// A named signal sent to a run from outside (a webhook, a person), with
/// no lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendSignal {
    /// The run.
    pub run: RunId,
    /// The signal's name.
    pub name: String,
    /// What it carries.
    pub payload: Vec<u8>,
    /// Who sends it (journaled).
    pub sender: String,
}

/// The reply of an asynchronous tool, delivered from outside (a webhook),
/// with no lease: it settles the effect `key` the run's step began, and
/// ends the run's wait for that reply if one is open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliverReply {
    /// The effect the reply answers: the key the tool was sent.
    pub key: EffectKey,
    /// What the tool says happened: confirmed or failed (a reply is never
    /// unknown).
    pub outcome: Outcome,
    /// Who delivers it (journaled in the settle's note).
    pub sender: String,
}

/// Record a model call at its position in the run's decision journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordDecision {
    /// The run.
    pub run: RunId,
    /// Ownership proof.
    pub guard: Guard,
    /// Position among the run's calls, from 0.
    pub position: u64,
    /// Digest of the call's input.
    pub input_digest: Digest,
    /// The model's output.
    pub output: Vec<u8>,
    /// Why.
    pub rationale: String,
    /// What it cost.
    pub usage: Usage,
}

/// An operator sets or changes a run's budget limits, with no lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetBudget {
    /// The run.
    pub run: RunId,
    /// The new limits (they replace the old ones whole).
    pub limits: BudgetLimits,
    /// Who sets them (journaled).
    pub by: String,
    /// Why (journaled).
    pub reason: String,
}

/// Hold `amount` of the run's budget (and its ancestors') for a call,
/// before making it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reserve {
    /// The run.
    pub run: RunId,
    /// Ownership proof.
    pub guard: Guard,
    /// What the call is.
    pub charge: Charge,
    /// The most it may cost.
    pub amount: Cost,
}

/// Record what a reserved call cost, once the call is recorded; the rest of
/// the reservation goes back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settle {
    /// The run.
    pub run: RunId,
    /// Ownership proof.
    pub guard: Guard,
    /// What the call was.
    pub charge: Charge,
    /// What it cost.
    pub actual: Cost,
}

/// A request to the books.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// See [`CreateRun`].
    CreateRun(CreateRun),
    /// See [`Transition`].
    Transition(Transition),
    /// See [`AcquireLease`].
    AcquireLease(AcquireLease),
    /// See [`ClaimNext`].
    ClaimNext(ClaimNext),
    /// See [`RenewLease`].
    RenewLease(RenewLease),
    /// See [`ReleaseLease`].
    ReleaseLease(ReleaseLease),
    /// See [`BeginEffect`].
    BeginEffect(BeginEffect),
    /// See [`FinishEffect`].
    FinishEffect(FinishEffect),
    /// See [`Reconcile`].
    Reconcile(Reconcile),
    /// See [`BeginCompensation`].
    BeginCompensation(BeginCompensation),
    /// See [`SaveCheckpoint`].
    SaveCheckpoint(SaveCheckpoint),
    /// See [`RecordDecision`].
    RecordDecision(RecordDecision),
    /// See [`Operate`].
    Operate(Operate),
    /// See [`OpenWait`].
    OpenWait(OpenWait),
    /// See [`DecideApproval`].
    DecideApproval(DecideApproval),
    /// See [`SendSignal`].
    SendSignal(SendSignal),
    /// See [`DeliverReply`].
    DeliverReply(DeliverReply),
    /// See [`SetBudget`].
    SetBudget(SetBudget),
    /// See [`Reserve`].
    Reserve(Reserve),
    /// See [`Settle`].
    Settle(Settle),
    /// Several commands committed atomically: all are decided, each against
    /// the state the earlier ones leave, or none is. Batches do not nest.
    Batch(Vec<Command>),
    /// End a compensating run's saga.
    EndSaga(EndSaga),
    /// Take or renew a resource's lease.
    AcquireResource(AcquireResource),
    /// Give a resource's lease up.
    ReleaseResource(ReleaseResource),
    /// Compare-and-set a shared key.
    SetShared(SetShared),
    /// Remove runs that are over and old enough.
    Prune(Prune),
    /// See [`MoveVersion`].
    MoveVersion(MoveVersion),
    /// See [`RetryRun`].
    RetryRun(RetryRun),
    /// See [`ForkRun`].
    ForkRun(ForkRun),
}

impl Command {
    /// The run a guarded command changes and the guard it presents; `None`
    /// for the commands that take no guard (create, acquire, claim, an
    /// operator's action) and for a batch.
    pub fn guard_mut(&mut self) -> Option<(RunId, &mut Guard)> {
        match self {
            Command::Transition(c) => Some((c.run.clone(), &mut c.guard)),
            Command::RenewLease(c) => Some((c.run.clone(), &mut c.guard)),
            Command::ReleaseLease(c) => Some((c.run.clone(), &mut c.guard)),
            Command::BeginEffect(c) => Some((c.run.clone(), &mut c.guard)),
            Command::FinishEffect(c) => Some((c.key.run().clone(), &mut c.guard)),
            Command::Reconcile(c) => Some((c.key.run().clone(), &mut c.guard)),
            Command::BeginCompensation(c) => Some((c.run.clone(), &mut c.guard)),
            Command::SaveCheckpoint(c) => Some((c.run.clone(), &mut c.guard)),
            Command::RecordDecision(c) => Some((c.run.clone(), &mut c.guard)),
            Command::OpenWait(c) => Some((c.run.clone(), &mut c.guard)),
            Command::Reserve(c) => Some((c.run.clone(), &mut c.guard)),
            Command::Settle(c) => Some((c.run.clone(), &mut c.guard)),
            Command::EndSaga(c) => Some((c.run.clone(), &mut c.guard)),
            Command::AcquireResource(c) => Some((c.run.clone(), &mut c.guard)),
            Command::ReleaseResource(c) => Some((c.run.clone(), &mut c.guard)),
            Command::SetShared(SetShared {
                by: SharedSetter::Run { run, guard },
                ..
            }) => Some((run.clone(), guard)),
            Command::SetShared(_) | Command::Prune(_) => None,
            Command::CreateRun(_)
            | Command::AcquireLease(_)
            | Command::ClaimNext(_)
            | Command::Operate(_)
            | Command::DecideApproval(_)
            | Command::SendSignal(_)
            | Command::DeliverReply(_)
            | Command::SetBudget(_)
            | Command::MoveVersion(_)
            | Command::RetryRun(_)
            | Command::ForkRun(_)
            | Command::Batch(_) => None,
        }
    }
}

/// An operator moves a run to another agent version (`kind@1` to
/// `kind@2`), with no lease: the run keeps its state, journal, ledger and
/// checkpoints, and the next claim resumes it with the handler of `to`.
/// Refused if the run is over, if it is not at `from`, or while a worker
/// holds a live lease on it (that worker's handler is of `from`); a run at
/// `to` already is left as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveVersion {
    /// The run.
    pub run: RunId,
    /// The agent version the operator expects it at.
    pub from: String,
    /// The agent version to move it to.
    pub to: String,
    /// Who moves it (journaled).
    pub operator: String,
    /// Why (journaled).
    pub reason: String,
}

/// An operator puts a failed run back to `pending`, with no lease, from
/// its latest checkpoint or an earlier one: the run keeps its journal and
/// ledger (a confirmed act stays confirmed and is replayed, never sent
/// again), each step whose latest act failed may act again with its next
/// attempt (a new key), and `checkpoint`, if it is not the latest, is saved
/// again as the newest so the run goes on from it. Refused for a run that
/// is not failed, one whose saga undid anything, and a child whose parent
/// waits or waited for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryRun {
    /// The run.
    pub run: RunId,
    /// The checkpoint version it goes on from; `None`: its latest.
    pub checkpoint: Option<u64>,
    /// Who retries it (journaled).
    pub operator: String,
    /// Why (journaled).
    pub reason: String,
}

/// An operator starts a new run, `new_run`, from `run`: the same agent
/// version and input, in `pending`, with `run`'s chosen checkpoint (its
/// latest if `None`) as its first, shared by reference. The new run has
/// its own journal and ledger: its steps act anew under its own keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkRun {
    /// The run forked.
    pub run: RunId,
    /// The new run.
    pub new_run: RunId,
    /// The checkpoint version of `run` it starts from; `None`: the latest
    /// (or none, if `run` has none).
    pub checkpoint: Option<u64>,
    /// Who forks it (journaled).
    pub operator: String,
    /// Why (journaled).
    pub reason: String,
}

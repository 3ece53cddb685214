//! What `decide` answers: [`Decided`] (the ops to log and the [`Answer`]
//! to give once they are durable), and [`Begun`], the answer to a begin.
//! Every rule returns these; the dispatcher only routes them.

use crate::books::base::ids::{EffectKey, FencingToken, ResourceId, RunId, SharedKeyId, StepId};
use crate::books::records::budget::{Reserved, SettledCharge};
use crate::books::records::decision::DecisionRecord;
use crate::books::records::run::RunState;
use crate::books::records::wait::WaitRecord;
use crate::books::vocabulary::op::Op;

/// What `BeginEffect` decided (ceremony points 1 to 3): the one answer a
/// caller acts on before touching the world.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Begun {
    /// The intent is recorded: act now, passing `key` and `token` to the tool.
    Proceed {
        /// The idempotency key.
        key: EffectKey,
        /// The fencing token.
        token: FencingToken,
    },
    /// The step was already done: here is its receipt; do not act.
    Replay {
        /// The idempotency key of the confirmed attempt.
        key: EffectKey,
        /// The stored receipt.
        receipt: Vec<u8>,
    },
    /// An intent without outcome, inside the tool's dedup window: send
    /// again with the *same* key.
    Resend {
        /// The (unchanged) idempotency key.
        key: EffectKey,
        /// The fencing token.
        token: FencingToken,
    },
    /// An intent without outcome on a queryable tool: ask the tool about
    /// `key`, then send `Reconcile`. Do not act.
    Reconcile {
        /// The key to ask about.
        key: EffectKey,
        /// The fencing token.
        token: FencingToken,
    },
    /// Nobody knows whether the act happened; it must be reconciled by a
    /// person or a query. Do not act.
    Unknown {
        /// The ambiguous attempt.
        key: EffectKey,
        /// Why it is unknown.
        reason: String,
    },
    /// The step's latest attempt failed and may not be retried: do not
    /// act. The same answer the failure got when it was recorded, so a
    /// replayed step and a first run of it agree.
    Failed {
        /// The failed attempt.
        key: EffectKey,
        /// Why it failed.
        reason: String,
    },
    /// The step was done and compensated; do not act.
    Compensated {
        /// The attempt.
        key: EffectKey,
    },
}

/// What the caller is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The run was created at `version`.
    RunCreated {
        /// The run.
        run: RunId,
        /// Its version (1).
        version: u64,
    },
    /// The run already existed with the same input; nothing changed.
    RunExisted {
        /// The run.
        run: RunId,
        /// Its current version.
        version: u64,
        /// Its current state.
        state: RunState,
    },
    /// The run moved.
    Transitioned {
        /// The run.
        run: RunId,
        /// Its state before.
        from: RunState,
        /// Its state now.
        to: RunState,
        /// Its version now.
        version: u64,
    },
    /// The caller holds the run's lease (acquire, claim or renew).
    Leased {
        /// The run.
        run: RunId,
        /// The token to present on every mutation and to hand to tools.
        token: FencingToken,
        /// When the lease dies unless renewed, ms since the epoch.
        expires_ms: u64,
        /// The run's version now.
        version: u64,
    },
    /// No run is claimable now.
    NothingToClaim,
    /// The lease was given up.
    Released {
        /// The run.
        run: RunId,
        /// Its version now.
        version: u64,
    },
    /// What `BeginEffect` decided: act, replay, resend, reconcile, or not.
    Begun(Begun),
    /// The effect settled (or already had exactly this outcome).
    Settled {
        /// The attempt.
        key: EffectKey,
        /// Its status now (`confirmed`, ...).
        status: &'static str,
    },
    /// An asynchronous tool's reply was recorded (or the entry already held
    /// exactly this outcome).
    Replied {
        /// The attempt it answers.
        key: EffectKey,
        /// Its status now (`confirmed` or `failed`).
        status: &'static str,
        /// The step whose wait for the reply it ended, if one was open.
        wait_ended: Option<StepId>,
    },
    /// The checkpoint was saved.
    CheckpointSaved {
        /// The run.
        run: RunId,
        /// The checkpoint's version.
        version: u64,
        /// Parts whose blob was new (an appended part's blob is its new
        /// bytes, or its whole value past the chunk limit).
        blobs_written: usize,
        /// Bytes of those new blobs.
        bytes_written: u64,
        /// Parts whose blob was already stored.
        blobs_reused: usize,
        /// Parts held in the metadata itself (at most
        /// `CHECKPOINT_INLINE_BYTES_MAX` each), in no blob.
        parts_inline: usize,
    },
    /// The model call was journaled.
    DecisionRecorded {
        /// The run.
        run: RunId,
        /// Its position.
        position: u64,
    },
    /// The call at this position was already journaled with this input:
    /// reuse it instead of calling the model.
    DecisionReplay {
        /// The recorded call.
        record: DecisionRecord,
    },
    /// An operator's action: the run's state and version after it, and
    /// whether it changed anything (`false`: the run was already there).
    Operated {
        /// The run.
        run: RunId,
        /// Its state now.
        state: RunState,
        /// Its version now.
        version: u64,
        /// False if the run was already in the asked state.
        changed: bool,
    },
    /// The wait at the step, as it stands: just opened (`Open`, the run
    /// is waiting and its lease released), or ended (by then, or at once:
    /// the run goes on).
    Waited {
        /// The wait.
        wait: WaitRecord,
        /// The run's state now.
        state: RunState,
    },
    /// An approval was decided.
    WaitEnded {
        /// The run.
        run: RunId,
        /// The step whose wait ended.
        step: StepId,
        /// `approved` or `rejected`.
        status: &'static str,
        /// True if the run was waiting and is now claimable (false if an
        /// operator paused it meanwhile).
        woke: bool,
    },
    /// A signal was received.
    Signalled {
        /// The run.
        run: RunId,
        /// The signal's number among the run's signals.
        seq: u64,
        /// The step whose wait it ended, if one waited for it; otherwise it
        /// waits in the run's inbox.
        taken_by: Option<StepId>,
    },
    /// The run's budget limits were set.
    BudgetSet {
        /// The run.
        run: RunId,
    },
    /// What a reserve decided: make the call, it was made, or the budget
    /// is exhausted (and the run paused).
    Reserved(Reserved),
    /// A reserved call's cost was recorded.
    ChargeSettled(SettledCharge),
    /// The answers of a batch's commands, in order.
    Batch(Vec<Answer>),
    /// The run holds the resource's lease: hand `token` to the tools.
    ResourceGranted {
        /// The resource.
        resource: ResourceId,
        /// The hold's fencing token.
        token: FencingToken,
        /// When the hold dies unless renewed, ms since the epoch.
        expires_ms: u64,
        /// True if the run held it already (same token, later expiry).
        renewed: bool,
    },
    /// The run gave the resource's lease up.
    ResourceReleased {
        /// The resource.
        resource: ResourceId,
    },
    /// What a prune removed, and what it kept and why.
    Pruned {
        /// The runs removed.
        pruned: Vec<RunId>,
        /// The runs kept, each with the reason.
        kept: Vec<(RunId, String)>,
    },
    /// A shared key's compare-and-set: its version now, and whether it
    /// changed (false: it held that value already).
    SharedSet {
        /// The key.
        key: SharedKeyId,
        /// Its version now.
        version: u64,
        /// False if it held the value already.
        changed: bool,
    },
    /// An operator's move of a run to another agent version: the version
    /// it runs at now, and whether the move changed anything (`false`: it
    /// was there already).
    VersionMoved {
        /// The run.
        run: RunId,
        /// The agent version it runs at now.
        agent_version: String,
        /// Its version (the record's change counter) now.
        version: u64,
        /// False if it ran at that agent version already.
        changed: bool,
    },
    /// An operator's retry of a failed run: it is pending again.
    Retried {
        /// The run.
        run: RunId,
        /// Its version (the record's change counter) now.
        version: u64,
        /// The failed acts reopened (their steps act again with the next
        /// attempt).
        reopened: Vec<EffectKey>,
        /// The checkpoint version saved again as the newest, if one was
        /// chosen that was not the latest.
        restored: Option<u64>,
    },
    /// An operator's fork of a run into a new one.
    Forked {
        /// The new run.
        run: RunId,
        /// The run it was forked from.
        from: RunId,
        /// The checkpoint version of `from` it starts from, if any.
        checkpoint: Option<u64>,
        /// False if the fork existed already (a retried command).
        created: bool,
    },
}

/// The outcome of deciding a command: the ops to log (possibly none) and
/// the answer to give once they are durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    /// Ops to log, in order, as one atomic commit.
    pub ops: Vec<Op>,
    /// The answer for the caller.
    pub answer: Answer,
}

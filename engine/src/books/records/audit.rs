//! The audit trail's entries: what happened to a run, when and under which
//! lease token, kept as data ([`AuditWhat`]) and put in words by its
//! `Display`. Which op leaves which entry is `fold/describe.rs`.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::books::base::digest::Digest;
use crate::books::base::ids::{
    EffectKey, FencingToken, ResourceId, RunId, SharedKeyId, StepId, WorkerId,
};
use crate::books::records::budget::{BudgetLimits, Charge, Cost};
use crate::books::records::run::RunState;
use crate::books::records::wait::WaitFor;

/// One line of a run's journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Position in the run's journal, from 1.
    pub seq: u64,
    /// When, ms since the epoch.
    pub at_ms: u64,
    /// The lease token the change was made under (`None` for creation).
    pub token: Option<FencingToken>,
    /// What happened; its `Display` says it in words.
    pub what: AuditWhat,
    /// Why, as the agent or caller said (may be empty).
    pub why: String,
}

/// What one journal line records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuditWhat {
    /// The run was created.
    Created {
        /// The agent version that created it.
        agent_version: String,
        /// The digest of its input.
        input: Digest,
    },
    /// The run moved between states.
    Transitioned {
        /// The state it left.
        from: RunState,
        /// The state it entered.
        to: RunState,
    },
    /// A worker took the lease.
    LeaseAcquired {
        /// The worker.
        worker: WorkerId,
        /// When the lease expires, ms since the epoch.
        expires_ms: u64,
    },
    /// The holder renewed the lease.
    LeaseRenewed {
        /// The new expiry, ms since the epoch.
        expires_ms: u64,
    },
    /// The holder released the lease.
    LeaseReleased,
    /// An effect's intent was recorded.
    Intended {
        /// The effect.
        key: EffectKey,
        /// The tool it calls.
        tool: String,
        /// The digest of its arguments.
        args: Digest,
    },
    /// An effect was sent again under the same key.
    Resent {
        /// The effect.
        key: EffectKey,
    },
    /// An effect's outcome was recorded.
    Settled {
        /// The effect.
        key: EffectKey,
        /// The status it settled in, by name (`confirmed`, ...).
        status: Cow<'static, str>,
    },
    /// A checkpoint was saved.
    CheckpointSaved {
        /// Its version.
        version: u64,
        /// The state's schema version.
        schema_version: u32,
        /// How many parts it has.
        parts: u64,
    },
    /// A model call was journaled.
    DecisionRecorded {
        /// Its position in the run's decisions.
        position: u64,
        /// The digest of the model input.
        input: Digest,
    },
    /// A wait was opened.
    WaitOpened {
        /// The step that waits.
        step: StepId,
        /// What it waits for.
        wait_for: WaitFor,
        /// When it ends by itself, ms since the epoch.
        deadline_ms: Option<u64>,
    },
    /// A wait ended.
    WaitEnded {
        /// The step that waited.
        step: StepId,
        /// How, by name (`approved`, `elapsed`, ...).
        status: Cow<'static, str>,
    },
    /// A signal arrived.
    SignalReceived {
        /// Its number among the run's signals.
        seq: u64,
        /// Its name.
        name: String,
        /// Who sent it.
        sender: String,
    },
    /// The run's budget limits were set.
    BudgetSet {
        /// The new limits.
        limits: BudgetLimits,
        /// Who set them.
        by: String,
    },
    /// Budget was reserved for a call.
    Reserved {
        /// What the call is.
        charge: Charge,
        /// What is held.
        amount: Cost,
    },
    /// A reserved call's cost was recorded.
    ChargeSettled {
        /// What the call was.
        charge: Charge,
        /// What it cost.
        actual: Cost,
    },
    /// The run's saga began: its compensations run, then it ends `end`.
    SagaOpened {
        /// Failed or cancelled.
        end: RunState,
    },
    /// The run took a resource's lease (a new hold).
    ResourceAcquired {
        /// The resource.
        resource: ResourceId,
        /// When the hold expires, ms since the epoch.
        expires_ms: u64,
    },
    /// The run extended its hold of a resource.
    ResourceRenewed {
        /// The resource.
        resource: ResourceId,
        /// The new expiry, ms since the epoch.
        expires_ms: u64,
    },
    /// The run gave its hold of a resource up.
    ResourceReleased {
        /// The resource.
        resource: ResourceId,
    },
    /// The run set a shared key.
    SharedSet {
        /// The key.
        key: SharedKeyId,
        /// Its version after.
        version: u64,
        /// The digest of the value set (`None`: cleared).
        value: Option<Digest>,
    },
    /// An operator moved the run to another agent version (the reason is
    /// the entry's `why`). Appended last: postcard encodes it by index.
    VersionMoved {
        /// The agent version it ran at (`kind@version`).
        from: String,
        /// The agent version it runs at now.
        to: String,
        /// Who moved it.
        operator: String,
    },
    /// An operator put the failed run back to pending (the reason is the
    /// entry's `why`): the failed acts it reopened, and the checkpoint
    /// version saved again as the newest, if any.
    Retried {
        /// The failed acts reopened: each step acts again with the next
        /// attempt.
        reopened: Vec<EffectKey>,
        /// The checkpoint version saved again as the newest.
        restored: Option<u64>,
        /// Who retried it.
        operator: String,
    },
    /// The run was forked from another by an operator (the reason is the
    /// entry's `why`).
    Forked {
        /// The run it was forked from.
        from: RunId,
        /// The checkpoint version of `from` it starts from, if any.
        checkpoint: Option<u64>,
        /// Who forked it.
        operator: String,
    },
}

impl fmt::Display for AuditWhat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuditWhat::Created {
                agent_version,
                input,
            } => write!(
                f,
                "created (agent {agent_version}, input {})",
                input.short()
            ),
            AuditWhat::Transitioned { from, to } => write!(f, "{from} -> {to}"),
            AuditWhat::LeaseAcquired { worker, expires_ms } => {
                write!(f, "lease acquired by {worker} until {expires_ms} ms")
            }
            AuditWhat::LeaseRenewed { expires_ms } => {
                write!(f, "lease renewed until {expires_ms} ms")
            }
            AuditWhat::LeaseReleased => f.write_str("lease released"),
            AuditWhat::Intended { key, tool, args } => {
                write!(f, "intent {key} via {tool} (args {})", args.short())
            }
            AuditWhat::Resent { key } => write!(f, "resent {key} with the same key"),
            AuditWhat::Settled { key, status } => write!(f, "{key} {status}"),
            AuditWhat::CheckpointSaved {
                version,
                schema_version,
                parts,
            } => write!(
                f,
                "checkpoint v{version} saved (schema {schema_version}, {parts} parts)"
            ),
            AuditWhat::DecisionRecorded { position, input } => write!(
                f,
                "model call {position} recorded (input {})",
                input.short()
            ),
            AuditWhat::WaitOpened {
                step,
                wait_for,
                deadline_ms,
            } => match deadline_ms {
                Some(at) => write!(f, "step {step} waits for {wait_for} until {at} ms"),
                None => write!(f, "step {step} waits for {wait_for}"),
            },
            AuditWhat::WaitEnded { step, status } => write!(f, "the wait of step {step} {status}"),
            AuditWhat::SignalReceived { seq, name, sender } => {
                write!(f, "signal {seq} ({name}) received from {sender}")
            }
            AuditWhat::BudgetSet { limits, by } => write!(f, "budget set by {by}: {limits}"),
            AuditWhat::Reserved { charge, amount } => {
                write!(f, "reserved {amount} for {charge}")
            }
            AuditWhat::ChargeSettled { charge, actual } => {
                write!(f, "{charge} cost {actual}")
            }
            AuditWhat::SagaOpened { end } => {
                write!(f, "saga opened: compensations run, then the run ends {end}")
            }
            AuditWhat::ResourceAcquired {
                resource,
                expires_ms,
            } => write!(f, "resource {resource} acquired until {expires_ms} ms"),
            AuditWhat::ResourceRenewed {
                resource,
                expires_ms,
            } => write!(f, "resource {resource} renewed until {expires_ms} ms"),
            AuditWhat::ResourceReleased { resource } => write!(f, "resource {resource} released"),
            AuditWhat::SharedSet {
                key,
                version,
                value,
            } => match value {
                Some(digest) => {
                    write!(f, "shared key {key} set to {} (v{version})", digest.short())
                }
                None => write!(f, "shared key {key} cleared (v{version})"),
            },
            AuditWhat::VersionMoved { from, to, operator } => {
                write!(
                    f,
                    "agent version moved from {from} to {to} by operator {operator}"
                )
            }
            AuditWhat::Retried {
                reopened,
                restored,
                operator,
            } => {
                write!(f, "retried by operator {operator}")?;
                if !reopened.is_empty() {
                    let keys: Vec<String> = reopened.iter().map(ToString::to_string).collect();
                    write!(f, ", reopening {}", keys.join(", "))?;
                }
                match restored {
                    Some(version) => write!(f, ", from checkpoint {version}"),
                    None => Ok(()),
                }
            }
            AuditWhat::Forked {
                from,
                checkpoint,
                operator,
            } => {
                write!(f, "forked from run {from} by operator {operator}")?;
                match checkpoint {
                    Some(version) => write!(f, " at its checkpoint {version}"),
                    None => write!(f, " (no checkpoint)"),
                }
            }
        }
    }
}

//! An operator's retry of a failed run (`RetryRun`) and fork of a run into
//! a new one (`ForkRun`), from a chosen checkpoint.
//!
//! A retry never rolls an effect back: a confirmed act stays confirmed and
//! is replayed from the ledger, never sent again; a step whose latest act
//! failed is reopened (the entry stays failed, with its reason, and
//! becomes retryable, so the step's next begin opens the next attempt, a
//! new key). "From a checkpoint" chooses the state the run goes on from:
//! a checkpoint other than the latest is saved again, by reference, as the
//! newest version, journaled apart from the run's own saves (the audit's
//! `Retried { restored }`), so a runtime that counts its handler's saves
//! by call can tell them apart.
//!
//! Invariants: a retry moves only a failed run, and only one whose saga
//! undid nothing (its confirmed acts were compensated: replaying them as
//! confirmed would be false) and that no parent waits or waited for (the
//! parent acted on its end); a fork creates a new run that shares no
//! ledger entry, wait or budget with its source, only blobs.

use crate::books::base::digest::digest_of;
use crate::books::base::ids::{EffectKind, FencingToken, RunId};
use crate::books::records::audit::AuditWhat;
use crate::books::records::checkpoint::CheckpointMeta;
use crate::books::records::ledger::EffectStatus;
use crate::books::records::run::{Run, RunState, current_token};
use crate::books::records::wait::WaitFor;
use crate::books::rules::checks::{check_operator, existing};
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::{ForkRun, RetryRun};
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// Why `run` may not be retried, if it may not.
fn refusal(state: &dyn BooksRead, run: &Run) -> Option<String> {
    if run.state != RunState::Failed {
        return Some(format!("it is {}, not failed", run.state));
    }
    let effects = state.effects_of(&run.id);
    if let Some(undone) = effects.iter().find(|e| {
        e.key.kind() == EffectKind::Undo || matches!(e.status, EffectStatus::Compensated { .. })
    }) {
        return Some(format!(
            "its saga undid what it did ({} is {}): replaying its acts as confirmed would be \
             false; fork it instead",
            undone.key,
            undone.status.name()
        ));
    }
    let parent = run.parent.as_ref()?;
    let awaited = state.waits(parent).is_some_and(|book| {
        book.waits.iter().any(|w| match &w.wait_for {
            WaitFor::Child { run: child } => *child == run.id,
            WaitFor::Children { runs, .. } => runs.contains(&run.id),
            _ => false,
        })
    });
    awaited.then(|| {
        format!(
            "its parent run {parent} waits or waited for its end, and goes on from the end it \
             was told; retry the parent, or fork this run"
        )
    })
}

/// The checkpoint of `run` at `version`, or its latest if `None`; `None`
/// if it has none. A version it does not have is `NotFound`.
fn chosen_checkpoint(
    state: &dyn BooksRead,
    run: &RunId,
    version: Option<u64>,
) -> Result<Option<CheckpointMeta>> {
    match version {
        None => Ok(state.checkpoint_latest(run)),
        Some(version) => {
            state
                .checkpoint_at(run, version)
                .map(Some)
                .ok_or_else(|| Error::NotFound {
                    what: format!("checkpoint {version} of run {run}"),
                })
        }
    }
}

/// Decides `RetryRun` (see the module docs).
pub(crate) fn decide_retry(state: &dyn BooksRead, cmd: &RetryRun, now_ms: u64) -> Result<Decided> {
    check_operator("retry", &cmd.run, &cmd.operator, &cmd.reason)?;
    let run = existing(state, &cmd.run)?;
    if let Some(reason) = refusal(state, &run) {
        return Err(Error::RetryRefused {
            run: run.id.clone(),
            reason,
        });
    }
    let chosen = chosen_checkpoint(state, &run.id, cmd.checkpoint)?;
    let latest = state.checkpoint_latest(&run.id);
    // Only a checkpoint other than the latest is saved again.
    let restored = chosen.filter(|c| latest.as_ref().is_some_and(|l| l.version != c.version));
    let mut reopened: Vec<_> = state
        .effects_of(&run.id)
        .into_iter()
        .filter(|e| e.key.kind() == EffectKind::Act)
        .filter(|e| {
            state
                .latest_effect(&run.id, e.key.step(), EffectKind::Act)
                .is_some_and(|latest| latest.key == e.key)
        })
        .filter(|e| matches!(e.status, EffectStatus::Failed { .. }))
        .map(|e| e.key)
        .collect();
    reopened.sort();
    let version = run.version + 1;
    let token = current_token(&run);
    let mut ops = vec![Op::RunRetried {
        run: run.id.clone(),
        version,
        at_ms: now_ms,
        token,
        reopened: reopened.clone(),
        restored: restored.as_ref().map(|c| c.version),
        operator: cmd.operator.clone(),
        reason: cmd.reason.clone(),
    }];
    if let (Some(chosen), Some(latest)) = (&restored, &latest) {
        ops.push(Op::CheckpointSaved {
            meta: CheckpointMeta {
                run: run.id.clone(),
                version: latest.version + 1,
                schema_version: chosen.schema_version,
                parts: chosen.parts.clone(),
                saved_ms: now_ms,
                token,
            },
        });
    }
    Ok(Decided {
        ops,
        answer: Answer::Retried {
            run: run.id.clone(),
            version,
            reopened,
            restored: restored.map(|c| c.version),
        },
    })
}

/// Decides `ForkRun` (see the module docs). A new run that exists as this
/// very fork is answered unchanged (a retried fork is safe); one that
/// exists as anything else is refused.
pub(crate) fn decide_fork(state: &dyn BooksRead, cmd: &ForkRun, now_ms: u64) -> Result<Decided> {
    check_operator("fork", &cmd.run, &cmd.operator, &cmd.reason)?;
    let source = existing(state, &cmd.run)?;
    if cmd.new_run == cmd.run {
        return Err(Error::InvalidCommand {
            reason: format!("a fork of run {} must name a new run", cmd.run),
        });
    }
    let chosen = chosen_checkpoint(state, &source.id, cmd.checkpoint)?;
    let checkpoint = chosen.as_ref().map(|c| c.version);
    if state.run(&cmd.new_run).is_some() {
        let forked_so = state.audit(&cmd.new_run, 1).iter().any(|e| {
            matches!(&e.what, AuditWhat::Forked { from, checkpoint: at, .. }
                if *from == source.id && (cmd.checkpoint.is_none() || *at == checkpoint))
        });
        if !forked_so {
            return Err(Error::InvalidCommand {
                reason: format!(
                    "run {} exists and is not a fork of run {}",
                    cmd.new_run, source.id
                ),
            });
        }
        return Ok(Decided {
            ops: Vec::new(),
            answer: Answer::Forked {
                run: cmd.new_run.clone(),
                from: source.id.clone(),
                checkpoint,
                created: false,
            },
        });
    }
    let trace = digest_of(format!("{}\0{}", source.trace_id, cmd.new_run).as_bytes());
    let run = Run {
        id: cmd.new_run.clone(),
        state: RunState::Pending,
        version: 1,
        input_digest: source.input_digest,
        agent_version: source.agent_version.clone(),
        trace_id: format!("fork-{}", &trace.to_string()[..16]),
        parent: None,
        created_ms: now_ms,
        updated_ms: now_ms,
        lease: None,
        next_token: FencingToken::FIRST,
    };
    let mut ops = vec![
        Op::RunCreated { run },
        Op::RunForked {
            run: cmd.new_run.clone(),
            from: source.id.clone(),
            checkpoint,
            at_ms: now_ms,
            operator: cmd.operator.clone(),
            reason: cmd.reason.clone(),
        },
    ];
    if let Some(chosen) = &chosen {
        ops.push(Op::CheckpointSaved {
            meta: CheckpointMeta {
                run: cmd.new_run.clone(),
                version: 1,
                schema_version: chosen.schema_version,
                parts: chosen.parts.clone(),
                saved_ms: now_ms,
                token: FencingToken(0),
            },
        });
    }
    Ok(Decided {
        ops,
        answer: Answer::Forked {
            run: cmd.new_run.clone(),
            from: source.id,
            checkpoint,
            created: true,
        },
    })
}

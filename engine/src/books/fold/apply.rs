//! `apply`: the one function that turns a decided op into state, on the
//! live path and on recovery alike.
//!
//! Invariants: apply reads no clock and makes no choice (every value comes
//! from the op); the same op sequence from the same snapshot always
//! produces the same state; an op that does not fit the books (a run that
//! does not exist, a version out of order, a settled effect settled again)
//! is an [`ApplyError`] and changes nothing, never a panic. The engine
//! applies every decided op to its pending view *before* logging it, so a
//! `decide`/`apply` disagreement refuses the command and nothing reaches the
//! log; on replay the same error names the record's file and offset.

use std::fmt;

use crate::books::base::digest::{Digest, digest_of};
use crate::books::base::ids::{EffectKey, FencingToken, ResourceId, RunId, SharedKeyId, StepId};
use crate::books::fold::blobs::{prune_run, reference};
use crate::books::fold::describe::describe;
use crate::books::records::budget::{
    BudgetBook, BudgetLimits, Charge, Cost, Reservation, note_transition,
};
use crate::books::records::checkpoint::{CheckpointMeta, PartRef};
use crate::books::records::coord::{ResourceBook, ResourceHold, SharedChange, with_change};
use crate::books::records::decision::DecisionRecord;
use crate::books::records::lease::Lease;
use crate::books::records::ledger::{EffectEntry, EffectStatus};
use crate::books::records::run::{Run, RunState, transition_allowed};
use crate::books::records::saga::{is_saga_end, note_intent};
use crate::books::records::wait::{SignalRecord, WaitBook, WaitRecord, WaitStatus};
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksWrite;

/// Why an op cannot be applied: it names the op and what did not fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyError {
    /// The op's name (`EffectSettled`, ...).
    pub op: &'static str,
    /// What did not fit.
    pub reason: String,
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op {} does not apply: {}", self.op, self.reason)
    }
}

impl std::error::Error for ApplyError {}

type Applied = Result<(), ApplyError>;

/// `Err` naming `op` unless `ok`.
fn require(ok: bool, op: &Op, reason: impl FnOnce() -> String) -> Applied {
    if ok {
        return Ok(());
    }
    Err(ApplyError {
        op: op.name(),
        reason: reason(),
    })
}

fn run_of(state: &(impl BooksWrite + ?Sized), id: &RunId, op: &Op) -> Result<Run, ApplyError> {
    state.run(id).ok_or_else(|| ApplyError {
        op: op.name(),
        reason: format!("run {id} does not exist"),
    })
}

fn effect_of(
    state: &(impl BooksWrite + ?Sized),
    key: &EffectKey,
    op: &Op,
) -> Result<EffectEntry, ApplyError> {
    state.effect(key).ok_or_else(|| ApplyError {
        op: op.name(),
        reason: format!("effect {key} does not exist"),
    })
}

/// Checks that `version` is the successor of `run`'s and records the change.
fn bump(run: &mut Run, version: u64, at_ms: u64, op: &Op) -> Applied {
    require(run.version + 1 == version, op, || {
        format!(
            "run {} is at version {}, the op makes it {version}",
            run.id, run.version
        )
    })?;
    run.version = version;
    run.updated_ms = at_ms;
    Ok(())
}

/// Applies one decided op to `state`, and appends its audit line; on `Err`
/// nothing was written.
pub fn apply(state: &mut (impl BooksWrite + ?Sized), op: &Op) -> Result<(), ApplyError> {
    match op {
        Op::RunCreated { run } => run_created(state, run, op)?,
        Op::RunTransitioned {
            run,
            from,
            to,
            version,
            at_ms,
            ..
        } => run_transitioned(state, run, (*from, *to), *version, *at_ms, op)?,
        Op::LeaseAcquired {
            run,
            lease,
            version,
            at_ms,
        } => lease_acquired(state, run, lease, *version, *at_ms, op)?,
        Op::LeaseRenewed {
            run,
            token,
            expires_ms,
            version,
            at_ms,
        } => lease_changed(state, run, *token, Some(*expires_ms), *version, *at_ms, op)?,
        Op::LeaseReleased {
            run,
            token,
            version,
            at_ms,
        } => lease_changed(state, run, *token, None, *version, *at_ms, op)?,
        Op::EffectIntended { entry } => effect_intended(state, entry, op)?,
        Op::EffectResent { key, .. } => effect_resent(state, key, op)?,
        Op::EffectSettled {
            key, status, at_ms, ..
        } => effect_settled(state, key, status, *at_ms, op)?,
        Op::BlobPut { digest, bytes } => blob_put(state, digest, bytes, op)?,
        Op::CheckpointSaved { meta } => checkpoint_saved(state, meta, op)?,
        Op::DecisionRecorded { record } => decision_recorded(state, record, op)?,
        Op::WaitOpened { run, wait } => wait_opened(state, run, wait, op)?,
        Op::WaitEnded {
            run,
            step,
            status,
            at_ms,
        } => wait_ended(state, run, step, status, *at_ms, op)?,
        Op::SignalReceived { run, signal } => signal_received(state, run, signal, op)?,
        Op::BudgetSet {
            run, limits, at_ms, ..
        } => budget_set(state, run, limits, *at_ms, op)?,
        Op::BudgetReserved { run, reservation } => budget_reserved(state, run, reservation, op)?,
        Op::BudgetSettled {
            run,
            charge,
            actual,
            ..
        } => budget_settled(state, run, charge, actual, op)?,
        Op::SagaOpened { run, end, .. } => saga_opened(state, run, *end, op)?,
        Op::ResourceAcquired {
            resource,
            run,
            token,
            expires_ms,
            at_ms,
        } => resource_acquired(state, resource, run, (*token, *expires_ms, *at_ms), op)?,
        Op::ResourceRenewed {
            resource,
            run,
            token,
            expires_ms,
            ..
        } => resource_held(state, resource, run, *token, Some(*expires_ms), op)?,
        Op::ResourceReleased {
            resource,
            run,
            token,
            ..
        } => resource_held(state, resource, run, *token, None, op)?,
        Op::SharedSet {
            key,
            version,
            value,
            change,
        } => shared_set(state, key, *version, value, change, op)?,
        Op::RunPruned { run, .. } => run_pruned(state, run, op)?,
        Op::RunVersionMoved {
            run,
            from,
            to,
            version,
            at_ms,
            ..
        } => run_version_moved(state, run, (from, to), *version, *at_ms, op)?,
        Op::RunRetried {
            run,
            version,
            at_ms,
            reopened,
            ..
        } => run_retried(state, run, reopened, *version, *at_ms, op)?,
        Op::RunForked { run, from, .. } => run_forked(state, run, from, op)?,
    }
    if let Some((run, mut entry)) = describe(op) {
        entry.seq = state.audit_len(&run) + 1;
        state.push_audit(&run, entry);
    }
    Ok(())
}

fn run_created(state: &mut (impl BooksWrite + ?Sized), run: &Run, op: &Op) -> Applied {
    require(state.run(&run.id).is_none(), op, || {
        format!("run {} already exists", run.id)
    })?;
    require(run.version == 1, op, || {
        format!("run {} is created at version {}", run.id, run.version)
    })?;
    state.put_run(run.clone());
    // A run created with its input stored holds it like a checkpoint part.
    reference(state, &run.id, &run.input_digest);
    Ok(())
}

fn run_transitioned(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    (from, to): (RunState, RunState),
    version: u64,
    at_ms: u64,
    op: &Op,
) -> Applied {
    let mut run = run_of(state, id, op)?;
    require(run.state == from, op, || {
        format!("run {id} is {}, not {from}", run.state)
    })?;
    require(transition_allowed(from, to), op, || {
        format!("{from} -> {to} is illegal")
    })?;
    bump(&mut run, version, at_ms, op)?;
    run.state = to;
    if to.is_terminal() {
        run.lease = None;
    }
    state.put_run(run);
    if let Some(mut book) = state.budget(id) {
        note_transition(&mut book, from, to, at_ms);
        state.put_budget(book);
    }
    Ok(())
}

fn lease_acquired(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    lease: &Lease,
    version: u64,
    at_ms: u64,
    op: &Op,
) -> Applied {
    let mut run = run_of(state, id, op)?;
    require(run.next_token == lease.token, op, || {
        format!(
            "run {id} hands out {} next, the op grants {}",
            run.next_token, lease.token
        )
    })?;
    bump(&mut run, version, at_ms, op)?;
    run.next_token = lease.token.next();
    run.lease = Some(lease.clone());
    state.put_run(run);
    Ok(())
}

/// A renewal (`expires_ms`) or a release (`None`) of the lease under `token`.
fn lease_changed(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    token: FencingToken,
    expires_ms: Option<u64>,
    version: u64,
    at_ms: u64,
    op: &Op,
) -> Applied {
    let mut run = run_of(state, id, op)?;
    let held = run.lease.as_ref().is_some_and(|l| l.token == token);
    require(held, op, || format!("run {id} has no lease under {token}"))?;
    bump(&mut run, version, at_ms, op)?;
    match (expires_ms, run.lease.as_mut()) {
        (Some(expires_ms), Some(lease)) => lease.expires_ms = expires_ms,
        _ => run.lease = None,
    }
    state.put_run(run);
    Ok(())
}

fn effect_intended(
    state: &mut (impl BooksWrite + ?Sized),
    entry: &EffectEntry,
    op: &Op,
) -> Applied {
    require(entry.status == EffectStatus::Intended, op, || {
        format!("effect {} is created {}", entry.key, entry.status.name())
    })?;
    require(state.effect(&entry.key).is_none(), op, || {
        format!("effect {} already exists", entry.key)
    })?;
    require(state.run(entry.key.run()).is_some(), op, || {
        format!("run {} does not exist", entry.key.run())
    })?;
    let saga = note_intent(state.saga(entry.key.run()), entry);
    state.put_effect(entry.clone());
    if let Some(book) = saga {
        state.put_saga(book);
    }
    if state.blob_exists(&entry.args_digest) {
        reference(state, entry.key.run(), &entry.args_digest);
    }
    Ok(())
}

/// An operator moved a run that is not over from one agent version to
/// another (see `rules/version.rs`); nothing else in its record changes.
fn run_version_moved(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    (from, to): (&String, &String),
    version: u64,
    at_ms: u64,
    op: &Op,
) -> Applied {
    let mut run = run_of(state, id, op)?;
    require(!run.state.is_terminal(), op, || {
        format!("run {id} is {}, which is final", run.state)
    })?;
    require(run.agent_version == *from, op, || {
        format!("run {id} runs agent {}, not {from}", run.agent_version)
    })?;
    bump(&mut run, version, at_ms, op)?;
    run.agent_version = to.clone();
    state.put_run(run);
    Ok(())
}

/// A failed run goes back to pending: each reopened act (its step's
/// latest attempt, failed) becomes retryable, keeping its status and
/// reason; a saga that ended goes back to not headed anywhere (see
/// `rules/retry.rs`).
fn run_retried(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    reopened: &[EffectKey],
    version: u64,
    at_ms: u64,
    op: &Op,
) -> Applied {
    let mut run = run_of(state, id, op)?;
    require(run.state == RunState::Failed, op, || {
        format!("run {id} is {}, not failed", run.state)
    })?;
    require(run.lease.is_none(), op, || {
        format!("run {id} holds a lease")
    })?;
    for key in reopened {
        require(key.run() == id, op, || format!("{key} is not run {id}'s"))?;
        let entry = state.effect(key);
        require(entry.is_some(), op, || format!("no act {key} to reopen"))?;
        let Some(mut entry) = entry else {
            unreachable!("required above")
        };
        let status = entry.status.name();
        let EffectStatus::Failed { retryable, .. } = &mut entry.status else {
            return require(false, op, || format!("act {key} is {status}, not failed"));
        };
        *retryable = true;
        state.put_effect(entry);
    }
    bump(&mut run, version, at_ms, op)?;
    run.state = RunState::Pending;
    state.put_run(run);
    if let Some(mut book) = state.budget(id) {
        note_transition(&mut book, RunState::Failed, RunState::Pending, at_ms);
        state.put_budget(book);
    }
    if let Some(mut saga) = state.saga(id).filter(|s| s.end.is_some()) {
        saga.end = None;
        state.put_saga(saga);
    }
    Ok(())
}

/// A fork is journaled on the new run, created by the op before it.
fn run_forked(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    from: &RunId,
    op: &Op,
) -> Applied {
    require(state.run(from).is_some(), op, || {
        format!("run {from} does not exist")
    })?;
    let run = run_of(state, id, op)?;
    require(run.version == 1 && run.parent.is_none(), op, || {
        format!("run {id} is not a run just created")
    })?;
    Ok(())
}

/// A run that is over leaves the books (see `retention.rs`).
fn run_pruned(state: &mut (impl BooksWrite + ?Sized), id: &RunId, op: &Op) -> Applied {
    let run = run_of(state, id, op)?;
    require(run.state.is_terminal(), op, || {
        format!(
            "run {id} is {}; only a run that is over is pruned",
            run.state
        )
    })?;
    prune_run(state, id);
    Ok(())
}

/// A new hold of `resource` by `run`, under the resource's next token.
fn resource_acquired(
    state: &mut (impl BooksWrite + ?Sized),
    resource: &ResourceId,
    run: &RunId,
    (token, expires_ms, at_ms): (FencingToken, u64, u64),
    op: &Op,
) -> Applied {
    run_of(state, run, op)?;
    let mut book = state.resource(resource).unwrap_or_else(|| ResourceBook {
        resource: resource.clone(),
        hold: None,
        next_token: FencingToken::FIRST,
    });
    require(book.next_token == token, op, || {
        format!(
            "resource {resource} hands out {} next, the op grants {token}",
            book.next_token
        )
    })?;
    book.hold = Some(ResourceHold {
        run: run.clone(),
        token,
        expires_ms,
        acquired_ms: at_ms,
    });
    book.next_token = token.next();
    state.put_resource(book);
    Ok(())
}

/// A renewal (`expires_ms`) or a release (`None`) of `run`'s hold of
/// `resource` under `token`.
fn resource_held(
    state: &mut (impl BooksWrite + ?Sized),
    resource: &ResourceId,
    run: &RunId,
    token: FencingToken,
    expires_ms: Option<u64>,
    op: &Op,
) -> Applied {
    let book = state.resource(resource);
    let held = book
        .as_ref()
        .and_then(|b| b.hold.as_ref())
        .is_some_and(|h| h.run == *run && h.token == token);
    require(held, op, || {
        format!("run {run} holds no lease of resource {resource} under {token}")
    })?;
    if let Some(mut book) = book {
        match (expires_ms, book.hold.as_mut()) {
            (Some(expires_ms), Some(hold)) => hold.expires_ms = expires_ms,
            _ => book.hold = None,
        }
        state.put_resource(book);
    }
    Ok(())
}

/// A shared key set at `version`, its version before plus one.
fn shared_set(
    state: &mut (impl BooksWrite + ?Sized),
    key: &SharedKeyId,
    version: u64,
    value: &Option<Vec<u8>>,
    change: &SharedChange,
    op: &Op,
) -> Applied {
    let entry = state.shared(key);
    let before = entry.as_ref().map_or(0, |e| e.version);
    require(
        version == before + 1 && change.version == version,
        op,
        || format!("shared key {key} is at version {before}, the op sets version {version}"),
    )?;
    if let Some(run) = &change.run {
        run_of(state, run, op)?;
    }
    state.put_shared(with_change(entry, key, value.clone(), change.clone()));
    Ok(())
}

/// The saga of a run that just moved to compensating records its end.
fn saga_opened(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    end: RunState,
    op: &Op,
) -> Applied {
    let run = run_of(state, id, op)?;
    require(run.state == RunState::Compensating, op, || {
        format!("run {id} is {}, not compensating", run.state)
    })?;
    require(is_saga_end(end), op, || {
        format!("a saga ends a run failed or cancelled, not {end}")
    })?;
    let book = state.saga(id);
    require(book.as_ref().is_some_and(|b| b.end.is_none()), op, || {
        format!("run {id} has no saga to open, or opened it already")
    })?;
    if let Some(mut book) = book {
        book.end = Some(end);
        state.put_saga(book);
    }
    Ok(())
}

/// A same-key resend puts an intended or unknown entry in flight again.
fn effect_resent(state: &mut (impl BooksWrite + ?Sized), key: &EffectKey, op: &Op) -> Applied {
    let mut entry = effect_of(state, key, op)?;
    let open = matches!(
        entry.status,
        EffectStatus::Intended | EffectStatus::Unknown { .. }
    );
    require(open, op, || {
        format!(
            "effect {key} is {}; only an open one is resent",
            entry.status.name()
        )
    })?;
    entry.status = EffectStatus::Intended;
    entry.resends = entry.resends.saturating_add(1);
    state.put_effect(entry);
    Ok(())
}

fn effect_settled(
    state: &mut (impl BooksWrite + ?Sized),
    key: &EffectKey,
    status: &EffectStatus,
    at_ms: u64,
    op: &Op,
) -> Applied {
    let mut entry = effect_of(state, key, op)?;
    let from_ok = match status {
        EffectStatus::Intended => false,
        EffectStatus::Compensated { .. } | EffectStatus::CompensatedStored { .. } => {
            entry.status.is_confirmed()
        }
        _ => matches!(
            entry.status,
            EffectStatus::Intended | EffectStatus::Unknown { .. }
        ),
    };
    require(from_ok, op, || {
        format!(
            "effect {key} cannot go from {} to {}",
            entry.status.name(),
            status.name()
        )
    })?;
    // A receipt kept by digest names a blob written before it (in the same
    // record, or before): the run references it, so retention keeps it
    // until the last run naming it is pruned.
    let stored = status.stored_receipts();
    let missing = stored.iter().find(|r| !state.blob_exists(&r.digest));
    require(missing.is_none(), op, || {
        format!(
            "effect {key} names receipt blob {} that is not stored",
            missing.map(|r| r.digest.short()).unwrap_or_default()
        )
    })?;
    for receipt in &stored {
        reference(state, key.run(), &receipt.digest);
    }
    entry.status = status.clone();
    entry.settled_ms = Some(at_ms);
    state.put_effect(entry);
    Ok(())
}

fn blob_put(
    state: &mut (impl BooksWrite + ?Sized),
    digest: &Digest,
    bytes: &[u8],
    op: &Op,
) -> Applied {
    require(digest_of(bytes) == *digest, op, || {
        format!("the blob's bytes do not match its digest {digest}")
    })?;
    // A blob written now is counted from 0: runs that reference it add one
    // each, and it is deleted when the last of them is pruned.
    if !state.blob_exists(digest) {
        state.put_blob_holders(*digest, Some(0));
    }
    state.put_blob(*digest, bytes.to_vec());
    Ok(())
}

fn checkpoint_saved(
    state: &mut (impl BooksWrite + ?Sized),
    meta: &CheckpointMeta,
    op: &Op,
) -> Applied {
    require(state.run(&meta.run).is_some(), op, || {
        format!("run {} does not exist", meta.run)
    })?;
    let expected = state
        .checkpoint_latest(&meta.run)
        .map_or(1, |m| m.version + 1);
    require(meta.version == expected, op, || {
        format!(
            "checkpoint {} of run {} is out of order: {expected} is next",
            meta.version, meta.run
        )
    })?;
    // Every blob a part is stored in (its chunks, or its whole) is counted
    // for the run, so a prune frees exactly the blobs no kept run names.
    let missing = meta
        .parts
        .iter()
        .flat_map(PartRef::blobs)
        .find(|blob| !state.blob_exists(&blob.digest));
    require(missing.is_none(), op, || {
        format!(
            "checkpoint {} of run {} names blob {} that is not stored",
            meta.version,
            meta.run,
            missing.map(|b| b.digest.short()).unwrap_or_default()
        )
    })?;
    state.put_checkpoint(meta.clone());
    for blob in meta.parts.iter().flat_map(PartRef::blobs) {
        reference(state, &meta.run, &blob.digest);
    }
    Ok(())
}

fn decision_recorded(
    state: &mut (impl BooksWrite + ?Sized),
    record: &DecisionRecord,
    op: &Op,
) -> Applied {
    require(state.run(&record.run).is_some(), op, || {
        format!("run {} does not exist", record.run)
    })?;
    let next = state.decision_count(&record.run);
    require(record.position == next, op, || {
        format!(
            "decision {} of run {} is out of order: {next} is next",
            record.position, record.run
        )
    })?;
    state.put_decision(record.clone());
    Ok(())
}

/// The wait book of run `id`, which must exist (empty if it has none yet).
fn book_of(
    state: &(impl BooksWrite + ?Sized),
    id: &RunId,
    op: &Op,
) -> Result<WaitBook, ApplyError> {
    run_of(state, id, op)?;
    Ok(state.waits(id).unwrap_or_else(|| WaitBook::new(id.clone())))
}

fn wait_opened(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    wait: &WaitRecord,
    op: &Op,
) -> Applied {
    let mut book = book_of(state, id, op)?;
    require(book.open_wait().is_none(), op, || {
        format!("run {id} already waits at another step")
    })?;
    require(
        book.wait_like(&wait.step, &wait.wait_for).is_none(),
        op,
        || {
            format!(
                "step {} of run {id} already waited for a {}",
                wait.step,
                wait.wait_for.kind()
            )
        },
    )?;
    require(wait.seq == book.waits.len() as u64 + 1, op, || {
        format!(
            "wait {} of run {id} is out of order: {} is next",
            wait.seq,
            book.waits.len() + 1
        )
    })?;
    require(wait.is_open() && wait.ended_ms.is_none(), op, || {
        format!("the wait at step {} of run {id} is opened ended", wait.step)
    })?;
    book.waits.push(wait.clone());
    state.put_waits(book);
    Ok(())
}

fn wait_ended(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    step: &StepId,
    status: &WaitStatus,
    at_ms: u64,
    op: &Op,
) -> Applied {
    let mut book = book_of(state, id, op)?;
    let open_here = book.open_wait().is_some_and(|w| w.step == *step);
    require(open_here, op, || {
        format!("run {id} has no open wait at step {step}")
    })?;
    require(*status != WaitStatus::Open, op, || {
        format!("the wait at step {step} of run {id} ends open")
    })?;
    if let WaitStatus::Signalled { signal } = status {
        let at = book.inbox.iter().position(|s| s == signal);
        require(at.is_some(), op, || {
            format!("signal {} is not in the inbox of run {id}", signal.seq)
        })?;
        if let Some(at) = at {
            book.inbox.remove(at);
        }
    }
    let wait = book.waits.last_mut().expect("an open wait is the last");
    wait.status = status.clone();
    wait.ended_ms = Some(at_ms);
    state.put_waits(book);
    Ok(())
}

fn signal_received(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    signal: &SignalRecord,
    op: &Op,
) -> Applied {
    let mut book = book_of(state, id, op)?;
    require(signal.seq == book.signals_received + 1, op, || {
        format!(
            "signal {} of run {id} is out of order: {} is next",
            signal.seq,
            book.signals_received + 1
        )
    })?;
    book.signals_received = signal.seq;
    book.inbox.push(signal.clone());
    state.put_waits(book);
    Ok(())
}

fn budget_set(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    limits: &BudgetLimits,
    at_ms: u64,
    op: &Op,
) -> Applied {
    let run = run_of(state, id, op)?;
    let mut book = state
        .budget(id)
        .unwrap_or_else(|| BudgetBook::new(id.clone(), run.state, at_ms));
    book.limits = Some(*limits);
    state.put_budget(book);
    Ok(())
}

fn budget_reserved(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    reservation: &Reservation,
    op: &Op,
) -> Applied {
    let run = run_of(state, id, op)?;
    require(reservation.charged.first() == Some(id), op, || {
        format!("a reservation of run {id} is counted in its own book first")
    })?;
    let mut books = Vec::with_capacity(reservation.charged.len());
    for (i, charged) in reservation.charged.iter().enumerate() {
        let book = match state.budget(charged) {
            Some(book) => book,
            None if i == 0 => BudgetBook::new(id.clone(), run.state, reservation.reserved_ms),
            None => {
                return Err(ApplyError {
                    op: op.name(),
                    reason: format!(
                        "run {charged} has no budget to count run {id}'s reservation in"
                    ),
                });
            }
        };
        books.push(book);
    }
    require(
        books[0].reservation(&reservation.charge).is_none(),
        op,
        || format!("{} of run {id} is reserved already", reservation.charge),
    )?;
    for book in &mut books {
        let Some(reserved) = book.reserved.checked_add(&reservation.amount) else {
            return Err(ApplyError {
                op: op.name(),
                reason: format!("the reserved counters of run {} overflow", book.run),
            });
        };
        book.reserved = reserved;
    }
    books[0].open.push(reservation.clone());
    for book in books {
        state.put_budget(book);
    }
    Ok(())
}

fn budget_settled(
    state: &mut (impl BooksWrite + ?Sized),
    id: &RunId,
    charge: &Charge,
    actual: &Cost,
    op: &Op,
) -> Applied {
    run_of(state, id, op)?;
    let mut own = state.budget(id).ok_or_else(|| ApplyError {
        op: op.name(),
        reason: format!("run {id} has no budget book"),
    })?;
    let at = own.open.iter().position(|r| r.charge == *charge);
    let Some(at) = at else {
        return Err(ApplyError {
            op: op.name(),
            reason: format!("{charge} of run {id} is not reserved"),
        });
    };
    let reservation = own.open.remove(at);
    let mut books = Vec::with_capacity(reservation.charged.len());
    for (i, charged) in reservation.charged.iter().enumerate() {
        let mut book = if i == 0 {
            own.clone()
        } else {
            state.budget(charged).ok_or_else(|| ApplyError {
                op: op.name(),
                reason: format!("run {charged} has no budget to settle run {id}'s charge in"),
            })?
        };
        let counted = book
            .reserved
            .checked_sub(&reservation.amount)
            .zip(book.spent.checked_add(actual));
        let Some((reserved, spent)) = counted else {
            return Err(ApplyError {
                op: op.name(),
                reason: format!("the counters of run {} do not hold the charge", book.run),
            });
        };
        book.reserved = reserved;
        book.spent = spent;
        books.push(book);
    }
    for book in books {
        state.put_budget(book);
    }
    Ok(())
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::MemBooks;
    use crate::books::Part;
    use crate::books::RunState;
    use crate::books::test_support::*;
    use crate::books::*;
    use crate::books::{Compensation, Outcome, ToolClass};

    /// A workload touching every op kind; returns the ops it logged.
    fn workload() -> (Books, Vec<Op>) {
        let mut b = Books::default();
        let mut log = Vec::new();
        let mut go = |b: &mut Books, cmd| log.extend(b.ok(cmd).ops);
        go(&mut b, create("r", b"in"));
        go(&mut b, create("q", b"in"));
        go(&mut b, claim("w", LEASE_MS));
        let g = Guard {
            run: rid("q"),
            worker: wid("w"),
            token: crate::books::FencingToken(1),
        };
        let run = b.mem.run(&rid("q")).unwrap();
        assert!(
            run.lease.is_some(),
            "claim takes the oldest then lowest id: q"
        );
        go(&mut b, transition("q", &g, RunState::Running));
        let pay = |g: &Guard| {
            let Command::BeginEffect(mut c) = begin(
                "q",
                "pay",
                g,
                ToolClass::Idempotent {
                    dedup_window_ms: 100,
                },
                b"a",
            ) else {
                unreachable!()
            };
            c.compensation = Some(Compensation {
                tool: "bank.refund".into(),
                args: b"a".to_vec(),
                class: ToolClass::Queryable,
            });
            Command::BeginEffect(c)
        };
        go(&mut b, pay(&g));
        go(&mut b, pay(&g));
        let key = crate::books::EffectKey::parse("q/pay/1").unwrap();
        go(
            &mut b,
            finish(
                &key,
                &g,
                Outcome::Confirmed {
                    receipt: b"ok".to_vec(),
                },
            ),
        );
        go(&mut b, compensate("q", "pay", &g));
        let undo = crate::books::EffectKey::parse("q/pay/undo/1").unwrap();
        go(
            &mut b,
            finish(
                &undo,
                &g,
                Outcome::Confirmed {
                    receipt: b"refunded".to_vec(),
                },
            ),
        );
        go(
            &mut b,
            save(
                "q",
                &g,
                1,
                vec![Part {
                    name: "m".into(),
                    bytes: vec![1; 100],
                    extends: None,
                    inline: false,
                }],
            ),
        );
        go(&mut b, decision("q", &g, 0, b"p", b"o"));
        go(&mut b, renew("q", &g, 10));
        go(&mut b, release("q", &g));
        (b, log)
    }

    #[test]
    fn the_same_ops_on_two_fresh_books_give_equal_books() {
        let (live, log) = workload();
        assert!(log.len() >= 12);
        let mut a = MemBooks::new();
        let mut c = MemBooks::new();
        for op in &log {
            apply(&mut a, op).unwrap();
        }
        // The second replay goes through the encoded log, as recovery does.
        for op in &log {
            apply(&mut c, &Op::decode(&op.encode()).unwrap()).unwrap();
        }
        assert_eq!(a, c);
        assert_eq!(a, live.mem, "replay must rebuild exactly the live books");
    }

    #[test]
    fn replay_from_a_snapshot_equals_full_replay() {
        let (live, log) = workload();
        let mut snapshot = MemBooks::new();
        let split = log.len() / 2;
        for op in &log[..split] {
            apply(&mut snapshot, op).unwrap();
        }
        let mut resumed = snapshot.clone();
        for op in &log[split..] {
            apply(&mut resumed, op).unwrap();
        }
        assert_eq!(resumed, live.mem);
        assert_ne!(snapshot, live.mem);
    }

    #[test]
    fn applying_any_op_of_the_log_twice_is_an_error_that_changes_nothing() {
        let (_, log) = workload();
        let mut refused = 0;
        for (i, op) in log.iter().enumerate() {
            let mut m = MemBooks::new();
            for earlier in &log[..=i] {
                apply(&mut m, earlier).unwrap();
            }
            let before = m.clone();
            match apply(&mut m, op) {
                Err(e) => {
                    assert_eq!(e.op, op.name());
                    assert_eq!(m, before, "a refused op wrote something: {e}");
                    refused += 1;
                }
                // A blob is content addressed; a resend may repeat; a renewal
                // to the same expiry only bumps the version (refused too).
                Ok(()) => assert!(matches!(op, Op::BlobPut { .. } | Op::EffectResent { .. })),
            }
        }
        assert!(refused >= log.len() - 3, "{refused} of {}", log.len());
    }

    #[test]
    fn an_op_that_does_not_fit_is_an_error_never_a_panic() {
        let (_, log) = workload();
        let mut empty = MemBooks::new();
        for op in &log {
            if !matches!(op, Op::RunCreated { .. } | Op::BlobPut { .. }) {
                let e = apply(&mut empty, op).unwrap_err();
                assert!(e.to_string().contains("does not apply"), "{e}");
            }
        }
        assert_eq!(
            empty,
            MemBooks::new(),
            "every refused op left the books alone"
        );
    }
}

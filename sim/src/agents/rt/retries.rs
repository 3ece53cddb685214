//! The operator's retries in the runtime family: a person who finds a
//! failed run restocks what it lacked and puts it back to pending
//! (`Engine::retry_run`), from its latest checkpoint or an earlier one
//! drawn from the seed; the runtime then resumes it, replaying its
//! confirmed acts and trying its failed step under the next key.
//!
//! Checked here: a retry is refused exactly when the books say it must be
//! (the run's saga undid an act, or its parent waited for it), and a
//! retried run's audit names the retry. The runtime's promise that a
//! retried run sends no confirmed act again is checked at the tool
//! (`CONFIRMED_NOT_SENT`, `world.rs`), where the planted
//! `retry-resends-confirmed` is caught.
//!
//! **Invariant:** which runs are retried, and from which checkpoint, is
//! drawn from the operator's generator only.

use actum::books::{AuditWhat, EffectKind, EffectStatus, RunId, RunState, WaitFor};
use actum::{Engine, Error};

use super::world::Shared;

/// Invariant: a retry is refused exactly when the books forbid it.
pub const RETRY_REFUSED_RIGHTLY: &str =
    "a failed run is retried unless its saga undid an act or its parent waited for it";
/// The person's name in the retries.
const PERSON: &str = "sim-operator";
/// Why the person retries.
const RETRY_REASON: &str = "restocked the warehouse";
/// Why the person forks.
const FORK_REASON: &str = "its saga undid it: start it again";
/// How [`forbidden`] names a run whose saga undid an act.
const UNDONE: &str = "its saga undid";

/// The failed runs, in id order.
fn failed_runs(engine: &Engine) -> Vec<RunId> {
    let mut failed = Vec::new();
    let mut after: Option<RunId> = None;
    while let Ok(page) = engine.runs(Some(RunState::Failed), after.as_ref(), 50) {
        let Some(last) = page.last() else {
            break;
        };
        after = Some(last.id.clone());
        failed.extend(page.into_iter().map(|r| r.id));
    }
    failed
}

/// Why the books forbid retrying `run`, if they do.
fn forbidden(engine: &Engine, run: &RunId) -> Option<String> {
    let undone = engine.effects(run).ok()?.into_iter().find(|e| {
        e.key.kind() == EffectKind::Undo || matches!(e.status, EffectStatus::Compensated { .. })
    });
    if let Some(undone) = undone {
        return Some(format!("{UNDONE} {}", undone.key));
    }
    let parent = engine.run(run).ok().flatten()?.parent?;
    let waited = engine
        .waits(&parent)
        .ok()?
        .waits
        .iter()
        .any(|w| match &w.wait_for {
            WaitFor::Child { run: child } => child == run,
            WaitFor::Children { runs, .. } => runs.contains(run),
            _ => false,
        });
    waited.then(|| format!("its parent {parent} waited for it"))
}

/// A person looks at the failed runs and retries some, each with the
/// warehouse restocked for it. `Err` names the invariant broken.
pub fn retry_some(shared: &Shared) -> Result<(), (&'static str, String)> {
    let Some(engine) = shared.engine() else {
        return Ok(());
    };
    for run in failed_runs(&engine) {
        if shared.dead() {
            return Ok(());
        }
        // A person retries a run that failed at a step (what a restock
        // can change), and asks once per failure.
        let Some(record) = engine.run(&run).ok().flatten() else {
            continue;
        };
        let failed_at_a_step = engine.effects(&run).is_ok_and(|effects| {
            effects.iter().any(|e| {
                e.key.kind() == EffectKind::Act
                    && matches!(e.status, EffectStatus::Failed { .. })
                    && !effects.iter().any(|later| {
                        later.key.kind() == EffectKind::Act
                            && later.key.step() == e.key.step()
                            && later.key.attempt() > e.key.attempt()
                    })
            })
        });
        if !failed_at_a_step
            || !shared
                .state()
                .retries_asked
                .insert((run.clone(), record.version))
            || shared.state().operator.below(2) == 0
        {
            continue;
        }
        // From the latest checkpoint, or one before it.
        let latest = engine
            .load_latest(&run, actum::runtime::RUNTIME_SCHEMA)
            .ok()
            .flatten()
            .map_or(0, |c| c.meta.version);
        let checkpoint = {
            let operator = &mut shared.state().operator;
            (operator.below(3) == 0 && latest > 1).then(|| 1 + operator.below(latest))
        };
        let forbidden = forbidden(&engine, &run);
        shared.state().restocked.insert(run.clone());
        let retried = engine.retry_run(&run, checkpoint, PERSON, RETRY_REASON);
        shared.note(|| {
            format!(
                "a person restocks and retries {run} from checkpoint {checkpoint:?}: {retried:?}"
            )
        });
        match (&retried, &forbidden) {
            (Ok(done), None) => {
                let journaled = engine.audit(&run).is_ok_and(|audit| {
                    audit.iter().any(|e| {
                        matches!(&e.what, AuditWhat::Retried { reopened, operator, .. }
                            if *reopened == done.reopened && operator == PERSON)
                            && e.why == RETRY_REASON
                    })
                });
                if !journaled && !shared.dead() {
                    return Err((
                        RETRY_REFUSED_RIGHTLY,
                        format!("{run} was retried but its audit names no such retry"),
                    ));
                }
                let mut state = shared.state();
                state.report.retries += 1;
                state.report.retries_restored += u64::from(done.restored.is_some());
            }
            (Err(Error::RetryRefused { .. }), Some(why)) => {
                shared.state().report.retries_refused += 1;
                if why.starts_with(UNDONE) {
                    fork_instead(shared, &engine, &run)?;
                }
            }
            (Ok(_), Some(why)) => {
                return Err((
                    RETRY_REFUSED_RIGHTLY,
                    format!("{run} was retried though {why}"),
                ));
            }
            (Err(Error::RetryRefused { reason, .. }), None) => {
                return Err((
                    RETRY_REFUSED_RIGHTLY,
                    format!("{run} was refused a retry ({reason}) though nothing forbids it"),
                ));
            }
            // The process died under the call, or a checkpoint raced.
            (Err(_), _) => {}
        }
    }
    Ok(())
}

/// A person forks a run whose saga undid what it did (the engine refused
/// its retry, and said to fork it): `<run>-again`, from its latest
/// checkpoint, a new run under its own keys. The fork must be journaled on
/// the new run and start pending at the source's agent version.
fn fork_instead(
    shared: &Shared,
    engine: &Engine,
    run: &RunId,
) -> Result<(), (&'static str, String)> {
    let Ok(fork) = RunId::new(format!("{run}-again")) else {
        return Ok(()); // the name would be too long: no fork
    };
    let forked = engine.fork_run(run, &fork, None, PERSON, FORK_REASON);
    shared.note(|| format!("a person forks {run} into {fork}: {forked:?}"));
    let Ok(forked) = forked else {
        return Ok(()); // the process died under the call
    };
    let source = engine.run(run).ok().flatten();
    let record = engine.run(&fork).ok().flatten();
    let journaled = engine.audit(&fork).is_ok_and(|audit| {
        audit.iter().any(|e| {
            matches!(&e.what, AuditWhat::Forked { from, operator, .. }
                if from == run && operator == PERSON)
        })
    });
    let same_agent = match (&source, &record) {
        (Some(s), Some(f)) => {
            s.agent_version == f.agent_version && s.input_digest == f.input_digest
        }
        _ => false,
    };
    if shared.dead() {
        return Ok(());
    }
    if !journaled || !same_agent {
        return Err((
            FORK_JOURNALED,
            format!(
                "{fork}, forked from {run} ({forked:?}), is {record:?}; journaled: {journaled}"
            ),
        ));
    }
    if forked.created {
        shared.state().report.forks += 1;
    }
    Ok(())
}

/// Invariant: a fork is journaled on its new run, which starts at its
/// source's agent version and input.
pub const FORK_JOURNALED: &str =
    "a fork is journaled on the new run, at its source's agent version and input";

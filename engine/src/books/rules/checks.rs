//! The checks every rule starts with: the run exists, the caller's lease is
//! live and its token current, the run is running, a name is well formed,
//! no wait is open. Shared by the domain rules of this layer, so that none
//! of them has to use another for these.

use crate::books::base::digest::{Digest, digest_of};
use crate::books::base::ids::{FencingToken, RunId};
use crate::books::base::limits::{ARGS_BYTES_MAX, NAME_LEN_BYTES_MAX, check_size, check_text};
use crate::books::records::run::current_token;
use crate::books::records::run::{Run, RunState};
use crate::books::vocabulary::command::Guard;
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// Checks bytes a command asks the blob store to keep (a step's
/// arguments, a run's input): at most [`ARGS_BYTES_MAX`], and hashing to
/// the `digest` the command names (`InvalidCommand` naming `what` if not).
pub(crate) fn check_stored_bytes(
    what: impl Fn() -> String,
    bytes: &[u8],
    digest: &Digest,
) -> Result<()> {
    check_size(&what, bytes.len(), ARGS_BYTES_MAX)?;
    let found = digest_of(bytes);
    if found != *digest {
        return Err(Error::InvalidCommand {
            reason: format!(
                "the {} hash to {}, not to the digest {} the command names",
                what(),
                found.short(),
                digest.short()
            ),
        });
    }
    Ok(())
}

/// Checks the operator and reason an operator's command journals (`act`
/// on `run`, named in the error): both well-formed text, the operator
/// named.
pub(crate) fn check_operator(act: &str, run: &RunId, operator: &str, reason: &str) -> Result<()> {
    check_text("operator", operator)?;
    check_text("operator's reason", reason)?;
    if operator.is_empty() {
        return Err(Error::InvalidCommand {
            reason: format!("an operator's {act} of run {run} must name the operator"),
        });
    }
    Ok(())
}

/// `RunNotRunning` unless `run` is running: what `refused` names needs it.
pub(crate) fn check_running(run: &Run, refused: &'static str) -> Result<()> {
    if run.state == RunState::Running {
        return Ok(());
    }
    Err(Error::RunNotRunning {
        run: run.id.clone(),
        state: run.state,
        refused,
    })
}

/// The op that moves `run` to `to` for someone who holds no lease (an
/// operator, an approver, a signal, a wait's deadline): journaled under the
/// run's current token. Returns it and the run's version after it.
pub(crate) fn move_under_current_token(
    run: &Run,
    to: RunState,
    now_ms: u64,
    reason: String,
) -> (Op, u64) {
    let version = run.version + 1;
    let op = Op::RunTransitioned {
        run: run.id.clone(),
        from: run.state,
        to,
        version,
        at_ms: now_ms,
        token: current_token(run),
        reason,
    };
    (op, version)
}

/// The run named `id`, or `NotFound`.
pub(crate) fn existing(state: &dyn BooksRead, id: &RunId) -> Result<Run> {
    state.run(id).ok_or_else(|| Error::NotFound {
        what: format!("run {id}"),
    })
}

/// Checks that `guard` holds the live lease of `run` at `now_ms`.
pub(crate) fn check_guard(run: &Run, guard: &Guard, now_ms: u64) -> Result<()> {
    check_guard_run(run, guard)?;
    assert!(
        run.next_token >= FencingToken::FIRST,
        "run {} has token 0 pending",
        run.id
    );
    let fenced = |current: FencingToken| Error::Fenced {
        run: run.id.clone(),
        presented: guard.token,
        current,
    };
    match &run.lease {
        Some(lease) if lease.token != guard.token || lease.worker != guard.worker => {
            Err(fenced(lease.token))
        }
        Some(lease) if !lease.is_live(now_ms) => Err(Error::LeaseLost {
            run: run.id.clone(),
            token: guard.token,
        }),
        Some(_) => Ok(()),
        None if guard.token < current_token(run) => Err(fenced(current_token(run))),
        None => Err(Error::LeaseLost {
            run: run.id.clone(),
            token: guard.token,
        }),
    }
}

/// Checks the guard of a *fact* reported about the run: the outcome of an
/// act that already happened, or what a query found. Unlike a mutation, a
/// fact is accepted after the lease expired (or was released), as long as
/// no one has acquired the run since: the act happened under this token,
/// and refusing the report would lose its receipt. A token older than the
/// run's current one is `Fenced`; so is another worker presenting the
/// current token.
pub(crate) fn check_fact(run: &Run, guard: &Guard) -> Result<()> {
    check_guard_run(run, guard)?;
    let current = current_token(run);
    if current < FencingToken::FIRST {
        // Never leased: no act can have happened under any token.
        return Err(Error::LeaseLost {
            run: run.id.clone(),
            token: guard.token,
        });
    }
    let holder_differs = run
        .lease
        .as_ref()
        .is_some_and(|lease| lease.worker != guard.worker);
    if guard.token != current || holder_differs {
        return Err(Error::Fenced {
            run: run.id.clone(),
            presented: guard.token,
            current,
        });
    }
    assert_eq!(guard.token, current);
    Ok(())
}

/// `GuardOfAnotherRun` unless `guard` was granted on `run`: a caller that
/// mixed up two runs its worker holds under the same token is refused,
/// not taken for the holder of the other.
fn check_guard_run(run: &Run, guard: &Guard) -> Result<()> {
    if guard.run == run.id {
        return Ok(());
    }
    Err(Error::GuardOfAnotherRun {
        run: run.id.clone(),
        guard_run: guard.run.clone(),
    })
}

/// Checks the guard of a mutation on a run that must still be alive.
pub(crate) fn check_live(run: &Run, guard: &Guard, now_ms: u64) -> Result<()> {
    if run.state.is_terminal() {
        return Err(Error::RunTerminal {
            run: run.id.clone(),
            state: run.state,
        });
    }
    check_guard(run, guard, now_ms)
}

pub(crate) fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidCommand {
            reason: format!("the {what} is empty"),
        });
    }
    check_size(|| what.to_string(), name.len(), NAME_LEN_BYTES_MAX)
}

/// Refuses moving a run to `running` while its wait is open: only the
/// wait's end (an approval, a signal, its deadline) does that.
pub(crate) fn check_no_open_wait(state: &dyn BooksRead, run: &Run) -> Result<()> {
    let book = state.waits(&run.id);
    match book.as_ref().and_then(|b| b.open_wait()) {
        None => Ok(()),
        Some(wait) => Err(Error::WaitOpen {
            run: run.id.clone(),
            step: wait.step.clone(),
            waits_for: wait.wait_for.to_string(),
        }),
    }
}

//! Every write the page makes: decide an approval, reconcile an effect,
//! pause, resume or cancel a run. Each opens the database for writing per
//! request, through the same code as `actum approve`, `actum reconcile`
//! and `actum pause` (`answer::decide`, `operate::settle_in`,
//! `operate::operate_on`), and closes it; the operator's name and reason
//! are journaled by the engine with the command.
//!
//! A live database (another process's engine holds its lock) cannot be
//! written from here yet: the open is refused and the answer says so.
//! These functions are the only place to change when writes go to the
//! live engine instead.
//!
//! **Invariant:** the answer is `Ok` only if the engine made the write
//! durable; a refused write (`Err`, a sentence for the page) changed
//! nothing.

use std::path::Path;

use actum::books::{EffectKey, OperatorAction, Outcome, RunId};

use crate::args::Found;
use crate::failure::CliError;
use crate::live::open_to_read;
use crate::{answer, operate as operator};

/// What a write did, for a person (`Ok`), or why it did nothing (`Err`).
pub type Acted = Result<String, String>;

/// Approves (`approve` true) or rejects the approval `run` waits for, if
/// its arguments' digest starts with `digest_prefix`.
pub fn approve(
    dir: &Path,
    run: &str,
    digest_prefix: &str,
    approve: bool,
    operator: &str,
    reason: &str,
) -> Acted {
    let run = RunId::new(run).map_err(|e| refused(dir, CliError::engine(dir, e)))?;
    answer::decide(dir, &run, digest_prefix, approve, operator, reason)
        .map(|decided| decided.sentence(&run, approve, operator))
        .map_err(|e| refused(dir, e))
}

/// Settles the effect `key` as `found` out: confirmed with
/// `receipt_or_error` as its receipt, or failed (not to be tried again)
/// with it as the error.
pub fn reconcile(
    dir: &Path,
    key: &str,
    found: Found,
    receipt_or_error: &str,
    operator: &str,
    reason: &str,
) -> Acted {
    let key = EffectKey::parse(key).map_err(|e| refused(dir, CliError::engine(dir, e)))?;
    let outcome = match found {
        Found::Confirmed => Outcome::Confirmed {
            receipt: receipt_or_error.as_bytes().to_vec(),
        },
        Found::Failed => Outcome::Failed {
            retryable: false,
            reason: receipt_or_error.to_string(),
        },
    };
    operator::settle_in(dir, &key, outcome, operator, reason)
        .map(|settled| settled.lines(&key).join("\n"))
        .map_err(|e| refused(dir, e))
}

/// Pauses, resumes or cancels `run`.
pub fn operate(
    dir: &Path,
    run: &str,
    action: OperatorAction,
    operator: &str,
    reason: &str,
) -> Acted {
    let run = RunId::new(run).map_err(|e| refused(dir, CliError::engine(dir, e)))?;
    let moved =
        operator::operate_on(dir, &run, action, operator, reason).map_err(|e| refused(dir, e))?;
    let mut said = moved.sentence(&run, operator, reason);
    if let Some(note) = moved.budget_note(dir, &run) {
        said.push_str("\nnote: ");
        said.push_str(&note);
    }
    Ok(said)
}

/// Why a write was refused, for the page: the command's message, and for
/// a live database what to do instead.
fn refused(dir: &Path, error: CliError) -> String {
    let message = match error {
        CliError::Failed { message, .. } => message,
        CliError::OutputClosed => "the write was interrupted".to_string(),
    };
    let mut said = format!("Nothing was changed: {message}");
    // Said whenever the database is live, whatever refused this write: no
    // write from this page can succeed until the process holding it stops.
    if open_to_read(dir).is_ok_and(|r| r.live_lsn.is_some()) {
        said.push_str(&format!(
            "\n{} is open in another process (a live engine holds its lock), and this page \
             writes by opening the database itself: stop that process, or make the change \
             from it, then try again.",
            dir.display()
        ));
    }
    said
}

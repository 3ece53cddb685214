//! Every write the page makes: decide an approval, reconcile an effect,
//! pause, resume or cancel a run. Each is an operator's request, carried
//! out as `actum approve`, `reconcile` and `pause` carry theirs
//! (`operator::carry`): through the operator channel of the engine that
//! has the database open, or on the database opened for writing when none
//! does. The request's id comes with the form, so a form sent twice is
//! carried out once; the operator's name and reason are journaled by the
//! engine with the command.
//!
//! **Invariant:** the answer is `Ok` only if the engine made the write
//! durable (or had made it, for a form sent again); a refused write
//! (`Err`, a sentence for the page) changed nothing.

use std::path::Path;

use actum::books::{EffectKey, OperatorAction, Outcome, RunId};
use actum::operator::{Act, Request};

use crate::args::Found;
use crate::failure::CliError;
use crate::live::open_to_read;
use crate::operator::{carry, lines};

/// What a write did, for a person (`Ok`), or why it did nothing (`Err`).
pub type Acted = Result<String, String>;

/// Who asks for a write, why, and under which request id.
pub struct By {
    /// The request's id.
    pub request: String,
    /// The operator's name.
    pub operator: String,
    /// Why.
    pub reason: String,
}

/// Approves (`approve` true) or rejects the approval `run` waits for, if
/// its arguments' digest starts with `digest_prefix`.
pub fn approve(dir: &Path, run: &str, digest_prefix: &str, approve: bool, by: &By) -> Acted {
    let run = RunId::new(run).map_err(|e| refused(dir, CliError::engine(dir, e)))?;
    send(
        dir,
        by,
        Act::Approval {
            run,
            digest_prefix: digest_prefix.to_ascii_lowercase(),
            approve,
        },
    )
}

/// Settles the effect `key` as `found` out: confirmed with
/// `receipt_or_error` as its receipt, or failed (not to be tried again)
/// with it as the error.
pub fn reconcile(dir: &Path, key: &str, found: Found, receipt_or_error: &str, by: &By) -> Acted {
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
    send(dir, by, Act::Reconcile { key, outcome })
}

/// Pauses, resumes or cancels `run`.
pub fn operate(dir: &Path, run: &str, action: OperatorAction, by: &By) -> Acted {
    let run = RunId::new(run).map_err(|e| refused(dir, CliError::engine(dir, e)))?;
    send(dir, by, Act::Operate { run, action })
}

/// Carries `act` out as `by`'s request, and says what it did.
fn send(dir: &Path, by: &By, act: Act) -> Acted {
    let request = Request {
        id: by.request.clone(),
        operator: by.operator.clone(),
        reason: by.reason.clone(),
        act,
    };
    let (done, _) = carry(dir, &request).map_err(|e| refused(dir, e))?;
    Ok(lines(&done, &request).join("\n"))
}

/// Why a write was refused, for the page: the command's message, and for
/// a live database that serves no operator channel, what to do instead.
fn refused(dir: &Path, error: CliError) -> String {
    let message = match error {
        CliError::Failed { message, .. } => message,
        CliError::OutputClosed => "the write was interrupted".to_string(),
    };
    let mut said = format!("Nothing was changed: {message}");
    let live = open_to_read(dir).is_ok_and(|r| r.live_lsn.is_some());
    if live && !actum::operator::channel::socket_path(dir).exists() {
        said.push_str(&format!(
            "\n{} is open in another process whose engine serves no operator channel: open \
             it there with `EngineOptions::operator_channel`, or stop that process, then try \
             again.",
            dir.display()
        ));
    }
    said
}

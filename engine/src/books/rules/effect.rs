//! Deciding effects: the ledger half of the ceremony. `BeginEffect` derives
//! the key and writes the intent (or answers from the ledger), `FinishEffect`
//! records the outcome, `Reconcile` settles an ambiguous entry from what a
//! query or an operator found. `compensation.rs` begins the undo side of a
//! step through the same [`begin_side`].
//!
//! Invariants: a step opens attempt n+1 only after attempt n failed
//! retryably; a confirmed step is never acted on again; an intent without
//! outcome (or whose outcome was reported `Unknown`) is decided by the
//! tool's class: resent with the *same* key only inside an idempotent
//! tool's dedup window less its resend margin (so that the resend reaches
//! the tool while it still remembers the key), queried on a queryable
//! tool, and left `Unknown` (never resent) otherwise. A fresh act on a run
//! with budget limits fails closed: it is refused if it would pass them,
//! and its tool call is counted in the intent's commit unless a reserve
//! already holds it. An outcome is a fact: it is recorded under the run's
//! current token even after the lease expired.

use crate::books::base::digest::Digest;
use crate::books::base::ids::{EffectKey, EffectKind, FencingToken, RunId, validate_name};
use crate::books::base::limits::{
    COMPENSATION_ARGS_BYTES_MAX, SAGA_STEPS_MAX, check_size, check_text,
};
use crate::books::records::budget::{Charge, Cost};
use crate::books::records::ledger::{
    Compensation, EffectEntry, EffectStatus, Outcome, Receipt, ToolClass, compensated,
};
use crate::books::records::run::current_token;
use crate::books::records::run::{Run, RunState};
use crate::books::rules::budget::decide_act_within_budget;
use crate::books::rules::checks::{
    check_fact, check_live, check_running, check_stored_bytes, existing,
};
use crate::books::rules::wait::{check_approved, wake_on_reply};
use crate::books::vocabulary::answer::{Answer, Begun, Decided};
use crate::books::vocabulary::command::{BeginEffect, DeliverReply, FinishEffect, Reconcile};
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// What an intent records about the act it announces.
pub(crate) struct Intent<'a> {
    /// The tool to call.
    pub(crate) tool: &'a str,
    /// How it treats duplicates.
    pub(crate) class: ToolClass,
    /// Digest of the call's arguments.
    pub(crate) args_digest: Digest,
    /// Why.
    pub(crate) rationale: &'a str,
    /// What undoes it.
    pub(crate) compensation: Option<&'a Compensation>,
}

/// The entry named `key`, or `NotFound`.
fn entry(state: &dyn BooksRead, key: &EffectKey) -> Result<EffectEntry> {
    state.effect(key).ok_or_else(|| Error::NotFound {
        what: format!("effect {key}"),
    })
}

/// Refuses settling `found` unless it awaits an outcome (intended or
/// unknown): a settled entry is `EffectNotOpen`.
fn check_open(found: &EffectEntry) -> Result<()> {
    if found.status.is_open() {
        return Ok(());
    }
    Err(Error::EffectNotOpen {
        key: found.key.clone(),
        status: found.status.name(),
    })
}

fn decided(op: Option<Op>, answer: Answer) -> Result<Decided> {
    Ok(Decided {
        ops: op.into_iter().collect(),
        answer,
    })
}

/// Refuses a tool class whose resend margin is longer than its window.
fn check_tool_class(tool: &str, class: ToolClass) -> Result<()> {
    if let ToolClass::IdempotentWithMargin {
        dedup_window_ms,
        resend_margin_ms,
    } = class
        && resend_margin_ms > dedup_window_ms
    {
        return Err(Error::InvalidCommand {
            reason: format!(
                "tool {tool} declares a resend margin of {resend_margin_ms} ms, longer than its \
                 {dedup_window_ms} ms dedup window"
            ),
        });
    }
    Ok(())
}

/// Decides `BeginEffect`: ceremony points 1 to 3 (key, check, intent).
pub(crate) fn decide_begin(
    state: &dyn BooksRead,
    cmd: &BeginEffect,
    now_ms: u64,
) -> Result<Decided> {
    validate_name("tool", &cmd.tool)?;
    check_tool_class(&cmd.tool, cmd.tool_class)?;
    check_text("effect rationale", &cmd.rationale)?;
    if let Some(c) = &cmd.compensation {
        validate_name("compensation tool", &c.tool)?;
        check_tool_class(&c.tool, c.class)?;
        check_size(
            || format!("compensation args of step {}", cmd.step),
            c.args.len(),
            COMPENSATION_ARGS_BYTES_MAX,
        )?;
    }
    if let Some(args) = &cmd.args {
        check_stored_bytes(
            || format!("arguments of step {} of run {}", cmd.step, cmd.run),
            args,
            &cmd.args_digest,
        )?;
    }
    let run = existing(state, &cmd.run)?;
    check_live(&run, &cmd.guard, now_ms)?;
    let latest = state.latest_effect(&cmd.run, &cmd.step, EffectKind::Act);
    // A compensating run's saga may resolve an act in flight by its tool's
    // class (a resend or a query), but never begins one.
    let resolving =
        run.state == RunState::Compensating && latest.as_ref().is_some_and(|e| e.status.is_open());
    if !resolving {
        check_running(&run, "begin an effect")?;
    }
    check_approved(state, &run, &cmd.step, &cmd.args_digest)?;
    if cmd.compensation.is_some() && latest.is_none() {
        check_saga_room(state, &run.id)?;
    }
    if let Some(latest) = &latest
        && (latest.tool != cmd.tool || latest.args_digest != cmd.args_digest)
    {
        return Err(Error::ArgsMismatch {
            key: latest.key.clone(),
            recorded: format!("{} args {}", latest.tool, latest.args_digest.short()),
            presented: format!("{} args {}", cmd.tool, cmd.args_digest.short()),
        });
    }
    let intent = Intent {
        tool: &cmd.tool,
        class: cmd.tool_class,
        args_digest: cmd.args_digest,
        rationale: &cmd.rationale,
        compensation: cmd.compensation.as_ref(),
    };
    let first = EffectKey::new(cmd.run.clone(), cmd.step.clone(), 1)?;
    let mut decided = begin_side(state, latest, first, &intent, cmd.guard.token, now_ms)?;
    let intended = decided.ops.iter().find_map(|op| match op {
        Op::EffectIntended { entry } => Some(entry.key.attempt()),
        _ => None,
    });
    let intends = intended.is_some();
    // A fresh act fails closed on the run's budget (a resend, a replay or a
    // query of an act begun before is the same call: never refused).
    if let Some(attempt) = intended {
        let charged =
            decide_act_within_budget(state, &run, (&cmd.step, attempt), cmd.guard.token, now_ms)?;
        decided.ops.extend(charged);
    }
    // A fresh intent stores its arguments, unless the blob store has them.
    if let Some(args) = cmd.args.as_ref().filter(|_| intends)
        && !state.blob_exists(&cmd.args_digest)
    {
        let put = Op::BlobPut {
            digest: cmd.args_digest,
            bytes: args.clone(),
        };
        decided.ops.insert(0, put);
    }
    Ok(decided)
}

/// Refuses a new step registering a compensation once the run's saga
/// lists [`SAGA_STEPS_MAX`] of them.
fn check_saga_room(state: &dyn BooksRead, run: &RunId) -> Result<()> {
    let listed = state.saga(run).map_or(0, |book| book.steps.len());
    check_size(
        || format!("saga of run {run} (in compensable steps)"),
        listed + 1,
        SAGA_STEPS_MAX,
    )
}

/// Begins one side of a step, given its latest attempt (if any) and the key
/// of its first: answers from the ledger (a receipt stored by digest read
/// from the blob store), or writes a fresh intent.
pub(crate) fn begin_side(
    state: &dyn BooksRead,
    latest: Option<EffectEntry>,
    first: EffectKey,
    intent: &Intent<'_>,
    token: FencingToken,
    now_ms: u64,
) -> Result<Decided> {
    assert_eq!(first.attempt(), 1, "a side's first key is attempt 1");
    let Some(latest) = latest else {
        return intend(intent, first, token, now_ms);
    };
    assert_eq!(latest.key.kind(), first.kind(), "one side at a time");
    let key = latest.key.clone();
    match &latest.status {
        EffectStatus::Confirmed { .. } | EffectStatus::ConfirmedStored { .. } => {
            let receipt = latest
                .status
                .act_receipt()
                .map(|r| r.bytes(&key, &|d| state.blob(d)))
                .transpose()?
                .unwrap_or_default();
            decided(None, Answer::Begun(Begun::Replay { key, receipt }))
        }
        EffectStatus::Failed {
            retryable: true, ..
        } => intend(intent, key.next_attempt()?, token, now_ms),
        EffectStatus::Failed {
            retryable: false,
            reason,
        } => decided(
            None,
            Answer::Begun(Begun::Failed {
                key,
                reason: reason.clone(),
            }),
        ),
        EffectStatus::Compensated { .. } | EffectStatus::CompensatedStored { .. } => {
            decided(None, Answer::Begun(Begun::Compensated { key }))
        }
        EffectStatus::Intended | EffectStatus::Unknown { .. } => resume(&latest, token, now_ms),
    }
}

/// The intent of a fresh attempt.
fn intend(
    intent: &Intent<'_>,
    key: EffectKey,
    token: FencingToken,
    now_ms: u64,
) -> Result<Decided> {
    let entry = EffectEntry {
        key: key.clone(),
        tool: intent.tool.to_string(),
        tool_class: intent.class,
        args_digest: intent.args_digest,
        rationale: intent.rationale.to_string(),
        compensation: intent.compensation.cloned(),
        status: EffectStatus::Intended,
        intended_ms: now_ms,
        token,
        resends: 0,
        settled_ms: None,
    };
    let answer = Answer::Begun(Begun::Proceed { key, token });
    decided(Some(Op::EffectIntended { entry }), answer)
}

/// An intent found without a known outcome (never reported, or reported
/// `Unknown` because the ack was lost): decided by the tool's class.
fn resume(latest: &EffectEntry, token: FencingToken, now_ms: u64) -> Result<Decided> {
    assert!(matches!(
        latest.status,
        EffectStatus::Intended | EffectStatus::Unknown { .. }
    ));
    let key = latest.key.clone();
    match latest.tool_class {
        ToolClass::Idempotent { dedup_window_ms }
        | ToolClass::IdempotentWithMargin {
            dedup_window_ms, ..
        } => {
            let age_ms = now_ms.saturating_sub(latest.intended_ms);
            let margin_ms = latest
                .tool_class
                .resend_margin_ms()
                .unwrap_or(dedup_window_ms);
            let horizon_ms = dedup_window_ms.saturating_sub(margin_ms);
            if age_ms < horizon_ms {
                let op = Op::EffectResent {
                    key: key.clone(),
                    token,
                    at_ms: now_ms,
                };
                return decided(Some(op), Answer::Begun(Begun::Resend { key, token }));
            }
            unknown(
                latest,
                token,
                now_ms,
                format!(
                    "intent is {age_ms} ms old, past the {horizon_ms} ms within which the tool's \
                     {dedup_window_ms} ms dedup window less its {margin_ms} ms resend margin \
                     allows a resend, so a resend could reach the tool after it forgot the key \
                     and act twice"
                ),
            )
        }
        ToolClass::Queryable => decided(None, Answer::Begun(Begun::Reconcile { key, token })),
        ToolClass::NotIdempotent => unknown(
            latest,
            token,
            now_ms,
            "intent without outcome on a tool that is not idempotent; it may or may not have acted"
                .to_string(),
        ),
    }
}

/// Answers `Unknown`, settling the entry into it unless it already is.
fn unknown(
    latest: &EffectEntry,
    token: FencingToken,
    now_ms: u64,
    reason: String,
) -> Result<Decided> {
    let key = latest.key.clone();
    if let EffectStatus::Unknown { reason } = &latest.status {
        let answer = Answer::Begun(Begun::Unknown {
            key,
            reason: reason.clone(),
        });
        return decided(None, answer);
    }
    let op = Op::EffectSettled {
        key: key.clone(),
        status: EffectStatus::Unknown {
            reason: reason.clone(),
        },
        at_ms: now_ms,
        token,
        note: String::new(),
    };
    decided(Some(op), Answer::Begun(Begun::Unknown { key, reason }))
}

/// Decides `FinishEffect`: ceremony point 5. Finishing again with the very
/// same outcome is answered without a new op (a retried commit is safe).
pub(crate) fn decide_finish(
    state: &dyn BooksRead,
    cmd: &FinishEffect,
    now_ms: u64,
) -> Result<Decided> {
    cmd.outcome.check_sizes(&cmd.key)?;
    let run = existing(state, cmd.key.run())?;
    check_fact(&run, &cmd.guard)?;
    let found = entry(state, &cmd.key)?;
    let status = cmd.outcome.status().into_stored();
    if found.status == status {
        return decided(
            None,
            Answer::Settled {
                key: cmd.key.clone(),
                status: status.name(),
            },
        );
    }
    if found.status != EffectStatus::Intended {
        return Err(Error::EffectNotOpen {
            key: cmd.key.clone(),
            status: found.status.name(),
        });
    }
    settle(
        state,
        (&run, &found),
        (status, cmd.outcome.receipt()),
        cmd.guard.token,
        now_ms,
        String::new(),
    )
}

/// Decides `Reconcile`: resolves an intended (queryable) or unknown entry
/// to confirmed or failed, from what the tool or an operator found.
pub(crate) fn decide_reconcile(
    state: &dyn BooksRead,
    cmd: &Reconcile,
    now_ms: u64,
) -> Result<Decided> {
    cmd.outcome.check_sizes(&cmd.key)?;
    check_text("reconcile note", &cmd.note)?;
    if matches!(cmd.outcome, Outcome::Unknown { .. }) {
        return Err(Error::InvalidCommand {
            reason: format!(
                "reconciling effect {} must settle it: confirmed or failed, not unknown",
                cmd.key
            ),
        });
    }
    let run = existing(state, cmd.key.run())?;
    check_fact(&run, &cmd.guard)?;
    let found = entry(state, &cmd.key)?;
    check_open(&found)?;
    let status = cmd.outcome.status().into_stored();
    settle(
        state,
        (&run, &found),
        (status, cmd.outcome.receipt()),
        cmd.guard.token,
        now_ms,
        cmd.note.clone(),
    )
}

/// Decides `DeliverReply`: an asynchronous tool's reply, delivered from
/// outside with no lease, settles an intended (or unknown) entry to
/// confirmed or failed under the run's current token, and ends the run's
/// wait for it in the same decision. The same reply delivered again is
/// answered without a new op (a webhook retries); another outcome for a
/// settled entry is `EffectNotOpen`. The run may have ended meanwhile: a
/// reply is a fact about the world, and the ledger records it.
pub(crate) fn decide_deliver_reply(
    state: &dyn BooksRead,
    cmd: &DeliverReply,
    now_ms: u64,
) -> Result<Decided> {
    crate::books::rules::checks::check_name("reply sender", &cmd.sender)?;
    cmd.outcome.check_sizes(&cmd.key)?;
    if let Outcome::Unknown { .. } = cmd.outcome {
        return Err(Error::InvalidCommand {
            reason: format!(
                "a reply to effect {} from {} must say what happened: confirmed or failed, not \
                 unknown",
                cmd.key, cmd.sender
            ),
        });
    }
    let run = existing(state, cmd.key.run())?;
    let found = entry(state, &cmd.key)?;
    let status = cmd.outcome.status().into_stored();
    let name = status.name();
    if found.status == status {
        let answer = Answer::Replied {
            key: cmd.key.clone(),
            status: name,
            wait_ended: None,
        };
        return decided(None, answer);
    }
    check_open(&found)?;
    let note = format!("reply from {}", cmd.sender);
    let token = current_token(&run);
    let Decided { ops, .. } = settle(
        state,
        (&run, &found),
        (status, cmd.outcome.receipt()),
        token,
        now_ms,
        note,
    )?;
    let wait_ended = ops.iter().find_map(|op| match op {
        Op::WaitEnded { step, .. } => Some(step.clone()),
        _ => None,
    });
    let answer = Answer::Replied {
        key: cmd.key.clone(),
        status: name,
        wait_ended,
    };
    Ok(Decided { ops, answer })
}

/// The ops settling `found` (an entry of `run`) into `status`, the
/// outcome's status as the ledger holds it (`into_stored`; `receipt` is the
/// receipt's bytes if it was confirmed). A receipt stored by digest has its
/// blob written first, in the same decision, unless the blob store holds
/// it. A confirmed compensation also marks the act it undoes
/// `Compensated`, and a wait of the run for this reply ends, in the same
/// decision.
fn settle(
    state: &dyn BooksRead,
    (run, found): (&Run, &EffectEntry),
    (status, receipt): (EffectStatus, Option<&[u8]>),
    token: FencingToken,
    now_ms: u64,
    note: String,
) -> Result<Decided> {
    assert!(!matches!(
        status,
        EffectStatus::Intended
            | EffectStatus::Compensated { .. }
            | EffectStatus::CompensatedStored { .. }
    ));
    let key = found.key.clone();
    let answer = Answer::Settled {
        key: key.clone(),
        status: status.name(),
    };
    let blob = match (&status, receipt) {
        (EffectStatus::ConfirmedStored { receipt: stored }, Some(bytes))
            if !state.blob_exists(&stored.digest) =>
        {
            Some(Op::BlobPut {
                digest: stored.digest,
                bytes: bytes.to_vec(),
            })
        }
        _ => None,
    };
    let undone = match (status.act_receipt(), key.kind()) {
        (Some(receipt), EffectKind::Undo) => Some(undone_act(state, &key, receipt, token, now_ms)?),
        _ => None,
    };
    let woken = wake_on_reply(state, run, &key, &status, now_ms);
    let returned = match status {
        EffectStatus::Failed { .. } => hold_of_failed_act(state, &key, token, now_ms),
        _ => None,
    };
    let op = Op::EffectSettled {
        key,
        status,
        at_ms: now_ms,
        token,
        note,
    };
    let ops = blob
        .into_iter()
        .chain(std::iter::once(op))
        .chain(undone)
        .chain(woken)
        .chain(returned)
        .collect();
    Ok(Decided { ops, answer })
}

/// The settlement of the budget hold an act that failed had reserved: the
/// tool was called (one tool call is spent), but what the hold reserved in
/// tokens and money goes back, whoever records the failure (the worker, a
/// webhook's reply, an operator's reconcile). `None` if no hold is open
/// for this attempt.
fn hold_of_failed_act(
    state: &dyn BooksRead,
    key: &EffectKey,
    token: FencingToken,
    now_ms: u64,
) -> Option<Op> {
    if key.kind() != EffectKind::Act {
        return None;
    }
    let charge = Charge::Effect {
        step: key.step().clone(),
    };
    let book = state.budget(key.run())?;
    let hold = book
        .reservation(&charge)
        .filter(|r| r.attempt == key.attempt())?;
    Some(Op::BudgetSettled {
        run: key.run().clone(),
        charge,
        actual: Cost {
            tool_calls: hold.amount.tool_calls,
            ..Cost::default()
        },
        at_ms: now_ms,
        token,
    })
}

/// The op marking the act that the confirmed compensation `undo` undid.
fn undone_act(
    state: &dyn BooksRead,
    undo: &EffectKey,
    compensation_receipt: Receipt,
    token: FencingToken,
    now_ms: u64,
) -> Result<Op> {
    let act = state
        .latest_effect(undo.run(), undo.step(), EffectKind::Act)
        .ok_or_else(|| Error::Inconsistent {
            what: format!("compensation {undo} has no act to undo"),
        })?;
    let Some(receipt) = act
        .status
        .act_receipt()
        .filter(|_| act.status.is_confirmed())
    else {
        return Err(Error::Inconsistent {
            what: format!(
                "compensation {undo} confirmed, but the act {} it undoes is {}",
                act.key,
                act.status.name()
            ),
        });
    };
    Ok(Op::EffectSettled {
        key: act.key,
        status: compensated(receipt, compensation_receipt),
        at_ms: now_ms,
        token,
        note: format!("undone by {undo}"),
    })
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::test_support::*;
    use crate::books::*;

    const WINDOW_MS: u64 = 1_000;
    /// The window less its default margin (a tenth): the last age, plus
    /// one, at which an intent is resent.
    const HORIZON_MS: u64 = 900;

    fn idem() -> ToolClass {
        ToolClass::Idempotent {
            dedup_window_ms: WINDOW_MS,
        }
    }

    /// Books with a leased run `r` and attempt 1 of step `s` intended.
    fn intended(class: ToolClass) -> (Books, Guard, EffectKey) {
        let (mut b, g) = books_with_running_run("r");
        let d = b.ok(begin("r", "s", &g, class, b"args"));
        let Answer::Begun(Begun::Proceed { key, token }) = d.answer else {
            panic!("{:?}", d.answer)
        };
        assert_eq!(token, g.token);
        assert_eq!(key.attempt(), 1);
        (b, g, key)
    }

    #[test]
    fn a_large_receipt_is_stored_by_digest_in_the_same_record_and_replayed_whole() {
        let (mut b, g, key) = intended(idem());
        let receipt: Vec<u8> = (0..RECEIPT_INLINE_BYTES_MAX + 1)
            .map(|i| (i % 251) as u8)
            .collect();
        let digest = digest_of(&receipt);
        let d = b.ok(finish(&key, &g, confirmed(&receipt)));
        let stored = StoredReceipt {
            digest,
            len_bytes: receipt.len() as u64,
        };
        assert!(
            matches!(&d.ops[..], [Op::BlobPut { digest: put, bytes }, Op::EffectSettled {
                status: EffectStatus::ConfirmedStored { receipt: r }, .. }]
                if *put == digest && *bytes == receipt && *r == stored),
            "{:?}",
            d.ops.iter().map(Op::name).collect::<Vec<_>>()
        );
        let entry = b.mem.effect(&key).unwrap();
        assert_eq!(
            entry.status,
            EffectStatus::ConfirmedStored { receipt: stored }
        );
        assert_eq!(b.mem.blob_holders(&digest), Some(1));
        // Read back whole, from the ledger's answer and through `with_bytes`.
        let d = b.ok(begin("r", "s", &g, idem(), b"args"));
        assert_eq!(
            d.answer,
            Answer::Begun(Begun::Replay {
                key: key.clone(),
                receipt: receipt.clone()
            })
        );
        let whole = entry.with_bytes(&|d| b.mem.blob(d)).unwrap();
        assert_eq!(
            whole.status,
            EffectStatus::Confirmed {
                receipt: receipt.clone()
            }
        );
        // The same outcome again writes nothing.
        let d = b.ok(finish(&key, &g, confirmed(&receipt)));
        assert!(d.ops.is_empty());
        // A small receipt stays inline, with no blob.
        let (mut b, g, key) = intended(idem());
        let small = vec![1u8; RECEIPT_INLINE_BYTES_MAX];
        let d = b.ok(finish(&key, &g, confirmed(&small)));
        assert!(matches!(
            &d.ops[..],
            [Op::EffectSettled {
                status: EffectStatus::Confirmed { .. },
                ..
            }]
        ));
    }

    #[test]
    fn a_receipt_over_the_limit_is_refused_naming_it_and_the_effect_stays_open() {
        let (mut b, g, key) = intended(idem());
        let before = b.mem.clone();
        let err = b
            .run(finish(
                &key,
                &g,
                confirmed(&vec![0; RECEIPT_LEN_BYTES_MAX + 1]),
            ))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(&err, Error::TooLarge { size_bytes, max_bytes, .. }
                if *size_bytes == RECEIPT_LEN_BYTES_MAX as u64 + 1
                    && *max_bytes == RECEIPT_LEN_BYTES_MAX as u64),
            "{err}"
        );
        assert!(
            text.contains("r/s/1") && text.contains("run r") && text.contains("step s"),
            "{text}"
        );
        assert_eq!(b.mem, before, "nothing written");
        assert_eq!(b.mem.effect(&key).unwrap().status, EffectStatus::Intended);
        // The act happened: the caller still has the receipt, and finishes
        // the open effect with one within the limit.
        b.ok(finish(&key, &g, confirmed(&vec![0; RECEIPT_LEN_BYTES_MAX])));
        assert!(b.mem.effect(&key).unwrap().status.is_confirmed());
    }

    #[test]
    fn a_missing_receipt_blob_does_not_apply() {
        let (mut b, g, key) = intended(idem());
        let op = Op::EffectSettled {
            key,
            status: EffectStatus::ConfirmedStored {
                receipt: StoredReceipt {
                    digest: digest_of(b"nowhere"),
                    len_bytes: 7,
                },
            },
            at_ms: 0,
            token: g.token,
            note: String::new(),
        };
        let err = apply(&mut b.mem as &mut dyn BooksWrite, &op).unwrap_err();
        assert!(err.reason.contains("not stored"), "{err}");
    }

    #[test]
    fn fresh_key_proceeds_and_writes_the_intent() {
        let (b, _g, key) = intended(idem());
        let e = b.mem.effect(&key).unwrap();
        assert_eq!(e.status, EffectStatus::Intended);
        assert_eq!(key.encode(), "r/s/1");
    }

    #[test]
    fn confirmed_step_replays_its_receipt_and_logs_nothing() {
        let (mut b, g, key) = intended(idem());
        b.ok(finish(&key, &g, confirmed(b"rcpt")));
        let before = b.mem.clone();
        let d = b.ok(begin("r", "s", &g, idem(), b"args"));
        assert_eq!(
            d.answer,
            Answer::Begun(Begun::Replay {
                key,
                receipt: b"rcpt".to_vec()
            })
        );
        assert!(d.ops.is_empty());
        assert_eq!(b.mem, before);
    }

    #[test]
    fn args_mismatch_is_refused() {
        let (mut b, g, _key) = intended(idem());
        let err = b
            .run(begin("r", "s", &g, idem(), b"other args"))
            .unwrap_err();
        assert!(matches!(err, Error::ArgsMismatch { .. }), "{err}");
        let mut cmd = begin("r", "s", &g, idem(), b"args");
        if let Command::BeginEffect(c) = &mut cmd {
            c.tool = "other.tool".to_string();
        }
        assert!(matches!(b.run(cmd), Err(Error::ArgsMismatch { .. })));
    }

    #[test]
    fn idempotent_intent_inside_window_is_resent_with_the_same_key() {
        let (mut b, g, key) = intended(idem());
        b.now_ms += HORIZON_MS - 1;
        let d = b.ok(begin("r", "s", &g, idem(), b"args"));
        assert_eq!(
            d.answer,
            Answer::Begun(Begun::Resend {
                key: key.clone(),
                token: g.token
            })
        );
        let e = b.mem.effect(&key).unwrap();
        assert_eq!(e.resends, 1);
        assert_eq!(e.status, EffectStatus::Intended);
    }

    #[test]
    fn idempotent_intent_outside_window_becomes_unknown() {
        let (mut b, g, key) = intended(idem());
        b.now_ms += WINDOW_MS;
        let d = b.ok(begin("r", "s", &g, idem(), b"args"));
        assert!(matches!(&d.answer, Answer::Begun(Begun::Unknown { key: k, .. }) if k == &key));
        assert!(matches!(
            b.mem.effect(&key).unwrap().status,
            EffectStatus::Unknown { .. }
        ));
        // Asking again does not resend either.
        let again = b.ok(begin("r", "s", &g, idem(), b"args"));
        assert!(matches!(again.answer, Answer::Begun(Begun::Unknown { .. })));
        assert!(again.ops.is_empty());
    }

    const DAY_MS: u64 = 86_400_000;

    /// What a begin of `class`'s intent of age `age_ms` answers, on fresh
    /// books (an intent with no outcome), and whether the entry was resent.
    fn resumed_at(class: ToolClass, age_ms: u64) -> Answer {
        let (mut b, g, key) = intended(class);
        b.now_ms += age_ms;
        let g = relet(&mut b, g);
        let d = b.ok(begin("r", "s", &g, class, b"args"));
        let entry = b.mem.effect(&key).unwrap();
        match &d.answer {
            Answer::Begun(Begun::Resend { key: k, .. }) => {
                assert_eq!((k, entry.resends), (&key, 1));
                assert_eq!(entry.status, EffectStatus::Intended);
            }
            Answer::Begun(Begun::Unknown { key: k, .. }) => {
                assert_eq!((k, entry.resends), (&key, 0));
                assert!(matches!(entry.status, EffectStatus::Unknown { .. }));
            }
            other => panic!("{other:?}"),
        }
        d.answer
    }

    /// The guard of a new lease of run `r` by `g`'s worker once the old
    /// one has expired (hours later), else `g`.
    fn relet(b: &mut Books, g: Guard) -> Guard {
        if b.mem
            .run(&rid("r"))
            .unwrap()
            .lease
            .is_some_and(|l| l.is_live(b.now_ms))
        {
            return g;
        }
        let d = b.ok(acquire("r", "w1", LEASE_MS));
        let Answer::Leased { token, .. } = d.answer else {
            panic!("{:?}", d.answer)
        };
        Guard { token, ..g }
    }

    fn resent(answer: &Answer) -> bool {
        matches!(answer, Answer::Begun(Begun::Resend { .. }))
    }

    #[test]
    fn the_default_margin_is_a_tenth_of_the_window_at_most_five_minutes() {
        assert_eq!(ToolClass::default_resend_margin_ms(DAY_MS), 300_000);
        assert_eq!(ToolClass::default_resend_margin_ms(60_000), 6_000);
        assert_eq!(ToolClass::default_resend_margin_ms(0), 0);
        let day = ToolClass::Idempotent {
            dedup_window_ms: DAY_MS,
        };
        assert_eq!(day.resend_horizon_ms(), Some(DAY_MS - 300_000));
        assert_eq!(ToolClass::Queryable.resend_horizon_ms(), None);
        assert!(!ToolClass::NotIdempotent.is_idempotent());
    }

    #[test]
    fn a_resend_stops_a_margin_before_the_end_of_a_day_long_window() {
        let day = ToolClass::Idempotent {
            dedup_window_ms: DAY_MS,
        };
        let horizon = DAY_MS - RESEND_MARGIN_DEFAULT_MAX_MS;
        assert!(resent(&resumed_at(day, horizon - 1)));
        let Answer::Begun(Begun::Unknown { reason, .. }) = resumed_at(day, horizon) else {
            panic!("not resent at the horizon")
        };
        assert!(
            reason.contains("86400000 ms dedup window less its 300000 ms resend margin"),
            "{reason}"
        );
        // Inside the window, but a resend could land after the tool forgot.
        assert!(!resent(&resumed_at(day, DAY_MS - 1)));
    }

    #[test]
    fn a_tool_declaring_its_margin_is_resent_only_inside_the_window_less_it() {
        let class = ToolClass::IdempotentWithMargin {
            dedup_window_ms: DAY_MS,
            resend_margin_ms: 3_600_000,
        };
        let horizon = DAY_MS - 3_600_000;
        assert_eq!(class.resend_horizon_ms(), Some(horizon));
        assert!(resent(&resumed_at(class, horizon - 1)));
        assert!(!resent(&resumed_at(class, horizon)));
        assert!(!resent(&resumed_at(class, DAY_MS - 1)));
        // A lost ack is the same: resent just inside, unknown at the edge.
        for (age, resend) in [(horizon - 1, true), (horizon, false)] {
            let (mut b, g, key) = intended(class);
            b.ok(finish(&key, &g, lost_ack()));
            b.now_ms += age;
            let g = relet(&mut b, g);
            let d = b.ok(begin("r", "s", &g, class, b"args"));
            assert_eq!(resent(&d.answer), resend, "{age}: {:?}", d.answer);
        }
        // A margin of the whole window never resends; a longer one is a
        // mistake, refused before anything is recorded.
        let whole = ToolClass::IdempotentWithMargin {
            dedup_window_ms: WINDOW_MS,
            resend_margin_ms: WINDOW_MS,
        };
        assert!(!resent(&resumed_at(whole, 0)));
        let (mut b, g) = books_with_running_run("r");
        let longer = ToolClass::IdempotentWithMargin {
            dedup_window_ms: WINDOW_MS,
            resend_margin_ms: WINDOW_MS + 1,
        };
        let err = b.run(begin("r", "s", &g, longer, b"args")).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidCommand { reason }
                if reason.contains("tool bank.wire declares a resend margin of 1001 ms")),
            "{err}"
        );
    }

    #[test]
    fn queryable_intent_asks_for_reconcile_and_reconcile_resolves() {
        let (mut b, g, key) = intended(ToolClass::Queryable);
        let d = b.ok(begin("r", "s", &g, ToolClass::Queryable, b"args"));
        assert_eq!(
            d.answer,
            Answer::Begun(Begun::Reconcile {
                key: key.clone(),
                token: g.token
            })
        );
        assert!(d.ops.is_empty());
        b.ok(reconcile(&key, &g, confirmed(b"found")));
        let d = b.ok(begin("r", "s", &g, ToolClass::Queryable, b"args"));
        assert_eq!(
            d.answer,
            Answer::Begun(Begun::Replay {
                key,
                receipt: b"found".to_vec()
            })
        );
    }

    #[test]
    fn not_idempotent_intent_is_unknown_never_resent_and_reconcile_resolves() {
        let (mut b, g, key) = intended(ToolClass::NotIdempotent);
        let d = b.ok(begin("r", "s", &g, ToolClass::NotIdempotent, b"args"));
        assert!(matches!(d.answer, Answer::Begun(Begun::Unknown { .. })));
        assert!(!matches!(
            d.answer,
            Answer::Begun(Begun::Resend { .. }) | Answer::Begun(Begun::Proceed { .. })
        ));
        let failed = Outcome::Failed {
            retryable: true,
            reason: "bank says no such wire".into(),
        };
        b.ok(reconcile(&key, &g, failed));
        // Reconciled as retryably failed: the next begin opens attempt 2.
        let d = b.ok(begin("r", "s", &g, ToolClass::NotIdempotent, b"args"));
        assert!(
            matches!(&d.answer, Answer::Begun(Begun::Proceed { key: k, .. }) if k.attempt() == 2)
        );
    }

    #[test]
    fn reconcile_cannot_settle_to_unknown_nor_touch_a_confirmed_entry() {
        let (mut b, g, key) = intended(ToolClass::Queryable);
        let unknown = Outcome::Unknown {
            reason: "still unsure".into(),
        };
        assert!(matches!(
            b.run(reconcile(&key, &g, unknown)),
            Err(Error::InvalidCommand { .. })
        ));
        b.ok(finish(&key, &g, confirmed(b"x")));
        assert!(matches!(
            b.run(reconcile(&key, &g, confirmed(b"y"))),
            Err(Error::EffectNotOpen { .. })
        ));
    }

    #[test]
    fn retryable_failure_opens_a_new_attempt_terminal_failure_does_not() {
        let (mut b, g, key) = intended(idem());
        b.ok(finish(
            &key,
            &g,
            Outcome::Failed {
                retryable: true,
                reason: "503".into(),
            },
        ));
        let d = b.ok(begin("r", "s", &g, idem(), b"args"));
        let Answer::Begun(Begun::Proceed { key: key2, .. }) = d.answer else {
            panic!("{:?}", d.answer)
        };
        assert_eq!(key2.attempt(), 2);
        assert_ne!(key2, key);
        b.ok(finish(
            &key2,
            &g,
            Outcome::Failed {
                retryable: false,
                reason: "card declined".into(),
            },
        ));
        // Failed for good: every later begin answers the failure, as its
        // outcome did when it was recorded, and logs nothing.
        for _ in 0..2 {
            let d = b.ok(begin("r", "s", &g, idem(), b"args"));
            assert!(d.ops.is_empty());
            assert!(
                matches!(
                    &d.answer,
                    Answer::Begun(Begun::Failed { key: k, reason }) if k == &key2 && reason == "card declined"
                ),
                "{:?}",
                d.answer
            );
        }
    }

    #[test]
    fn finish_twice_same_outcome_is_a_no_op_different_is_refused() {
        let (mut b, g, key) = intended(idem());
        b.ok(finish(&key, &g, confirmed(b"r")));
        let d = b.ok(finish(&key, &g, confirmed(b"r")));
        assert!(d.ops.is_empty());
        assert!(matches!(
            b.run(finish(&key, &g, confirmed(b"other"))),
            Err(Error::EffectNotOpen { .. })
        ));
    }

    #[test]
    fn finish_under_a_stale_token_is_fenced() {
        let (mut b, g, key) = intended(idem());
        b.now_ms += LEASE_MS;
        b.ok(acquire("r", "w2", 1_000));
        assert!(matches!(
            b.run(finish(&key, &g, confirmed(b"r"))),
            Err(Error::Fenced { .. })
        ));
        assert_eq!(b.mem.effect(&key).unwrap().status, EffectStatus::Intended);
    }

    fn lost_ack() -> Outcome {
        Outcome::Unknown {
            reason: "the ack was lost".into(),
        }
    }

    #[test]
    fn a_lost_ack_on_an_idempotent_tool_is_resent_with_the_same_key_inside_the_window() {
        let (mut b, g, key) = intended(idem());
        b.ok(finish(&key, &g, lost_ack()));
        b.now_ms += HORIZON_MS - 1;
        let d = b.ok(begin("r", "s", &g, idem(), b"args"));
        assert_eq!(
            d.answer,
            Answer::Begun(Begun::Resend {
                key: key.clone(),
                token: g.token
            })
        );
        let e = b.mem.effect(&key).unwrap();
        assert_eq!(e.status, EffectStatus::Intended, "in flight again");
        assert_eq!(e.resends, 1);
        b.ok(finish(&key, &g, confirmed(b"rcpt")));
        assert!(matches!(
            b.mem.effect(&key).unwrap().status,
            EffectStatus::Confirmed { .. }
        ));
    }

    #[test]
    fn a_lost_ack_outside_the_window_stays_unknown() {
        let (mut b, g, key) = intended(idem());
        b.ok(finish(&key, &g, lost_ack()));
        b.now_ms += WINDOW_MS;
        let d = b.ok(begin("r", "s", &g, idem(), b"args"));
        assert!(matches!(&d.answer, Answer::Begun(Begun::Unknown { key: k, .. }) if k == &key));
        assert!(d.ops.is_empty(), "already unknown: nothing new to log");
    }

    #[test]
    fn a_lost_ack_on_a_queryable_tool_is_queried_and_on_others_stays_unknown() {
        let (mut b, g, key) = intended(ToolClass::Queryable);
        b.ok(finish(&key, &g, lost_ack()));
        let d = b.ok(begin("r", "s", &g, ToolClass::Queryable, b"args"));
        assert_eq!(
            d.answer,
            Answer::Begun(Begun::Reconcile {
                key: key.clone(),
                token: g.token
            })
        );
        b.ok(reconcile(&key, &g, confirmed(b"found")));
        let (mut b, g, key) = intended(ToolClass::NotIdempotent);
        b.ok(finish(&key, &g, lost_ack()));
        let d = b.ok(begin("r", "s", &g, ToolClass::NotIdempotent, b"args"));
        assert!(matches!(&d.answer, Answer::Begun(Begun::Unknown { key: k, .. }) if k == &key));
        assert!(d.ops.is_empty());
    }

    #[test]
    fn an_outcome_under_an_expired_lease_with_the_current_token_is_recorded() {
        let (mut b, g, key) = intended(ToolClass::NotIdempotent);
        b.now_ms += LEASE_MS; // the act outlived the lease
        assert!(matches!(
            b.run(begin("r", "t", &g, idem(), b"next")),
            Err(Error::LeaseLost { .. })
        ));
        b.ok(finish(&key, &g, confirmed(b"paid")));
        assert_eq!(
            b.mem.effect(&key).unwrap().status,
            EffectStatus::Confirmed {
                receipt: b"paid".to_vec()
            }
        );
    }

    #[test]
    fn an_outcome_from_another_worker_presenting_the_current_token_is_fenced() {
        let (mut b, g, key) = intended(idem());
        let forged = Guard {
            run: g.run.clone(),
            worker: wid("intruder"),
            token: g.token,
        };
        assert!(matches!(
            b.run(finish(&key, &forged, confirmed(b"r"))),
            Err(Error::Fenced { .. })
        ));
    }
}

//! The side-effect ledger: one entry per attempt of a logical step, written
//! as an intent before the act and settled with its outcome after it.
//!
//! Invariants: an entry is created `Intended` and settles at most once
//! (`Intended` to `Confirmed`, `Failed` or `Unknown`; `Unknown` to
//! `Confirmed` or `Failed` by reconcile; `Confirmed` to `Compensated`); a
//! step opens attempt n+1 only after attempt n failed retryably; a
//! confirmed step is never acted on again; an ambiguous intent is resent
//! with the *same* key only inside the tool's dedup window.

use serde::{Deserialize, Serialize};

use super::command::{BeginEffect, FinishEffect, MarkCompensated, Reconcile};
use super::decide::{Answer, Begun, Decided};
use super::digest::Digest;
use super::ids::{EffectKey, FencingToken, validate_name};
use super::lease::check_live;
use super::limits::{RECEIPT_LEN_BYTES_MAX, check_size};
use super::op::Op;
use super::run::{check_text, existing};
use super::state::BooksRead;
use crate::error::{Error, Result};

/// How a tool behaves when the same request arrives twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolClass {
    /// The tool deduplicates by idempotency key for `dedup_window_ms` after
    /// the first request (Stripe: 24 h); a resend inside it is safe.
    Idempotent {
        /// How long the tool remembers a key, in milliseconds.
        dedup_window_ms: u64,
    },
    /// The tool can be asked whether a key's act happened.
    Queryable,
    /// The tool neither deduplicates nor answers queries: never resent.
    NotIdempotent,
}

/// What undoes an act, registered with it (saga step).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compensation {
    /// The tool that undoes the act.
    pub tool: String,
    /// Its arguments, encoded by the caller.
    pub args: Vec<u8>,
}

/// Where one attempt stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EffectStatus {
    /// The intent is durable; the outcome is not (yet) known.
    Intended,
    /// The act happened; `receipt` is what the tool returned.
    Confirmed {
        /// The tool's answer, as the caller encoded it.
        receipt: Vec<u8>,
    },
    /// The act did not happen.
    Failed {
        /// True if a new attempt may be made.
        retryable: bool,
        /// Why it failed.
        reason: String,
    },
    /// Nobody knows whether the act happened; a reconcile must decide.
    Unknown {
        /// Why it is unknown.
        reason: String,
    },
    /// The act happened and was later undone by its compensation.
    Compensated {
        /// The act's original receipt.
        receipt: Vec<u8>,
        /// The compensation's receipt.
        compensation_receipt: Vec<u8>,
    },
}

impl EffectStatus {
    /// A short name for messages (`confirmed`, `unknown`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            EffectStatus::Intended => "intended",
            EffectStatus::Confirmed { .. } => "confirmed",
            EffectStatus::Failed {
                retryable: true, ..
            } => "failed (retryable)",
            EffectStatus::Failed {
                retryable: false, ..
            } => "failed (terminal)",
            EffectStatus::Unknown { .. } => "unknown",
            EffectStatus::Compensated { .. } => "compensated",
        }
    }
}

/// The outcome a caller reports for an act.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// It happened.
    Confirmed {
        /// The tool's answer.
        receipt: Vec<u8>,
    },
    /// It did not happen.
    Failed {
        /// True if a new attempt may be made.
        retryable: bool,
        /// Why.
        reason: String,
    },
    /// The caller cannot tell (ack lost, timeout).
    Unknown {
        /// Why.
        reason: String,
    },
}

impl Outcome {
    /// The status this outcome settles an entry into.
    pub fn status(&self) -> EffectStatus {
        match self.clone() {
            Outcome::Confirmed { receipt } => EffectStatus::Confirmed { receipt },
            Outcome::Failed { retryable, reason } => EffectStatus::Failed { retryable, reason },
            Outcome::Unknown { reason } => EffectStatus::Unknown { reason },
        }
    }

    fn check_sizes(&self, key: &EffectKey) -> Result<()> {
        match self {
            Outcome::Confirmed { receipt } => check_size(
                || format!("receipt of effect {key}"),
                receipt.len(),
                RECEIPT_LEN_BYTES_MAX,
            ),
            Outcome::Failed { reason, .. } | Outcome::Unknown { reason } => {
                check_text("outcome reason", reason)
            }
        }
    }
}

/// One attempt of one logical step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectEntry {
    /// The idempotency key: (run, step, attempt).
    pub key: EffectKey,
    /// The tool called.
    pub tool: String,
    /// How the tool treats duplicates.
    pub tool_class: ToolClass,
    /// Digest of the call's arguments; a resend must match it.
    pub args_digest: Digest,
    /// Why the agent chose this act (ceremony point 7).
    pub rationale: String,
    /// What undoes it (ceremony point 6).
    pub compensation: Option<Compensation>,
    /// Where it stands.
    pub status: EffectStatus,
    /// When the intent was recorded, ms since the epoch; the dedup window
    /// counts from here.
    pub intended_ms: u64,
    /// The fencing token under which the intent was recorded.
    pub token: FencingToken,
    /// How many times the intent was resent with the same key.
    pub resends: u32,
    /// When the entry last settled, if it has.
    pub settled_ms: Option<u64>,
}

/// The entry named `key`, or `NotFound`.
fn entry(state: &dyn BooksRead, key: &EffectKey) -> Result<EffectEntry> {
    state.effect(key).ok_or_else(|| Error::NotFound {
        what: format!("effect {key}"),
    })
}

fn decided(op: Option<Op>, answer: Answer) -> Result<Decided> {
    Ok(Decided {
        ops: op.into_iter().collect(),
        answer,
    })
}

/// Decides `BeginEffect`: ceremony points 1 to 3 (key, check, intent).
pub(crate) fn decide_begin(
    state: &dyn BooksRead,
    cmd: &BeginEffect,
    now_ms: u64,
) -> Result<Decided> {
    validate_name("tool", &cmd.tool)?;
    check_text("effect rationale", &cmd.rationale)?;
    if let Some(c) = &cmd.compensation {
        validate_name("compensation tool", &c.tool)?;
        check_size(
            || format!("compensation args of step {}", cmd.step),
            c.args.len(),
            RECEIPT_LEN_BYTES_MAX,
        )?;
    }
    let run = existing(state, &cmd.run)?;
    check_live(&run, &cmd.guard, now_ms)?;
    let Some(latest) = state.latest_effect(&cmd.run, &cmd.step) else {
        let key = EffectKey::new(cmd.run.clone(), cmd.step.clone(), 1)?;
        return intend(cmd, key, now_ms);
    };
    if latest.tool != cmd.tool || latest.args_digest != cmd.args_digest {
        return Err(Error::ArgsMismatch {
            key: latest.key,
            recorded: format!("{} args {}", latest.tool, latest.args_digest.short()),
            presented: format!("{} args {}", cmd.tool, cmd.args_digest.short()),
        });
    }
    let key = latest.key.clone();
    match &latest.status {
        EffectStatus::Confirmed { receipt } => decided(
            None,
            Answer::Begun(Begun::Replay {
                key,
                receipt: receipt.clone(),
            }),
        ),
        EffectStatus::Failed {
            retryable: true, ..
        } => intend(cmd, key.next_attempt()?, now_ms),
        EffectStatus::Failed {
            retryable: false,
            reason,
        } => Err(Error::EffectFailed {
            key,
            reason: reason.clone(),
        }),
        EffectStatus::Unknown { reason } => decided(
            None,
            Answer::Begun(Begun::Unknown {
                key,
                reason: reason.clone(),
            }),
        ),
        EffectStatus::Compensated { .. } => {
            decided(None, Answer::Begun(Begun::Compensated { key }))
        }
        EffectStatus::Intended => resume(&latest, cmd.guard.token, now_ms),
    }
}

/// The intent of a fresh attempt.
fn intend(cmd: &BeginEffect, key: EffectKey, now_ms: u64) -> Result<Decided> {
    let entry = EffectEntry {
        key: key.clone(),
        tool: cmd.tool.clone(),
        tool_class: cmd.tool_class,
        args_digest: cmd.args_digest,
        rationale: cmd.rationale.clone(),
        compensation: cmd.compensation.clone(),
        status: EffectStatus::Intended,
        intended_ms: now_ms,
        token: cmd.guard.token,
        resends: 0,
        settled_ms: None,
    };
    let answer = Answer::Begun(Begun::Proceed {
        key,
        token: cmd.guard.token,
    });
    decided(Some(Op::EffectIntended { entry }), answer)
}

/// An intent found without an outcome: decided by the tool's class.
fn resume(latest: &EffectEntry, token: FencingToken, now_ms: u64) -> Result<Decided> {
    assert_eq!(latest.status, EffectStatus::Intended);
    let key = latest.key.clone();
    let unknown = |reason: String| {
        let op = Op::EffectSettled {
            key: key.clone(),
            status: EffectStatus::Unknown {
                reason: reason.clone(),
            },
            at_ms: now_ms,
            token,
            note: String::new(),
        };
        decided(
            Some(op),
            Answer::Begun(Begun::Unknown {
                key: key.clone(),
                reason,
            }),
        )
    };
    match latest.tool_class {
        ToolClass::Idempotent { dedup_window_ms } => {
            let age_ms = now_ms.saturating_sub(latest.intended_ms);
            if age_ms < dedup_window_ms {
                let op = Op::EffectResent {
                    key: key.clone(),
                    token,
                    at_ms: now_ms,
                };
                decided(Some(op), Answer::Begun(Begun::Resend { key, token }))
            } else {
                unknown(format!(
                    "intent is {age_ms} ms old, outside the tool's {dedup_window_ms} ms dedup \
                     window, so a resend could act twice"
                ))
            }
        }
        ToolClass::Queryable => decided(None, Answer::Begun(Begun::Reconcile { key, token })),
        ToolClass::NotIdempotent => unknown(
            "intent without outcome on a tool that is not idempotent; it may or may not have acted"
                .to_string(),
        ),
    }
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
    check_live(&run, &cmd.guard, now_ms)?;
    let found = entry(state, &cmd.key)?;
    let status = cmd.outcome.status();
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
        cmd.key.clone(),
        status,
        cmd.guard.token,
        now_ms,
        String::new(),
    )
}

fn settle(
    key: EffectKey,
    status: EffectStatus,
    token: FencingToken,
    now_ms: u64,
    note: String,
) -> Result<Decided> {
    let answer = Answer::Settled {
        key: key.clone(),
        status: status.name(),
    };
    let op = Op::EffectSettled {
        key,
        status,
        at_ms: now_ms,
        token,
        note,
    };
    decided(Some(op), answer)
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
    check_live(&run, &cmd.guard, now_ms)?;
    let found = entry(state, &cmd.key)?;
    if !matches!(
        found.status,
        EffectStatus::Intended | EffectStatus::Unknown { .. }
    ) {
        return Err(Error::EffectNotOpen {
            key: cmd.key.clone(),
            status: found.status.name(),
        });
    }
    settle(
        cmd.key.clone(),
        cmd.outcome.status(),
        cmd.guard.token,
        now_ms,
        cmd.note.clone(),
    )
}

/// Decides `MarkCompensated`: a confirmed act was undone.
pub(crate) fn decide_compensated(
    state: &dyn BooksRead,
    cmd: &MarkCompensated,
    now_ms: u64,
) -> Result<Decided> {
    check_size(
        || format!("compensation receipt of effect {}", cmd.key),
        cmd.receipt.len(),
        RECEIPT_LEN_BYTES_MAX,
    )?;
    let run = existing(state, cmd.key.run())?;
    check_live(&run, &cmd.guard, now_ms)?;
    let found = entry(state, &cmd.key)?;
    let EffectStatus::Confirmed { receipt } = found.status else {
        return Err(Error::EffectNotOpen {
            key: cmd.key.clone(),
            status: found.status.name(),
        });
    };
    let status = EffectStatus::Compensated {
        receipt,
        compensation_receipt: cmd.receipt.clone(),
    };
    settle(
        cmd.key.clone(),
        status,
        cmd.guard.token,
        now_ms,
        String::new(),
    )
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::test_support::*;

    const WINDOW_MS: u64 = 1_000;

    fn idem() -> ToolClass {
        ToolClass::Idempotent {
            dedup_window_ms: WINDOW_MS,
        }
    }

    /// Books with a leased run `r` and attempt 1 of step `s` intended.
    fn intended(class: ToolClass) -> (Books, Guard, EffectKey) {
        let (mut b, g) = books_with_leased_run("r");
        let d = b.ok(begin("r", "s", &g, class, b"args"));
        let Answer::Begun(Begun::Proceed { key, token }) = d.answer else {
            panic!("{:?}", d.answer)
        };
        assert_eq!(token, g.token);
        assert_eq!(key.attempt(), 1);
        (b, g, key)
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
        b.now_ms += WINDOW_MS - 1;
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
        let err = b.run(begin("r", "s", &g, idem(), b"args")).unwrap_err();
        assert!(
            matches!(&err, Error::EffectFailed { key: k, .. } if k == &key2),
            "{err}"
        );
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

    #[test]
    fn compensation_only_after_confirmation() {
        let (mut b, g, key) = intended(idem());
        assert!(matches!(
            b.run(compensated(&key, &g)),
            Err(Error::EffectNotOpen { .. })
        ));
        b.ok(finish(&key, &g, confirmed(b"r")));
        b.ok(compensated(&key, &g));
        let d = b.ok(begin("r", "s", &g, idem(), b"args"));
        assert_eq!(d.answer, Answer::Begun(Begun::Compensated { key }));
    }
}

//! The side-effect ledger's types: one entry per attempt of one side (act
//! or compensation) of a logical step, written as an intent before the act
//! and settled with its outcome after it. The decisions over them live in
//! `rules/effect.rs` and `rules/compensation.rs`.
//!
//! Invariants: an entry is created `Intended`; it settles to `Confirmed`,
//! `Failed` or `Unknown`; an `Unknown` entry goes back in flight only by a
//! same-key resend (inside an idempotent tool's window) or settles by
//! reconcile; `Confirmed` and `Failed` are final except that a confirmed act
//! becomes `Compensated` when its compensation confirms.

use serde::{Deserialize, Serialize};

use crate::books::base::digest::Digest;
use crate::books::base::ids::{EffectKey, FencingToken};
use crate::books::base::limits::{RECEIPT_LEN_BYTES_MAX, check_size, check_text};
use crate::error::Result;

/// How a tool behaves when the same request arrives twice.
///
/// An idempotent tool remembers a key for its dedup window, counted from
/// when the first request reached it; a resend must reach it before the
/// window ends, or the tool acts again. A resend is decided at one time and
/// arrives later (the request's time in flight, its client's retries, the
/// tool's clock running ahead of the engine's), so the engine resends only
/// while the intent is younger than the window less a margin
/// ([`ToolClass::resend_horizon_ms`]); past that the outcome is `Unknown`,
/// as past the window. `Idempotent` takes the default margin
/// ([`ToolClass::default_resend_margin_ms`]); a tool whose requests can
/// stay in flight longer declares its own with `IdempotentWithMargin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolClass {
    /// The tool deduplicates by idempotency key for `dedup_window_ms` after
    /// the first request (Stripe: 24 h); a resend is made only inside the
    /// window less the default margin.
    Idempotent {
        /// How long the tool remembers a key, in milliseconds.
        dedup_window_ms: u64,
    },
    /// The tool can be asked whether a key's act happened.
    Queryable,
    /// The tool neither deduplicates nor answers queries: never resent.
    NotIdempotent,
    /// An idempotent tool with a margin of its own: a resend is made only
    /// while the intent is younger than `dedup_window_ms -
    /// resend_margin_ms`. The margin must cover the longest a request can
    /// take to reach the tool, plus how far the tool's clock may run ahead
    /// of the engine's; at most the window (a margin of the whole window
    /// never resends). Appended in record payload version 7.
    IdempotentWithMargin {
        /// How long the tool remembers a key, in milliseconds.
        dedup_window_ms: u64,
        /// How long before the window's end resends stop, in milliseconds.
        resend_margin_ms: u64,
    },
}

/// The longest margin [`ToolClass::default_resend_margin_ms`] gives: five
/// minutes, which covers an HTTP client's timeout with its retries (tens of
/// seconds to two minutes at most in the payment and mail APIs agents
/// call) and the clock skew between two NTP-synchronised hosts (well under
/// a second), several times over.
pub const RESEND_MARGIN_DEFAULT_MAX_MS: u64 = 300_000;

impl ToolClass {
    /// The margin an idempotent tool of window `dedup_window_ms` gets when
    /// it declares none: a tenth of the window, at most
    /// [`RESEND_MARGIN_DEFAULT_MAX_MS`] (five minutes of a 24 h window; 6 s
    /// of a one-minute window). A tenth keeps nine tenths of a short window
    /// for resends; the cap keeps a long window's resends going until
    /// minutes before its end.
    pub const fn default_resend_margin_ms(dedup_window_ms: u64) -> u64 {
        let tenth = dedup_window_ms / 10;
        if tenth < RESEND_MARGIN_DEFAULT_MAX_MS {
            tenth
        } else {
            RESEND_MARGIN_DEFAULT_MAX_MS
        }
    }

    /// The tool's dedup window in ms, if it deduplicates.
    pub const fn dedup_window_ms(&self) -> Option<u64> {
        match *self {
            ToolClass::Idempotent { dedup_window_ms }
            | ToolClass::IdempotentWithMargin {
                dedup_window_ms, ..
            } => Some(dedup_window_ms),
            ToolClass::Queryable | ToolClass::NotIdempotent => None,
        }
    }

    /// The tool's resend margin in ms (declared, or the default), if it
    /// deduplicates.
    pub const fn resend_margin_ms(&self) -> Option<u64> {
        match *self {
            ToolClass::Idempotent { dedup_window_ms } => {
                Some(ToolClass::default_resend_margin_ms(dedup_window_ms))
            }
            ToolClass::IdempotentWithMargin {
                resend_margin_ms, ..
            } => Some(resend_margin_ms),
            ToolClass::Queryable | ToolClass::NotIdempotent => None,
        }
    }

    /// How old an intent may be, in ms, for the engine to still resend it
    /// with its key: the window less the margin (0 if the margin is the
    /// whole window). `None` if the tool does not deduplicate.
    pub const fn resend_horizon_ms(&self) -> Option<u64> {
        match (self.dedup_window_ms(), self.resend_margin_ms()) {
            (Some(window), Some(margin)) => Some(window.saturating_sub(margin)),
            _ => None,
        }
    }

    /// True if the tool deduplicates by key.
    pub const fn is_idempotent(&self) -> bool {
        self.dedup_window_ms().is_some()
    }
}

/// What undoes an act, registered with its intent (a saga step). Running it
/// is an effect of its own, with its own derived key (`run/step/undo/n`),
/// intent first, so a compensation happens exactly once too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compensation {
    /// The tool that undoes the act.
    pub tool: String,
    /// Its arguments, encoded by the caller.
    pub args: Vec<u8>,
    /// How the undoing tool treats duplicates.
    pub class: ToolClass,
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
    /// True while the effect awaits an outcome: intended (the act may be
    /// under way) or unknown (a reconcile must decide).
    pub fn is_open(&self) -> bool {
        matches!(self, EffectStatus::Intended | EffectStatus::Unknown { .. })
    }

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

    pub(crate) fn check_sizes(&self, key: &EffectKey) -> Result<()> {
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

/// One attempt of one side (act or compensation) of one logical step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectEntry {
    /// The idempotency key: (run, step, kind, attempt).
    pub key: EffectKey,
    /// The tool called.
    pub tool: String,
    /// How the tool treats duplicates.
    pub tool_class: ToolClass,
    /// Digest of the call's arguments; a resend must match it.
    pub args_digest: Digest,
    /// Why the agent chose this act (ceremony point 7).
    pub rationale: String,
    /// What undoes it (ceremony point 6); always `None` on a compensation's
    /// own entry.
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

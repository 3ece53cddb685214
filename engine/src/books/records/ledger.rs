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

use crate::books::base::digest::{Digest, digest_of};
use crate::books::base::ids::{EffectKey, FencingToken};
use crate::books::base::limits::{
    RECEIPT_INLINE_BYTES_MAX, RECEIPT_LEN_BYTES_MAX, check_size, check_text,
};
use crate::error::{Error, Result};

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
    /// The class's name as docs and people write it: `idempotent` (with or
    /// without a declared margin), `queryable` or `not_idempotent`.
    pub const fn name(&self) -> &'static str {
        match self {
            ToolClass::Idempotent { .. } | ToolClass::IdempotentWithMargin { .. } => "idempotent",
            ToolClass::Queryable => "queryable",
            ToolClass::NotIdempotent => "not_idempotent",
        }
    }

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

/// A receipt the ledger keeps in the blob store by its digest, because it
/// is larger than [`RECEIPT_INLINE_BYTES_MAX`]: the blob is written in the
/// same record as the status naming it, and counted as one of the run's
/// blob references (retention lets it go with the last run naming it).
/// Appended in record payload version 9.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredReceipt {
    /// `digest_of` the receipt's bytes: the blob's key.
    pub digest: Digest,
    /// The receipt's length in bytes.
    pub len_bytes: u64,
}

/// A receipt as the ledger holds it: its bytes inline, or a blob by digest.
/// Appended in record payload version 9.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Receipt {
    /// The bytes, kept in the ledger entry (at most
    /// [`RECEIPT_INLINE_BYTES_MAX`]).
    Inline(Vec<u8>),
    /// Kept in the blob store by digest.
    Stored(StoredReceipt),
}

impl Receipt {
    /// How the ledger holds `bytes`: inline up to
    /// [`RECEIPT_INLINE_BYTES_MAX`], by digest above.
    pub fn of(bytes: &[u8]) -> Receipt {
        if bytes.len() <= RECEIPT_INLINE_BYTES_MAX {
            Receipt::Inline(bytes.to_vec())
        } else {
            Receipt::Stored(StoredReceipt {
                digest: digest_of(bytes),
                len_bytes: bytes.len() as u64,
            })
        }
    }

    /// The blob it names, if it is stored by digest.
    pub fn stored(&self) -> Option<&StoredReceipt> {
        match self {
            Receipt::Inline(_) => None,
            Receipt::Stored(stored) => Some(stored),
        }
    }

    /// The receipt's bytes, reading a stored one with `blob`; a blob that is
    /// missing or does not hash to its digest is `Inconsistent`, naming
    /// `key`.
    pub fn bytes(
        &self,
        key: &EffectKey,
        blob: &dyn Fn(&Digest) -> Option<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let stored = match self {
            Receipt::Inline(bytes) => return Ok(bytes.clone()),
            Receipt::Stored(stored) => stored,
        };
        let why = match blob(&stored.digest) {
            Some(bytes) if digest_of(&bytes) == stored.digest => return Ok(bytes),
            Some(bytes) => format!("its {} bytes do not hash to the digest", bytes.len()),
            None => "it is not in the blob store".to_string(),
        };
        Err(Error::Inconsistent {
            what: format!(
                "the receipt of effect {key} (run {}, step {}) is blob {} of {} bytes, but {why}",
                key.run(),
                key.step(),
                stored.digest.short(),
                stored.len_bytes
            ),
        })
    }
}

/// Where one attempt stands.
///
/// A receipt larger than [`RECEIPT_INLINE_BYTES_MAX`] is held in the blob
/// store, by digest: the books and the log hold it as `ConfirmedStored` or
/// `CompensatedStored`. Every read of the engine that hands out an entry or
/// a status (`Engine::effect`, `Engine::effects_of_run`, a replayed
/// `Begun`) gives the full bytes, as `Confirmed` or `Compensated`
/// ([`EffectStatus::with_bytes`]); the stored forms are seen only in the
/// ops and in the books read raw (`Engine::read`, `MemBooks`).
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
    /// `Confirmed`, with a receipt larger than [`RECEIPT_INLINE_BYTES_MAX`]
    /// kept in the blob store. Appended in record payload version 9.
    ConfirmedStored {
        /// The tool's answer, by digest.
        receipt: StoredReceipt,
    },
    /// `Compensated`, with at least one of its receipts kept in the blob
    /// store. Appended in record payload version 9.
    CompensatedStored {
        /// The act's original receipt.
        receipt: Receipt,
        /// The compensation's receipt.
        compensation_receipt: Receipt,
    },
}

impl EffectStatus {
    /// True while the effect awaits an outcome: intended (the act may be
    /// under way) or unknown (a reconcile must decide).
    pub fn is_open(&self) -> bool {
        matches!(self, EffectStatus::Intended | EffectStatus::Unknown { .. })
    }

    /// True if the act happened and is not undone (`Confirmed`, inline or
    /// stored).
    pub fn is_confirmed(&self) -> bool {
        matches!(
            self,
            EffectStatus::Confirmed { .. } | EffectStatus::ConfirmedStored { .. }
        )
    }

    /// True if the act happened and was undone (`Compensated`, inline or
    /// stored).
    pub fn is_compensated(&self) -> bool {
        matches!(
            self,
            EffectStatus::Compensated { .. } | EffectStatus::CompensatedStored { .. }
        )
    }

    /// A short name for messages (`confirmed`, `unknown`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            EffectStatus::Intended => "intended",
            EffectStatus::Confirmed { .. } | EffectStatus::ConfirmedStored { .. } => "confirmed",
            EffectStatus::Failed {
                retryable: true, ..
            } => "failed (retryable)",
            EffectStatus::Failed {
                retryable: false, ..
            } => "failed (terminal)",
            EffectStatus::Unknown { .. } => "unknown",
            EffectStatus::Compensated { .. } | EffectStatus::CompensatedStored { .. } => {
                "compensated"
            }
        }
    }

    /// The act's receipt as the ledger holds it, if the act happened
    /// (confirmed or compensated).
    pub fn act_receipt(&self) -> Option<Receipt> {
        match self {
            EffectStatus::Confirmed { receipt } | EffectStatus::Compensated { receipt, .. } => {
                Some(Receipt::Inline(receipt.clone()))
            }
            EffectStatus::ConfirmedStored { receipt } => Some(Receipt::Stored(*receipt)),
            EffectStatus::CompensatedStored { receipt, .. } => Some(receipt.clone()),
            EffectStatus::Intended | EffectStatus::Failed { .. } | EffectStatus::Unknown { .. } => {
                None
            }
        }
    }

    /// The blobs the status names (its receipts stored by digest).
    pub fn stored_receipts(&self) -> Vec<StoredReceipt> {
        match self {
            EffectStatus::ConfirmedStored { receipt } => vec![*receipt],
            EffectStatus::CompensatedStored {
                receipt,
                compensation_receipt,
            } => [receipt, compensation_receipt]
                .into_iter()
                .filter_map(Receipt::stored)
                .copied()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The status as the ledger holds it: a `Confirmed` or `Compensated`
    /// whose receipt is larger than [`RECEIPT_INLINE_BYTES_MAX`] becomes its
    /// stored form; anything else is unchanged.
    pub fn into_stored(self) -> EffectStatus {
        match self {
            EffectStatus::Confirmed { receipt } => match Receipt::of(&receipt) {
                Receipt::Inline(receipt) => EffectStatus::Confirmed { receipt },
                Receipt::Stored(receipt) => EffectStatus::ConfirmedStored { receipt },
            },
            EffectStatus::Compensated {
                receipt,
                compensation_receipt,
            } => compensated(Receipt::of(&receipt), Receipt::of(&compensation_receipt)),
            other => other,
        }
    }

    /// The status with every receipt's bytes (`Confirmed`, `Compensated`),
    /// reading stored ones with `blob`; a missing or damaged blob is
    /// `Inconsistent`, naming `key`.
    pub fn with_bytes(
        self,
        key: &EffectKey,
        blob: &dyn Fn(&Digest) -> Option<Vec<u8>>,
    ) -> Result<EffectStatus> {
        Ok(match self {
            EffectStatus::ConfirmedStored { receipt } => EffectStatus::Confirmed {
                receipt: Receipt::Stored(receipt).bytes(key, blob)?,
            },
            EffectStatus::CompensatedStored {
                receipt,
                compensation_receipt,
            } => EffectStatus::Compensated {
                receipt: receipt.bytes(key, blob)?,
                compensation_receipt: compensation_receipt.bytes(key, blob)?,
            },
            other => other,
        })
    }
}

/// The status of an act undone by its compensation, given both receipts as
/// the ledger holds them: `Compensated` if both are inline.
pub fn compensated(receipt: Receipt, compensation_receipt: Receipt) -> EffectStatus {
    match (receipt, compensation_receipt) {
        (Receipt::Inline(receipt), Receipt::Inline(compensation_receipt)) => {
            EffectStatus::Compensated {
                receipt,
                compensation_receipt,
            }
        }
        (receipt, compensation_receipt) => EffectStatus::CompensatedStored {
            receipt,
            compensation_receipt,
        },
    }
}

impl EffectEntry {
    /// The entry with every receipt's bytes (see
    /// [`EffectStatus::with_bytes`]).
    pub fn with_bytes(mut self, blob: &dyn Fn(&Digest) -> Option<Vec<u8>>) -> Result<EffectEntry> {
        self.status = self.status.with_bytes(&self.key, blob)?;
        Ok(self)
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

    /// The receipt's bytes, if it happened.
    pub fn receipt(&self) -> Option<&[u8]> {
        match self {
            Outcome::Confirmed { receipt } => Some(receipt),
            Outcome::Failed { .. } | Outcome::Unknown { .. } => None,
        }
    }

    pub(crate) fn check_sizes(&self, key: &EffectKey) -> Result<()> {
        match self {
            Outcome::Confirmed { receipt } => check_size(
                || {
                    format!(
                        "receipt of effect {key} (run {}, step {})",
                        key.run(),
                        key.step()
                    )
                },
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

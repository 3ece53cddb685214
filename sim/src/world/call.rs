//! A request to a tool and what becomes of it: the fate the schedule gives
//! each call, and the reply the caller sees.
//!
//! **Invariant:** a call is delivered at most once, at most
//! [`super::REQUEST_LIFETIME_MS_MAX`] after it was sent, or never.

use actum::books::{Digest, EffectKey, FencingToken, Outcome, ResourceId};

use super::tools::Tool;

/// Identifies a call for its whole life (sent, delivered, replied).
pub type CallId = u64;

/// What the network and the service do with one call, as the schedule says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Delivered at once; the reply comes back.
    Delivered,
    /// Delivered and acted on, but the reply is lost: the caller times out.
    AckDropped,
    /// Lost before it reached the service: nothing happens; the caller
    /// times out.
    RequestLost,
    /// The service declines (a 503, or a final refusal, by tool).
    Declined,
    /// Delivered after `delay_ms` (at most the request lifetime): the call
    /// can outlive the caller's lease, or the caller.
    Slow {
        /// How long it stays in flight, in virtual ms.
        delay_ms: u32,
    },
}

impl Fate {
    /// A short name for the history.
    pub fn name(self) -> String {
        match self {
            Fate::Delivered => "delivered".to_string(),
            Fate::AckDropped => "ack dropped".to_string(),
            Fate::RequestLost => "request lost".to_string(),
            Fate::Declined => "declined".to_string(),
            Fate::Slow { delay_ms } => format!("slow {delay_ms} ms"),
        }
    }
}

/// What a call asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ask {
    /// Act under the key.
    Act {
        /// Digest of the arguments sent.
        args_digest: Digest,
    },
    /// Was the key acted on?
    Query,
}

/// A request in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// Its id.
    pub id: CallId,
    /// The tool called.
    pub tool: Tool,
    /// The idempotency key it carries.
    pub key: EffectKey,
    /// The fencing token it carries.
    pub token: FencingToken,
    /// Act or query.
    pub ask: Ask,
    /// When it was sent, virtual ms.
    pub sent_ms: u64,
    /// When the service gets it, virtual ms.
    pub deliver_ms: u64,
    /// What happens to it.
    pub fate: Fate,
    /// The resource hold it acts under, if any: the service refuses a
    /// token below the highest it has seen for the resource.
    pub hold: Option<(ResourceId, FencingToken)>,
}

/// What the caller sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// It happened (now or before, for a deduplicated key); the receipt.
    Done {
        /// The service's receipt.
        receipt: Vec<u8>,
    },
    /// The query found no act under the key (and, fenced, none can land).
    NotFound,
    /// The service declined.
    Declined {
        /// Whether it is final.
        for_good: bool,
    },
    /// The service saw a newer token for this run and refused the call.
    Fenced,
    /// An asynchronous service took the request (now or before, for a
    /// deduplicated key); its outcome comes later, by webhook.
    Accepted,
}

impl Reply {
    /// What the caller reports for this reply: a receipt is confirmed, a
    /// query's "not found" a retryable failure (nothing happened and, with
    /// bounded request lifetime, nothing will), a decline a failure
    /// (retryable unless final), a fenced call unknown (the caller is
    /// stale; only the current holder may say more), an accepted one
    /// unknown (its outcome is yet to come).
    pub fn outcome(self) -> Outcome {
        match self {
            Reply::Done { receipt } => Outcome::Confirmed { receipt },
            Reply::NotFound => Outcome::Failed {
                retryable: true,
                reason: "the service holds no act under the key".into(),
            },
            Reply::Declined { for_good } => Outcome::Failed {
                retryable: !for_good,
                reason: format!("declined{}", if for_good { " for good" } else { "" }),
            },
            Reply::Fenced => Outcome::Unknown {
                reason: "the service has seen a newer token".into(),
            },
            // The caller parks the run for the webhook instead; were it to
            // report now, all it knows is that no outcome is in yet.
            Reply::Accepted => Outcome::Unknown {
                reason: "accepted; the outcome comes by webhook".into(),
            },
        }
    }
}

//! [`World`]: the services behind the tools. Requests arrive when their
//! fate says; each service fences by token per run (refusing a token lower
//! than one it has seen, for acts and queries alike), unless it is one that
//! ignores tokens (it acts on whatever arrives), deduplicates by key
//! inside its window if its class says so, answers queries, and records
//! every application: the ground truth the checkers hold the books to.
//!
//! **Invariant:** `log` holds exactly the acts that happened, in order; an
//! idempotent service applies a key at most once per window; a queryable
//! or non-idempotent service applies every act request it accepts.

use std::collections::BTreeMap;

use actum::books::{
    Digest, EffectKey, FencingToken, RECEIPT_INLINE_BYTES_MAX, ResourceId, RunId, ToolClass,
    digest_of,
};

use super::call::{Ask, Call, CallId, Fate, Reply};
use super::model::Model;
use super::tools::{Tool, tool};

/// The receipt a service answers an act with: `tool:seq`, and for one key
/// in eight a receipt larger than the ledger keeps inline
/// (`RECEIPT_INLINE_BYTES_MAX`), so that crashes, torn writes and retention
/// meet receipts kept in the blob store. A fourth of those are the same
/// bytes for every key of the tool, so runs share a receipt's blob. The
/// choice and the length come from the key's digest, not from the seed's
/// stream: no draw of the schedule or of the fates moves.
pub fn receipt_of(tool: &str, key: &EffectKey, seq: usize) -> Vec<u8> {
    let chosen = digest_of(key.encode().as_bytes()).0;
    if !chosen[0].is_multiple_of(8) {
        return format!("{tool}:{seq}").into_bytes();
    }
    let head = if chosen[2].is_multiple_of(4) {
        format!("{tool}:shared ")
    } else {
        format!("{tool}:{seq} ")
    };
    // Up to 2 KiB: the record confirming it fits the simulator's 8 KiB
    // records.
    let len = RECEIPT_INLINE_BYTES_MAX + 1 + usize::from(chosen[1]) * 4;
    let mut receipt = head.into_bytes();
    receipt.extend((receipt.len()..len).map(|i| b'a' + (i % 26) as u8));
    receipt
}

/// A receipt for a history line: whole if short, else its first word and
/// its length.
pub fn receipt_text(receipt: &[u8]) -> String {
    let text = String::from_utf8_lossy(receipt);
    if receipt.len() <= 64 {
        return text.into_owned();
    }
    let head = text.split(' ').next().unwrap_or_default();
    format!("{head} ... ({} bytes)", receipt.len())
}

/// One act that happened in the world.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Application {
    /// Position in the world's log, from 0.
    pub seq: usize,
    /// The tool that acted.
    pub tool: &'static str,
    /// The key the request carried.
    pub key: EffectKey,
    /// The token the request carried.
    pub token: FencingToken,
    /// The arguments' digest.
    pub args_digest: Digest,
    /// When, virtual ms.
    pub at_ms: u64,
    /// What the service answered.
    pub receipt: Vec<u8>,
    /// The resource hold the request acted under, if any.
    pub hold: Option<(ResourceId, FencingToken)>,
}

/// One request a service received (acted on or not), in arrival order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The tool.
    pub tool: &'static str,
    /// The key.
    pub key: EffectKey,
    /// The token it carried.
    pub token: FencingToken,
    /// The arguments' digest, for an act.
    pub args_digest: Option<Digest>,
    /// The application it caused, if any (an index into the log).
    pub applied: Option<usize>,
}

/// Counters of what the world did, for the campaign's summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorldStats {
    /// Requests sent (acts and queries).
    pub calls: u64,
    /// Acts applied.
    pub applications: u64,
    /// Act requests answered from an earlier application of the key.
    pub dedups: u64,
    /// Replies dropped after the act.
    pub acks_dropped: u64,
    /// Requests lost before the service.
    pub requests_lost: u64,
    /// Requests declined.
    pub declines: u64,
    /// Requests delivered late.
    pub slow: u64,
    /// Requests refused for a stale token.
    pub fenced: u64,
    /// Queries answered.
    pub queries: u64,
}

/// The world: every service, the model, and what happened.
#[derive(Debug, Default)]
pub struct World {
    /// Per (tool, run): the highest token the service has seen.
    fences: BTreeMap<(&'static str, RunId), FencingToken>,
    /// Per resource: the highest hold token any service has seen.
    resource_fences: BTreeMap<ResourceId, FencingToken>,
    /// Per (tool, key): the application that answers a repeat or a query.
    by_key: BTreeMap<(&'static str, EffectKey), usize>,
    log: Vec<Application>,
    deliveries: Vec<Delivery>,
    in_flight: BTreeMap<(u64, CallId), Call>,
    replies: BTreeMap<CallId, Reply>,
    next_call: CallId,
    stats: WorldStats,
    model: Model,
}

impl World {
    /// An empty world.
    pub fn new() -> World {
        World::default()
    }

    /// Sends a request to `tool` at `now_ms` with the given fate; returns
    /// its id. A lost request never arrives.
    pub fn send(
        &mut self,
        tool: Tool,
        (key, token): (&EffectKey, actum::books::FencingToken),
        ask: Ask,
        now_ms: u64,
        fate: Fate,
    ) -> CallId {
        self.send_holding(tool, (key, token), None, ask, (now_ms, fate))
    }

    /// [`World::send`] of a request acting under a resource `hold`.
    pub fn send_holding(
        &mut self,
        tool: Tool,
        (key, token): (&EffectKey, actum::books::FencingToken),
        hold: Option<(ResourceId, FencingToken)>,
        ask: Ask,
        (now_ms, fate): (u64, Fate),
    ) -> CallId {
        let id = self.next_call;
        self.next_call += 1;
        self.stats.calls += 1;
        if matches!(ask, Ask::Query) {
            assert_eq!(
                tool.class,
                ToolClass::Queryable,
                "{} answers no queries",
                tool.name
            );
        }
        let delay_ms = match fate {
            Fate::RequestLost => {
                self.stats.requests_lost += 1;
                return id;
            }
            Fate::Slow { delay_ms } => {
                self.stats.slow += 1;
                u64::from(delay_ms)
            }
            Fate::Delivered | Fate::AckDropped | Fate::Declined => 0,
        };
        assert!(
            delay_ms <= tool.request_lifetime_ms,
            "a request outlived its lifetime"
        );
        let call = Call {
            id,
            tool,
            key: key.clone(),
            token,
            ask,
            sent_ms: now_ms,
            deliver_ms: now_ms + delay_ms,
            fate,
            hold,
        };
        self.in_flight.insert((call.deliver_ms, id), call);
        id
    }

    /// Delivers every request due by `now_ms`, in (due time, id) order,
    /// each at its due time: a clock jump past it does not hold a request
    /// back, so it reaches the service within its lifetime, and the
    /// service deduplicates (and records it) as of its arrival.
    pub fn deliver_due(&mut self, now_ms: u64) {
        while let Some(entry) = self.in_flight.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let call = entry.remove();
            let reply = self.deliver(&call, call.deliver_ms);
            let acked = !matches!(call.fate, Fate::AckDropped);
            if !acked {
                self.stats.acks_dropped += 1;
            }
            if let Some(reply) = reply.filter(|_| acked) {
                self.replies.insert(call.id, reply);
            }
        }
    }

    /// The reply to call `id`, if it has come back (taken once).
    pub fn take_reply(&mut self, id: CallId) -> Option<Reply> {
        self.replies.remove(&id)
    }

    /// True while call `id` may still arrive.
    pub fn in_flight(&self, id: CallId) -> bool {
        self.in_flight.values().any(|c| c.id == id)
    }

    /// Every caller died (a process crash): replies nobody waits for are
    /// dropped. Requests in flight still arrive.
    pub fn forget_replies(&mut self) {
        self.replies.clear();
    }

    /// What a person finds when they check `key` at its service (a bank
    /// statement): confirmed with the receipt if it was applied, failed if
    /// not; `None` while a request for it is still on its way (it may yet
    /// be applied).
    pub fn person_checks(&self, key: &EffectKey) -> Option<actum::books::Outcome> {
        if self.in_flight.values().any(|c| c.key == *key) {
            return None;
        }
        Some(match self.log.iter().find(|a| a.key == *key) {
            Some(applied) => actum::books::Outcome::Confirmed {
                receipt: applied.receipt.clone(),
            },
            None => actum::books::Outcome::Failed {
                retryable: true,
                reason: "the statement shows no such request".into(),
            },
        })
    }

    /// Every act that happened, in order.
    pub fn log(&self) -> &[Application] {
        &self.log
    }

    /// Every request a service received, in order.
    pub fn deliveries(&self) -> &[Delivery] {
        &self.deliveries
    }

    /// What the world did.
    pub fn stats(&self) -> &WorldStats {
        &self.stats
    }

    /// The simulated model.
    pub fn model(&mut self) -> &mut Model {
        &mut self.model
    }

    /// The simulated model, read-only.
    pub fn model_ref(&self) -> &Model {
        &self.model
    }

    /// The service's side of one delivered request; `None` means no reply.
    fn deliver(&mut self, call: &Call, now_ms: u64) -> Option<Reply> {
        let tool = call.tool;
        let fence = self
            .fences
            .entry((tool.name, call.key.run().clone()))
            .or_default();
        let args_digest = match &call.ask {
            Ask::Act { args_digest } => Some(*args_digest),
            Ask::Query => None,
        };
        let mut delivery = Delivery {
            tool: tool.name,
            key: call.key.clone(),
            token: call.token,
            args_digest,
            applied: None,
        };
        let stale_hold = call.hold.as_ref().is_some_and(|(resource, token)| {
            self.resource_fences
                .get(resource)
                .is_some_and(|highest| token < highest)
        });
        if (call.token < *fence && !tool.ignores_tokens) || stale_hold {
            self.stats.fenced += 1;
            self.deliveries.push(delivery);
            return Some(Reply::Fenced);
        }
        *fence = (*fence).max(call.token);
        if let (Some((resource, token)), Ask::Act { .. }) = (&call.hold, &call.ask) {
            self.resource_fences.insert(resource.clone(), *token);
        }
        let reply = match (&call.ask, call.fate) {
            (Ask::Query, _) => {
                self.stats.queries += 1;
                match self.by_key.get(&(tool.name, call.key.clone())) {
                    Some(&seq) => Reply::Done {
                        receipt: self.log[seq].receipt.clone(),
                    },
                    None => Reply::NotFound,
                }
            }
            (Ask::Act { args_digest }, fate) => {
                if let Some(receipt) = self.repeat(tool, call, now_ms) {
                    // A repeat inside the window gets the stored answer,
                    // whatever else the network does to it.
                    Reply::Done { receipt }
                } else if fate == Fate::Declined {
                    self.stats.declines += 1;
                    Reply::Declined {
                        for_good: tool.declines_for_good,
                    }
                } else {
                    let (seq, receipt) = self.act(call, *args_digest, now_ms);
                    delivery.applied = Some(seq);
                    Reply::Done { receipt }
                }
            }
        };
        self.deliveries.push(delivery);
        // An asynchronous service acknowledges what it took; what came of
        // it, its receipt, goes out by webhook.
        Some(match reply {
            Reply::Done { .. } if tool.replies_by_webhook => Reply::Accepted,
            other => other,
        })
    }

    /// The webhook replies an asynchronous service owes `run`: for each key
    /// of the run it applied, the receipt of its latest application.
    pub fn webhook_replies(&self, run: &RunId) -> Vec<(EffectKey, Vec<u8>)> {
        self.by_key
            .iter()
            .filter(|((name, key), _)| key.run() == run && tool(name).replies_by_webhook)
            .map(|((_, key), seq)| (key.clone(), self.log[*seq].receipt.clone()))
            .collect()
    }

    /// The stored receipt if `call` repeats a key an idempotent service
    /// applied inside its window.
    fn repeat(&mut self, tool: Tool, call: &Call, now_ms: u64) -> Option<Vec<u8>> {
        let dedup_window_ms = tool.class.dedup_window_ms()?;
        let &seq = self.by_key.get(&(tool.name, call.key.clone()))?;
        let first = &self.log[seq];
        if now_ms.saturating_sub(first.at_ms) >= dedup_window_ms {
            return None;
        }
        self.stats.dedups += 1;
        Some(first.receipt.clone())
    }

    /// An act the service performs; returns its index and receipt.
    fn act(&mut self, call: &Call, args_digest: Digest, now_ms: u64) -> (usize, Vec<u8>) {
        let slot = (call.tool.name, call.key.clone());
        let seq = self.log.len();
        let receipt = receipt_of(call.tool.name, &call.key, seq);
        self.log.push(Application {
            seq,
            tool: call.tool.name,
            key: call.key.clone(),
            token: call.token,
            args_digest,
            at_ms: now_ms,
            receipt: receipt.clone(),
            hold: call.hold.clone(),
        });
        // A repeat outside the window acts again: the latest answers queries.
        self.by_key.insert(slot, seq);
        self.stats.applications += 1;
        (seq, receipt)
    }
}

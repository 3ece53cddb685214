//! The catalogue of simulated tools, drawn from the seeds' agents: a card
//! processor and a bank that deduplicate by key, a warehouse and an FX desk
//! that answer queries, a mailer that does neither, and a screening service
//! that answers later, by webhook; and a courier that answers queries but
//! ignores fencing tokens, whose requests may arrive long after the caller
//! gave up ([`LATE_REQUEST_LIFETIME_MS`]), and a bank's recall of a wire
//! (the runtime family's undo of a funding) that does the same.
//!
//! **Invariant:** every tool's dedup window is far longer than the longest
//! a request can stay in flight ([`REQUEST_LIFETIME_MS_MAX`]), and so is
//! its resend margin (the default five minutes of a day, or the ledger's
//! declared two: a resend the engine decides inside the window less the
//! margin reaches the tool before it forgets the key), and a caller
//! waits longer than that ([`CALL_TIMEOUT_MS`]) before it calls the outcome
//! unknown: so a caller that timed out knows its request can no longer
//! arrive, which is what makes a query's "not found" final (real services
//! bound request lifetime the same way).

use actum::books::ToolClass;

/// The longest a request stays in flight before the world delivers it (or
/// it is lost for good), in virtual milliseconds.
pub const REQUEST_LIFETIME_MS_MAX: u64 = 60_000;

/// How long a caller waits for a reply before it reports the outcome as
/// unknown; longer than any request to a tool that fences by token can
/// stay in flight.
pub const CALL_TIMEOUT_MS: u64 = REQUEST_LIFETIME_MS_MAX + 30_000;

/// The request lifetime of the tools that ignore fencing tokens: a queue
/// that delivers up to ten minutes late, far past the caller's timeout and
/// the lease of the worker that sent it. The runtime is told it
/// (`Tool::ignores_tokens`) and must wait it out before it queries.
pub const LATE_REQUEST_LIFETIME_MS: u64 = 600_000;

/// One day: the dedup window of the tools that have one.
const DAY_MS: u64 = 86_400_000;

const _: () = assert!(CALL_TIMEOUT_MS > REQUEST_LIFETIME_MS_MAX);
const _: () = assert!(DAY_MS > 100 * CALL_TIMEOUT_MS);

/// A simulated tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tool {
    /// Its name, as the intent records it.
    pub name: &'static str,
    /// How it treats duplicates.
    pub class: ToolClass,
    /// Whether a decline is final (the FX desk refuses a hedge) or
    /// transient (a 503: try again with a new attempt).
    pub declines_for_good: bool,
    /// True for an asynchronous tool: a request it takes is answered
    /// "accepted" at once, and its outcome comes later, by webhook.
    pub replies_by_webhook: bool,
    /// True for a tool that ignores fencing tokens: it acts on a request
    /// under any token, however old.
    pub ignores_tokens: bool,
    /// The longest a request to it stays in flight, ms.
    pub request_lifetime_ms: u64,
}

impl Tool {
    /// A tool that deduplicates by key for a day (a card processor).
    pub const fn idempotent(name: &'static str) -> Tool {
        Tool {
            name,
            class: ToolClass::Idempotent {
                dedup_window_ms: DAY_MS,
            },
            declines_for_good: false,
            replies_by_webhook: false,
            ignores_tokens: false,
            request_lifetime_ms: REQUEST_LIFETIME_MS_MAX,
        }
    }

    /// A tool that deduplicates by key for a day and declares how long
    /// before the window's end resends must stop (a ledger whose requests
    /// queue).
    pub const fn idempotent_with_margin(name: &'static str, resend_margin_ms: u64) -> Tool {
        Tool {
            class: ToolClass::IdempotentWithMargin {
                dedup_window_ms: DAY_MS,
                resend_margin_ms,
            },
            ..Tool::idempotent(name)
        }
    }

    /// An asynchronous tool that deduplicates by key for a day (a
    /// screening service): it accepts a request at once and sends its
    /// outcome by webhook.
    pub const fn asynchronous(name: &'static str) -> Tool {
        Tool {
            replies_by_webhook: true,
            ..Tool::idempotent(name)
        }
    }

    /// A tool that answers whether a key was acted on (a bank's wire
    /// status); `declines_for_good` if its refusals are final.
    pub const fn queryable(name: &'static str, declines_for_good: bool) -> Tool {
        Tool {
            name,
            class: ToolClass::Queryable,
            declines_for_good,
            replies_by_webhook: false,
            ignores_tokens: false,
            request_lifetime_ms: REQUEST_LIFETIME_MS_MAX,
        }
    }

    /// A tool that answers whether a key was acted on but ignores fencing
    /// tokens, and whose requests may arrive up to
    /// [`LATE_REQUEST_LIFETIME_MS`] after they were sent (a courier's
    /// booking queue).
    pub const fn queryable_ignoring_tokens(name: &'static str) -> Tool {
        Tool {
            ignores_tokens: true,
            request_lifetime_ms: LATE_REQUEST_LIFETIME_MS,
            ..Tool::queryable(name, false)
        }
    }

    /// A tool that can neither deduplicate nor be asked (a mailer).
    pub const fn not_idempotent(name: &'static str) -> Tool {
        Tool {
            name,
            class: ToolClass::NotIdempotent,
            declines_for_good: false,
            replies_by_webhook: false,
            ignores_tokens: false,
            request_lifetime_ms: REQUEST_LIFETIME_MS_MAX,
        }
    }
}

/// Every tool of the world.
const TOOLS: [Tool; 16] = [
    Tool::idempotent("stripe.charge"),
    Tool::queryable("warehouse.ship", false),
    Tool::queryable("bank.refund", false),
    Tool::not_idempotent("mail.send"),
    Tool::idempotent("bank.sweep"),
    Tool::idempotent("bank.unsweep"),
    Tool::idempotent("bank.fund"),
    Tool::not_idempotent("bank.unfund"),
    Tool::queryable("fx.hedge", true),
    Tool::idempotent_with_margin("ledger.post", 2 * REQUEST_LIFETIME_MS_MAX),
    Tool::idempotent("search.query"),
    Tool::queryable("bank.pay", false),
    Tool::asynchronous("kyc.screen"),
    Tool::queryable_ignoring_tokens("courier.book"),
    Tool::queryable_ignoring_tokens("bank.recall"),
    Tool::queryable("bank.wire", false),
];

/// Every tool of the world, in catalogue order.
pub fn catalogue() -> impl Iterator<Item = Tool> {
    TOOLS.into_iter()
}

/// True if the tool named `name` ignores fencing tokens (false for a name
/// outside the catalogue).
pub fn ignores_tokens(name: &str) -> bool {
    TOOLS.iter().any(|t| t.name == name && t.ignores_tokens)
}

/// The tool named `name`; panics on a name outside the catalogue (a bug in
/// a workflow definition).
pub fn tool(name: &str) -> Tool {
    *TOOLS
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no simulated tool is named {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_window_outlasts_every_request_and_names_are_unique() {
        for (i, t) in TOOLS.iter().enumerate() {
            if let (Some(window), Some(margin)) =
                (t.class.dedup_window_ms(), t.class.resend_margin_ms())
            {
                assert!(window > CALL_TIMEOUT_MS, "{}", t.name);
                assert!(margin > REQUEST_LIFETIME_MS_MAX, "{}", t.name);
                assert!(margin < window / 2, "{}", t.name);
            }
            assert!(TOOLS[..i].iter().all(|u| u.name != t.name), "{}", t.name);
            // A tool that fences by token is answered, or given up on,
            // only once its request can no longer arrive.
            assert!(
                t.ignores_tokens || t.request_lifetime_ms < CALL_TIMEOUT_MS,
                "{}",
                t.name
            );
            assert!(
                t.request_lifetime_ms <= LATE_REQUEST_LIFETIME_MS,
                "{}",
                t.name
            );
            assert_eq!(tool(t.name), *t);
        }
    }
}

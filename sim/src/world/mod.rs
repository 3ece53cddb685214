//! The simulated world outside the engine: services (the tools agents call)
//! that deduplicate by idempotency key and fence by token like real ones, a
//! model that answers prompts and counts what it is paid for, and the
//! ground truth of every application.
//!
//! Layout: `tools` (the catalogue: names, classes, what each declines),
//! `call` (a request in flight and its fate), `service` (the [`World`]:
//! delivery, dedup, fencing, queries, the application log), `model`.
//!
//! **Invariant:** the world is a pure function of the calls it receives and
//! the fates the schedule gives them; it never reads the engine's books, so
//! what it records is independent ground truth for the checkers.

mod call;
mod model;
mod service;
mod tools;

pub use call::{Ask, Call, CallId, Fate, Reply};
pub use model::{Model, ModelCall};
pub use service::{Application, Delivery, World, WorldStats, receipt_of, receipt_text};
pub use tools::{
    CALL_TIMEOUT_MS, LATE_REQUEST_LIFETIME_MS, REQUEST_LIFETIME_MS_MAX, Tool, catalogue,
    ignores_tokens, tool,
};

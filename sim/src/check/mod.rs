//! The simulator's invariants, one per file, each a pure function of a
//! reference model and what was observed: the storage campaign's (appends
//! survive, nothing half-visible, ...) and the agent campaign's (no effect
//! fires twice, intent before act, fencing, books equal the model, every
//! run ends).
//!
//! Each returns `Err(description)` when violated; the runner adds the seed
//! and the replay command.

mod acked_survive;
mod approval_binds;
mod books_match_model;
mod budgets_hold;
mod children_awaited;
mod corruption_detected;
mod decision_not_repaid;
mod effect_at_most_once;
mod effect_begins_running;
mod effect_exactly_once;
mod intent_before_act;
mod liveness;
mod no_half_visible;
mod operations_report;
mod receipt_replayed;
mod recovery_idempotent;
mod redb_survives;
mod refused_open_closes;
mod registry_complete;
mod resend_payload;
mod resource_fenced;
mod saga_undoes_last_first;
mod stale_lease_refused;
mod waits_keep_their_terms;
mod world_fenced;

#[cfg(test)]
mod test_support;

pub use acked_survive::acked_appends_survive;
pub use approval_binds::approval_binds_its_effect;
pub use books_match_model::{InFlight, books_match_model, opened, releases_at_open};
pub use budgets_hold::{budgets_hold, calls_are_paid_once, reserve_granted_by_the_books};
pub use children_awaited::children_are_awaited;
pub use corruption_detected::corruption_is_detected;
pub use decision_not_repaid::decision_not_paid_twice;
pub use effect_at_most_once::{effect_applied_at_most_once, step_not_confirmed};
pub use effect_begins_running::effect_begins_on_a_running_run;
pub use effect_exactly_once::effect_applied_exactly_once;
pub use intent_before_act::{applications_have_intents, intent_durable_before_act};
pub use liveness::every_run_ends_settled;
pub use no_half_visible::nothing_unacknowledged_is_half_visible;
pub use operations_report::stuck_runs_are_the_books;
pub use receipt_replayed::replayed_receipt_is_the_worlds;
pub use recovery_idempotent::recovery_is_idempotent;
pub use redb_survives::redb_committed_state_survives;
pub use refused_open_closes::refused_open_leaves_no_file_open;
pub use registry_complete::registries_keep_every_run;
pub use resend_payload::resends_carry_the_same_payload;
pub use resource_fenced::resource_holds_are_fenced;
pub use saga_undoes_last_first::sagas_undo_last_first;
pub use stale_lease_refused::stale_lease_refused;
pub use waits_keep_their_terms::waits_keep_their_terms;
pub use world_fenced::world_refuses_stale_tokens;

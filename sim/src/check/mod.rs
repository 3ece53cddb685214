//! The campaign's invariants, one per file, each a pure function of the
//! reference model and what a recovery observed.
//!
//! Each returns `Err(description)` when violated; the runner adds the seed
//! and the replay command.

mod acked_survive;
mod corruption_detected;
mod no_half_visible;
mod recovery_idempotent;
mod redb_survives;

pub use acked_survive::acked_appends_survive;
pub use corruption_detected::corruption_is_detected;
pub use no_half_visible::nothing_unacknowledged_is_half_visible;
pub use recovery_idempotent::recovery_is_idempotent;
pub use redb_survives::redb_committed_state_survives;

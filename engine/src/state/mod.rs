//! The state store: redb tables materialised from the WAL.
//!
//! Committed WAL records are applied in redb transactions with
//! `Durability::None`; a periodic `Durability::Immediate` commit makes them
//! durable and records, in the same transaction, the LSN they cover
//! (`applied_lsn`). Recovery opens redb, reads `applied_lsn` and replays the
//! WAL after it through the same apply function the live path uses.
//!
//! The agent's books live in the tables of [`books_tables`], read and
//! written through [`RedbBooks`], which implements the books traits.
//!
//! **Invariant:** the `applied_lsn` stored in redb always equals the LSN of
//! the last record whose effects are in the same redb snapshot, so replay
//! after it applies every record exactly once.

pub mod blob_stream;
mod books_snapshot;
pub mod books_tables;
mod books_write;
mod guard;
pub mod rows;
mod store;

pub use books_snapshot::read_books;
pub use books_tables::RedbBooks;
pub use guard::RedbPanicked;
pub use rows::LiveClaim;
pub(crate) use guard::{drop_guarded, guarded};
pub(crate) use store::SharedRead;
pub use store::{
    CheckedAtOpen, META_TABLE, METRIC_KEY_PREFIX, PageCheck, STATE_SCHEMA_VERSION, StateStore,
    sums_path, write_metrics,
};

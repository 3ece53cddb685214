//! The write-ahead log: segmented, checksummed, with group commit.
//!
//! One concern per file: [`mod@format`] (bytes on disk, pure), `segment` (one
//! segment file), `group` (the group-commit kernel), `writer` (what a
//! leader writes), `table` (live segments), `reader` ([`WalIter`]),
//! `recovery`, and `log` (the [`Wal`] facade). `docs/FORMAT.md` documents
//! every byte and `docs/DURABILITY.md` every fsync.
//!
//! **Invariant:** an LSN returned by [`Wal::append`] is durable and survives
//! any crash; recovery truncates only records that were never acknowledged.

pub mod format;
mod group;
mod log;
mod options;
mod reader;
mod recovery;
mod segment;
mod table;
mod writer;

#[cfg(all(test, not(feature = "loom")))]
mod tests;

pub use log::{FIRST_EPOCH, Wal};
pub use options::{RecoveryReport, SEGMENT_FIRST_STEP_BYTES_DEFAULT, WalOptions, WalStats};
pub use reader::WalIter;
pub use recovery::LogRoot;

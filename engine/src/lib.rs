//! # actum
//!
//! An embedded storage engine that keeps an AI agent's books: a durable
//! journal, checkpoint store and side-effect ledger on a custom write-ahead
//! log, so a restarted worker resumes at the exact step and no side effect
//! fires twice.
//!
//! This crate is organised in layers (see `ARCHITECTURE.md`):
//!
//! - [`storage`]: the only code touching the file system ([`Storage`]);
//! - [`wal`]: the segmented, checksummed write-ahead log with group commit;
//! - [`manifest`]: the durable root, updated atomically;
//! - [`state`]: the redb tables the books are materialised in;
//! - [`books`]: the pure decide/apply core of runs, leases, the effect
//!   ledger, checkpoints and decisions;
//! - [`engine`]: the [`Engine`] facade joining them (start here);
//! - [`verify`]: every checksum of a database directory, checked without
//!   writing;
//! - [`Clock`]: time behind a trait, so the simulator can drive it.

pub mod books;
pub mod clock;
mod combine;
pub mod db;
pub mod engine;
pub mod error;
mod hot;
pub mod ids;
pub mod manifest;
pub mod planted;
pub mod state;
pub mod storage;
pub(crate) mod sync;
pub mod verify;
pub mod wal;

pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::{Engine, EngineOptions};
pub use error::{Error, Result};
pub use ids::{DatabaseId, Lsn, SegmentId};
pub use storage::{FsStorage, OpenMode, Storage, StorageFile};

//! A database directory: its lock, its manifest and its write-ahead log.
//!
//! `Db` is the storage core the agent's books are built on. It owns the
//! directory lock for its whole life, creates a new database atomically (a
//! `CREATING` marker makes an interrupted creation restartable rather than a
//! half-made database), and ties a state checkpoint to the manifest and to
//! WAL garbage collection in the only safe order: the manifest names the new
//! checkpoint durably *before* any segment it covers is removed.

mod create;
mod open;

pub use open::{Db, DbOptions, OpenReport};

//! A database directory: its lock, its manifest and its write-ahead log, and
//! the durable pipeline that joins them to the state store.
//!
//! [`Pipeline`] is the one owner of the order append → durable → apply →
//! checkpoint → manifest → segment removal, and of replay; the engine and
//! the simulator both drive it. `Db` is the storage core below it. It owns the
//! directory lock for its whole life, creates a new database atomically (a
//! `CREATING` marker makes an interrupted creation restartable rather than a
//! half-made database), and ties a state checkpoint to the manifest and to
//! WAL garbage collection in the only safe order: the manifest names the new
//! checkpoint durably *before* any segment it covers is removed.

mod create;
mod open;
mod pipeline;

pub(crate) use create::{CREATING_MARKER, MANIFEST_FILES, STATE_FILE, WAL_DIR};
pub use open::{Db, DbOptions, OpenReport};
pub use pipeline::{Pipeline, PipelineOptions, RecordAt, Recovering, Recovery};

#[cfg(test)]
mod open_syncs_tests;

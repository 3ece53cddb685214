//! How a read-only command opens its directory: on the engine's read-only
//! view, or, when another process's engine holds the directory (its LOCK
//! taken), as a snapshot of the live database (`Engine::open_snapshot`):
//! one consistent state as of an LSN the command then names.
//!
//! **Invariant:** either way nothing in the directory is written, and a
//! command on a live database says which LSN it saw.

use std::path::Path;

use actum::Error;
use actum::engine::{Engine, EngineOptions};

/// An engine open to read, and whether it is a snapshot of a live database.
pub struct Reading {
    /// The engine.
    pub engine: Engine,
    /// `Some(lsn)` if the directory is held by another engine and this is
    /// a snapshot as of `lsn`.
    pub live_lsn: Option<u64>,
}

impl Reading {
    /// The line that says what state the command read, for a person.
    pub fn as_of(&self) -> String {
        match self.live_lsn {
            Some(lsn) => format!(
                "as of LSN {lsn} (live database: another process has it open; this is a \
                 consistent snapshot)"
            ),
            None => format!("as of LSN {}", self.engine.durable_lsn().0),
        }
    }
}

/// Opens `dir` to read: read-only if no engine holds it, else a snapshot.
pub fn open_to_read(dir: &Path) -> actum::Result<Reading> {
    match Engine::open_read_only(dir, EngineOptions::default()) {
        Ok(engine) => Ok(Reading {
            engine,
            live_lsn: None,
        }),
        Err(Error::Locked { .. }) => {
            let engine = Engine::open_snapshot(dir, EngineOptions::default())?;
            let live_lsn = engine.snapshot_lsn().map(|lsn| lsn.0);
            Ok(Reading { engine, live_lsn })
        }
        Err(error) => Err(error),
    }
}

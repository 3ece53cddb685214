//! How a read-only command opens its directory: on the engine's read-only
//! view, or, when another process's engine holds the directory (its LOCK
//! taken), as a snapshot of the live database (`Engine::open_snapshot`):
//! one consistent state as of an LSN the command then names.
//!
//! A PostgreSQL URL in the directory's place opens its engine
//! (`place::open_postgres`): each of the engine's reads is one read-only
//! snapshot of the server's, and the command says which server it read.
//!
//! **Invariant:** either way nothing in the directory is written, and a
//! command on a live database says which LSN (or server) it saw.

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
    /// `Some(server)` (its URL without the password) if the books are in
    /// PostgreSQL.
    pub postgres: Option<String>,
}

impl Reading {
    /// True if a command says what it read ([`Reading::as_of`]) even where
    /// it says nothing on a directory no one has open: a live database's
    /// snapshot, or a PostgreSQL server.
    pub fn says_as_of(&self) -> bool {
        self.live_lsn.is_some() || self.postgres.is_some()
    }

    /// The line that says what state the command read, for a person.
    pub fn as_of(&self) -> String {
        if let Some(server) = &self.postgres {
            return format!("from PostgreSQL {server}");
        }
        match self.live_lsn {
            Some(lsn) => format!(
                "as of LSN {lsn} (live database: another process has it open; this is a \
                 consistent snapshot)"
            ),
            None => format!("as of LSN {}", self.engine.durable_lsn().0),
        }
    }
}

/// Opens `dir` to read: read-only if no engine holds it, else a snapshot;
/// a PostgreSQL URL's engine.
pub fn open_to_read(dir: &Path) -> actum::Result<Reading> {
    if let Some(url) = crate::place::postgres_url(dir) {
        return Ok(Reading {
            engine: crate::place::open_postgres(url)?,
            live_lsn: None,
            postgres: Some(actum::pg::without_password(url)),
        });
    }
    match Engine::open_read_only(dir, EngineOptions::default()) {
        Ok(engine) => Ok(Reading {
            engine,
            live_lsn: None,
            postgres: None,
        }),
        Err(Error::Locked { .. }) => {
            let engine = Engine::open_snapshot(dir, EngineOptions::default())?;
            let live_lsn = engine.snapshot_lsn().map(|lsn| lsn.0);
            Ok(Reading {
                engine,
                live_lsn,
                postgres: None,
            })
        }
        Err(error) => Err(error),
    }
}

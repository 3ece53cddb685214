//! How a read-only command opens its directory: on the engine's read-only
//! view, or, when another process's engine holds the directory (its LOCK
//! taken), as a snapshot of the live database (`Engine::open_snapshot`):
//! one consistent state as of an LSN the command then names.
//!
//! A PostgreSQL URL in the directory's place opens its engine
//! (`place::open_postgres`): each of the engine's reads is one read-only
//! snapshot of the server's, and the command says which server it read.
//!
//! A command that wants only the whole books at a glance (`inspect`) asks a
//! live database's engine for its look through the operator channel
//! ([`look_to_read`]) when it serves one: nothing copied, nothing replayed.
//!
//! **Invariant:** either way nothing in the directory is written, and a
//! command on a live database says which LSN (or server) it saw.

use std::path::Path;

use actum::Error;
use actum::engine::{Engine, EngineOptions, Look};

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

/// What the engine serving `dir`'s operator channel answers `ask` (one of
/// `actum::operator::channel`'s reads), if one serves it: `None` when none
/// does, or when the channel gave no answer (an engine going away, an
/// answer too large for a frame), which is said on stderr with `what`, so
/// the caller reads a snapshot ([`open_to_read`]) and the person knows
/// why. Never on a PostgreSQL URL (no channel there).
pub fn served<T>(
    dir: &Path,
    what: &str,
    ask: impl FnOnce(&Path) -> actum::Result<Option<T>>,
) -> Option<T> {
    if crate::place::postgres_url(dir).is_some() {
        return None;
    }
    match ask(dir) {
        Ok(answer) => answer,
        Err(error) => {
            // The channel answers only while its engine holds the
            // directory, so open_to_read takes a snapshot.
            eprintln!(
                "actum: the live engine's {what} failed ({error}); reading a snapshot instead"
            );
            None
        }
    }
}

/// A look at the books ([`Engine::look`]), and where it came from.
pub struct Looked {
    /// The look.
    pub look: Look,
    /// `Some(lsn)` if another process's engine holds the directory.
    pub live_lsn: Option<u64>,
    /// True if that engine served the look through its operator channel.
    pub served: bool,
    /// `Some(server)` if the books are in PostgreSQL.
    pub postgres: Option<String>,
}

/// A look at the books of `dir`: through the operator channel of the
/// engine that holds it, if it serves one ([`served`]: no file copied, no
/// log replayed); else the look of [`open_to_read`]'s engine.
pub fn look_to_read(dir: &Path) -> actum::Result<Looked> {
    if let Some(look) = served(dir, "look", actum::operator::channel::look) {
        return Ok(Looked {
            live_lsn: Some(look.lsn),
            look,
            served: true,
            postgres: None,
        });
    }
    let reading = open_to_read(dir)?;
    let look = reading.engine.look()?;
    Ok(Looked {
        look,
        live_lsn: reading.live_lsn,
        served: false,
        postgres: reading.postgres,
    })
}

//! Where the books are: a database directory, or a PostgreSQL database a
//! `postgres://` (or `postgresql://`) URL names. Every command takes either
//! in the position of its DIR argument; this module tells them apart and
//! opens a URL's engine (`Engine::open_postgres`).
//!
//! On PostgreSQL there is no directory lock and no operator channel: any
//! number of processes open the database at once, so a write opens it as
//! any process does, and a read is the books as one read-only snapshot of
//! the server sees them. What is about a directory's files (`verify`,
//! `repair`, `tail`'s log) is refused, naming the server.
//!
//! **Invariant:** a URL reaches a person only without its password
//! (`actum::pg::without_password`).

use std::path::Path;

use actum::engine::{Engine, EngineOptions};

use crate::failure::CliError;

/// The schemes of a PostgreSQL URL.
const SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// The URL, if `dir` names a PostgreSQL database rather than a directory.
pub fn postgres_url(dir: &Path) -> Option<&str> {
    let text = dir.to_str()?;
    SCHEMES
        .iter()
        .any(|scheme| text.starts_with(scheme))
        .then_some(text)
}

/// `dir` for a person: the directory, or the URL without its password.
pub fn shown(dir: &Path) -> String {
    match postgres_url(dir) {
        Some(url) => actum::pg::without_password(url),
        None => dir.display().to_string(),
    }
}

/// Opens the engine of the PostgreSQL database `url` names.
pub fn open_postgres(url: &str) -> actum::Result<Engine> {
    Engine::open_postgres(url, EngineOptions::default())
}

/// Opens `dir` to write: the URL's database, or the directory's existing
/// database (`Engine::open_existing`, which creates nothing).
pub fn open_to_write(dir: &Path) -> actum::Result<Engine> {
    match postgres_url(dir) {
        Some(url) => open_postgres(url),
        None => Engine::open_existing(dir, EngineOptions::default()),
    }
}

/// Refuses `command` on a URL: it works on a directory's files, which a
/// PostgreSQL database does not have. `instead` says what to do.
pub fn refuse_url(dir: &Path, command: &str, instead: &str) -> Result<(), CliError> {
    match postgres_url(dir) {
        Some(url) => Err(CliError::unusable(format!(
            "actum {command} works on a database directory's files, and {} is a PostgreSQL \
             database: {instead}",
            actum::pg::without_password(url)
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_directories() {
        assert_eq!(
            postgres_url(Path::new("postgres://a@h/db")),
            Some("postgres://a@h/db")
        );
        assert!(postgres_url(Path::new("postgresql://h/db")).is_some());
        assert!(postgres_url(Path::new("books")).is_none());
        assert!(postgres_url(Path::new("postgres:/x")).is_none());
        assert!(postgres_url(Path::new("./postgres://x")).is_none());
        assert_eq!(
            shown(Path::new("postgres://me:secret@h:5432/db")),
            "postgres://me@h:5432/db"
        );
        assert_eq!(shown(Path::new("var/books")), "var/books");
    }
}

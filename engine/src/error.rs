//! The one public error type. Every variant carries what a person needs to
//! act on it at 3 a.m.: the file, offset, run or key involved.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::ids::{DatabaseId, Lsn};

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in actum.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An I/O call failed.
    Io {
        /// What the engine was doing (`"sync segment"`, `"read manifest"`, ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// Bytes on disk that the engine had acknowledged, or depends on, are
    /// damaged. The database is not opened; nothing is guessed.
    Corrupt {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damage within `file`.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// Another open database holds the directory's lock.
    Locked {
        /// The database directory.
        dir: PathBuf,
    },
    /// An earlier `fsync` failed, so the log no longer knows what is on disk.
    /// Every write fails until the database is reopened.
    Poisoned {
        /// The failure that poisoned the log.
        cause: String,
    },
    /// A record larger than the configured maximum was refused.
    RecordTooLarge {
        /// The record's size in bytes.
        size_bytes: u64,
        /// The configured maximum in bytes.
        max_bytes: u64,
    },
    /// A file belongs to another database.
    ForeignFile {
        /// The file.
        file: PathBuf,
        /// This database's id.
        expected: DatabaseId,
        /// The id found in the file.
        found: DatabaseId,
    },
    /// A file was written by a format version this build cannot read.
    UnsupportedFormat {
        /// The file.
        file: PathBuf,
        /// The version found in the file.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// No copy of the manifest is valid, so the database root is unknown.
    NoValidManifest {
        /// The database directory.
        dir: PathBuf,
        /// Why each copy was rejected.
        reasons: Vec<String>,
    },
    /// A read asked for an LSN the log no longer (or never) held.
    LsnOutOfRange {
        /// The LSN asked for.
        requested: Lsn,
        /// The oldest LSN the log still holds.
        first: Lsn,
        /// The newest LSN the log holds.
        last: Lsn,
    },
    /// Options given to the engine are inconsistent.
    InvalidConfig {
        /// What is wrong with them.
        reason: String,
    },
}

impl Error {
    /// Wraps an I/O error with the operation and path it came from.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// A `Corrupt` error at `file`:`offset`.
    pub fn corrupt(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => {
                write!(f, "I/O error during {op} on {}: {source}", path.display())
            }
            Error::Corrupt {
                file,
                offset,
                reason,
            } => write!(
                f,
                "corruption in {} at byte offset {offset}: {reason}; the database was not \
                 opened so nothing acknowledged is silently lost (see docs/DURABILITY.md, repair)",
                file.display()
            ),
            Error::Locked { dir } => write!(
                f,
                "database directory {} is already open (its LOCK is held by another process or \
                 handle); close that one first",
                dir.display()
            ),
            Error::Poisoned { cause } => write!(
                f,
                "the write-ahead log is poisoned by an earlier fsync failure ({cause}); no \
                 further writes are accepted: reopen the database to recover the durable prefix"
            ),
            Error::RecordTooLarge {
                size_bytes,
                max_bytes,
            } => write!(
                f,
                "record of {size_bytes} bytes refused: the configured maximum is {max_bytes} bytes"
            ),
            Error::ForeignFile {
                file,
                expected,
                found,
            } => write!(
                f,
                "{} belongs to database {found}, not to this database {expected}; refusing to \
                 read it",
                file.display()
            ),
            Error::UnsupportedFormat {
                file,
                found,
                supported,
            } => write!(
                f,
                "{} has format version {found}; this build reads version {supported}",
                file.display()
            ),
            Error::NoValidManifest { dir, reasons } => write!(
                f,
                "no valid manifest copy in {}: {}",
                dir.display(),
                reasons.join("; ")
            ),
            Error::LsnOutOfRange {
                requested,
                first,
                last,
            } => write!(
                f,
                "{requested} is outside the log, which holds {} to {}",
                first.0, last.0
            ),
            Error::InvalidConfig { reason } => write!(f, "invalid configuration: {reason}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

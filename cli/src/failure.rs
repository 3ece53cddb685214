//! How a command fails: a message for a person that names the directory
//! (or file, or PostgreSQL server) involved, and an exit code.
//!
//! **Invariant:** every engine error reaches the person with the
//! directory it was about and a hint at what to do; none is swallowed.

use std::io;
use std::path::Path;

/// Exit code: the command could not run.
pub const EXIT_UNUSABLE: u8 = 2;

/// Why a command stopped.
#[derive(Debug)]
pub enum CliError {
    /// stdout was closed by its reader (`actum export .. | head`):
    /// nothing is wrong, there is no one left to tell.
    OutputClosed,
    /// The command failed.
    Failed {
        /// What to tell the person.
        message: String,
        /// The exit code.
        code: u8,
    },
}

impl CliError {
    /// A failure with `message` and exit code 2.
    pub fn unusable(message: impl Into<String>) -> CliError {
        CliError::Failed {
            message: message.into(),
            code: EXIT_UNUSABLE,
        }
    }

    /// An engine error met while working on `dir` (a directory, or a
    /// PostgreSQL URL, shown without its password).
    pub fn engine(dir: &Path, error: actum::Error) -> CliError {
        use actum::Error;
        let shown = crate::place::shown(dir);
        let message = match &error {
            Error::Locked { .. } => format!(
                "{shown} is in use by another process (an open engine holds its LOCK); run this \
                 again once that process has closed it"
            ),
            // It names the directory itself.
            Error::NoDatabase { .. } => error.to_string(),
            // It names the server itself; the client's error says little
            // ("error connecting to server") without its own causes.
            Error::Postgres { .. } => {
                let mut message = error.to_string();
                let mut cause = std::error::Error::source(&error).and_then(|s| s.source());
                while let Some(c) = cause {
                    message.push_str(&format!(" (because: {c})"));
                    cause = c.source();
                }
                message
            }
            Error::Corrupt { .. }
            | Error::NoValidManifest { .. }
            | Error::ForeignFile { .. }
            | Error::StateStore { .. } => {
                if crate::place::postgres_url(dir).is_some() {
                    format!("{shown}: {error}")
                } else {
                    format!(
                        "cannot open {shown}: {error}\n(`actum verify {shown}` lists every \
                         damage it finds)"
                    )
                }
            }
            Error::Io { source, .. } if source.kind() == io::ErrorKind::BrokenPipe => {
                return CliError::OutputClosed;
            }
            _ => format!("{shown}: {error}"),
        };
        CliError::unusable(message)
    }

    /// A failed write to stdout.
    pub fn output(error: io::Error) -> CliError {
        if error.kind() == io::ErrorKind::BrokenPipe {
            return CliError::OutputClosed;
        }
        CliError::unusable(format!("cannot write the output: {error}"))
    }
}

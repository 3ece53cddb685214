//! How a command fails: a message for a person that names the directory
//! (or file) involved, and an exit code.
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

    /// An engine error met while working on `dir`.
    pub fn engine(dir: &Path, error: actum::Error) -> CliError {
        use actum::Error;
        let message = match &error {
            Error::Locked { .. } => format!(
                "{} is in use by another process (an open engine holds its LOCK); run this \
                 again once that process has closed it",
                dir.display()
            ),
            // It names the directory itself.
            Error::NoDatabase { .. } => error.to_string(),
            Error::Corrupt { .. }
            | Error::NoValidManifest { .. }
            | Error::ForeignFile { .. }
            | Error::StateStore { .. } => format!(
                "cannot open {}: {error}\n(`actum verify {}` lists every damage it finds)",
                dir.display(),
                dir.display()
            ),
            Error::Io { source, .. } if source.kind() == io::ErrorKind::BrokenPipe => {
                return CliError::OutputClosed;
            }
            _ => format!("{}: {error}", dir.display()),
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

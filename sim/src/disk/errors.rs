//! The `io::Error`s the simulated disk returns, in one place so their kinds
//! and messages stay consistent, plus the stable code each contributes to the
//! trace hash.
//!
//! **Invariant:** every error the disk invents comes from a constructor here,
//! and [`result_code`] maps it to a fixed number (never to its `Debug` text,
//! which may change between Rust releases).

use std::io;

/// The message of every call failing after power loss (see
/// `SimDisk::set_crash_after_ops`).
pub const POWER_LOSS_MESSAGE: &str = "simulated power loss";

pub(crate) fn power_loss() -> io::Error {
    io::Error::other(POWER_LOSS_MESSAGE)
}

pub(crate) fn stale_handle(path: &str) -> io::Error {
    io::Error::other(format!(
        "simulated disk: handle to {path} was opened before a simulated crash and is dead"
    ))
}

pub(crate) fn eio(what: &str, path: &str) -> io::Error {
    io::Error::other(format!("simulated EIO during {what} on {path}"))
}

pub(crate) fn enospc(path: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::StorageFull,
        format!("simulated ENOSPC writing {path}"),
    )
}

pub(crate) fn not_found(path: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("simulated disk: {path} not found"),
    )
}

pub(crate) fn already_exists(path: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("simulated disk: {path} already exists"),
    )
}

pub(crate) fn not_a_directory(path: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotADirectory,
        format!("simulated disk: a component of {path} is a file"),
    )
}

pub(crate) fn is_a_directory(path: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::IsADirectory,
        format!("simulated disk: {path} is a directory"),
    )
}

pub(crate) fn invalid_path(path: &str, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("simulated disk: invalid path {path}: {why}"),
    )
}

pub(crate) fn would_block(path: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        format!("simulated disk: {path} is locked by another open database"),
    )
}

pub(crate) fn unexpected_eof(path: &str, offset_bytes: u64, len_bytes: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "simulated disk: read of {len_bytes} bytes at {offset_bytes} passes the end of {path}"
        ),
    )
}

/// A stable number for a call's outcome, fed into the trace hash.
pub(crate) fn result_code<T>(result: &io::Result<T>) -> u64 {
    let Err(error) = result else { return 0 };
    match error.kind() {
        io::ErrorKind::NotFound => 1,
        io::ErrorKind::AlreadyExists => 2,
        io::ErrorKind::NotADirectory => 3,
        io::ErrorKind::IsADirectory => 4,
        io::ErrorKind::InvalidInput => 5,
        io::ErrorKind::WouldBlock => 6,
        io::ErrorKind::UnexpectedEof => 7,
        io::ErrorKind::StorageFull => 8,
        io::ErrorKind::Other => 9,
        _ => 10,
    }
}

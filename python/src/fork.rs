//! An engine after `os.fork()`: the child has a copy of the parent's
//! memory (the engine's handles, its locks, its caches) but none of its
//! threads, and the database directory is the parent's. Every object over an
//! engine records the process that opened it; in any other process each of
//! its calls raises `EngineForked` before it touches anything, and dropping
//! it there lets the engine go without closing it (a close writes to the
//! parent's files).

use pyo3::prelude::*;

use crate::errors::EngineForked;

/// The id of the process running now.
pub(crate) fn this_process() -> u32 {
    std::process::id()
}

/// True if the object made in process `opened_pid` is used in another
/// (a forked child).
pub(crate) fn forked(opened_pid: u32) -> bool {
    opened_pid != this_process()
}

/// `EngineForked` if the engine at `path`, opened in `opened_pid`, is used
/// in another process.
pub(crate) fn check(opened_pid: u32, path: &str) -> PyResult<()> {
    if !forked(opened_pid) {
        return Ok(());
    }
    Err(EngineForked::new_err(format!(
        "the engine at {path} was opened in process {opened_pid}, and this is process {} \
         (forked from it): an engine does not survive a fork, and the child leaves the \
         parent's files and connections alone. Open the database in this process with \
         actum.Engine.open (a directory once the parent closed it: one process per \
         directory; a PostgreSQL URL at any time), or give the child a directory of its own",
        this_process()
    )))
}

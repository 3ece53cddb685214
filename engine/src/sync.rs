//! Synchronisation primitives, switched to loom's under `cfg(loom)` so the
//! concurrency kernels (group commit, command combining) can be
//! model-checked exhaustively.

#[cfg(loom)]
#[allow(unused_imports, reason = "not every kernel uses every primitive")]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread::{Thread, current, park};

#[cfg(not(loom))]
#[allow(unused_imports, reason = "not every kernel uses every primitive")]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread::{Thread, current, park};

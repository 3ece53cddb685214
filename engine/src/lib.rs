//! # actum
//!
//! An embedded storage engine that keeps an AI agent's books: a durable
//! journal, checkpoint store and side-effect ledger on a custom write-ahead
//! log, so a restarted worker resumes at the exact step and no side effect
//! fires twice.
//!
//! Start at [`Engine`] (open a directory, then create runs, take leases,
//! begin and finish effects, save checkpoints), with the domain types in
//! [`books`], the errors in [`Error`], the file system behind [`Storage`]
//! and time behind [`Clock`]. [`verify`] checks every checksum of a
//! database directory without writing.
//!
//! Inside, the crate is organised in layers (see `ARCHITECTURE.md`): the
//! segmented, checksummed write-ahead log (`wal`), the durable root updated
//! atomically (`manifest`), the pipeline joining them (`db`), the redb
//! tables the books are materialised in (`state`), and the pure
//! decide/apply core in [`books`]. Those layers are internal: they are not
//! part of the public API and redb's types do not appear in it. The
//! `internals` feature exposes them, for the simulator, the benches and the
//! format tests of this workspace only; nothing it exposes is covered by
//! semantic versioning.
//!
//! The crate root and [`engine`] name every type the public calls take or
//! return: [`EngineOptions`] and its [`DbOptions`] and [`WalOptions`],
//! [`WalStats`], [`engine::Recovery`].
#![cfg_attr(
    not(feature = "internals"),
    doc = r#"

Without `internals`, the layers cannot be reached:

```compile_fail
use actum::wal::Wal;
```

```compile_fail
use actum::state::StateStore;
```
"#
)]

// Loom's locks panic outside a loom model: the `loom` feature is for this
// crate's own model tests (engine/Cargo.toml), never for a build others link.
#[cfg(all(feature = "loom", not(test)))]
compile_error!(
    "the `loom` feature is for `cargo test -p actum --features loom --lib loom` only: \
     it swaps the engine's locks for loom's, which panic outside a loom model"
);

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExample;

/// docs/API.md's examples (the engine's step, the runtime), compiled and
/// run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/API.md")]
pub struct ApiExamples;

/// Declares the internal layers: public with the `internals` feature,
/// crate-private (their unused items allowed) without it.
macro_rules! internal_modules {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[cfg(feature = "internals")]
        pub mod $name;
        $(#[$doc])*
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports, reason = "reached by the internals feature's users only")]
        pub(crate) mod $name;
    )*};
}

pub mod books;
pub mod clock;
mod combine;
pub mod engine;
pub mod error;
mod hot;
pub mod ids;
pub mod operator;
#[cfg(feature = "postgres")]
pub mod pg;
pub mod planted;
pub mod runtime;
pub mod storage;
pub(crate) mod sync;
pub mod verify;

internal_modules! {
    db;
    manifest;
    state;
    wal;
}

pub use clock::{Clock, ManualClock, SystemClock};
pub use db::DbOptions;
pub use engine::{Engine, EngineOptions};
pub use error::{Error, RedbPanicked, Result};
pub use ids::{DatabaseId, Lsn, SegmentId};
pub use runtime::{RunCtx, Runtime};
pub use storage::{FsStorage, OpenMode, Storage, StorageFile};
pub use wal::{WalOptions, WalStats};

//! The storage seam: the only layer of actum that touches the file system.
//!
//! Every byte the engine reads or writes, and every directory operation it
//! depends on for durability, goes through [`Storage`] and [`StorageFile`].
//! [`FsStorage`] is the real implementation; the simulator in `actum-sim`
//! provides a faulty one, and `RedbBackend` (internal) lets the state
//! store's redb run on either.
//! [`ReadOnlyStorage`] wraps any of them so a database can be opened, and
//! recovered, in memory only, for an operator who only reads.
//!
//! **Invariant:** no module outside `storage/` names `std::fs`.

pub(crate) mod frozen;
mod fs;
pub(crate) mod page_sums;
mod read_only;
mod redb_backend;
mod traits;

pub use fs::FsStorage;
pub use read_only::ReadOnlyStorage;
#[cfg(feature = "internals")]
pub use redb_backend::RedbBackend;
#[cfg(not(feature = "internals"))]
pub(crate) use redb_backend::RedbBackend;
pub use traits::{DirLock, OpenMode, Storage, StorageFile};

//! The storage seam: the only layer of actum that touches the file system.
//!
//! Every byte the engine reads or writes, and every directory operation it
//! depends on for durability, goes through [`Storage`] and [`StorageFile`].
//! [`FsStorage`] is the real implementation; the simulator in `actum-sim`
//! provides a faulty one, and [`RedbBackend`] lets redb run on either.
//!
//! **Invariant:** no module outside `storage/` names `std::fs`.

mod fs;
mod redb_backend;
mod traits;

pub use fs::FsStorage;
pub use redb_backend::RedbBackend;
pub use traits::{DirLock, OpenMode, Storage, StorageFile};

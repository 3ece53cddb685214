//! The simulated disk: a `Storage` whose durability is exactly the POSIX
//! contract in `actum::storage` and no more, with named, seeded faults.
//!
//! Layout: `sim_disk` (the handle, directory calls), `file` (file calls and
//! write-path faults), `image` (one file's durable and volatile images),
//! `namespace` (directories), `crash` (what a power cut leaves), `rot` (bit
//! rot), `lock`, `faults` (the named probabilities), `errors`, `state`.

mod crash;
mod errors;
mod faults;
mod file;
mod image;
mod lock;
mod namespace;
mod rot;
mod sim_disk;
mod state;

#[cfg(test)]
mod tests;

pub use errors::POWER_LOSS_MESSAGE;
pub use faults::{FaultConfig, SECTOR_SIZE_BYTES};
pub use file::{FILE_SIZE_MAX_BYTES, SimFile};
pub use image::PENDING_CHANGES_MAX;
pub use lock::SimDirLock;
pub use sim_disk::{LOCK_FILE_NAME, SimDisk};
pub use state::RotRecord;

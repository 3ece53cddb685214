//! The manifest: the database's durable root.
//!
//! Two self-validating copies, `MANIFEST-0` and `MANIFEST-1`, written in
//! rotation; the valid copy with the highest sequence is current. This file
//! only declares the layer's modules and re-exports its public face.
//!
//! **Invariant:** at every instant at least one copy durably holds either
//! the current manifest or the one being installed.
//! **Boundary:** all I/O goes through [`crate::storage::Storage`].

mod choose;
mod codec;
mod content;
mod copy;
mod store;

#[cfg(test)]
mod damage_tests;
#[cfg(test)]
mod io_order_tests;
#[cfg(test)]
mod store_tests;
#[cfg(test)]
pub(crate) mod testkit;

pub use codec::{
    COPY_LEN_MAX, COPY_SLOT_BYTES, DecodeError, FORMAT_VERSION, MAGIC, decode, encode,
};
pub use content::{Manifest, STATE_FILE_NAME_MAX_BYTES};
pub use store::{ManifestReport, ManifestStore};

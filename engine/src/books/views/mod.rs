//! Layer 3: states over the traits: the in-memory books and the overlay
//! that holds writes over another state.

pub(crate) mod mem;
pub(crate) mod overlay;

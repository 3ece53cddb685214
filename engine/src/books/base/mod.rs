//! Layer 0: names, numbers and digests, which use nothing else of the books.

pub(crate) mod digest;
pub(crate) mod ids;
pub(crate) mod limits;

//! Layer 4: ops folded into a state (`apply`), with the audit line each op
//! leaves.

pub(crate) mod apply;
pub(crate) mod blobs;
pub(crate) mod describe;

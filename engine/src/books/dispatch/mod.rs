//! Layer 6: one entry point that sends each command to its rule.

pub(crate) mod decide;

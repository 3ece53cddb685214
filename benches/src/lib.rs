//! Shared helpers for actum benches.

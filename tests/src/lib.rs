//! Shared helpers for actum scenario tests.

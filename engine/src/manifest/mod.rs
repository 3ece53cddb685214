//! The manifest.

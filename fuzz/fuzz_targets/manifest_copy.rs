//! Fuzz target `manifest_copy`: a thin wrapper over `actum_sim::fuzz::manifest_copy`, which
//! documents the input layout and the invariants checked. The corpus in
//! `fuzz/corpus/manifest_copy/` is replayed on stable by `cargo test`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| actum_sim::fuzz::manifest_copy(data));

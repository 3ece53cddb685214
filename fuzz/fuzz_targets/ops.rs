//! Fuzz target `ops`: a thin wrapper over `actum_sim::fuzz::ops`, which
//! documents the input layout and the invariants checked. The corpus in
//! `fuzz/corpus/ops/` is replayed on stable by `cargo test`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| actum_sim::fuzz::ops(data));

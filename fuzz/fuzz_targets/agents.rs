//! Fuzz target `agents`: a thin wrapper over `actum_sim::fuzz::agents`, which
//! documents the input layout and the invariants checked. The corpus in
//! `fuzz/corpus/agents/` is replayed on stable by `cargo test`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| actum_sim::fuzz::agents(data));

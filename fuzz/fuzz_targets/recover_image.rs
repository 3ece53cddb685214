//! Fuzz target `recover_image`: a thin wrapper over `actum_sim::fuzz::recover_image`, which
//! documents the input layout and the invariants checked. The corpus in
//! `fuzz/corpus/recover_image/` is replayed on stable by `cargo test`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| actum_sim::fuzz::recover_image(data));

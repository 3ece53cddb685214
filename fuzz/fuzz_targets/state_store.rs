//! Fuzz target `state_store`: a thin wrapper over `actum_sim::fuzz::state_store`, which
//! documents the input layout and the invariants checked. The corpus in
//! `fuzz/corpus/state_store/` is replayed on stable by `cargo test`.
//!
//! The harness's own panic hook aborts at every panic, even one the
//! engine's guard catches (a panic inside redb on damaged pages, turned
//! into an `Err` as it should be); `quiet_caught_panics` replaces it, and a
//! panic that escapes the target still reaches the harness, which aborts.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: actum_sim::fuzz::state_store::quiet_caught_panics(),
    |data: &[u8]| actum_sim::fuzz::state_store(data)
);

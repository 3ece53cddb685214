//! Fuzz target `wal_record`: a thin wrapper over `actum_sim::fuzz::wal_record`, which
//! documents the input layout and the invariants checked. The corpus in
//! `fuzz/corpus/wal_record/` is replayed on stable by `cargo test`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| actum_sim::fuzz::wal_record(data));

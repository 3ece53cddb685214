//! Fuzz entry points: one function per cargo-fuzz target, each taking the
//! fuzzer's bytes.
//!
//! The targets in `fuzz/fuzz_targets/` are one-line wrappers around these
//! functions, and `tests/tests/fuzz_corpus_replay.rs` calls the same functions
//! on every committed corpus file on the stable toolchain, so a corpus entry
//! checks exactly the same code under `cargo test` as under the fuzzer.
//!
//! **Invariant:** an entry function panics only when an invariant of the
//! engine is violated (a decoder panicked, a pair check failed, recovery
//! invented data, a campaign seed failed); ordinary bad input, however
//! mangled, returns normally. [`corpus`] builds the seed inputs committed
//! under `fuzz/corpus/`.

mod agents;
mod bytes;
mod campaign;
pub mod corpus;
mod manifest_copy;
mod ops;
mod recover_image;
pub mod state_store;
mod wal_record;

pub use agents::agents;
pub use campaign::campaign;
pub use manifest_copy::manifest_copy;
pub use ops::ops;
pub use recover_image::recover_image;
pub use state_store::state_store;
pub use wal_record::wal_record;

/// The names of the fuzz targets, one per entry function above; each has a
/// `fuzz/fuzz_targets/<name>.rs` and a `fuzz/corpus/<name>/` directory.
pub const TARGETS: [&str; 7] = [
    "wal_record",
    "manifest_copy",
    "ops",
    "recover_image",
    "campaign",
    "agents",
    "state_store",
];

/// Runs the entry function of target `name` on `data`; `false` if there is
/// no target of that name.
pub fn run_target(name: &str, data: &[u8]) -> bool {
    match name {
        "wal_record" => wal_record(data),
        "manifest_copy" => manifest_copy(data),
        "ops" => ops(data),
        "recover_image" => recover_image(data),
        "campaign" => campaign(data),
        "agents" => agents(data),
        "state_store" => state_store(data),
        _ => return false,
    }
    true
}

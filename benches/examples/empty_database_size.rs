//! Creates an empty database with the default options, closes it, and
//! prints every file it left with its length and the total
//! (docs/PERFORMANCE.md, "A small database is small").
//!
//! Run: `cargo run --release -p actum-benches --example empty_database_size -- [DIR]`
//! (default: a new directory under the system temp dir, removed after).

use std::path::PathBuf;

use actum::{Engine, EngineOptions};
use actum_benches::files_under;

fn main() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = std::env::args()
        .nth(1)
        .map_or_else(|| temp.path().join("db"), PathBuf::from);
    let engine = Engine::open(&dir, EngineOptions::default()).expect("create");
    engine.close().expect("close");
    let listing = files_under(&dir);
    for (path, len) in &listing {
        println!(
            "{len:>10}  {}",
            path.strip_prefix(&dir).unwrap_or(path).display()
        );
    }
    let total: u64 = listing.iter().map(|(_, len)| len).sum();
    println!("{total:>10}  total ({:.1} KiB)", total as f64 / 1024.0);
}

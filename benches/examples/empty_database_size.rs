//! Creates an empty database with the default options, closes it, and
//! prints every file it left with its length and the total
//! (docs/PERFORMANCE.md, "A small database is small").
//!
//! Run: `cargo run --release -p actum-benches --example empty_database_size -- [DIR]`
//! (default: a new directory under the system temp dir, removed after).

use std::path::{Path, PathBuf};

use actum::{Engine, EngineOptions};

/// Every file under `dir` with its length, sorted by path.
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    // Bounded by the directory tree, a handful of entries.
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).expect("read_dir") {
            let entry = entry.expect("entry");
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                todo.push(entry.path());
            } else {
                found.push((entry.path(), meta.len()));
            }
        }
    }
    found.sort();
    found
}

fn main() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = std::env::args()
        .nth(1)
        .map_or_else(|| temp.path().join("db"), PathBuf::from);
    let engine = Engine::open(&dir, EngineOptions::default()).expect("create");
    engine.close().expect("close");
    let listing = files(&dir);
    for (path, len) in &listing {
        println!(
            "{len:>10}  {}",
            path.strip_prefix(&dir).unwrap_or(path).display()
        );
    }
    let total: u64 = listing.iter().map(|(_, len)| len).sum();
    println!("{total:>10}  total ({:.1} KiB)", total as f64 / 1024.0);
}

//! What one look at a live database costs the looker: builds the
//! `live_reader` bench's database (16 runs, the effect protocol on 16
//! writer threads, PROTOCOLS protocols, default 80,000: about what that
//! bench's engine holds by the end of a measurement), keeps its engine open
//! (the directory locked, as a live database is), and times LOOKS looks
//! (default 5) of each kind, alternating:
//!
//! - `snapshot`: `Engine::open_snapshot` and a read of every run, what
//!   `actum inspect` does on a live database (the bench's reader);
//! - `snapshot, page check off`: the same with `verify_state_on_open` off;
//! - `read the state store`: only reading `state.redb` into memory once
//!   (`std::fs::read`), less than any look that copies the files does (it
//!   copies the live WAL segments too).
//!
//! Prints the files' sizes, then the median wall time of each kind (the
//! looks run alone, so wall time is the looker's CPU and reads from the
//! page cache).
//!
//! Run: `cargo run --release -p actum-benches --example snapshot_cost -- [PROTOCOLS] [LOOKS]`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use actum::engine::{Engine, EngineOptions};
use actum_benches::files_under;
use actum_benches::protocol::{ProtocolEngine, look_at_live, run_protocols};

/// Writer threads, and runs (as in the `live_reader` bench).
const THREADS: usize = 16;

fn median(mut times: Vec<Duration>) -> f64 {
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    let mut args = std::env::args().skip(1);
    let protocols: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(80_000);
    let looks: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let setup = ProtocolEngine::new(THREADS);
    let built = run_protocols(&setup, THREADS, protocols);
    let dir = setup.dir().to_path_buf();
    println!(
        "{protocols} protocols on {THREADS} threads in {:.1} s; the engine stays open",
        built.as_secs_f64()
    );
    let listed = files_under(&dir);
    let mut total = 0;
    for (path, len) in &listed {
        let name = path.strip_prefix(&dir).unwrap_or(path).display();
        println!("  {name}: {len} bytes");
        total += len;
    }
    println!("  in all: {total} bytes");
    let first = Engine::open_snapshot(&dir, EngineOptions::default()).expect("a snapshot");
    let recovery = first.recovery();
    println!(
        "a snapshot: as of LSN {}, the state store at LSN {}, {} records replayed",
        recovery.durable_lsn.0, recovery.state_lsn_at_open.0, recovery.replayed_records
    );
    drop(first);
    let copied: Vec<PathBuf> = listed
        .iter()
        .filter(|(path, _)| path.extension().is_some_and(|e| e == "redb"))
        .map(|(path, _)| path.clone())
        .collect();
    let checked = EngineOptions::default();
    let unchecked = EngineOptions {
        verify_state_on_open: false,
        ..EngineOptions::default()
    };
    let (mut snap, mut snap_unchecked, mut read) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..looks {
        let at = Instant::now();
        assert_eq!(
            look_at_live(&dir, checked.clone()).expect("a look"),
            THREADS as u64
        );
        snap.push(at.elapsed());
        let at = Instant::now();
        assert_eq!(
            look_at_live(&dir, unchecked.clone()).expect("a look"),
            THREADS as u64
        );
        snap_unchecked.push(at.elapsed());
        let at = Instant::now();
        let bytes: usize = copied
            .iter()
            .map(|path| std::fs::read(path).expect("read a file").len())
            .sum();
        read.push(at.elapsed());
        assert!(bytes > 0);
    }
    println!("median of {looks} looks, ms:");
    println!(
        "  snapshot (page check on, the default): {:.1}",
        median(snap)
    );
    println!("  snapshot, page check off: {:.1}", median(snap_unchecked));
    println!("  read the state store once: {:.1}", median(read));
}

//! What `verify_state_on_open` costs: builds a database of RUNS completed
//! runs (default 100,000: a state store of about 1.1 GiB), each holding a
//! checkpoint of its own (a 4 KiB part) and one confirmed effect, closes it,
//! then times `Engine::open` OPENS times each way (default 3), alternating:
//! with the option off; on, after a clean close (the page sums it left let
//! each page be checked as it is read, so nothing is read at open); and on
//! with the sums file removed first, as after a crash or for a store copied
//! without it (redb's whole check, a read of every page). Each open is
//! closed cleanly, so it leaves sums for the next. The page cache is warm
//! after the build; where
//! this process may write `/proc/sys/vm/drop_caches`, one cold open of
//! each kind is timed too. Files go to `$ACTUM_BENCH_DIR` (default: the
//! system temp dir).
//!
//! Run: `cargo run --release -p actum-benches --example verify_on_open -- [RUNS] [OPENS]`

use std::time::{Duration, Instant};

use actum::books::{Outcome, Part, RunState, SaveCheckpoint, StepId, ToolClass, Transition};
use actum::engine::{Engine, EngineOptions, StepRequest, ToolSpec};
use actum_benches::protocol::{DEDUP_WINDOW_MS, leased_run};

/// Runs built when no count is given.
const RUNS_DEFAULT: u64 = 100_000;
/// Opens timed of each kind when no count is given.
const OPENS_DEFAULT: u32 = 3;
/// Writer threads building the database.
const THREADS: usize = 16;
/// Runs built per round, each round ending in a checkpoint.
const ROUND_RUNS: u64 = 20_000;
/// The checkpoint part each run stores (unique bytes, so not shared).
const PART_BYTES: usize = 4096;
/// Bytes in a MiB.
const MIB: u64 = 1 << 20;

/// Run `n`: created, leased, running, a checkpoint, one confirmed step,
/// completed.
fn one_run(engine: &Engine, n: u64, worker: usize) {
    let (run, guard) = leased_run(engine, &format!("run-{n:08}"), &format!("w{worker}"));
    let mut bytes = vec![0u8; PART_BYTES];
    for (i, chunk) in bytes.chunks_exact_mut(8).enumerate() {
        let word = (n << 16 | i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    let save = SaveCheckpoint {
        run: run.clone(),
        guard: guard.clone(),
        schema_version: 1,
        parts: vec![Part {
            name: "state".into(),
            bytes,
            extends: None,
            inline: false,
        }],
    };
    engine.save_checkpoint(save).expect("a checkpoint");
    let step = StepId::new("charge").expect("a valid step id");
    let request = StepRequest {
        guard: &guard,
        run: &run,
        step: &step,
        tool: ToolSpec {
            name: "stripe.charge".into(),
            class: ToolClass::Idempotent {
                dedup_window_ms: DEDUP_WINDOW_MS,
            },
        },
        args: &n.to_le_bytes(),
        rationale: "verify bench",
        compensation: None,
    };
    engine
        .step(&request, |_| Outcome::Confirmed {
            receipt: b"ch_0123456789".to_vec(),
        })
        .expect("a step");
    engine
        .transition(Transition {
            run,
            guard,
            to: RunState::Completed,
            expected_version: None,
            reason: "verify bench".into(),
        })
        .expect("complete");
}

/// One open and close of `dir`, with the page checks `verify`; its time.
fn open_once(dir: &std::path::Path, verify: bool) -> Duration {
    open_timed(dir, verify, false)
}

/// One open (closed cleanly after), timed; with `without_sums`, the page
/// sums of the last clean close are removed first.
fn open_timed(dir: &std::path::Path, verify: bool, without_sums: bool) -> Duration {
    if without_sums {
        std::fs::remove_file(dir.join("state.redb.sums")).expect("the sums of a clean close");
    }
    let options = EngineOptions {
        verify_state_on_open: verify,
        ..EngineOptions::default()
    };
    let start = Instant::now();
    let engine = Engine::open(dir, options).expect("open");
    let took = start.elapsed();
    drop(engine);
    took
}

/// Asks the kernel to drop its page cache; false where not permitted.
fn drop_page_cache() -> bool {
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs_wanted: u64 = args.get(1).map_or(RUNS_DEFAULT, |s| {
        s.parse().expect("RUNS must be a whole number")
    });
    let opens: u32 = args.get(2).map_or(OPENS_DEFAULT, |s| {
        s.parse().expect("OPENS must be a whole number")
    });
    println!("command: {}", args.join(" "));
    let dir = actum_benches::scratch_dir();
    let state = dir.path().join("state.redb");
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("open");
    let start = Instant::now();
    let mut runs = 0;
    // Bounded by RUNS: each round adds up to ROUND_RUNS runs.
    while runs < runs_wanted {
        let to = (runs + ROUND_RUNS).min(runs_wanted);
        actum_benches::spread(THREADS, runs, to, |n, worker| one_run(&engine, n, worker));
        runs = to;
        engine.checkpoint().expect("checkpoint");
        let size = std::fs::metadata(&state).map_or(0, |m| m.len());
        println!(
            "{runs} runs, state store file {} MiB while open, {:.0} s",
            size / MIB,
            start.elapsed().as_secs_f64()
        );
    }
    engine.close().expect("close");
    let size = std::fs::metadata(&state).expect("the state store").len();
    println!(
        "built: {runs} runs, state.redb {size} bytes ({} MiB)",
        size / MIB
    );
    let mut off = Vec::new();
    let mut on = Vec::new();
    let mut whole = Vec::new();
    for _ in 0..opens {
        off.push(open_once(dir.path(), false));
        on.push(open_once(dir.path(), true));
        whole.push(open_timed(dir.path(), true, true));
    }
    let mean = |times: &[Duration]| times.iter().sum::<Duration>() / times.len().max(1) as u32;
    println!(
        "warm page cache, {opens} opens each: verify off mean {:.2?} {off:.2?}",
        mean(&off)
    );
    println!(
        "warm page cache, {opens} opens each: verify on, pages checked as read  mean {:.2?} {on:.2?}",
        mean(&on)
    );
    println!(
        "warm page cache, {opens} opens each: verify on, no sums (whole check)  mean {:.2?} {whole:.2?}",
        mean(&whole)
    );
    if drop_page_cache() {
        let cold_off = open_once(dir.path(), false);
        drop_page_cache();
        let cold_on = open_once(dir.path(), true);
        drop_page_cache();
        let cold_whole = open_timed(dir.path(), true, true);
        println!(
            "cold page cache: verify off {cold_off:.2?}, verify on (as read) {cold_on:.2?}, \
             verify on (whole check) {cold_whole:.2?}"
        );
    } else {
        println!("cold page cache: not measured (/proc/sys/vm/drop_caches is not writable)");
    }
}

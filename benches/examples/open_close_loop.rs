//! Open and close one small database again and again, with the engine's default options (as
//! the Python binding opens it): `open_close_loop KIND COMMANDS PAIRS`, KIND one of `empty`
//! (a database just created, then closed), `clean` (COMMANDS single commands, then closed) or
//! `crashed` (COMMANDS single commands, then dropped without closing: every open replays them,
//! and since the loop drops each engine too, every open finds the same tail). Prints the mean
//! and the fastest open and close over PAIRS pairs. With `ACTUM_BENCH_DIR` set, the database is
//! built there and kept, for `strace` of a single pair.
//! `ACTUM_PROBE_VERIFY=0` turns `verify_state_on_open` off (the page check at open).
//! Run: `cargo run --release -p actum-benches --example open_close_loop -- clean 300 20`.

use std::path::Path;
use std::time::{Duration, Instant};

use actum::books::{CreateRun, RunId, digest_of};
use actum::{Engine, EngineOptions};

fn options() -> EngineOptions {
    let verify = std::env::var("ACTUM_PROBE_VERIFY").map_or(true, |v| v != "0");
    EngineOptions {
        verify_state_on_open: verify,
        ..EngineOptions::default()
    }
}

fn create(engine: &Engine, k: u64) {
    let name = format!("run-{k}");
    engine
        .create_run(CreateRun {
            run: RunId::new(name.as_str()).expect("a valid run id"),
            input_digest: digest_of(name.as_bytes()),
            agent_version: "probe 1.0".into(),
            trace_id: String::new(),
            parent: None,
            input: None,
        })
        .expect("create a run");
}

fn build(dir: &Path, kind: &str, commands: u64) {
    let engine = Engine::open(dir, options()).expect("create the database");
    for k in 0..commands {
        create(&engine, k);
    }
    match kind {
        "empty" | "clean" => engine.close().expect("close"),
        "crashed" => drop(engine),
        other => panic!("KIND is empty, clean or crashed, not {other}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, commands, pairs] = &args[..] else {
        panic!("usage: open_close_loop KIND COMMANDS PAIRS");
    };
    let commands: u64 = if kind == "empty" {
        0
    } else {
        commands.parse().expect("COMMANDS is a number")
    };
    let pairs: u32 = pairs.parse().expect("PAIRS is a number");
    let kept = std::env::var_os("ACTUM_BENCH_DIR").map(std::path::PathBuf::from);
    let scratch = actum_benches::scratch_dir();
    let dir = kept.as_deref().unwrap_or(scratch.path()).join("db");
    if !dir.exists() {
        build(&dir, kind, commands);
    }
    let (mut open_total, mut close_total) = (Duration::ZERO, Duration::ZERO);
    let (mut open_min, mut close_min) = (Duration::MAX, Duration::MAX);
    for _ in 0..pairs {
        let start = Instant::now();
        let engine = Engine::open(&dir, options()).expect("open");
        let opened = start.elapsed();
        let start = Instant::now();
        if kind == "crashed" {
            drop(engine);
        } else {
            engine.close().expect("close");
        }
        let closed = start.elapsed();
        open_total += opened;
        close_total += closed;
        open_min = open_min.min(opened);
        close_min = close_min.min(closed);
    }
    println!(
        "{kind} ({commands} commands), {pairs} pairs: open mean {:.2?} (min {:.2?}), \
         close mean {:.2?} (min {:.2?})",
        open_total / pairs.max(1),
        open_min,
        close_total / pairs.max(1),
        close_min
    );
}

//! Resident memory after many completed runs: the engine's memory is bounded by its working set,
//! because terminal runs (and settled ledger entries) leave memory at checkpoints.
//!
//! Creates RUNS runs (default 1,000,000), spread over THREADS threads (default 16); each run is
//! created, leased, moved to running, has one effect begun and finished, and is completed (six
//! durable commits). Automatic checkpoints run as commits accumulate, as in production. Prints
//! `VmRSS` and `VmHWM` from `/proc/self/status` and `Engine::runs_in_memory` after 10%, 50% and
//! 100% of the runs and after a final `Engine::checkpoint`, then the elapsed time and runs/s.
//! Files go to `$ACTUM_BENCH_DIR` (default: the system temp dir).
//!
//! With `retention` as a third argument, the engine prunes every run over after each automatic
//! checkpoint (`Retention { prune_after_ms: Some(0) }`), and the effect's tool is queryable
//! (no dedup window, which would keep each run for a day): the books and the state store then
//! hold the working set only, so whatever still grows is the process's, not the data's.
//!
//! Run: `cargo run --release -p actum-benches --example memory_after_runs -- [RUNS] [THREADS]
//! [retention]`

use std::path::Path;
use std::time::Instant;

use actum::books::{
    BeginEffect, FinishEffect, Guard, Outcome, RunId, RunState, ToolClass, Transition, digest_of,
};
use actum::engine::{Begun, Engine, EngineOptions, Retention};
use actum_benches::memory::Resident;
use actum_benches::protocol::{DEDUP_WINDOW_MS, leased_run, step_id};

/// Runs created when no count is given: the figure issue 8 asks about.
const RUNS_DEFAULT: u64 = 1_000_000;
/// Writer threads when no count is given: "a few".
const THREADS_DEFAULT: usize = 16;
/// Bytes in a MiB, for the report.
const MIB: f64 = 1024.0 * 1024.0;
/// Where memory is reported, as fractions of the runs: 10%, 50%, 100%.
const REPORT_AT_PERCENT: [u64; 3] = [10, 50, 100];

/// Moves `run` to `to` under `guard`.
fn transition(engine: &Engine, run: &RunId, guard: &Guard, to: RunState) {
    engine
        .transition(Transition {
            run: run.clone(),
            guard: guard.clone(),
            to,
            expected_version: None,
            reason: "memory bench".into(),
        })
        .expect("transition");
}

/// Run number `n`, from creation to completion, on worker `worker`; its effect's tool is
/// `tool_class`.
fn one_run(engine: &Engine, n: u64, worker: usize, tool_class: ToolClass) {
    // Created, leased and started (running).
    let (run, guard) = leased_run(engine, &format!("run-{n}"), &format!("w{worker}"));
    let begun = engine
        .begin_effect(BeginEffect {
            run: run.clone(),
            step: step_id(0),
            guard: guard.clone(),
            tool: "stripe.charge".into(),
            tool_class,
            args_digest: digest_of(&n.to_le_bytes()),
            args: None,
            rationale: "memory bench".into(),
            compensation: None,
        })
        .expect("begin_effect");
    let Begun::Proceed { key, .. } = begun else {
        panic!("a fresh run's step did not proceed: {begun:?}")
    };
    engine
        .finish_effect(FinishEffect {
            key,
            guard: guard.clone(),
            outcome: Outcome::Confirmed {
                receipt: b"ch_0123456789".to_vec(),
            },
        })
        .expect("finish_effect");
    transition(engine, &run, &guard, RunState::Completed);
}

/// Bytes of the files under `dir`, recursively (0 for what cannot be read: this is a report).
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => bytes_under(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Prints one report line: progress, resident memory, runs in memory, files on disk.
fn report(label: &str, engine: &Engine, dir: &Path, runs_done: u64, start: Instant) {
    let elapsed = start.elapsed().as_secs_f64();
    let memory =
        Resident::now().map_or_else(|| "no /proc/self/status".to_string(), |r| r.to_string());
    println!(
        "{label}: {runs_done} runs completed, {elapsed:.1} s, {memory}, runs in memory {}, \
         database directory {:.1} MiB",
        engine.runs_in_memory(),
        bytes_under(dir) as f64 / MIB
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs: u64 = args.get(1).map_or(RUNS_DEFAULT, |s| {
        s.parse().expect("RUNS must be a whole number")
    });
    let threads: usize = args.get(2).map_or(THREADS_DEFAULT, |s| {
        s.parse().expect("THREADS must be a whole number")
    });
    let retention = match args.get(3).map(String::as_str) {
        None => false,
        Some("retention") => true,
        Some(other) => panic!("the third argument is `retention` or nothing, not {other:?}"),
    };
    assert!(runs > 0 && threads > 0, "at least one run and one thread");
    println!("command: {}", args.join(" "));
    println!(
        "{runs} runs over {threads} threads, 6 durable commits per run, retention {}",
        if retention { "on" } else { "off" }
    );
    let (options, tool_class) = if retention {
        let options = EngineOptions {
            retention: Retention {
                prune_after_ms: Some(0),
            },
            ..EngineOptions::default()
        };
        (options, ToolClass::Queryable)
    } else {
        let tool_class = ToolClass::Idempotent {
            dedup_window_ms: DEDUP_WINDOW_MS,
        };
        (EngineOptions::default(), tool_class)
    };
    let dir = actum_benches::scratch_dir();
    let engine = Engine::open(dir.path(), options).expect("opening the engine");
    report("opened", &engine, dir.path(), 0, Instant::now());
    let stats_before = engine.wal_stats();
    let start = Instant::now();
    let mut done = 0;
    for percent in REPORT_AT_PERCENT {
        let upto = runs * percent / 100;
        actum_benches::spread(threads, done, upto, |n, worker| {
            one_run(&engine, n, worker, tool_class)
        });
        done = upto;
        report(
            &format!("after {percent}%"),
            &engine,
            dir.path(),
            done,
            start,
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    engine.checkpoint().expect("final checkpoint");
    report("after the checkpoint", &engine, dir.path(), done, start);
    let stats = engine.wal_stats();
    let commits = stats.appends - stats_before.appends;
    let fsyncs = stats.fsyncs - stats_before.fsyncs;
    println!(
        "{done} runs in {elapsed:.1} s: {:.0} runs/s, {:.0} commits/s, {commits} commits in \
         {fsyncs} fsyncs ({:.1} per fsync)",
        done as f64 / elapsed,
        commits as f64 / elapsed,
        commits as f64 / fsyncs.max(1) as f64
    );
    engine.close().expect("closing the engine");
}

//! Open time after a crash: against the history (which must not matter) and against what was
//! logged since the last checkpoint (which is what an open replays).
//!
//! - `open_after_crash/history/N`: a database whose checkpointed history holds N commands
//!   (10 thousand, 100 thousand, a million), then a whole default checkpoint interval of
//!   commands after the checkpoint (2,048: what an open replays at most under the defaults,
//!   give or take the commands logged while a checkpoint writes); one
//!   iteration is one `Engine::open` after the engine was dropped without closing.
//! - `open_after_crash/tail/T`: a 10,000-command history, then T commands after the checkpoint
//!   (0 to 16,384; the default checkpoint interval is 2,048 commits).
//!
//! Engine defaults throughout (16 MiB segments) but for `verify_state_on_open`, off: the bench
//! times recovery, and the page check is timed by the `verify_on_open` example; automatic
//! checkpoints off while the tail is written. Building the million-command history takes about
//! a minute; the bench prints what it built (history, tail commands and bytes, records
//! replayed) to stderr. With `--test` (quick mode, `.ci/run`) it builds small databases only.
//! Run: `cargo bench -p actum-benches --bench open_time`.

use std::time::{Duration, Instant};

use actum::engine::CHECKPOINT_EVERY_RECORDS_DEFAULT;
use actum_benches::open::{build, open_once};
use actum_benches::scratch_dir;
use criterion::{BenchmarkId, Criterion, SamplingMode};

/// True under `cargo bench -- --test` (each bench run once, to keep it building and running).
fn quick() -> bool {
    std::env::args().any(|arg| arg == "--test")
}

fn bench_open(c: &mut Criterion, axis: &str, cases: &[(u64, u64)]) {
    let mut group = c.benchmark_group("open_after_crash");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(2))
        .sampling_mode(SamplingMode::Flat);
    for &(history, tail) in cases {
        let dir = scratch_dir();
        let built = build(dir.path(), history, tail);
        let (_, replayed) = open_once(dir.path());
        eprintln!(
            "open_after_crash/{axis}: history {} commands, tail {} commands ({} WAL bytes), \
             {replayed} records replayed; built in {:.1?}",
            built.history_commands, built.tail_commands, built.tail_bytes, built.took
        );
        let param = if axis == "history" { history } else { tail };
        group.bench_with_input(BenchmarkId::new(axis, param), &param, |b, _| {
            b.iter_custom(|opens| {
                let mut total = Duration::ZERO;
                for _ in 0..opens {
                    total += open_once(dir.path()).0;
                }
                total
            });
        });
    }
    group.finish();
}

fn open_vs_history(c: &mut Criterion) {
    let cases: &[(u64, u64)] = if quick() {
        &[(1_000, 100), (10_000, 100)]
    } else {
        // The tail is a whole default checkpoint interval: the most an open after a crash
        // replays under the defaults.
        let tail = CHECKPOINT_EVERY_RECORDS_DEFAULT;
        &[(10_000, tail), (100_000, tail), (1_000_000, tail)]
    };
    bench_open(c, "history", cases);
}

fn open_vs_tail(c: &mut Criterion) {
    let cases: &[(u64, u64)] = if quick() {
        &[(1_000, 0), (1_000, 100)]
    } else {
        &[
            (10_000, 0),
            (10_000, 1_024),
            (10_000, 2_048),
            (10_000, 4_096),
            (10_000, 16_384),
        ]
    };
    bench_open(c, "tail", cases);
}

fn main() {
    let start = Instant::now();
    let mut criterion = Criterion::default().configure_from_args();
    open_vs_history(&mut criterion);
    open_vs_tail(&mut criterion);
    criterion.final_summary();
    eprintln!("open_time: {:.1?} in all", start.elapsed());
}

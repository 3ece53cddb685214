//! Does a reader of a live database slow its writer? The effect protocol at 16 writer threads
//! (`begin_effect` then `finish_effect`, as in `effect_protocol`) alone; with a reader that
//! every 100 ms opens a snapshot of the same directory (`Engine::open_snapshot`, what `actum
//! inspect` does on a live database that serves no operator channel) and reads every run; and
//! with a reader that every 100 ms asks the engine for its look through the operator channel
//! (`operator::channel::look`, what `actum inspect` does when the engine serves it): in the
//! same run, interleaved. Issue 24's target: within 10%.
//!
//! After each system its summary goes to stderr: commits per fsync, and for the ones with a
//! reader how many looks it took and how many failed.
//!
//! Run: `cargo bench -p actum-benches --bench live_reader`
//! (docs/PERFORMANCE.md, "A reader beside a live writer", has the figures).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use actum::engine::EngineOptions;
use actum::operator::channel;
use actum_benches::DurableLog;
use actum_benches::protocol::{ProtocolEngine, look_at_live};
use actum_benches::runner::bench_system;
use criterion::{Criterion, SamplingMode, Throughput};

/// Writer threads.
const THREADS: usize = 16;
/// How often the reader takes a snapshot.
const READ_EVERY: Duration = Duration::from_millis(100);

/// The protocol engine with a reader beside it, stopped when dropped.
struct WithReader {
    engine: ProtocolEngine,
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    /// Microseconds the reader spent looking, in all.
    looking_us: Arc<AtomicU64>,
    reader: Option<JoinHandle<()>>,
}

/// How the reader looks.
#[derive(Clone, Copy, Debug)]
enum Reading {
    /// A snapshot of the directory, then every run.
    Snapshot,
    /// The engine's look, through its operator channel.
    Served,
}

impl WithReader {
    fn new(threads: usize, reading: Reading) -> WithReader {
        let engine = ProtocolEngine::new(threads);
        let dir: PathBuf = engine.dir().to_path_buf();
        if let Reading::Served = reading {
            engine
                .engine
                .serve_operators()
                .expect("serve the operator channel");
        }
        let (stop, reads, failed) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let (s, r, f) = (Arc::clone(&stop), Arc::clone(&reads), Arc::clone(&failed));
        let looking_us = Arc::new(AtomicU64::new(0));
        let spent = Arc::clone(&looking_us);
        // Named, so a profile of the bench can tell the reader's samples
        // apart (`perf report --comm live-reader`).
        let reader = std::thread::Builder::new()
            .name("live-reader".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let start = std::time::Instant::now();
                    let looked = match reading {
                        Reading::Snapshot => look_at_live(&dir, EngineOptions::default()).is_ok(),
                        Reading::Served => matches!(channel::look(&dir), Ok(Some(_))),
                    };
                    let took = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
                    spent.fetch_add(took, Ordering::Relaxed);
                    if looked {
                        r.fetch_add(1, Ordering::Relaxed);
                    } else {
                        f.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(READ_EVERY);
                }
            })
            .expect("spawn the reader thread");
        WithReader {
            engine,
            stop,
            reads,
            failed,
            looking_us,
            reader: Some(reader),
        }
    }
}

impl Drop for WithReader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl DurableLog for WithReader {
    type Writer<'a> = usize;

    fn writer(&self) -> usize {
        self.engine.writer()
    }

    fn summary(&self) -> Option<String> {
        Some(format!(
            "{}; {} looks beside it, {} failed, {:.2} ms a look",
            self.engine.summary().unwrap_or_default(),
            self.reads.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.looking_us.load(Ordering::Relaxed) as f64
                / 1e3
                / (self.reads.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed)).max(1)
                    as f64
        ))
    }

    fn commit(&self, t: &mut usize, ticket: u64) {
        self.engine.commit(t, ticket);
    }
}

fn live_reader(c: &mut Criterion) {
    let mut group = c.benchmark_group("live_reader");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(1));
    // Four times each, interleaved, so drift on a shared machine hits all alike: two systems
    // back to back differ by up to 15% here with nothing changed, so one pair judges nothing.
    for round in ["a", "b", "c", "d"] {
        bench_system(&mut group, &format!("alone_{round}"), THREADS, || {
            ProtocolEngine::new(THREADS)
        });
        bench_system(&mut group, &format!("with_reader_{round}"), THREADS, || {
            WithReader::new(THREADS, Reading::Snapshot)
        });
        bench_system(
            &mut group,
            &format!("with_served_reader_{round}"),
            THREADS,
            || WithReader::new(THREADS, Reading::Served),
        );
    }
    group.finish();
}

criterion::criterion_group!(benches, live_reader);
criterion::criterion_main!(benches);

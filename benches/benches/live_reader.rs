//! Does a reader of a live database slow its writer? The effect protocol at 16 writer threads
//! (`begin_effect` then `finish_effect`, as in `effect_protocol`) alone, and with a reader that
//! every 100 ms opens a snapshot of the same directory (`Engine::open_snapshot`, what `actum
//! inspect` does on a live database) and reads every run, in the same run, interleaved.
//! Issue 24's target: within 10%.
//!
//! After each system its summary goes to stderr: commits per fsync, and for the one with the
//! reader how many snapshots it took and how many it retried.
//!
//! Run: `cargo bench -p actum-benches --bench live_reader`
//! (docs/PERFORMANCE.md, "A reader beside a live writer", has the figures).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use actum::engine::EngineOptions;
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
    reader: Option<JoinHandle<()>>,
}

impl WithReader {
    fn new(threads: usize) -> WithReader {
        let engine = ProtocolEngine::new(threads);
        let dir: PathBuf = engine.dir().to_path_buf();
        let (stop, reads, failed) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let (s, r, f) = (Arc::clone(&stop), Arc::clone(&reads), Arc::clone(&failed));
        // Named, so a profile of the bench can tell the reader's samples
        // apart (`perf report --comm live-reader`).
        let reader = std::thread::Builder::new()
            .name("live-reader".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    match look_at_live(&dir, EngineOptions::default()) {
                        Ok(_) => r.fetch_add(1, Ordering::Relaxed),
                        Err(_) => f.fetch_add(1, Ordering::Relaxed),
                    };
                    std::thread::sleep(READ_EVERY);
                }
            })
            .expect("spawn the reader thread");
        WithReader {
            engine,
            stop,
            reads,
            failed,
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
            "{}; {} snapshots read beside it, {} failed",
            self.engine.summary().unwrap_or_default(),
            self.reads.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed)
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
    // Twice each, interleaved, so drift on a shared machine hits both alike.
    for round in ["a", "b"] {
        bench_system(&mut group, &format!("alone_{round}"), THREADS, || {
            ProtocolEngine::new(THREADS)
        });
        bench_system(&mut group, &format!("with_reader_{round}"), THREADS, || {
            WithReader::new(THREADS)
        });
    }
    group.finish();
}

criterion::criterion_group!(benches, live_reader);
criterion::criterion_main!(benches);

//! Runs `records` commits spread over `threads` writer threads and times them.
//!
//! Threads are spawned and their per-thread state built before a start barrier; the clock runs
//! from the first thread leaving the barrier to the last thread finishing its final commit, so
//! neither thread spawn nor connection setup is in the measurement. Writers draw tickets from a
//! shared counter until `records` are taken, which keeps all threads busy until the end (no tail
//! where one thread finishes a static share alone).

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::DurableLog;

/// Commits `records` records through `log` from `threads` threads; returns the wall time of the
/// timed region. `first_ticket` lets a caller keep tickets (keys) unique across samples.
pub fn run_writers<L: DurableLog>(
    log: &L,
    threads: usize,
    first_ticket: u64,
    records: u64,
) -> Duration {
    assert!(threads > 0, "at least one writer thread");
    log.before_sample();
    let next = AtomicU64::new(0);
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut writer = log.writer();
                    barrier.wait();
                    let start = Instant::now();
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n >= records {
                            break;
                        }
                        log.commit(&mut writer, first_ticket + n);
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a writer thread panicked"))
            .collect()
    });
    assert!(
        next.load(Ordering::Relaxed) >= records,
        "every record was committed"
    );
    let start = spans
        .iter()
        .map(|s| s.0)
        .min()
        .expect("at least one thread");
    let end = spans
        .iter()
        .map(|s| s.1)
        .max()
        .expect("at least one thread");
    end.duration_since(start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    struct Counter(AtomicU64);

    impl DurableLog for Counter {
        type Writer<'a> = ();
        fn writer(&self) {}
        fn commit(&self, _: &mut (), _: u64) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn every_record_is_committed_once() {
        let log = Counter(AtomicU64::new(0));
        run_writers(&log, 4, 0, 1000);
        assert_eq!(log.0.load(Ordering::Relaxed), 1000);
    }
}

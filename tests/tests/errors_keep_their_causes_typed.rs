//! A failure keeps its cause as a typed error, not as text: an fsync that
//! fails under a command halts the engine with `Halted`, whose cause is the
//! log's `Poisoned`, whose cause is the `Io` error naming the segment file;
//! every later command gets the same cause, and `source()` walks the chain
//! down to the operating system's error.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::path::Path;
use std::sync::Arc;

use actum::{Engine, EngineOptions, Error, Storage};
use actum_sim::{FaultConfig, Rng, SimClock, SimDisk};
use support::*;

const DIR: &str = "/db";

fn open(disk: &SimDisk, clock: &SimClock) -> actum::Result<Engine> {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    Engine::open_with(
        storage,
        Arc::new(clock.clone()),
        Path::new(DIR),
        EngineOptions::default(),
    )
}

/// The chain of `err`'s sources, outermost first, as their messages.
fn chain(err: &Error) -> Vec<String> {
    let mut out = vec![err.to_string()];
    let mut next = std::error::Error::source(err);
    while let Some(cause) = next {
        out.push(cause.to_string());
        next = cause.source();
    }
    out
}

#[test]
fn a_failed_fsync_halts_the_engine_with_its_io_error_as_the_typed_cause() {
    let disk = SimDisk::new(Rng::new(7), FaultConfig::crash_only());
    let clock = SimClock::new(START_MS);
    let engine = open(&disk, &clock).unwrap();
    engine.create_run(create_cmd("before")).unwrap();
    // From here every fsync of a file with unsynced writes fails (EIO).
    disk.set_faults(FaultConfig {
        sync_eio_ppm: 1_000_000,
        ..FaultConfig::crash_only()
    });
    let first = engine.create_run(create_cmd("during")).unwrap_err();
    let Error::Halted {
        after,
        cause: Some(cause),
    } = &first
    else {
        panic!("{first:?}")
    };
    assert_eq!(*after, "a failed log append");
    let Error::Poisoned { cause: flush } = cause.as_ref() else {
        panic!("{cause:?}")
    };
    let Error::Io { path, source, .. } = flush.as_ref() else {
        panic!("{flush:?}")
    };
    assert!(path.extension().is_some_and(|e| e == "wal"), "{path:?}");
    assert!(source.to_string().contains("simulated EIO"), "{source}");
    let links = chain(&first);
    assert_eq!(links.len(), 4, "{links:#?}");
    assert_eq!(links[3], source.to_string());
    // Every later command is refused with the same cause, even once the
    // disk is well again: the engine must be reopened.
    disk.stop_faults();
    let later = engine.create_run(create_cmd("after")).unwrap_err();
    let Error::Halted {
        cause: Some(again), ..
    } = &later
    else {
        panic!("{later:?}")
    };
    assert!(Arc::ptr_eq(cause, again), "{first:?}\n{later:?}");
    drop(engine);
    let engine = open(&disk, &clock).unwrap();
    assert!(engine.run(&rid("before")).unwrap().is_some());
    assert!(engine.run(&rid("after")).unwrap().is_none());
}

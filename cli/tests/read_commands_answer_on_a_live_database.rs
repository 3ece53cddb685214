//! `actum inspect`, `export`, `stuck` and `verify` on a directory an engine
//! in this process holds and keeps committing to (runs created and
//! completed, checkpoints every few records): each answers from a
//! consistent snapshot, says the LSN it is as of, and sees at least what
//! was acknowledged before it started. And `inspect` on an engine that
//! serves its operator channel: the engine's own look, exactly the books
//! at the LSN it names (the runs ended meanwhile read from the state store,
//! the others from memory).

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};

use actum::books::{CreateRun, RunId, digest_of};
use actum::{Engine, EngineOptions};
use support::*;

/// Sets its flag when dropped, so the writer stops even when an assertion
/// of the reader fails (the scope would otherwise wait for it forever).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The LSN in "as of LSN N (live database", if `text` holds it.
fn as_of(text: &str) -> Option<u64> {
    let rest = &text[text.find("as of LSN ")? + "as of LSN ".len()..];
    let (n, tail) = rest.split_once(' ')?;
    tail.starts_with("(live database").then(|| n.parse().ok())?
}

/// Creates run number `n` named with `prefix`.
fn create(engine: &Engine, prefix: &str, n: u64) -> RunId {
    let run = RunId::new(format!("{prefix}-{n:05}")).unwrap();
    engine
        .create_run(CreateRun {
            run: run.clone(),
            input_digest: digest_of(&n.to_le_bytes()),
            agent_version: "1".into(),
            trace_id: "t".into(),
            parent: None,
            input: None,
        })
        .unwrap();
    run
}

/// Calls `step` with 0, 1, 2, ... a millisecond apart (a steady load, not
/// a flood: a checkpoint every few milliseconds, and a store that stays
/// small) until `stop` is set or `RUNS_MAX` steps; returns how many.
fn write_until(stop: &AtomicBool, mut step: impl FnMut(u64)) -> u64 {
    let mut n = 0u64;
    // Bounded by the reader, which stops it, and by RUNS_MAX.
    while !stop.load(Ordering::SeqCst) && n < RUNS_MAX {
        step(n);
        n += 1;
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    n
}

/// `actum inspect --json` on the live database in `dir`, which `engine`
/// writes: its answer, and the LSN it names, which must hold everything
/// acknowledged before it ran.
fn inspect_live(dir: &std::path::Path, engine: &Engine) -> (serde_json::Value, u64) {
    let acknowledged = engine.durable_lsn().0;
    let inspected = actum_on(dir, &["inspect", "{}", "--json"]);
    assert_eq!(code(&inspected), 0, "{}", stderr(&inspected));
    let json: serde_json::Value = serde_json::from_str(&stdout(&inspected)).unwrap();
    let live = json["live_lsn"].as_u64().expect("read as a live database");
    assert!(live >= acknowledged, "{live} < {acknowledged}");
    assert_eq!(json["durable_lsn"].as_u64(), Some(live));
    (json, live)
}

/// Runs the writer creates at most.
const RUNS_MAX: u64 = 20_000;

#[test]
fn read_commands_answer_on_a_database_a_live_engine_is_writing() {
    let dir = tempfile::tempdir().unwrap();
    let options = EngineOptions {
        checkpoint_every_records: 8,
        ..EngineOptions::default()
    };
    let engine = open_retrying(|| Engine::open(dir.path(), options.clone()));
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            write_until(&stop, |n| {
                create(&engine, "live", n);
            })
        });
        let _stop = StopOnDrop(&stop);
        for _ in 0..3 {
            let (json, live) = inspect_live(dir.path(), &engine);
            assert_eq!(json["served"], false, "{json}");
            // Each record created one run.
            assert_eq!(json["runs"].as_u64(), Some(live));

            let acknowledged = engine.durable_lsn().0;
            let exported = actum_on(dir.path(), &["export", "{}", "--all"]);
            assert_eq!(code(&exported), 0, "{}", stderr(&exported));
            let lsn = as_of(&stderr(&exported)).expect("export names its LSN on stderr");
            assert!(lsn >= acknowledged);
            let lines = stdout(&exported);
            assert_eq!(
                lines.lines().count() as u64,
                lsn,
                "one journal line per run"
            );

            let stuck = actum_on(dir.path(), &["stuck", "{}", "--older-than", "1h"]);
            assert_eq!(code(&stuck), 0, "{}", stderr(&stuck));
            assert!(as_of(&stdout(&stuck)).is_some(), "{}", stdout(&stuck));

            let verified = actum_on(dir.path(), &["verify", "{}"]);
            assert_eq!(code(&verified), 0, "{}", stdout(&verified));
            assert!(as_of(&stdout(&verified)).is_some(), "{}", stdout(&verified));
            assert!(
                stdout(&verified).contains("intact"),
                "{}",
                stdout(&verified)
            );
        }
        drop(_stop);
        assert!(writer.join().unwrap() > 0);
    });
    engine.close().unwrap();
}

/// The runs, and the cancelled ones among them, once the writer of
/// `inspect_asks_a_live_engine_that_serves_its_channel` has made `lsn`
/// records: run `n` created (one record), then cancelled if `n` is even
/// (one more).
fn runs_at(lsn: u64) -> (u64, u64) {
    let (mut at, mut runs, mut cancelled) = (0u64, 0u64, 0u64);
    // Bounded by `lsn`: each turn moves `at` on.
    while at < lsn {
        at += 1;
        runs += 1;
        if (runs - 1).is_multiple_of(2) && at < lsn {
            at += 1;
            cancelled += 1;
        }
    }
    (runs, cancelled)
}

#[test]
fn inspect_asks_a_live_engine_that_serves_its_channel() {
    let dir = tempfile::tempdir().unwrap();
    let options = EngineOptions {
        checkpoint_every_records: 8,
        ..EngineOptions::default()
    };
    let engine = std::sync::Arc::new(open_retrying(|| Engine::open(dir.path(), options.clone())));
    engine.serve_operators().unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            write_until(&stop, |n| {
                let run = create(&engine, "served", n);
                // Every other run ends at once: a checkpoint lets it go
                // from memory, so the look reads it from the state store.
                if n.is_multiple_of(2) {
                    engine
                        .operate(&run, actum::books::OperatorAction::Cancel, "test", "ends")
                        .unwrap();
                }
            })
        });
        let _stop = StopOnDrop(&stop);
        for _ in 0..5 {
            let (json, live) = inspect_live(dir.path(), &engine);
            assert_eq!(json["served"], true, "{json}");
            // The books at exactly that LSN: the look is consistent.
            let (runs, cancelled) = runs_at(live);
            assert_eq!(json["runs"].as_u64(), Some(runs), "at {live}: {json}");
            assert_eq!(
                json["runs_by_state"]["cancelled"].as_u64(),
                Some(cancelled),
                "at {live}: {json}"
            );
            assert_eq!(
                json["runs_by_state"]["pending"].as_u64(),
                Some(runs - cancelled),
                "at {live}: {json}"
            );
            let text = stdout(&actum_on(dir.path(), &["inspect", "{}"]));
            assert!(text.contains("through its operator channel"), "{text}");
        }
        drop(_stop);
        assert!(writer.join().unwrap() > 0);
    });
}

#[test]
fn inspect_takes_a_snapshot_when_the_live_engines_channel_gives_no_look() {
    // A socket where the channel's is that accepts and hangs up: the look
    // through it fails, and inspect answers from a snapshot, saying why.
    let dir = tempfile::tempdir().unwrap();
    let engine = open_retrying(|| Engine::open(dir.path(), EngineOptions::default()));
    create(&engine, "held", 1);
    let socket = actum::operator::channel::socket_path(dir.path());
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let hang_up = std::thread::spawn(move || {
        if let Ok((stream, _)) = listener.accept() {
            drop(stream);
        }
    });
    let inspected = actum_on(dir.path(), &["inspect", "{}", "--json"]);
    hang_up.join().unwrap();
    assert_eq!(code(&inspected), 0, "{}", stderr(&inspected));
    assert!(
        stderr(&inspected).contains("reading a snapshot instead"),
        "{}",
        stderr(&inspected)
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&inspected)).unwrap();
    assert_eq!(json["served"], false, "{json}");
    assert_eq!(json["runs"].as_u64(), Some(1), "{json}");
    engine.close().unwrap();
}

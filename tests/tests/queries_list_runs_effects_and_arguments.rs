//! The queries a runtime needs, against the books' own tables: runs by
//! state, a page at a time, over runs in memory and runs a checkpoint moved
//! to the state store alone; a run's effects in the order they were
//! intended; and the arguments an intent was written with, after a
//! restart.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::sync::Arc;

use actum::books::{BooksRead, RunState, ToolClass, Transition};
use actum::engine::{StepResult, ToolOutcome};
use actum::{Error, ManualClock};
use support::*;

/// Pages through every run in `state` with pages of `limit`.
fn all_pages(engine: &actum::Engine, state: Option<RunState>, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let page = engine.runs(state, after.as_ref(), limit).unwrap();
        assert!(page.len() <= limit);
        ids.extend(page.iter().map(|r| r.id.as_str().to_string()));
        if page.len() < limit {
            return ids;
        }
        after = page.last().map(|r| r.id.clone());
    }
}

#[test]
fn runs_page_by_state_over_memory_and_the_state_store() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    // 700 runs: every third completed, every seventh left pending, the
    // rest running. A checkpoint moves the finished ones out of memory.
    for n in 0..700 {
        let run = format!("run-{n:04}");
        if n % 7 == 0 {
            engine.create_run(create_cmd(&run)).unwrap();
            continue;
        }
        let grant = create_and_lease(&engine, &run, "w");
        if n % 3 == 0 {
            engine
                .transition(Transition {
                    run: rid(&run),
                    guard: grant.guard,
                    to: RunState::Completed,
                    expected_version: None,
                    reason: "done".into(),
                })
                .unwrap();
        }
        if n == 350 {
            engine.checkpoint().unwrap();
        }
    }
    let books = engine.snapshot().unwrap();
    for state in [
        None,
        Some(RunState::Pending),
        Some(RunState::Running),
        Some(RunState::Completed),
        Some(RunState::Failed),
    ] {
        let expected: Vec<String> = books
            .runs()
            .filter(|r| state.is_none_or(|s| r.state == s))
            .map(|r| r.id.as_str().to_string())
            .collect();
        for limit in [1, 7, 256, 1_000] {
            assert_eq!(
                all_pages(&engine, state, limit),
                expected,
                "{state:?} in pages of {limit}"
            );
        }
    }
    assert!(!all_pages(&engine, Some(RunState::Completed), 50).is_empty());
    // Completed runs pruned since the checkpoint are still in the state
    // store: pages skip them, in every size, over runs of them in a row.
    let done: Vec<_> = books
        .runs()
        .filter(|r| r.state == RunState::Completed && r.id.as_str() < "run-0400")
        .map(|r| r.id.clone())
        .collect();
    assert!(done.len() > 100);
    engine.prune_runs(done.clone(), 0).unwrap();
    let books = engine.snapshot().unwrap();
    let expected: Vec<String> = books.runs().map(|r| r.id.as_str().to_string()).collect();
    assert_eq!(expected.len(), 700 - done.len());
    for limit in [1, 2, 7, 256, 1_000] {
        assert_eq!(
            all_pages(&engine, None, limit),
            expected,
            "pages of {limit}"
        );
    }
    assert!(matches!(
        engine.runs(None, None, 0),
        Err(Error::InvalidCommand { .. })
    ));
    assert!(matches!(
        engine.runs(None, None, 1_001),
        Err(Error::InvalidCommand { .. })
    ));
}

#[test]
fn a_runs_effects_come_in_intent_order_and_its_arguments_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let key_of = |result: StepResult| match result {
        StepResult::Done { key, .. } | StepResult::Failed { key, .. } => key,
        other => panic!("{other:?}"),
    };
    let (keys, argss) = {
        let engine = open_fs(dir.path(), &clock);
        let grant = create_and_lease(&engine, "shop-1", "w");
        let run = rid("shop-1");
        let mut keys = Vec::new();
        let mut argss = Vec::new();
        // Steps named against alphabetical order, a retried step, and a
        // checkpoint between them, so the order is the intents', and some
        // entries are read back from the state store.
        for (step, outcome) in [
            (
                "ship",
                ToolOutcome::Confirmed {
                    receipt: b"parcel".to_vec(),
                },
            ),
            (
                "charge",
                ToolOutcome::Failed {
                    retryable: true,
                    reason: "503".into(),
                },
            ),
            (
                "charge",
                ToolOutcome::Confirmed {
                    receipt: b"ch_1".to_vec(),
                },
            ),
            (
                "audit",
                ToolOutcome::Confirmed {
                    receipt: b"ok".to_vec(),
                },
            ),
        ] {
            clock.advance_ms(5);
            let args = format!("{step} for shop-1 #{}", keys.len()).into_bytes();
            let step_id = sid(step);
            let request = request(
                &grant.guard,
                &run,
                &step_id,
                "tool",
                ToolClass::Queryable,
                if step == "charge" {
                    b"charge for shop-1"
                } else {
                    &args
                },
            );
            let result = engine.step(&request, |_| outcome.clone()).unwrap();
            keys.push(key_of(result));
            argss.push(request.args.to_vec());
            if keys.len() == 2 {
                engine.checkpoint().unwrap();
            }
        }
        let listed: Vec<_> = engine
            .effects(&run)
            .unwrap()
            .into_iter()
            .map(|e| e.key)
            .collect();
        assert_eq!(listed, keys);
        (keys, argss)
    };
    // After a restart (a crash: no close), from the state store and the log.
    let engine = open_fs(dir.path(), &clock);
    let listed: Vec<_> = engine
        .effects(&rid("shop-1"))
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(listed, keys);
    for (key, args) in keys.iter().zip(&argss) {
        assert_eq!(
            engine.effect_args(key).unwrap().as_ref(),
            Some(args),
            "{key}"
        );
    }
    // The two attempts of one step share their arguments, stored once.
    let books = engine.snapshot().unwrap();
    assert!(books.blob_exists(&actum::books::digest_of(b"charge for shop-1")));
    assert!(matches!(
        engine.effects(&rid("no-such-run")),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn the_log_reads_back_as_commits_and_a_range_let_go_is_named() {
    use actum::books::{CreateRun, Op, RunId, digest_of};
    use actum::engine::{Engine, EngineOptions};
    let dir = tempfile::tempdir().unwrap();
    let mut options = EngineOptions::default();
    options.db.wal.segment_size_bytes = 64 * 1024;
    options.db.wal.max_record_bytes = 16 * 1024;
    let engine = Engine::open(dir.path(), options).unwrap();
    let start = engine.durable_lsn();
    let create = |n: u32| {
        engine
            .create_run(CreateRun {
                run: RunId::new(format!("r{n}")).unwrap(),
                input_digest: digest_of(&n.to_le_bytes()),
                agent_version: "1".into(),
                trace_id: "t".repeat(200),
                parent: None,
                input: None,
            })
            .unwrap();
    };
    for n in 0..5 {
        create(n);
    }
    let commits = engine.read_log(start, 3).unwrap();
    let lsns: Vec<u64> = commits.iter().map(|c| c.lsn.0).collect();
    assert_eq!(
        lsns,
        [start.0 + 1, start.0 + 2, start.0 + 3],
        "in order, at most max"
    );
    let rest = engine.read_log(commits[2].lsn, 100).unwrap();
    assert_eq!(rest.len(), 2);
    assert!(matches!(&rest[1].ops[0], Op::RunCreated { run } if run.id.as_str() == "r4"));
    // Enough records to fill segments, then checkpoints let them go.
    for n in 5..2_000 {
        create(n);
    }
    engine.checkpoint().unwrap();
    engine.checkpoint().unwrap();
    match engine.read_log(start, 10) {
        Err(actum::Error::LsnOutOfRange { first, .. }) => assert!(first.0 > start.0 + 1),
        other => panic!("expected LsnOutOfRange, got {other:?}"),
    }
}

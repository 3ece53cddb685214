//! `actum retry` puts a failed run back to pending from a checkpoint and
//! says what it reopened; `actum fork` starts a new run from a run's
//! checkpoint; both journal who and why, and a refusal names the run and
//! why, with exit code 2, changing nothing.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::path::Path;

use actum::books::{
    CreateRun, Part, RunId, RunState, SaveCheckpoint, Transition, WorkerId, digest_of,
};
use actum::engine::{Engine, EngineOptions};
use support::*;

/// A database holding one failed run, `f-1`, with two checkpoints.
fn failed_db() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let run = RunId::new("f-1").unwrap();
    engine
        .create_run(CreateRun {
            run: run.clone(),
            input_digest: digest_of(b"in"),
            agent_version: "plan@1".into(),
            trace_id: "t".into(),
            parent: None,
            input: Some(b"in".to_vec()),
        })
        .unwrap();
    let lease = engine
        .claim_next(&WorkerId::new("w").unwrap(), 60_000)
        .unwrap()
        .unwrap();
    let move_to = |to, why: &str| {
        engine
            .transition(Transition {
                run: run.clone(),
                guard: lease.guard.clone(),
                to,
                expected_version: None,
                reason: why.into(),
            })
            .unwrap();
    };
    move_to(RunState::Running, "starts");
    for state in [&b"draft"[..], b"searched"] {
        engine
            .save_checkpoint(SaveCheckpoint {
                run: run.clone(),
                guard: lease.guard.clone(),
                schema_version: 1,
                parts: vec![Part {
                    name: "state".into(),
                    bytes: state.to_vec(),
                    extends: None,
                    inline: false,
                }],
            })
            .unwrap();
    }
    move_to(RunState::Failed, "the model's plan did not parse");
    engine.close().unwrap();
    dir
}

fn state_of(db: &Path, run: &str) -> Option<RunState> {
    let engine = open_retrying(|| Engine::open_read_only(db, EngineOptions::default()));
    engine
        .run(&RunId::new(run).unwrap())
        .unwrap()
        .map(|r| r.state)
}

#[test]
fn retry_puts_a_failed_run_back_from_a_checkpoint_and_journals_it() {
    let db = failed_db();
    let who = ["--operator", "ops-anna", "--reason", "parser fixed"];
    let missing = actum_on(
        db.path(),
        &[
            &["retry", "{}", "--run", "f-1", "--checkpoint", "9"][..],
            &who,
        ]
        .concat(),
    );
    assert_eq!(code(&missing), 2, "{}", stdout(&missing));
    assert!(
        stderr(&missing).contains("checkpoint 9 of run f-1"),
        "{}",
        stderr(&missing)
    );
    assert_eq!(state_of(db.path(), "f-1"), Some(RunState::Failed));
    let retried = actum_on(
        db.path(),
        &[
            &["retry", "{}", "--run", "f-1", "--checkpoint", "1"][..],
            &who,
        ]
        .concat(),
    );
    assert_eq!(code(&retried), 0, "{}", stderr(&retried));
    let said = stdout(&retried);
    assert!(
        said.contains("run f-1: failed -> pending")
            && said.contains("checkpoint 1, saved again as the newest"),
        "{said}"
    );
    assert_eq!(state_of(db.path(), "f-1"), Some(RunState::Pending));
    // Pending now: a second retry is refused, naming the run and why.
    let again = actum_on(
        db.path(),
        &[&["retry", "{}", "--run", "f-1", "--json"][..], &who].concat(),
    );
    assert_eq!(code(&again), 2, "{}", stdout(&again));
    assert!(
        stderr(&again).contains("run f-1 cannot be retried: it is pending, not failed"),
        "{}",
        stderr(&again)
    );
    let audit = stdout(&actum_on(db.path(), &["export", "{}", "--run", "f-1"]));
    assert!(
        audit.contains("retried by operator ops-anna, from checkpoint 1")
            && audit.contains("parser fixed"),
        "{audit}"
    );
    assert_eq!(code(&actum_on(db.path(), &["verify", "{}"])), 0);
}

#[test]
fn fork_starts_a_new_run_from_a_checkpoint_once() {
    let db = failed_db();
    let args = [
        "fork",
        "{}",
        "--run",
        "f-1",
        "--into",
        "f-2",
        "--checkpoint",
        "1",
        "--operator",
        "ops-anna",
        "--reason",
        "another branch",
        "--json",
    ];
    let forked = actum_on(db.path(), &args);
    assert_eq!(code(&forked), 0, "{}", stderr(&forked));
    let value: serde_json::Value = serde_json::from_str(&stdout(&forked)).unwrap();
    assert_eq!(value["created"], true, "{value}");
    assert_eq!(value["checkpoint"], 1, "{value}");
    assert_eq!(state_of(db.path(), "f-2"), Some(RunState::Pending));
    assert_eq!(state_of(db.path(), "f-1"), Some(RunState::Failed));
    let again = actum_on(db.path(), &args);
    let value: serde_json::Value = serde_json::from_str(&stdout(&again)).unwrap();
    assert_eq!(value["created"], false, "{value}");
    let audit = stdout(&actum_on(db.path(), &["export", "{}", "--run", "f-2"]));
    assert!(
        audit.contains("forked from run f-1 by operator ops-anna at its checkpoint 1"),
        "{audit}"
    );
}

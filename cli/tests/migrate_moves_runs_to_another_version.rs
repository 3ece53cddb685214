//! `actum migrate` moves the runs of an agent version that are not over,
//! or the runs named, to another version, says what it moved, journals
//! who and why, and names each run it could not move.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::path::Path;

use actum::books::RunId;
use actum::engine::{Engine, EngineOptions};
use support::*;

fn agent_of(db: &Path, run: &str) -> String {
    let engine = open_retrying(|| Engine::open_read_only(db, EngineOptions::default()));
    engine
        .run(&RunId::new(run).unwrap())
        .unwrap()
        .unwrap()
        .agent_version
}

fn migrate(db: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "migrate",
        "{}",
        "--kind",
        "shop",
        "--operator",
        "ops-anna",
        "--reason",
        "v2 ships faster",
    ];
    args.extend_from_slice(extra);
    actum_on(db, &args)
}

#[test]
fn migrate_moves_every_run_of_the_version_not_over_and_journals_it() {
    let db = known_db();
    // shop@1 holds a completed run and a pending one: only the pending moves.
    let moved = migrate(db.path(), &["--from", "1", "--to", "2"]);
    assert_eq!(code(&moved), 0, "{}", stderr(&moved));
    let said = stdout(&moved);
    assert!(
        said.contains(&format!("run {}: shop@1 -> shop@2", runs::PENDING)),
        "{said}"
    );
    assert!(!said.contains(runs::DONE), "{said}");
    assert_eq!(agent_of(db.path(), runs::PENDING), "shop@2");
    assert_eq!(agent_of(db.path(), runs::DONE), "shop@1");
    let audit = stdout(&actum_on(
        db.path(),
        &["export", "{}", "--run", runs::PENDING],
    ));
    assert!(audit.contains("shop@1 to shop@2"), "{audit}");
    assert!(
        audit.contains("ops-anna") && audit.contains("v2 ships faster"),
        "{audit}"
    );
    // Again: nothing is left at shop@1 that is not over.
    let again = migrate(db.path(), &["--from", "1", "--to", "2"]);
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert!(
        stdout(&again).contains("nothing moved"),
        "{}",
        stdout(&again)
    );
    // inspect counts the runs per kind and version.
    let inspected = stdout(&actum_on(db.path(), &["inspect", "{}", "--json"]));
    let value: serde_json::Value = serde_json::from_str(&inspected).unwrap();
    assert_eq!(
        value["runs_by_agent"]["shop@1"]["not_over"], 0,
        "{inspected}"
    );
    assert_eq!(value["runs_by_agent"]["shop@1"]["runs"], 1, "{inspected}");
    assert_eq!(code(&actum_on(db.path(), &["verify", "{}"])), 0);
}

#[test]
fn migrate_of_named_runs_moves_those_and_names_each_refusal() {
    let db = known_db();
    let moved = migrate(
        db.path(),
        &[
            "--from",
            "2",
            "--to",
            "3",
            "--run",
            runs::PAUSED,
            "--run",
            runs::CANCELLED,
            "--run",
            runs::PENDING,
            "--json",
        ],
    );
    // The paused run moves; the cancelled one is over and the pending one
    // is at shop@1: each refusal names its run.
    assert_eq!(code(&moved), 2, "{}", stderr(&moved));
    let value: serde_json::Value = serde_json::from_str(&stdout(&moved)).unwrap();
    assert_eq!(value["runs"][0]["moved"], true, "{value}");
    assert_eq!(value["runs"][1]["moved"], false, "{value}");
    let refused = stderr(&moved);
    assert!(
        refused.contains(&format!("run {}", runs::CANCELLED)) && refused.contains("final"),
        "{refused}"
    );
    assert!(
        refused.contains(&format!("run {}", runs::PENDING)) && refused.contains("shop@1"),
        "{refused}"
    );
    assert_eq!(agent_of(db.path(), runs::PAUSED), "shop@3");
    assert_eq!(agent_of(db.path(), runs::PENDING), "shop@1");
    // A name with '@' is a usage error, before anything is opened.
    let bad = migrate(db.path(), &["--from", "shop@1", "--to", "2"]);
    assert_eq!(code(&bad), 2);
    assert!(stderr(&bad).contains("--from"), "{}", stderr(&bad));
}

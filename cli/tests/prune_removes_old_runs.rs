//! `actum prune --older-than` removes the runs over for that long (and no
//! younger one, and no run not over), says how many, and `runs` no longer
//! lists them.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use actum::books::RunId;
use actum::engine::{Engine, EngineOptions};
use serde_json::Value;
use support::*;

fn exists(db: &std::path::Path, run: &str) -> bool {
    let engine = open_retrying(|| Engine::open_read_only(db, EngineOptions::default()));
    engine.run(&RunId::new(run).unwrap()).unwrap().is_some()
}

#[test]
fn prune_removes_the_runs_over_long_enough_and_no_other() {
    let db = known_db();
    // The history is three hours old: nothing is over for four.
    let out = actum_on(db.path(), &["prune", "{}", "--older-than", "4h", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(said["pruned"], 0);
    assert!(exists(db.path(), runs::DONE) && exists(db.path(), runs::CANCELLED));

    let out = actum_on(db.path(), &["prune", "{}", "--older-than", "1h"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("2 run(s) over for 1h or longer left the books"),
        "{}",
        stdout(&out)
    );
    assert!(!exists(db.path(), runs::DONE));
    assert!(!exists(db.path(), runs::CANCELLED));
    // Runs not over stay.
    for run in [
        runs::PENDING,
        runs::PAUSED,
        runs::INTENDED,
        runs::UNKNOWN,
        runs::WAITING,
    ] {
        assert!(exists(db.path(), run), "{run}");
    }
    let listed: Value =
        serde_json::from_str(&stdout(&actum_on(db.path(), &["runs", "{}", "--json"]))).unwrap();
    assert_eq!(listed["runs"].as_array().unwrap().len(), 5);
    let bad = actum_on(db.path(), &["prune", "{}"]);
    assert_eq!(code(&bad), 2, "--older-than is required");
}

//! The writes an operator makes from the command line: pause, resume and
//! cancel move the run (and say so), journaled with the operator and the
//! reason; reconcile settles an unknown or pending effect and wakes no one
//! it should not; a refused write says why and changes nothing.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::path::Path;

use actum::books::{EffectKey, EffectStatus, RunId, RunState};
use actum::engine::{Engine, EngineOptions};
use support::*;

fn state_of(db: &Path, run: &str) -> RunState {
    let engine = open_retrying(|| Engine::open_read_only(db, EngineOptions::default()));
    engine
        .run(&RunId::new(run).unwrap())
        .unwrap()
        .unwrap()
        .state
}

fn operate(db: &Path, verb: &str, run: &str) -> std::process::Output {
    actum_on(
        db,
        &[
            verb,
            "{}",
            "--run",
            run,
            "--operator",
            "ops-anna",
            "--reason",
            "fraud check",
        ],
    )
}

#[test]
fn pause_resume_and_cancel_move_the_run_and_journal_who_and_why() {
    let db = known_db();
    let paused = operate(db.path(), "pause", runs::PENDING);
    assert_eq!(code(&paused), 0, "{}", stderr(&paused));
    assert!(
        stdout(&paused).contains("pending -> paused"),
        "{}",
        stdout(&paused)
    );
    // The process that built the database is gone: the first writable open
    // released the live leases of r-intended and r-unknown, and says so.
    assert!(
        stderr(&paused).contains("released 2 lease(s)"),
        "{}",
        stderr(&paused)
    );
    assert_eq!(state_of(db.path(), runs::PENDING), RunState::Paused);
    let again = operate(db.path(), "pause", runs::PENDING);
    assert!(
        stdout(&again).contains("nothing changed"),
        "{}",
        stdout(&again)
    );
    assert!(!stderr(&again).contains("released"), "{}", stderr(&again));
    let resumed = operate(db.path(), "resume", runs::PENDING);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    assert_eq!(state_of(db.path(), runs::PENDING), RunState::Running);
    let cancelled = actum_on(
        db.path(),
        &[
            "cancel",
            "{}",
            "--run",
            runs::WAITING,
            "--operator",
            "ops-anna",
            "--reason",
            "dup",
            "--json",
        ],
    );
    let said: serde_json::Value = serde_json::from_str(&stdout(&cancelled)).unwrap();
    assert_eq!(said["before"], "waiting_tool");
    assert_eq!(said["after"], "cancelled");
    assert_eq!(said["changed"], true);
    assert_eq!(state_of(db.path(), runs::WAITING), RunState::Cancelled);
    let audit = stdout(&actum_on(
        db.path(),
        &["export", "{}", "--run", runs::PENDING],
    ));
    assert!(audit.contains("ops-anna"), "{audit}");
    assert!(audit.contains("fraud check"), "{audit}");
    // A refused move says why, and the books stay as they were.
    let refused = operate(db.path(), "resume", runs::CANCELLED);
    assert_eq!(code(&refused), 2);
    assert!(stderr(&refused).contains("final"), "{}", stderr(&refused));
    let missing = operate(db.path(), "pause", "r-nope");
    assert_eq!(code(&missing), 2);
    assert!(
        stderr(&missing).contains("run r-nope"),
        "{}",
        stderr(&missing)
    );
    // Each write closed the database cleanly: it verifies intact.
    assert_eq!(code(&actum_on(db.path(), &["verify", "{}"])), 0);
}

#[test]
fn reconcile_settles_an_unknown_and_a_pending_effect_from_what_the_operator_found() {
    let db = known_db();
    let confirmed = actum_on(
        db.path(),
        &[
            "reconcile",
            "{}",
            "--key",
            UNKNOWN_KEY,
            "--outcome",
            "confirmed",
            "--receipt",
            "msg-77",
            "--operator",
            "ops-anna",
            "--reason",
            "seen in the mail log",
        ],
    );
    assert_eq!(code(&confirmed), 0, "{}", stderr(&confirmed));
    assert!(
        stdout(&confirmed).contains("unknown -> confirmed"),
        "{}",
        stdout(&confirmed)
    );
    let failed = actum_on(
        db.path(),
        &[
            "reconcile",
            "{}",
            "--key",
            INTENDED_KEY,
            "--outcome",
            "failed",
            "--error",
            "declined",
            "--retryable",
            "--operator",
            "ops-anna",
            "--reason",
            "psp says no",
        ],
    );
    assert_eq!(code(&failed), 0, "{}", stderr(&failed));
    assert!(
        stdout(&failed).contains("intended -> failed"),
        "{}",
        stdout(&failed)
    );
    let engine = open_retrying(|| Engine::open_read_only(db.path(), EngineOptions::default()));
    let effect = |key: &str| {
        engine
            .effect(&EffectKey::parse(key).unwrap())
            .unwrap()
            .unwrap()
            .status
    };
    assert_eq!(
        effect(UNKNOWN_KEY),
        EffectStatus::Confirmed {
            receipt: b"msg-77".to_vec()
        }
    );
    assert!(matches!(
        effect(INTENDED_KEY),
        EffectStatus::Failed {
            retryable: true,
            ..
        }
    ));
    let audit = engine.audit(&RunId::new(runs::UNKNOWN).unwrap()).unwrap();
    let last = audit.last().unwrap();
    assert_eq!(last.what.to_string(), format!("{UNKNOWN_KEY} confirmed"));
    assert_eq!(
        last.why,
        "reply from operator ops-anna: seen in the mail log"
    );
    drop(engine);
    // Settled already: a second reconcile with another outcome is refused.
    let twice = actum_on(
        db.path(),
        &[
            "reconcile",
            "{}",
            "--key",
            UNKNOWN_KEY,
            "--outcome",
            "failed",
            "--error",
            "no",
            "--operator",
            "ops-anna",
            "--reason",
            "oops",
        ],
    );
    assert_eq!(code(&twice), 2);
    assert!(stderr(&twice).contains(UNKNOWN_KEY), "{}", stderr(&twice));
    // The arguments are checked before anything is opened.
    let no_receipt = actum_on(
        db.path(),
        &[
            "reconcile",
            "{}",
            "--key",
            UNKNOWN_KEY,
            "--outcome",
            "confirmed",
            "--operator",
            "ops-anna",
            "--reason",
            "x",
        ],
    );
    assert_eq!(code(&no_receipt), 2);
    assert!(
        stderr(&no_receipt).contains("--receipt"),
        "{}",
        stderr(&no_receipt)
    );
}

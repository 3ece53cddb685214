//! The operator's answers from the command line: `approve` and `reject`
//! decide the approval a run waits for only when given the digest of the
//! arguments it waits on (a wrong or short one changes nothing), journaled
//! with the approver and the note; `signal` ends a wait for its name;
//! `budget` sets the limits the engine then reads.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::path::Path;

use actum::books::{RunId, StepId, WaitStatus, digest_of};
use actum::engine::{Engine, EngineOptions};
use support::*;

const ARGS: &[u8] = b"refund 120 EUR to order-17";

/// A database with runs `a1` and `a2` waiting for an approval of `ARGS` by
/// role `finance`; and the known runs (`r-waiting` waits for signal `paid`).
fn db_with_approvals() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let engine = build_known(dir.path());
    for run in ["a1", "a2"] {
        wait_for_approval(&engine, run, ARGS, "a refund over 100 EUR");
    }
    engine.close().unwrap();
    dir
}

fn last_wait(db: &Path, run: &str) -> actum::books::WaitRecord {
    let engine = open_retrying(|| Engine::open_read_only(db, EngineOptions::default()));
    let book = engine.waits(&RunId::new(run).unwrap()).unwrap();
    book.waits.last().unwrap().clone()
}

fn decide(db: &Path, verb: &str, run: &str, digest: &str) -> std::process::Output {
    actum_on(
        db,
        &[
            verb,
            "{}",
            "--run",
            run,
            "--digest",
            digest,
            "--approver",
            "bea",
            "--note",
            "checked the order",
        ],
    )
}

#[test]
fn approve_and_reject_are_bound_to_the_digest_show_printed() {
    let db = db_with_approvals();
    let full = digest_of(ARGS).to_string();
    let shown = &full[..8];
    // show prints the digest the operator then gives.
    let story = stdout(&actum_on(db.path(), &["show", "{}", "a1"]));
    assert!(
        story.contains(&format!("approval by finance of args {shown}")),
        "{story}"
    );

    let before = hash_tree(db.path());
    let other = digest_of(b"refund 1200 EUR to order-17").to_string();
    for wrong in [&other[..8], &full[..7], "not-hex!"] {
        let out = decide(db.path(), "approve", "a1", wrong);
        assert_eq!(code(&out), 2, "{wrong}: {}", stdout(&out));
        assert!(
            stderr(&out).contains("nothing was changed") || stderr(&out).contains("hex digits"),
            "{}",
            stderr(&out)
        );
    }
    assert_eq!(
        hash_tree(db.path()),
        before,
        "a refused answer wrote nothing"
    );
    assert!(last_wait(db.path(), "a1").is_open());

    let out = decide(db.path(), "approve", "a1", shown);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("step refund approved by bea as finance"),
        "{}",
        stdout(&out)
    );
    let wait = last_wait(db.path(), "a1");
    assert_eq!(
        wait.status,
        WaitStatus::Approved {
            approver: "bea".into(),
            note: "checked the order".into()
        }
    );
    // Answered once: a second answer finds no open approval.
    let again = decide(db.path(), "approve", "a1", shown);
    assert_eq!(code(&again), 2);
    assert!(
        stderr(&again).contains("waits for no approval"),
        "{}",
        stderr(&again)
    );

    let out = decide(db.path(), "reject", "a2", &full.to_uppercase());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(matches!(
        last_wait(db.path(), "a2").status,
        WaitStatus::Rejected { .. }
    ));
    let nobody = decide(db.path(), "approve", "r-nobody", shown);
    assert_eq!(code(&nobody), 2);
    assert!(
        stderr(&nobody).contains("run r-nobody does not exist"),
        "{}",
        stderr(&nobody)
    );
}

#[test]
fn signal_ends_the_wait_for_its_name_and_budget_sets_the_limits() {
    let db = known_db();
    let out = actum_on(
        db.path(),
        &[
            "signal",
            "{}",
            "--run",
            runs::WAITING,
            "--name",
            "paid",
            "--payload",
            "tx-9",
            "--sender",
            "ops-anna",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("ended the wait of step hook"),
        "{}",
        stdout(&out)
    );
    let WaitStatus::Signalled { signal } = last_wait(db.path(), runs::WAITING).status else {
        panic!("the wait took the signal")
    };
    assert_eq!(
        (signal.payload.as_slice(), signal.sender.as_str()),
        (&b"tx-9"[..], "ops-anna")
    );

    let out = actum_on(
        db.path(),
        &[
            "budget",
            "{}",
            "--run",
            runs::PENDING,
            "--cost-micros",
            "5000",
            "--tool-calls",
            "3",
            "--wall",
            "2h",
            "--by",
            "ops-anna",
            "--reason",
            "pilot",
            "--json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let engine = open_retrying(|| Engine::open_read_only(db.path(), EngineOptions::default()));
    let limits = engine
        .budget(&RunId::new(runs::PENDING).unwrap())
        .unwrap()
        .limits
        .unwrap();
    assert_eq!(
        (
            limits.cost_micros,
            limits.tool_calls,
            limits.wall_ms,
            limits.tokens_in
        ),
        (Some(5000), Some(3), Some(7_200_000), None)
    );
    let audit = engine.audit(&RunId::new(runs::PENDING).unwrap()).unwrap();
    assert!(
        audit
            .iter()
            .any(|e| e.what.to_string().starts_with("budget set by ops-anna"))
    );
}

#[test]
fn a_run_its_budget_paused_is_stuck_with_the_limit_and_resume_warns_it_pauses_again() {
    use actum::books::{BudgetLimits, Charge, Cost, Reserved};
    let dir = tempfile::tempdir().unwrap();
    let engine = build_known(dir.path());
    let (run, grant) = running_run(&engine, "b1", "pay@1");
    let limits = BudgetLimits {
        cost_micros: Some(100),
        ..BudgetLimits::default()
    };
    engine.set_budget(&run, limits, "ops", "pilot").unwrap();
    let charge = Charge::Effect {
        step: StepId::new("pay").unwrap(),
    };
    let spent = engine
        .reserve(&run, &grant.guard, charge, Cost::tool_call(100))
        .unwrap();
    assert!(matches!(spent, Reserved::Granted { .. }), "{spent:?}");
    // Held, not yet spent: it counts against the limit all the same.
    let refused = engine
        .reserve(
            &run,
            &grant.guard,
            Charge::Effect {
                step: StepId::new("pay-again").unwrap(),
            },
            Cost::tool_call(1),
        )
        .unwrap();
    assert!(matches!(refused, Reserved::Exhausted { .. }), "{refused:?}");
    engine.close().unwrap();

    let rows: serde_json::Value = serde_json::from_str(&stdout(&actum_on(
        dir.path(),
        &["stuck", "{}", "--older-than", "0s", "--json"],
    )))
    .unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == "b1")
        .unwrap();
    assert_eq!(
        (&row["kind"], &row["at"]),
        (&"paused".into(), &"budget".into())
    );
    let what = row["what"].as_str().unwrap();
    assert!(
        what.starts_with("budget exhausted") && what.contains("cost_micros 100 of 100"),
        "{what}"
    );

    let out = actum_on(
        dir.path(),
        &[
            "resume",
            "{}",
            "--run",
            "b1",
            "--operator",
            "ops",
            "--reason",
            "try",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("will pause again at its next call unless the budget is raised"),
        "{}",
        stderr(&out)
    );
    // A resume of a run with room says nothing of the kind.
    let out = actum_on(
        dir.path(),
        &[
            "resume",
            "{}",
            "--run",
            runs::PAUSED,
            "--operator",
            "ops",
            "--reason",
            "ok",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stderr(&out).contains("pause again"), "{}", stderr(&out));
    // abandon reaches the engine's saga abandonment, which only a
    // compensating run takes.
    let out = actum_on(
        dir.path(),
        &[
            "abandon",
            "{}",
            "--run",
            "b1",
            "--operator",
            "ops",
            "--reason",
            "x",
        ],
    );
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("only a compensating run's saga can be abandoned"),
        "{}",
        stderr(&out)
    );
}

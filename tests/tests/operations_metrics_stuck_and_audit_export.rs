//! What an operator reads: the metrics snapshot counts what the engine
//! decided (receipts served, resends, queries, unknowns, resumes, wait
//! times), the sweep finds the runs stuck in a wait or on an unknown
//! effect past an SLA and no other, and the audit export is the journal,
//! line for line, as JSON.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::sync::Arc;

use actum::ManualClock;
use actum::books::{ToolClass, WaitFor};
use actum::engine::{StepResult, StuckReason, ToolOutcome};
use support::*;

const HOUR_MS: u64 = 3_600_000;

#[test]
fn metrics_count_what_was_decided_and_the_sweep_finds_what_is_stuck() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);

    // Run a: one step, then the same step again (a receipt from the books).
    let a = create_and_lease(&engine, "a", "w1");
    let charge = |args: &'static [u8]| {
        move |_: &actum::engine::EffectCtx| ToolOutcome::Confirmed {
            receipt: args.to_vec(),
        }
    };
    let (run_a, pay) = (rid("a"), sid("pay"));
    let req = request(&a.guard, &run_a, &pay, "psp", idempotent(), b"9");
    assert!(matches!(
        engine.step(&req, charge(b"ch_1")).unwrap(),
        StepResult::Done {
            replayed: false,
            ..
        }
    ));
    assert!(matches!(
        engine.step(&req, charge(b"ch_2")).unwrap(),
        StepResult::Done { replayed: true, .. }
    ));
    // Run b: a mail whose ack is lost stays unknown (never resent).
    let b = create_and_lease(&engine, "b", "w1");
    let (run_b, mail_step) = (rid("b"), sid("mail"));
    let mail = request(
        &b.guard,
        &run_b,
        &mail_step,
        "smtp",
        ToolClass::NotIdempotent,
        b"hi",
    );
    let lost = |_: &actum::engine::EffectCtx| ToolOutcome::Unknown {
        reason: "timeout".into(),
    };
    assert!(matches!(
        engine.step(&mail, lost).unwrap(),
        StepResult::Unknown { .. }
    ));
    // Run c waits for a signal that comes an hour later; run d waits for
    // one that never comes.
    for run in ["c", "d"] {
        let g = create_and_lease(&engine, run, "w1");
        let hook = WaitFor::Signal {
            name: "paid".into(),
        };
        engine
            .open_wait(&rid(run), &g.guard, &sid("hook"), hook, None, "psp")
            .unwrap();
    }
    clock.advance_ms(HOUR_MS);
    engine.signal(&rid("c"), "paid", b"", "psp").unwrap();
    engine
        .acquire_lease(&rid("c"), &wid("w2"), LEASE_MS)
        .unwrap();

    let metrics = engine.metrics(2 * HOUR_MS).unwrap();
    assert_eq!(metrics.receipts_served, 1);
    assert_eq!(metrics.acts_prevented, 1);
    assert_eq!(metrics.unknowns, 1);
    assert_eq!(metrics.resumes, 1, "c was leased again after its wait");
    assert_eq!((metrics.waits_ended, metrics.wait_p50_ms), (1, HOUR_MS));
    assert_eq!(metrics.stuck, 0, "nothing is two hours old yet");
    if on_postgres() {
        assert!(
            metrics.commits > 0 && metrics.fsyncs == 0,
            "no log of actum's"
        );
    } else {
        assert!(metrics.commits >= metrics.fsyncs && metrics.fsyncs > 0);
        assert!(metrics.mean_group() >= 1.0);
    }

    // A day later: d's wait and b's unknown mail are stuck; c and a are not.
    clock.advance_ms(24 * HOUR_MS);
    let stuck = engine.stuck(2 * HOUR_MS).unwrap();
    let names: Vec<(&str, bool)> = stuck
        .iter()
        .map(|s| {
            let waiting = matches!(s.reason, StuckReason::Waiting { .. });
            (s.run.as_str(), waiting)
        })
        .collect();
    assert_eq!(names, [("b", false), ("d", true)]);
    assert!(
        matches!(&stuck[1].reason, StuckReason::Waiting { since_ms, .. } if *since_ms == START_MS)
    );
    assert_eq!(engine.metrics(2 * HOUR_MS).unwrap().stuck, 2);
    assert!(engine.stuck(48 * HOUR_MS).unwrap().is_empty());
}

#[test]
fn the_audit_export_is_the_journal_line_for_line() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let a = create_and_lease(&engine, "a", "w1");
    let (run_a, pay) = (rid("a"), sid("pay"));
    let req = request(&a.guard, &run_a, &pay, "psp", idempotent(), b"9");
    engine
        .step(&req, |_| ToolOutcome::Confirmed {
            receipt: b"ch \"1\"\n".to_vec(),
        })
        .unwrap();
    let mut out = Vec::new();
    let lines = engine.export_audit(&rid("a"), &mut out).unwrap();
    let journal = engine.audit(&rid("a")).unwrap();
    assert_eq!(lines, journal.len() as u64);
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), journal.len());
    for (line, entry) in text.lines().zip(&journal) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["run"], "a");
        let trace = engine.run(&rid("a")).unwrap().unwrap().trace_id;
        assert_eq!(
            v["trace_id"],
            trace.as_str(),
            "every line carries the run's trace"
        );
        assert_eq!(v["seq"], entry.seq);
        assert_eq!(v["at_ms"], entry.at_ms);
        assert_eq!(v["what"], entry.what.to_string());
        assert_eq!(v["why"], entry.why.as_str());
        match entry.token {
            Some(token) => {
                assert_eq!(v["token"], token.0);
                assert_eq!(v["worker"], "w1", "{line}");
            }
            None => assert!(v["token"].is_null() && v["worker"].is_null(), "{line}"),
        }
    }
    let keys: Vec<&str> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter_map(|v| v["effect_key"].as_str().map(str::to_string))
        .map(|k| if k == "a/pay/1" { "a/pay/1" } else { "other" })
        .collect();
    assert_eq!(keys, ["a/pay/1", "a/pay/1"], "the intent and its outcome");
    assert!(matches!(
        engine.export_audit(&rid("nobody"), &mut Vec::new()),
        Err(actum::Error::NotFound { .. })
    ));
}

#[test]
fn metrics_survive_a_clean_restart_and_a_crash_keeps_what_a_checkpoint_stored() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let a = create_and_lease(&engine, "a", "w1");
    let (run_a, pay) = (rid("a"), sid("pay"));
    let req = request(&a.guard, &run_a, &pay, "psp", idempotent(), b"9");
    let paid = |_: &actum::engine::EffectCtx| ToolOutcome::Confirmed {
        receipt: b"ch_1".to_vec(),
    };
    engine.step(&req, paid).unwrap();
    engine.step(&req, paid).unwrap();
    let before = engine.metrics(HOUR_MS).unwrap();
    assert_eq!(before.receipts_served, 1);
    engine.close().unwrap();

    // A clean restart: every counter goes on from where it was.
    let engine = open_fs(dir.path(), &clock);
    let after = engine.metrics(HOUR_MS).unwrap();
    assert_eq!(
        (after.receipts_served, after.acts_prevented),
        (before.receipts_served, before.acts_prevented)
    );
    assert!(after.commits >= before.commits && after.fsyncs >= before.fsyncs);
    // Served again (the lease of the closed engine was released at open: take it back).
    let a = create_and_lease_again(&engine, "a");
    let req = request(&a.guard, &run_a, &pay, "psp", idempotent(), b"9");
    // The lease's record checkpointed: after it, the served receipt logs
    // nothing, and the close, with no record to write, stores the counters
    // all the same.
    engine.checkpoint().unwrap();
    let durable = engine.durable_lsn();
    engine.step(&req, paid).unwrap();
    assert_eq!(
        engine.durable_lsn(),
        durable,
        "a served receipt logs nothing"
    );
    engine.close().unwrap();
    let engine = open_fs(dir.path(), &clock);
    assert_eq!(engine.metrics(HOUR_MS).unwrap().receipts_served, 2);

    // A crash keeps what the last checkpoint stored, never more than was counted.
    let a = create_and_lease_again(&engine, "a");
    let req = request(&a.guard, &run_a, &pay, "psp", idempotent(), b"9");
    engine.step(&req, paid).unwrap();
    engine.checkpoint().unwrap();
    engine.step(&req, paid).unwrap();
    drop(engine);
    let engine = open_fs(dir.path(), &clock);
    let served = engine.metrics(HOUR_MS).unwrap().receipts_served;
    assert!((3..=4).contains(&served), "{served}");
}

/// The lease of `run` again, after an open released the one it had.
fn create_and_lease_again(engine: &actum::engine::Engine, run: &str) -> actum::engine::LeaseGrant {
    // (On PostgreSQL the lease was not released at open: it runs out.)
    if let Some(lease) = engine.run(&rid(run)).unwrap().and_then(|r| r.lease) {
        wait_out_lease(lease.expires_ms);
    }
    engine.acquire_lease(&rid(run), &wid("w1"), 60_000).unwrap()
}

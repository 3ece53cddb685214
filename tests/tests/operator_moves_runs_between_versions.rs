//! An operator moves chosen runs to a new agent version: the move is
//! journaled (operator, reason, both versions) and survives a restart; a
//! moved run is resumed only by the new version's handler, which replays
//! what the old one did (its confirmed step is not sent again); a run a
//! worker holds is not moved under it.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use actum::books::{AuditWhat, Outcome, RunState, ToolClass};
use actum::runtime::{Driven, Tool};
use actum::{Error, ManualClock};
use support::*;

#[test]
fn a_moved_run_is_resumed_by_the_new_handler_only_and_the_move_is_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let sent = Arc::new(AtomicU32::new(0));
    let v2_calls = Arc::new(AtomicU32::new(0));
    let tool = || Tool::new("bank.pay", ToolClass::NotIdempotent);
    let run = {
        let engine = Arc::new(open_fs(dir.path(), &clock));
        let v1 = runtime(&engine);
        let sent1 = Arc::clone(&sent);
        v1.register("pay", "1", move |ctx| {
            ctx.step("pay", &tool(), b"10 EUR", |_| {
                sent1.fetch_add(1, Ordering::SeqCst);
                Outcome::Confirmed {
                    receipt: b"tx-1".to_vec(),
                }
            })?;
            ctx.signal("go", None)?;
            Ok(b"v1 done".to_vec())
        })
        .unwrap();
        let run = v1.start("pay", "pay-1", b"in").unwrap().run;
        assert_eq!(drain(&v1), [Driven::Parked("go".into())]);
        // Parked: no lease, so the operator may move it.
        let moved = engine
            .move_version(&run, "pay@1", "pay@2", "ops-anna", "v2 mails a receipt")
            .unwrap();
        assert!(moved.changed);
        assert_eq!(moved.agent_version, "pay@2");
        engine.signal(&run, "go", b"", "bank").unwrap();
        // The old version's runtime no longer claims it.
        assert_eq!(drain(&v1), []);
        run
    };
    // After a restart, the move stands, and version 2 resumes the run.
    let engine = Arc::new(open_fs(dir.path(), &clock));
    assert_eq!(
        engine.run(&run).unwrap().unwrap().agent_version,
        "pay@2",
        "the move survived the restart"
    );
    let both = runtime(&engine);
    both.register("pay", "1", |_| {
        panic!("the old handler resumed a moved run")
    })
    .unwrap();
    let calls = Arc::clone(&v2_calls);
    both.register("pay", "2", move |ctx| {
        calls.fetch_add(1, Ordering::SeqCst);
        ctx.step("pay", &tool(), b"10 EUR", |_| {
            panic!("a confirmed step is sent again")
        })?;
        ctx.signal("go", None)?;
        ctx.step("mail", &tool(), b"receipt", |_| Outcome::Confirmed {
            receipt: b"m-1".to_vec(),
        })?;
        Ok(b"v2 done".to_vec())
    })
    .unwrap();
    assert_eq!(drain(&both), [Driven::Completed]);
    assert_eq!(both.output(&run).unwrap().as_deref(), Some(&b"v2 done"[..]));
    assert_eq!(
        (sent.load(Ordering::SeqCst), v2_calls.load(Ordering::SeqCst)),
        (1, 1)
    );
    let audit = engine.audit(&run).unwrap();
    let moved: Vec<_> = audit
        .iter()
        .filter(|e| matches!(&e.what, AuditWhat::VersionMoved { .. }))
        .collect();
    assert_eq!(moved.len(), 1, "{audit:?}");
    assert!(matches!(
        &moved[0].what,
        AuditWhat::VersionMoved { from, to, operator }
            if from == "pay@1" && to == "pay@2" && operator == "ops-anna"
    ));
    assert_eq!(moved[0].why, "v2 mails a receipt");
    let mut export = Vec::new();
    engine.export_audit(&run, &mut export).unwrap();
    let export = String::from_utf8(export).unwrap();
    assert!(
        export.contains("pay@1 to pay@2") && export.contains("ops-anna"),
        "{export}"
    );
    // A finished run is not moved.
    assert!(matches!(
        engine.move_version(&run, "pay@2", "pay@3", "ops-anna", "late"),
        Err(Error::RunTerminal { .. })
    ));
}

#[test]
fn a_run_a_worker_holds_is_not_moved_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let lease = create_and_lease(&engine, "r1", "w1");
    let agent = engine.run(&lease.run).unwrap().unwrap().agent_version;
    let refused = engine
        .move_version(&lease.run, &agent, "other@2", "ops-anna", "now")
        .unwrap_err();
    assert!(
        matches!(&refused, Error::LeaseHeld { run, .. } if run == &lease.run),
        "{refused}"
    );
    assert!(refused.to_string().contains("run r1"), "{refused}");
    let wrong = engine
        .move_version(&lease.run, "nope@1", "other@2", "ops-anna", "now")
        .unwrap_err();
    assert!(
        wrong.to_string().contains("run r1") && wrong.to_string().contains(&agent),
        "{wrong}"
    );
    assert_eq!(
        engine.run(&lease.run).unwrap().unwrap().agent_version,
        agent
    );
    // Once the lease ran out the holder can do nothing more, and the run moves.
    clock.advance_ms(LEASE_MS + 1);
    let moved = engine
        .move_version(&lease.run, &agent, "other@2", "ops-anna", "now")
        .unwrap();
    assert!(moved.changed);
    assert_eq!(
        engine.run(&lease.run).unwrap().unwrap().state,
        RunState::Running
    );
}

//! An operator puts a failed run back to pending, from its latest
//! checkpoint or an earlier one, and forks a run into a new one: a
//! confirmed act stays confirmed and is replayed, never sent again; the
//! step that failed acts again under its next key; the retry and the fork
//! are journaled with who and why and survive a restart; what must not be
//! retried is refused, naming the run and why.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use actum::books::{AuditWhat, Compensation, Outcome, RunState, ToolClass};
use actum::runtime::{Driven, RUNTIME_SCHEMA, Runtime, STATE_PART, Tool};
use actum::{Error, ManualClock};
use support::*;

/// What the world saw: every request's tool key, in order.
#[derive(Default)]
struct World {
    charges: Mutex<Vec<String>>,
    shipments: Mutex<Vec<String>>,
    /// The warehouse declines for good until restocked.
    restocked: AtomicU32,
}

/// A shop: charge the card, then ship (the warehouse may decline for
/// good); a checkpoint after each.
fn register_shop(rt: &Runtime, world: &Arc<World>) {
    let w = Arc::clone(world);
    rt.register("shop", "1", move |ctx| {
        let card = Tool::new(
            "card.charge",
            ToolClass::Idempotent {
                dedup_window_ms: DAY_MS,
            },
        );
        let charge = ctx.step("charge", &card, b"20 EUR", |call| {
            w.charges.lock().unwrap().push(call.idempotency_key.clone());
            Outcome::Confirmed {
                receipt: b"ch-1".to_vec(),
            }
        })?;
        ctx.checkpoint(b"charged")?;
        let warehouse = Tool::new("warehouse.ship", ToolClass::NotIdempotent)
            .attempts(2)
            .backoff(0, 0);
        let shipped = ctx.step("ship", &warehouse, b"1 lamp", |call| {
            w.shipments
                .lock()
                .unwrap()
                .push(call.idempotency_key.clone());
            if w.restocked.load(Ordering::SeqCst) == 0 {
                Outcome::Failed {
                    retryable: false,
                    reason: "out of stock".into(),
                }
            } else {
                Outcome::Confirmed {
                    receipt: b"parcel-9".to_vec(),
                }
            }
        })?;
        // The third checkpoint call: written only if the retry's restored
        // version is not counted as the handler's own.
        ctx.checkpoint(b"shipped")?;
        Ok([charge, shipped].join(&b' '))
    })
    .unwrap();
}

#[test]
fn a_retried_run_replays_its_confirmed_act_and_tries_the_failed_step_under_a_new_key() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let world = Arc::new(World::default());
    let run = {
        let engine = Arc::new(open_fs(dir.path(), &clock));
        let rt = runtime(&engine);
        register_shop(&rt, &world);
        let run = rt.start("shop", "order-1", b"lamp").unwrap().run;
        assert_eq!(drain(&rt), [Driven::Ended(RunState::Failed)]);
        // The failed run leaves memory and reaches the state store's
        // index of ended runs.
        engine.checkpoint().unwrap();
        run
    };
    // After a restart, the operator restocks and retries.
    let engine = Arc::new(open_fs(dir.path(), &clock));
    world.restocked.store(1, Ordering::SeqCst);
    let retried = engine
        .retry_run(&run, None, "ops-anna", "restocked")
        .unwrap();
    assert_eq!(
        retried
            .reopened
            .iter()
            .map(|k| k.encode())
            .collect::<Vec<_>>(),
        ["order-1/ship/1"]
    );
    assert_eq!(retried.restored, None);
    assert_eq!(engine.run(&run).unwrap().unwrap().state, RunState::Pending);
    // Pending now: a second retry is refused, naming the run.
    let again = engine.retry_run(&run, None, "ops-anna", "twice");
    assert!(
        matches!(&again, Err(Error::RetryRefused { run: r, reason }) if *r == run && reason.contains("pending")),
        "{again:?}"
    );
    // Pending again, it left the state store's index of ended runs: a
    // prune does not even consider it.
    engine.checkpoint().unwrap();
    let pruned = engine.prune(0, 16).unwrap();
    assert!(
        pruned.pruned.is_empty() && pruned.kept.is_empty(),
        "{pruned:?}"
    );
    let rt = runtime(&engine);
    register_shop(&rt, &world);
    assert_eq!(drain(&rt), [Driven::Completed]);
    assert_eq!(
        rt.output(&run).unwrap().as_deref(),
        Some(&b"ch-1 parcel-9"[..])
    );
    assert_eq!(
        *world.charges.lock().unwrap(),
        ["order-1/charge/1"],
        "the confirmed charge was replayed, not sent again"
    );
    assert_eq!(
        *world.shipments.lock().unwrap(),
        ["order-1/ship/1", "order-1/ship/2"],
        "the failed shipment is tried again under its next key"
    );
    // The retry is journaled with who, why and what it reopened.
    let audit = engine.audit(&run).unwrap();
    let retries: Vec<_> = audit
        .iter()
        .filter(|e| matches!(e.what, AuditWhat::Retried { .. }))
        .collect();
    assert_eq!(retries.len(), 1, "{audit:?}");
    assert!(matches!(
        &retries[0].what,
        AuditWhat::Retried { reopened, restored: None, operator }
            if operator == "ops-anna" && reopened.len() == 1
    ));
    assert_eq!(retries[0].why, "restocked");
    let mut export = Vec::new();
    engine.export_audit(&run, &mut export).unwrap();
    let export = String::from_utf8(export).unwrap();
    assert!(
        export.contains("retried by operator ops-anna, reopening order-1/ship/1"),
        "{export}"
    );
    // Completed again, it is prunable once its charge's dedup window is
    // over, and only once.
    engine.checkpoint().unwrap();
    clock.advance_ms(DAY_MS + 1);
    let pruned = engine.prune(0, 16).unwrap();
    assert_eq!(pruned.pruned, std::slice::from_ref(&run), "{pruned:?}");
    assert!(pruned.kept.is_empty(), "{pruned:?}");
}

#[test]
fn a_retry_from_an_earlier_checkpoint_goes_on_from_it_and_the_handlers_saves_still_count() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let world = Arc::new(World::default());
    let engine = Arc::new(open_fs(dir.path(), &clock));
    let rt = runtime(&engine);
    register_shop(&rt, &world);
    let run = rt.start("shop", "order-2", b"lamp").unwrap().run;
    assert_eq!(drain(&rt), [Driven::Ended(RunState::Failed)]);
    let state_at = |version: u64| {
        let loaded = engine.load_version(&run, version, RUNTIME_SCHEMA).unwrap();
        let part = loaded.parts.iter().find(|p| p.name == STATE_PART).unwrap();
        part.bytes.clone()
    };
    assert_eq!(state_at(1), b"charged");
    // A version it does not have is refused, naming it.
    let missing = engine.retry_run(&run, Some(7), "ops-anna", "no such");
    assert!(
        matches!(&missing, Err(Error::NotFound { what }) if what.contains("checkpoint 7 of run order-2")),
        "{missing:?}"
    );
    // The run failed having saved checkpoint 1 only: a retry from 1, the
    // latest, saves nothing again.
    let retried = engine
        .retry_run(&run, Some(1), "ops-anna", "from 1")
        .unwrap();
    assert_eq!(
        retried.restored, None,
        "1 is the latest: nothing to save again"
    );
    world.restocked.store(1, Ordering::SeqCst);
    assert_eq!(drain(&rt), [Driven::Completed]);
    // Saved by the handler: 1 (charged), 2 (shipped), 3 (the output).
    assert_eq!(state_at(2), b"shipped");
    assert_eq!(*world.charges.lock().unwrap(), ["order-2/charge/1"]);
}

#[test]
fn a_retry_from_a_checkpoint_not_the_latest_saves_it_again_as_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let world = Arc::new(World::default());
    let engine = Arc::new(open_fs(dir.path(), &clock));
    let rt = runtime(&engine);
    // A handler that saves two checkpoints, then fails for good until
    // restocked, then saves a third.
    let w = Arc::clone(&world);
    rt.register("plan", "1", move |ctx| {
        ctx.checkpoint(b"draft")?;
        let model = Tool::new("search", ToolClass::Queryable).with_query(|_| Outcome::Failed {
            retryable: true,
            reason: "none".into(),
        });
        let found = ctx.step("search", &model, b"q", |_| Outcome::Confirmed {
            receipt: b"3 hits".to_vec(),
        })?;
        ctx.checkpoint(b"searched")?;
        let book = Tool::new("book", ToolClass::NotIdempotent).backoff(0, 0);
        ctx.step("book", &book, b"room", |_| {
            if w.restocked.load(Ordering::SeqCst) == 0 {
                Outcome::Failed {
                    retryable: false,
                    reason: "full".into(),
                }
            } else {
                Outcome::Confirmed {
                    receipt: b"room 12".to_vec(),
                }
            }
        })?;
        ctx.checkpoint(b"booked")?;
        Ok(found)
    })
    .unwrap();
    let run = rt.start("plan", "plan-1", b"trip").unwrap().run;
    assert_eq!(drain(&rt), [Driven::Ended(RunState::Failed)]);
    let latest = engine.load_latest(&run, RUNTIME_SCHEMA).unwrap().unwrap();
    assert_eq!(latest.meta.version, 2);
    let retried = engine
        .retry_run(&run, Some(1), "ops-anna", "replan from the draft")
        .unwrap();
    assert_eq!(retried.restored, Some(1));
    let restored = engine.load_latest(&run, RUNTIME_SCHEMA).unwrap().unwrap();
    assert_eq!(restored.meta.version, 3);
    assert_eq!(
        restored.parts,
        engine.load_version(&run, 1, RUNTIME_SCHEMA).unwrap().parts
    );
    world.restocked.store(1, Ordering::SeqCst);
    assert_eq!(drain(&rt), [Driven::Completed]);
    // The handler's third checkpoint call is its own third save: written
    // as version 4, after the restored 3 (were the restored version
    // counted as the handler's, the call would be taken as replayed).
    let four = engine.load_version(&run, 4, RUNTIME_SCHEMA).unwrap();
    let state = four.parts.iter().find(|p| p.name == STATE_PART).unwrap();
    assert_eq!(state.bytes, b"booked");
    let audit = engine.audit(&run).unwrap();
    assert!(audit.iter().any(|e| matches!(
        &e.what,
        AuditWhat::Retried { restored: Some(1), operator, .. } if operator == "ops-anna"
    )));
}

#[test]
fn what_must_not_be_retried_is_refused_naming_the_run_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = Arc::new(open_fs(dir.path(), &clock));
    let rt = runtime(&engine);
    let undone = Arc::new(AtomicU32::new(0));
    let u = Arc::clone(&undone);
    rt.register_undo("bank.unfund", move |_| {
        u.fetch_add(1, Ordering::SeqCst);
        actum::engine::ToolOutcome::Confirmed {
            receipt: b"returned".to_vec(),
        }
    });
    rt.register("treasury", "1", |ctx| {
        let bank = Tool::new(
            "bank.fund",
            ToolClass::Idempotent {
                dedup_window_ms: DAY_MS,
            },
        );
        let undo = Compensation {
            tool: "bank.unfund".into(),
            class: ToolClass::NotIdempotent,
            args: b"return 5".to_vec(),
        };
        ctx.step_with_undo("fund", &bank, b"5", undo, |_| Outcome::Confirmed {
            receipt: b"f-1".to_vec(),
        })?;
        Err(actum::runtime::Fail::failed("the hedge was refused"))
    })
    .unwrap();
    let treasury = rt.start("treasury", "t-1", b"").unwrap().run;
    drain(&rt);
    assert_eq!(
        engine.run(&treasury).unwrap().unwrap().state,
        RunState::Failed
    );
    assert_eq!(undone.load(Ordering::SeqCst), 1);
    let refused = engine.retry_run(&treasury, None, "ops-anna", "try again");
    assert!(
        matches!(&refused, Err(Error::RetryRefused { run, reason })
            if *run == treasury && reason.contains("saga undid")),
        "{refused:?}"
    );
    // A completed run is not failed.
    rt.register("noop", "1", |_| Ok(b"ok".to_vec())).unwrap();
    let noop = rt.start("noop", "n-1", b"").unwrap().run;
    drain(&rt);
    assert!(matches!(
        engine.retry_run(&noop, None, "ops-anna", "why not"),
        Err(Error::RetryRefused { .. })
    ));
    // No operator, no retry; a run that does not exist is not found.
    assert!(matches!(
        engine.retry_run(&noop, None, "", "anonymous"),
        Err(Error::InvalidCommand { .. })
    ));
    assert!(matches!(
        engine.retry_run(&rid("nobody"), None, "ops-anna", "x"),
        Err(Error::NotFound { .. })
    ));
    // Nothing of it changed anything.
    assert_eq!(
        engine.run(&treasury).unwrap().unwrap().state,
        RunState::Failed
    );
    assert_eq!(
        engine.run(&noop).unwrap().unwrap().state,
        RunState::Completed
    );
}

#[test]
fn a_child_its_parent_waited_for_is_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = Arc::new(open_fs(dir.path(), &clock));
    let rt = runtime(&engine);
    rt.register("leaf", "1", |_| {
        Err(actum::runtime::Fail::failed("bad input"))
    })
    .unwrap();
    rt.register("root", "1", |ctx| {
        let out = ctx.child("summary", "leaf", b"x")?;
        Ok(format!("{out:?}").into_bytes())
    })
    .unwrap();
    let root = rt.start("root", "root-1", b"").unwrap().run;
    drain(&rt);
    let child = rid("root-1:summary");
    assert_eq!(engine.run(&child).unwrap().unwrap().parent, Some(root));
    assert_eq!(engine.run(&child).unwrap().unwrap().state, RunState::Failed);
    let refused = engine.retry_run(&child, None, "ops-anna", "fixed");
    assert!(
        matches!(&refused, Err(Error::RetryRefused { run, reason })
            if *run == child && reason.contains("parent run root-1")),
        "{refused:?}"
    );
}

#[test]
fn a_fork_starts_a_new_run_from_a_checkpoint_that_acts_under_its_own_keys() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let world = Arc::new(World::default());
    let fork = rid("order-3b");
    let source = {
        let engine = Arc::new(open_fs(dir.path(), &clock));
        let rt = runtime(&engine);
        register_shop(&rt, &world);
        let source = rt.start("shop", "order-3", b"lamp").unwrap().run;
        assert_eq!(drain(&rt), [Driven::Ended(RunState::Failed)]);
        let forked = engine
            .fork_run(&source, &fork, Some(1), "ops-anna", "a second order")
            .unwrap();
        assert!(forked.created);
        assert_eq!(forked.checkpoint, Some(1));
        // Again: nothing changes. Into a run that is not this fork: refused.
        let again = engine
            .fork_run(&source, &fork, Some(1), "ops-anna", "a second order")
            .unwrap();
        assert!(!again.created);
        rt.register("noop", "1", |_| Ok(Vec::new())).unwrap();
        let other = rt.start("noop", "other", b"").unwrap().run;
        assert!(matches!(
            engine.fork_run(&source, &other, None, "ops-anna", "over it"),
            Err(Error::InvalidCommand { .. })
        ));
        assert!(matches!(
            engine.fork_run(&source, &rid("order-3c"), Some(9), "ops-anna", "no such"),
            Err(Error::NotFound { .. })
        ));
        source
    };
    // After a restart the fork stands: pending, the source's agent and
    // input, its checkpoint 1 as the fork's first.
    let engine = Arc::new(open_fs(dir.path(), &clock));
    let record = engine.run(&fork).unwrap().unwrap();
    let from = engine.run(&source).unwrap().unwrap();
    assert_eq!(record.state, RunState::Pending);
    assert_eq!(
        (record.agent_version.as_str(), record.input_digest),
        (from.agent_version.as_str(), from.input_digest)
    );
    assert_eq!(record.parent, None);
    assert_ne!(record.trace_id, from.trace_id);
    let first = engine.load_version(&fork, 1, RUNTIME_SCHEMA).unwrap();
    assert_eq!(
        first.parts,
        engine
            .load_version(&source, 1, RUNTIME_SCHEMA)
            .unwrap()
            .parts
    );
    let audit = engine.audit(&fork).unwrap();
    assert!(audit.iter().any(|e| matches!(
        &e.what,
        AuditWhat::Forked { from, checkpoint: Some(1), operator } if *from == source && operator == "ops-anna"
    )), "{audit:?}");
    // The fork runs from the top under its own keys: it charges anew.
    world.restocked.store(1, Ordering::SeqCst);
    let rt = runtime(&engine);
    register_shop(&rt, &world);
    rt.register("noop", "1", |_| Ok(Vec::new())).unwrap();
    // The fork, and the run the refused fork named.
    assert_eq!(drain(&rt), [Driven::Completed, Driven::Completed]);
    assert_eq!(
        *world.charges.lock().unwrap(),
        ["order-3/charge/1", "order-3b/charge/1"]
    );
    // The source failed and stays failed; its checkpoint's blob is shared:
    // pruning the source leaves the fork's first checkpoint whole.
    assert_eq!(
        engine.run(&source).unwrap().unwrap().state,
        RunState::Failed
    );
    engine.checkpoint().unwrap();
    clock.advance_ms(DAY_MS + 1);
    let pruned = engine.prune_runs(vec![source.clone()], 0).unwrap();
    assert_eq!(pruned.pruned, [source]);
    engine.checkpoint().unwrap();
    let first = engine.load_version(&fork, 1, RUNTIME_SCHEMA).unwrap();
    let state = first.parts.iter().find(|p| p.name == STATE_PART).unwrap();
    assert_eq!(state.bytes, b"charged");
}

//! Coordination between runs on the public API: runs racing for one
//! resource lease on real threads never hold it at once, and each hold's
//! token is larger than the last, so a tool refuses a stale holder whose
//! hold expired and went to another run; writers racing on a shared key by
//! compare-and-set lose no update; both outlive a crash.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use actum::books::{FencingToken, ResourceId, SharedKeyId, SharedSetter};
use actum::{Engine, EngineOptions, Error, ManualClock};
use support::*;

const RACERS: usize = 6;
const TURNS: usize = 20;

/// A tool that acts for one resource and refuses any token below the
/// highest it has seen (what a CRM would do with the token it is handed).
#[derive(Default)]
struct FencedTool {
    highest: Option<FencingToken>,
    acts: Vec<(String, FencingToken)>,
}

impl FencedTool {
    fn act(&mut self, who: &str, token: FencingToken) -> Result<(), String> {
        if self.highest.is_some_and(|h| token < h) {
            return Err(format!("{who}'s token {token} is stale"));
        }
        self.highest = Some(token);
        self.acts.push((who.to_string(), token));
        Ok(())
    }
}

#[test]
fn runs_racing_for_one_resource_never_hold_it_at_once_and_tokens_grow() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(Engine::open(dir.path(), EngineOptions::default()).unwrap());
    let customer = ResourceId::new("customer:42").unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let tool = Arc::new(Mutex::new(FencedTool::default()));
    let leases: Vec<_> = (0..RACERS)
        .map(|i| create_and_lease(&engine, &format!("outreach-{i}"), &format!("w{i}")))
        .collect();
    std::thread::scope(|scope| {
        for (i, lease) in leases.iter().enumerate() {
            let (engine, customer, inside, tool) = (&engine, &customer, &inside, &tool);
            scope.spawn(move || {
                let run = rid(&format!("outreach-{i}"));
                for _ in 0..TURNS {
                    let grant = loop {
                        match engine.acquire_resource(customer, &run, &lease.guard, 60_000) {
                            Ok(grant) => break grant,
                            Err(Error::ResourceHeld { .. }) => std::thread::yield_now(),
                            Err(e) => panic!("{e}"),
                        }
                    };
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tool.lock().unwrap().act(run.as_str(), grant.token).unwrap();
                    inside.store(false, Ordering::SeqCst);
                    engine
                        .release_resource(customer, &run, &lease.guard)
                        .unwrap();
                }
            });
        }
    });
    let tool = tool.lock().unwrap();
    assert_eq!(tool.acts.len(), RACERS * TURNS);
    // Every hold had its own token, each larger than the one before.
    assert!(tool.acts.windows(2).all(|w| w[0].1 < w[1].1));
    let book = engine.resource(&customer).unwrap().unwrap();
    assert_eq!(book.next_token.0, (RACERS * TURNS) as u64 + 1);
}

#[test]
fn an_expired_hold_goes_to_another_run_and_the_tool_refuses_the_stale_holder() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let a = create_and_lease(&engine, "a", "w1");
    let b = create_and_lease(&engine, "b", "w2");
    let customer = ResourceId::new("customer:7").unwrap();
    let mut tool = FencedTool::default();
    let first = engine
        .acquire_resource(&customer, &rid("a"), &a.guard, 5_000)
        .unwrap();
    // a's worker pauses past its hold (not its run lease): b takes over.
    clock.advance_ms(5_000);
    let second = engine
        .acquire_resource(&customer, &rid("b"), &b.guard, 5_000)
        .unwrap();
    assert!(second.token > first.token);
    tool.act("b", second.token).unwrap();
    let stale = tool.act("a", first.token).unwrap_err();
    assert!(stale.contains("stale"), "{stale}");
    // a learns it lost the hold when it asks the engine.
    assert!(matches!(
        engine.release_resource(&customer, &rid("a"), &a.guard),
        Err(Error::ResourceNotHeld { .. })
    ));
    // The hold and its token survive a crash.
    drop(engine);
    let engine = open_fs(dir.path(), &clock);
    let book = engine.resource(&customer).unwrap().unwrap();
    assert_eq!(
        book.hold.map(|h| (h.run, h.token)),
        Some((rid("b"), second.token))
    );
    engine.close().unwrap();
}

#[test]
fn writers_racing_on_a_shared_key_by_compare_and_set_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(Engine::open(dir.path(), EngineOptions::default()).unwrap());
    let key = SharedKeyId::new("contacted:customer-42").unwrap();
    std::thread::scope(|scope| {
        for i in 0..RACERS {
            let (engine, key) = (&engine, &key);
            scope.spawn(move || {
                let me = SharedSetter::Operator {
                    name: format!("writer-{i}"),
                };
                // Read, add my name, write back against the version read;
                // a conflict means someone wrote since: read again.
                loop {
                    let entry = engine.shared(key).unwrap();
                    let (mut names, version) = entry.map_or((String::new(), 0), |e| {
                        (
                            String::from_utf8(e.value.unwrap_or_default()).unwrap(),
                            e.version,
                        )
                    });
                    names.push_str(&format!("writer-{i};"));
                    match engine.set_shared(
                        key,
                        version,
                        Some(names.into_bytes()),
                        &me,
                        "contacted",
                    ) {
                        Ok(_) => return,
                        Err(Error::SharedVersionConflict { .. }) => continue,
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    let entry = engine.shared(&key).unwrap().unwrap();
    assert_eq!(entry.version, RACERS as u64);
    let names = String::from_utf8(entry.value.unwrap()).unwrap();
    for i in 0..RACERS {
        assert!(names.contains(&format!("writer-{i};")), "{names}");
    }
    assert_eq!(entry.changes.len(), RACERS);
}

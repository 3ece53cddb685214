//! Concurrent commands through the pipelined commit path: they share
//! fsyncs (group commit), every acknowledged command survives a crash, and
//! decisions see the commands still in flight (two workers never claim the
//! same run).

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use actum::books::{BeginEffect, EffectKey, FinishEffect, Outcome, digest_of};
use actum::engine::{Begun, LeaseGrant};
use actum::{Clock, ManualClock};
use actum_sim::check::opened;
use support::*;

const THREADS: usize = 8;
const PROTOCOLS_PER_THREAD: usize = 30;

/// The intent of charge number `n` of `grant`'s run.
fn charge(grant: &LeaseGrant, n: usize) -> BeginEffect {
    BeginEffect {
        run: grant.run.clone(),
        step: sid(&format!("s{n}")),
        guard: grant.guard.clone(),
        tool: "stripe.charge".into(),
        tool_class: idempotent(),
        args_digest: digest_of(&n.to_le_bytes()),
        args: None,
        rationale: "concurrent".into(),
        compensation: None,
    }
}

#[test]
fn concurrent_effects_share_fsyncs_and_all_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let grants: Vec<_> = (0..THREADS)
        .map(|t| create_and_lease(&engine, &format!("run-{t}"), &format!("w{t}")))
        .collect();
    let before = engine.wal_stats();
    std::thread::scope(|scope| {
        for grant in &grants {
            let engine = &engine;
            scope.spawn(move || {
                for n in 0..PROTOCOLS_PER_THREAD {
                    let begun = engine.begin_effect(charge(grant, n)).unwrap();
                    let Begun::Proceed { key, .. } = begun else {
                        panic!("a fresh step proceeds: {begun:?}")
                    };
                    engine
                        .finish_effect(FinishEffect {
                            key,
                            guard: grant.guard.clone(),
                            outcome: Outcome::Confirmed {
                                receipt: format!("ch_{n}").into_bytes(),
                            },
                        })
                        .unwrap();
                }
            });
        }
    });
    // (The log's group commit is the directory's; on PostgreSQL each
    // command is a transaction of the server's.)
    if !on_postgres() {
        let after = engine.wal_stats();
        let commits = after.appends - before.appends;
        let fsyncs = after.fsyncs - before.fsyncs;
        assert_eq!(commits, (THREADS * PROTOCOLS_PER_THREAD * 2) as u64);
        assert!(
            fsyncs < commits,
            "group commit shares fsyncs: {fsyncs} fsyncs for {commits} commits"
        );
    }
    let acknowledged = engine.snapshot().unwrap();
    drop(engine); // a crash: no close
    let engine = open_fs(dir.path(), &clock);
    // (A directory's open releases the leases of the process before it;
    // on PostgreSQL, shared by many processes, leases run out instead.)
    let expected = if on_postgres() {
        acknowledged
    } else {
        opened(&acknowledged, clock.now_ms()).unwrap()
    };
    assert_eq!(
        engine.snapshot().unwrap(),
        expected,
        "every acknowledged command survived"
    );
    for grant in &grants {
        let grant = &take_back(&engine, grant);
        for n in 0..PROTOCOLS_PER_THREAD {
            let begun = engine.begin_effect(charge(grant, n)).unwrap();
            assert!(
                matches!(&begun, Begun::Replay { receipt, .. } if receipt == format!("ch_{n}").as_bytes()),
                "{begun:?}"
            );
        }
    }
}

#[test]
fn concurrent_claims_never_hand_one_run_to_two_workers() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    let runs = 12;
    for r in 0..runs {
        engine.create_run(create_cmd(&format!("job-{r}"))).unwrap();
    }
    let claimed: Vec<Vec<String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let engine = &engine;
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    while let Some(grant) =
                        engine.claim_next(&wid(&format!("w{t}")), LEASE_MS).unwrap()
                    {
                        mine.push(grant.run.to_string());
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: Vec<&String> = claimed.iter().flatten().collect();
    let distinct: BTreeSet<&String> = all.iter().copied().collect();
    assert_eq!(all.len(), runs, "each run claimed once: {claimed:?}");
    assert_eq!(distinct.len(), runs, "no run claimed twice: {claimed:?}");
}

/// Concurrent commands are decided in batches by whichever caller holds the
/// combining role: each caller must get its own answer, refusals included,
/// and a refusal in a batch must not touch its neighbours.
#[test]
fn refusals_and_acceptances_decided_together_each_reach_their_own_caller() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_fs(dir.path(), &clock);
    // Each run is leased twice: the first grant's token is stale.
    let pairs: Vec<(LeaseGrant, LeaseGrant)> = (0..THREADS)
        .map(|t| {
            let stale = create_and_lease(&engine, &format!("run-{t}"), &format!("w{t}"));
            engine
                .release_lease(&stale.run, &stale.guard)
                .expect("release");
            let live = engine
                .acquire_lease(&stale.run, &wid(&format!("v{t}")), LEASE_MS)
                .unwrap();
            (stale, live)
        })
        .collect();
    std::thread::scope(|scope| {
        for (t, (stale, live)) in pairs.iter().enumerate() {
            let engine = &engine;
            scope.spawn(move || {
                for n in 0..PROTOCOLS_PER_THREAD {
                    // Odd threads present the stale token, even ones the live.
                    let grant = if t % 2 == 1 { stale } else { live };
                    let result = engine.begin_effect(charge(grant, n));
                    if t % 2 == 1 {
                        let err = result.unwrap_err();
                        assert!(
                            matches!(&err, actum::Error::Fenced { run, .. } if run == &grant.run),
                            "thread {t} step {n}: {err}"
                        );
                    } else {
                        let begun = result.unwrap();
                        let Begun::Proceed { key, .. } = begun else {
                            panic!("thread {t} step {n}: {begun:?}")
                        };
                        assert_eq!(key.run(), &grant.run, "thread {t} got its own answer");
                        assert_eq!(key.step(), &sid(&format!("s{n}")));
                    }
                }
            });
        }
    });
    for (t, (_, live)) in pairs.iter().enumerate() {
        for n in 0..PROTOCOLS_PER_THREAD {
            let key = EffectKey::new(live.run.clone(), sid(&format!("s{n}")), 1).unwrap();
            let intent = engine.effect(&key).unwrap();
            assert_eq!(intent.is_some(), t % 2 == 0, "{key}: {intent:?}");
        }
    }
}

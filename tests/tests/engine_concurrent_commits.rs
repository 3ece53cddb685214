//! Concurrent commands through the pipelined commit path: they share
//! fsyncs (group commit), every acknowledged command survives a crash, and
//! decisions see the commands still in flight (two workers never claim the
//! same run).

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use actum::ManualClock;
use actum::books::{BeginEffect, FinishEffect, Outcome, digest_of};
use actum::engine::{Begun, LeaseGrant};
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
    let after = engine.wal_stats();
    let commits = after.appends - before.appends;
    let fsyncs = after.fsyncs - before.fsyncs;
    assert_eq!(commits, (THREADS * PROTOCOLS_PER_THREAD * 2) as u64);
    assert!(
        fsyncs < commits,
        "group commit shares fsyncs: {fsyncs} fsyncs for {commits} commits"
    );
    let acknowledged = engine.snapshot().unwrap();
    drop(engine); // a crash: no close
    let engine = open_fs(dir.path(), &clock);
    assert_eq!(
        engine.snapshot().unwrap(),
        acknowledged,
        "every acknowledged command survived"
    );
    for grant in &grants {
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

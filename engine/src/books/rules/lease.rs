//! Leases and fencing: who owns a run, until when, under which token.
//!
//! Invariants: a run has at most one lease; a lease is live while
//! `now_ms < expires_ms`; every acquisition hands out the run's
//! `next_token` and bumps it, so tokens of one run strictly grow; every
//! mutation of a run presents a [`Guard`](crate::books::Guard) that must match the live lease
//! (stale token: `Fenced`; expired or released: `LeaseLost`).

use crate::books::base::ids::WorkerId;
use crate::books::base::limits::LEASE_TTL_MS_MAX;
use crate::books::fold::apply::apply;
use crate::books::records::lease::Lease;
use crate::books::records::run::Run;
use crate::books::records::run::{claimable, current_token};
use crate::books::records::wait::wake_ms;
use crate::books::rules::checks::{check_live, existing};
use crate::books::rules::wait::wake_if_due;
use crate::books::views::overlay::Overlay;
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::{AcquireLease, ClaimNext, ReleaseLease, RenewLease};
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// The lease expiry for a lease of `ttl_ms` taken at `now_ms`.
fn expiry_ms(ttl_ms: u64, now_ms: u64) -> Result<u64> {
    if ttl_ms == 0 || ttl_ms > LEASE_TTL_MS_MAX {
        return Err(Error::InvalidCommand {
            reason: format!("lease ttl_ms {ttl_ms} is outside 1..={LEASE_TTL_MS_MAX}"),
        });
    }
    now_ms
        .checked_add(ttl_ms)
        .ok_or_else(|| Error::InvalidCommand {
            reason: format!("lease expiry overflows: now_ms {now_ms} + ttl_ms {ttl_ms}"),
        })
}

/// The op and answer granting `run` to `worker` until `expires_ms`.
fn grant(run: &Run, worker: &WorkerId, expires_ms: u64, now_ms: u64) -> Decided {
    let lease = Lease {
        worker: worker.clone(),
        token: run.next_token,
        expires_ms,
    };
    assert!(lease.token > current_token(run), "tokens must grow");
    let version = run.version + 1;
    let answer = Answer::Leased {
        run: run.id.clone(),
        token: lease.token,
        expires_ms,
        version,
    };
    let op = Op::LeaseAcquired {
        run: run.id.clone(),
        lease,
        version,
        at_ms: now_ms,
    };
    Decided {
        ops: vec![op],
        answer,
    }
}

/// [`grant`], after ending the run's open wait if its deadline passed (the
/// run starts running again in the same commit): the lease is granted on
/// the run as those ops leave it.
fn wake_and_grant(
    state: &dyn BooksRead,
    run: &Run,
    worker: &WorkerId,
    expires_ms: u64,
    now_ms: u64,
) -> Result<Decided> {
    let mut ops = wake_if_due(state, run, now_ms);
    if ops.is_empty() {
        return Ok(grant(run, worker, expires_ms, now_ms));
    }
    let mut woken = Overlay::new(state);
    for op in &ops {
        apply(&mut woken, op)?;
    }
    let run = woken.run(&run.id).expect("waking keeps the run");
    let granted = grant(&run, worker, expires_ms, now_ms);
    ops.extend(granted.ops);
    Ok(Decided {
        ops,
        answer: granted.answer,
    })
}

/// Decides `AcquireLease`: granted only if no live lease exists.
pub(crate) fn decide_acquire(
    state: &dyn BooksRead,
    cmd: &AcquireLease,
    now_ms: u64,
) -> Result<Decided> {
    let expires_ms = expiry_ms(cmd.ttl_ms, now_ms)?;
    let run = existing(state, &cmd.run)?;
    if run.state.is_terminal() {
        return Err(Error::RunTerminal {
            run: run.id.clone(),
            state: run.state,
        });
    }
    if let Some(lease) = run.lease.as_ref().filter(|l| l.is_live(now_ms)) {
        return Err(Error::LeaseHeld {
            run: run.id.clone(),
            worker: lease.worker.clone(),
            expires_ms: lease.expires_ms,
        });
    }
    wake_and_grant(state, &run, &cmd.worker, expires_ms, now_ms)
}

/// Decides `ClaimNext`: the run claimable longest (ties by id) is granted;
/// none is answered with `NothingToClaim`. The books visit their claimable
/// runs in that order, so this takes the first.
pub(crate) fn decide_claim(state: &dyn BooksRead, cmd: &ClaimNext, now_ms: u64) -> Result<Decided> {
    let expires_ms = expiry_ms(cmd.ttl_ms, now_ms)?;
    let mut best: Option<Run> = None;
    let mut take = |run: &Run| {
        best = Some(run.clone());
        false
    };
    match &cmd.agents {
        None => state.visit_claimable(now_ms, &mut take),
        Some(agents) => {
            let serves = |agent: &str| agents.iter().any(|a| a == agent);
            state.visit_claimable_served(now_ms, &serves, &mut take);
        }
    }
    match best {
        None => Ok(Decided {
            ops: Vec::new(),
            answer: Answer::NothingToClaim,
        }),
        Some(run) => {
            let wake = wake_ms(state.waits(&run.id).as_ref());
            assert!(
                claimable(&run, wake, now_ms),
                "only claimable runs are visited"
            );
            wake_and_grant(state, &run, &cmd.worker, expires_ms, now_ms)
        }
    }
}

/// Decides `RenewLease`: the live holder extends its lease to
/// `now_ms + ttl_ms`.
pub(crate) fn decide_renew(
    state: &dyn BooksRead,
    cmd: &RenewLease,
    now_ms: u64,
) -> Result<Decided> {
    let expires_ms = expiry_ms(cmd.ttl_ms, now_ms)?;
    let run = existing(state, &cmd.run)?;
    check_live(&run, &cmd.guard, now_ms)?;
    let version = run.version + 1;
    let op = Op::LeaseRenewed {
        run: run.id.clone(),
        token: cmd.guard.token,
        expires_ms,
        version,
        at_ms: now_ms,
    };
    let answer = Answer::Leased {
        run: run.id.clone(),
        token: cmd.guard.token,
        expires_ms,
        version,
    };
    Ok(Decided {
        ops: vec![op],
        answer,
    })
}

/// Decides `ReleaseLease`: the live holder gives the run up.
pub(crate) fn decide_release(
    state: &dyn BooksRead,
    cmd: &ReleaseLease,
    now_ms: u64,
) -> Result<Decided> {
    let run = existing(state, &cmd.run)?;
    check_live(&run, &cmd.guard, now_ms)?;
    let version = run.version + 1;
    let op = Op::LeaseReleased {
        run: run.id.clone(),
        token: cmd.guard.token,
        version,
        at_ms: now_ms,
    };
    Ok(Decided {
        ops: vec![op],
        answer: Answer::Released {
            run: run.id.clone(),
            version,
        },
    })
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::test_support::*;
    use crate::books::*;

    #[test]
    fn acquire_when_free_and_refused_when_held() {
        let mut b = Books::default();
        b.ok(create("r", b"in"));
        let d = b.ok(acquire("r", "w1", 1_000));
        assert!(matches!(
            d.answer,
            Answer::Leased {
                token: FencingToken(1),
                expires_ms: 2_000,
                ..
            }
        ));
        let err = b.run(acquire("r", "w2", 1_000)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::LeaseHeld {
                    expires_ms: 2_000,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            b.mem.run(&rid("r")).unwrap().lease.unwrap().worker,
            wid("w1")
        );
    }

    #[test]
    fn acquire_after_expiry_bumps_the_token_and_fences_the_old_holder() {
        let (mut b, old) = books_with_leased_run("r");
        b.now_ms += LEASE_MS; // exactly at expiry: dead
        let d = b.ok(acquire("r", "w2", 1_000));
        let Answer::Leased { token, .. } = d.answer else {
            panic!("{:?}", d.answer)
        };
        assert_eq!(token, old.token.next());
        let err = b.run(transition("r", &old, RunState::Running)).unwrap_err();
        assert!(
            matches!(err, Error::Fenced { presented, current, .. } if presented == old.token && current == token),
            "{err}"
        );
    }

    #[test]
    fn expired_lease_is_lost_and_live_one_works() {
        let (mut b, g) = books_with_leased_run("r");
        b.now_ms += LEASE_MS - 1;
        b.ok(renew("r", &g, 50));
        b.now_ms += 50;
        let err = b.run(transition("r", &g, RunState::Running)).unwrap_err();
        assert!(
            matches!(err, Error::LeaseLost { token, .. } if token == g.token),
            "{err}"
        );
        assert_eq!(b.mem.run(&rid("r")).unwrap().state, RunState::Pending);
    }

    #[test]
    fn renew_extends_and_bumps_version() {
        let (mut b, g) = books_with_leased_run("r");
        let v = b.mem.run(&rid("r")).unwrap().version;
        b.now_ms += 10;
        b.ok(renew("r", &g, 5_000));
        let run = b.mem.run(&rid("r")).unwrap();
        assert_eq!(run.lease.unwrap().expires_ms, b.now_ms + 5_000);
        assert_eq!(run.version, v + 1);
    }

    #[test]
    fn wrong_worker_with_right_token_is_fenced() {
        let (mut b, g) = books_with_leased_run("r");
        let forged = Guard {
            run: g.run.clone(),
            worker: wid("intruder"),
            token: g.token,
        };
        assert!(matches!(
            b.run(renew("r", &forged, 10)),
            Err(Error::Fenced { .. })
        ));
    }

    #[test]
    fn a_guard_of_another_run_held_by_the_same_worker_under_the_same_token_is_refused() {
        // Tokens count per run: w1 holds both runs under token 1.
        let (mut b, ga) = books_with_leased_run("a");
        b.ok(create("b", b"b"));
        let Answer::Leased { token, .. } = b.ok(acquire("b", "w1", LEASE_MS)).answer else {
            panic!("b is free")
        };
        assert_eq!(token, ga.token, "the same token on both runs");
        let refused = |result: Result<Decided>| {
            matches!(
                result,
                Err(Error::GuardOfAnotherRun { ref run, ref guard_run })
                    if *run == rid("b") && *guard_run == rid("a")
            )
        };
        assert!(refused(b.run(renew("b", &ga, 10))), "a mutation");
        assert!(refused(b.run(release("b", &ga))), "a release");
        b.ok(transition(
            "b",
            &Guard {
                run: rid("b"),
                ..ga.clone()
            },
            RunState::Running,
        ));
        let key = EffectKey::new(rid("b"), sid("pay"), 1).unwrap();
        let gb = Guard {
            run: rid("b"),
            ..ga.clone()
        };
        b.ok(begin("b", "pay", &gb, ToolClass::NotIdempotent, b"10"));
        assert!(refused(b.run(finish(&key, &ga, confirmed(b"r")))), "a fact");
        b.ok(finish(&key, &gb, confirmed(b"r")));
        b.ok(renew("a", &ga, 10));
    }

    #[test]
    fn release_then_mutation_is_refused_and_others_may_acquire() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(release("r", &g));
        assert!(b.mem.run(&rid("r")).unwrap().lease.is_none());
        assert!(matches!(
            b.run(renew("r", &g, 10)),
            Err(Error::LeaseLost { .. })
        ));
        let d = b.ok(acquire("r", "w2", 10));
        assert!(matches!(
            d.answer,
            Answer::Leased {
                token: FencingToken(2),
                ..
            }
        ));
        // The first holder is now behind the current token: fenced.
        assert!(matches!(
            b.run(renew("r", &g, 10)),
            Err(Error::Fenced { .. })
        ));
    }

    #[test]
    fn ttl_limits_are_enforced() {
        let mut b = Books::default();
        b.ok(create("r", b"in"));
        assert!(matches!(
            b.run(acquire("r", "w", 0)),
            Err(Error::InvalidCommand { .. })
        ));
        assert!(matches!(
            b.run(acquire("r", "w", LEASE_TTL_MS_MAX + 1)),
            Err(Error::InvalidCommand { .. })
        ));
        assert!(b.mem.run(&rid("r")).unwrap().lease.is_none());
    }

    #[test]
    fn claim_next_of_some_agents_passes_over_the_others_in_claim_order() {
        let mut b = Books::default();
        for (run, agent) in [("a", "mail@1"), ("b", "travel@1"), ("c", "travel@2")] {
            let mut cmd = create(run, b"1");
            if let Command::CreateRun(c) = &mut cmd {
                c.agent_version = agent.into();
            }
            b.ok(cmd);
        }
        let of = |agents: &[&str]| {
            let mut cmd = claim("w", 1_000);
            if let Command::ClaimNext(c) = &mut cmd {
                c.agents = Some(agents.iter().map(|a| a.to_string()).collect());
            }
            cmd
        };
        let leased = |d: &Decided| match &d.answer {
            Answer::Leased { run, .. } => Some(run.as_str().to_string()),
            _ => None,
        };
        assert_eq!(
            leased(&b.ok(of(&["travel@2", "travel@1"]))).as_deref(),
            Some("b")
        );
        assert_eq!(
            leased(&b.ok(of(&["travel@2", "travel@1"]))).as_deref(),
            Some("c")
        );
        let none = b.ok(of(&["travel@1", "travel@2", "travel@3"]));
        assert_eq!(none.answer, Answer::NothingToClaim);
        assert_eq!(leased(&b.ok(of(&[]))), None, "an empty list serves nothing");
        assert_eq!(leased(&b.ok(claim("w", 1_000))).as_deref(), Some("a"));
    }

    #[test]
    fn claim_next_takes_oldest_updated_then_id_and_skips_live_leases() {
        let mut b = Books {
            now_ms: 100,
            ..Books::default()
        };
        b.ok(create("b", b"1"));
        b.ok(create("a", b"1"));
        b.now_ms = 50; // created later in wall time but updated earlier: a clock jump
        b.ok(create("c", b"1"));
        b.now_ms = 200;
        let first = b.ok(claim("w1", 1_000));
        assert!(matches!(&first.answer, Answer::Leased { run, .. } if run == &rid("c")));
        let second = b.ok(claim("w2", 1_000));
        assert!(matches!(&second.answer, Answer::Leased { run, .. } if run == &rid("a")));
        let third = b.ok(claim("w3", 1_000));
        assert!(matches!(&third.answer, Answer::Leased { run, .. } if run == &rid("b")));
        let none = b.ok(claim("w4", 1_000));
        assert_eq!(none.answer, Answer::NothingToClaim);
        assert!(none.ops.is_empty());
        // After expiry, the run is claimable again, under a new token.
        b.now_ms = 1_200;
        let again = b.ok(claim("w5", 1_000));
        assert!(matches!(
            &again.answer,
            Answer::Leased {
                token: FencingToken(2),
                ..
            }
        ));
    }

    #[test]
    fn a_batch_of_claims_takes_runs_in_claim_order_each_once() {
        let mut b = Books {
            now_ms: 100,
            ..Books::default()
        };
        for run in ["c", "a", "b"] {
            b.ok(create(run, b"1"));
        }
        b.now_ms = 200;
        let d = b.ok(Command::Batch(vec![
            claim("w1", 1_000),
            claim("w2", 1_000),
            claim("w3", 1_000),
            claim("w4", 1_000),
        ]));
        let Answer::Batch(answers) = d.answer else {
            panic!("{:?}", d.answer)
        };
        let claimed: Vec<String> = answers
            .iter()
            .map(|a| match a {
                Answer::Leased { run, .. } => run.to_string(),
                Answer::NothingToClaim => "-".to_string(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            claimed,
            ["a", "b", "c", "-"],
            "same instant: by id, each once"
        );
    }

    #[test]
    fn claimable_rules_per_state() {
        let (b, _g) = books_with_leased_run("r");
        let mut run = b.mem.run(&rid("r")).unwrap();
        let now = run.updated_ms + 10;
        let expired = run.lease.clone().map(|l| Lease { expires_ms: 0, ..l });
        for state in RunState::ALL {
            run.state = state;
            run.lease = None;
            let free = claimable(&run, None, now);
            let due = claimable(&run, Some(now), now);
            let not_due = claimable(&run, Some(now + 1), now);
            run.lease = expired.clone();
            let dead = claimable(&run, None, now);
            let expect = match state {
                RunState::Pending | RunState::Running | RunState::Compensating => {
                    (true, true, true, true)
                }
                RunState::WaitingTool | RunState::WaitingHuman => (false, true, false, true),
                _ => (false, false, false, false),
            };
            assert_eq!((free, due, not_due, dead), expect, "{state}");
        }
        // A free run is claimable from its last change, a leased one from
        // its lease's expiry.
        run.state = RunState::Pending;
        run.lease = None;
        assert_eq!(claimable_from_ms(&run, None), Some(run.updated_ms));
        run.lease = expired;
        assert_eq!(claimable_from_ms(&run, None), Some(0));
        // A waiting run nobody holds wakes at its wait's deadline.
        run.state = RunState::WaitingTool;
        run.lease = None;
        assert_eq!(claimable_from_ms(&run, Some(77)), Some(77));
    }
}

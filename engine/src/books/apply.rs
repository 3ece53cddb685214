//! `apply`: the one function that turns a decided op into state, on the
//! live path and on recovery alike.
//!
//! Invariants: apply reads no clock and makes no choice (every value comes
//! from the op); it cannot fail on an op that decide produced, so a broken
//! precondition is a bug and panics with the op's story rather than
//! corrupting the books; the same op sequence from the same snapshot always
//! produces the same state.

use super::audit::describe;
use super::digest::digest_of;
use super::ids::RunId;
use super::ledger::EffectStatus;
use super::op::Op;
use super::run::{Run, transition_allowed};
use super::state::BooksWrite;

fn run_of(state: &(impl BooksWrite + ?Sized), id: &RunId) -> Run {
    state
        .run(id)
        .unwrap_or_else(|| panic!("apply: run {id} does not exist"))
}

/// Checks that `version` is the successor of `run`'s and records the change.
fn bump(run: &mut Run, version: u64, at_ms: u64) {
    assert_eq!(
        run.version + 1,
        version,
        "apply: run {} version out of order",
        run.id
    );
    run.version = version;
    run.updated_ms = at_ms;
}

/// Applies one decided op to `state`, and appends its audit line.
pub fn apply(state: &mut (impl BooksWrite + ?Sized), op: &Op) {
    match op {
        Op::RunCreated { run } => {
            assert!(
                state.run(&run.id).is_none(),
                "apply: run {} already exists",
                run.id
            );
            assert_eq!(
                run.version, 1,
                "apply: run {} created at version {}",
                run.id, run.version
            );
            state.put_run(run.clone());
        }
        Op::RunTransitioned {
            run,
            from,
            to,
            version,
            at_ms,
            ..
        } => {
            let mut r = run_of(state, run);
            assert_eq!(r.state, *from, "apply: run {run} is not {from}");
            assert!(
                transition_allowed(*from, *to),
                "apply: {from} -> {to} is illegal"
            );
            bump(&mut r, *version, *at_ms);
            r.state = *to;
            if to.is_terminal() {
                r.lease = None;
            }
            state.put_run(r);
        }
        Op::LeaseAcquired {
            run,
            lease,
            version,
            at_ms,
        } => {
            let mut r = run_of(state, run);
            assert_eq!(
                r.next_token, lease.token,
                "apply: run {run} lease token out of order"
            );
            bump(&mut r, *version, *at_ms);
            r.next_token = lease.token.next();
            r.lease = Some(lease.clone());
            state.put_run(r);
        }
        Op::LeaseRenewed {
            run,
            token,
            expires_ms,
            version,
            at_ms,
        } => {
            let mut r = run_of(state, run);
            bump(&mut r, *version, *at_ms);
            let lease = r.lease.as_mut().filter(|l| l.token == *token);
            lease
                .unwrap_or_else(|| panic!("apply: run {run} has no lease under {token}"))
                .expires_ms = *expires_ms;
            state.put_run(r);
        }
        Op::LeaseReleased {
            run,
            token,
            version,
            at_ms,
        } => {
            let mut r = run_of(state, run);
            assert!(
                r.lease.as_ref().is_some_and(|l| l.token == *token),
                "apply: run {run} has no lease under {token}"
            );
            bump(&mut r, *version, *at_ms);
            r.lease = None;
            state.put_run(r);
        }
        Op::EffectIntended { entry } => {
            assert_eq!(entry.status, EffectStatus::Intended);
            assert!(
                state.effect(&entry.key).is_none(),
                "apply: effect {} already exists",
                entry.key
            );
            state.put_effect(entry.clone());
        }
        Op::EffectResent { key, .. } => {
            let mut e = state
                .effect(key)
                .unwrap_or_else(|| panic!("apply: effect {key} does not exist"));
            assert_eq!(
                e.status,
                EffectStatus::Intended,
                "apply: resend of settled effect {key}"
            );
            e.resends += 1;
            state.put_effect(e);
        }
        Op::EffectSettled {
            key, status, at_ms, ..
        } => {
            let mut e = state
                .effect(key)
                .unwrap_or_else(|| panic!("apply: effect {key} does not exist"));
            let from_ok = match status {
                EffectStatus::Intended => false,
                EffectStatus::Compensated { .. } => {
                    matches!(e.status, EffectStatus::Confirmed { .. })
                }
                _ => matches!(
                    e.status,
                    EffectStatus::Intended | EffectStatus::Unknown { .. }
                ),
            };
            assert!(
                from_ok,
                "apply: effect {key} cannot go from {} to {}",
                e.status.name(),
                status.name()
            );
            e.status = status.clone();
            e.settled_ms = Some(*at_ms);
            state.put_effect(e);
        }
        Op::BlobPut { digest, bytes } => {
            assert_eq!(
                digest_of(bytes),
                *digest,
                "apply: blob bytes do not match digest {digest}"
            );
            state.put_blob(*digest, bytes.clone());
        }
        Op::CheckpointSaved { meta } => {
            let expected = state
                .checkpoint_latest(&meta.run)
                .map_or(1, |m| m.version + 1);
            assert_eq!(
                meta.version, expected,
                "apply: checkpoint of run {} out of order",
                meta.run
            );
            assert!(
                meta.parts.iter().all(|p| state.blob_exists(&p.digest)),
                "apply: checkpoint names a missing blob"
            );
            state.put_checkpoint(meta.clone());
        }
        Op::DecisionRecorded { record } => {
            assert_eq!(
                record.position,
                state.decision_count(&record.run),
                "apply: decision position out of order"
            );
            state.put_decision(record.clone());
        }
    }
    if let Some((run, mut entry)) = describe(op) {
        entry.seq = state.audit_len(&run) + 1;
        state.push_audit(&run, entry);
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::checkpoint::Part;
    use crate::books::ledger::{Outcome, ToolClass};
    use crate::books::mem::MemBooks;
    use crate::books::run::RunState;
    use crate::books::test_support::*;

    /// A workload touching every op kind; returns the ops it logged.
    fn workload() -> (Books, Vec<Op>) {
        let mut b = Books::default();
        let mut log = Vec::new();
        let mut go = |b: &mut Books, cmd| log.extend(b.ok(cmd).ops);
        go(&mut b, create("r", b"in"));
        go(&mut b, create("q", b"in"));
        go(&mut b, claim("w", LEASE_MS));
        let g = Guard {
            worker: wid("w"),
            token: crate::books::ids::FencingToken(1),
        };
        let run = b.mem.run(&rid("q")).unwrap();
        assert!(
            run.lease.is_some(),
            "claim takes the oldest then lowest id: q"
        );
        go(&mut b, transition("q", &g, RunState::Running));
        go(
            &mut b,
            begin(
                "q",
                "pay",
                &g,
                ToolClass::Idempotent {
                    dedup_window_ms: 100,
                },
                b"a",
            ),
        );
        go(
            &mut b,
            begin(
                "q",
                "pay",
                &g,
                ToolClass::Idempotent {
                    dedup_window_ms: 100,
                },
                b"a",
            ),
        );
        let key = crate::books::ids::EffectKey::parse("q/pay/1").unwrap();
        go(
            &mut b,
            finish(
                &key,
                &g,
                Outcome::Confirmed {
                    receipt: b"ok".to_vec(),
                },
            ),
        );
        go(&mut b, compensated(&key, &g));
        go(
            &mut b,
            save(
                "q",
                &g,
                1,
                vec![Part {
                    name: "m".into(),
                    bytes: vec![1; 100],
                }],
            ),
        );
        go(&mut b, decision("q", &g, 0, b"p", b"o"));
        go(&mut b, renew("q", &g, 10));
        go(&mut b, release("q", &g));
        (b, log)
    }

    #[test]
    fn the_same_ops_on_two_fresh_books_give_equal_books() {
        let (live, log) = workload();
        assert!(log.len() >= 12);
        let mut a = MemBooks::new();
        let mut c = MemBooks::new();
        for op in &log {
            apply(&mut a, op);
        }
        // The second replay goes through the encoded log, as recovery does.
        for op in &log {
            apply(&mut c, &Op::decode(&op.encode()).unwrap());
        }
        assert_eq!(a, c);
        assert_eq!(a, live.mem, "replay must rebuild exactly the live books");
    }

    #[test]
    fn replay_from_a_snapshot_equals_full_replay() {
        let (live, log) = workload();
        let mut snapshot = MemBooks::new();
        let split = log.len() / 2;
        for op in &log[..split] {
            apply(&mut snapshot, op);
        }
        let mut resumed = snapshot.clone();
        for op in &log[split..] {
            apply(&mut resumed, op);
        }
        assert_eq!(resumed, live.mem);
        assert_ne!(snapshot, live.mem);
    }

    #[test]
    #[should_panic(expected = "apply: run q")]
    fn applying_an_op_twice_is_a_detected_bug() {
        let (_, log) = workload();
        let mut m = MemBooks::new();
        for op in &log[..4] {
            apply(&mut m, op);
        }
        apply(&mut m, &log[3]);
    }
}

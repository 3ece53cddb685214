//! Coordination between runs: named resource leases and versioned shared
//! keys, both outliving any one run.
//!
//! A **resource lease** (`customer:42`) is held by a run, under that run's
//! live lease, until an expiry; while it is live no other run gets it, so
//! two agents never work the same customer at once. Every grant hands out a
//! fencing token larger than any before for that resource, and the caller
//! gives it to the tools it calls, so the outside world can refuse a stale
//! holder (a paused worker whose hold expired and went to another run). A
//! hold ends when released, when it expires, or when its run ends.
//!
//! A **shared key** (`dnc:customer-42`, a do-not-contact flag) holds a value
//! and a version; a set names the version it read (compare-and-set), so of
//! two racing writers one wins and the other is told the version moved. A
//! key outlives every run, is set by a run under its lease or by an
//! operator, and keeps the last [`SHARED_CHANGES_MAX`](crate::books::SHARED_CHANGES_MAX) changes (who, when,
//! why) with it; a change by a run is journaled in the run's audit too.
//!
//! **Invariant:** a resource's tokens only grow; at most one run holds a
//! live lease on a resource; a shared key's version grows by one per set.

use crate::books::base::digest::digest_of;
use crate::books::base::ids::{FencingToken, ResourceId, RunId};
use crate::books::base::limits::{
    LEASE_TTL_MS_MAX, SHARED_VALUE_BYTES_MAX, check_size, check_text,
};
use crate::books::records::coord::{ResourceBook, ResourceHold, SharedChange};
use crate::books::records::run::Run;
use crate::books::rules::checks::{check_live, existing};
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::{
    AcquireResource, Guard, ReleaseResource, SetShared, SharedSetter,
};
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// The live hold of `book` at `now_ms`: unexpired, its run not over, and
/// taken in the run's current life (not before a pruned name was reused).
pub fn live_hold<'b>(
    state: &dyn BooksRead,
    book: &'b ResourceBook,
    now_ms: u64,
) -> Option<&'b ResourceHold> {
    book.hold.as_ref().filter(|h| {
        // A hold taken before its run was created is a pruned earlier
        // life's, not this run's.
        h.expires_ms > now_ms
            && state
                .run(&h.run)
                .is_some_and(|r| !r.state.is_terminal() && h.acquired_ms >= r.created_ms)
    })
}

/// The run `id` under the caller's live lease, not over.
fn holder_run(state: &dyn BooksRead, id: &RunId, guard: &Guard, now_ms: u64) -> Result<Run> {
    let run = existing(state, id)?;
    if run.state.is_terminal() {
        return Err(Error::RunTerminal {
            run: run.id.clone(),
            state: run.state,
        });
    }
    check_live(&run, guard, now_ms)?;
    Ok(run)
}

/// Decides `AcquireResource`: the run, under its live lease, takes the
/// resource until `now + ttl`. Free (never held, released, expired, or its
/// holder's run over): a new hold with the next token. Held by this run:
/// renewed under the same token. Held by another run: `ResourceHeld`.
pub(crate) fn decide_acquire_resource(
    state: &dyn BooksRead,
    cmd: &AcquireResource,
    now_ms: u64,
) -> Result<Decided> {
    if cmd.ttl_ms == 0 || cmd.ttl_ms > LEASE_TTL_MS_MAX {
        return Err(Error::InvalidCommand {
            reason: format!(
                "a resource lease of {} ms: it must be 1 to {LEASE_TTL_MS_MAX} ms",
                cmd.ttl_ms
            ),
        });
    }
    let run = holder_run(state, &cmd.run, &cmd.guard, now_ms)?;
    let expires_ms = now_ms.saturating_add(cmd.ttl_ms);
    let book = state.resource(&cmd.resource);
    let live = book.as_ref().and_then(|b| live_hold(state, b, now_ms));
    if let Some(hold) = live {
        if hold.run != run.id {
            return Err(Error::ResourceHeld {
                resource: cmd.resource.clone(),
                holder: hold.run.clone(),
                expires_ms: hold.expires_ms,
            });
        }
        let op = Op::ResourceRenewed {
            resource: cmd.resource.clone(),
            run: run.id.clone(),
            token: hold.token,
            expires_ms,
            at_ms: now_ms,
        };
        let answer = granted(&cmd.resource, hold.token, expires_ms, true);
        return Ok(Decided {
            ops: vec![op],
            answer,
        });
    }
    let token = book.map_or(FencingToken::FIRST, |b| b.next_token);
    let op = Op::ResourceAcquired {
        resource: cmd.resource.clone(),
        run: run.id.clone(),
        token,
        expires_ms,
        at_ms: now_ms,
    };
    Ok(Decided {
        ops: vec![op],
        answer: granted(&cmd.resource, token, expires_ms, false),
    })
}

fn granted(resource: &ResourceId, token: FencingToken, expires_ms: u64, renewed: bool) -> Answer {
    Answer::ResourceGranted {
        resource: resource.clone(),
        token,
        expires_ms,
        renewed,
    }
}

/// Decides `ReleaseResource`: the run gives up its live hold. Releasing a
/// resource it does not hold (any more) is `ResourceNotHeld`.
pub(crate) fn decide_release_resource(
    state: &dyn BooksRead,
    cmd: &ReleaseResource,
    now_ms: u64,
) -> Result<Decided> {
    let run = holder_run(state, &cmd.run, &cmd.guard, now_ms)?;
    let book = state.resource(&cmd.resource);
    let hold = book
        .as_ref()
        .and_then(|b| live_hold(state, b, now_ms))
        .filter(|h| h.run == run.id)
        .ok_or_else(|| Error::ResourceNotHeld {
            resource: cmd.resource.clone(),
            run: run.id.clone(),
        })?;
    let op = Op::ResourceReleased {
        resource: cmd.resource.clone(),
        run: run.id.clone(),
        token: hold.token,
        at_ms: now_ms,
    };
    Ok(Decided {
        ops: vec![op],
        answer: Answer::ResourceReleased {
            resource: cmd.resource.clone(),
        },
    })
}

/// Decides `SetShared`: a compare-and-set of a shared key, by a run under
/// its live lease or by a named operator. `expected_version` must be the
/// key's version (0 for a key never set), else `SharedVersionConflict`
/// naming both; setting the value it holds already changes nothing.
pub(crate) fn decide_set_shared(
    state: &dyn BooksRead,
    cmd: &SetShared,
    now_ms: u64,
) -> Result<Decided> {
    check_text("shared key reason", &cmd.reason)?;
    if let Some(value) = &cmd.value {
        check_size(
            || format!("value of shared key {}", cmd.key),
            value.len(),
            SHARED_VALUE_BYTES_MAX,
        )?;
    }
    let (by, run, token) = match &cmd.by {
        SharedSetter::Run { run, guard } => {
            let run = holder_run(state, run, guard, now_ms)?;
            (run.id.to_string(), Some(run.id), Some(guard.token))
        }
        SharedSetter::Operator { name } => {
            check_text("operator", name)?;
            if name.is_empty() {
                return Err(Error::InvalidCommand {
                    reason: format!("a set of shared key {} must name its operator", cmd.key),
                });
            }
            (name.clone(), None, None)
        }
    };
    let entry = state.shared(&cmd.key);
    let current = entry.as_ref().map_or(0, |e| e.version);
    if cmd.expected_version != current {
        return Err(Error::SharedVersionConflict {
            key: cmd.key.clone(),
            expected: cmd.expected_version,
            actual: current,
        });
    }
    if entry.as_ref().is_some_and(|e| e.value == cmd.value) {
        return Ok(Decided {
            ops: Vec::new(),
            answer: Answer::SharedSet {
                key: cmd.key.clone(),
                version: current,
                changed: false,
            },
        });
    }
    let version = current + 1;
    let op = Op::SharedSet {
        key: cmd.key.clone(),
        version,
        value: cmd.value.clone(),
        change: SharedChange {
            version,
            at_ms: now_ms,
            by,
            run,
            token,
            value_digest: cmd.value.as_deref().map(digest_of),
            why: cmd.reason.clone(),
        },
    };
    Ok(Decided {
        ops: vec![op],
        answer: Answer::SharedSet {
            key: cmd.key.clone(),
            version,
            changed: true,
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
    use crate::books::Command;
    use crate::books::RunState;
    use crate::books::test_support::*;
    use crate::books::*;

    fn res(name: &str) -> ResourceId {
        ResourceId::new(name).unwrap()
    }

    fn key(name: &str) -> SharedKeyId {
        SharedKeyId::new(name).unwrap()
    }

    fn acquire_res(run: &str, g: &Guard, ttl_ms: u64) -> Command {
        Command::AcquireResource(AcquireResource {
            resource: res("customer:42"),
            run: rid(run),
            guard: g.clone(),
            ttl_ms,
        })
    }

    fn release_res(run: &str, g: &Guard) -> Command {
        Command::ReleaseResource(ReleaseResource {
            resource: res("customer:42"),
            run: rid(run),
            guard: g.clone(),
        })
    }

    fn set(expected_version: u64, value: &[u8], by: SharedSetter) -> Command {
        Command::SetShared(SetShared {
            key: key("dnc:c42"),
            expected_version,
            value: Some(value.to_vec()),
            by,
            reason: "asked".into(),
        })
    }

    fn grant(d: &Decided) -> (FencingToken, bool) {
        match &d.answer {
            Answer::ResourceGranted { token, renewed, .. } => (*token, *renewed),
            other => panic!("{other:?}"),
        }
    }

    /// Books with runs `a` (leased to w1) and `b` (leased to w2).
    fn two_runs() -> (Books, Guard, Guard) {
        let (mut b, ga) = books_with_leased_run("a");
        b.ok(create("b", b"b"));
        let Answer::Leased {
            run: leased, token, ..
        } = b.ok(acquire("b", "w2", LEASE_MS)).answer
        else {
            panic!("b is free")
        };
        let gb = Guard {
            run: leased,
            worker: wid("w2"),
            token,
        };
        (b, ga, gb)
    }

    #[test]
    fn two_runs_never_hold_one_resource_and_each_grant_has_a_larger_token() {
        let (mut b, ga, gb) = two_runs();
        let (first, renewed) = grant(&b.ok(acquire_res("a", &ga, 1_000)));
        assert!(!renewed);
        let err = b.run(acquire_res("b", &gb, 1_000)).unwrap_err();
        assert!(
            matches!(&err, Error::ResourceHeld { holder, .. } if *holder == rid("a")),
            "{err}"
        );
        assert!(err.to_string().contains("held by run a"), "{err}");
        // The holder renews under the same token.
        b.now_ms += 500;
        assert_eq!(grant(&b.ok(acquire_res("a", &ga, 1_000))), (first, true));
        // Past its expiry the hold is free: b gets a larger token, and a's
        // release is refused.
        b.now_ms += 1_000;
        let (second, _) = grant(&b.ok(acquire_res("b", &gb, 1_000)));
        assert!(second > first);
        assert!(matches!(
            b.run(release_res("a", &ga)),
            Err(Error::ResourceNotHeld { .. })
        ));
        b.ok(release_res("b", &gb));
        assert_eq!(b.mem.resource(&res("customer:42")).unwrap().hold, None);
        let (third, _) = grant(&b.ok(acquire_res("a", &ga, 1_000)));
        assert!(third > second);
        // A hold whose run ended is free at once.
        b.ok(transition("a", &ga, RunState::Cancelled));
        let (fourth, _) = grant(&b.ok(acquire_res("b", &gb, 1_000)));
        assert!(fourth > third);
        let audit = b.mem.audit(&rid("b"), 1);
        assert!(
            audit
                .iter()
                .any(|e| e.what.to_string() == "resource customer:42 released"),
            "{audit:?}"
        );
    }

    #[test]
    fn a_resource_is_taken_only_under_a_live_run_lease() {
        let (mut b, ga, _) = two_runs();
        b.now_ms += LEASE_MS;
        assert!(matches!(
            b.run(acquire_res("a", &ga, 1_000)),
            Err(Error::LeaseLost { .. })
        ));
        assert!(matches!(
            b.run(acquire_res("a", &ga, 0)),
            Err(Error::InvalidCommand { .. })
        ));
    }

    #[test]
    fn a_shared_key_changes_only_from_the_version_its_setter_read() {
        let (mut b, ga, gb) = two_runs();
        let by_a = SharedSetter::Run {
            run: rid("a"),
            guard: ga.clone(),
        };
        let by_b = SharedSetter::Run {
            run: rid("b"),
            guard: gb.clone(),
        };
        b.ok(set(0, b"one", by_a.clone()));
        // b read version 0 too: it lost the race.
        let err = b.run(set(0, b"two", by_b.clone())).unwrap_err();
        assert!(
            matches!(
                err,
                Error::SharedVersionConflict {
                    expected: 0,
                    actual: 1,
                    ..
                }
            ),
            "{err}"
        );
        let d = b.ok(set(1, b"two", by_b));
        assert!(matches!(
            d.answer,
            Answer::SharedSet {
                version: 2,
                changed: true,
                ..
            }
        ));
        // The value it holds already: nothing written.
        assert!(b.ok(set(2, b"two", by_a)).ops.is_empty());
        let entry = b.mem.shared(&key("dnc:c42")).unwrap();
        assert_eq!(
            (entry.version, entry.value.as_deref()),
            (2, Some(&b"two"[..]))
        );
        assert_eq!(entry.changes[1].run, Some(rid("b")));
        assert!(
            b.mem
                .audit(&rid("b"), 1)
                .iter()
                .any(|e| e.what.to_string().starts_with("shared key dnc:c42 set")),
            "a run's set is in its audit"
        );
        // An operator's sets keep the last SHARED_CHANGES_MAX changes.
        let ops = SharedSetter::Operator {
            name: "ops-anna".into(),
        };
        for v in 2..(2 + SHARED_CHANGES_MAX as u64) {
            b.ok(set(v, &v.to_le_bytes(), ops.clone()));
        }
        let entry = b.mem.shared(&key("dnc:c42")).unwrap();
        assert_eq!(entry.changes.len(), SHARED_CHANGES_MAX);
        assert_eq!(entry.changes.last().unwrap().version, entry.version);
        assert_eq!(
            entry.changes[0].version,
            entry.version + 1 - SHARED_CHANGES_MAX as u64
        );
    }
}

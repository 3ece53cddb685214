//! Invariants of durable waits, checked over the books a recovery or the
//! end of a run left:
//!
//! - no wait elapses before its deadline (a timer fires, an approval
//!   expires, only once its instant has come);
//! - a wait is ended by a signal only of the name it waits for, sent no
//!   later than the wait ended, and the signals of one name are taken in
//!   the order they arrived (no older one is left in the inbox behind a
//!   newer one taken);
//! - an effect at a step that asked for an approval was approved, with the
//!   arguments it carries, before its intent was written;
//! - a wait for a child run ends as the child's, only once the child ended,
//!   with the state it ended in (and only a child's end ends it so);
//! - a wait for several children (a fan-out) ends as theirs: for all of
//!   them, with every child it names, each ended in the state it holds;
//!   for the first, with exactly one of them, ended so;
//! - a wait for a tool's reply ends as replied only with the outcome the
//!   ledger holds for that effect (a confirmed one may since have been
//!   compensated), and only a reply ends it so.
//!
//! The books come from applying ops, not from the rules `decide` enforces,
//! so these catch an engine that skips a rule.

use actum::books::{BooksRead, EffectKind, EffectStatus, Join, MemBooks, WaitFor, WaitStatus};

/// `Err` naming the first wait, signal or effect that breaks a wait's terms.
pub fn waits_keep_their_terms(books: &MemBooks) -> Result<(), String> {
    for run in books.runs() {
        let Some(book) = books.waits(&run.id) else {
            continue;
        };
        let mut taken: Vec<(String, u64)> = Vec::new();
        for wait in &book.waits {
            let ended_ms = wait.ended_ms.unwrap_or(u64::MAX);
            match (&wait.status, &wait.wait_for) {
                (WaitStatus::Elapsed, _) => {
                    let deadline = wait.deadline_ms.unwrap_or(u64::MAX);
                    if ended_ms < deadline {
                        return Err(format!(
                            "the {} at step {} of run {} elapsed at {ended_ms} ms, before its \
                             deadline {deadline} ms",
                            wait.wait_for, wait.step, run.id
                        ));
                    }
                }
                (WaitStatus::Signalled { signal }, WaitFor::Signal { name }) => {
                    if signal.name != *name || signal.sent_ms > ended_ms {
                        return Err(format!(
                            "the wait for signal {name} at step {} of run {} was ended by \
                             signal {} ({}) sent at {} ms",
                            wait.step, run.id, signal.seq, signal.name, signal.sent_ms
                        ));
                    }
                    if let Some((_, earlier)) = taken.iter().rev().find(|(n, _)| n == name)
                        && *earlier >= signal.seq
                    {
                        return Err(format!(
                            "run {} took signal {} ({name}) after signal {earlier}",
                            run.id, signal.seq
                        ));
                    }
                    taken.push((name.clone(), signal.seq));
                }
                (WaitStatus::Signalled { signal }, other) => {
                    return Err(format!(
                        "the {other} at step {} of run {} was ended by signal {}",
                        wait.step, run.id, signal.seq
                    ));
                }
                (WaitStatus::ChildEnded { state, .. }, WaitFor::Child { run: child }) => {
                    let found = books.run(child).map(|c| c.state);
                    if found != Some(*state) || !state.is_terminal() {
                        return Err(format!(
                            "the wait at step {} of run {} ended as child {child} ended {state}, \
                             but the child is {}",
                            wait.step,
                            run.id,
                            found.map_or_else(|| "gone".to_string(), |s| s.to_string())
                        ));
                    }
                }
                (WaitStatus::ChildrenEnded { ended }, WaitFor::Children { runs, join }) => {
                    let names: Vec<_> = ended.iter().map(|e| &e.run).collect();
                    let expected = match join {
                        Join::All => runs.iter().collect::<Vec<_>>() == names,
                        Join::First => names.len() == 1 && runs.contains(names[0]),
                    };
                    if !expected {
                        return Err(format!(
                            "the wait for {join} of children {runs:?} at step {} of run {} \
                             ended with children {names:?}",
                            wait.step, run.id
                        ));
                    }
                    for end in ended {
                        let found = books.run(&end.run).map(|c| c.state);
                        if found != Some(end.state) || !end.state.is_terminal() {
                            return Err(format!(
                                "the wait at step {} of run {} ended as child {} ended {}, but \
                                 the child is {}",
                                wait.step,
                                run.id,
                                end.run,
                                end.state,
                                found.map_or_else(|| "gone".to_string(), |s| s.to_string())
                            ));
                        }
                    }
                }
                (WaitStatus::ChildrenEnded { .. }, other) => {
                    return Err(format!(
                        "the {other} at step {} of run {} ended as a fan-out's",
                        wait.step, run.id
                    ));
                }
                (WaitStatus::ChildEnded { .. }, other) => {
                    return Err(format!(
                        "the {other} at step {} of run {} ended as a child's",
                        wait.step, run.id
                    ));
                }
                (WaitStatus::Replied { status }, WaitFor::Reply { key }) => {
                    let held = books.effect(key).map(|e| e.status);
                    let holds = match (status, &held) {
                        (
                            EffectStatus::Confirmed { receipt },
                            Some(EffectStatus::Compensated { receipt: r, .. }),
                        ) => receipt == r,
                        (
                            EffectStatus::ConfirmedStored { receipt },
                            Some(EffectStatus::CompensatedStored { receipt: r, .. }),
                        ) => r.stored() == Some(receipt),
                        (status, Some(held)) => status == held,
                        (_, None) => false,
                    };
                    if !holds {
                        return Err(format!(
                            "the wait at step {} of run {} ended with a {} reply to effect {key}, \
                             but the ledger holds it {}",
                            wait.step,
                            run.id,
                            status.name(),
                            held.map_or("nowhere", |s| s.name())
                        ));
                    }
                }
                (WaitStatus::Replied { .. }, other) => {
                    return Err(format!(
                        "the {other} at step {} of run {} ended as a reply",
                        wait.step, run.id
                    ));
                }
                _ => {}
            }
        }
        for (name, seq) in &taken {
            if let Some(older) = book.inbox.iter().find(|s| s.name == *name && s.seq < *seq) {
                return Err(format!(
                    "run {} took signal {seq} ({name}) while the older signal {} waits in its \
                     inbox",
                    run.id, older.seq
                ));
            }
        }
    }
    for entry in books.effects() {
        if entry.key.kind() != EffectKind::Act {
            continue;
        }
        let run = entry.key.run();
        let Some(wait) = books
            .waits(run)
            .and_then(|book| book.approval_at(entry.key.step()).cloned())
        else {
            continue;
        };
        let WaitFor::Approval { args_digest, .. } = &wait.wait_for else {
            continue;
        };
        let approved_in_time = matches!(wait.status, WaitStatus::Approved { .. })
            && wait.ended_ms.is_some_and(|at| at <= entry.intended_ms);
        if !approved_in_time || *args_digest != entry.args_digest {
            return Err(format!(
                "effect {} began at {} ms with args {} while its approval (bound to args {}) \
                 is {} since {:?}",
                entry.key,
                entry.intended_ms,
                entry.args_digest.short(),
                args_digest.short(),
                wait.status.name(),
                wait.ended_ms
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{
        BooksWrite, EffectStatus, FencingToken, RunState, SignalRecord, StepId, ToolClass,
        WaitBook, WaitRecord, digest_of,
    };

    fn wait(step: &str, wait_for: WaitFor, deadline_ms: u64, status: WaitStatus) -> WaitRecord {
        WaitRecord {
            step: StepId::new(step).unwrap(),
            seq: 1,
            wait_for,
            deadline_ms: Some(deadline_ms),
            opened_ms: 500,
            token: FencingToken(1),
            reason: String::new(),
            status,
            ended_ms: Some(900),
        }
    }

    fn signal(seq: u64, name: &str) -> SignalRecord {
        SignalRecord {
            seq,
            name: name.into(),
            payload: Vec::new(),
            sender: "psp".into(),
            sent_ms: 800,
        }
    }

    fn books(waits: Vec<WaitRecord>, inbox: Vec<SignalRecord>) -> MemBooks {
        let mut books = MemBooks::new();
        books.put_run(run_record("r", RunState::Running));
        books.put_waits(WaitBook {
            run: actum::books::RunId::new("r").unwrap(),
            waits,
            inbox,
            signals_received: 9,
        });
        books
    }

    #[test]
    fn a_wait_that_elapses_early_is_caught_and_one_on_time_is_not() {
        let early = books(
            vec![wait("t", WaitFor::Timer, 901, WaitStatus::Elapsed)],
            vec![],
        );
        assert!(
            waits_keep_their_terms(&early)
                .unwrap_err()
                .contains("before its deadline")
        );
        let on_time = books(
            vec![wait("t", WaitFor::Timer, 900, WaitStatus::Elapsed)],
            vec![],
        );
        assert_eq!(waits_keep_their_terms(&on_time), Ok(()));
    }

    #[test]
    fn a_signal_of_another_name_or_out_of_order_is_caught() {
        let on = |name: &str| WaitFor::Signal { name: name.into() };
        let by = |seq, name| WaitStatus::Signalled {
            signal: signal(seq, name),
        };
        let wrong_name = books(
            vec![wait("s", on("paid"), u64::MAX, by(1, "noise"))],
            vec![],
        );
        assert!(waits_keep_their_terms(&wrong_name).is_err());
        let skipped = books(
            vec![wait("s", on("paid"), u64::MAX, by(3, "paid"))],
            vec![signal(2, "paid")],
        );
        assert!(
            waits_keep_their_terms(&skipped)
                .unwrap_err()
                .contains("older signal 2")
        );
        let fine = books(
            vec![wait("s", on("paid"), u64::MAX, by(2, "paid"))],
            vec![signal(3, "paid")],
        );
        assert_eq!(waits_keep_their_terms(&fine), Ok(()));
    }

    #[test]
    fn an_effect_without_its_approval_is_caught() {
        let approval = WaitFor::Approval {
            args_digest: digest_of(b"pay 9"),
            role: "finance".into(),
        };
        let approved = WaitStatus::Approved {
            approver: "ann".into(),
            note: String::new(),
        };
        let mut act = entry("r/pay/1", EffectStatus::Intended, ToolClass::Queryable);
        act.args_digest = digest_of(b"pay 9");
        act.intended_ms = 1_000;
        let mut ok = books(
            vec![wait("pay", approval.clone(), 5_000, approved.clone())],
            vec![],
        );
        ok.put_effect(act.clone());
        assert_eq!(waits_keep_their_terms(&ok), Ok(()));
        let mut rejected = books(
            vec![wait(
                "pay",
                approval.clone(),
                5_000,
                WaitStatus::Rejected {
                    approver: "ann".into(),
                    note: String::new(),
                },
            )],
            vec![],
        );
        rejected.put_effect(act.clone());
        assert!(waits_keep_their_terms(&rejected).is_err());
        let mut other_args = books(vec![wait("pay", approval, 5_000, approved)], vec![]);
        act.args_digest = digest_of(b"pay 90");
        other_args.put_effect(act);
        assert!(waits_keep_their_terms(&other_args).is_err());
    }

    #[test]
    fn a_reply_the_ledger_does_not_hold_is_caught() {
        let screen = entry("r/screen/1", EffectStatus::Intended, ToolClass::Queryable);
        let on_reply = WaitFor::Reply {
            key: screen.key.clone(),
        };
        let clear = EffectStatus::Confirmed {
            receipt: b"clear".to_vec(),
        };
        let replied = WaitStatus::Replied {
            status: clear.clone(),
        };
        let with = |status: EffectStatus| {
            let mut b = books(
                vec![wait("screen", on_reply.clone(), u64::MAX, replied.clone())],
                vec![],
            );
            b.put_effect(actum::books::EffectEntry {
                status,
                ..screen.clone()
            });
            b
        };
        assert!(
            waits_keep_their_terms(&with(EffectStatus::Intended))
                .unwrap_err()
                .contains("the ledger holds it intended")
        );
        assert_eq!(waits_keep_their_terms(&with(clear)), Ok(()));
        let undone = EffectStatus::Compensated {
            receipt: b"clear".to_vec(),
            compensation_receipt: b"undo".to_vec(),
        };
        assert_eq!(waits_keep_their_terms(&with(undone)), Ok(()));
        let timer = books(vec![wait("t", WaitFor::Timer, 1, replied)], vec![]);
        assert!(waits_keep_their_terms(&timer).is_err());
    }
}

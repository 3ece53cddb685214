//! Sagas: when a run that made compensable acts fails or is cancelled, the
//! compensations those acts registered run in reverse order before the run
//! reaches its end. Each compensation is an effect of its own
//! (`compensation.rs`: its own derived key, intent first, outcome after,
//! resumed by the undoing tool's class), so the saga inherits the ledger's
//! exactly-once; this file decides which step comes next and when the saga
//! may end.
//!
//! A run's [`SagaBook`] lists the steps whose act registered a compensation,
//! in the order their first intents were written (`apply` appends them), and,
//! once the run is `compensating`, the end it is headed for (`failed` or
//! `cancelled`). A worker's move to failed or cancelled, or an operator's
//! cancel, of a run whose saga has anything outstanding moves it to
//! `compensating` instead ([`ending`]); the lease holder, or whoever claims
//! the run, walks the steps backwards ([`next`]) and ends the saga
//! ([`decide_end_saga`]) once nothing is outstanding.
//!
//! **Invariant:** a compensating run's book has an end; a saga ends only when
//! every listed step's act is compensated, failed or never happened, so no
//! confirmed act with a registered compensation is left behind by a saga
//! that ended by itself; steps are undone last first.

use crate::books::base::ids::{EffectKind, FencingToken, RunId};
use crate::books::base::limits::{SAGA_STEPS_MAX, check_text};
use crate::books::records::ledger::{EffectEntry, EffectStatus, ToolClass};
use crate::books::records::run::{Run, RunState};
use crate::books::records::saga::{SagaBook, SagaNext, describe_next, is_saga_end};
use crate::books::rules::checks::{check_live, existing};
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::EndSaga;
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// The ops that move `run` towards `end` (failed or cancelled) under
/// `token`: straight there if its saga has nothing outstanding, otherwise
/// to `compensating`, with the end recorded. Returns them and the state
/// the run is in after them.
pub(crate) fn ending(
    state: &dyn BooksRead,
    run: &Run,
    end: RunState,
    (token, now_ms): (FencingToken, u64),
    reason: String,
) -> (Vec<Op>, RunState) {
    assert!(is_saga_end(end), "a saga ends a run failed or cancelled");
    assert!(!run.state.is_terminal() && run.state != RunState::Compensating);
    let outstanding = state
        .saga(&run.id)
        .is_some_and(|book| !matches!(walk(state, &book, now_ms), SagaNext::End { .. }));
    let to = if outstanding {
        RunState::Compensating
    } else {
        end
    };
    let mut ops = vec![Op::RunTransitioned {
        run: run.id.clone(),
        from: run.state,
        to,
        version: run.version + 1,
        at_ms: now_ms,
        token,
        reason,
    }];
    if outstanding {
        ops.push(Op::SagaOpened {
            run: run.id.clone(),
            end,
            at_ms: now_ms,
            token,
        });
    }
    (ops, to)
}

/// What `run`'s saga does next at `now_ms` (see [`SagaNext`]); `End` with
/// the book's end for a run with nothing to undo.
pub fn next(state: &dyn BooksRead, run: &RunId, now_ms: u64) -> SagaNext {
    next_walking(state, run, now_ms, true)
}

/// [`next`], walking the steps last first, or (`last_first` false: the
/// planted bug `UndoFirstStepFirst`) first to last.
pub(crate) fn next_walking(
    state: &dyn BooksRead,
    run: &RunId,
    now_ms: u64,
    last_first: bool,
) -> SagaNext {
    let Some(mut book) = state.saga(run) else {
        return SagaNext::End {
            end: RunState::Failed,
        };
    };
    if !last_first {
        book.steps.reverse();
    }
    walk(state, &book, now_ms)
}

/// Walks `book`'s steps last first; the first with anything outstanding
/// decides.
fn walk(state: &dyn BooksRead, book: &SagaBook, now_ms: u64) -> SagaNext {
    // `begin_effect` refuses a compensable step past the limit, so a book
    // holds at most that many.
    for step in book.steps.iter().rev().take(SAGA_STEPS_MAX) {
        let Some(act) = state.latest_effect(&book.run, step, EffectKind::Act) else {
            continue;
        };
        if act.compensation.is_none() {
            // A later attempt registered none: nothing to undo it with.
            continue;
        }
        if let Some(next) = step_next(state, &act, now_ms) {
            return next;
        }
    }
    SagaNext::End {
        end: book.end.unwrap_or(RunState::Failed),
    }
}

/// What one step needs, given its act's latest attempt; `None` if nothing.
fn step_next(state: &dyn BooksRead, act: &EffectEntry, now_ms: u64) -> Option<SagaNext> {
    let step = act.key.step();
    match &act.status {
        EffectStatus::Compensated { .. }
        | EffectStatus::CompensatedStored { .. }
        | EffectStatus::Failed { .. } => None,
        EffectStatus::Intended | EffectStatus::Unknown { .. } => {
            Some(open_next(act, now_ms, || SagaNext::Resolve {
                key: act.key.clone(),
            }))
        }
        EffectStatus::Confirmed { .. } | EffectStatus::ConfirmedStored { .. } => {
            let undo = state.latest_effect(act.key.run(), step, EffectKind::Undo);
            let undo_step = || SagaNext::Undo { step: step.clone() };
            Some(match undo {
                None => undo_step(),
                Some(u) => match &u.status {
                    EffectStatus::Failed {
                        retryable: true, ..
                    } => undo_step(),
                    EffectStatus::Failed {
                        retryable: false, ..
                    }
                    | EffectStatus::Confirmed { .. }
                    | EffectStatus::ConfirmedStored { .. }
                    | EffectStatus::Compensated { .. }
                    | EffectStatus::CompensatedStored { .. } => SagaNext::Stuck {
                        key: u.key.clone(),
                        status: u.status.name(),
                    },
                    EffectStatus::Intended | EffectStatus::Unknown { .. } => {
                        open_next(&u, now_ms, undo_step)
                    }
                },
            })
        }
    }
}

/// An open attempt goes on by its tool's class (`go_on`) while the class
/// can still resolve it: an intent (a begin resends it, queries it, or
/// records it unknown), or an unknown outcome on a queryable tool or an
/// idempotent one inside its window less its resend margin (where a begin
/// resends it). Otherwise a person must.
fn open_next(entry: &EffectEntry, now_ms: u64, go_on: impl FnOnce() -> SagaNext) -> SagaNext {
    let resolvable = match (&entry.status, entry.tool_class) {
        (EffectStatus::Intended, _) | (_, ToolClass::Queryable) => true,
        (_, ToolClass::NotIdempotent) => false,
        (_, class) => class
            .resend_horizon_ms()
            .is_some_and(|horizon| now_ms.saturating_sub(entry.intended_ms) < horizon),
    };
    if resolvable {
        go_on()
    } else {
        SagaNext::Stuck {
            key: entry.key.clone(),
            status: entry.status.name(),
        }
    }
}

/// Decides `EndSaga`: the lease holder of a compensating run ends it once
/// its saga has nothing outstanding; the run reaches the end its saga
/// recorded (terminal: the lease is dropped).
pub(crate) fn decide_end_saga(
    state: &dyn BooksRead,
    cmd: &EndSaga,
    now_ms: u64,
) -> Result<Decided> {
    check_text("saga end reason", &cmd.reason)?;
    let run = existing(state, &cmd.run)?;
    if run.state.is_terminal() {
        return Err(Error::RunTerminal {
            run: run.id.clone(),
            state: run.state,
        });
    }
    check_live(&run, &cmd.guard, now_ms)?;
    if run.state != RunState::Compensating {
        return Err(Error::RunNotRunning {
            run: run.id.clone(),
            state: run.state,
            refused: "end a saga (only a compensating run has one)",
        });
    }
    let end = match next(state, &run.id, now_ms) {
        SagaNext::End { end } => end,
        outstanding => {
            return Err(Error::SagaOutstanding {
                run: run.id.clone(),
                next: describe_next(&outstanding),
            });
        }
    };
    assert!(is_saga_end(end), "a saga ends a run failed or cancelled");
    let version = run.version + 1;
    let op = Op::RunTransitioned {
        run: run.id.clone(),
        from: run.state,
        to: end,
        version,
        at_ms: now_ms,
        token: cmd.guard.token,
        reason: cmd.reason.clone(),
    };
    Ok(Decided {
        ops: vec![op],
        answer: Answer::Transitioned {
            run: run.id.clone(),
            from: RunState::Compensating,
            to: end,
            version,
        },
    })
}

/// The planted bug `EndWithoutCompensating`: every move to compensating in
/// `ops` goes straight to its saga's end, and no saga opens.
pub(crate) fn skip_sagas(ops: &mut Vec<Op>) {
    let ends: Vec<(RunId, RunState)> = ops
        .iter()
        .filter_map(|op| match op {
            Op::SagaOpened { run, end, .. } => Some((run.clone(), *end)),
            _ => None,
        })
        .collect();
    ops.retain(|op| !matches!(op, Op::SagaOpened { .. }));
    for op in ops.iter_mut() {
        if let Op::RunTransitioned { run, to, .. } = op
            && *to == RunState::Compensating
            && let Some((_, end)) = ends.iter().find(|(r, _)| r == run)
        {
            *to = *end;
        }
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
pub(crate) mod tests {
    use super::*;
    use crate::books::Begun;
    use crate::books::test_support::*;
    use crate::books::*;
    use crate::books::{Command, Guard, Operate, OperatorAction};
    use crate::books::{Compensation, Outcome};

    /// The class of every act and compensation here: a resend inside a
    /// second is safe.
    const WINDOW: ToolClass = ToolClass::Idempotent {
        dedup_window_ms: 1_000,
    };

    /// `begin` of `step` registering a compensation of `class`.
    fn begin_compensable(run: &str, step: &str, g: &Guard, class: ToolClass) -> Command {
        let Command::BeginEffect(mut c) = begin(run, step, g, WINDOW, step.as_bytes()) else {
            panic!("begin builds a BeginEffect")
        };
        c.compensation = Some(Compensation {
            tool: format!("undo.{step}"),
            args: format!("undo {step}").into_bytes(),
            class,
        });
        Command::BeginEffect(c)
    }

    fn proceed(d: &Decided) -> EffectKey {
        match &d.answer {
            Answer::Begun(Begun::Proceed { key, .. }) => key.clone(),
            other => panic!("{other:?}"),
        }
    }

    /// Confirms `step` of running `run`, registering a compensation.
    pub(crate) fn confirm_compensable(b: &mut Books, g: &Guard, run: &str, step: &str) {
        let key = proceed(&b.ok(begin_compensable(run, step, g, WINDOW)));
        b.ok(finish(&key, g, confirmed(step.as_bytes())));
    }

    fn end_saga(g: &Guard) -> Command {
        Command::EndSaga(EndSaga {
            run: rid("r"),
            guard: g.clone(),
            reason: "saga done".into(),
        })
    }

    fn operate(action: OperatorAction) -> Command {
        Command::Operate(Operate {
            run: rid("r"),
            action,
            operator: "ops-anna".into(),
            reason: "policy".into(),
        })
    }

    fn next_of(b: &Books) -> SagaNext {
        next(&b.mem, &rid("r"), b.now_ms)
    }

    /// Undoes `step` through the compensation ceremony, confirming it.
    fn undo(b: &mut Books, g: &Guard, step: &str) {
        assert_eq!(next_of(b), SagaNext::Undo { step: sid(step) });
        let key = proceed(&b.ok(compensate("r", step, g)));
        assert_eq!(key.encode(), format!("r/{step}/undo/1"));
        b.ok(finish(&key, g, confirmed(b"undone")));
    }

    fn state(b: &Books) -> RunState {
        b.mem.run(&rid("r")).unwrap().state
    }

    #[test]
    fn a_failed_run_undoes_its_compensable_acts_last_first_then_fails() {
        let (mut b, g) = books_with_running_run("r");
        confirm_compensable(&mut b, &g, "r", "sweep");
        let plain = proceed(&b.ok(begin("r", "note", &g, WINDOW, b"n")));
        b.ok(finish(&plain, &g, confirmed(b"n")));
        confirm_compensable(&mut b, &g, "r", "fund");
        let book = b.mem.saga(&rid("r")).unwrap();
        assert_eq!(book.steps, vec![sid("sweep"), sid("fund")]);
        assert_eq!(book.end, None);

        let d = b.ok(transition("r", &g, RunState::Failed));
        assert!(matches!(
            d.answer,
            Answer::Transitioned {
                to: RunState::Compensating,
                ..
            }
        ));
        assert_eq!(state(&b), RunState::Compensating);
        assert_eq!(b.mem.saga(&rid("r")).unwrap().end, Some(RunState::Failed));
        // Nothing new begins, and the run ends only with its saga.
        let fresh = b.run(begin("r", "post", &g, WINDOW, b"p")).unwrap_err();
        assert!(matches!(
            fresh,
            Error::RunNotRunning {
                state: RunState::Compensating,
                ..
            }
        ));
        let early = b.run(end_saga(&g)).unwrap_err();
        assert!(matches!(early, Error::SagaOutstanding { .. }), "{early}");
        assert!(early.to_string().contains("step fund"), "{early}");

        undo(&mut b, &g, "fund");
        undo(&mut b, &g, "sweep");
        assert_eq!(
            next_of(&b),
            SagaNext::End {
                end: RunState::Failed
            }
        );
        let d = b.ok(end_saga(&g));
        assert_eq!(d.ops.len(), 1);
        let run = b.mem.run(&rid("r")).unwrap();
        assert_eq!((run.state, run.lease.is_none()), (RunState::Failed, true));
        let audit: Vec<String> = b
            .mem
            .audit(&rid("r"), 1)
            .iter()
            .map(|e| e.what.to_string())
            .collect();
        assert!(
            audit.iter().any(|w| w.starts_with("saga opened")),
            "{audit:?}"
        );
    }

    #[test]
    fn a_run_with_nothing_to_undo_ends_at_once() {
        // No compensation registered, one whose act failed, one undone
        // already: failing goes straight to failed.
        let (mut b, g) = books_with_running_run("r");
        let plain = proceed(&b.ok(begin("r", "note", &g, WINDOW, b"n")));
        b.ok(finish(&plain, &g, confirmed(b"n")));
        let failed = proceed(&b.ok(begin_compensable("r", "hedge", &g, WINDOW)));
        let declined = Outcome::Failed {
            retryable: false,
            reason: "declined".into(),
        };
        b.ok(finish(&failed, &g, declined));
        confirm_compensable(&mut b, &g, "r", "sweep");
        let key = proceed(&b.ok(compensate("r", "sweep", &g)));
        b.ok(finish(&key, &g, confirmed(b"back")));
        let d = b.ok(transition("r", &g, RunState::Failed));
        assert_eq!(d.ops.len(), 1, "{:?}", d.ops);
        assert_eq!(state(&b), RunState::Failed);
    }

    #[test]
    fn an_operators_cancel_compensates_and_the_holder_or_a_claimer_runs_the_saga() {
        let (mut b, g) = books_with_running_run("r");
        confirm_compensable(&mut b, &g, "r", "sweep");
        let d = b.ok(operate(OperatorAction::Cancel));
        assert!(matches!(
            d.answer,
            Answer::Operated {
                state: RunState::Compensating,
                changed: true,
                ..
            }
        ));
        assert_eq!(
            b.mem.saga(&rid("r")).unwrap().end,
            Some(RunState::Cancelled)
        );
        // A second cancel changes nothing; a pause is not for a saga.
        assert!(b.ok(operate(OperatorAction::Cancel)).ops.is_empty());
        assert!(matches!(
            b.run(operate(OperatorAction::Pause)),
            Err(Error::IllegalTransition { .. })
        ));
        // The holder dies; its lease runs out; another worker claims the
        // compensating run and ends its saga.
        b.now_ms += LEASE_MS;
        let d = b.ok(claim("w2", LEASE_MS));
        let Answer::Leased {
            run: leased, token, ..
        } = d.answer
        else {
            panic!("{:?}", d.answer)
        };
        let g2 = Guard {
            run: leased,
            worker: wid("w2"),
            token,
        };
        undo(&mut b, &g2, "sweep");
        b.ok(end_saga(&g2));
        assert_eq!(state(&b), RunState::Cancelled);
    }

    #[test]
    fn an_act_in_flight_is_resolved_first_by_its_class_and_never_begun_anew() {
        let (mut b, g) = books_with_running_run("r");
        confirm_compensable(&mut b, &g, "r", "sweep");
        let flying = proceed(&b.ok(begin_compensable("r", "fund", &g, WINDOW)));
        b.ok(transition("r", &g, RunState::Failed));
        assert_eq!(state(&b), RunState::Compensating);
        assert_eq!(
            next_of(&b),
            SagaNext::Resolve {
                key: flying.clone()
            }
        );
        // The same act again is a resend with its own key, not a new act.
        let again = b.ok(begin_compensable("r", "fund", &g, WINDOW));
        assert!(
            matches!(&again.answer, Answer::Begun(Begun::Resend { key, .. }) if *key == flying),
            "{:?}",
            again.answer
        );
        b.ok(finish(&flying, &g, confirmed(b"funded")));
        // Now it is confirmed, it is undone first.
        undo(&mut b, &g, "fund");
        undo(&mut b, &g, "sweep");
        b.ok(end_saga(&g));
        assert_eq!(state(&b), RunState::Failed);
    }

    #[test]
    fn a_compensation_that_fails_for_good_holds_the_saga_until_an_operator_abandons_it() {
        let (mut b, g) = books_with_running_run("r");
        confirm_compensable(&mut b, &g, "r", "sweep");
        b.ok(transition("r", &g, RunState::Failed));
        let key = proceed(&b.ok(compensate("r", "sweep", &g)));
        let refused = Outcome::Failed {
            retryable: false,
            reason: "account closed".into(),
        };
        b.ok(finish(&key, &g, refused));
        assert_eq!(
            next_of(&b),
            SagaNext::Stuck {
                key: key.clone(),
                status: "failed (terminal)"
            }
        );
        assert!(matches!(
            b.run(end_saga(&g)),
            Err(Error::SagaOutstanding { .. })
        ));
        let d = b.ok(operate(OperatorAction::Abandon));
        assert!(matches!(
            d.answer,
            Answer::Operated {
                state: RunState::Failed,
                ..
            }
        ));
        let last = b.mem.audit(&rid("r"), 1).pop().unwrap();
        assert!(
            last.why
                .contains("left: r/sweep/undo/1 is failed (terminal)"),
            "{}",
            last.why
        );
        // Abandoning is for sagas only.
        let (mut other, _) = books_with_running_run("r");
        assert!(matches!(
            other.run(operate(OperatorAction::Abandon)),
            Err(Error::InvalidCommand { .. })
        ));
    }

    #[test]
    fn an_unknown_compensation_goes_on_by_its_class_until_only_a_person_can_say() {
        let (mut b, g) = books_with_running_run("r");
        confirm_compensable(&mut b, &g, "r", "sweep");
        b.ok(transition("r", &g, RunState::Failed));
        let key = proceed(&b.ok(compensate("r", "sweep", &g)));
        let lost = Outcome::Unknown {
            reason: "ack lost".into(),
        };
        b.ok(finish(&key, &g, lost));
        // Inside the undoing tool's window: resent with the same key.
        assert_eq!(next_of(&b), SagaNext::Undo { step: sid("sweep") });
        // Past it, nobody but a person can say.
        b.now_ms += 1_000;
        assert!(matches!(
            next_of(&b),
            SagaNext::Stuck {
                status: "unknown",
                ..
            }
        ));
        let g = renew_guard(&mut b, &g);
        b.ok(reconcile(&key, &g, confirmed(b"the bank says back")));
        assert_eq!(
            next_of(&b),
            SagaNext::End {
                end: RunState::Failed
            }
        );
        b.ok(end_saga(&g));
    }

    /// Renews `g` (its lease has 9 seconds left at most here).
    fn renew_guard(b: &mut Books, g: &Guard) -> Guard {
        b.ok(renew("r", g, LEASE_MS));
        g.clone()
    }

    #[test]
    fn a_cancelled_parent_takes_its_awaited_child_into_its_saga() {
        use crate::books::WaitFor;
        use crate::books::{CreateRun, OpenWait};
        let (mut b, g) = books_with_running_run("r");
        let mut create_child = create("c", b"child");
        if let Command::CreateRun(CreateRun { parent, .. }) = &mut create_child {
            *parent = Some(rid("r"));
        }
        b.ok(create_child);
        let d = b.ok(acquire("c", "w2", LEASE_MS));
        let Answer::Leased {
            run: leased, token, ..
        } = d.answer
        else {
            panic!()
        };
        let gc = Guard {
            run: leased,
            worker: wid("w2"),
            token,
        };
        b.ok(transition("c", &gc, RunState::Running));
        confirm_compensable(&mut b, &gc, "c", "book");
        b.ok(Command::OpenWait(OpenWait {
            run: rid("r"),
            guard: g.clone(),
            step: sid("child"),
            wait_for: WaitFor::Child { run: rid("c") },
            deadline_ms: None,
            reason: "wait for the child".into(),
        }));
        b.ok(operate(OperatorAction::Cancel));
        assert_eq!(state(&b), RunState::Cancelled);
        let child = b.mem.run(&rid("c")).unwrap();
        assert_eq!(child.state, RunState::Compensating);
        assert_eq!(
            b.mem.saga(&rid("c")).unwrap().end,
            Some(RunState::Cancelled)
        );
    }
}

//! Runs and their state machine: the legal transitions as one table, and the
//! decisions that create a run and move it between states.
//!
//! Invariant: a run's `version` grows by exactly one on every change to its
//! record (transition, lease acquire, renew, release), and a run in a
//! terminal state (completed, failed, cancelled) never changes state again
//! and holds no lease. Lifecycle: an effect begins only on a running run,
//! and only an operator moves a paused run (resume or cancel).

use crate::books::base::ids::{FencingToken, RunId};
use crate::books::base::limits::{CHILD_DEPTH_MAX, check_text};
use crate::books::records::run::current_token;
use crate::books::records::run::{Run, RunState, transition_allowed};
use crate::books::records::saga::is_saga_end;
use crate::books::rules::checks::{check_guard, check_operator};
use crate::books::rules::checks::{
    check_no_open_wait, check_stored_bytes, existing, move_under_current_token,
};
use crate::books::rules::saga::ending;
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::{CreateRun, Operate, OperatorAction, Transition};
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// Decides `CreateRun`. Creating a run again with the same input and agent
/// version is answered with the existing run (so a retried create is safe);
/// with a different one it is refused.
pub(crate) fn decide_create(
    state: &dyn BooksRead,
    cmd: &CreateRun,
    now_ms: u64,
) -> Result<Decided> {
    check_text("agent version", &cmd.agent_version)?;
    check_text("trace id", &cmd.trace_id)?;
    if let Some(input) = &cmd.input {
        check_stored_bytes(
            || format!("input of run {}", cmd.run),
            input,
            &cmd.input_digest,
        )?;
    }
    if let Some(found) = state.run(&cmd.run) {
        if found.input_digest != cmd.input_digest || found.agent_version != cmd.agent_version {
            return Err(Error::RunInputMismatch {
                run: cmd.run.clone(),
                recorded: format!(
                    "input {} agent {}",
                    found.input_digest.short(),
                    found.agent_version
                ),
                presented: format!(
                    "input {} agent {}",
                    cmd.input_digest.short(),
                    cmd.agent_version
                ),
            });
        }
        let answer = Answer::RunExisted {
            run: found.id,
            version: found.version,
            state: found.state,
        };
        return Ok(Decided {
            ops: Vec::new(),
            answer,
        });
    }
    if let Some(parent) = &cmd.parent {
        existing(state, parent)?;
    }
    let run = Run {
        id: cmd.run.clone(),
        state: RunState::Pending,
        version: 1,
        input_digest: cmd.input_digest,
        agent_version: cmd.agent_version.clone(),
        trace_id: cmd.trace_id.clone(),
        parent: cmd.parent.clone(),
        created_ms: now_ms,
        updated_ms: now_ms,
        lease: None,
        next_token: FencingToken::FIRST,
    };
    let answer = Answer::RunCreated {
        run: run.id.clone(),
        version: run.version,
    };
    // The input, if given, goes to the blob store first, so that the run's
    // creation counts its reference to it (unless the store has it).
    let mut ops = Vec::with_capacity(2);
    if let Some(input) = cmd.input.as_ref()
        && !state.blob_exists(&cmd.input_digest)
    {
        ops.push(Op::BlobPut {
            digest: cmd.input_digest,
            bytes: input.clone(),
        });
    }
    ops.push(Op::RunCreated { run });
    Ok(Decided { ops, answer })
}

/// Decides `Transition`: the run must not be terminal, the guard must hold
/// the live lease, the expected version (if given) must match, and the
/// table must allow the move.
pub(crate) fn decide_transition(
    state: &dyn BooksRead,
    cmd: &Transition,
    now_ms: u64,
) -> Result<Decided> {
    check_text("transition reason", &cmd.reason)?;
    let run = existing(state, &cmd.run)?;
    let illegal = || Error::IllegalTransition {
        run: run.id.clone(),
        from: run.state,
        to: cmd.to,
    };
    if run.state.is_terminal() {
        return Err(Error::RunTerminal {
            run: run.id.clone(),
            state: run.state,
        });
    }
    check_guard(&run, &cmd.guard, now_ms)?;
    if run.state == RunState::Paused {
        return Err(Error::RunNotRunning {
            run: run.id.clone(),
            state: run.state,
            refused: "move a paused run (only an operator resumes or cancels it)",
        });
    }
    if run.state == RunState::Compensating {
        return Err(Error::RunNotRunning {
            run: run.id.clone(),
            state: run.state,
            refused: "move a compensating run (its saga ends it: end_saga)",
        });
    }
    if let Some(expected) = cmd.expected_version
        && expected != run.version
    {
        return Err(Error::VersionConflict {
            run: run.id.clone(),
            expected,
            actual: run.version,
        });
    }
    if !transition_allowed(run.state, cmd.to) {
        return Err(illegal());
    }
    if cmd.to == RunState::Running {
        check_no_open_wait(state, &run)?;
    }
    if cmd.to == RunState::Compensating {
        // A run compensates because it fails or is cancelled, never by
        // being asked to.
        return Err(illegal());
    }
    let version = run.version + 1;
    let (ops, to) = if is_saga_end(cmd.to) {
        let at = (cmd.guard.token, now_ms);
        ending(state, &run, cmd.to, at, cmd.reason.clone())
    } else {
        let op = Op::RunTransitioned {
            run: run.id.clone(),
            from: run.state,
            to: cmd.to,
            version,
            at_ms: now_ms,
            token: cmd.guard.token,
            reason: cmd.reason.clone(),
        };
        (vec![op], cmd.to)
    };
    let answer = Answer::Transitioned {
        run: run.id.clone(),
        from: run.state,
        to,
        version,
    };
    Ok(Decided { ops, answer })
}

/// Decides `Operate`: an operator pauses, resumes or cancels a run with no
/// lease. Asking for the state the run is in changes nothing (a retried
/// action is safe); the other moves follow the transition table. The
/// change is journaled as a transition under the run's current token, its
/// reason naming the operator and the action.
pub(crate) fn decide_operate(state: &dyn BooksRead, cmd: &Operate, now_ms: u64) -> Result<Decided> {
    check_operator(cmd.action.name(), &cmd.run, &cmd.operator, &cmd.reason)?;
    let run = existing(state, &cmd.run)?;
    // A run paused while it waited goes back to waiting, not running: only
    // the wait's end starts it again.
    let waiting_in = state
        .waits(&run.id)
        .and_then(|book| book.open_wait().map(|w| w.wait_for.waiting_state()));
    let to = match cmd.action {
        OperatorAction::Pause => RunState::Paused,
        OperatorAction::Resume => waiting_in.unwrap_or(RunState::Running),
        OperatorAction::Cancel => RunState::Cancelled,
        OperatorAction::Abandon => state
            .saga(&run.id)
            .and_then(|book| book.end)
            .unwrap_or(RunState::Failed),
    };
    let unchanged = || Decided {
        ops: Vec::new(),
        answer: Answer::Operated {
            run: run.id.clone(),
            state: run.state,
            version: run.version,
            changed: false,
        },
    };
    match (cmd.action, run.state) {
        (OperatorAction::Pause, RunState::Paused)
        | (OperatorAction::Cancel, RunState::Cancelled)
        // A compensating run is being ended already; its saga goes on.
        | (OperatorAction::Cancel, RunState::Compensating) => return Ok(unchanged()),
        (OperatorAction::Resume, from) if from == to => return Ok(unchanged()),
        (_, from) if from.is_terminal() => {
            return Err(Error::RunTerminal {
                run: run.id.clone(),
                state: from,
            });
        }
        (OperatorAction::Resume, from) if from != RunState::Paused => {
            return Err(Error::IllegalTransition {
                run: run.id.clone(),
                from,
                to,
            });
        }
        (OperatorAction::Abandon, from) if from != RunState::Compensating => {
            return Err(Error::InvalidCommand {
                reason: format!(
                    "only a compensating run's saga can be abandoned; run {} is {from}",
                    run.id
                ),
            });
        }
        (OperatorAction::Pause, RunState::Compensating) => {
            return Err(Error::IllegalTransition {
                run: run.id.clone(),
                from: run.state,
                to,
            });
        }
        _ => {}
    }
    assert!(
        transition_allowed(run.state, to),
        "an operator's move {} -> {to} is in the table",
        run.state
    );
    let mut reason = format!(
        "operator {} ({}): {}",
        cmd.operator,
        cmd.action.name(),
        cmd.reason
    );
    if cmd.action == OperatorAction::Abandon {
        let left = crate::books::rules::saga::next(state, &run.id, now_ms);
        reason.push_str(&format!(
            "; left: {}",
            crate::books::records::saga::describe_next(&left)
        ));
    }
    let version = run.version + 1;
    let (mut ops, to) = if cmd.action == OperatorAction::Cancel {
        let at = (current_token(&run), now_ms);
        ending(state, &run, RunState::Cancelled, at, reason)
    } else {
        (
            vec![move_under_current_token(&run, to, now_ms, reason).0],
            to,
        )
    };
    if cmd.action == OperatorAction::Cancel {
        ops.extend(cancel_awaited_children(state, &run, now_ms));
    }
    Ok(Decided {
        ops,
        answer: Answer::Operated {
            run: run.id.clone(),
            state: to,
            version,
            changed: true,
        },
    })
}

/// The ops cancelling, with `run`, the children it waits for (one, or
/// the children of a fan-out), their awaited children, and so on down (at
/// most [`CHILD_DEPTH_MAX`] levels): a cancel ends the whole tree of runs
/// started to serve it. Children ended already are left as they are, and
/// so are children no open wait awaits (a runtime that starts those owns
/// their end).
fn cancel_awaited_children(state: &dyn BooksRead, run: &Run, now_ms: u64) -> Vec<Op> {
    let book = state.waits(&run.id);
    let Some(wait) = book.as_ref().and_then(|b| b.open_wait()) else {
        return Vec::new();
    };
    let reason = format!("its parent run {} was cancelled", run.id);
    cancel_with_awaited(state, wait.wait_for.awaited_children(), &reason, now_ms)
}

/// The ops cancelling each of `runs` not ended yet (nor compensating),
/// with the children each awaits, and theirs, down to [`CHILD_DEPTH_MAX`]
/// levels, each for `reason`.
pub(crate) fn cancel_with_awaited(
    state: &dyn BooksRead,
    runs: &[RunId],
    reason: &str,
    now_ms: u64,
) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut level = runs.to_vec();
    for _ in 0..CHILD_DEPTH_MAX {
        let mut next = Vec::new();
        for id in &level {
            let Some(child) = state
                .run(id)
                .filter(|c| !c.state.is_terminal() && c.state != RunState::Compensating)
            else {
                continue;
            };
            let at = (current_token(&child), now_ms);
            ops.extend(ending(state, &child, RunState::Cancelled, at, reason.to_string()).0);
            let book = state.waits(id);
            if let Some(wait) = book.as_ref().and_then(|b| b.open_wait()) {
                next.extend_from_slice(wait.wait_for.awaited_children());
            }
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    ops
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
    use RunState::*;

    /// The expected table, written out independently of the function:
    /// rows are `from`, columns are `to`, in `RunState::ALL` order
    /// (P R WT WH Pa C F Ca Co).
    const EXPECTED: [[u8; 9]; 9] = [
        [0, 1, 0, 0, 1, 0, 0, 1, 1], // pending
        [0, 0, 1, 1, 1, 1, 1, 1, 1], // running
        [0, 1, 0, 0, 1, 0, 1, 1, 1], // waiting_tool
        [0, 1, 0, 0, 1, 0, 1, 1, 1], // waiting_human
        [0, 1, 1, 1, 0, 0, 1, 1, 1], // paused
        [0, 0, 0, 0, 0, 0, 0, 0, 0], // completed
        [0, 0, 0, 0, 0, 0, 0, 0, 0], // failed
        [0, 0, 0, 0, 0, 0, 0, 0, 0], // cancelled
        [0, 0, 0, 0, 0, 0, 1, 1, 0], // compensating
    ];

    #[test]
    fn transition_table_matches_the_spec_exactly() {
        for (i, from) in RunState::ALL.iter().enumerate() {
            for (j, to) in RunState::ALL.iter().enumerate() {
                assert_eq!(
                    transition_allowed(*from, *to),
                    EXPECTED[i][j] == 1,
                    "{from} -> {to}"
                );
            }
        }
        assert_eq!(EXPECTED.iter().flatten().filter(|x| **x == 1).count(), 29);
    }

    /// Drives a run into `from` through legal transitions (to compensating:
    /// a confirmed act that registered a compensation, then a failure).
    fn run_in(from: RunState) -> (Books, Guard) {
        let (mut b, g) = books_with_leased_run("r");
        if from == Compensating {
            b.ok(transition("r", &g, Running));
            crate::books::rules::saga::tests::confirm_compensable(&mut b, &g, "r", "sweep");
            b.ok(transition("r", &g, Failed));
            assert_eq!(b.mem.run(&rid("r")).unwrap().state, from);
            return (b, g);
        }
        let path: &[RunState] = match from {
            Pending => &[],
            Running => &[Running],
            WaitingTool => &[Running, WaitingTool],
            WaitingHuman => &[Running, WaitingHuman],
            Paused => &[Paused],
            Completed => &[Running, Completed],
            Failed => &[Running, Failed],
            Cancelled => &[Cancelled],
            Compensating => unreachable!("driven above"),
        };
        for to in path {
            b.ok(transition("r", &g, *to));
        }
        assert_eq!(b.mem.run(&rid("r")).unwrap().state, from);
        (b, g)
    }

    #[test]
    fn every_legal_transition_is_accepted_and_every_illegal_one_refused() {
        for from in RunState::ALL {
            for to in RunState::ALL {
                let (mut b, g) = run_in(from);
                let before = b.mem.clone();
                let result = b.run(transition("r", &g, to));
                if from.is_terminal() {
                    assert!(
                        matches!(result, Err(Error::RunTerminal { state, .. }) if state == from),
                        "{from} -> {to}: {result:?}"
                    );
                    assert_eq!(b.mem, before, "a refused transition changed the books");
                } else if from == Paused || from == Compensating {
                    // Only an operator moves a paused run (see below); a
                    // compensating one ends with its saga (saga.rs).
                    assert!(
                        matches!(result, Err(Error::RunNotRunning { state, .. }) if state == from),
                        "{from} -> {to}: {result:?}"
                    );
                    assert_eq!(b.mem, before, "a refused transition changed the books");
                } else if transition_allowed(from, to) && to != Compensating {
                    let run = b.mem.run(&rid("r")).unwrap();
                    assert!(result.is_ok(), "{from} -> {to}: {result:?}");
                    assert_eq!(run.state, to);
                    assert_eq!(run.version, before.run(&rid("r")).unwrap().version + 1);
                    assert_eq!(run.lease.is_none(), to.is_terminal());
                } else {
                    assert!(
                        matches!(result, Err(Error::IllegalTransition { from: f, to: t, .. }) if f == from && t == to),
                        "{from} -> {to}: {result:?}"
                    );
                    assert_eq!(b.mem, before, "a refused transition changed the books");
                }
            }
        }
    }

    #[test]
    fn version_conflict_is_refused() {
        let (mut b, g) = books_with_leased_run("r");
        let version = b.mem.run(&rid("r")).unwrap().version;
        let mut cmd = transition("r", &g, Running);
        if let Command::Transition(t) = &mut cmd {
            t.expected_version = Some(version - 1);
        }
        let err = b.run(cmd.clone()).unwrap_err();
        assert!(
            matches!(err, Error::VersionConflict { expected, actual, .. } if expected == version - 1 && actual == version)
        );
        if let Command::Transition(t) = &mut cmd {
            t.expected_version = Some(version);
        }
        b.ok(cmd);
        assert_eq!(b.mem.run(&rid("r")).unwrap().version, version + 1);
    }

    #[test]
    fn create_is_idempotent_for_same_input_and_refused_for_different() {
        let mut b = Books::default();
        b.ok(create("r", b"in"));
        let again = b.ok(create("r", b"in"));
        assert!(matches!(
            again.answer,
            Answer::RunExisted { version: 1, .. }
        ));
        assert!(again.ops.is_empty());
        let err = b.run(create("r", b"other")).unwrap_err();
        assert!(matches!(err, Error::RunInputMismatch { .. }));
    }

    #[test]
    fn create_with_unknown_parent_is_refused() {
        let mut b = Books::default();
        let mut cmd = create("child", b"in");
        if let Command::CreateRun(c) = &mut cmd {
            c.parent = Some(rid("nobody"));
        }
        assert!(matches!(b.run(cmd), Err(Error::NotFound { .. })));
        assert!(b.mem.run(&rid("child")).is_none());
    }

    fn operate(run: &str, action: OperatorAction) -> Command {
        Command::Operate(Operate {
            run: rid(run),
            action,
            operator: "ops-anna".into(),
            reason: "checking".into(),
        })
    }

    fn state_of(b: &Books) -> RunState {
        b.mem.run(&rid("r")).unwrap().state
    }

    #[test]
    fn an_operator_moves_every_live_state_and_repeating_an_action_changes_nothing() {
        use OperatorAction::*;
        for from in RunState::ALL.into_iter().filter(|s| *s != Compensating) {
            for action in [Pause, Resume, Cancel] {
                let (mut b, _) = run_in(from);
                let before = b.mem.clone();
                let version = before.run(&rid("r")).unwrap().version;
                let result = b.run(operate("r", action));
                let target = match action {
                    Pause => Paused,
                    Resume => Running,
                    Cancel => Cancelled,
                    Abandon => unreachable!("not in this loop"),
                };
                if from == target {
                    let d = result.unwrap();
                    assert!(d.ops.is_empty(), "{from} {action:?}");
                    assert!(matches!(d.answer, Answer::Operated { changed: false, .. }));
                    continue;
                }
                let legal = !from.is_terminal() && (action != Resume || from == Paused);
                if legal {
                    let d = result.unwrap_or_else(|e| panic!("{from} {action:?}: {e}"));
                    assert!(matches!(
                        d.answer,
                        Answer::Operated { state, changed: true, .. } if state == target
                    ));
                    let run = b.mem.run(&rid("r")).unwrap();
                    assert_eq!((run.state, run.version), (target, version + 1));
                    assert_eq!(
                        run.lease.is_none(),
                        target.is_terminal() || before.run(&rid("r")).unwrap().lease.is_none()
                    );
                } else {
                    assert!(
                        matches!(
                            result,
                            Err(Error::RunTerminal { .. } | Error::IllegalTransition { .. })
                        ),
                        "{from} {action:?}: {result:?}"
                    );
                    assert_eq!(b.mem, before);
                }
            }
        }
    }

    #[test]
    fn effects_begin_only_on_a_running_run() {
        use crate::books::ToolClass;
        for from in [Pending, WaitingTool, WaitingHuman, Paused] {
            let (mut b, g) = run_in(from);
            let before = b.mem.clone();
            let err = b
                .run(begin("r", "s", &g, ToolClass::NotIdempotent, b"a"))
                .unwrap_err();
            assert!(
                matches!(err, Error::RunNotRunning { state, .. } if state == from),
                "{from}: {err}"
            );
            assert!(err.to_string().contains("not running"), "{err}");
            assert_eq!(b.mem, before);
        }
        let (mut b, g) = run_in(Running);
        b.ok(begin("r", "s", &g, ToolClass::NotIdempotent, b"a"));
    }

    #[test]
    fn a_paused_run_keeps_its_holder_out_until_resumed_and_a_cancel_fences_it() {
        use crate::books::ToolClass;
        let (mut b, g) = run_in(Running);
        let intent = b.ok(begin("r", "s1", &g, ToolClass::NotIdempotent, b"a"));
        let Answer::Begun(crate::books::Begun::Proceed { key, .. }) = intent.answer else {
            panic!("{:?}", intent.answer)
        };
        b.ok(operate("r", OperatorAction::Pause));
        assert_eq!(state_of(&b), Paused);
        // The holder may not begin, nor resume the run itself ...
        assert!(matches!(
            b.run(begin("r", "s2", &g, ToolClass::NotIdempotent, b"b")),
            Err(Error::RunNotRunning { .. })
        ));
        assert!(matches!(
            b.run(transition("r", &g, Running)),
            Err(Error::RunNotRunning { .. })
        ));
        // ... nor is the paused run claimable once its lease is gone.
        b.now_ms += LEASE_MS + 1;
        assert!(matches!(
            b.ok(claim("w2", LEASE_MS)).answer,
            Answer::NothingToClaim
        ));
        // The act in flight still reports its outcome: a fact.
        b.ok(finish(&key, &g, confirmed(b"r1")));
        b.ok(operate("r", OperatorAction::Resume));
        let claimed = b.ok(claim("w2", LEASE_MS));
        let Answer::Leased {
            run: leased, token, ..
        } = claimed.answer
        else {
            panic!("{:?}", claimed.answer)
        };
        let g2 = Guard {
            run: leased,
            worker: wid("w2"),
            token,
        };
        b.ok(begin("r", "s2", &g2, ToolClass::NotIdempotent, b"b"));
        b.ok(operate("r", OperatorAction::Cancel));
        assert_eq!(state_of(&b), Cancelled);
        assert!(b.mem.run(&rid("r")).unwrap().lease.is_none());
        assert!(matches!(
            b.run(begin("r", "s3", &g2, ToolClass::NotIdempotent, b"c")),
            Err(Error::RunTerminal { .. })
        ));
        assert!(matches!(
            b.run(renew("r", &g2, LEASE_MS)),
            Err(Error::RunTerminal { .. })
        ));
        let audit = b.mem.audit(&rid("r"), 1);
        assert!(
            audit
                .iter()
                .any(|e| e.why.contains("operator ops-anna (cancel): checking")),
            "{audit:?}"
        );
    }

    #[test]
    fn an_operator_must_be_named() {
        let (mut b, _) = run_in(Running);
        let mut cmd = operate("r", OperatorAction::Pause);
        if let Command::Operate(o) = &mut cmd {
            o.operator.clear();
        }
        assert!(matches!(b.run(cmd), Err(Error::InvalidCommand { .. })));
    }

    #[test]
    fn a_run_created_with_its_input_keeps_it_once_and_checks_its_digest() {
        let mut b = Books::default();
        let with_input = |run: &str, input: &[u8]| {
            let mut cmd = create(run, input);
            if let Command::CreateRun(c) = &mut cmd {
                c.input = Some(input.to_vec());
            }
            cmd
        };
        let first = b.ok(with_input("a", b"trip to Lisbon"));
        assert!(
            matches!(first.ops[0], Op::BlobPut { .. }),
            "{:?}",
            first.ops
        );
        assert_eq!(
            b.mem.blob(&digest_of(b"trip to Lisbon")).unwrap(),
            b"trip to Lisbon"
        );
        // The same input again: the run exists, nothing is written.
        assert!(b.ok(with_input("a", b"trip to Lisbon")).ops.is_empty());
        // Another run with the same input finds the bytes stored.
        let second = b.ok(with_input("b", b"trip to Lisbon"));
        assert_eq!(second.ops.len(), 1, "{:?}", second.ops);
        // Bytes that are not the input the digest names are refused.
        let mut lying = with_input("c", b"trip to Porto");
        if let Command::CreateRun(c) = &mut lying {
            c.input = Some(b"trip to Faro".to_vec());
        }
        let refused = b.run(lying).unwrap_err().to_string();
        assert!(refused.contains("input of run c"), "{refused}");
        assert!(b.mem.run(&rid("c")).is_none());
    }
}

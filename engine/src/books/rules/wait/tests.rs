use super::*;
use crate::books::Begun;
use crate::books::EffectKind;
use crate::books::digest_of;
use crate::books::test_support::*;
use crate::books::*;
use crate::books::{Command, DeliverReply, Operate, OperatorAction};
use crate::books::{Outcome, ToolClass};

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

fn open(run: &str, g: &Guard, step: &str, wait_for: WaitFor, deadline_ms: Option<u64>) -> Command {
    Command::OpenWait(OpenWait {
        run: rid(run),
        guard: g.clone(),
        step: sid(step),
        wait_for,
        deadline_ms,
        reason: "above the threshold".into(),
    })
}

fn approval_of(args: &[u8]) -> WaitFor {
    WaitFor::Approval {
        args_digest: digest_of(args),
        role: "finance".into(),
    }
}

fn decide(run: &str, step: &str, args: &[u8], role: &str, approve: bool) -> Command {
    Command::DecideApproval(DecideApproval {
        run: rid(run),
        step: sid(step),
        args_digest: digest_of(args),
        approver: "ann".into(),
        role: role.into(),
        approve,
        note: "checked the invoice".into(),
    })
}

fn signal(run: &str, name: &str, payload: &[u8]) -> Command {
    Command::SendSignal(SendSignal {
        run: rid(run),
        name: name.into(),
        payload: payload.to_vec(),
        sender: "psp".into(),
    })
}

fn operate(run: &str, action: OperatorAction) -> Command {
    Command::Operate(Operate {
        run: rid(run),
        action,
        operator: "ops".into(),
        reason: "look".into(),
    })
}

fn guard_of(d: &Decided, worker: &str) -> Guard {
    let Answer::Leased {
        run: leased, token, ..
    } = d.answer.clone()
    else {
        panic!("{:?}", d.answer)
    };
    Guard {
        run: leased,
        worker: wid(worker),
        token,
    }
}

fn waited(d: &Decided) -> (WaitRecord, RunState) {
    match &d.answer {
        Answer::Waited { wait, state } => (wait.clone(), *state),
        other => panic!("{other:?}"),
    }
}

fn state(b: &Books) -> RunState {
    b.mem.run(&rid("r")).unwrap().state
}

fn claim_r(b: &mut Books, worker: &str) -> Guard {
    let d = b.ok(claim(worker, LEASE_MS));
    assert!(
        matches!(&d.answer, Answer::Leased { run, .. } if *run == rid("r")),
        "{:?}",
        d.answer
    );
    guard_of(&d, worker)
}

fn nothing_to_claim(b: &mut Books) -> bool {
    b.ok(claim("wx", LEASE_MS)).answer == Answer::NothingToClaim
}

fn create_child(parent: &str, child: &str) -> Command {
    Command::CreateRun(crate::books::CreateRun {
        run: rid(child),
        input_digest: digest_of(child.as_bytes()),
        agent_version: "agent/v1".into(),
        trace_id: "trace-1".into(),
        parent: Some(rid(parent)),
        input: None,
    })
}

fn on_child(child: &str) -> WaitFor {
    WaitFor::Child { run: rid(child) }
}

/// The parent `r`, running under `g`, starts child `r:sum` and waits
/// for it in one batch, as `Engine::start_child` does.
fn start_child(b: &mut Books, g: &Guard) -> Decided {
    b.ok(Command::Batch(vec![
        create_child("r", "r:sum"),
        open("r", g, "sum", on_child("r:sum"), None),
    ]))
}

fn claim_child(b: &mut Books) -> Guard {
    let d = b.ok(claim("wc", LEASE_MS));
    assert!(
        matches!(&d.answer, Answer::Leased { run, .. } if *run == rid("r:sum")),
        "{:?}",
        d.answer
    );
    let g = guard_of(&d, "wc");
    b.ok(transition("r:sum", &g, RunState::Running));
    g
}

#[test]
fn a_child_that_completes_wakes_its_parent_with_its_last_checkpoint() {
    let (mut b, g) = books_with_running_run("r");
    let d = start_child(&mut b, &g);
    let Answer::Batch(answers) = &d.answer else {
        panic!("{:?}", d.answer)
    };
    assert!(matches!(answers[0], Answer::RunCreated { .. }));
    assert!(
        matches!(&answers[1], Answer::Waited { wait, state: RunState::WaitingTool } if wait.is_open())
    );
    assert_eq!(state(&b), RunState::WaitingTool);
    assert!(b.mem.run(&rid("r")).unwrap().lease.is_none());
    // Only the child is claimable; the parent's stale guard is refused.
    let c = claim_child(&mut b);
    assert!(b.run(transition("r", &g, RunState::Running)).is_err());
    let part = crate::books::Part {
        name: "summary".into(),
        bytes: b"three findings".to_vec(),
        extends: None,
        inline: false,
    };
    b.ok(save("r:sum", &c, 1, vec![part.clone()]));
    b.ok(save("r:sum", &c, 1, vec![part]));
    let d = b.ok(transition("r:sum", &c, RunState::Completed));
    // The child's end and the parent's wake are one decision.
    assert!(
        d.ops
            .iter()
            .any(|op| matches!(op, Op::WaitEnded { run, .. } if *run == rid("r")))
    );
    assert_eq!(state(&b), RunState::Running);
    let g2 = claim_r(&mut b, "w2");
    let (wait, now) = waited(&start_child(&mut b, &g2).answer.clone().into_last());
    assert_eq!(
        wait.status,
        WaitStatus::ChildEnded {
            state: RunState::Completed,
            checkpoint: Some(2)
        }
    );
    assert_eq!(now, RunState::Running);
    // No second child: the re-run's create found the first one.
    assert_eq!(b.mem.runs().filter(|r| r.parent.is_some()).count(), 1);
}

trait Last {
    fn into_last(self) -> Decided;
}

impl Last for Answer {
    fn into_last(self) -> Decided {
        let Answer::Batch(mut answers) = self else {
            panic!("{self:?}")
        };
        Decided {
            ops: Vec::new(),
            answer: answers.pop().unwrap(),
        }
    }
}

#[test]
fn a_cancelled_or_failed_child_ends_the_wait_with_its_state_and_a_paused_parent_stays_paused() {
    let (mut b, g) = books_with_running_run("r");
    start_child(&mut b, &g);
    b.ok(operate("r", OperatorAction::Pause));
    b.ok(operate("r:sum", OperatorAction::Cancel));
    assert_eq!(state(&b), RunState::Paused);
    let book = b.mem.waits(&rid("r")).unwrap();
    assert_eq!(
        book.waits[0].status,
        WaitStatus::ChildEnded {
            state: RunState::Cancelled,
            checkpoint: None
        }
    );
    // Resumed, the parent runs: its wait has ended.
    b.ok(operate("r", OperatorAction::Resume));
    assert_eq!(state(&b), RunState::Running);

    let (mut b, g) = books_with_running_run("r");
    start_child(&mut b, &g);
    let c = claim_child(&mut b);
    b.ok(transition("r:sum", &c, RunState::Failed));
    let book = b.mem.waits(&rid("r")).unwrap();
    assert!(matches!(
        book.waits[0].status,
        WaitStatus::ChildEnded {
            state: RunState::Failed,
            ..
        }
    ));
    assert_eq!(state(&b), RunState::Running);
}

#[test]
fn cancelling_a_parent_cancels_the_child_it_awaits_and_its_grandchild() {
    let (mut b, g) = books_with_running_run("r");
    start_child(&mut b, &g);
    let c = claim_child(&mut b);
    b.ok(Command::Batch(vec![
        create_child("r:sum", "r:sum:cite"),
        open("r:sum", &c, "cite", on_child("r:sum:cite"), None),
    ]));
    let d = b.ok(operate("r", OperatorAction::Cancel));
    for run in ["r", "r:sum", "r:sum:cite"] {
        assert_eq!(
            b.mem.run(&rid(run)).unwrap().state,
            RunState::Cancelled,
            "{run}"
        );
    }
    // No wait ended: the parents were cancelled, not woken.
    assert!(!d.ops.iter().any(|op| matches!(op, Op::WaitEnded { .. })));
    // The child's holder is fenced.
    assert!(b.run(transition("r:sum", &c, RunState::Completed)).is_err());
}

#[test]
fn waiting_for_a_child_that_ended_ends_at_once_and_only_a_child_can_be_awaited() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(create_child("r", "r:sum"));
    b.ok(create("other", b"o"));
    b.ok(operate("r:sum", OperatorAction::Cancel));
    let (wait, now) = waited(&b.ok(open("r", &g, "sum", on_child("r:sum"), None)));
    assert_eq!(wait.status.name(), "child-ended");
    assert_eq!(now, RunState::Running);
    for (step, wait_for) in [
        ("a", on_child("other")),
        ("b", on_child("r")),
        ("c", on_child("missing")),
    ] {
        let err = b.run(open("r", &g, step, wait_for, None)).unwrap_err();
        assert!(
            matches!(err, Error::InvalidCommand { .. } | Error::NotFound { .. }),
            "{err}"
        );
    }
    b.ok(operate("other", OperatorAction::Cancel));
    // A child's deadline passing first ends the wait as elapsed.
    let due = b.now_ms + 1_000;
    b.ok(create_child("r", "r:late"));
    b.ok(open("r", &g, "late", on_child("r:late"), Some(due)));
    b.now_ms = due;
    b.ok(acquire("r", "w2", LEASE_MS));
    assert_eq!(
        b.mem.waits(&rid("r")).unwrap().waits[1].status,
        WaitStatus::Elapsed
    );
    // The child ending later changes nothing for the parent.
    b.ok(operate("r:late", OperatorAction::Cancel));
    assert_eq!(state(&b), RunState::Running);
    assert_eq!(
        b.mem.waits(&rid("r")).unwrap().waits[1].status,
        WaitStatus::Elapsed
    );
}

fn on_children(children: &[&str], join: Join) -> WaitFor {
    WaitFor::Children {
        runs: children.iter().map(|c| rid(c)).collect(),
        join,
    }
}

/// The parent `r`, running under `g`, starts `r:q.1` and `r:q.2` and
/// waits for them joined by `join`, in one batch, as
/// `Engine::start_children` does.
fn fan_out(b: &mut Books, g: &Guard, join: Join) -> Decided {
    b.ok(Command::Batch(vec![
        create_child("r", "r:q.1"),
        create_child("r", "r:q.2"),
        open("r", g, "q", on_children(&["r:q.1", "r:q.2"], join), None),
    ]))
}

/// Leases child `run`, starts it and ends it in `end`; returns that
/// decision.
fn end_child(b: &mut Books, run: &str, end: RunState) -> Decided {
    let d = b.ok(acquire(run, "wc", LEASE_MS));
    let g = guard_of(&d, "wc");
    b.ok(transition(run, &g, RunState::Running));
    b.ok(transition(run, &g, end))
}

fn end_of(run: &str, state: RunState) -> ChildEnd {
    ChildEnd {
        run: rid(run),
        state,
        checkpoint: None,
    }
}

#[test]
fn a_wait_for_all_children_ends_only_with_the_last_and_names_each_end_in_order() {
    let (mut b, g) = books_with_running_run("r");
    let (wait, now) = waited(&fan_out(&mut b, &g, Join::All).answer.into_last());
    assert!(wait.is_open());
    assert_eq!(now, RunState::WaitingTool);
    // The second child ends first: the parent waits on.
    let d = end_child(&mut b, "r:q.2", RunState::Failed);
    assert!(!d.ops.iter().any(|op| matches!(op, Op::WaitEnded { .. })));
    assert_eq!(state(&b), RunState::WaitingTool);
    let d = end_child(&mut b, "r:q.1", RunState::Completed);
    assert!(d.ops.iter().any(|op| matches!(op, Op::WaitEnded { .. })));
    assert_eq!(state(&b), RunState::Running);
    let book = b.mem.waits(&rid("r")).unwrap();
    assert_eq!(
        book.waits[0].status,
        WaitStatus::ChildrenEnded {
            ended: vec![
                end_of("r:q.1", RunState::Completed),
                end_of("r:q.2", RunState::Failed)
            ]
        }
    );
    // Asked again, the step creates nothing and hears how it ended.
    let g2 = claim_r(&mut b, "w2");
    let (again, _) = waited(&fan_out(&mut b, &g2, Join::All).answer.into_last());
    assert_eq!(again.status, book.waits[0].status);
    assert_eq!(b.mem.runs().filter(|r| r.parent.is_some()).count(), 2);
    // Asked with the other join, it is a mismatch naming both terms.
    let err = b
        .run(open(
            "r",
            &g2,
            "q",
            on_children(&["r:q.1", "r:q.2"], Join::First),
            None,
        ))
        .unwrap_err();
    assert!(matches!(err, Error::WaitMismatch { .. }), "{err}");
}

#[test]
fn a_wait_for_the_first_child_ends_with_it_and_cancels_the_others_in_the_same_commit() {
    let (mut b, g) = books_with_running_run("r");
    fan_out(&mut b, &g, Join::First);
    // The other child runs, and awaits a child of its own.
    let d = b.ok(acquire("r:q.1", "wc", LEASE_MS));
    let c = guard_of(&d, "wc");
    b.ok(transition("r:q.1", &c, RunState::Running));
    b.ok(Command::Batch(vec![
        create_child("r:q.1", "r:q.1:cite"),
        open("r:q.1", &c, "cite", on_child("r:q.1:cite"), None),
    ]));
    let d = end_child(&mut b, "r:q.2", RunState::Completed);
    assert_eq!(state(&b), RunState::Running);
    let first = WaitStatus::ChildrenEnded {
        ended: vec![end_of("r:q.2", RunState::Completed)],
    };
    assert_eq!(b.mem.waits(&rid("r")).unwrap().waits[0].status, first);
    // The one commit cancelled the other, and the child it awaits.
    for run in ["r:q.1", "r:q.1:cite"] {
        assert_eq!(
            b.mem.run(&rid(run)).unwrap().state,
            RunState::Cancelled,
            "{run}"
        );
        assert!(
            d.ops
                .iter()
                .any(|op| matches!(op, Op::RunTransitioned { run: r, .. } if *r == rid(run))),
            "{run}"
        );
    }
    // At open, an ended child ends a wait for the first and cancels the rest.
    let (mut b, g) = books_with_running_run("r");
    b.ok(create_child("r", "r:q.1"));
    b.ok(create_child("r", "r:q.2"));
    b.ok(operate("r:q.2", OperatorAction::Cancel));
    b.ok(open(
        "r",
        &g,
        "q",
        on_children(&["r:q.1", "r:q.2"], Join::First),
        None,
    ));
    assert_eq!(b.mem.run(&rid("r:q.1")).unwrap().state, RunState::Cancelled);
}

#[test]
fn children_that_ended_before_the_wait_opens_end_it_at_once_by_its_join() {
    for (join, ended) in [
        (Join::First, vec![end_of("r:q.2", RunState::Cancelled)]),
        (Join::All, vec![]),
    ] {
        let (mut b, g) = books_with_running_run("r");
        b.ok(create_child("r", "r:q.1"));
        b.ok(create_child("r", "r:q.2"));
        b.ok(operate("r:q.2", OperatorAction::Cancel));
        let d = b.ok(open(
            "r",
            &g,
            "q",
            on_children(&["r:q.1", "r:q.2"], join),
            None,
        ));
        let (wait, now) = waited(&d);
        if ended.is_empty() {
            // One of two ended: a wait for all stays open.
            assert!(wait.is_open(), "{join}");
            assert_eq!(now, RunState::WaitingTool);
        } else {
            assert_eq!(wait.status, WaitStatus::ChildrenEnded { ended }, "{join}");
            assert_eq!(now, RunState::Running);
        }
    }
}

#[test]
fn cancelling_a_parent_cancels_every_child_of_its_fan_out_and_their_children() {
    let (mut b, g) = books_with_running_run("r");
    fan_out(&mut b, &g, Join::All);
    let d = b.ok(acquire("r:q.1", "wc", LEASE_MS));
    let c = guard_of(&d, "wc");
    b.ok(transition("r:q.1", &c, RunState::Running));
    b.ok(Command::Batch(vec![
        create_child("r:q.1", "r:q.1:cite"),
        open("r:q.1", &c, "cite", on_child("r:q.1:cite"), None),
    ]));
    let d = b.ok(operate("r", OperatorAction::Cancel));
    for run in ["r", "r:q.1", "r:q.2", "r:q.1:cite"] {
        assert_eq!(
            b.mem.run(&rid(run)).unwrap().state,
            RunState::Cancelled,
            "{run}"
        );
    }
    assert!(!d.ops.iter().any(|op| matches!(op, Op::WaitEnded { .. })));
}

#[test]
fn a_fan_out_names_one_to_the_most_children_each_once_none_itself_each_its_own() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(create_child("r", "r:q.1"));
    b.ok(create("other", b"o"));
    let many: Vec<String> = (0..=CHILDREN_MAX).map(|i| format!("r:m.{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    for (step, wait_for) in [
        ("a", on_children(&[], Join::All)),
        ("b", on_children(&["r:q.1", "r:q.1"], Join::All)),
        ("c", on_children(&["r:q.1", "r"], Join::First)),
        ("d", on_children(&["r:q.1", "other"], Join::All)),
        ("e", on_children(&["r:q.1", "missing"], Join::All)),
        ("f", on_children(&many, Join::All)),
    ] {
        let err = b.run(open("r", &g, step, wait_for, None)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidCommand { .. } | Error::NotFound { .. } | Error::TooLarge { .. }
            ),
            "{step}: {err}"
        );
    }
    assert_eq!(state(&b), RunState::Running);
}

fn deliver(key: &EffectKey, outcome: Outcome) -> Command {
    Command::DeliverReply(DeliverReply {
        key: key.clone(),
        outcome,
        sender: "kyc-webhook".into(),
    })
}

/// Run `r`, running under `g`, begins step `screen` on an idempotent
/// tool and returns the key it must send.
fn begin_screen(b: &mut Books, g: &Guard) -> EffectKey {
    let class = ToolClass::Idempotent {
        dedup_window_ms: DAY_MS,
    };
    let d = b.ok(begin("r", "screen", g, class, b"screen acme"));
    let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
        panic!("{:?}", d.answer)
    };
    key
}

/// Run `r` began step `screen` and waits for its reply.
fn waiting_for_screen() -> (Books, Guard, EffectKey) {
    let (mut b, g) = books_with_running_run("r");
    let key = begin_screen(&mut b, &g);
    b.ok(open(
        "r",
        &g,
        "screen",
        WaitFor::Reply { key: key.clone() },
        None,
    ));
    (b, g, key)
}

#[test]
fn a_step_approved_first_may_then_wait_for_its_acts_reply_one_wait_of_each_kind() {
    let (mut b, g) = books_with_running_run("r");
    let approval = approval_of(b"screen acme");
    let deadline = Some(b.now_ms + DAY_MS);
    b.ok(open("r", &g, "screen", approval.clone(), deadline));
    b.ok(decide("r", "screen", b"screen acme", "finance", true));
    let g = claim_r(&mut b, "w2");
    // Asked again, the approval answers as it ended.
    let (asked, _) = waited(&b.ok(open("r", &g, "screen", approval, deadline)));
    assert_eq!(asked.status.name(), "approved");
    let key = begin_screen(&mut b, &g);
    let on_reply = WaitFor::Reply { key: key.clone() };
    let (wait, now) = waited(&b.ok(open("r", &g, "screen", on_reply.clone(), None)));
    assert_eq!(
        (wait.status, now),
        (WaitStatus::Open, RunState::WaitingTool)
    );
    b.ok(deliver(&key, confirmed(b"clear")));
    assert_eq!(state(&b), RunState::Running);
    let book = b.mem.waits(&rid("r")).unwrap();
    assert_eq!(book.waits.len(), 2);
    assert_eq!(
        book.approval_at(&sid("screen")).unwrap().status.name(),
        "approved"
    );
    assert_eq!(
        book.wait_at(&sid("screen")).unwrap().status.name(),
        "replied"
    );
    // A second wait of a kind the step already opened, with other terms,
    // is still a mismatch.
    let g = claim_r(&mut b, "w3");
    let other = approval_of(b"screen globex");
    let err = b
        .run(open("r", &g, "screen", other, Some(b.now_ms + DAY_MS)))
        .unwrap_err();
    assert!(matches!(err, Error::WaitMismatch { .. }), "{err}");
}

fn replied_at(d: &Decided) -> Option<StepId> {
    match &d.answer {
        Answer::Replied { wait_ended, .. } => wait_ended.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_delivered_reply_settles_the_effect_and_wakes_the_run_without_a_lease() {
    let (mut b, g) = books_with_running_run("r");
    let key = begin_screen(&mut b, &g);
    let on_reply = WaitFor::Reply { key: key.clone() };
    let (wait, now) = waited(&b.ok(open("r", &g, "screen", on_reply.clone(), None)));
    assert_eq!(
        (wait.status, now),
        (WaitStatus::Open, RunState::WaitingTool)
    );
    assert!(b.mem.run(&rid("r")).unwrap().lease.is_none());
    assert!(
        nothing_to_claim(&mut b),
        "a run waiting for a reply is not claimable"
    );
    // A reply is never "unknown", and the webhook needs no lease.
    let vague = Outcome::Unknown { reason: "?".into() };
    assert!(matches!(
        b.run(deliver(&key, vague)),
        Err(Error::InvalidCommand { .. })
    ));
    let d = b.ok(deliver(&key, confirmed(b"clear")));
    assert_eq!(replied_at(&d), Some(sid("screen")));
    // The settle, the wait's end and the wake are one decision.
    assert!(matches!(
        d.ops.as_slice(),
        [
            Op::EffectSettled { .. },
            Op::WaitEnded { .. },
            Op::RunTransitioned {
                to: RunState::Running,
                ..
            }
        ]
    ));
    assert_eq!(state(&b), RunState::Running);
    // The webhook retries: nothing new; another outcome is refused.
    let again = b.ok(deliver(&key, confirmed(b"clear")));
    assert!(again.ops.is_empty());
    assert_eq!(replied_at(&again), None);
    let failed = Outcome::Failed {
        retryable: false,
        reason: "match".into(),
    };
    assert!(matches!(
        b.run(deliver(&key, failed)),
        Err(Error::EffectNotOpen { .. })
    ));
    // The next worker learns the reply from the wait and from the ledger.
    let g2 = claim_r(&mut b, "w2");
    let (wait, _) = waited(&b.ok(open("r", &g2, "screen", on_reply, None)));
    assert_eq!(
        wait.status,
        WaitStatus::Replied {
            status: EffectStatus::Confirmed {
                receipt: b"clear".to_vec()
            }
        }
    );
    let class = ToolClass::Idempotent {
        dedup_window_ms: DAY_MS,
    };
    let d = b.ok(begin("r", "screen", &g2, class, b"screen acme"));
    assert!(matches!(d.answer, Answer::Begun(Begun::Replay { .. })));
}

#[test]
fn a_reply_before_the_wait_ends_it_as_it_opens_and_any_settle_ends_an_open_one() {
    // The webhook beats the worker to it: the wait ends as it opens.
    let (mut b, g) = books_with_running_run("r");
    let key = begin_screen(&mut b, &g);
    assert_eq!(replied_at(&b.ok(deliver(&key, confirmed(b"clear")))), None);
    let on_reply = WaitFor::Reply { key: key.clone() };
    let (wait, now) = waited(&b.ok(open("r", &g, "screen", on_reply, None)));
    assert!(matches!(wait.status, WaitStatus::Replied { .. }));
    assert_eq!(now, RunState::Running, "the worker goes on under its lease");
    // An outcome recorded by the worker (or a reconcile) ends the wait
    // too: a run never waits for a reply its ledger holds.
    let (mut b, g, key) = waiting_for_screen();
    let d = b.ok(finish(&key, &g, confirmed(b"clear")));
    assert!(d.ops.iter().any(|op| matches!(op, Op::WaitEnded { .. })));
    assert_eq!(state(&b), RunState::Running);
    // A paused run's wait ends, and the run stays paused.
    let (mut b, _, key) = waiting_for_screen();
    b.ok(operate("r", OperatorAction::Pause));
    assert_eq!(
        replied_at(&b.ok(deliver(&key, confirmed(b"clear")))),
        Some(sid("screen"))
    );
    assert_eq!(state(&b), RunState::Paused);
    assert!(b.mem.waits(&rid("r")).unwrap().open_wait().is_none());
}

#[test]
fn a_reply_wait_names_an_effect_its_own_step_began() {
    let (mut b, g) = books_with_running_run("r");
    let key = begin_screen(&mut b, &g);
    let before = b.mem.clone();
    // Another step's effect, another run's, one never begun.
    for (step, key) in [
        ("other", key.clone()),
        (
            "screen",
            EffectKey::of_kind(rid("q"), sid("screen"), EffectKind::Act, 1).unwrap(),
        ),
    ] {
        let err = b
            .run(open("r", &g, step, WaitFor::Reply { key }, None))
            .unwrap_err();
        assert!(matches!(err, Error::InvalidCommand { .. }), "{err}");
    }
    let unbegun = EffectKey::of_kind(rid("r"), sid("screen"), EffectKind::Act, 2).unwrap();
    let err = b
        .run(open(
            "r",
            &g,
            "screen",
            WaitFor::Reply {
                key: unbegun.clone(),
            },
            None,
        ))
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert!(matches!(
        b.run(deliver(&unbegun, confirmed(b"x"))),
        Err(Error::NotFound { .. })
    ));
    assert_eq!(b.mem, before);
}

#[test]
fn an_approval_parks_the_run_without_a_lease_and_only_the_bound_digest_wakes_it() {
    let (mut b, g) = books_with_running_run("r");
    let deadline = b.now_ms + 2 * DAY_MS;
    let d = b.ok(open(
        "r",
        &g,
        "pay",
        approval_of(b"eur 900 to acme"),
        Some(deadline),
    ));
    let (wait, now) = waited(&d);
    assert_eq!(
        (wait.status.clone(), now),
        (WaitStatus::Open, RunState::WaitingHuman)
    );
    let run = b.mem.run(&rid("r")).unwrap();
    assert!(run.lease.is_none(), "the waiting run holds no lease");
    assert!(
        nothing_to_claim(&mut b),
        "a run waiting for a person is not claimable"
    );
    // The old holder is fenced out.
    assert!(matches!(
        b.run(begin(
            "r",
            "pay",
            &g,
            ToolClass::NotIdempotent,
            b"eur 900 to acme"
        )),
        Err(Error::LeaseLost { .. })
    ));
    let before = b.mem.clone();
    assert!(matches!(
        b.run(decide("r", "pay", b"eur 9000 to acme", "finance", true)),
        Err(Error::ApprovalMismatch { .. })
    ));
    assert!(matches!(
        b.run(decide("r", "pay", b"eur 900 to acme", "intern", true)),
        Err(Error::ApproverRole { .. })
    ));
    assert!(matches!(
        b.run(decide("r", "nope", b"eur 900 to acme", "finance", true)),
        Err(Error::NotFound { .. })
    ));
    assert_eq!(b.mem, before, "refused decisions change nothing");
    let d = b.ok(decide("r", "pay", b"eur 900 to acme", "finance", true));
    assert!(matches!(
        d.answer,
        Answer::WaitEnded {
            woke: true,
            status: "approved",
            ..
        }
    ));
    assert_eq!(state(&b), RunState::Running);
    assert!(matches!(
        b.run(decide("r", "pay", b"eur 900 to acme", "finance", false)),
        Err(Error::WaitEnded {
            status: "approved",
            ..
        })
    ));
    // A worker claims it, asks again at the step, and learns the answer.
    let g2 = claim_r(&mut b, "w2");
    let (wait, now) = waited(&b.ok(open(
        "r",
        &g2,
        "pay",
        approval_of(b"eur 900 to acme"),
        Some(deadline),
    )));
    assert!(matches!(wait.status, WaitStatus::Approved { ref approver, .. } if approver == "ann"));
    assert_eq!(now, RunState::Running);
    b.ok(begin(
        "r",
        "pay",
        &g2,
        ToolClass::NotIdempotent,
        b"eur 900 to acme",
    ));
    // The same step asking for other terms is a mismatch.
    assert!(matches!(
        b.run(open("r", &g2, "pay", approval_of(b"other"), Some(deadline))),
        Err(Error::WaitMismatch { .. })
    ));
    let audit = b.mem.audit(&rid("r"), 1);
    assert!(
        audit.iter().any(|e| e.why == "ann: checked the invoice"),
        "{audit:?}"
    );
}

#[test]
fn a_rejection_wakes_the_run_with_the_rejection() {
    let (mut b, g) = books_with_running_run("r");
    let deadline = b.now_ms + DAY_MS;
    b.ok(open("r", &g, "pay", approval_of(b"a"), Some(deadline)));
    b.ok(decide("r", "pay", b"a", "finance", false));
    let g2 = claim_r(&mut b, "w2");
    let (wait, _) = waited(&b.ok(open("r", &g2, "pay", approval_of(b"a"), Some(deadline))));
    assert_eq!(wait.status.name(), "rejected");
    assert!(matches!(
        b.run(begin("r", "pay", &g2, ToolClass::NotIdempotent, b"a")),
        Err(Error::NotApproved {
            status: "rejected",
            ..
        })
    ));
}

#[test]
fn an_expired_approval_is_refused_and_the_run_wakes_at_its_deadline() {
    let (mut b, g) = books_with_running_run("r");
    let deadline = b.now_ms + 48 * 60 * 60 * 1000;
    b.ok(open("r", &g, "pay", approval_of(b"a"), Some(deadline)));
    b.now_ms = deadline - 1;
    assert!(nothing_to_claim(&mut b));
    b.now_ms = deadline;
    assert!(matches!(
        b.run(decide("r", "pay", b"a", "finance", true)),
        Err(Error::ApprovalExpired { .. })
    ));
    let d = b.ok(claim("w2", LEASE_MS));
    assert_eq!(
        d.ops.iter().map(Op::name).collect::<Vec<_>>(),
        ["WaitEnded", "RunTransitioned", "LeaseAcquired"],
        "the claim ends the wait and starts the run in one commit"
    );
    let g2 = guard_of(&d, "w2");
    assert_eq!(state(&b), RunState::Running);
    let (wait, _) = waited(&b.ok(open("r", &g2, "pay", approval_of(b"a"), Some(deadline))));
    assert_eq!(wait.status, WaitStatus::Elapsed);
    assert!(matches!(
        b.run(decide("r", "pay", b"a", "finance", true)),
        Err(Error::WaitEnded {
            status: "elapsed",
            ..
        })
    ));
}

#[test]
fn a_week_long_timer_holds_nothing_and_wakes_the_run_when_due() {
    let (mut b, g) = books_with_running_run("r");
    let due = b.now_ms + 7 * DAY_MS;
    let (_, now) = waited(&b.ok(open("r", &g, "nap", WaitFor::Timer, Some(due))));
    assert_eq!(now, RunState::WaitingTool);
    b.now_ms = due - 1;
    assert!(nothing_to_claim(&mut b));
    // A worker cannot move it on by hand while it waits.
    let d = b.ok(acquire("r", "w3", LEASE_MS));
    let g3 = guard_of(&d, "w3");
    assert!(matches!(
        b.run(transition("r", &g3, RunState::Running)),
        Err(Error::WaitOpen { .. })
    ));
    b.ok(release("r", &g3));
    b.now_ms = due;
    let g2 = claim_r(&mut b, "w2");
    assert_eq!(state(&b), RunState::Running);
    let (wait, _) = waited(&b.ok(open("r", &g2, "nap", WaitFor::Timer, Some(due))));
    assert_eq!(
        (wait.status, wait.ended_ms),
        (WaitStatus::Elapsed, Some(due))
    );
    // A timer already due ends at once; the run goes on with its lease.
    let (wait, now) = waited(&b.ok(open("r", &g2, "nap2", WaitFor::Timer, Some(due))));
    assert_eq!((wait.status, now), (WaitStatus::Elapsed, RunState::Running));
    assert!(b.mem.run(&rid("r")).unwrap().lease.is_some());
}

#[test]
fn racing_signals_each_go_to_one_wait_in_arrival_order() {
    let (mut b, g) = books_with_running_run("r");
    let on_paid = || WaitFor::Signal {
        name: "paid".into(),
    };
    b.ok(open("r", &g, "await-1", on_paid(), None));
    assert!(nothing_to_claim(&mut b));
    let d = b.ok(Command::Batch(vec![
        signal("r", "paid", b"first"),
        signal("r", "paid", b"second"),
        signal("r", "other", b"x"),
    ]));
    let Answer::Batch(answers) = &d.answer else {
        panic!()
    };
    assert!(
        matches!(&answers[0], Answer::Signalled { seq: 1, taken_by: Some(s), .. } if *s == sid("await-1"))
    );
    assert!(matches!(
        &answers[1],
        Answer::Signalled {
            seq: 2,
            taken_by: None,
            ..
        }
    ));
    assert_eq!(state(&b), RunState::Running);
    let g2 = claim_r(&mut b, "w2");
    let (wait, _) = waited(&b.ok(open("r", &g2, "await-1", on_paid(), None)));
    let WaitStatus::Signalled { signal: got } = wait.status else {
        panic!()
    };
    assert_eq!(got.payload, b"first");
    // The second one waits in the inbox for the next wait of its name,
    // which takes it at once: the run never stops.
    let (wait, now) = waited(&b.ok(open("r", &g2, "await-2", on_paid(), None)));
    let WaitStatus::Signalled { signal: got } = wait.status else {
        panic!()
    };
    assert_eq!(
        (got.payload.as_slice(), got.seq, now),
        (&b"second"[..], 2, RunState::Running)
    );
    let book = b.mem.waits(&rid("r")).unwrap();
    assert_eq!(
        book.inbox
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["other"]
    );
}

#[test]
fn a_signal_with_a_deadline_elapses_when_none_comes() {
    let (mut b, g) = books_with_running_run("r");
    let due = b.now_ms + 1_000;
    b.ok(open(
        "r",
        &g,
        "hook",
        WaitFor::Signal {
            name: "done".into(),
        },
        Some(due),
    ));
    b.now_ms = due;
    claim_r(&mut b, "w2");
    let book = b.mem.waits(&rid("r")).unwrap();
    assert_eq!(book.waits[0].status, WaitStatus::Elapsed);
    // A late signal is kept for a later wait; it ends nothing.
    let d = b.ok(signal("r", "done", b"late"));
    assert!(matches!(d.answer, Answer::Signalled { taken_by: None, .. }));
}

#[test]
fn a_paused_wait_resumes_into_waiting_and_an_approval_meanwhile_leaves_it_paused() {
    let (mut b, g) = books_with_running_run("r");
    let deadline = b.now_ms + DAY_MS;
    b.ok(open("r", &g, "pay", approval_of(b"a"), Some(deadline)));
    b.ok(operate("r", OperatorAction::Pause));
    b.ok(operate("r", OperatorAction::Resume));
    assert_eq!(
        state(&b),
        RunState::WaitingHuman,
        "back to waiting, not running"
    );
    let again = b.ok(operate("r", OperatorAction::Resume));
    assert!(matches!(
        again.answer,
        Answer::Operated { changed: false, .. }
    ));
    b.ok(operate("r", OperatorAction::Pause));
    let d = b.ok(decide("r", "pay", b"a", "finance", true));
    assert!(matches!(d.answer, Answer::WaitEnded { woke: false, .. }));
    assert_eq!(state(&b), RunState::Paused);
    assert!(nothing_to_claim(&mut b));
    b.ok(operate("r", OperatorAction::Resume));
    assert_eq!(state(&b), RunState::Running);
    claim_r(&mut b, "w2");
}

#[test]
fn a_cancelled_run_takes_no_approval_and_no_signal() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(open(
        "r",
        &g,
        "pay",
        approval_of(b"a"),
        Some(b.now_ms + DAY_MS),
    ));
    b.ok(operate("r", OperatorAction::Cancel));
    assert!(matches!(
        b.run(decide("r", "pay", b"a", "finance", true)),
        Err(Error::RunTerminal { .. })
    ));
    assert!(matches!(
        b.run(signal("r", "x", b"")),
        Err(Error::RunTerminal { .. })
    ));
}

#[test]
fn bad_terms_are_refused_before_anything_changes() {
    let (mut b, g) = books_with_running_run("r");
    let before = b.mem.clone();
    let no_deadline = b.run(open("r", &g, "pay", approval_of(b"a"), None));
    assert!(
        matches!(no_deadline, Err(Error::InvalidCommand { .. })),
        "{no_deadline:?}"
    );
    let past = b.run(open("r", &g, "pay", approval_of(b"a"), Some(b.now_ms)));
    assert!(
        matches!(past, Err(Error::InvalidCommand { .. })),
        "{past:?}"
    );
    let timer = b.run(open("r", &g, "nap", WaitFor::Timer, None));
    assert!(
        matches!(timer, Err(Error::InvalidCommand { .. })),
        "{timer:?}"
    );
    let unnamed = b.run(open(
        "r",
        &g,
        "s",
        WaitFor::Signal {
            name: String::new(),
        },
        None,
    ));
    assert!(
        matches!(unnamed, Err(Error::InvalidCommand { .. })),
        "{unnamed:?}"
    );
    let big = Command::SendSignal(SendSignal {
        run: rid("r"),
        name: "n".into(),
        payload: vec![0; SIGNAL_PAYLOAD_BYTES_MAX + 1],
        sender: "s".into(),
    });
    assert!(matches!(b.run(big), Err(Error::TooLarge { .. })));
    assert_eq!(b.mem, before);
    // The inbox is bounded.
    for _ in 0..INBOX_SIGNALS_MAX {
        b.ok(signal("r", "n", b""));
    }
    assert!(matches!(
        b.run(signal("r", "n", b"")),
        Err(Error::TooLarge { .. })
    ));
}

use super::*;
use crate::books::Begun;
use crate::books::test_support::*;
use crate::books::*;
use crate::books::{Command, Guard, Operate, OperatorAction};
use crate::books::{Outcome, ToolClass};

fn set_budget(run: &str, limits: BudgetLimits) -> Command {
    Command::SetBudget(SetBudget {
        run: rid(run),
        limits,
        by: "ops".into(),
        reason: "quarterly cap".into(),
    })
}

fn reserve(run: &str, g: &Guard, charge: Charge, amount: Cost) -> Command {
    Command::Reserve(Reserve {
        run: rid(run),
        guard: g.clone(),
        charge,
        amount,
    })
}

fn settle(run: &str, g: &Guard, charge: Charge, actual: Cost) -> Command {
    Command::Settle(Settle {
        run: rid(run),
        guard: g.clone(),
        charge,
        actual,
    })
}

fn operate(run: &str, action: OperatorAction) -> Command {
    Command::Operate(Operate {
        run: rid(run),
        action,
        operator: "ops".into(),
        reason: "budget".into(),
    })
}

fn step(name: &str) -> Charge {
    Charge::Effect { step: sid(name) }
}

fn calls(n: u64) -> BudgetLimits {
    BudgetLimits {
        tool_calls: Some(n),
        ..BudgetLimits::default()
    }
}

fn reserved(d: &Decided) -> Reserved {
    match &d.answer {
        Answer::Reserved(r) => r.clone(),
        other => panic!("{other:?}"),
    }
}

fn settled(d: &Decided) -> SettledCharge {
    match &d.answer {
        Answer::ChargeSettled(s) => s.clone(),
        other => panic!("{other:?}"),
    }
}

/// Reserves, begins, confirms and settles the act of `name`.
fn paid_step(b: &mut Books, run: &str, g: &Guard, name: &str, actual: Cost) {
    let r = reserved(&b.ok(reserve(run, g, step(name), Cost::tool_call(100))));
    assert!(matches!(r, Reserved::Granted { again: false, .. }), "{r:?}");
    let d = b.ok(begin(run, name, g, ToolClass::Queryable, name.as_bytes()));
    let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
        panic!("{:?}", d.answer)
    };
    b.ok(finish(&key, g, confirmed(b"ok")));
    b.ok(settle(run, g, step(name), actual));
}

fn book(b: &Books, run: &str) -> BudgetBook {
    b.mem.budget(&rid(run)).unwrap()
}

#[test]
fn a_settle_returns_what_the_call_did_not_spend() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget("r", calls(5)));
    let r = reserved(&b.ok(reserve("r", &g, step("pay"), Cost::tool_call(100))));
    assert_eq!(
        r,
        Reserved::Granted {
            charge: step("pay"),
            amount: Cost::tool_call(100),
            again: false
        }
    );
    assert_eq!(book(&b, "r").reserved, Cost::tool_call(100));
    let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
    let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
        panic!()
    };
    b.ok(finish(&key, &g, confirmed(b"ok")));
    let s = settled(&b.ok(settle("r", &g, step("pay"), Cost::tool_call(60))));
    assert_eq!(s.returned.cost_micros, 40);
    assert_eq!(s.overrun, Cost::default());
    let after = book(&b, "r");
    assert_eq!(after.reserved, Cost::default());
    assert_eq!(after.spent, Cost::tool_call(60));
    assert!(after.open.is_empty());
    // The journal says what was reserved and what it cost.
    let lines: Vec<String> = b
        .mem
        .audit(&rid("r"), 1)
        .iter()
        .map(|e| e.what.to_string())
        .collect();
    assert!(lines.iter().any(|l| l.starts_with("reserved")), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("the act of step pay cost")),
        "{lines:?}"
    );
}

#[test]
fn exhaustion_refuses_the_call_and_pauses_the_run_until_an_operator_raises_it() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget("r", calls(1)));
    paid_step(&mut b, "r", &g, "one", Cost::tool_call(10));
    let r = reserved(&b.ok(reserve("r", &g, step("two"), Cost::tool_call(10))));
    let Reserved::Exhausted { reason } = r else {
        panic!("{r:?}")
    };
    assert!(reason.contains("allows 1 tool_calls"), "{reason}");
    assert_eq!(b.mem.run(&rid("r")).unwrap().state, RunState::Paused);
    assert!(book(&b, "r").open.is_empty(), "nothing was held");
    // The call is never made: the begin is refused on a paused run,
    // and so is another reserve.
    let err = b
        .run(begin("r", "two", &g, ToolClass::Queryable, b"two"))
        .unwrap_err();
    assert!(matches!(err, Error::RunNotRunning { .. }), "{err}");
    let err = b
        .run(reserve("r", &g, step("two"), Cost::tool_call(10)))
        .unwrap_err();
    assert!(matches!(err, Error::RunNotRunning { .. }), "{err}");
    // Resumed without a raise, it is paused again at the next reserve.
    b.ok(operate("r", OperatorAction::Resume));
    let r = reserved(&b.ok(reserve("r", &g, step("two"), Cost::tool_call(10))));
    assert!(matches!(r, Reserved::Exhausted { .. }), "{r:?}");
    // Raised and resumed, the call goes ahead; spending so far stands.
    b.ok(set_budget("r", calls(2)));
    b.ok(operate("r", OperatorAction::Resume));
    paid_step(&mut b, "r", &g, "two", Cost::tool_call(10));
    assert_eq!(book(&b, "r").spent.tool_calls, 2);
}

#[test]
fn a_replayed_step_or_decision_is_not_charged_again() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget("r", calls(1)));
    paid_step(&mut b, "r", &g, "pay", Cost::tool_call(10));
    let r = reserved(&b.ok(reserve("r", &g, step("pay"), Cost::tool_call(10))));
    assert_eq!(
        r,
        Reserved::Replayed {
            charge: step("pay")
        }
    );
    let model = Charge::Decision { position: 0 };
    let ask = Cost {
        tokens_in: 100,
        tokens_out: 100,
        ..Cost::default()
    };
    b.ok(reserve("r", &g, model.clone(), ask));
    // A worker that crashed after reserving asks again: the same hold.
    let r = reserved(&b.ok(reserve("r", &g, model.clone(), ask)));
    assert!(matches!(r, Reserved::Granted { again: true, .. }), "{r:?}");
    assert_eq!(book(&b, "r").reserved.tokens_in, 100);
    b.ok(decision("r", &g, 0, b"prompt", b"answer"));
    b.ok(settle("r", &g, model.clone(), ask));
    let r = reserved(&b.ok(reserve("r", &g, model.clone(), ask)));
    assert_eq!(
        r,
        Reserved::Replayed {
            charge: model.clone()
        }
    );
    let s = settled(&b.ok(settle("r", &g, model, ask)));
    assert!(s.already);
    let spent = book(&b, "r").spent;
    assert_eq!((spent.tool_calls, spent.tokens_in), (1, 100));
}

#[test]
fn a_recorded_call_left_unsettled_by_a_dead_worker_is_charged_its_full_hold() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget("r", calls(3)));
    // The worker reserves, makes the call, records it, and dies.
    b.ok(reserve("r", &g, step("pay"), Cost::tool_call(100)));
    let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
    let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
        panic!()
    };
    b.ok(finish(&key, &g, confirmed(b"ok")));
    // Its successor asks again: the call is not made again, and the
    // hold is charged whole.
    let d = b.ok(reserve("r", &g, step("pay"), Cost::tool_call(100)));
    assert_eq!(
        reserved(&d),
        Reserved::Replayed {
            charge: step("pay")
        }
    );
    assert!(
        matches!(d.ops[..], [Op::BudgetSettled { .. }]),
        "{:?}",
        d.ops
    );
    let after = book(&b, "r");
    assert_eq!(
        (after.spent, after.reserved),
        (Cost::tool_call(100), Cost::default())
    );
    // A failed act returns its hold when its failure is recorded: the
    // call counts, its money does not; the retry gets a hold of its own.
    b.ok(reserve("r", &g, step("mail"), Cost::tool_call(10)));
    let d = b.ok(begin("r", "mail", &g, ToolClass::Queryable, b"m"));
    let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
        panic!()
    };
    let busy = Outcome::Failed {
        retryable: true,
        reason: "busy".into(),
    };
    let d = b.ok(finish(&key, &g, busy));
    assert!(
        matches!(
            d.ops[..],
            [Op::EffectSettled { .. }, Op::BudgetSettled { .. }]
        ),
        "{:?}",
        d.ops
    );
    let d = b.ok(reserve("r", &g, step("mail"), Cost::tool_call(10)));
    assert!(
        matches!(reserved(&d), Reserved::Granted { again: false, .. }),
        "{:?}",
        d.answer
    );
    assert!(
        matches!(d.ops[..], [Op::BudgetReserved { .. }]),
        "{:?}",
        d.ops
    );
    let after = book(&b, "r");
    assert_eq!((after.spent.tool_calls, after.reserved.tool_calls), (2, 1));
    assert_eq!(
        after.spent.cost_micros, 100,
        "the failed call's 10 went back"
    );
}

#[test]
fn an_act_reconciled_failed_returns_its_hold_and_a_confirmed_one_does_not() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget("r", calls(3)));
    for (name, outcome) in [
        (
            "wire",
            Outcome::Failed {
                retryable: false,
                reason: "the bank refused it".into(),
            },
        ),
        ("fee", confirmed(b"fee-1")),
    ] {
        b.ok(reserve("r", &g, step(name), Cost::tool_call(5_000)));
        let d = b.ok(begin(
            "r",
            name,
            &g,
            ToolClass::NotIdempotent,
            name.as_bytes(),
        ));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!()
        };
        // The worker dies; the outcome was lost; a person finds out.
        b.ok(finish(
            &key,
            &g,
            Outcome::Unknown {
                reason: "timeout".into(),
            },
        ));
        b.ok(reconcile(&key, &g, outcome));
    }
    let after = book(&b, "r");
    // The failed wire's hold went back at the reconcile (one call, no
    // money); the confirmed fee still holds until it is settled.
    assert_eq!(
        after.spent,
        Cost {
            tool_calls: 1,
            ..Cost::default()
        }
    );
    assert_eq!(after.reserved, Cost::tool_call(5_000));
    assert!(after.reservation(&step("wire")).is_none());
}

#[test]
fn a_retry_after_a_retryable_failure_is_a_new_paid_call() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget("r", calls(2)));
    b.ok(reserve("r", &g, step("pay"), Cost::tool_call(10)));
    let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
    let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
        panic!()
    };
    let failed = Outcome::Failed {
        retryable: true,
        reason: "busy".into(),
    };
    b.ok(finish(&key, &g, failed));
    b.ok(settle("r", &g, step("pay"), Cost::tool_call(10)));
    let r = reserved(&b.ok(reserve("r", &g, step("pay"), Cost::tool_call(10))));
    assert!(matches!(r, Reserved::Granted { again: false, .. }), "{r:?}");
    assert_eq!(book(&b, "r").reserved.tool_calls, 1);
    // A successor asks again before the retry is made: the hold is
    // for the retry, not for the failed attempt, so it stands as is.
    let d = b.ok(reserve("r", &g, step("pay"), Cost::tool_call(10)));
    assert!(
        matches!(reserved(&d), Reserved::Granted { again: true, .. }),
        "{:?}",
        d.answer
    );
    assert!(d.ops.is_empty(), "{:?}", d.ops);
    let after = book(&b, "r");
    assert_eq!((after.spent.tool_calls, after.reserved.tool_calls), (1, 1));
}

#[test]
fn a_settle_needs_the_call_recorded_and_a_reservation() {
    let (mut b, g) = books_with_running_run("r");
    let err = b
        .run(settle("r", &g, step("pay"), Cost::tool_call(1)))
        .unwrap_err();
    assert!(matches!(err, Error::NotReserved { .. }), "{err}");
    assert!(
        err.to_string().contains("the act of step pay of run r"),
        "{err}"
    );
    b.ok(reserve("r", &g, step("pay"), Cost::tool_call(1)));
    let err = b
        .run(settle("r", &g, step("pay"), Cost::tool_call(1)))
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidCommand { reason } if reason.contains("only once it is recorded")),
        "{err}"
    );
    // Without a budget the spending is still counted.
    assert_eq!(book(&b, "r").limits, None);
    assert_eq!(book(&b, "r").reserved.tool_calls, 1);
}

#[test]
fn a_child_draws_on_its_parents_budget() {
    let (mut b, g) = books_with_running_run("parent");
    b.ok(set_budget("parent", calls(2)));
    let Command::CreateRun(mut child) = create("child", b"c") else {
        panic!()
    };
    child.parent = Some(rid("parent"));
    b.ok(Command::CreateRun(child));
    let d = b.ok(acquire("child", "w2", LEASE_MS));
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
    b.ok(transition("child", &gc, RunState::Running));
    paid_step(&mut b, "parent", &g, "a", Cost::tool_call(1));
    paid_step(&mut b, "child", &gc, "b", Cost::tool_call(1));
    assert_eq!(book(&b, "parent").spent.tool_calls, 2);
    assert_eq!(book(&b, "child").spent.tool_calls, 1);
    let r = reserved(&b.ok(reserve("child", &gc, step("c"), Cost::tool_call(1))));
    let Reserved::Exhausted { reason } = r else {
        panic!("{r:?}")
    };
    assert!(reason.contains("budget of run parent"), "{reason}");
    assert_eq!(b.mem.run(&rid("child")).unwrap().state, RunState::Paused);
    assert_eq!(b.mem.run(&rid("parent")).unwrap().state, RunState::Running);
}

#[test]
fn wall_time_counts_only_time_spent_running() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget(
        "r",
        BudgetLimits {
            wall_ms: Some(1_000),
            ..BudgetLimits::default()
        },
    ));
    b.now_ms += 600;
    b.ok(operate("r", OperatorAction::Pause));
    b.now_ms += 1_000_000; // paused: not counted
    b.ok(operate("r", OperatorAction::Resume));
    b.now_ms += 300;
    let lease = b.ok(acquire("r", "w1", LEASE_MS));
    let Answer::Leased { token, .. } = lease.answer else {
        panic!("{:?}", lease.answer)
    };
    let g = Guard { token, ..g };
    let r = reserved(&b.ok(reserve("r", &g, step("a"), Cost::default())));
    assert!(matches!(r, Reserved::Granted { .. }), "{r:?}");
    assert_eq!(book(&b, "r").wall_ms(b.now_ms), 900);
    b.now_ms += 100;
    let r = reserved(&b.ok(reserve("r", &g, step("b"), Cost::default())));
    let Reserved::Exhausted { reason } = r else {
        panic!("{r:?}")
    };
    assert!(reason.contains("1000 ms run"), "{reason}");
}

#[test]
fn a_paused_run_still_settles_a_call_in_flight() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(reserve("r", &g, step("pay"), Cost::tool_call(10)));
    let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
    let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
        panic!()
    };
    b.ok(operate("r", OperatorAction::Pause));
    b.ok(finish(&key, &g, confirmed(b"ok")));
    let s = settled(&b.ok(settle("r", &g, step("pay"), Cost::tool_call(25))));
    assert_eq!(s.overrun.cost_micros, 15);
    assert_eq!(book(&b, "r").spent.cost_micros, 25);
}

/// The answer of a begin that proceeds: its key.
fn proceeds(d: &Decided) -> EffectKey {
    let Answer::Begun(Begun::Proceed { key, .. }) = &d.answer else {
        panic!("{:?}", d.answer)
    };
    key.clone()
}

fn budget_ops(d: &Decided) -> Vec<&'static str> {
    d.ops
        .iter()
        .map(Op::name)
        .filter(|name| name.starts_with("Budget"))
        .collect()
}

#[test]
fn a_begin_without_a_reserve_counts_its_tool_call_and_refuses_one_past_the_limit() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget("r", calls(1)));
    let d = b.ok(begin("r", "one", &g, ToolClass::Queryable, b"1"));
    let key = proceeds(&d);
    assert_eq!(budget_ops(&d), ["BudgetReserved", "BudgetSettled"]);
    let after = book(&b, "r");
    assert_eq!(
        (after.spent, after.reserved),
        (Cost::tool_call(0), Cost::default())
    );
    assert!(after.open.is_empty(), "counted as spent, nothing left open");
    b.ok(finish(&key, &g, confirmed(b"ok")));
    let before = b.mem.clone();
    let err = b
        .run(begin("r", "two", &g, ToolClass::Queryable, b"2"))
        .unwrap_err();
    let Error::BudgetExhausted { run, step, limit } = &err else {
        panic!("{err}")
    };
    assert_eq!((run, step), (&rid("r"), &sid("two")));
    assert!(limit.contains("allows 1 tool_calls: 1 spent"), "{limit}");
    let message = err.to_string();
    assert!(
        message.contains("step two of run r") && message.contains("allows 1 tool_calls"),
        "{message}"
    );
    assert_eq!(b.mem, before, "a refused begin records nothing");
    assert!(
        b.mem
            .latest_effect(&rid("r"), &sid("two"), EffectKind::Act)
            .is_none()
    );
    // Raised, the act begins.
    b.ok(set_budget("r", calls(2)));
    proceeds(&b.ok(begin("r", "two", &g, ToolClass::Queryable, b"2")));
    assert_eq!(book(&b, "r").spent.tool_calls, 2);
}

#[test]
fn a_begin_sees_the_hold_its_worker_reserved_and_does_not_count_the_call_twice() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget(
        "r",
        BudgetLimits {
            tool_calls: Some(1),
            cost_micros: Some(100),
            ..BudgetLimits::default()
        },
    ));
    // The hold takes the whole budget: one call, all the money.
    b.ok(reserve("r", &g, step("pay"), Cost::tool_call(100)));
    let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
    let key = proceeds(&d);
    assert!(budget_ops(&d).is_empty(), "{:?}", d.ops);
    let held = book(&b, "r");
    assert_eq!(
        (held.spent, held.reserved),
        (Cost::default(), Cost::tool_call(100))
    );
    b.ok(finish(&key, &g, confirmed(b"ok")));
    b.ok(settle("r", &g, step("pay"), Cost::tool_call(70)));
    assert_eq!(book(&b, "r").spent, Cost::tool_call(70));
    // Another act without a hold: one call past the limit.
    let err = b
        .run(begin("r", "mail", &g, ToolClass::Queryable, b"m"))
        .unwrap_err();
    assert!(
        matches!(&err, Error::BudgetExhausted { step, .. } if step == &sid("mail")),
        "{err}"
    );
}

#[test]
fn a_resend_or_a_replay_of_an_act_begun_before_is_never_refused() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget("r", calls(1)));
    let idem = ToolClass::Idempotent {
        dedup_window_ms: 86_400_000,
    };
    let key = proceeds(&b.ok(begin("r", "pay", &g, idem, b"a")));
    // The budget is used up by this very act; an operator even lowers it.
    b.ok(set_budget("r", calls(0)));
    // Its intent has no outcome yet: resent with the same key, not refused.
    let d = b.ok(begin("r", "pay", &g, idem, b"a"));
    assert!(
        matches!(&d.answer, Answer::Begun(Begun::Resend { key: k, .. }) if k == &key),
        "{:?}",
        d.answer
    );
    assert!(budget_ops(&d).is_empty(), "{:?}", d.ops);
    b.ok(finish(&key, &g, confirmed(b"ok")));
    let d = b.ok(begin("r", "pay", &g, idem, b"a"));
    assert!(
        matches!(&d.answer, Answer::Begun(Begun::Replay { .. })),
        "{:?}",
        d.answer
    );
    assert!(d.ops.is_empty());
    assert_eq!(book(&b, "r").spent.tool_calls, 1);
}

#[test]
fn a_retry_is_a_new_call_and_is_refused_past_the_limit() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget("r", calls(2)));
    let busy = || Outcome::Failed {
        retryable: true,
        reason: "503".into(),
    };
    let first = proceeds(&b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a")));
    b.ok(finish(&first, &g, busy()));
    let second = proceeds(&b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a")));
    assert_eq!(second.attempt(), 2);
    b.ok(finish(&second, &g, busy()));
    let err = b
        .run(begin("r", "pay", &g, ToolClass::Queryable, b"a"))
        .unwrap_err();
    assert!(
        matches!(&err, Error::BudgetExhausted { limit, .. } if limit.contains("2 spent")),
        "{err}"
    );
}

#[test]
fn a_limit_already_passed_or_time_used_up_refuses_even_a_held_act() {
    let (mut b, g) = books_with_running_run("r");
    b.ok(set_budget(
        "r",
        BudgetLimits {
            cost_micros: Some(100),
            wall_ms: Some(10_000),
            ..BudgetLimits::default()
        },
    ));
    b.ok(reserve("r", &g, step("a"), Cost::tool_call(50)));
    b.ok(reserve("r", &g, step("b"), Cost::tool_call(10)));
    let a = proceeds(&b.ok(begin("r", "a", &g, ToolClass::Queryable, b"a")));
    b.ok(finish(&a, &g, confirmed(b"ok")));
    // The call cost far more than its hold: the money is spent past the
    // limit, and the act held for `b` does not begin.
    b.ok(settle("r", &g, step("a"), Cost::tool_call(150)));
    let err = b
        .run(begin("r", "b", &g, ToolClass::Queryable, b"b"))
        .unwrap_err();
    assert!(
        matches!(&err, Error::BudgetExhausted { limit, .. }
            if limit.contains("allows 100 cost_micros: 150 spent, 10 reserved, 0 asked")),
        "{err}"
    );
    // Raised, it begins; then the run's time runs out.
    b.ok(set_budget(
        "r",
        BudgetLimits {
            cost_micros: Some(1_000),
            wall_ms: Some(10_000),
            ..BudgetLimits::default()
        },
    ));
    proceeds(&b.ok(begin("r", "b", &g, ToolClass::Queryable, b"b")));
    b.now_ms += 10_000;
    let g = {
        let d = b.ok(acquire("r", "w1", LEASE_MS));
        let Answer::Leased { token, .. } = d.answer else {
            panic!("{:?}", d.answer)
        };
        Guard { token, ..g }
    };
    let err = b
        .run(begin("r", "c", &g, ToolClass::Queryable, b"c"))
        .unwrap_err();
    assert!(
        matches!(&err, Error::BudgetExhausted { limit, .. } if limit.contains("10000 ms of running")),
        "{err}"
    );
}

#[test]
fn a_childs_act_is_counted_in_its_parents_budget_at_begin() {
    let (mut b, g) = books_with_running_run("parent");
    b.ok(set_budget("parent", calls(1)));
    let Command::CreateRun(mut child) = create("child", b"c") else {
        panic!()
    };
    child.parent = Some(rid("parent"));
    b.ok(Command::CreateRun(child));
    let d = b.ok(acquire("child", "w2", LEASE_MS));
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
    b.ok(transition("child", &gc, RunState::Running));
    proceeds(&b.ok(begin("child", "cite", &gc, ToolClass::Queryable, b"c")));
    assert_eq!(book(&b, "parent").spent.tool_calls, 1);
    assert_eq!(book(&b, "child").spent.tool_calls, 1);
    let err = b
        .run(begin("parent", "search", &g, ToolClass::Queryable, b"s"))
        .unwrap_err();
    assert!(
        matches!(&err, Error::BudgetExhausted { run, limit, .. }
            if run == &rid("parent") && limit.contains("budget of run parent")),
        "{err}"
    );
}

#[test]
fn without_limits_a_begin_counts_nothing() {
    let (mut b, g) = books_with_running_run("r");
    let d = b.ok(begin("r", "pay", &g, ToolClass::Queryable, b"a"));
    proceeds(&d);
    assert!(budget_ops(&d).is_empty(), "{:?}", d.ops);
    assert!(b.mem.budget(&rid("r")).is_none());
}

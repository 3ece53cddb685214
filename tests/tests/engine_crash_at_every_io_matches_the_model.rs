//! Crash tests on the simulated disk: a fixed workload of engine commands is
//! cut by a power loss at EVERY I/O call index in turn (n = 1, 2, ... until
//! the workload completes without crashing). After each cut the engine is
//! recovered and its books (every redb table, read into a `MemBooks`) must
//! equal the reference model driven by the acknowledged commands, with the
//! one in-flight command either fully landed or not at all, and then the
//! leases the open released (the process holding them is gone). The
//! workers of the new process take their runs back, and the recovered
//! engine finishes the workload and must still match the model.
//!
//! Replay a failure: the panic message names the seed and the op index `n`.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use actum::books::{
    AcquireResource, BeginCompensation, BeginEffect, BooksRead, BudgetLimits, Charge, Command,
    Compensation, Cost, CreateRun, DecideApproval, DeliverReply, EffectKey, EffectKind, EndSaga,
    FencingToken, FinishEffect, Guard, OpenWait, Operate, OperatorAction, Outcome, Part,
    RecordDecision, ReleaseResource, Reserve, ResourceId, RunId, RunState, SaveCheckpoint,
    SendSignal, SetBudget, SetShared, Settle, SharedKeyId, SharedSetter, ToolClass, Transition,
    Usage, WaitFor, digest_of,
};
use actum::db::DbOptions;
use actum::engine::{ChildSpec, start_child_command};
use actum::wal::WalOptions;
use actum::{Clock, DatabaseId, Engine, EngineOptions, Storage};
use actum_sim::check::{opened, releases_at_open};
use actum_sim::{FaultConfig, Rng, SimClock, SimDisk};
use support::*;

const DIR: &str = "/db";
const STEP_MS: u64 = 10;

/// One step of the workload.
#[derive(Clone, Debug)]
enum Work {
    /// A command, mirrored in the model if acknowledged.
    Cmd(Box<Command>),
    /// An explicit engine checkpoint (no model change).
    Checkpoint,
    /// The clock jumps ahead by this many ms (a run sleeps).
    Advance(u64),
}

fn options() -> EngineOptions {
    EngineOptions {
        db: DbOptions {
            wal: WalOptions {
                segment_size_bytes: 96 * 1024,
                // Small, so the workload's segment grows (8, 16, 32 KiB)
                // after acknowledged commits, and power cuts land in grows.
                segment_first_step_bytes: 8 * 1024,
                max_record_bytes: 40 * 1024,
                ..WalOptions::default()
            },
            database_id: Some(DatabaseId(0xac7_u128)),
        },
        verify_state_on_open: true,
        checkpoint_every_records: 5,
        checkpoint_every_bytes: 0,
        retention: actum::engine::Retention::default(),
        operator_channel: false,
        // Closes compact whenever a sixteenth of the state store is free
        // (after a session that wrote a sixteenth of it).
        compact_at_close_free_bytes: 1,
        check_live_claims: true,
    }
}

fn guard(run: &str, worker: &str) -> Guard {
    Guard {
        run: rid(run),
        worker: wid(worker),
        token: FencingToken::FIRST,
    }
}

fn key(run: &str, step: &str, attempt: u32) -> EffectKey {
    EffectKey::new(rid(run), sid(step), attempt).unwrap()
}

fn begin(run: &str, step: &str, worker: &str, class: ToolClass) -> Command {
    Command::BeginEffect(BeginEffect {
        run: rid(run),
        step: sid(step),
        guard: guard(run, worker),
        tool: "tool.call".into(),
        tool_class: class,
        args_digest: digest_of(step.as_bytes()),
        // Stored with the intent, by digest: a blob put in the same record.
        args: Some(step.as_bytes().to_vec()),
        rationale: format!("why {step}"),
        compensation: None,
    })
}

fn finish(k: EffectKey, worker: &str, outcome: Outcome) -> Command {
    Command::FinishEffect(FinishEffect {
        key: k.clone(),
        guard: guard(k.run().as_str(), worker),
        outcome,
    })
}

fn save(run: &str, worker: &str, big: u8) -> Command {
    Command::SaveCheckpoint(SaveCheckpoint {
        run: rid(run),
        guard: guard(run, worker),
        schema_version: 1,
        parts: vec![
            Part {
                name: "messages".into(),
                bytes: vec![big; 12 * 1024],
                extends: None,
                inline: false,
            },
            Part {
                name: "cursor".into(),
                bytes: vec![big, 0, 0, 0],
                extends: None,
                inline: false,
            },
        ],
    })
}

fn transition(run: &str, worker: &str, to: RunState) -> Command {
    Command::Transition(Transition {
        run: rid(run),
        guard: guard(run, worker),
        to,
        expected_version: None,
        reason: format!("to {to}"),
    })
}

fn operate(run: &str, action: OperatorAction) -> Command {
    Command::Operate(Operate {
        run: rid(run),
        action,
        operator: "ops-anna".into(),
        reason: format!("{} {run}", action.name()),
    })
}

fn guard_at(run: &str, worker: &str, token: u64) -> Guard {
    Guard {
        run: rid(run),
        worker: wid(worker),
        token: FencingToken(token),
    }
}

fn open_wait(
    run: &str,
    worker: &str,
    token: u64,
    step: &str,
    wait_for: WaitFor,
    deadline_ms: u64,
) -> Command {
    Command::OpenWait(OpenWait {
        run: rid(run),
        guard: guard_at(run, worker, token),
        step: sid(step),
        wait_for,
        deadline_ms: Some(deadline_ms),
        reason: format!("{step} waits"),
    })
}

fn acquire(run: &str, worker: &str) -> Command {
    Command::AcquireLease(actum::books::AcquireLease {
        run: rid(run),
        worker: wid(worker),
        ttl_ms: LEASE_MS,
    })
}

fn claim(worker: &str) -> Command {
    Command::ClaimNext(actum::books::ClaimNext {
        worker: wid(worker),
        ttl_ms: LEASE_MS,
        agents: None,
    })
}

/// Run r3 waits for an approval (decided by an approver with no lease), a
/// timer (due after the clock jumps a day) and a signal that arrived
/// before its wait: each wait opens, ends and wakes the run under power
/// cuts like any other command.
fn waits() -> Vec<Work> {
    #[expect(non_snake_case, reason = "reads like the variant")]
    let Cmd = |cmd: Command| Work::Cmd(Box::new(cmd));
    let approval = || WaitFor::Approval {
        args_digest: digest_of(b"pay r3"),
        role: "finance".into(),
    };
    let hook = || WaitFor::Signal {
        name: "hook".into(),
    };
    let hour_ms = 3_600_000;
    vec![
        Cmd(Command::CreateRun(create_cmd("r3"))),
        Cmd(acquire("r3", "w3")),
        Cmd(transition("r3", "w3", RunState::Running)),
        Cmd(open_wait(
            "r3",
            "w3",
            1,
            "pay",
            approval(),
            START_MS + hour_ms,
        )),
        Cmd(Command::SendSignal(SendSignal {
            run: rid("r3"),
            name: "hook".into(),
            payload: b"h1".to_vec(),
            sender: "psp".into(),
        })),
        Work::Checkpoint,
        Cmd(Command::DecideApproval(DecideApproval {
            run: rid("r3"),
            step: sid("pay"),
            args_digest: digest_of(b"pay r3"),
            approver: "ann".into(),
            role: "finance".into(),
            approve: true,
            note: "ok".into(),
        })),
        Cmd(claim("w4")),
        Cmd(open_wait(
            "r3",
            "w4",
            2,
            "pay",
            approval(),
            START_MS + hour_ms,
        )),
        Cmd(open_wait(
            "r3",
            "w4",
            2,
            "nap",
            WaitFor::Timer,
            START_MS + 12 * hour_ms,
        )),
        Work::Checkpoint,
        Work::Advance(24 * hour_ms),
        Cmd(claim("w5")),
        Cmd(Command::OpenWait(OpenWait {
            run: rid("r3"),
            guard: guard_at("r3", "w5", 3),
            step: sid("hook"),
            wait_for: hook(),
            deadline_ms: None,
            reason: "webhook".into(),
        })),
        Cmd(Command::Transition(Transition {
            run: rid("r3"),
            guard: guard_at("r3", "w5", 3),
            to: RunState::Completed,
            expected_version: None,
            reason: "done".into(),
        })),
    ]
}

/// Run r4 has a budget of two tool calls, and its child r5 draws on it:
/// reserves, settles (one in a batch with its outcome), an exhausted
/// reserve that pauses the child, an operator's raise and resume, and a
/// model call's charge, each under power cuts.
fn budgets() -> Vec<Work> {
    #[expect(non_snake_case, reason = "reads like the variant")]
    let Cmd = |cmd: Command| Work::Cmd(Box::new(cmd));
    let limits = |calls| BudgetLimits {
        tool_calls: Some(calls),
        cost_micros: Some(1_000),
        ..BudgetLimits::default()
    };
    let set = |calls| {
        Command::SetBudget(SetBudget {
            run: rid("r4"),
            limits: limits(calls),
            by: "ops-anna".into(),
            reason: "cap".into(),
        })
    };
    let step = |name: &str| Charge::Effect { step: sid(name) };
    let reserve = |run: &str, worker: &str, charge: Charge| {
        Command::Reserve(Reserve {
            run: rid(run),
            guard: guard(run, worker),
            charge,
            amount: Cost::tool_call(100),
        })
    };
    let settle = |run: &str, worker: &str, charge: Charge| {
        Command::Settle(Settle {
            run: rid(run),
            guard: guard(run, worker),
            charge,
            actual: Cost::tool_call(60),
        })
    };
    let confirmed = || Outcome::Confirmed {
        receipt: b"ok".to_vec(),
    };
    let child = CreateRun {
        parent: Some(rid("r4")),
        ..create_cmd("r5")
    };
    vec![
        Cmd(Command::CreateRun(create_cmd("r4"))),
        Cmd(set(2)),
        Cmd(acquire("r4", "w6")),
        Cmd(transition("r4", "w6", RunState::Running)),
        Cmd(reserve("r4", "w6", step("a"))),
        Cmd(begin("r4", "a", "w6", ToolClass::Queryable)),
        Cmd(Command::Batch(vec![
            finish(key("r4", "a", 1), "w6", confirmed()),
            settle("r4", "w6", step("a")),
        ])),
        Work::Checkpoint,
        Cmd(Command::CreateRun(child)),
        Cmd(acquire("r5", "w7")),
        Cmd(transition("r5", "w7", RunState::Running)),
        Cmd(reserve("r5", "w7", step("b"))),
        Cmd(begin("r5", "b", "w7", ToolClass::Queryable)),
        Cmd(finish(key("r5", "b", 1), "w7", confirmed())),
        Cmd(settle("r5", "w7", step("b"))),
        // r4's two calls are spent: the child is paused, the call not made.
        Cmd(reserve("r5", "w7", step("c"))),
        Work::Checkpoint,
        Cmd(set(4)),
        Cmd(operate("r5", OperatorAction::Resume)),
        Cmd(reserve("r5", "w7", step("c"))),
        Cmd(reserve("r5", "w7", Charge::Decision { position: 0 })),
        Cmd(Command::Transition(Transition {
            run: rid("r5"),
            guard: guard("r5", "w7"),
            to: RunState::Completed,
            expected_version: None,
            reason: "done".into(),
        })),
    ]
}

/// Run r6 starts its child r6:sum and waits for it in one batch; the
/// child runs, saves its result and completes, which wakes r6 in the same
/// commit; r6 asks again and gets the child's end. Run r7 starts a child
/// and is cancelled, which cancels the child too.
fn children() -> Vec<Work> {
    #[expect(non_snake_case, reason = "reads like the variant")]
    let Cmd = |cmd: Command| Work::Cmd(Box::new(cmd));
    let start_child = |parent: &str, worker: &str, token: u64| {
        let spec = ChildSpec {
            input_digest: digest_of(format!("{parent}:sum").as_bytes()),
            agent_version: "agent 1.0".into(),
            trace_id: format!("trace-{parent}:sum"),
            input: Some(format!("{parent}:sum").into_bytes()),
        };
        let guard = guard_at(parent, worker, token);
        start_child_command(&rid(parent), &guard, &sid("sum"), spec, None, "summarize").unwrap()
    };
    vec![
        Cmd(Command::CreateRun(create_cmd("r6"))),
        Cmd(acquire("r6", "w8")),
        Cmd(transition("r6", "w8", RunState::Running)),
        Cmd(start_child("r6", "w8", 1)),
        Cmd(acquire("r6:sum", "w9")),
        Cmd(transition("r6:sum", "w9", RunState::Running)),
        Cmd(save("r6:sum", "w9", 4)),
        Work::Checkpoint,
        Cmd(transition("r6:sum", "w9", RunState::Completed)),
        Cmd(acquire("r6", "w8")),
        Cmd(start_child("r6", "w8", 2)),
        Cmd(Command::CreateRun(create_cmd("r7"))),
        Cmd(acquire("r7", "w8")),
        Cmd(transition("r7", "w8", RunState::Running)),
        Cmd(start_child("r7", "w8", 1)),
        Work::Checkpoint,
        Cmd(operate("r7", OperatorAction::Cancel)),
    ]
}

/// Run r8 sends an asynchronous tool its request and waits for the reply
/// with no lease; the webhook's reply settles the effect and wakes r8 in
/// one commit, and a retried webhook changes nothing. Run r9's reply
/// arrives before its wait, which then ends as it opens.
fn replies() -> Vec<Work> {
    #[expect(non_snake_case, reason = "reads like the variant")]
    let Cmd = |cmd: Command| Work::Cmd(Box::new(cmd));
    let on_reply = |run: &str, worker: &str, token: u64| {
        Command::OpenWait(OpenWait {
            run: rid(run),
            guard: guard_at(run, worker, token),
            step: sid("screen"),
            wait_for: WaitFor::Reply {
                key: key(run, "screen", 1),
            },
            deadline_ms: None,
            reason: "the screening answers by webhook".into(),
        })
    };
    let reply = |run: &str| {
        Command::DeliverReply(DeliverReply {
            key: key(run, "screen", 1),
            outcome: Outcome::Confirmed {
                receipt: b"clear".to_vec(),
            },
            sender: "kyc-webhook".into(),
        })
    };
    vec![
        Cmd(Command::CreateRun(create_cmd("r8"))),
        Cmd(acquire("r8", "w10")),
        Cmd(transition("r8", "w10", RunState::Running)),
        Cmd(begin("r8", "screen", "w10", idempotent())),
        Cmd(on_reply("r8", "w10", 1)),
        Work::Checkpoint,
        Cmd(reply("r8")),
        Cmd(reply("r8")),
        Cmd(acquire("r8", "w11")),
        Cmd(on_reply("r8", "w11", 2)),
        Cmd(Command::CreateRun(create_cmd("r9"))),
        Cmd(acquire("r9", "w10")),
        Cmd(transition("r9", "w10", RunState::Running)),
        Cmd(begin("r9", "screen", "w10", idempotent())),
        Cmd(reply("r9")),
        Work::Checkpoint,
        Cmd(on_reply("r9", "w10", 1)),
    ]
}

/// Run r10 sweeps then funds, both registering a compensation; its hedge
/// fails, so it moves to compensating; the saga undoes the funding, then
/// (after a checkpoint and a new holder) the sweep, and ends the run
/// failed. Run r11 is cancelled by an operator with an act in flight: its
/// saga resends the act, then undoes it, and ends it cancelled.
fn sagas() -> Vec<Work> {
    #[expect(non_snake_case, reason = "reads like the variant")]
    let Cmd = |cmd: Command| Work::Cmd(Box::new(cmd));
    let compensable = |run: &str, step: &str, worker: &str, token: u64| {
        let Command::BeginEffect(mut begin) = begin(run, step, worker, idempotent()) else {
            unreachable!("begin builds a BeginEffect")
        };
        begin.guard = guard_at(run, worker, token);
        begin.compensation = Some(Compensation {
            tool: format!("undo.{step}"),
            args: format!("undo {step}").into_bytes(),
            class: idempotent(),
        });
        Command::BeginEffect(begin)
    };
    let undo = |run: &str, step: &str, worker: &str, token: u64| {
        Command::BeginCompensation(BeginCompensation {
            run: rid(run),
            step: sid(step),
            guard: guard_at(run, worker, token),
            rationale: "the saga".into(),
        })
    };
    let undo_key = |run: &str, step: &str| {
        EffectKey::of_kind(rid(run), sid(step), EffectKind::Undo, 1).unwrap()
    };
    let done = |k: EffectKey, worker: &str, token: u64| {
        Command::FinishEffect(FinishEffect {
            key: k.clone(),
            guard: guard_at(k.run().as_str(), worker, token),
            outcome: Outcome::Confirmed {
                receipt: b"ok".to_vec(),
            },
        })
    };
    let end = |run: &str, worker: &str, token: u64| {
        Command::EndSaga(EndSaga {
            run: rid(run),
            guard: guard_at(run, worker, token),
            reason: "saga done".into(),
        })
    };
    vec![
        Cmd(Command::CreateRun(create_cmd("r10"))),
        Cmd(acquire("r10", "w12")),
        Cmd(transition("r10", "w12", RunState::Running)),
        Cmd(compensable("r10", "sweep", "w12", 1)),
        Cmd(done(key("r10", "sweep", 1), "w12", 1)),
        Cmd(compensable("r10", "fund", "w12", 1)),
        Cmd(done(key("r10", "fund", 1), "w12", 1)),
        Cmd(begin("r10", "hedge", "w12", ToolClass::Queryable)),
        Cmd(finish(
            key("r10", "hedge", 1),
            "w12",
            Outcome::Failed {
                retryable: false,
                reason: "declined".into(),
            },
        )),
        Cmd(transition("r10", "w12", RunState::Failed)),
        Cmd(undo("r10", "fund", "w12", 1)),
        Cmd(done(undo_key("r10", "fund"), "w12", 1)),
        Work::Checkpoint,
        Work::Advance(LEASE_MS),
        Cmd(acquire("r10", "w13")),
        Cmd(undo("r10", "sweep", "w13", 2)),
        Cmd(done(undo_key("r10", "sweep"), "w13", 2)),
        Cmd(end("r10", "w13", 2)),
        Cmd(Command::CreateRun(create_cmd("r11"))),
        Cmd(acquire("r11", "w12")),
        Cmd(transition("r11", "w12", RunState::Running)),
        Cmd(compensable("r11", "book", "w12", 1)),
        Cmd(operate("r11", OperatorAction::Cancel)),
        Work::Checkpoint,
        Cmd(compensable("r11", "book", "w12", 1)),
        Cmd(done(key("r11", "book", 1), "w12", 1)),
        Cmd(undo("r11", "book", "w12", 1)),
        Cmd(done(undo_key("r11", "book"), "w12", 1)),
        Cmd(end("r11", "w12", 1)),
    ]
}

/// Runs r12 and r13 take turns on resource customer:9 (a release, then an
/// expiry hands it over, each grant a larger token) and compare-and-set a
/// shared key, a run and an operator in turn.
fn coordination() -> Vec<Work> {
    #[expect(non_snake_case, reason = "reads like the variant")]
    let Cmd = |cmd: Command| Work::Cmd(Box::new(cmd));
    let customer = || ResourceId::new("customer:9").unwrap();
    let hold = |run: &str, worker: &str, token: u64| {
        Command::AcquireResource(AcquireResource {
            resource: customer(),
            run: rid(run),
            guard: guard_at(run, worker, token),
            ttl_ms: 5_000,
        })
    };
    let release = |run: &str, worker: &str, token: u64| {
        Command::ReleaseResource(ReleaseResource {
            resource: customer(),
            run: rid(run),
            guard: guard_at(run, worker, token),
        })
    };
    let set = |version: u64, value: &[u8], by: SharedSetter| {
        Command::SetShared(SetShared {
            key: SharedKeyId::new("dnc:customer-9").unwrap(),
            expected_version: version,
            value: Some(value.to_vec()),
            by,
            reason: "do not contact".into(),
        })
    };
    let by_run = |run: &str, worker: &str| SharedSetter::Run {
        run: rid(run),
        guard: guard_at(run, worker, 1),
    };
    vec![
        Cmd(Command::CreateRun(create_cmd("r12"))),
        Cmd(Command::CreateRun(create_cmd("r13"))),
        Cmd(acquire("r12", "w14")),
        Cmd(acquire("r13", "w15")),
        Cmd(hold("r12", "w14", 1)),
        Cmd(set(0, b"asked", by_run("r12", "w14"))),
        Work::Checkpoint,
        Cmd(release("r12", "w14", 1)),
        Cmd(hold("r13", "w15", 1)),
        Cmd(set(
            1,
            b"confirmed",
            SharedSetter::Operator {
                name: "ops-anna".into(),
            },
        )),
        Work::Advance(5_000),
        Cmd(hold("r12", "w14", 1)),
        Work::Checkpoint,
        Cmd(hold("r12", "w14", 1)),
        Cmd(set(2, b"lifted", by_run("r13", "w15"))),
    ]
}

/// Retention: runs that are over leave the books with their ledger,
/// checkpoints and the blobs no kept run references (r16's checkpoint
/// shares its parts with r1's, its arguments with r1's "pay"); a pruned
/// run's name is free again, and its second life, which acted on a tool
/// that deduplicates for a day, stays.
fn retention() -> Vec<Work> {
    #[expect(non_snake_case, reason = "reads like the variant")]
    let Cmd = |cmd: Command| Work::Cmd(Box::new(cmd));
    let prune = |runs: &[&str], older_than_ms: u64| {
        Command::Prune(actum::books::Prune {
            runs: runs.iter().map(|r| rid(r)).collect(),
            older_than_ms,
        })
    };
    let confirmed = || Outcome::Confirmed {
        receipt: b"ok".to_vec(),
    };
    let life = |worker: &str, big: u8, class: ToolClass| {
        vec![
            Cmd(Command::CreateRun(create_cmd("r16"))),
            Cmd(acquire("r16", worker)),
            Cmd(transition("r16", worker, RunState::Running)),
            Cmd(begin("r16", "pay", worker, class)),
            Cmd(Command::Batch(vec![
                finish(key("r16", "pay", 1), worker, confirmed()),
                save("r16", worker, big),
                transition("r16", worker, RunState::Completed),
            ])),
        ]
    };
    let mut work = life("w16", 1, ToolClass::Queryable);
    work.extend([
        Work::Checkpoint,
        Work::Advance(60_000),
        Cmd(prune(&["r16", "r2", "r1", "r12"], 30_000)),
        Work::Checkpoint,
    ]);
    work.extend(life("w17", 4, idempotent()));
    work.extend([
        Work::Advance(60_000),
        Cmd(prune(&["r16", "r13"], 30_000)),
        Work::Checkpoint,
        Cmd(prune(&["r13"], 0)),
    ]);
    work
}

fn workload() -> Vec<Work> {
    use Work::Checkpoint;
    #[expect(non_snake_case, reason = "reads like the variant")]
    let Cmd = |cmd: Command| Work::Cmd(Box::new(cmd));
    let confirmed = |r: &[u8]| Outcome::Confirmed {
        receipt: r.to_vec(),
    };
    vec![
        Cmd(Command::CreateRun(create_cmd("r1"))),
        Cmd(Command::CreateRun(create_cmd("r2"))),
        Cmd(acquire("r1", "w1")),
        Cmd(transition("r1", "w1", RunState::Running)),
        Cmd(begin("r1", "pay", "w1", idempotent())),
        Cmd(finish(key("r1", "pay", 1), "w1", confirmed(b"ch_1"))),
        Cmd(save("r1", "w1", 1)),
        Checkpoint,
        Cmd(Command::RecordDecision(RecordDecision {
            run: rid("r1"),
            guard: guard("r1", "w1"),
            position: 0,
            input_digest: digest_of(b"prompt"),
            output: b"ship it".to_vec(),
            rationale: "cheapest carrier".into(),
            usage: Usage {
                tokens_in: 10,
                tokens_out: 3,
                cost_micros: 7,
            },
        })),
        Cmd(Command::Batch(vec![
            begin("r1", "ship", "w1", ToolClass::Queryable),
            finish(key("r1", "ship", 1), "w1", confirmed(b"parcel")),
            save("r1", "w1", 2),
            transition("r1", "w1", RunState::WaitingHuman),
        ])),
        Cmd(Command::ClaimNext(actum::books::ClaimNext {
            worker: wid("w2"),
            ttl_ms: LEASE_MS,
            agents: None,
        })),
        Cmd(transition("r2", "w2", RunState::Running)),
        Cmd(begin("r2", "mail", "w2", ToolClass::NotIdempotent)),
        Cmd(finish(
            key("r2", "mail", 1),
            "w2",
            Outcome::Failed {
                retryable: true,
                reason: "503".into(),
            },
        )),
        Cmd(begin("r2", "mail", "w2", ToolClass::NotIdempotent)),
        Cmd(save("r1", "w1", 2)),
        Cmd(finish(
            key("r2", "mail", 2),
            "w2",
            Outcome::Unknown {
                reason: "timeout".into(),
            },
        )),
        Checkpoint,
        // An operator's pause, resume and cancel, with no lease.
        Cmd(operate("r2", OperatorAction::Pause)),
        Cmd(save("r2", "w2", 3)),
        Checkpoint,
        Cmd(operate("r2", OperatorAction::Resume)),
        Cmd(operate("r1", OperatorAction::Cancel)),
        Cmd(transition("r2", "w2", RunState::Completed)),
    ]
    .into_iter()
    .chain(waits())
    .chain(budgets())
    .chain(children())
    .chain(replies())
    .chain(sagas())
    .chain(coordination())
    .chain(retention())
    .collect()
}

/// Power cuts lose or tear unsynced writes, torn sectors may hold garbage,
/// except in the redb file, whose tears are sector-atomic: redb rewrites its
/// header sector in place and a garbage tear there makes the file
/// unopenable (docs/SIMULATION.md, "Known finding: redb and garbage
/// sectors").
fn faults() -> FaultConfig {
    FaultConfig {
        sector_atomic_suffixes: vec![".redb".to_owned()],
        ..FaultConfig::crash_only()
    }
}

fn open(disk: &SimDisk, clock: &SimClock) -> Engine {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    Engine::open_with(storage, Arc::new(clock.clone()), Path::new(DIR), options()).unwrap()
}

/// The runs the workers of a new process took back after a crash, and how
/// many times: the open released every live lease of a run not over (the
/// process that held them is gone), and the worker that held one acquired
/// its run again, under a token one larger. The workload's later commands
/// present the workload's tokens shifted by as much.
#[derive(Clone, Debug, Default)]
struct Retaken(BTreeMap<RunId, u64>);

impl Retaken {
    /// `cmd` with every guard it presents (in a batch too) shifted.
    fn rewrite(&self, cmd: &Command) -> Command {
        let mut cmd = cmd.clone();
        self.shift(&mut cmd);
        cmd
    }

    fn shift(&self, cmd: &mut Command) {
        if let Command::Batch(cmds) = cmd {
            cmds.iter_mut().for_each(|c| self.shift(c));
        } else if let Some((_, guard)) = cmd.guard_mut()
            && let Some(times) = self.0.get(&guard.run)
        {
            guard.token = FencingToken(guard.token.0 + times);
        }
    }

    /// After an open at `opened_ms` on `model`'s books (before its
    /// releases): applies them to `model`, then each worker that held a
    /// released lease acquires its run again, on `engine` and in `model`.
    fn take_back(&mut self, engine: &Engine, opened_ms: u64, model: &mut Model) {
        let releases = releases_at_open(&model.books, opened_ms);
        model.books = opened(&model.books, opened_ms).unwrap();
        for release in releases {
            let Command::ReleaseLease(release) = release else {
                unreachable!("an open releases leases")
            };
            let acquire = Command::AcquireLease(actum::books::AcquireLease {
                run: release.run.clone(),
                worker: release.guard.worker,
                ttl_ms: LEASE_MS,
            });
            let answer = engine.execute(&acquire).unwrap();
            assert_eq!(answer, model.execute(&acquire, opened_ms).unwrap());
            *self.0.entry(release.run).or_default() += 1;
        }
    }
}

/// Runs `work[from..]`, its guards shifted by `retaken`; returns the index
/// of the step that failed (power cut) or `None` if all completed.
/// Acknowledged commands go to `model`.
fn drive(
    engine: &Engine,
    clock: &SimClock,
    disk: &SimDisk,
    work: &[Work],
    retaken: &mut Retaken,
    from: usize,
    model: &mut Model,
) -> Option<usize> {
    for (i, step) in work.iter().enumerate().skip(from) {
        let now_ms = clock.advance_ms(STEP_MS);
        if let Work::Cmd(cmd) = step
            && let Command::CreateRun(create) = cmd.as_ref()
            && model.books.run(&create.run).is_none()
        {
            // A new life of a pruned run's name counts its tokens from 1.
            retaken.0.remove(&create.run);
        }
        let step = &match step {
            Work::Cmd(cmd) => Work::Cmd(Box::new(retaken.rewrite(cmd))),
            other => other.clone(),
        };
        let result = match step {
            Work::Cmd(cmd) => engine.execute(cmd).map(Some),
            Work::Checkpoint => engine.checkpoint().map(|_| None),
            Work::Advance(ms) => {
                clock.advance_ms(*ms);
                Ok(None)
            }
        };
        match result {
            Ok(Some(answer)) => {
                let Work::Cmd(cmd) = step else { unreachable!() };
                let expected = model.execute(cmd, now_ms).unwrap();
                assert_eq!(
                    answer, expected,
                    "step {i}: the engine and the model answer alike"
                );
            }
            Ok(None) => {}
            Err(e) => {
                assert!(
                    disk.is_powered_off(),
                    "step {i} failed without a power cut: {e}"
                );
                return Some(i);
            }
        }
    }
    None
}

fn crash_at_every_io(seed: u64) -> u64 {
    let work = workload();
    for (cuts, n) in (1u64..).enumerate() {
        let disk = SimDisk::new(Rng::new(seed).fork("disk"), faults());
        let clock = SimClock::new(START_MS);
        let engine = open(&disk, &clock);
        disk.set_crash_after_ops(n);
        let mut model = Model::default();
        let mut retaken = Retaken::default();
        // A cut may also strike the checkpoint the last command started
        // after it was answered: then nothing is in flight.
        let failed = match drive(&engine, &clock, &disk, &work, &mut retaken, 0, &mut model) {
            Some(failed) => failed,
            None if disk.is_powered_off() => work.len(),
            None => {
                disk.disarm_crash();
                assert_eq!(engine.snapshot().unwrap(), model.books);
                engine.close().unwrap();
                return cuts as u64;
            }
        };
        drop(engine);
        let mut crash_rng = Rng::new(seed ^ n).fork("crash");
        disk.crash(&mut crash_rng);
        let engine = open(&disk, &clock);
        let opened_ms = clock.now_ms();
        let recovered = engine.snapshot().unwrap();
        // The in-flight command landed entirely or not at all; then the
        // open released the leases the dead process held.
        let mut landed = model.clone();
        if let Some(Work::Cmd(cmd)) = work.get(failed) {
            landed.execute(&retaken.rewrite(cmd), opened_ms).unwrap();
        }
        let resume_at = if recovered == opened(&model.books, opened_ms).unwrap() {
            failed
        } else if recovered == opened(&landed.books, opened_ms).unwrap() {
            model = landed;
            failed + 1
        } else {
            panic!(
                "seed {seed}, crash at op {n} during step {failed}: the recovered books match \
                 neither the model before nor after that step, with the leases released at open"
            );
        };
        retaken.take_back(&engine, opened_ms, &mut model);
        // Heal: the recovered engine finishes the workload.
        let rest = drive(
            &engine,
            &clock,
            &disk,
            &work,
            &mut retaken,
            resume_at,
            &mut model,
        );
        assert_eq!(rest, None, "seed {seed}, op {n}: no faults while healing");
        assert_eq!(
            engine.snapshot().unwrap(),
            model.books,
            "seed {seed}, op {n}: healed state"
        );
        engine.close().unwrap();
    }
    unreachable!("the loop ends when the workload completes")
}

/// Cuts the power at every I/O of the workload on the disk of `seed`.
fn every_cut_recovers(seed: u64) {
    let cuts = crash_at_every_io(seed);
    eprintln!("seed {seed:#x}: recovered from {cuts} power cuts");
    assert!(
        cuts > 50,
        "the workload performs I/O worth cutting: {cuts} cuts"
    );
}

// One test per disk seed, so the test threads share them (CI has two cores).

#[test]
fn a_power_cut_at_every_io_of_the_workload_recovers_to_the_model() {
    every_cut_recovers(0x5eed_0001);
}

#[test]
fn a_power_cut_at_every_io_recovers_on_a_second_disk() {
    every_cut_recovers(0x5eed_0002);
}

#[test]
fn a_power_cut_at_every_io_recovers_on_a_third_disk() {
    every_cut_recovers(0x5eed_0003);
}

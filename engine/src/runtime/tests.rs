#![expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::books::{
    BeginEffect, Compensation, EffectKey, EffectKind, EffectStatus, OperatorAction, Outcome,
    StepId, ToolClass, WaitFor, WaitStatus, WorkerId, digest_of,
};
use crate::clock::{Clock, ManualClock};
use crate::engine::EngineOptions;
use crate::storage::FsStorage;

const DAY_MS: u64 = 86_400_000;
const TTL_MS: u64 = 30_000;

struct Bench {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
}

impl Bench {
    fn new() -> Bench {
        Bench {
            dir: tempfile::tempdir().unwrap(),
            clock: Arc::new(ManualClock::new(1_700_000_000_000)),
        }
    }

    fn engine(&self) -> Arc<Engine> {
        let storage = Arc::new(FsStorage::new());
        let engine = Engine::open_with(
            storage,
            self.clock.clone(),
            self.dir.path(),
            EngineOptions::default(),
        )
        .unwrap();
        Arc::new(engine)
    }

    fn runtime(&self, engine: &Arc<Engine>) -> Runtime {
        Runtime::with_options(
            engine.clone(),
            RuntimeOptions {
                worker: "test".into(),
                lease_ttl_ms: TTL_MS,
                idle_ms: 1,
                ..RuntimeOptions::default()
            },
        )
    }
}

fn worker() -> WorkerId {
    WorkerId::new("test-0").unwrap()
}

/// Drives runs until nothing is claimable; returns what each pass did.
fn drain(rt: &Runtime) -> Vec<(RunId, Driven)> {
    let mut passes = Vec::new();
    for _ in 0..100 {
        match rt.work_once(&worker()).unwrap() {
            Some(pass) => passes.push(pass),
            None => return passes,
        }
    }
    panic!("the runtime did not drain: {passes:?}");
}

/// Claims `run` (the only claimable run) as [`worker`] and moves it to
/// running, as a handler's first pass does; returns the lease.
fn claim_running(engine: &Engine, run: &RunId) -> LeaseGrant {
    let lease = engine.claim_next(&worker(), TTL_MS).unwrap().unwrap();
    assert_eq!(lease.run, *run, "the claimed run");
    engine
        .transition(Transition {
            run: run.clone(),
            guard: lease.guard.clone(),
            to: RunState::Running,
            expected_version: None,
            reason: "start".into(),
        })
        .unwrap();
    lease
}

/// A worker of a process that died claimed `run`, moved it to running and
/// wrote the intent of the step `step` through `tool`, as the handler
/// `agent` calls it, and never recorded an outcome; returns its lease.
fn intent_left_by_a_dead_worker(
    engine: &Engine,
    run: &RunId,
    agent: &str,
    step: &str,
    tool: ToolSpec,
    args: &[u8],
) -> LeaseGrant {
    let dead = claim_running(engine, run);
    engine
        .begin_effect(BeginEffect {
            run: run.clone(),
            step: StepId::new(step).unwrap(),
            guard: dead.guard.clone(),
            tool: tool.name,
            tool_class: tool.class,
            args_digest: digest_of(args),
            args: None,
            rationale: format!("step {step} of {agent}"),
            compensation: None,
        })
        .unwrap();
    dead
}

fn state(engine: &Engine, run: &str) -> RunState {
    engine
        .run(&RunId::new(run).unwrap())
        .unwrap()
        .unwrap()
        .state
}

fn confirmed(receipt: &str) -> Outcome {
    Outcome::Confirmed {
        receipt: receipt.as_bytes().to_vec(),
    }
}

fn idempotent() -> ToolClass {
    ToolClass::Idempotent {
        dedup_window_ms: DAY_MS,
    }
}

/// A handler's body whose saga has work: `step` books through `tool`
/// (answering `receipt`, undone by `undo`), then the hotel is sold out,
/// which fails the run for good.
fn booked_then_sold_out(
    ctx: &mut RunCtx<'_>,
    step: &str,
    tool: &Tool,
    args: &[u8],
    receipt: &str,
    undo: Compensation,
) -> std::result::Result<Vec<u8>, Fail> {
    ctx.step_with_undo(step, tool, args, undo, |_| confirmed(receipt))?;
    let hotel = Tool::new("hotel.book", idempotent());
    ctx.step("hotel", &hotel, b"3 nights", |_| Outcome::Failed {
        retryable: false,
        reason: "sold out".into(),
    })?;
    Ok(Vec::new())
}

/// Counts calls of the outside world by name.
#[derive(Clone, Default)]
struct World(Arc<Mutex<BTreeMap<String, u64>>>);

impl World {
    fn hit(&self, what: &str) -> u64 {
        let mut calls = self.0.lock().unwrap();
        let n = calls.entry(what.to_string()).or_default();
        *n += 1;
        *n
    }
    fn count(&self, what: &str) -> u64 {
        self.0.lock().unwrap().get(what).copied().unwrap_or(0)
    }
}

/// A trip: a model picks the flight, a person approves it, the flight is
/// booked (not idempotent), the card charged (idempotent).
fn register_trip(rt: &Runtime, world: &World) {
    let w = world.clone();
    rt.register("trip", "1", move |ctx| {
        let input = ctx.input().to_vec();
        let choice = ctx.decide("pick-flight", &input, || {
            w.hit("model");
            Ok(b"TP 1234".to_vec())
        })?;
        match ctx.approval("book", &choice, "traveller", Deadline::In(DAY_MS))? {
            Approval::Approved { .. } => {}
            other => return Err(Fail::failed(format!("not approved: {other:?}"))),
        }
        let flights = Tool::new("airline.book", ToolClass::NotIdempotent);
        let pnr = ctx.step("book", &flights, &choice, |_| {
            w.hit("book");
            confirmed("PNR-7")
        })?;
        let card = Tool::new("card.charge", idempotent());
        let charge = ctx.step("charge", &card, b"420 EUR", |call| {
            w.hit("charge");
            confirmed(&format!("ch-{}", call.key.encode()))
        })?;
        Ok([pnr, b" ".to_vec(), charge].concat())
    })
    .unwrap();
}

#[test]
fn a_trip_runs_as_a_function_parks_on_its_approval_and_acts_once() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let world = World::default();
    register_trip(&rt, &world);
    let started = rt.start("trip", "trip-1", b"Lisbon").unwrap();
    assert_eq!((started.created, started.agent.as_str()), (true, "trip@1"));
    // Idempotent with the same input; another input is refused.
    assert!(!rt.start("trip", "trip-1", b"Lisbon").unwrap().created);
    assert!(matches!(
        rt.start("trip", "trip-1", b"Porto"),
        Err(Error::RunInputMismatch { .. })
    ));
    let run = started.run;
    assert_eq!(engine.run_input(&run).unwrap().unwrap(), b"Lisbon");

    let passes = drain(&rt);
    assert_eq!(passes, [(run.clone(), Driven::Parked("book".into()))]);
    assert_eq!(state(&engine, "trip-1"), RunState::WaitingHuman);
    assert_eq!(world.count("model"), 1);
    assert_eq!(
        world.count("book"),
        0,
        "nothing is booked before the approval"
    );

    let step = StepId::new("book").unwrap();
    engine
        .decide_approval(
            &run,
            &step,
            digest_of(b"TP 1234"),
            "ana",
            "traveller",
            true,
            "ok",
        )
        .unwrap();
    bench.clock.advance_ms(3_600_000);
    let passes = drain(&rt);
    assert_eq!(passes, [(run.clone(), Driven::Completed)]);
    assert_eq!(
        rt.output(&run).unwrap().unwrap(),
        b"PNR-7 ch-trip-1/charge/1".to_vec()
    );
    // The model was asked once, each act sent once, across the resume.
    assert_eq!(
        (
            world.count("model"),
            world.count("book"),
            world.count("charge")
        ),
        (1, 1, 1)
    );
    assert_eq!(rt.stats().completed, 1);
    assert_eq!(rt.stats().parked, 1);
}

#[test]
fn a_restarted_process_resumes_at_the_call_where_the_run_stopped() {
    let bench = Bench::new();
    let world = World::default();
    let handler = |world: World| {
        move |ctx: &mut RunCtx<'_>| -> std::result::Result<Vec<u8>, Fail> {
            let mail = Tool::new("mail.send", ToolClass::NotIdempotent);
            ctx.step("first", &mail, b"hello", |_| {
                world.hit("first");
                confirmed("m1")
            })?;
            ctx.checkpoint(b"after first")?;
            let go = ctx.signal("go", None)?.unwrap_or_default();
            ctx.step("second", &mail, &go, |_| {
                world.hit("second");
                confirmed("m2")
            })?;
            Ok(b"sent".to_vec())
        }
    };
    let run = {
        let engine = bench.engine();
        let rt = bench.runtime(&engine);
        rt.register("mailer", "1", handler(world.clone())).unwrap();
        let run = rt.start("mailer", "mail-1", b"x").unwrap().run;
        assert_eq!(drain(&rt), [(run.clone(), Driven::Parked("go".into()))]);
        run
        // The process dies here: engine and runtime dropped without close.
    };
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    rt.register("mailer", "1", handler(world.clone())).unwrap();
    engine.signal(&run, "go", b"again", "webhook").unwrap();
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    assert_eq!((world.count("first"), world.count("second")), (1, 1));
    // The checkpoint was saved once (version 1) and the output after it.
    let versions = engine
        .read(|b| Ok(b.checkpoint_latest(&run).map(|m| m.version)))
        .unwrap();
    assert_eq!(versions, Some(2));
    assert_eq!(
        engine.load_version(&run, 1, RUNTIME_SCHEMA).unwrap().parts[0].bytes,
        b"after first"
    );
}

#[test]
fn a_handler_whose_calls_changed_is_stopped_before_it_acts_and_the_run_paused() {
    let bench = Bench::new();
    let engine = bench.engine();
    let world = World::default();
    let rt = bench.runtime(&engine);
    let w = world.clone();
    rt.register("flow", "1", move |ctx| {
        let tool = Tool::new("t", ToolClass::NotIdempotent);
        ctx.step("a", &tool, b"1", |_| {
            w.hit("a");
            confirmed("ra")
        })?;
        ctx.signal("go", None)?;
        Ok(Vec::new())
    })
    .unwrap();
    let run = rt.start("flow", "flow-1", b"").unwrap().run;
    drain(&rt);
    // Same version, other code: step "a" was renamed "a2".
    let rt = bench.runtime(&engine);
    let w = world.clone();
    rt.register("flow", "1", move |ctx| {
        let tool = Tool::new("t", ToolClass::NotIdempotent);
        ctx.step("a2", &tool, b"1", |_| {
            w.hit("a2");
            confirmed("ra")
        })?;
        Ok(Vec::new())
    })
    .unwrap();
    engine.signal(&run, "go", b"", "test").unwrap();
    let passes = drain(&rt);
    let [(_, Driven::Paused(reason))] = passes.as_slice() else {
        panic!("{passes:?}")
    };
    assert!(
        reason.contains("the journal has step a, the handler called step a2"),
        "{reason}"
    );
    assert_eq!(world.count("a2"), 0, "the renamed step never acted");
    assert_eq!(state(&engine, "flow-1"), RunState::Paused);
    assert_eq!(rt.stats().paused, 1);
}

#[test]
fn other_arguments_for_a_recorded_step_or_model_call_are_a_divergence() {
    let bench = Bench::new();
    let engine = bench.engine();
    let args = Arc::new(Mutex::new(b"100 EUR".to_vec()));
    let rt = bench.runtime(&engine);
    let a = args.clone();
    rt.register("pay", "1", move |ctx| {
        let prompt = a.lock().unwrap().clone();
        let out = ctx.decide("think", &prompt, || Ok(b"pay".to_vec()))?;
        let tool = Tool::new("bank", ToolClass::NotIdempotent);
        ctx.step("pay", &tool, &out, |_| confirmed("ok"))?;
        ctx.signal("go", None)?;
        Ok(Vec::new())
    })
    .unwrap();
    let run = rt.start("pay", "pay-1", b"").unwrap().run;
    drain(&rt);
    *args.lock().unwrap() = b"200 EUR".to_vec();
    engine.signal(&run, "go", b"", "test").unwrap();
    let passes = drain(&rt);
    let [(_, Driven::Paused(reason))] = passes.as_slice() else {
        panic!("{passes:?}")
    };
    assert!(reason.contains("model call think with input"), "{reason}");
}

#[test]
fn a_model_call_that_failed_spends_no_position_so_the_handler_may_ask_again() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let asked = Arc::new(AtomicU64::new(0));
    let a = asked.clone();
    rt.register("retrying", "1", move |ctx| {
        let mut tries = 0;
        let answer = loop {
            let asked = a.fetch_add(1, Ordering::Relaxed);
            match ctx.decide("think", b"q", || {
                if asked == 0 {
                    Err(Fail::failed("rate limited"))
                } else {
                    Ok(b"answer".to_vec())
                }
            }) {
                Ok(answer) => break answer,
                Err(Fail::Failed { .. }) if tries < 2 => tries += 1,
                Err(e) => return Err(e),
            }
        };
        ctx.signal("go", None)?;
        Ok(answer)
    })
    .unwrap();
    let run = rt.start("retrying", "retry-1", b"").unwrap().run;
    assert_eq!(drain(&rt), [(run.clone(), Driven::Parked("go".into()))]);
    assert_eq!(
        asked.load(Ordering::Relaxed),
        2,
        "failed once, then answered"
    );
    // The resume replays the one recorded call, at position 0.
    engine.signal(&run, "go", b"", "test").unwrap();
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    assert_eq!(rt.output(&run).unwrap().unwrap(), b"answer");
    let recorded = engine
        .read(|books| Ok(books.decision_at(&run, 0)))
        .unwrap()
        .unwrap();
    assert_eq!(recorded.output, b"answer");
}

#[test]
fn a_loop_of_model_calls_is_counted_and_a_reused_step_name_is_a_divergence() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let asked = Arc::new(AtomicU64::new(0));
    let a = asked.clone();
    rt.register("loop", "1", move |ctx| {
        let mut answer = Vec::new();
        for round in 0..3u8 {
            answer = ctx.decide("think", &[round], || {
                a.fetch_add(1, Ordering::Relaxed);
                Ok(vec![round])
            })?;
        }
        ctx.signal("go", None)?;
        let tool = Tool::new("t", ToolClass::NotIdempotent);
        ctx.step("act", &tool, &answer, |_| confirmed("1"))?;
        ctx.step("act", &tool, &answer, |_| confirmed("2"))?;
        Ok(answer)
    })
    .unwrap();
    let run = rt.start("loop", "loop-1", b"").unwrap().run;
    drain(&rt);
    engine.signal(&run, "go", b"", "test").unwrap();
    let passes = drain(&rt);
    let [(_, Driven::Paused(reason))] = passes.as_slice() else {
        panic!("{passes:?}")
    };
    assert!(reason.contains("step act a second time"), "{reason}");
    // Three model calls, each asked once across the resume.
    assert_eq!(asked.load(Ordering::Relaxed), 3);
}

#[test]
fn a_failed_step_fails_the_run_and_the_saga_undoes_with_the_acts_receipt() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let undone = Arc::new(Mutex::new(Vec::new()));
    let u = undone.clone();
    rt.register_undo("airline.cancel", move |call| {
        u.lock().unwrap().push((
            call.ctx.key.encode(),
            call.args.to_vec(),
            call.receipt.map(<[u8]>::to_vec),
        ));
        confirmed("cancelled")
    });
    rt.register("trip", "1", |ctx| {
        let undo = Compensation {
            tool: "airline.cancel".into(),
            args: b"cancel".to_vec(),
            class: idempotent(),
        };
        let flight = Tool::new("airline.book", idempotent());
        booked_then_sold_out(ctx, "flight", &flight, b"TP", "PNR-9", undo)
    })
    .unwrap();
    let run = rt.start("trip", "trip-2", b"").unwrap().run;
    let passes = drain(&rt);
    assert_eq!(passes, [(run.clone(), Driven::Ended(RunState::Failed))]);
    assert_eq!(
        *undone.lock().unwrap(),
        [(
            "trip-2/flight/undo/1".to_string(),
            b"cancel".to_vec(),
            Some(b"PNR-9".to_vec())
        )]
    );
    let audit = engine.audit(&run).unwrap();
    assert!(
        audit.iter().any(|e| e.why.contains("sold out")),
        "the reason is journaled"
    );
}

#[test]
fn a_handler_that_panics_fails_its_run_and_the_worker_goes_on() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    rt.register("bad", "1", |_| panic!("index out of bounds"))
        .unwrap();
    rt.register("good", "1", |_| Ok(b"fine".to_vec())).unwrap();
    let bad = rt.start("bad", "bad-1", b"").unwrap().run;
    let good = rt.start("good", "good-1", b"").unwrap().run;
    let passes = drain(&rt);
    assert_eq!(
        passes,
        [
            (bad.clone(), Driven::Ended(RunState::Failed)),
            (good.clone(), Driven::Completed)
        ]
    );
    let audit = engine.audit(&bad).unwrap();
    assert!(audit.iter().any(|e| e.why.contains("index out of bounds")));
    assert_eq!(rt.stats().panicked, 1);
}

#[test]
fn a_runtime_claims_only_the_agents_and_versions_it_serves() {
    let bench = Bench::new();
    let engine = bench.engine();
    let old = bench.runtime(&engine);
    old.register("report", "1", |_| Ok(b"v1".to_vec())).unwrap();
    let run = old.start("report", "report-1", b"").unwrap().run;
    // A runtime serving only version 2 leaves the version-1 run alone.
    let new = bench.runtime(&engine);
    new.register("report", "2", |_| Ok(b"v2".to_vec())).unwrap();
    new.register("mail", "1", |_| Ok(Vec::new())).unwrap();
    assert!(drain(&new).is_empty());
    assert_eq!(drain(&old), [(run.clone(), Driven::Completed)]);
    assert_eq!(old.output(&run).unwrap().unwrap(), b"v1");
    // New runs of a kind start at the version registered last.
    assert_eq!(
        new.start("report", "report-2", b"").unwrap().agent,
        "report@2"
    );
    assert!(matches!(
        new.register("report", "2", |_| Ok(Vec::new())),
        Err(Error::InvalidCommand { .. })
    ));
    assert!(matches!(
        new.register("a@b", "1", |_| Ok(Vec::new())),
        Err(Error::InvalidCommand { .. })
    ));
}

#[test]
fn a_retryable_failure_is_tried_again_under_a_new_key() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let keys = Arc::new(Mutex::new(Vec::new()));
    let k = keys.clone();
    rt.register("retry", "1", move |ctx| {
        let tool = Tool::new("flaky", ToolClass::NotIdempotent).attempts(3);
        let receipt = ctx.step("call", &tool, b"", |call| {
            let mut keys = k.lock().unwrap();
            keys.push(call.key.encode());
            if keys.len() < 2 {
                Outcome::Failed {
                    retryable: true,
                    reason: "503".into(),
                }
            } else {
                confirmed("ok")
            }
        })?;
        // Parks once more, so the step (and its backoff) is replayed.
        ctx.signal("go", None)?;
        Ok(receipt)
    })
    .unwrap();
    let run = rt.start("retry", "retry-1", b"").unwrap().run;
    // The first attempt fails: the run waits out its backoff on a durable
    // timer, holding no worker.
    assert_eq!(
        drain(&rt),
        [(run.clone(), Driven::Parked("call:retry-1".into()))]
    );
    let timer = engine.waits(&run).unwrap().open_wait().cloned().unwrap();
    let now = bench.clock.now_ms();
    let waits = timer.deadline_ms.unwrap() - now;
    let expected = crate::runtime::Backoff::default().delay_ms(&run, "call", 1);
    assert_eq!(waits, expected);
    assert!(
        (500..=1_000).contains(&waits),
        "half to all of the first 1 s"
    );
    assert_eq!(drain(&rt), [], "not before the timer");
    bench.clock.advance_ms(waits);
    assert_eq!(drain(&rt), [(run.clone(), Driven::Parked("go".into()))]);
    // Replayed after the signal: the confirmed second attempt and the
    // backoff before it answer from the books, in the journal's order.
    engine.signal(&run, "go", b"", "ops").unwrap();
    assert_eq!(drain(&rt), [(run, Driven::Completed)]);
    assert_eq!(*keys.lock().unwrap(), ["retry-1/call/1", "retry-1/call/2"]);
}

#[test]
fn backoff_doubles_to_its_ceiling_with_jitter_fixed_by_run_step_and_attempt() {
    let run = RunId::new("r").unwrap();
    let backoff = crate::runtime::Backoff {
        first_ms: 1_000,
        max_ms: 5_000,
    };
    for (attempt, ceiling) in [(1, 1_000), (2, 2_000), (3, 4_000), (4, 5_000), (40, 5_000)] {
        let delay = backoff.delay_ms(&run, "s", attempt);
        assert!(
            (ceiling / 2..=ceiling).contains(&delay),
            "attempt {attempt}: {delay}"
        );
        assert_eq!(delay, backoff.delay_ms(&run, "s", attempt), "seeded");
    }
    let other = RunId::new("q").unwrap();
    let spread: std::collections::BTreeSet<u64> = (0..20)
        .map(|i| backoff.delay_ms(&RunId::new(format!("r{i}")).unwrap(), "s", 3))
        .chain([backoff.delay_ms(&other, "s", 3)])
        .collect();
    assert!(spread.len() > 10, "runs spread out: {spread:?}");
    let now = crate::runtime::Backoff {
        first_ms: 0,
        max_ms: 0,
    };
    assert_eq!(now.delay_ms(&run, "s", 3), 0);
}

#[test]
fn a_step_whose_last_attempt_failed_answers_the_same_failure_when_replayed() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let failures = Arc::new(Mutex::new(Vec::new()));
    let f = failures.clone();
    rt.register("spent", "1", move |ctx| {
        let tool = Tool::new("flaky", ToolClass::NotIdempotent)
            .attempts(2)
            .backoff(0, 0);
        let result = ctx.step("call", &tool, b"", |_| {
            c.fetch_add(1, Ordering::Relaxed);
            Outcome::Failed {
                retryable: true,
                reason: "503".into(),
            }
        });
        if let Err(Fail::Failed { reason }) = &result {
            f.lock().unwrap().push(reason.clone());
        }
        // The handler handles it, as one may: pauses for a person (a
        // replay must meet the same answer, not a third attempt).
        match result {
            Err(Fail::Failed { .. }) => ctx
                .signal("operator-says-go", None)
                .map(|_| b"gave up".to_vec()),
            other => other,
        }
    })
    .unwrap();
    let run = rt.start("spent", "spent-1", b"").unwrap().run;
    assert_eq!(
        drain(&rt),
        [(run.clone(), Driven::Parked("operator-says-go".into()))]
    );
    engine.signal(&run, "operator-says-go", b"", "ops").unwrap();
    assert_eq!(drain(&rt), [(run, Driven::Completed)]);
    assert_eq!(calls.load(Ordering::Relaxed), 2, "two attempts, no third");
    let failures = failures.lock().unwrap();
    assert_eq!(failures.len(), 2, "answered twice: first and replayed");
    assert_eq!(failures[0], failures[1], "one answer, both times");
}

#[test]
fn an_act_a_dead_worker_left_without_outcome_pauses_the_run_for_a_person() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let sent = Arc::new(AtomicU64::new(0));
    let s = sent.clone();
    rt.register("wire", "1", move |ctx| {
        let tool = Tool::new("bank.wire", ToolClass::NotIdempotent);
        ctx.step("wire", &tool, b"1000", |_| {
            s.fetch_add(1, Ordering::Relaxed);
            confirmed("w1")
        })
    })
    .unwrap();
    let run = rt.start("wire", "wire-1", b"").unwrap().run;
    // A worker of an earlier process claimed it, wrote the intent, and died.
    let wire = ToolSpec {
        name: "bank.wire".into(),
        class: ToolClass::NotIdempotent,
    };
    intent_left_by_a_dead_worker(&engine, &run, "wire@1", "wire", wire, b"1000");
    bench.clock.advance_ms(TTL_MS + 1);
    let passes = drain(&rt);
    let [(_, Driven::Paused(reason))] = passes.as_slice() else {
        panic!("{passes:?}")
    };
    assert!(reason.contains("wire-1/wire/1"), "{reason}");
    assert_eq!(sent.load(Ordering::Relaxed), 0, "never sent twice");
    let effect = engine.effects(&run).unwrap();
    assert!(matches!(effect[0].status, EffectStatus::Unknown { .. }));
}

#[test]
fn a_relative_deadline_stays_the_one_the_wait_was_opened_with() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    rt.register("approve", "1", |ctx| {
        match ctx.approval("ok", b"x", "boss", Deadline::In(DAY_MS))? {
            Approval::Approved { approver, .. } => Ok(approver.into_bytes()),
            other => Err(Fail::failed(format!("{other:?}"))),
        }
    })
    .unwrap();
    let run = rt.start("approve", "ap-1", b"").unwrap().run;
    let opened_ms = bench.clock.now_ms();
    drain(&rt);
    bench.clock.advance_ms(DAY_MS / 2);
    let step = StepId::new("ok").unwrap();
    engine
        .decide_approval(&run, &step, digest_of(b"x"), "bo", "boss", true, "")
        .unwrap();
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    let waits = engine.waits(&run).unwrap();
    assert_eq!(waits.waits[0].deadline_ms, Some(opened_ms + DAY_MS));
}

#[test]
fn a_lease_is_renewed_by_the_handlers_calls_and_a_lost_one_stops_the_handler() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let clock = bench.clock.clone();
    rt.register("slow", "1", move |ctx| {
        let tool = Tool::new("t", ToolClass::NotIdempotent);
        for n in 0..6 {
            // Each act takes 12 s: 72 s in all, over twice the lease.
            ctx.step(&format!("s{n}"), &tool, b"", |_| {
                clock.advance_ms(12_000);
                confirmed("ok")
            })?;
        }
        Ok(Vec::new())
    })
    .unwrap();
    let run = rt.start("slow", "slow-1", b"").unwrap().run;
    assert_eq!(drain(&rt), [(run, Driven::Completed)]);

    let clock = bench.clock.clone();
    let thief = engine.clone();
    let stolen = RunId::new("stolen-1").unwrap();
    rt.register("stolen", "1", move |ctx| {
        let tool = Tool::new("t", ToolClass::NotIdempotent);
        ctx.step("a", &tool, b"", |_| {
            // The act stalls past the lease; another worker takes the run.
            clock.advance_ms(TTL_MS + 1);
            let other = WorkerId::new("other").unwrap();
            thief.acquire_lease(&stolen, &other, TTL_MS).unwrap();
            confirmed("ok")
        })?;
        ctx.step("b", &tool, b"", |_| {
            unreachable!("b runs under the new holder")
        })?;
        Ok(Vec::new())
    })
    .unwrap();
    let run = rt.start("stolen", "stolen-1", b"").unwrap().run;
    assert_eq!(drain(&rt), [(run, Driven::LeaseLost)]);
}

#[test]
fn threads_serve_runs_until_shutdown() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let world = World::default();
    let w = world.clone();
    rt.register("job", "1", move |ctx| {
        let tool = Tool::new("t", ToolClass::NotIdempotent);
        let input = ctx.input().to_vec();
        ctx.step("do", &tool, &input, |_| {
            w.hit(&String::from_utf8_lossy(&input));
            confirmed("ok")
        })
    })
    .unwrap();
    for n in 0..40 {
        rt.start("job", &format!("job-{n}"), format!("{n}").as_bytes())
            .unwrap();
    }
    let serving = rt.clone();
    let server = std::thread::spawn(move || serving.run(4));
    for _ in 0..10_000 {
        if rt.stats().completed == 40 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    rt.shutdown();
    server.join().unwrap().unwrap();
    assert_eq!(rt.stats().completed, 40);
    for n in 0..40 {
        assert_eq!(world.count(&format!("{n}")), 1, "job {n}");
    }
}

#[test]
fn a_run_with_a_budget_reserves_and_settles_each_call_and_pauses_when_it_is_spent() {
    use crate::books::{BudgetLimits, Usage};
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = Runtime::with_options(
        engine.clone(),
        RuntimeOptions {
            worker: "w".into(),
            lease_ttl_ms: TTL_MS,
            idle_ms: 0,
            decision_hold: Cost {
                tokens_in: 50,
                tokens_out: 50,
                cost_micros: 0,
                tool_calls: 0,
            },
        },
    );
    let sent = Arc::new(AtomicU64::new(0));
    let asked = Arc::new(AtomicU64::new(0));
    let (s, a) = (sent.clone(), asked.clone());
    rt.register("shopper", "1", move |ctx| {
        let tool = Tool::new("search", ToolClass::NotIdempotent).hold(Cost::tool_call(300));
        let plan = ctx.decide_with_usage("plan", b"what to buy", || {
            a.fetch_add(1, Ordering::Relaxed);
            let usage = Usage {
                tokens_in: 30,
                tokens_out: 10,
                cost_micros: 0,
            };
            Ok((b"three searches".to_vec(), usage))
        })?;
        for n in 0..3 {
            ctx.step(&format!("search-{n}"), &tool, &plan, |_| {
                s.fetch_add(1, Ordering::Relaxed);
                confirmed("found")
            })?;
        }
        Ok(b"bought".to_vec())
    })
    .unwrap();
    let run = rt.start("shopper", "shop-1", b"").unwrap().run;
    let limits = BudgetLimits {
        tool_calls: Some(2),
        tokens_in: Some(100),
        ..BudgetLimits::default()
    };
    engine
        .set_budget(&run, limits, "ops", "two searches")
        .unwrap();
    let driven = drain(&rt);
    assert!(
        matches!(&driven[..], [(_, Driven::Paused(why))] if why.contains("budget")),
        "{driven:?}"
    );
    assert_eq!(
        sent.load(Ordering::Relaxed),
        2,
        "the third search was not sent"
    );
    assert_eq!(state(&engine, "shop-1"), RunState::Paused);
    let book = engine.budget(&run).unwrap();
    assert_eq!(book.spent.tool_calls, 2);
    assert_eq!(book.spent.cost_micros, 600, "two calls charged as held");
    assert_eq!(
        book.spent.tokens_in, 30,
        "the model call settled to its usage"
    );
    assert_eq!(book.reserved, Cost::default(), "nothing left held");
    // Raised and resumed: the replay pays nothing again and the third
    // search goes out.
    let raised = BudgetLimits {
        tool_calls: Some(3),
        ..limits
    };
    engine.set_budget(&run, raised, "ops", "one more").unwrap();
    engine
        .operate(&run, OperatorAction::Resume, "ops", "raised")
        .unwrap();
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    assert_eq!(sent.load(Ordering::Relaxed), 3);
    assert_eq!(asked.load(Ordering::Relaxed), 1, "the model was asked once");
    let book = engine.budget(&run).unwrap();
    assert_eq!((book.spent.tool_calls, book.spent.tokens_in), (3, 30));
}

#[test]
fn a_run_keeps_its_version_and_only_a_compatible_handler_resumes_it() {
    let bench = Bench::new();
    let engine = bench.engine();
    let tool = || Tool::new("t", ToolClass::NotIdempotent);
    let v1 = bench.runtime(&engine);
    v1.register("trip", "1", move |ctx| {
        ctx.step("a", &tool(), b"", |_| confirmed("a"))?;
        ctx.signal("go", None)?;
        ctx.step("b", &tool(), b"", |_| confirmed("b"))?;
        Ok(b"v1".to_vec())
    })
    .unwrap();
    let run = v1.start("trip", "trip-1", b"").unwrap().run;
    assert_eq!(drain(&v1), [(run.clone(), Driven::Parked("go".into()))]);
    drop(v1);
    engine.signal(&run, "go", b"", "ops").unwrap();
    // A deploy of version 2 alone does not touch a run of version 1.
    let v2 = bench.runtime(&engine);
    v2.register("trip", "2", |_| Ok(b"v2".to_vec())).unwrap();
    assert_eq!(drain(&v2), []);
    drop(v2);
    // Version 3 says it replays version 1's journal: it resumes the run
    // where it stands, and may add calls after.
    let v3 = bench.runtime(&engine);
    v3.register_compatible("trip", "3", &["1"], move |ctx| {
        ctx.step("a", &tool(), b"", |_| unreachable!("a was confirmed"))?;
        ctx.signal("go", None)?;
        ctx.step("b", &tool(), b"", |_| confirmed("b"))?;
        ctx.step("c", &tool(), b"", |_| confirmed("c"))?;
        Ok(b"v3".to_vec())
    })
    .unwrap();
    assert_eq!(drain(&v3), [(run.clone(), Driven::Completed)]);
    assert_eq!(v3.output(&run).unwrap().as_deref(), Some(&b"v3"[..]));
    let record = engine.run(&run).unwrap().unwrap();
    assert_eq!(record.agent_version, "trip@1", "the run keeps its version");
    let next = v3.start("trip", "trip-2", b"").unwrap();
    assert_eq!(next.agent, "trip@3", "new runs start at the latest");
    assert!(matches!(
        v3.register_compatible("trip", "4", &["1"], |_| Ok(Vec::new())),
        Err(Error::InvalidCommand { .. })
    ));
}

#[test]
fn a_child_started_before_a_redeploy_keeps_its_version_when_its_parent_replays() {
    let bench = Bench::new();
    let engine = bench.engine();
    let register = |rt: &Runtime, version: &str, older: &[&str]| {
        rt.register_compatible("parent", version, older, |ctx| {
            let kid = ctx.child("kid", "sub", b"kid input")?;
            Ok([b"got ".as_slice(), &kid].concat())
        })
        .unwrap();
        rt.register_compatible("sub", version, older, |ctx| {
            ctx.signal("go", None)?;
            Ok(b"kid done".to_vec())
        })
        .unwrap();
    };
    let v1 = bench.runtime(&engine);
    register(&v1, "1", &[]);
    let run = v1.start("parent", "p-1", b"").unwrap().run;
    let parked: Vec<Driven> = drain(&v1).into_iter().map(|(_, d)| d).collect();
    assert_eq!(
        parked,
        [Driven::Parked("kid".into()), Driven::Parked("go".into())]
    );
    drop(v1);
    let v2 = bench.runtime(&engine);
    register(&v2, "2", &["1"]);
    let kid = RunId::new("p-1:kid").unwrap();
    engine.signal(&kid, "go", b"", "ops").unwrap();
    let done: Vec<Driven> = drain(&v2).into_iter().map(|(_, d)| d).collect();
    assert_eq!(done, [Driven::Completed, Driven::Completed]);
    assert_eq!(
        v2.output(&run).unwrap().as_deref(),
        Some(&b"got kid done"[..])
    );
    assert_eq!(engine.run(&kid).unwrap().unwrap().agent_version, "sub@1");
}

/// A parent fanning out to three quotes (`acme`, `broke`, which fails at
/// once, and `globex`), joined by its input; its output lists each end as
/// `index:state:output`.
fn register_quotes(rt: &Runtime) {
    rt.register("quote", "1", |ctx| {
        let vendor = ctx.input().to_vec();
        if vendor == b"broke" {
            return Err(Fail::failed("no quote today"));
        }
        let price = ctx.signal("price", None)?.unwrap_or_default();
        Ok([vendor.as_slice(), b"=", &price].concat())
    })
    .unwrap();
    rt.register("compare", "1", |ctx| {
        let join = if ctx.input() == b"first" {
            Join::First
        } else {
            Join::All
        };
        let calls: [(&str, &[u8]); 3] = [
            ("quote", b"acme"),
            ("quote", b"broke"),
            ("quote", b"globex"),
        ];
        let ends = ctx.children("quotes", &calls, join)?;
        let listed: Vec<String> = ends
            .iter()
            .map(|end| {
                let output = end.output.as_deref().unwrap_or(b"-");
                format!(
                    "{}:{}:{}",
                    end.index,
                    end.state,
                    String::from_utf8_lossy(output)
                )
            })
            .collect();
        Ok(listed.join(",").into_bytes())
    })
    .unwrap();
}

#[test]
fn a_fan_out_waits_for_all_its_children_and_reports_each_end_in_order() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    register_quotes(&rt);
    let run = rt.start("compare", "c-all", b"all").unwrap().run;
    drain(&rt);
    assert_eq!(state(&engine, "c-all"), RunState::WaitingTool);
    assert_eq!(state(&engine, "c-all:quotes.2"), RunState::Failed);
    // One price in: the parent still waits for the other.
    let child = |i: u32| RunId::new(format!("c-all:quotes.{i}")).unwrap();
    engine.signal(&child(3), "price", b"12", "vendor").unwrap();
    drain(&rt);
    assert_eq!(state(&engine, "c-all"), RunState::WaitingTool);
    engine.signal(&child(1), "price", b"10", "vendor").unwrap();
    drain(&rt);
    assert_eq!(state(&engine, "c-all"), RunState::Completed);
    assert_eq!(
        rt.output(&run).unwrap().as_deref(),
        Some(&b"0:completed:acme=10,1:failed:-,2:completed:globex=12"[..])
    );
    // A restarted runtime replays the parent to the same answer, starting
    // nothing new.
    let again = bench.runtime(&engine);
    register_quotes(&again);
    assert!(drain(&again).is_empty());
    assert_eq!(engine.runs(None, None, 100).unwrap().len(), 4);
}

#[test]
fn a_fan_out_for_the_first_goes_on_with_it_and_cancels_the_others() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    register_quotes(&rt);
    let run = rt.start("compare", "c-first", b"first").unwrap().run;
    drain(&rt);
    // The failed quote ended first.
    assert_eq!(state(&engine, "c-first"), RunState::Completed);
    assert_eq!(
        rt.output(&run).unwrap().as_deref(),
        Some(&b"1:failed:-"[..])
    );
    for other in ["c-first:quotes.1", "c-first:quotes.3"] {
        assert_eq!(state(&engine, other), RunState::Cancelled, "{other}");
    }
}

#[test]
fn cancelling_a_parent_that_waits_on_a_fan_out_cancels_every_child() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    register_quotes(&rt);
    let run = rt.start("compare", "c-x", b"all").unwrap().run;
    drain(&rt);
    engine
        .operate(&run, OperatorAction::Cancel, "ops", "vendor outage")
        .unwrap();
    assert_eq!(state(&engine, "c-x"), RunState::Cancelled);
    for child in ["c-x:quotes.1", "c-x:quotes.3"] {
        assert_eq!(state(&engine, child), RunState::Cancelled, "{child}");
    }
    assert_eq!(state(&engine, "c-x:quotes.2"), RunState::Failed);
}

/// How long a request to the courier below can still arrive.
const LIFETIME_MS: u64 = 120_000;

/// A courier booking: queryable, but the courier ignores fencing tokens
/// (with `lifetime` as its request lifetime). Counts acts and queries; the
/// act answers `act`, a query finds the booking.
fn register_courier(rt: &Runtime, world: &World, lifetime: Option<u64>, act: Outcome) {
    let w = world.clone();
    rt.register("courier", "1", move |ctx| {
        let q = w.clone();
        let tool = Tool::new("courier.book", ToolClass::Queryable)
            .ignores_tokens(lifetime)
            .with_query(move |_| {
                q.hit("query");
                confirmed("booked")
            });
        let a = w.clone();
        let act = act.clone();
        ctx.step("deliver", &tool, b"parcel", |call| {
            a.hit("act");
            a.0.lock()
                .unwrap()
                .insert("deadline".into(), call.deadline_ms);
            act.clone()
        })
    })
    .unwrap();
}

/// A worker of a process that died claimed `run`, moved it to running and
/// wrote the intent of its step `deliver`; returns its lease's expiry.
fn courier_intent_left_by_a_dead_worker(engine: &Engine, run: &RunId) -> u64 {
    let courier = ToolSpec {
        name: "courier.book".into(),
        class: ToolClass::Queryable,
    };
    intent_left_by_a_dead_worker(engine, run, "courier@1", "deliver", courier, b"parcel").expires_ms
}

fn lifetime_wait(engine: &Engine, run: &RunId) -> Option<u64> {
    let step = StepId::new("deliver:lifetime-1").unwrap();
    let waits = engine.waits(run).unwrap();
    let found: Vec<_> = waits.waits.iter().filter(|w| w.step == step).collect();
    assert!(found.len() <= 1, "one wait: {found:?}");
    found.first().map(|w| w.deadline_ms.unwrap())
}

#[test]
fn a_successor_waits_out_the_request_lifetime_before_it_queries_a_tool_that_ignores_tokens() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let world = World::default();
    register_courier(&rt, &world, Some(LIFETIME_MS), confirmed("unused"));
    let run = rt.start("courier", "parcel-1", b"").unwrap().run;
    let expires_ms = courier_intent_left_by_a_dead_worker(&engine, &run);
    // The dead worker may have stalled and sent at its deadline, at most
    // its lease's expiry; its request may land a lifetime later.
    bench.clock.advance_ms(TTL_MS + 1);
    assert_eq!(
        drain(&rt),
        [(run.clone(), Driven::Parked("deliver:lifetime-1".into()))]
    );
    assert_eq!(lifetime_wait(&engine, &run), Some(expires_ms + LIFETIME_MS));
    assert_eq!(state(&engine, "parcel-1"), RunState::WaitingTool);
    bench.clock.set_ms(expires_ms + LIFETIME_MS - 1);
    assert_eq!(drain(&rt), [], "nothing to do before the request expired");
    assert_eq!(
        world.count("query"),
        0,
        "not asked while a request may land"
    );
    bench.clock.set_ms(expires_ms + LIFETIME_MS);
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    assert_eq!(world.count("query"), 1);
    assert_eq!(
        world.count("act"),
        0,
        "a queryable tool's act is never resent"
    );
    assert_eq!(rt.output(&run).unwrap().unwrap(), b"booked");
}

#[test]
fn an_act_that_timed_out_waits_its_own_deadline_plus_the_lifetime_before_the_query() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let world = World::default();
    let timed_out = Outcome::Unknown {
        reason: "no reply before the timeout".into(),
    };
    register_courier(&rt, &world, Some(LIFETIME_MS), timed_out);
    let run = rt.start("courier", "parcel-2", b"").unwrap().run;
    assert_eq!(
        drain(&rt),
        [(run.clone(), Driven::Parked("deliver:lifetime-1".into()))]
    );
    assert_eq!(world.count("act"), 1);
    assert_eq!(world.count("query"), 0);
    let deadline = world.count("deadline");
    assert!(
        deadline > bench.clock.now_ms(),
        "the act's deadline: {deadline}"
    );
    assert_eq!(lifetime_wait(&engine, &run), Some(deadline + LIFETIME_MS));
    bench.clock.set_ms(deadline + LIFETIME_MS);
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    assert_eq!((world.count("act"), world.count("query")), (1, 1));
}

#[test]
fn a_tool_that_ignores_tokens_with_no_request_lifetime_is_never_queried_and_pauses_the_run() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let world = World::default();
    register_courier(&rt, &world, None, confirmed("unused"));
    let run = rt.start("courier", "parcel-3", b"").unwrap().run;
    courier_intent_left_by_a_dead_worker(&engine, &run);
    bench.clock.advance_ms(DAY_MS);
    let passes = drain(&rt);
    let [(_, Driven::Paused(reason))] = passes.as_slice() else {
        panic!("{passes:?}")
    };
    assert!(reason.contains("parcel-3/deliver/1"), "{reason}");
    assert!(reason.contains("no request lifetime"), "{reason}");
    assert_eq!((world.count("act"), world.count("query")), (0, 0));
    assert_eq!(lifetime_wait(&engine, &run), None, "no wait makes it safe");
    assert_eq!(state(&engine, "parcel-3"), RunState::Paused);
}

#[test]
fn a_crash_mid_wait_resumes_with_the_deadline_the_wait_was_opened_with() {
    let bench = Bench::new();
    let world = World::default();
    let timed_out = Outcome::Unknown {
        reason: "no reply before the timeout".into(),
    };
    let (run, until) = {
        let engine = bench.engine();
        let rt = bench.runtime(&engine);
        register_courier(&rt, &world, Some(LIFETIME_MS), timed_out.clone());
        let run = rt.start("courier", "parcel-4", b"").unwrap().run;
        drain(&rt);
        // Bounded by the act's own deadline, which only this handler knew.
        let until = world.count("deadline") + LIFETIME_MS;
        assert_eq!(lifetime_wait(&engine, &run), Some(until));
        (run, until)
    }; // the process dies, the run parked on its timer
    bench.clock.advance_ms(LIFETIME_MS / 2);
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    register_courier(&rt, &world, Some(LIFETIME_MS), timed_out);
    assert_eq!(drain(&rt), [], "still waiting after the restart");
    // The resumed handler asks for the same wait at the same instant and
    // goes on; one bounded afresh (by the sender's lease, from the
    // journal) would be refused as a divergence and the run paused.
    bench.clock.set_ms(until);
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    assert_eq!(lifetime_wait(&engine, &run), Some(until));
    assert_eq!((world.count("act"), world.count("query")), (1, 1));
}

/// The requests an asynchronous tool was sent: each key, and whether it
/// was a resend.
#[derive(Clone, Default)]
struct Outbox(Arc<Mutex<Vec<(EffectKey, bool)>>>);

impl Outbox {
    fn sent(&self) -> Vec<(EffectKey, bool)> {
        self.0.lock().unwrap().clone()
    }
}

fn kyc(class: ToolClass) -> Tool {
    Tool::new("kyc.screen", class).attempts(3).backoff(0, 0)
}

/// An agent `screen` whose step `screen` asks an asynchronous screening
/// service (of `class`), which answers each request with what `answer`
/// says for its attempt, within `within` of the wait.
fn register_screen(
    rt: &Runtime,
    class: ToolClass,
    within: Option<Deadline>,
    outbox: &Outbox,
    answer: impl Fn(&EffectKey) -> Outcome + Send + Sync + 'static,
) {
    let out = outbox.clone();
    let answer = Arc::new(answer);
    rt.register("screen", "1", move |ctx| {
        let out = out.clone();
        let answer = Arc::clone(&answer);
        let verdict = ctx.step_async("screen", &kyc(class), b"acme", within, move |call| {
            out.0.lock().unwrap().push((call.key.clone(), call.resend));
            answer(call.key)
        })?;
        Ok(verdict)
    })
    .unwrap();
}

fn accepted() -> Outcome {
    Outcome::Unknown {
        reason: "accepted".into(),
    }
}

fn reply_key(run: &RunId, attempt: u32) -> EffectKey {
    EffectKey::new(run.clone(), StepId::new("screen").unwrap(), attempt).unwrap()
}

#[test]
fn an_async_step_parks_until_its_reply_and_a_resumed_handler_never_sends_again() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let outbox = Outbox::default();
    register_screen(&rt, idempotent(), None, &outbox, |_| accepted());
    let run = rt.start("screen", "screen-1", b"").unwrap().run;
    assert_eq!(drain(&rt), [(run.clone(), Driven::Parked("screen".into()))]);
    assert_eq!(state(&engine, "screen-1"), RunState::WaitingTool);
    let key = reply_key(&run, 1);
    assert_eq!(outbox.sent(), [(key.clone(), false)]);
    // The webhook, twice: the second changes nothing.
    let clear = confirmed("clear");
    let woke = engine.deliver_reply(&key, clear.clone(), "kyc").unwrap();
    assert_eq!(woke, Some(StepId::new("screen").unwrap()));
    assert_eq!(engine.deliver_reply(&key, clear, "kyc").unwrap(), None);
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    assert_eq!(rt.output(&run).unwrap().unwrap(), b"clear");
    assert_eq!(outbox.sent().len(), 1, "the resumed handler sent nothing");
    // One wait, of the reply, journaled by kind.
    let waits = engine.waits(&run).unwrap().waits;
    assert_eq!(waits.len(), 1);
    assert_eq!(waits[0].wait_for, WaitFor::Reply { key });
}

#[test]
fn a_reply_delivered_before_the_wait_opens_ends_it_at_once() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let outbox = Outbox::default();
    let hook = Arc::new(Mutex::new(None::<Arc<Engine>>));
    let h = Arc::clone(&hook);
    register_screen(&rt, idempotent(), None, &outbox, move |key| {
        // The service answers so fast its webhook beats the wait.
        let engine = h.lock().unwrap().clone().unwrap();
        engine.deliver_reply(key, confirmed("fast"), "kyc").unwrap();
        accepted()
    });
    *hook.lock().unwrap() = Some(Arc::clone(&engine));
    let run = rt.start("screen", "screen-2", b"").unwrap().run;
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    assert_eq!(rt.output(&run).unwrap().unwrap(), b"fast");
    let waits = engine.waits(&run).unwrap().waits;
    assert!(matches!(waits[0].status, WaitStatus::Replied { .. }));
    assert_eq!(outbox.sent().len(), 1);
}

/// A worker of a process that died wrote the intent of `run`'s step
/// `screen` (of `class`), perhaps sent it, and never parked.
fn screen_intent_left_by_a_dead_worker(engine: &Engine, run: &RunId, class: ToolClass) {
    let screen = ToolSpec {
        name: "kyc.screen".into(),
        class,
    };
    intent_left_by_a_dead_worker(engine, run, "screen@1", "screen", screen, b"acme");
}

#[test]
fn a_crash_between_send_and_wait_resends_only_what_the_tool_class_allows() {
    // Idempotent: the successor resends the same key, then waits.
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let outbox = Outbox::default();
    register_screen(&rt, idempotent(), None, &outbox, |_| accepted());
    let run = rt.start("screen", "screen-3", b"").unwrap().run;
    screen_intent_left_by_a_dead_worker(&engine, &run, idempotent());
    bench.clock.advance_ms(TTL_MS + 1);
    assert_eq!(drain(&rt), [(run.clone(), Driven::Parked("screen".into()))]);
    assert_eq!(outbox.sent(), [(reply_key(&run, 1), true)]);

    // Not idempotent: never sent again; the reply the request brings, if
    // it left, settles the step.
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let outbox = Outbox::default();
    let within = Some(Deadline::In(3_600_000));
    register_screen(&rt, ToolClass::NotIdempotent, within, &outbox, |_| {
        accepted()
    });
    let run = rt.start("screen", "screen-4", b"").unwrap().run;
    screen_intent_left_by_a_dead_worker(&engine, &run, ToolClass::NotIdempotent);
    bench.clock.advance_ms(TTL_MS + 1);
    assert_eq!(drain(&rt), [(run.clone(), Driven::Parked("screen".into()))]);
    assert!(outbox.sent().is_empty(), "not sent again");
    let key = reply_key(&run, 1);
    engine
        .deliver_reply(&key, confirmed("late but here"), "kyc")
        .unwrap();
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    assert_eq!(rt.output(&run).unwrap().unwrap(), b"late but here");
    assert!(outbox.sent().is_empty());
}

#[test]
fn no_reply_by_the_deadline_pauses_the_run_and_a_late_reply_answers_the_resumed_handler() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let outbox = Outbox::default();
    let within = Some(Deadline::In(3_600_000));
    register_screen(&rt, idempotent(), within, &outbox, |_| accepted());
    let run = rt.start("screen", "screen-5", b"").unwrap().run;
    assert_eq!(drain(&rt), [(run.clone(), Driven::Parked("screen".into()))]);
    bench.clock.advance_ms(3_600_000);
    let passes = drain(&rt);
    let [(_, Driven::Paused(reason))] = passes.as_slice() else {
        panic!("{passes:?}")
    };
    assert!(reason.contains("no reply from kyc.screen"), "{reason}");
    // The reply comes late; the run stays paused until a person resumes it.
    let key = reply_key(&run, 1);
    assert_eq!(
        engine
            .deliver_reply(&key, confirmed("late"), "kyc")
            .unwrap(),
        None
    );
    assert_eq!(state(&engine, "screen-5"), RunState::Paused);
    engine
        .operate(&run, OperatorAction::Resume, "ops", "the reply came")
        .unwrap();
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    assert_eq!(rt.output(&run).unwrap().unwrap(), b"late");
    assert_eq!(outbox.sent().len(), 1, "never resent");
}

#[test]
fn a_failed_reply_fails_the_step_and_a_refused_send_is_retried_under_a_new_key() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let outbox = Outbox::default();
    // Attempt 1 is refused at once (a 503); attempt 2 is taken.
    register_screen(&rt, idempotent(), None, &outbox, |key| {
        if key.attempt() == 1 {
            Outcome::Failed {
                retryable: true,
                reason: "503".into(),
            }
        } else {
            accepted()
        }
    });
    let run = rt.start("screen", "screen-6", b"").unwrap().run;
    assert_eq!(drain(&rt), [(run.clone(), Driven::Parked("screen".into()))]);
    let second = reply_key(&run, 2);
    assert_eq!(
        outbox.sent(),
        [(reply_key(&run, 1), false), (second.clone(), false)]
    );
    let failed = Outcome::Failed {
        retryable: true,
        reason: "sanctions list hit".into(),
    };
    engine.deliver_reply(&second, failed, "kyc").unwrap();
    assert_eq!(drain(&rt), [(run.clone(), Driven::Ended(RunState::Failed))]);
    assert_eq!(outbox.sent().len(), 2, "a failed reply is not retried");
    let audit = engine.read(|b| Ok(b.audit(&run, 1))).unwrap();
    let failed_why = audit.iter().rev().find_map(|e| match &e.what {
        crate::books::AuditWhat::Transitioned {
            to: RunState::Failed,
            ..
        } => Some(e.why.clone()),
        _ => None,
    });
    assert!(
        failed_why.is_some_and(|r| r.contains("its reply says sanctions list hit")),
        "{audit:?}"
    );
}

#[test]
fn an_approval_and_the_reply_of_the_act_it_approved_wait_at_one_step() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let outbox = Outbox::default();
    let out = outbox.clone();
    rt.register("payout", "1", move |ctx| {
        match ctx.approval("pay", b"eur 900", "finance", Deadline::In(DAY_MS))? {
            Approval::Approved { .. } => {}
            other => return Err(Fail::failed(format!("{other:?}"))),
        }
        let psp = Tool::new("psp.pay", idempotent());
        let out = out.clone();
        ctx.step_async("pay", &psp, b"eur 900", None, move |call| {
            out.0.lock().unwrap().push((call.key.clone(), call.resend));
            accepted()
        })
    })
    .unwrap();
    let run = rt.start("payout", "payout-1", b"").unwrap().run;
    assert_eq!(drain(&rt), [(run.clone(), Driven::Parked("pay".into()))]);
    let step = StepId::new("pay").unwrap();
    engine
        .decide_approval(
            &run,
            &step,
            digest_of(b"eur 900"),
            "ann",
            "finance",
            true,
            "",
        )
        .unwrap();
    assert_eq!(drain(&rt), [(run.clone(), Driven::Parked("pay".into()))]);
    let key = EffectKey::new(run.clone(), step, 1).unwrap();
    engine
        .deliver_reply(&key, confirmed("paid"), "psp")
        .unwrap();
    // The resumed handler replays the approval, then the reply: no
    // divergence, nothing sent again.
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    assert_eq!(rt.output(&run).unwrap().unwrap(), b"paid");
    assert_eq!(outbox.sent(), [(key, false)]);
    assert_eq!(engine.waits(&run).unwrap().waits.len(), 2);
}

#[test]
fn an_async_step_holds_its_budget_until_the_reply_and_charges_it_once() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let outbox = Outbox::default();
    register_screen(&rt, idempotent(), None, &outbox, |_| accepted());
    let run = rt.start("screen", "screen-7", b"").unwrap().run;
    let limits = crate::books::BudgetLimits {
        tool_calls: Some(1),
        ..crate::books::BudgetLimits::default()
    };
    engine
        .set_budget(&run, limits, "ops", "one screening")
        .unwrap();
    assert_eq!(drain(&rt), [(run.clone(), Driven::Parked("screen".into()))]);
    assert_eq!(engine.budget(&run).unwrap().reserved.tool_calls, 1);
    engine
        .deliver_reply(&reply_key(&run, 1), confirmed("clear"), "kyc")
        .unwrap();
    assert_eq!(drain(&rt), [(run.clone(), Driven::Completed)]);
    let book = engine.budget(&run).unwrap();
    assert_eq!((book.spent.tool_calls, book.reserved.tool_calls), (1, 0));
}

/// The courier's booking as the saga knows it: registered with its query
/// (found: booked), fencing as `lifetime` says (`None`: it checks tokens).
fn courier_tool(world: &World, lifetime: Option<Option<u64>>) -> Tool {
    let q = world.clone();
    let tool = Tool::new("courier.book", ToolClass::Queryable).with_query(move |_| {
        q.hit("query");
        confirmed("booked")
    });
    match lifetime {
        Some(lifetime) => tool.ignores_tokens(lifetime),
        None => tool,
    }
}

/// A dead worker's intent on the courier, compensable by `courier.cancel`,
/// and an operator's cancel of the run: it is compensating, its act open.
fn cancelled_mid_courier_step(engine: &Engine, run: &RunId) -> u64 {
    let dead = claim_running(engine, run);
    engine
        .begin_step(&StepRequest {
            guard: &dead.guard,
            run,
            step: &StepId::new("deliver").unwrap(),
            tool: ToolSpec {
                name: "courier.book".into(),
                class: ToolClass::Queryable,
            },
            args: b"parcel",
            rationale: "step deliver of courier@1",
            compensation: Some(Compensation {
                tool: "courier.cancel".into(),
                args: b"cancel".to_vec(),
                class: ToolClass::Queryable,
            }),
        })
        .unwrap();
    let cancelled = engine
        .operate(run, OperatorAction::Cancel, "ops", "customer left")
        .unwrap();
    assert_eq!(cancelled.state, RunState::Compensating);
    dead.expires_ms
}

fn register_courier_cancel(rt: &Runtime, world: &World) {
    let w = world.clone();
    rt.register_undo("courier.cancel", move |call| {
        w.hit(if call.query { "undo-query" } else { "undo" });
        confirmed("cancelled")
    });
}

#[test]
fn a_compensating_runs_open_act_is_asked_with_the_registered_query_then_undone() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let world = World::default();
    register_courier(&rt, &world, None, confirmed("unused"));
    register_courier_cancel(&rt, &world);
    let run = rt.start("courier", "parcel-7", b"").unwrap().run;
    cancelled_mid_courier_step(&engine, &run);
    bench.clock.advance_ms(TTL_MS + 1);
    // Not registered: the saga cannot ask, and undoes nothing before it.
    assert_eq!(drain(&rt), [(run.clone(), Driven::Compensating)]);
    assert_eq!((world.count("query"), world.count("undo")), (0, 0));
    rt.register_tool(courier_tool(&world, None));
    bench.clock.advance_ms(TTL_MS + 1);
    assert_eq!(
        drain(&rt),
        [(run.clone(), Driven::Ended(RunState::Cancelled))]
    );
    assert_eq!(
        (
            world.count("query"),
            world.count("undo"),
            world.count("act")
        ),
        (1, 1, 0),
        "asked once, undone once, never acted again"
    );
}

#[test]
fn a_compensating_runs_open_act_on_a_tool_that_ignores_tokens_is_asked_after_its_lifetime() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let world = World::default();
    register_courier(&rt, &world, Some(LIFETIME_MS), confirmed("unused"));
    register_courier_cancel(&rt, &world);
    rt.register_tool(courier_tool(&world, Some(Some(LIFETIME_MS))));
    let run = rt.start("courier", "parcel-8", b"").unwrap().run;
    let expires_ms = cancelled_mid_courier_step(&engine, &run);
    bench.clock.advance_ms(TTL_MS + 1);
    assert_eq!(drain(&rt), [(run.clone(), Driven::Compensating)]);
    bench.clock.set_ms(expires_ms + LIFETIME_MS - 1);
    assert_eq!(drain(&rt), [(run.clone(), Driven::Compensating)]);
    assert_eq!(
        world.count("query"),
        0,
        "not asked while a request may land"
    );
    bench.clock.set_ms(expires_ms + LIFETIME_MS + TTL_MS);
    assert_eq!(
        drain(&rt),
        [(run.clone(), Driven::Ended(RunState::Cancelled))]
    );
    assert_eq!((world.count("query"), world.count("undo")), (1, 1));
}

/// A booking whose undo ignores fencing tokens (with `lifetime`) and
/// whose first undo request times out; the hotel after it fails the run.
fn register_booking_with_slow_undo(rt: &Runtime, world: &World, lifetime: Option<u64>) {
    let w = world.clone();
    rt.register_undo("courier.cancel", move |call| {
        if call.query {
            w.hit("undo-query");
            return confirmed("cancelled");
        }
        match w.hit("undo") {
            1 => ToolOutcome::Unknown {
                reason: "timed out".into(),
            },
            _ => confirmed("cancelled"),
        }
    });
    let undo_tool = Tool::new("courier.cancel", ToolClass::Queryable)
        .ignores_tokens(lifetime)
        .with_query(|_| unreachable!("the saga asks through the undo handler"));
    rt.register_tool(undo_tool);
    rt.register("booking", "1", |ctx| {
        let undo = Compensation {
            tool: "courier.cancel".into(),
            args: b"cancel".to_vec(),
            class: ToolClass::Queryable,
        };
        let courier = Tool::new("courier.book", idempotent());
        booked_then_sold_out(ctx, "deliver", &courier, b"p", "booked", undo)
    })
    .unwrap();
}

#[test]
fn an_undo_on_a_tool_that_ignores_tokens_is_asked_about_only_after_its_request_lifetime() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let world = World::default();
    register_booking_with_slow_undo(&rt, &world, Some(LIFETIME_MS));
    let run = rt.start("booking", "b-1", b"").unwrap().run;
    let start = bench.clock.now_ms();
    // The undo's request times out: it may still land a lifetime after
    // its sender's lease ran out.
    assert_eq!(drain(&rt), [(run.clone(), Driven::Compensating)]);
    let lease_end = start + TTL_MS;
    bench.clock.set_ms(lease_end + 1);
    assert_eq!(drain(&rt), [(run.clone(), Driven::Compensating)]);
    assert_eq!(world.count("undo-query"), 0, "not asked while it may land");
    let saga = engine.saga(&run).unwrap();
    assert!(!saga.steps.is_empty());
    bench.clock.set_ms(lease_end + LIFETIME_MS + TTL_MS);
    assert_eq!(drain(&rt), [(run.clone(), Driven::Ended(RunState::Failed))]);
    assert_eq!(
        (world.count("undo"), world.count("undo-query")),
        (1, 1),
        "asked once it could no longer land, never sent again"
    );
}

#[test]
fn an_undo_on_a_tool_that_ignores_tokens_with_no_lifetime_is_never_asked_about() {
    let bench = Bench::new();
    let engine = bench.engine();
    let rt = bench.runtime(&engine);
    let world = World::default();
    register_booking_with_slow_undo(&rt, &world, None);
    let run = rt.start("booking", "b-2", b"").unwrap().run;
    assert_eq!(drain(&rt), [(run.clone(), Driven::Compensating)]);
    for _ in 0..3 {
        bench.clock.advance_ms(DAY_MS);
        assert_eq!(drain(&rt), [(run.clone(), Driven::Compensating)]);
    }
    assert_eq!((world.count("undo"), world.count("undo-query")), (1, 0));
    let unknown = engine
        .effect(
            &EffectKey::of_kind(
                run.clone(),
                StepId::new("deliver").unwrap(),
                EffectKind::Undo,
                1,
            )
            .unwrap(),
        )
        .unwrap()
        .unwrap();
    assert!(
        matches!(&unknown.status, EffectStatus::Unknown { .. }),
        "left unknown for a person: {unknown:?}"
    );
}

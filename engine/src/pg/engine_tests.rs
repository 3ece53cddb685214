//! The `Engine` over PostgreSQL, as processes on many hosts use it: two
//! engines on one database (two processes), time from the server's clock,
//! the runtime, the schema's upgrade, and the calls that belong to a
//! directory. (The engine's scenario tests also run on PostgreSQL:
//! test.sh runs them with `ACTUM_TEST_BACKEND=postgres`.)

#![expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]

use std::sync::{Arc, Mutex};

use super::tests::{fresh_database, server_url};
use crate::books::{
    CreateRun, Outcome, RunId, RunState, StepId, ToolClass, Transition, WorkerId, digest_of,
};
use crate::engine::{Engine, EngineOptions, StepPlan, StepRequest, ToolSpec};
use crate::error::Error;
use crate::ids::Lsn;
use crate::runtime::{Driven, Runtime, RuntimeOptions, Tool};

fn create(engine: &Engine, run: &str) {
    engine
        .create_run(CreateRun {
            run: RunId::new(run).unwrap(),
            input_digest: digest_of(run.as_bytes()),
            agent_version: "1".into(),
            trace_id: "t".into(),
            parent: None,
            input: None,
        })
        .unwrap();
}

/// Moves the leased run `guard` names to running.
fn start(engine: &Engine, guard: &crate::books::Guard) {
    engine
        .transition(Transition {
            run: guard.run.clone(),
            guard: guard.clone(),
            to: RunState::Running,
            expected_version: None,
            reason: "start".into(),
        })
        .unwrap();
}

fn worker(name: &str) -> WorkerId {
    WorkerId::new(name).unwrap()
}

#[test]
fn two_engines_on_one_database_share_runs_leases_and_the_ledger() {
    let Some(server) = server_url() else { return };
    let url = fresh_database(&server, "two_engines");
    let (a, b) = (
        Engine::open_postgres(&url, EngineOptions::default()).unwrap(),
        Engine::open_postgres(&url, EngineOptions::default()).unwrap(),
    );
    assert!(a.recovery().created && !b.recovery().created);
    create(&a, "order-1");
    let run = RunId::new("order-1").unwrap();
    // B sees A's run at once, and claims it; A then finds nothing.
    const LEASE_MS: u64 = 400;
    let lease = b.claim_next(&worker("b"), LEASE_MS).unwrap().unwrap();
    assert!(a.claim_next(&worker("a"), LEASE_MS).unwrap().is_none());
    start(&b, &lease.guard);
    let step = StepId::new("charge").unwrap();
    let request = |guard| StepRequest {
        guard,
        run: &run,
        step: &step,
        tool: ToolSpec {
            name: "psp.charge".into(),
            class: ToolClass::Queryable,
        },
        args: b"9 EUR",
        rationale: "the order",
        compensation: None,
    };
    let StepPlan::Act(ctx) = b.begin_step(&request(&lease.guard)).unwrap() else {
        panic!("a fresh step acts")
    };
    // B's process dies after it acted and before the outcome: its lease
    // runs out by the server's clock, and A takes the run under a larger
    // token. The intent B wrote is there for A: it asks the tool instead
    // of acting again.
    drop(b);
    std::thread::sleep(std::time::Duration::from_millis(LEASE_MS + 100));
    let again = a.claim_next(&worker("a"), 30_000).unwrap().unwrap();
    assert!(again.guard.token > lease.guard.token, "tokens only grow");
    let plan = a.begin_step(&request(&again.guard)).unwrap();
    assert!(
        matches!(&plan, StepPlan::Query(query) if query.key == ctx.key),
        "{plan:?}"
    );
    // B's stale token is fenced, whichever process presents it.
    let stale = a.finish_step(
        &lease.guard,
        &ctx,
        Outcome::Confirmed {
            receipt: b"ch_1".to_vec(),
        },
    );
    assert!(
        matches!(stale, Err(Error::Fenced { .. } | Error::LeaseLost { .. })),
        "{stale:?}"
    );
    // Counters: this process's since open, stored at close for the next.
    assert_eq!(a.metrics(60_000).unwrap().queries, 1);
    a.close().unwrap();
    let c = Engine::open_postgres(&url, EngineOptions::default()).unwrap();
    assert_eq!(c.metrics(60_000).unwrap().queries, 1, "stored at close");
}

#[test]
fn the_runtime_runs_an_agent_on_postgres_and_a_second_process_resumes_it() {
    let Some(server) = server_url() else { return };
    let url = fresh_database(&server, "runtime");
    let acted = Arc::new(Mutex::new(0_u32));
    let runtime = |engine: &Arc<Engine>, lease_ttl_ms: u64| {
        let rt = Runtime::with_options(
            Arc::clone(engine),
            RuntimeOptions {
                worker: "w".into(),
                lease_ttl_ms,
                idle_ms: 1,
                ..RuntimeOptions::default()
            },
        );
        let acted = Arc::clone(&acted);
        rt.register("trip", "1", move |ctx| {
            let booked = ctx.step(
                "book",
                &Tool::new("hotel.book", ToolClass::NotIdempotent),
                b"2 nights",
                |_| {
                    *acted.lock().unwrap() += 1;
                    Outcome::Confirmed {
                        receipt: b"bk_1".to_vec(),
                    }
                },
            )?;
            ctx.signal("go", None)?;
            Ok(booked)
        })
        .unwrap();
        rt
    };
    let first = Arc::new(Engine::open_postgres(&url, EngineOptions::default()).unwrap());
    let rt = runtime(&first, 300);
    let run = rt.start("trip", "trip-1", b"").unwrap().run;
    let (_, driven) = rt.work_once(&worker("w-0")).unwrap().unwrap();
    assert!(matches!(driven, Driven::Parked(_)), "{driven:?}");
    // Another process signals the run and drives it to the end; the step
    // answers from the ledger, so the hotel is booked once.
    let second = Arc::new(Engine::open_postgres(&url, EngineOptions::default()).unwrap());
    second.signal(&run, "go", b"", "webhook").unwrap();
    let rt2 = runtime(&second, 30_000);
    let (ran, driven) = rt2.work_once(&worker("w-1")).unwrap().unwrap();
    assert_eq!((ran, driven), (run.clone(), Driven::Completed));
    assert_eq!(*acted.lock().unwrap(), 1);
    assert_eq!(
        first.run(&run).unwrap().unwrap().state,
        RunState::Completed,
        "the first process sees the end"
    );
}

#[test]
fn a_version_1_database_is_upgraded_at_open_and_its_runs_listed_by_state() {
    let Some(server) = server_url() else { return };
    let url = fresh_database(&server, "upgrade");
    // A database as version 1 left it: its tables, and a run row.
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client.batch_execute(super::schema::VERSION_1).unwrap();
    client
        .batch_execute(
            "CREATE TABLE actum_meta (key text COLLATE \"C\" PRIMARY KEY, value bigint NOT NULL); \
             INSERT INTO actum_meta VALUES ('schema_version', 1)",
        )
        .unwrap();
    let mut model = crate::books::MemBooks::new();
    let cmd = crate::books::test_support::create("old-run", b"1");
    let decided = crate::books::decide(&model, &cmd, 5).unwrap();
    for op in &decided.ops {
        crate::books::apply(&mut model, op).unwrap();
    }
    let old = crate::books::BooksRead::run(&model, &RunId::new("old-run").unwrap()).unwrap();
    let row = crate::state::rows::encode_row(crate::state::rows::RowTable::Run, &old);
    client
        .execute(
            "INSERT INTO actum_runs (id, claim_from, row) VALUES ($1, 5, $2)",
            &[&"old-run", &row],
        )
        .unwrap();
    drop(client);
    let engine = Engine::open_postgres(&url, EngineOptions::default()).unwrap();
    assert!(!engine.recovery().created);
    let pending = engine.runs(Some(RunState::Pending), None, 10).unwrap();
    assert_eq!(pending, [old]);
    assert!(
        engine
            .runs(Some(RunState::Running), None, 10)
            .unwrap()
            .is_empty()
    );
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let version: i64 = client
        .query_one(
            "SELECT value FROM actum_meta WHERE key = 'schema_version'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, super::PG_SCHEMA_VERSION);
}

#[test]
fn retention_prunes_ended_runs_as_commits_go_on() {
    let Some(server) = server_url() else { return };
    let url = fresh_database(&server, "retention");
    let mut options = EngineOptions::default();
    options.retention.prune_after_ms = Some(0);
    let engine = Engine::open_postgres(&url, options).unwrap();
    // Runs created and cancelled: two commits each, so a pass comes after
    // every 128 runs.
    let over = crate::engine::RETENTION_EVERY_COMMITS / 2;
    for n in 0..over {
        let name = format!("r{n}");
        create(&engine, &name);
        engine
            .operate(
                &RunId::new(&name).unwrap(),
                crate::books::OperatorAction::Cancel,
                "ops",
                "done with it",
            )
            .unwrap();
    }
    // The pass pruned every cancelled run (they ended at or before now).
    assert!(engine.runs(None, None, 10).unwrap().is_empty());
    create(&engine, "kept");
    assert_eq!(engine.runs(None, None, 10).unwrap().len(), 1);
}

#[test]
fn the_calls_of_a_directory_say_so_and_the_rest_answer() {
    let Some(server) = server_url() else { return };
    let url = fresh_database(&server, "directory_calls");
    let engine = Arc::new(Engine::open_postgres(&url, EngineOptions::default()).unwrap());
    create(&engine, "r1");
    assert!(matches!(
        engine.read_log(Lsn::ZERO, 10),
        Err(Error::NotOnPostgres { .. })
    ));
    assert!(matches!(
        engine.serve_operators(),
        Err(Error::NotOnPostgres { .. })
    ));
    assert_eq!(engine.checkpoint().unwrap(), Lsn::ZERO);
    assert_eq!(engine.durable_lsn(), Lsn::ZERO);
    assert_eq!(engine.runs_in_memory(), 0);
    assert_eq!(engine.wal_stats().fsyncs, 0);
    // The engine's clock is the server's, corrected for this host.
    let server_ms = engine.postgres().unwrap().store.now_ms().unwrap();
    let here = engine.clock().now_ms();
    assert!(here.abs_diff(server_ms) < 5_000, "{here} vs {server_ms}");
    let books = engine.snapshot().unwrap();
    assert_eq!(books.runs().count(), 1);
}

/// An outcome decided optimistically on a read its run's lease renewal
/// went behind (the store waits between the read and the write, as a slow
/// network would make it) lands nothing: the write's guard refuses it, and
/// the command runs again in a transaction, after the renewal, so the
/// ledger holds the outcome once and the journal its lines in order.
#[test]
fn an_optimistic_write_lands_only_on_the_run_as_read() {
    use crate::books::{AuditWhat, BeginEffect, Begun, FinishEffect};
    let Some(server) = server_url() else { return };
    let url = fresh_database(&server, "optimistic_guard");
    let engine = Arc::new(Engine::open_postgres(&url, EngineOptions::default()).unwrap());
    create(&engine, "r");
    let run = RunId::new("r").unwrap();
    let lease = engine.claim_next(&worker("w"), 600_000).unwrap().unwrap();
    start(&engine, &lease.guard);
    let begun = engine
        .begin_effect(BeginEffect {
            run: run.clone(),
            step: StepId::new("charge").unwrap(),
            guard: lease.guard.clone(),
            tool: "psp.charge".into(),
            tool_class: ToolClass::Queryable,
            args_digest: digest_of(b"9 EUR"),
            args: None,
            rationale: "the order".into(),
            compensation: None,
        })
        .unwrap();
    let Begun::Proceed { key, .. } = begun else {
        panic!("a fresh step proceeds")
    };
    let store = &engine.postgres().unwrap().store;
    let (tried, rerun) = store.optimistic_counts();
    assert_eq!((tried, rerun), (1, 0), "the intent landed optimistically");
    store.stall_optimistic_writes(1, 600);
    let finishing = {
        let (engine, guard, key) = (Arc::clone(&engine), lease.guard.clone(), key.clone());
        std::thread::spawn(move || {
            engine.finish_effect(FinishEffect {
                key,
                guard,
                outcome: Outcome::Confirmed {
                    receipt: b"ch_1".to_vec(),
                },
            })
        })
    };
    // While the outcome's write waits, the lease is renewed: the run's
    // record and its journal change behind the outcome's read.
    std::thread::sleep(std::time::Duration::from_millis(200));
    engine.renew_lease(&run, &lease.guard, 600_000).unwrap();
    finishing.join().unwrap().unwrap();
    store.stall_optimistic_writes(0, 0);
    let (tried, rerun) = store.optimistic_counts();
    assert_eq!(
        (tried, rerun),
        (2, 1),
        "the outcome was tried optimistically and ran again"
    );
    let journal = engine.audit(&run).unwrap();
    let seqs: Vec<u64> = journal.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=journal.len() as u64).collect::<Vec<_>>());
    let last: Vec<&AuditWhat> = journal.iter().rev().take(2).map(|e| &e.what).collect();
    assert!(
        matches!(last[0], AuditWhat::Settled { .. })
            && matches!(last[1], AuditWhat::LeaseRenewed { .. }),
        "the renewal, then the outcome: {last:?}"
    );
    let entry = engine.effect(&key).unwrap().unwrap();
    assert!(
        matches!(entry.status, crate::books::EffectStatus::Confirmed { .. }),
        "{:?}",
        entry.status
    );
}

/// How many statements the effect protocol sends to the server through the
/// `Engine` (docs/PERFORMANCE.md, "The effect protocol on PostgreSQL: two
/// statements a command"), counted in the server's log, and held to the 4
/// measured there (per command, run optimistically: one statement, in
/// autocommit, for what it reads, one for what it writes, guarded): a
/// command that reads a row twice, falls back to a transaction, or whose
/// writes are not joined, fails here. And the round trips they take, held
/// to 4: a read the prefetch misses fails here.
/// Needs the log of the server scripts/postgres.sh started (its data
/// directory, `ACTUM_PG_DATA`); skips against a server of the user's.
/// `scripts/postgres.sh cargo test -p actum --features postgres --lib
/// statements_per_protocol -- --nocapture`
#[test]
fn statements_per_protocol() {
    use crate::books::{BeginEffect, FinishEffect};
    let Some(server) = server_url() else { return };
    let Ok(data) = std::env::var("ACTUM_PG_DATA") else {
        eprintln!("skipped: no ACTUM_PG_DATA, so no server log to count statements in");
        return;
    };
    let url = fresh_database(&server, "statements");
    let database = url.rsplit('/').next().unwrap().to_string();
    let log = std::path::Path::new(&data)
        .parent()
        .unwrap()
        .join("server.log");
    let mut admin = postgres::Client::connect(&server, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {database} SET log_statement = 'all'"
        ))
        .unwrap();
    let engine = Engine::open_postgres(&url, EngineOptions::default()).unwrap();
    create(&engine, "r");
    let run = RunId::new("r").unwrap();
    let lease = engine.claim_next(&worker("w"), 600_000).unwrap().unwrap();
    start(&engine, &lease.guard);
    let logged = || {
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .filter(|l| l.contains("LOG:  execute") || l.contains("LOG:  statement:"))
            .count()
    };
    const PROTOCOLS: usize = 20;
    let trips = || engine.postgres().unwrap().store.round_trips();
    let (mut before, mut trips_before) = (0, 0);
    // The first protocol prepares its statements on the connection: not
    // counted.
    for n in 0..=PROTOCOLS {
        if n == 1 {
            (before, trips_before) = (logged(), trips());
        }
        let begun = engine
            .begin_effect(BeginEffect {
                run: run.clone(),
                step: StepId::new(format!("s{n}")).unwrap(),
                guard: lease.guard.clone(),
                tool: "psp.charge".into(),
                tool_class: ToolClass::Queryable,
                args_digest: digest_of(&[n as u8]),
                args: None,
                rationale: "measure".into(),
                compensation: None,
            })
            .unwrap();
        let crate::books::Begun::Proceed { key, .. } = begun else {
            panic!("a fresh step proceeds")
        };
        engine
            .finish_effect(FinishEffect {
                key,
                guard: lease.guard.clone(),
                outcome: Outcome::Confirmed {
                    receipt: b"ch".to_vec(),
                },
            })
            .unwrap();
    }
    let statements = logged() - before;
    let round_trips = trips() - trips_before;
    eprintln!(
        "statements per protocol: {} ({statements} for {PROTOCOLS} protocols), \
         round trips per protocol: {}",
        statements as f64 / PROTOCOLS as f64,
        round_trips as f64 / PROTOCOLS as f64
    );
    assert!(
        round_trips <= 4 * PROTOCOLS as u64,
        "{round_trips} round trips for {PROTOCOLS} protocols: more than 4 a protocol \
         (a command reads once and writes once)"
    );
    assert!(statements >= 2 * PROTOCOLS, "the log was read");
    assert!(
        statements <= 4 * PROTOCOLS,
        "{statements} statements for {PROTOCOLS} protocols: more than 4 a protocol \
         (a command ran in a transaction, or read or wrote twice)"
    );
}

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

/// A fresh step's intent on the run `guard` names, its arguments not
/// stored (so it may run optimistically).
fn intent(guard: &crate::books::Guard, step: &str, args: &[u8]) -> crate::books::BeginEffect {
    crate::books::BeginEffect {
        run: guard.run.clone(),
        step: StepId::new(step).unwrap(),
        guard: guard.clone(),
        tool: "psp.charge".into(),
        tool_class: ToolClass::Queryable,
        args_digest: digest_of(args),
        args: None,
        rationale: "the order".into(),
        compensation: None,
    }
}

/// A step that charges 9 EUR on `run` under `guard`, through the ceremony
/// (its arguments stored).
fn charge<'a>(guard: &'a crate::books::Guard, run: &'a RunId, step: &'a StepId) -> StepRequest<'a> {
    StepRequest {
        guard,
        run,
        step,
        tool: ToolSpec {
            name: "psp.charge".into(),
            class: ToolClass::Queryable,
        },
        args: b"9 EUR",
        rationale: "the order",
        compensation: None,
    }
}

/// Asserts the ledger holds `key` confirmed.
fn assert_confirmed(engine: &Engine, key: &crate::books::EffectKey) {
    let entry = engine.effect(key).unwrap().unwrap();
    assert!(
        matches!(entry.status, crate::books::EffectStatus::Confirmed { .. }),
        "{key}: {:?}",
        entry.status
    );
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
    let request = |guard| charge(guard, &run, &step);
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
    use crate::books::{AuditWhat, Begun, FinishEffect};
    let Some(server) = server_url() else { return };
    let url = fresh_database(&server, "optimistic_guard");
    let engine = Arc::new(Engine::open_postgres(&url, EngineOptions::default()).unwrap());
    create(&engine, "r");
    let run = RunId::new("r").unwrap();
    let lease = engine.claim_next(&worker("w"), 600_000).unwrap().unwrap();
    start(&engine, &lease.guard);
    let begun = engine
        .begin_effect(intent(&lease.guard, "charge", b"9 EUR"))
        .unwrap();
    let Begun::Proceed { key, .. } = begun else {
        panic!("a fresh step proceeds")
    };
    let store = &engine.postgres().unwrap().store;
    let counts = store.optimistic_counts();
    assert_eq!(
        (counts.tried, counts.from_memory),
        (1, 1),
        "the intent was decided on what the run's start left"
    );
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
    let counts = store.optimistic_counts();
    assert_eq!(
        (counts.tried, counts.from_memory),
        (2, 2),
        "the outcome was decided on what the process held"
    );
    assert!(
        counts.again >= 1,
        "and ran again after the renewal: {counts:?}"
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
    assert_confirmed(&engine, &key);
}

/// A command decided on what the process held of its run (no read) lands
/// nothing when another process changed the run since: here a second engine
/// renews the first one's lease between two of its steps. The step runs
/// again in a transaction, after the renewal; the ledger and the journal
/// are whole.
#[test]
fn what_a_process_holds_of_a_run_is_checked_by_the_write() {
    use crate::books::{Begun, FinishEffect};
    let Some(server) = server_url() else { return };
    let url = fresh_database(&server, "known_runs");
    let (a, b) = (
        Engine::open_postgres(&url, EngineOptions::default()).unwrap(),
        Engine::open_postgres(&url, EngineOptions::default()).unwrap(),
    );
    create(&a, "r");
    let run = RunId::new("r").unwrap();
    let lease = a.claim_next(&worker("a"), 600_000).unwrap().unwrap();
    start(&a, &lease.guard);
    let step = |engine: &Engine, name: &str| {
        let begun = engine
            .begin_effect(intent(&lease.guard, name, name.as_bytes()))
            .unwrap();
        let Begun::Proceed { key, .. } = begun else {
            panic!("a fresh step proceeds: {begun:?}")
        };
        engine
            .finish_effect(FinishEffect {
                key: key.clone(),
                guard: lease.guard.clone(),
                outcome: Outcome::Confirmed {
                    receipt: name.as_bytes().to_vec(),
                },
            })
            .unwrap();
        key
    };
    let first = step(&a, "s1");
    let store = &a.postgres().unwrap().store;
    let counts = store.optimistic_counts();
    assert_eq!(counts.tried, 2);
    assert!(
        counts.from_memory >= 1 || counts.again >= 1,
        "the outcome was decided on what the intent left, unless the clock check failed: {counts:?}"
    );
    // Another process changes the run: A's next intent, decided on what A
    // holds, must not land on it.
    b.renew_lease(&run, &lease.guard, 600_000).unwrap();
    let before = store.optimistic_counts();
    let second = step(&a, "s2");
    let after = store.optimistic_counts();
    assert_eq!(after.tried - before.tried, 2);
    assert!(
        after.again > before.again,
        "the intent decided on what A held ran again: {before:?} then {after:?}"
    );
    for key in [first, second] {
        assert_confirmed(&a, &key);
    }
    let journal = a.audit(&run).unwrap();
    let seqs: Vec<u64> = journal.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=journal.len() as u64).collect::<Vec<_>>());
}

/// A step through the ceremony, as the runtime takes it: its intent stores
/// its arguments, so it is a transaction, and its outcome is decided on
/// what that transaction left the process holding of the run, with no read.
#[test]
fn a_steps_outcome_is_decided_on_what_its_intent_left() {
    let Some(server) = server_url() else { return };
    let url = fresh_database(&server, "step_known");
    let engine = Engine::open_postgres(&url, EngineOptions::default()).unwrap();
    create(&engine, "r");
    let run = RunId::new("r").unwrap();
    let lease = engine.claim_next(&worker("w"), 600_000).unwrap().unwrap();
    start(&engine, &lease.guard);
    let step = StepId::new("charge").unwrap();
    let request = charge(&lease.guard, &run, &step);
    let StepPlan::Act(ctx) = engine.begin_step(&request).unwrap() else {
        panic!("a fresh step acts")
    };
    let store = &engine.postgres().unwrap().store;
    assert_eq!(
        store.optimistic_counts().tried,
        0,
        "the intent stores its arguments"
    );
    engine
        .finish_step(
            &lease.guard,
            &ctx,
            Outcome::Confirmed {
                receipt: b"ch_1".to_vec(),
            },
        )
        .unwrap();
    let counts = store.optimistic_counts();
    assert_eq!((counts.tried, counts.from_memory), (1, 1), "{counts:?}");
    assert_confirmed(&engine, &ctx.key);
}

/// How many statements the effect protocol sends to the server through the
/// `Engine` (docs/PERFORMANCE.md, "The effect protocol on PostgreSQL: one
/// statement a command"), counted in the server's log, and held to the 2
/// measured there (per command, decided on what the process holds of the
/// run: one guarded statement, in autocommit, for what it writes), and 4
/// more for each command whose write's guard found the server's clock
/// elsewhere than estimated and so ran again in a transaction (the store
/// counts those): a command that reads, falls back to a transaction
/// otherwise, or whose writes are not joined, fails here. And the round
/// trips they take, held to 2, and 2 more for each such command.
/// Needs the log of the server scripts/postgres.sh started (its data
/// directory, `ACTUM_PG_DATA`); skips against a server of the user's.
/// `scripts/postgres.sh cargo test -p actum --features postgres --lib
/// statements_per_protocol -- --nocapture`
#[test]
fn statements_per_protocol() {
    use crate::books::FinishEffect;
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
    let store = &engine.postgres().unwrap().store;
    let trips = || store.round_trips();
    let (mut before, mut trips_before) = (0, 0);
    let mut counts_before = store.optimistic_counts();
    // The first two protocols prepare their statements on the connection
    // (the first decides on a read, the second on what it left): not
    // counted.
    for n in 0..PROTOCOLS + 2 {
        if n == 2 {
            (before, trips_before) = (logged(), trips());
            counts_before = store.optimistic_counts();
        }
        let begun = engine
            .begin_effect(intent(&lease.guard, &format!("s{n}"), &[n as u8]))
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
    // What the process holds of the run is the last step's entry, not the
    // run's history (which would make each command cost more than the one
    // before).
    assert_eq!(store.held_entries(&run), Some(1));
    let counts = store.optimistic_counts();
    let again = (counts.again - counts_before.again) as usize;
    assert_eq!(
        counts.tried - counts_before.tried,
        2 * PROTOCOLS as u64,
        "every command was run optimistically"
    );
    eprintln!(
        "statements per protocol: {} ({statements} for {PROTOCOLS} protocols), \
         round trips per protocol: {}, commands run again: {again}",
        statements as f64 / PROTOCOLS as f64,
        round_trips as f64 / PROTOCOLS as f64
    );
    assert!(
        round_trips as usize <= 2 * PROTOCOLS + 2 * again,
        "{round_trips} round trips for {PROTOCOLS} protocols ({again} commands ran again): \
         more than 2 a protocol (a command writes once, on what the process holds)"
    );
    assert!(statements >= 2 * PROTOCOLS, "the log was read");
    assert!(
        statements <= 2 * PROTOCOLS + 4 * again,
        "{statements} statements for {PROTOCOLS} protocols ({again} commands ran again): \
         more than 2 a protocol (a command read, or ran in a transaction, or wrote twice)"
    );
}

//! The PostgreSQL books against the reference model: seeded sequences of
//! commands (creates, claims, leases, effects and their outcomes,
//! reconciles, compensations, checkpoints, decisions, releases, time
//! passing past leases) decided on a `MemBooks` and run on a `PgStore` at
//! the same clock reading; every answer (or refusal) must match, and at the
//! end every row.
//!
//! Needs a server: `ACTUM_PG_URL` (scripts/postgres.sh starts one and sets
//! it, and `ACTUM_PG_REQUIRED=1`, under which a missing URL fails the test
//! instead of skipping it). Each test makes a database of its own.

#![expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]

use super::PgStore;
use crate::books::test_support::{
    Books, acquire, begin, claim, compensate, confirmed, create, decision, finish, reconcile,
    release, renew, save, transition,
};
use crate::books::{
    AcquireResource, Answer, Begun, BooksRead, BudgetLimits, Command, DecideApproval, EffectKey,
    Guard, OpenWait, Operate, OperatorAction, Outcome, Part, Prune, ReleaseResource, ResourceId,
    RunId, RunState, SendSignal, SetBudget, SetShared, SharedKeyId, SharedSetter, StepId,
    ToolClass, WaitFor, digest_of,
};
use crate::error::Error;

/// The server to test against, or `None` (skip).
pub(crate) fn server_url() -> Option<String> {
    super::server_for_tests()
}

/// A fresh database on the server `url` names, for one test: its URL.
pub(crate) fn fresh_database(url: &str, name: &str) -> String {
    super::scratch_database(url, &format!("actum_{name}")).unwrap()
}

/// A seeded generator (SplitMix64): the same seed, the same commands.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const LEASE_MS: u64 = 5_000;

/// What the generator remembers of the answers, to make commands that
/// the rules will often accept.
#[derive(Default)]
struct Seen {
    guards: Vec<Guard>,
    keys: Vec<(EffectKey, Guard)>,
    versions: std::collections::BTreeMap<String, u64>,
}

/// The next command: for a run picked at random, what its state calls for
/// (create it, lease it, start it, act, settle, save, decide, wait, end),
/// now and then one that the rules refuse (a stale guard, a run that is
/// over), so refusals are compared too.
fn next_command(rng: &mut Rng, model: &Books, seen: &Seen, n: u64) -> Command {
    // New runs keep coming as older ones end.
    let name = &format!("r-{:03}", n / 25 + rng.below(6));
    let Some(run) = model.mem.run(&RunId::new(name).unwrap()) else {
        return create(name, format!("input of {name}").as_bytes());
    };
    if run.state.is_terminal() && rng.below(4) != 0 {
        return claim(&format!("w{}", rng.below(3)), LEASE_MS);
    }
    let worker = format!("w{}", rng.below(3));
    let live = run.lease.as_ref().filter(|l| l.expires_ms > model.now_ms);
    let guard = live.and_then(|lease| {
        seen.guards
            .iter()
            .rev()
            .find(|g| g.run == run.id && g.token == lease.token)
            .cloned()
    });
    // One command in ten uses whatever guard was seen last, current or not.
    let guard = match (rng.below(10), seen.guards.last()) {
        (0, Some(stale)) => stale.clone(),
        _ => match guard {
            Some(g) => g,
            None if rng.below(2) == 0 => return claim(&worker, LEASE_MS),
            None => return acquire(name, &worker, LEASE_MS),
        },
    };
    let open: Vec<&(EffectKey, Guard)> = seen
        .keys
        .iter()
        .filter(|(k, _)| {
            *k.run() == run.id && model.mem.effect(k).is_some_and(|e| e.status.is_open())
        })
        .collect();
    // Commands that need no lease, or that wake a waiting run.
    if rng.below(5) == 0 {
        return unleased_command(rng, model, &run.id, &guard, n);
    }
    match (run.state, rng.below(20)) {
        (RunState::Pending | RunState::WaitingHuman | RunState::WaitingTool, _) => {
            transition(name, &guard, RunState::Running)
        }
        (_, 16 | 17) => {
            let (wait_for, deadline_ms) = match rng.below(3) {
                0 => (WaitFor::Timer, Some(model.now_ms + 200 + rng.below(3_000))),
                1 => (WaitFor::Signal { name: "go".into() }, None),
                _ => (
                    WaitFor::Approval {
                        args_digest: digest_of(b"args 0"),
                        role: "cfo".into(),
                    },
                    Some(model.now_ms + 4_000),
                ),
            };
            Command::OpenWait(OpenWait {
                run: run.id.clone(),
                guard,
                step: StepId::new(format!("s{}", rng.below(4))).unwrap(),
                wait_for,
                deadline_ms,
                reason: "waiting".into(),
            })
        }
        (_, 18) => Command::AcquireResource(AcquireResource {
            resource: ResourceId::new(format!("res{}", rng.below(2))).unwrap(),
            run: run.id.clone(),
            guard,
            ttl_ms: 2_000,
        }),
        (_, 19) => Command::ReleaseResource(ReleaseResource {
            resource: ResourceId::new(format!("res{}", rng.below(2))).unwrap(),
            run: run.id.clone(),
            guard,
        }),
        (_, 0..=3) => {
            let class = [
                ToolClass::NotIdempotent,
                ToolClass::Queryable,
                ToolClass::Idempotent {
                    dedup_window_ms: 60_000,
                },
            ][rng.below(3) as usize];
            let step = format!("s{}", rng.below(4));
            begin(
                name,
                &step,
                &guard,
                class,
                format!("args {}", rng.below(3)).as_bytes(),
            )
        }
        (_, 4..=6) if !open.is_empty() => {
            let (key, _) = open[rng.below(open.len() as u64) as usize].clone();
            let outcome = match rng.below(4) {
                0 | 1 => confirmed(format!("receipt {n}").as_bytes()),
                2 => Outcome::Failed {
                    retryable: rng.below(2) == 0,
                    reason: "declined".into(),
                },
                _ => Outcome::Unknown {
                    reason: "timed out".into(),
                },
            };
            if rng.below(4) == 0 {
                reconcile(&key, &guard, outcome)
            } else {
                finish(&key, &guard, outcome)
            }
        }
        (_, 7 | 8) => {
            let parts = vec![
                Part::whole(
                    "state",
                    format!("state {n} {}", "x".repeat(rng.below(300) as usize)),
                ),
                Part::whole("notes", b"unchanged".to_vec()),
            ];
            save(name, &guard, 1, parts)
        }
        (_, 9 | 10) => {
            let position = model.mem.decision_count(&run.id) + rng.below(2);
            decision(
                name,
                &guard,
                position,
                b"prompt",
                format!("answer {n}").as_bytes(),
            )
        }
        (_, 11) => renew(name, &guard, LEASE_MS),
        (_, 12) => release(name, &guard),
        (_, 13) => compensate(name, &format!("s{}", rng.below(4)), &guard),
        (_, 14) => {
            let to = [
                RunState::Completed,
                RunState::Failed,
                RunState::WaitingHuman,
            ][rng.below(3) as usize];
            transition(name, &guard, to)
        }
        _ => create(name, format!("input of {name}").as_bytes()),
    }
}

/// A command an operator, a webhook or another party sends: signals,
/// approvals, budgets, shared keys, pauses and cancels, prunes.
fn unleased_command(rng: &mut Rng, model: &Books, run: &RunId, guard: &Guard, n: u64) -> Command {
    match rng.below(7) {
        0 => Command::SendSignal(SendSignal {
            run: run.clone(),
            name: "go".into(),
            payload: format!("payload {n}").into_bytes(),
            sender: "webhook".into(),
        }),
        1 => Command::DecideApproval(DecideApproval {
            run: run.clone(),
            step: StepId::new(format!("s{}", rng.below(4))).unwrap(),
            args_digest: digest_of(b"args 0"),
            approver: "ann".into(),
            role: "cfo".into(),
            approve: rng.below(3) != 0,
            note: "checked".into(),
        }),
        2 => Command::SetBudget(SetBudget {
            run: run.clone(),
            limits: BudgetLimits {
                tool_calls: Some(1 + rng.below(4)),
                ..BudgetLimits::default()
            },
            by: "ops".into(),
            reason: "a cap".into(),
        }),
        3 => Command::SetShared(SetShared {
            key: SharedKeyId::new(format!("k{}", rng.below(2))).unwrap(),
            expected_version: rng.below(3),
            value: (rng.below(4) != 0).then(|| format!("v{n}").into_bytes()),
            by: if rng.below(2) == 0 {
                SharedSetter::Run {
                    run: guard.run.clone(),
                    guard: guard.clone(),
                }
            } else {
                SharedSetter::Operator { name: "ops".into() }
            },
            reason: "set".into(),
        }),
        4 => Command::Operate(Operate {
            run: run.clone(),
            action: [
                OperatorAction::Pause,
                OperatorAction::Resume,
                OperatorAction::Cancel,
            ][rng.below(3) as usize],
            operator: "ops".into(),
            reason: "looked at it".into(),
        }),
        5 => Command::Prune(Prune {
            runs: vec![run.clone()],
            older_than_ms: model.now_ms,
        }),
        _ => claim(&format!("w{}", rng.below(3)), LEASE_MS),
    }
}

fn remember(seen: &mut Seen, cmd: &Command, answer: &Answer) {
    match answer {
        Answer::Leased { run, token, .. } => {
            let worker = match cmd {
                Command::ClaimNext(c) => c.worker.clone(),
                Command::AcquireLease(a) => a.worker.clone(),
                Command::RenewLease(r) => r.guard.worker.clone(),
                _ => return,
            };
            seen.guards.push(Guard {
                run: run.clone(),
                worker,
                token: *token,
            });
        }
        Answer::Begun(Begun::Proceed { key, .. }) => {
            if let Command::BeginEffect(b) = cmd {
                seen.keys.push((key.clone(), b.guard.clone()));
            }
        }
        Answer::CheckpointSaved { run, version, .. } => {
            seen.versions.insert(run.to_string(), *version);
        }
        _ => {}
    }
}

/// Whether two refusals are the same refusal (same variant and message).
fn same_refusal(a: &Error, b: &Error) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b) && a.to_string() == b.to_string()
}

fn run_seed(store: &PgStore, seed: u64, commands: u64) {
    let mut rng = Rng(seed);
    let mut model = Books::default();
    let mut seen = Seen::default();
    let mut accepted = 0;
    let mut kinds = std::collections::BTreeMap::new();
    for n in 0..commands {
        // Time passes: sometimes past every lease.
        model.now_ms += [1, 10, 300, 700, 1, 10, 300, LEASE_MS + 1][rng.below(8) as usize];
        let cmd = next_command(&mut rng, &model, &seen, n);
        let expected = model.run(cmd.clone());
        let found = store.execute_at(&cmd, model.now_ms);
        match (&expected, &found) {
            (Ok(decided), Ok(answer)) => {
                assert_eq!(&decided.answer, answer, "seed {seed}, command {n}: {cmd:?}");
                remember(&mut seen, &cmd, answer);
                accepted += 1;
                *kinds
                    .entry(
                        format!("{cmd:?}")
                            .split(['(', ' '])
                            .next()
                            .unwrap_or("")
                            .to_string(),
                    )
                    .or_insert(0u32) += 1;
            }
            (Err(a), Err(b)) if same_refusal(a, b) => {}
            _ => panic!(
                "seed {seed}, command {n}: the model says {expected:?}, PostgreSQL {found:?}: {cmd:?}"
            ),
        }
    }
    eprintln!("seed {seed}: {accepted} of {commands} accepted: {kinds:?}");
    let found = store.read_all().unwrap();
    if let Some(diff) = model.mem.diff(&found) {
        panic!("seed {seed}: the books differ (model here, PostgreSQL there): {diff}");
    }
    assert!(
        accepted > commands / 4,
        "seed {seed}: only {accepted} of {commands} commands accepted: the generator tests little"
    );
}

#[test]
fn postgres_books_decide_as_the_reference_model_does() {
    let Some(url) = server_url() else { return };
    for seed in 1..=4 {
        let store = PgStore::connect(&fresh_database(&url, "model")).unwrap();
        run_seed(&store, seed, 800);
    }
}

#[test]
fn a_newer_schema_is_refused_and_an_older_code_never_misreads_it() {
    let Some(url) = server_url() else { return };
    let db = fresh_database(&url, "schema");
    drop(PgStore::connect(&db).unwrap());
    // Connecting again finds the tables made and changes nothing.
    drop(PgStore::connect(&db).unwrap());
    let mut client = postgres::Client::connect(&db, postgres::NoTls).unwrap();
    client
        .execute(
            "UPDATE actum_meta SET value = $1 WHERE key = 'schema_version'",
            &[&(super::PG_SCHEMA_VERSION + 1)],
        )
        .unwrap();
    let error = PgStore::connect(&db).unwrap_err();
    let newer = u32::try_from(super::PG_SCHEMA_VERSION + 1).unwrap();
    assert!(
        matches!(
            error,
            Error::UnsupportedFormat { found, supported, .. }
                if found == newer && i64::from(supported) == super::PG_SCHEMA_VERSION
        ),
        "{error}"
    );
}

#[test]
fn a_damaged_row_is_corrupt_naming_it_never_a_panic() {
    let Some(url) = server_url() else { return };
    let db = fresh_database(&url, "damage");
    let store = PgStore::connect(&db).unwrap();
    store.execute(&create("r-damaged", b"input")).unwrap();
    let mut client = postgres::Client::connect(&db, postgres::NoTls).unwrap();
    client
        .execute(
            "UPDATE actum_runs SET row = set_byte(row, 6, get_byte(row, 6) # 1)",
            &[],
        )
        .unwrap();
    let error = store
        .execute(&acquire("r-damaged", "w1", LEASE_MS))
        .unwrap_err();
    assert!(
        matches!(&error, Error::Corrupt { reason, .. } if reason.contains("run r-damaged")),
        "{error}"
    );
}

#[test]
fn the_server_clock_is_the_time() {
    let Some(url) = server_url() else { return };
    let store = PgStore::connect(&fresh_database(&url, "clock")).unwrap();
    let before = store.now_ms().unwrap();
    store.execute(&create("r-timed", b"input")).unwrap();
    let after = store.now_ms().unwrap();
    let books = store.read_all().unwrap();
    let run = books.runs().next().unwrap();
    assert!(
        (before..=after).contains(&run.updated_ms),
        "created at {} by the server's clock, between {before} and {after}",
        run.updated_ms
    );
}

#[test]
fn concurrent_claims_never_hand_one_run_to_two_workers() {
    let Some(url) = server_url() else { return };
    let db = fresh_database(&url, "claims");
    let store = PgStore::connect(&db).unwrap();
    let runs: Vec<String> = (0..40).map(|i| format!("r-{i:02}")).collect();
    for run in &runs {
        store.execute(&create(run, b"input")).unwrap();
    }
    let claimed: Vec<Vec<String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|w| {
                let db = db.clone();
                scope.spawn(move || {
                    let store = PgStore::connect(&db).unwrap();
                    let mut mine = Vec::new();
                    loop {
                        match store.execute(&claim(&format!("w{w}"), 60_000)).unwrap() {
                            Answer::Leased { run, .. } => mine.push(run.to_string()),
                            Answer::NothingToClaim => return mine,
                            other => panic!("{other:?}"),
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<String> = claimed.concat();
    all.sort();
    assert_eq!(all, runs, "every run claimed exactly once: {claimed:?}");
}

#[test]
fn a_cut_connection_fails_one_call_that_landed_nothing_and_the_next_reconnects() {
    let Some(url) = server_url() else { return };
    let db = fresh_database(&url, "cut");
    let store = PgStore::connect(&db).unwrap();
    store.execute(&create("r-before", b"input")).unwrap();
    let mut admin = postgres::Client::connect(&db, postgres::NoTls).unwrap();
    let cut = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
    assert_eq!(cut.len(), 1, "the store's one connection was cut");
    // The server ends the session a moment later: wait until it is gone.
    for _ in 0..500 {
        let left: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap()
            .get(0);
        if left == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let error = store.execute(&create("r-during", b"input")).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Postgres {
                may_have_landed: false,
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("PostgreSQL at postgres://actum@"),
        "{error}"
    );
    store.execute(&create("r-after", b"input")).unwrap();
    let runs: Vec<String> = store
        .read_all()
        .unwrap()
        .runs()
        .map(|r| r.id.to_string())
        .collect();
    assert_eq!(
        runs,
        ["r-after", "r-before"],
        "the failed call landed nothing"
    );
}

#[test]
fn a_read_sees_one_snapshot_and_locks_nothing_a_command_needs() {
    let Some(url) = server_url() else { return };
    let db = fresh_database(&url, "read");
    let store = PgStore::connect(&db).unwrap();
    let writer = PgStore::connect(&db).unwrap();
    store.execute(&create("r-read", b"input")).unwrap();
    let (state, claimable, after) = store
        .read(|books, now_ms| {
            let run = books.run(&RunId::new("r-read").unwrap()).unwrap();
            let mut claimable = 0;
            books.visit_claimable(now_ms, &mut |_| {
                claimable += 1;
                true
            });
            // A command on the same run, on another connection, commits
            // while this read is open: the read took no lock on it, and
            // does not see it.
            let answer = writer.execute(&acquire("r-read", "w1", LEASE_MS)).unwrap();
            assert!(matches!(answer, Answer::Leased { .. }), "{answer:?}");
            let after = books.run(&RunId::new("r-read").unwrap()).unwrap();
            Ok((run.state, claimable, after.lease.is_some()))
        })
        .unwrap();
    assert_eq!((state, claimable, after), (RunState::Pending, 1, false));
    let now = store
        .read(|books, _| Ok(books.run(&RunId::new("r-read").unwrap()).unwrap()))
        .unwrap();
    assert!(now.lease.is_some(), "a later read sees the lease");
    let missing = store.read(|books, _| Ok(books.run(&RunId::new("r-none").unwrap())));
    assert!(matches!(missing, Ok(None)));
}

/// Runs `cmd` on the model and on PostgreSQL at the model's clock reading;
/// both must answer alike (or refuse alike). Returns the answer.
fn both(store: &PgStore, model: &mut Books, cmd: Command) -> Option<Answer> {
    let expected = model.run(cmd.clone());
    let found = store.execute_at(&cmd, model.now_ms);
    match (expected, found) {
        (Ok(decided), Ok(answer)) => {
            assert_eq!(decided.answer, answer, "{cmd:?}");
            Some(answer)
        }
        (Err(a), Err(b)) if same_refusal(&a, &b) => None,
        (expected, found) => {
            panic!("the model says {expected:?}, PostgreSQL {found:?}: {cmd:?}")
        }
    }
}

/// The lease `answer` grants to `worker`.
fn granted(answer: Option<Answer>, worker: &str) -> Guard {
    let Some(Answer::Leased { run, token, .. }) = answer else {
        panic!("not a lease: {answer:?}");
    };
    Guard {
        run,
        worker: crate::books::WorkerId::new(worker).unwrap(),
        token,
    }
}

#[test]
fn a_retried_step_and_a_timer_behave_as_in_the_model() {
    let Some(url) = server_url() else { return };
    let store = PgStore::connect(&fresh_database(&url, "scenario")).unwrap();
    let mut model = Books::default();
    // A step whose first attempt failed is attempted again; its latest
    // attempt is the second, and a begin while it is open resolves it.
    both(&store, &mut model, create("r-retry", b"input"));
    let g = granted(
        both(&store, &mut model, acquire("r-retry", "w1", LEASE_MS)),
        "w1",
    );
    both(
        &store,
        &mut model,
        transition("r-retry", &g, RunState::Running),
    );
    for attempt in 1..=3 {
        model.now_ms += 10;
        let begun = both(
            &store,
            &mut model,
            begin("r-retry", "pay", &g, ToolClass::NotIdempotent, b"args"),
        );
        let Some(Answer::Begun(Begun::Proceed { key, .. })) = begun else {
            panic!("attempt {attempt}: {begun:?}");
        };
        assert_eq!(key.attempt(), attempt);
        let outcome = Outcome::Failed {
            retryable: true,
            reason: "declined".into(),
        };
        both(&store, &mut model, finish(&key, &g, outcome));
    }
    model.now_ms += 10;
    let begun = both(
        &store,
        &mut model,
        begin("r-retry", "pay", &g, ToolClass::NotIdempotent, b"args"),
    );
    assert!(
        matches!(begun, Some(Answer::Begun(Begun::Proceed { ref key, .. })) if key.attempt() == 4)
    );
    // Two runs parked on timers, released: the one whose timer ends first
    // is claimed first, and neither before its timer.
    for (run, after_ms) in [("r-late", 3_000), ("r-soon", 1_000)] {
        both(&store, &mut model, create(run, b"input"));
        let g = granted(both(&store, &mut model, acquire(run, "w2", LEASE_MS)), "w2");
        both(&store, &mut model, transition(run, &g, RunState::Running));
        let deadline_ms = Some(model.now_ms + after_ms);
        both(
            &store,
            &mut model,
            Command::OpenWait(OpenWait {
                run: RunId::new(run).unwrap(),
                guard: g.clone(),
                step: StepId::new("nap").unwrap(),
                wait_for: WaitFor::Timer,
                deadline_ms,
                reason: "a nap".into(),
            }),
        );
        both(&store, &mut model, release(run, &g));
    }
    let mut claimed = Vec::new();
    for _ in 0..8 {
        model.now_ms += 500;
        if let Some(Answer::Leased { run, .. }) = both(&store, &mut model, claim("w3", LEASE_MS)) {
            claimed.push((run.to_string(), model.now_ms));
        }
    }
    let order: Vec<&str> = claimed.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(order, ["r-soon", "r-late"], "{claimed:?}");
    if let Some(diff) = model.mem.diff(&store.read_all().unwrap()) {
        panic!("the books differ (model here, PostgreSQL there): {diff}");
    }
}

/// A statement made of static pieces is composed and prepared once per
/// connection, then found by its pieces: `compose` is not asked again, and
/// what it refused is not kept (asked again next time).
#[test]
fn a_composed_statement_is_composed_once_per_connection() {
    let Some(server) = server_url() else { return };
    let url = fresh_database(&server, "composed");
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut connection = super::wire::Connection::connect(&url, counted)
        .unwrap()
        .unwrap();
    let composed = std::cell::Cell::new(0);
    let pieces = || vec![("SELECT $1::bigint + ", 1), ("$2::bigint", 1)];
    let compose = |pieces: &[(&'static str, usize)]| {
        composed.set(composed.get() + 1);
        Some(pieces.iter().map(|(piece, _)| *piece).collect::<String>())
    };
    let first = connection.composed(pieces(), compose).unwrap().unwrap();
    let again = connection.composed(pieces(), compose).unwrap().unwrap();
    assert_eq!(composed.get(), 1, "composed again for the same pieces");
    assert_eq!(first.params().len(), 2);
    assert_eq!(again.params().len(), 2);
    // Each param count is part of the name: other counts, another statement.
    let other = vec![("SELECT $1::bigint + ", 1), ("$2::bigint", 0)];
    connection.composed(other, compose).unwrap().unwrap();
    assert_eq!(composed.get(), 2);
    // A refusal is not kept.
    let refused = || vec![("refused", 0)];
    assert!(connection.composed(refused(), |_| None).is_none());
    assert!(
        connection
            .composed(refused(), compose)
            .is_some_and(|p| p.is_err())
    );
    // And the statement runs.
    let params = [super::wire::Param::Big(2), super::wire::Param::Big(3)];
    connection
        .execute_prepared("add", &first, &params)
        .map_err(|(_, e)| e)
        .unwrap();
}

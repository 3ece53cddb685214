//! Helpers shared by the `actum` command's tests: a database with known
//! contents built through the engine API, the built binary run on it, and
//! a hash of every file of a directory to prove a command changed nothing.
//! A module of the one test binary (`commands.rs`); its tests reach it as
//! `crate::support`.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use actum::books::{
    BeginEffect, Begun, CreateRun, OperatorAction, Outcome, RunId, RunState, StepId, ToolClass,
    Transition, WaitFor, WorkerId, digest_of,
};
use actum::engine::{LeaseGrant, StepRequest, StepResult, ToolSpec};
use actum::{Clock, Engine, EngineOptions, FsStorage, ManualClock, Storage, SystemClock};

/// How long before now the known database's history happened.
pub const HISTORY_AGO_MS: u64 = 3 * 3_600_000;
/// Leases in the known database last this long, so they are live now.
pub const LEASE_MS: u64 = 24 * 3_600_000;
/// A trace id stored only inside one run's row of the state store.
pub const TRACE_MARKER: &str = "trace-marker-7b1e";

/// The runs of the known database, by name.
pub mod runs {
    /// Completed, with one confirmed effect.
    pub const DONE: &str = "r-done";
    /// Pending, never leased.
    pub const PENDING: &str = "r-pending";
    /// Paused by an operator.
    pub const PAUSED: &str = "r-paused";
    /// Cancelled by an operator.
    pub const CANCELLED: &str = "r-cancelled";
    /// Running under a live lease, its effect intended with no outcome.
    pub const INTENDED: &str = "r-intended";
    /// Running under a live lease, its effect's outcome unknown.
    pub const UNKNOWN: &str = "r-unknown";
    /// Waiting for a signal since the history began (three hours ago).
    pub const WAITING: &str = "r-waiting";
}

/// The key of the intended effect, and of the unknown one.
pub const INTENDED_KEY: &str = "r-intended/charge/1";
/// The key of the effect whose outcome is unknown.
pub const UNKNOWN_KEY: &str = "r-unknown/mail/1";

/// Runs the built `actum` binary with `args`.
///
/// A run refused because the directory is "in use by another process" is
/// tried again for up to a second. The tests of one binary run in
/// parallel threads, and a child another thread forks holds a copy of
/// every open descriptor until it execs (`O_CLOEXEC` closes them only
/// then), the directory lock of an engine this test just dropped
/// included: for that moment the lock still looks held. A directory that
/// really is in use stays refused after the last try, which is what the
/// tests of that refusal see.
pub fn actum(args: &[&str]) -> Output {
    const TRIES: u32 = 40;
    let mut tries = 0;
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_actum"))
            .args(args)
            .output()
            .unwrap();
        tries += 1;
        let in_use = out.status.code() == Some(2)
            && String::from_utf8_lossy(&out.stderr).contains("is in use by another process");
        if !in_use || tries == TRIES {
            return out;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

/// `open` (an engine open in this process) tried again for up to a second
/// while the directory answers `Locked`: the lock of an engine this test
/// just closed can linger in a child another test thread forked and has
/// not yet exec'd (see [`actum`]).
pub fn open_retrying<T>(open: impl Fn() -> actum::Result<T>) -> T {
    for _ in 0..40 {
        match open() {
            Err(actum::Error::Locked { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            other => return other.unwrap(),
        }
    }
    open().unwrap()
}

/// `actum` with a directory argument among `args` (`{}` is replaced).
pub fn actum_on(dir: &Path, args: &[&str]) -> Output {
    let dir = dir.to_str().unwrap();
    let args: Vec<&str> = args
        .iter()
        .map(|a| if *a == "{}" { dir } else { a })
        .collect();
    actum(&args)
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The exit code (`-1` if killed by a signal).
pub fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

fn rid(name: &str) -> RunId {
    RunId::new(name).unwrap()
}

fn create(engine: &Engine, run: &str, trace: &str) {
    engine
        .create_run(CreateRun {
            run: rid(run),
            input_digest: digest_of(run.as_bytes()),
            // Two versions of one agent, as a runtime names them
            // (kind@version): the finished and the pending run are the
            // older version's.
            agent_version: if [runs::DONE, runs::PENDING].contains(&run) {
                "shop@1".into()
            } else {
                "shop@2".into()
            },
            trace_id: trace.into(),
            parent: None,
            input: None,
        })
        .unwrap();
}

fn start(engine: &Engine, run: &str, worker: &str) -> LeaseGrant {
    create(engine, run, &format!("trace-{run}"));
    let grant = engine
        .acquire_lease(&rid(run), &WorkerId::new(worker).unwrap(), LEASE_MS)
        .unwrap();
    move_to(engine, &grant, RunState::Running);
    grant
}

fn move_to(engine: &Engine, grant: &LeaseGrant, to: RunState) {
    engine
        .transition(Transition {
            run: grant.run.clone(),
            guard: grant.guard.clone(),
            to,
            expected_version: None,
            reason: "test".into(),
        })
        .unwrap();
}

/// Opens an engine on `dir` whose clock reads `HISTORY_AGO_MS` before now.
pub fn open_in_the_past(dir: &Path) -> Engine {
    let start_ms = SystemClock.now_ms() - HISTORY_AGO_MS;
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    let clock = Arc::new(ManualClock::new(start_ms));
    Engine::open_with(storage, clock, dir, EngineOptions::default()).unwrap()
}

/// Builds the known database in `dir` (see [`runs`]), three hours in the
/// past, and returns the engine still open.
pub fn build_known(dir: &Path) -> Engine {
    let engine = open_in_the_past(dir);
    fill_known(&engine);
    engine
}

/// Writes the known database's runs (see [`runs`]) through `engine`, at
/// its clock's readings: a directory's, or a PostgreSQL database's.
pub fn fill_known(engine: &Engine) {
    // Completed after one confirmed step.
    let done = start(engine, runs::DONE, "w-done");
    let pay = StepId::new("pay").unwrap();
    let request = StepRequest {
        guard: &done.guard,
        run: &done.run,
        step: &pay,
        tool: ToolSpec {
            name: "bank.transfer".into(),
            class: ToolClass::Queryable,
        },
        args: b"10 EUR",
        rationale: "invoice due",
        compensation: None,
    };
    let paid = engine
        .step(&request, |_| Outcome::Confirmed {
            receipt: b"tx-1".to_vec(),
        })
        .unwrap();
    assert!(matches!(paid, StepResult::Done { .. }));
    move_to(engine, &done, RunState::Completed);
    // Pending; paused; cancelled.
    create(engine, runs::PENDING, TRACE_MARKER);
    create(engine, runs::PAUSED, "trace-paused");
    let operate = |run, action| {
        engine
            .operate(&rid(run), action, "ops-anna", "test")
            .unwrap()
    };
    operate(runs::PAUSED, OperatorAction::Pause);
    create(engine, runs::CANCELLED, "trace-cancelled");
    operate(runs::CANCELLED, OperatorAction::Cancel);
    // An intent durable and no outcome: the worker is still acting.
    let intended = start(engine, runs::INTENDED, "w-live");
    let begun = engine
        .begin_effect(BeginEffect {
            run: intended.run.clone(),
            step: StepId::new("charge").unwrap(),
            guard: intended.guard.clone(),
            tool: "psp.charge".into(),
            tool_class: ToolClass::Queryable,
            args_digest: digest_of(b"42 EUR"),
            args: None,
            rationale: "cart confirmed".into(),
            compensation: None,
        })
        .unwrap();
    assert!(matches!(begun, Begun::Proceed { .. }));
    // A mail whose acknowledgement was lost: unknown, never resent.
    let unknown = start(engine, runs::UNKNOWN, "w-live");
    let mail = StepId::new("mail").unwrap();
    let request = StepRequest {
        guard: &unknown.guard,
        run: &unknown.run,
        step: &mail,
        tool: ToolSpec {
            name: "smtp.send".into(),
            class: ToolClass::NotIdempotent,
        },
        args: b"hello",
        rationale: "confirm",
        compensation: None,
    };
    let lost = engine
        .step(&request, |_| Outcome::Unknown {
            reason: "timeout".into(),
        })
        .unwrap();
    assert!(matches!(lost, StepResult::Unknown { .. }));
    // Waiting for a signal that never came.
    let waiting = start(engine, runs::WAITING, "w-wait");
    let signal = WaitFor::Signal {
        name: "paid".into(),
    };
    engine
        .open_wait(
            &waiting.run,
            &waiting.guard,
            &StepId::new("hook").unwrap(),
            signal,
            None,
            "the bank confirms by webhook",
        )
        .unwrap();
}

/// Builds the known database in a new temporary directory and closes it.
pub fn known_db() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    build_known(dir.path()).close().unwrap();
    dir
}

/// Every file under `dir` (relative path → BLAKE3 of its bytes; `dir`
/// itself if it is a file), so two readings are equal exactly when no file
/// was made, removed or changed.
pub fn hash_tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    if dir.is_file() {
        let hash = blake3::hash(&std::fs::read(dir).unwrap())
            .to_hex()
            .to_string();
        out.insert(PathBuf::new(), hash);
        return out;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), "dir".into());
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let hash = blake3::hash(&bytes).to_hex().to_string();
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), hash);
            }
        }
    }
    out
}

/// Copies the database directory `from` into a new temporary directory.
pub fn copy_db(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(from.join(&rel)).unwrap() {
            let entry = entry.unwrap();
            let rel = rel.join(entry.file_name());
            if entry.path().is_dir() {
                std::fs::create_dir_all(to.path().join(&rel)).unwrap();
                stack.push(rel);
            } else {
                std::fs::copy(entry.path(), to.path().join(&rel)).unwrap();
            }
        }
    }
    to
}

/// The path of WAL segment `n` of the database in `dir`.
pub fn segment(dir: &Path, n: u64) -> PathBuf {
    actum::wal::format::segment_path(&dir.join("wal"), actum::SegmentId(n))
}

/// Flips every bit of the byte at `offset` of `path`.
pub fn flip(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = usize::try_from(offset).unwrap();
    bytes[at] ^= 0xff;
    std::fs::write(path, bytes).unwrap();
}

/// Creates run `name` of `agent`, leases it to worker `w` and starts it.
pub fn running_run(engine: &Engine, name: &str, agent: &str) -> (RunId, LeaseGrant) {
    let run = RunId::new(name).unwrap();
    engine
        .create_run(CreateRun {
            run: run.clone(),
            input_digest: digest_of(name.as_bytes()),
            agent_version: agent.into(),
            trace_id: "t".into(),
            parent: None,
            input: None,
        })
        .unwrap();
    let grant = engine
        .acquire_lease(&run, &WorkerId::new("w").unwrap(), LEASE_MS)
        .unwrap();
    engine
        .transition(Transition {
            run: run.clone(),
            guard: grant.guard.clone(),
            to: RunState::Running,
            expected_version: None,
            reason: "test".into(),
        })
        .unwrap();
    (run, grant)
}

/// Creates run `name` of `refund@1` and makes it wait at step `refund`
/// for role `finance` to approve `args`, for two days (still open when a
/// command runs); `why` is journaled with the wait.
pub fn wait_for_approval(engine: &Engine, name: &str, args: &[u8], why: &str) -> RunId {
    let (run, grant) = running_run(engine, name, "refund@1");
    engine
        .open_wait(
            &run,
            &grant.guard,
            &StepId::new("refund").unwrap(),
            WaitFor::Approval {
                args_digest: digest_of(args),
                role: "finance".into(),
            },
            Some(engine.clock().now_ms() + 2 * LEASE_MS),
            why,
        )
        .unwrap();
    run
}

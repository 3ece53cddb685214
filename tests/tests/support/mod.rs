//! Helpers shared by the engine scenario and crash tests: opening an engine
//! on the real file system with a manual clock, a reference model
//! (`MemBooks` driven through the same decide/apply), and short command
//! constructors. A module of the one test binary (`scenarios.rs`); its
//! tests reach it as `crate::support`.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use std::path::Path;
use std::sync::Arc;

use actum::books::{
    Answer, BooksWrite, Command, CreateRun, Guard, MemBooks, RunId, RunState, StepId, ToolClass,
    Transition, WorkerId, apply, decide, digest_of,
};
use actum::engine::{LeaseGrant, StepRequest, ToolSpec};
use actum::storage::DirLock;
use actum::{
    Clock, Engine, EngineOptions, FsStorage, ManualClock, OpenMode, Result, Storage, StorageFile,
};

/// Start of every test's clock, ms since the epoch.
pub const START_MS: u64 = 1_700_000_000_000;
/// The lease every scenario takes.
pub const LEASE_MS: u64 = 30_000;
/// Stripe-like dedup window.
pub const DAY_MS: u64 = 86_400_000;

/// Whether the scenario tests run on PostgreSQL: `ACTUM_TEST_BACKEND=postgres`
/// (test.sh runs every scenario test binary twice, on a directory and on
/// the server `ACTUM_PG_URL` names). A scenario's assertions about the
/// embedded engine's own machinery (replayed records, runs in memory, the
/// log's LSNs, files) are made on a directory only.
pub fn on_postgres() -> bool {
    std::env::var("ACTUM_TEST_BACKEND").is_ok_and(|b| b == "postgres")
}

/// Opens the books of `dir`, reading `clock`: the database in `dir` on the
/// real file system, or, on PostgreSQL ([`on_postgres`]), a database of
/// the test server's made for `dir` on its first open (so a scenario's
/// "crash and reopen" reopens the same books).
pub fn open_fs(dir: &Path, clock: &Arc<ManualClock>) -> Engine {
    if on_postgres() {
        let url = database_for(dir);
        OPENED_CLOCK.with(|opened| *opened.borrow_mut() = Some(Arc::clone(clock)));
        return Engine::open_postgres_at(&url, clock.clone(), EngineOptions::default()).unwrap();
    }
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    Engine::open_with(storage, clock.clone(), dir, EngineOptions::default()).unwrap()
}

/// The scratch database standing for `dir` on the test server.
fn database_for(dir: &Path) -> String {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::sync::Mutex;
    static DATABASES: Mutex<BTreeMap<PathBuf, String>> = Mutex::new(BTreeMap::new());
    let mut made = DATABASES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    made.entry(dir.to_path_buf())
        .or_insert_with(|| {
            let server = std::env::var("ACTUM_PG_URL")
                .expect("ACTUM_TEST_BACKEND=postgres needs ACTUM_PG_URL (scripts/postgres.sh)");
            actum::pg::scratch_database(&server, "actum_scenario").unwrap()
        })
        .clone()
}

thread_local! {
    /// The clock the last PostgreSQL engine of this thread's scenario was
    /// opened with: what [`take_back`] waits on there.
    static OPENED_CLOCK: std::cell::RefCell<Option<Arc<ManualClock>>> =
        const { std::cell::RefCell::new(None) };
}

/// On PostgreSQL, lets the scenario's time pass until `expires_ms` is over
/// (nothing on a directory, whose open released the lease).
pub fn wait_out_lease(expires_ms: u64) {
    if !on_postgres() {
        return;
    }
    OPENED_CLOCK.with(|opened| {
        if let Some(clock) = opened.borrow().as_ref()
            && clock.now_ms() <= expires_ms
        {
            clock.set_ms(expires_ms + 1);
        }
    });
}

pub fn rid(name: &str) -> RunId {
    RunId::new(name).unwrap()
}

pub fn sid(name: &str) -> StepId {
    StepId::new(name).unwrap()
}

pub fn wid(name: &str) -> WorkerId {
    WorkerId::new(name).unwrap()
}

pub fn create_cmd(run: &str) -> CreateRun {
    CreateRun {
        run: rid(run),
        input_digest: digest_of(run.as_bytes()),
        agent_version: "agent 1.0".into(),
        trace_id: format!("trace-{run}"),
        parent: None,
        input: None,
    }
}

/// Creates `run`, leases it to `worker` and starts it (effects begin only
/// on a running run).
pub fn create_and_lease(engine: &Engine, run: &str, worker: &str) -> LeaseGrant {
    engine.create_run(create_cmd(run)).unwrap();
    let grant = engine
        .acquire_lease(&rid(run), &wid(worker), LEASE_MS)
        .unwrap();
    engine
        .transition(Transition {
            run: rid(run),
            guard: grant.guard.clone(),
            to: RunState::Running,
            expected_version: None,
            reason: "start".into(),
        })
        .unwrap();
    grant
}

/// What a restarted worker does first: the open that followed the crash
/// released every live lease (the process holding them was gone), so the
/// worker takes its run back, under a larger token.
///
/// On PostgreSQL nothing is released at open (many processes share the
/// database, and no open proves another gone): the restarted worker waits
/// for its old lease to run out ([`wait_out_lease`]).
pub fn take_back(engine: &Engine, grant: &LeaseGrant) -> LeaseGrant {
    wait_out_lease(grant.expires_ms);
    let again = engine
        .acquire_lease(&grant.run, &grant.guard.worker, LEASE_MS)
        .unwrap();
    assert!(
        again.guard.token > grant.guard.token,
        "the released token stays fenced"
    );
    again
}

pub fn idempotent() -> ToolClass {
    ToolClass::Idempotent {
        dedup_window_ms: DAY_MS,
    }
}

/// A step request of `tool` with `args`.
pub fn request<'a>(
    guard: &'a Guard,
    run: &'a RunId,
    step: &'a StepId,
    tool: &str,
    class: ToolClass,
    args: &'a [u8],
) -> StepRequest<'a> {
    StepRequest {
        guard,
        run,
        step,
        tool: ToolSpec {
            name: tool.into(),
            class,
        },
        args,
        rationale: "the plan says so",
        compensation: None,
    }
}

/// The reference model: `MemBooks` driven through decide then apply at the
/// clock reading the engine saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    pub books: MemBooks,
}

impl Model {
    /// Decides and applies `cmd` at `now_ms`; the answer, or the refusal.
    pub fn execute(&mut self, cmd: &Command, now_ms: u64) -> Result<Answer> {
        let decided = decide(&self.books, cmd, now_ms)?;
        for op in &decided.ops {
            apply(&mut self.books as &mut dyn BooksWrite, op)?;
        }
        Ok(decided.answer)
    }
}

/// A toy payment provider that remembers every idempotency key it saw.
#[derive(Debug, Default)]
pub struct Bank {
    /// Charges actually made: (key, amount).
    pub charges: Vec<(String, Vec<u8>)>,
}

impl Bank {
    /// Charges unless `key` was seen (then returns the first receipt).
    pub fn charge_idempotent(&mut self, key: &str, amount: &[u8]) -> Vec<u8> {
        if let Some(i) = self.charges.iter().position(|(k, _)| k == key) {
            return format!("ch_{i}").into_bytes();
        }
        self.charge_blindly(key, amount)
    }

    /// Charges, whatever the key.
    pub fn charge_blindly(&mut self, key: &str, amount: &[u8]) -> Vec<u8> {
        self.charges.push((key.to_string(), amount.to_vec()));
        format!("ch_{}", self.charges.len() - 1).into_bytes()
    }

    /// The receipt of `key`'s charge, if it happened.
    pub fn query(&self, key: &str) -> Option<Vec<u8>> {
        let i = self.charges.iter().position(|(k, _)| k == key)?;
        Some(format!("ch_{i}").into_bytes())
    }
}

/// A runtime over `engine` with the scenario lease and no idle pause.
pub fn runtime(engine: &Arc<Engine>) -> actum::runtime::Runtime {
    actum::runtime::Runtime::with_options(
        Arc::clone(engine),
        actum::runtime::RuntimeOptions {
            worker: "rt".into(),
            lease_ttl_ms: LEASE_MS,
            idle_ms: 0,
            ..actum::runtime::RuntimeOptions::default()
        },
    )
}

/// Claims and drives runs as worker `w1` until none is left to claim (at
/// most 16), answering what each turn did.
pub fn drain(runtime: &actum::runtime::Runtime) -> Vec<actum::runtime::Driven> {
    let worker = wid("w1");
    let mut driven = Vec::new();
    for _ in 0..16 {
        match runtime.work_once(&worker).unwrap() {
            Some((_, d)) => driven.push(d),
            None => break,
        }
    }
    driven
}

/// A [`Storage`] over another that calls a hook with a file's path before
/// every read of it, and passes everything else on: a test slows reads
/// down or counts them with it.
pub struct OnRead {
    inner: Arc<dyn Storage>,
    before_read: Arc<dyn Fn(&Path) + Send + Sync>,
}

impl OnRead {
    /// `inner`, with `before_read` called before each read of any file.
    pub fn new(
        inner: Arc<dyn Storage>,
        before_read: impl Fn(&Path) + Send + Sync + 'static,
    ) -> Self {
        OnRead {
            inner,
            before_read: Arc::new(before_read),
        }
    }
}

impl std::fmt::Debug for OnRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnRead")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

struct OnReadFile {
    inner: Box<dyn StorageFile>,
    path: std::path::PathBuf,
    before_read: Arc<dyn Fn(&Path) + Send + Sync>,
}

impl std::fmt::Debug for OnReadFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnReadFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl StorageFile for OnReadFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        (self.before_read)(&self.path);
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.inner.write_at(offset, data)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len_bytes: u64) -> std::io::Result<()> {
        self.inner.set_len(len_bytes)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.inner.sync_data()
    }
}

impl Storage for OnRead {
    fn open(&self, path: &Path, mode: OpenMode) -> std::io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(OnReadFile {
            inner: self.inner.open(path, mode)?,
            path: path.to_path_buf(),
            before_read: Arc::clone(&self.before_read),
        }))
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }
    fn exists(&self, path: &Path) -> std::io::Result<bool> {
        self.inner.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn lock_dir(&self, dir: &Path) -> std::io::Result<Box<dyn DirLock>> {
        self.inner.lock_dir(dir)
    }
}

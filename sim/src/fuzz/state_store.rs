//! Fuzz target `state_store`: damage a real database (the state store above
//! all) the way a bad disk does, then open it with the default options and
//! read everything the public API can read, then checkpoint and close.
//!
//! The images are made once per process by [`workload`] on the simulated
//! disk, through the public API only: runs in every state, confirmed,
//! unknown and intended effects with their arguments, compensations,
//! checkpoints with shared parts, decisions, waits, budgets, a resource, a
//! shared key, an operator's pause and a pruned run. One image was closed
//! cleanly; the other crashed after a checkpoint, so its log holds a tail
//! the open replays.
//!
//! Input: a shape byte (bit 0: which image), then edits of eight bytes
//! each (kind, file, offset as `u32`, length, value). Most edits go to
//! `state.redb` (file byte below 192); the others to any file of the
//! image. Kinds: a run of garbage (the damage a torn or misdirected write
//! leaves), xor one byte, set one byte, and, rarely, cut the file short.
//!
//! **Invariant:** nothing panics: open, every read, the checkpoint and the
//! close each answer `Ok` or `Err`; and a run created after the damaged
//! database opened is there when it is opened again (an `Err` is allowed;
//! `Ok(None)` is a lost acknowledgement).
//!
//! The options are the defaults, so the state store's pages are checked:
//! the clean image carries the page sums its close wrote, so its pages are
//! checked as they are read; the crashed one has none, so all of them at
//! open (docs/DURABILITY.md, "Page sums"). An edit may land in the sums
//! file too (then it is refused whole and the open checks every page).
//! With the check off and no sums, a store damaged at rest can abort the
//! process past any guard when redb commits or closes it (a second panic
//! while unwinding from a first: docs/DURABILITY.md, "State store
//! checks"), so that setting is not fuzzed: the guard on reads of an
//! unchecked store is held by the test
//! `a_panic_inside_redb_is_an_error_of_the_call_that_met_it`, which lets
//! its engine go after the panic as the engine itself does. A store that
//! made redb panic is never closed through redb (it is let go, as a crash
//! leaves it), so the fuzzer runs with `-detect_leaks=0`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use actum::books::{
    BeginEffect, BudgetLimits, Charge, Compensation, Cost, CreateRun, Guard, OperatorAction,
    Outcome, Part, PartBase, RecordDecision, ResourceId, RunId, RunState, SaveCheckpoint,
    SharedKeyId, SharedSetter, StepId, ToolClass, Transition, Usage, WaitFor, WorkerId, digest_of,
};
use actum::engine::{Engine, EngineOptions, StepRequest, ToolSpec};
use actum::{DbOptions, OpenMode, Storage, WalOptions};

use super::bytes::Bytes;
use crate::clock::SimClock;
use crate::disk::{FaultConfig, SimDisk};
use crate::rng::Rng;

/// The database directory on the simulated disk.
const DB_DIR: &str = "/db";
/// Small segments and records, so an image is a few hundred KiB.
const SEGMENT_SIZE_BYTES: u64 = 64 * 1024;
/// The largest record the images' logs accept.
const RECORD_BYTES_MAX: u64 = 16 * 1024;
/// Runs in the workload.
const RUNS: usize = 12;
/// Edits applied per input, at most.
const EDITS_MAX: usize = 48;
/// The longest garbage run one edit writes.
const GARBAGE_BYTES_MAX: usize = 512;
/// The simulated clock's start.
const START_MS: u64 = 1_700_000_000_000;
/// How long the images' leases last.
const LEASE_MS: u64 = 3_600_000;
/// The largest page of runs the engine lists.
const PAGE: usize = 256;

/// A database's files, by path.
pub type Image = BTreeMap<String, Vec<u8>>;

// The last panic's message and place on this thread, kept by the hook
// `quiet_caught_panics` installs.
thread_local! {
    static LAST_PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Replaces the process's panic hook with one that only remembers the
/// panic (in `LAST_PANIC`). For the fuzz harness, whose own hook aborts
/// the process at every panic, even one the engine's guard catches and
/// turns into an `Err` as it should; with this hook, a caught panic is
/// quiet, and [`state_store`] prints the one that escapes before passing
/// it on to the harness (which aborts: a crash, as it should be).
pub fn quiet_caught_panics() {
    std::panic::set_hook(Box::new(|info| {
        let place = info
            .location()
            .map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        LAST_PANIC.with(|last| *last.borrow_mut() = format!("{message}{place}"));
    }));
}

/// Runs the `state_store` target on `data`.
pub fn state_store(data: &[u8]) {
    let outcome = std::panic::catch_unwind(|| damage_and_use(data));
    if let Err(panic) = outcome {
        LAST_PANIC.with(|last| eprintln!("state_store: a panic escaped: {}", last.borrow()));
        std::panic::resume_unwind(panic);
    }
}

/// A workload's database damaged as an input says, ready to open.
#[derive(Debug)]
pub struct Damaged {
    /// The disk holding it.
    pub storage: Arc<dyn Storage>,
    /// The options to open it with: the defaults (the state store's
    /// pages checked at open) but for small log segments.
    pub options: EngineOptions,
    /// The shape byte and the edits, for a failure's message.
    pub context: String,
}

/// The database directory of every image.
pub const DIR: &str = DB_DIR;

/// The image `data` names, damaged by its edits.
pub fn damaged(data: &[u8]) -> Damaged {
    let mut input = Bytes::new(data);
    let shape = input.u8();
    let image = &images()[usize::from(shape & 1)];
    let storage: Arc<dyn Storage> = Arc::new(restore(image));
    let files: Vec<String> = image.keys().cloned().collect();
    let mut edits = Vec::new();
    while !input.is_empty() && edits.len() < EDITS_MAX {
        let edit = Edit {
            kind: input.u8(),
            file: input.u8(),
            offset: input.u32(),
            len: input.u8(),
            value: input.u8(),
        };
        edit.apply(&storage, &files);
        edits.push(edit);
    }
    let options = options();
    Damaged {
        storage,
        options,
        context: format!("shape {shape:#04x}, edits {edits:?}"),
    }
}

/// The clock the damaged database is opened with: ten leases after the
/// workload began.
pub fn clock() -> Arc<SimClock> {
    Arc::new(SimClock::new(START_MS + 10 * LEASE_MS))
}

fn damage_and_use(data: &[u8]) {
    let Damaged {
        storage,
        options,
        context,
    } = damaged(data);
    let clock = clock();
    let Ok(engine) =
        Engine::open_with(Arc::clone(&storage), clock.clone(), DB_DIR, options.clone())
    else {
        return; // Damage found at open: what the checks are for.
    };
    read_everything(&engine);
    let _ = engine.checkpoint();
    let after = RunId::new("after-the-damage").expect("a valid name");
    let created = engine.create_run(create(&after)).is_ok();
    let _ = engine.close();
    if !created {
        return;
    }
    let Ok(engine) = Engine::open_with(storage, clock, DB_DIR, options) else {
        return;
    };
    if let Ok(found) = engine.run(&after) {
        assert!(
            found.is_some(),
            "a run created after a damaged database opened was lost at the next open; {context}"
        );
    }
}

/// The images of the workload's database: closed cleanly, and crashed with
/// a log tail past its last checkpoint.
pub fn images() -> &'static [Image; 2] {
    static IMAGES: OnceLock<[Image; 2]> = OnceLock::new();
    IMAGES.get_or_init(|| [build(true), build(false)])
}

/// The options the images are made and opened with: the defaults but for
/// small log segments.
fn options() -> EngineOptions {
    let defaults = EngineOptions::default();
    EngineOptions {
        db: DbOptions {
            wal: WalOptions {
                segment_size_bytes: SEGMENT_SIZE_BYTES,
                max_record_bytes: RECORD_BYTES_MAX,
                ..WalOptions::default()
            },
            database_id: Some(actum::DatabaseId(0x5747_e000)),
        },
        ..defaults
    }
}

/// Makes the workload's database on a fault-free disk; `clean` closes it,
/// otherwise the disk loses power after the workload's last command.
fn build(clean: bool) -> Image {
    let disk = SimDisk::new(Rng::new(7), FaultConfig::none());
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let clock = Arc::new(SimClock::new(START_MS));
    let engine = Engine::open_with(storage, clock.clone(), DB_DIR, options())
        .expect("a new database on a fault-free disk opens");
    workload(&engine, &clock);
    if clean {
        engine.close().expect("a clean close on a fault-free disk");
    } else {
        disk.crash(&mut Rng::new(11));
        drop(engine);
    }
    disk.snapshot()
}

/// A fresh disk holding `image`'s files, synced.
fn restore(image: &Image) -> SimDisk {
    let disk = SimDisk::new(Rng::new(0), FaultConfig::none());
    for (path, bytes) in image {
        let path = Path::new(path);
        let parent = path.parent().expect("files live in a directory");
        disk.create_dir_all(parent).expect("a fault-free disk");
        let file = disk
            .open(path, OpenMode::CreateNew)
            .expect("a fault-free disk");
        file.write_at(0, bytes).expect("a fault-free disk");
        file.sync_data().expect("a fault-free disk");
        disk.sync_dir(parent).expect("a fault-free disk");
    }
    disk
}

/// One change to one file of the image.
#[derive(Clone, Copy, Debug)]
struct Edit {
    kind: u8,
    file: u8,
    offset: u32,
    len: u8,
    value: u8,
}

impl Edit {
    /// Applies the edit and syncs it; an edit of an empty file or a failed
    /// call changes nothing.
    fn apply(&self, storage: &Arc<dyn Storage>, files: &[String]) {
        let state = files.iter().position(|f| f.ends_with("state.redb"));
        let index = match state {
            Some(at) if self.file < 192 => at,
            _ => usize::from(self.file) % files.len(),
        };
        let path = Path::new(&files[index]);
        let Ok(file) = storage.open(path, OpenMode::Existing) else {
            return;
        };
        let Ok(len) = file.len() else {
            return;
        };
        if len == 0 {
            return;
        }
        let at = u64::from(self.offset) % len;
        let done = match self.kind % 16 {
            0 => file.set_len(at),
            1..=5 => {
                let mut byte = [0u8];
                if file.read_at(at, &mut byte).is_err() {
                    return;
                }
                file.write_at(at, &[byte[0] ^ self.value.max(1)])
            }
            6..=8 => file.write_at(at, &[self.value]),
            _ => {
                let room = usize::try_from(len - at).unwrap_or(usize::MAX);
                let run = (usize::from(self.len) * 2 + 1)
                    .min(GARBAGE_BYTES_MAX)
                    .min(room);
                file.write_at(at, &garbage(run, self.value))
            }
        };
        if done.is_ok() {
            let _ = file.sync_data();
        }
    }
}

/// `len` bytes of noise from `seed` (xorshift: cheap and repeatable).
fn garbage(len: usize, seed: u8) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(seed);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

/// Reads everything the public API can read; every answer may be `Err`.
/// Returns the errors met, in order.
pub fn read_everything(engine: &Engine) -> Vec<actum::Error> {
    let mut errors = Vec::new();
    let mut keep = |result: actum::Result<()>| {
        if let Err(error) = result {
            errors.push(error);
        }
    };
    keep(engine.snapshot().map(drop));
    let mut runs = Vec::new();
    let mut after: Option<RunId> = None;
    // Bounded: each page moves past its last run, and pages stop short.
    for _ in 0..RUNS * 4 {
        let page = match engine.runs(None, after.as_ref(), PAGE) {
            Ok(page) => page,
            Err(error) => {
                keep(Err(error));
                break;
            }
        };
        let Some(last) = page.last() else {
            break;
        };
        after = Some(last.id.clone());
        let short = page.len() < PAGE;
        runs.extend(page.into_iter().map(|run| run.id));
        if short {
            break;
        }
    }
    for run in &runs {
        keep(engine.run(run).map(drop));
        match engine.effects(run) {
            Ok(effects) => {
                for entry in effects {
                    keep(engine.effect(&entry.key).map(drop));
                    keep(engine.effect_args(&entry.key).map(drop));
                }
            }
            Err(error) => keep(Err(error)),
        }
        keep(engine.audit(run).map(drop));
        keep(engine.load_latest(run, 1).map(drop));
        keep(engine.waits(run).map(drop));
        keep(engine.budget(run).map(drop));
        keep(engine.saga(run).map(drop));
        keep(
            engine
                .export_audit(run, &mut std::io::sink().by_ref())
                .map(drop),
        );
    }
    keep(engine.stuck(0).map(drop));
    keep(engine.metrics(0).map(drop));
    if let Ok(resource) = ResourceId::new("customer:7") {
        keep(engine.resource(&resource).map(drop));
    }
    if let Ok(key) = SharedKeyId::new("dnc:customer-7") {
        keep(engine.shared(&key).map(drop));
    }
    errors
}

fn create(run: &RunId) -> CreateRun {
    CreateRun {
        run: run.clone(),
        input_digest: digest_of(run.as_str().as_bytes()),
        agent_version: "state-store fuzz 1".into(),
        trace_id: format!("trace-{run}"),
        parent: None,
        input: None,
    }
}

/// The workload: runs whose books fill every table of the state store.
pub fn workload(engine: &Engine, clock: &SimClock) {
    let worker = WorkerId::new("w-1").expect("a valid name");
    let mut finished = Vec::new();
    for k in 0..RUNS {
        let run = RunId::new(format!("run-{k:02}")).expect("a valid name");
        engine.create_run(create(&run)).expect("create");
        if k == RUNS - 1 {
            break; // One run is never leased.
        }
        let lease = engine
            .acquire_lease(&run, &worker, LEASE_MS)
            .expect("a free run is leased");
        let guard = lease.guard;
        to(engine, &run, &guard, RunState::Running);
        clock.advance_ms(1_000);
        journal(engine, &run, &guard, k);
        match k % 4 {
            0 => {
                act(engine, &run, &guard, "pay", confirmed(k), None);
                to(engine, &run, &guard, RunState::Completed);
                finished.push(run);
            }
            1 => {
                let unknown = Outcome::Unknown {
                    reason: "timeout".into(),
                };
                act(engine, &run, &guard, "mail", unknown, None);
                let signal = WaitFor::Signal {
                    name: "paid".into(),
                };
                let step = StepId::new("hook").expect("a valid name");
                engine
                    .open_wait(&run, &guard, &step, signal, None, "bank webhook")
                    .expect("open a wait");
            }
            2 => budgeted(engine, &run, &guard, k),
            _ => coordinated(engine, &run, &guard, k),
        }
        if k == RUNS / 2 {
            engine
                .checkpoint()
                .expect("a checkpoint on a fault-free disk");
        }
    }
    // A day later the first finished run leaves the books.
    clock.advance_ms(86_400_000);
    if let Some(first) = finished.first() {
        engine
            .prune_runs(vec![first.clone()], 3_600_000)
            .expect("prune a finished run");
    }
}

fn to(engine: &Engine, run: &RunId, guard: &Guard, state: RunState) {
    engine
        .transition(Transition {
            run: run.clone(),
            guard: guard.clone(),
            to: state,
            expected_version: None,
            reason: "workload".into(),
        })
        .expect("a legal transition");
}

fn confirmed(k: usize) -> Outcome {
    Outcome::Confirmed {
        receipt: format!("receipt-{k}").into_bytes(),
    }
}

/// One step through the ledger, its outcome `outcome`.
fn act(
    engine: &Engine,
    run: &RunId,
    guard: &Guard,
    step: &str,
    outcome: Outcome,
    compensation: Option<Compensation>,
) {
    let step = StepId::new(step).expect("a valid name");
    let args = format!("{run}/{step}: 10 EUR").into_bytes();
    let class = match outcome {
        Outcome::Unknown { .. } => ToolClass::NotIdempotent,
        _ => ToolClass::Idempotent {
            dedup_window_ms: 86_400_000,
        },
    };
    let request = StepRequest {
        guard,
        run,
        step: &step,
        tool: ToolSpec {
            name: "bank.transfer".into(),
            class,
        },
        args: &args,
        rationale: "the invoice is due",
        compensation,
    };
    engine.step(&request, |_| outcome).expect("a step");
}

/// A decision and two checkpoints whose first part is shared by all runs.
fn journal(engine: &Engine, run: &RunId, guard: &Guard, k: usize) {
    let decision = RecordDecision {
        run: run.clone(),
        guard: guard.clone(),
        position: 0,
        input_digest: digest_of(format!("plan {k}").as_bytes()),
        output: format!("plan for {run}").into_bytes(),
        rationale: "cheapest".into(),
        usage: Usage {
            tokens_in: 100,
            tokens_out: 20,
            cost_micros: 300,
        },
    };
    engine.record_decision(decision).expect("a decision");
    // The second checkpoint saves its messages in append form on the
    // first's: the same bytes, stored as two chunks.
    let mut base = None;
    for _ in 0..2 {
        let messages = match base {
            None => Part::whole("messages", vec![b'm'; 200 + k]),
            Some(first) => Part::append(
                "messages",
                PartBase::new(first, "messages"),
                vec![b'm'; 100],
            ),
        };
        let parts = vec![
            Part::whole("policy", b"shared by every run".to_vec()),
            messages,
        ];
        let save = SaveCheckpoint {
            run: run.clone(),
            guard: guard.clone(),
            schema_version: 1,
            parts,
        };
        let saved = engine.save_checkpoint(save).expect("a checkpoint");
        base = Some(saved.version);
    }
}

/// A budget reserved and settled around a compensable act, left intended
/// (the worker is still acting).
fn budgeted(engine: &Engine, run: &RunId, guard: &Guard, k: usize) {
    let limits = BudgetLimits {
        tool_calls: Some(10),
        ..Default::default()
    };
    engine
        .set_budget(run, limits, "ops", "a test budget")
        .expect("a budget");
    let charge = Charge::Effect {
        step: StepId::new("fund").expect("a valid name"),
    };
    engine
        .reserve(run, guard, charge.clone(), Cost::tool_call(5))
        .expect("a reserve");
    let undo = Compensation {
        tool: "bank.unfund".into(),
        args: b"back".to_vec(),
        class: ToolClass::Idempotent {
            dedup_window_ms: 86_400_000,
        },
    };
    act(engine, run, guard, "fund", confirmed(k), Some(undo));
    engine
        .settle(run, guard, charge, Cost::tool_call(4))
        .expect("a settle");
    engine
        .begin_effect(BeginEffect {
            run: run.clone(),
            step: StepId::new("wire").expect("a valid name"),
            guard: guard.clone(),
            tool: "bank.wire".into(),
            tool_class: ToolClass::Queryable,
            args_digest: digest_of(b"wire 5 EUR"),
            args: None,
            rationale: "sweep".into(),
            compensation: None,
        })
        .expect("an intent");
}

/// A resource held, a shared key set by the run, and an operator's pause.
fn coordinated(engine: &Engine, run: &RunId, guard: &Guard, k: usize) {
    let resource = ResourceId::new("customer:7").expect("a valid name");
    if let Ok(hold) = engine.acquire_resource(&resource, run, guard, LEASE_MS) {
        assert_eq!(hold.resource, resource);
    }
    let key = SharedKeyId::new("dnc:customer-7").expect("a valid name");
    let version = engine
        .shared(&key)
        .expect("a read")
        .map_or(0, |entry| entry.version);
    let by = SharedSetter::Run {
        run: run.clone(),
        guard: guard.clone(),
    };
    let value = format!("set by {run} ({k})").into_bytes();
    engine
        .set_shared(&key, version, Some(value), &by, "the customer asked")
        .expect("a compare-and-set");
    engine
        .operate(run, OperatorAction::Pause, "ops-anna", "a look first")
        .expect("a pause");
}

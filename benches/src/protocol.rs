//! The effect protocol as the benches run it: one leased run per writer thread, and per protocol
//! a fresh step's durable intent (`begin_effect`) then its durable outcome (`finish_effect`):
//! two engine commits. [`TwoCommits`] runs the same protocol on a peer as two durable commits of
//! one record each, so every system in the `effect_protocol` bench does two durable writes per
//! protocol and [`crate::harness::run_writers`] times them all alike.
//!
//! **Invariant:** every protocol is a fresh step, so every `begin_effect` answers `Proceed` and
//! writes an intent (asserted); each writer thread of a sample uses its own run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actum::books::RUNS_PAGE_MAX;
use actum::books::{
    AcquireLease, Answer, BeginEffect, Command, CreateRun, EffectKey, FinishEffect, Guard,
    LEASE_TTL_MS_MAX, Outcome, RunId, RunState, StepId, ToolClass, Transition, WorkerId, digest_of,
};
use actum::engine::{Begun, Engine, EngineOptions};
use actum::wal::WalStats;
use actum::{FsStorage, Storage, SystemClock};

use crate::group_commit::per;
use crate::harness::run_writers;
use crate::{DurableLog, DurableRows, PeerWork};

/// The dedup window the protocol's tool declares (one day).
pub const DEDUP_WINDOW_MS: u64 = 86_400_000;

/// An engine in a scratch directory, with leased runs handed to writer threads in turn.
pub struct ProtocolEngine {
    /// The engine (shared, so it can serve its operator channel).
    pub engine: Arc<Engine>,
    guards: Vec<(RunId, Guard)>,
    next_writer: AtomicUsize,
    stats_at_open: WalStats,
    _dir: tempfile::TempDir,
}

/// Creates run `name` in `engine`, leases it to `worker` for the longest allowed time and starts
/// it (effects begin only on a running run).
pub fn leased_run(engine: &Engine, name: &str, worker: &str) -> (RunId, Guard) {
    leased_run_on(&|cmd| engine.execute(cmd), name, worker)
}

/// [`leased_run`] on any store that executes commands (the embedded engine, or the books in
/// PostgreSQL).
pub fn leased_run_on(
    execute: &dyn Fn(&Command) -> actum::Result<Answer>,
    name: &str,
    worker: &str,
) -> (RunId, Guard) {
    let run = RunId::new(name).expect("a bench run id is valid");
    execute(&Command::CreateRun(CreateRun {
        run: run.clone(),
        input_digest: digest_of(name.as_bytes()),
        agent_version: "bench".into(),
        trace_id: String::new(),
        parent: None,
        input: None,
    }))
    .expect("creating a bench run");
    let worker = WorkerId::new(worker).expect("a bench worker id is valid");
    let leased = execute(&Command::AcquireLease(AcquireLease {
        run: run.clone(),
        worker: worker.clone(),
        ttl_ms: LEASE_TTL_MS_MAX,
    }))
    .expect("leasing a bench run");
    let Answer::Leased { token, .. } = leased else {
        panic!("a lease answers Leased: {leased:?}");
    };
    let guard = Guard {
        run: run.clone(),
        worker,
        token,
    };
    execute(&Command::Transition(Transition {
        run: run.clone(),
        guard: guard.clone(),
        to: RunState::Running,
        expected_version: None,
        reason: "bench".into(),
    }))
    .expect("starting a bench run");
    (run, guard)
}

/// The intent of protocol (or agent step) number `ticket` on `run`: a fresh step of an
/// idempotent tool.
pub fn intent(run: &RunId, guard: &Guard, ticket: u64) -> BeginEffect {
    BeginEffect {
        run: run.clone(),
        step: step_id(ticket),
        guard: guard.clone(),
        tool: "stripe.charge".into(),
        tool_class: ToolClass::Idempotent {
            dedup_window_ms: DEDUP_WINDOW_MS,
        },
        args_digest: digest_of(&ticket.to_le_bytes()),
        args: None,
        rationale: "benchmark".into(),
        compensation: None,
    }
}

/// The outcome that settles the intent `key`: confirmed, with a short receipt.
pub fn confirmed(key: EffectKey, guard: &Guard) -> FinishEffect {
    FinishEffect {
        key,
        guard: guard.clone(),
        outcome: Outcome::Confirmed {
            receipt: b"ch_0123456789".to_vec(),
        },
    }
}

/// Commits and fsyncs of `engine` since its WAL counters read `earlier`, and commits per fsync.
pub fn wal_summary_since(engine: &Engine, earlier: WalStats) -> String {
    let now = engine.wal_stats();
    let commits = now.appends - earlier.appends;
    let fsyncs = now.fsyncs - earlier.fsyncs;
    format!(
        "{commits} commits in {fsyncs} fsyncs ({:.1} commits per fsync)",
        per(commits, fsyncs)
    )
}

/// The step id of protocol (or agent step) number `ticket`: unique per ticket.
pub fn step_id(ticket: u64) -> StepId {
    StepId::new(format!("s{ticket}")).expect("a bench step id is valid")
}

impl ProtocolEngine {
    /// A fresh engine on the real file system, with `runs` leased runs.
    pub fn new(runs: usize) -> ProtocolEngine {
        ProtocolEngine::with_storage(runs, Arc::new(FsStorage::new()), EngineOptions::default())
    }

    /// The engine's directory.
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// Like [`ProtocolEngine::new`], on `storage` with `options`.
    pub fn with_storage(
        runs: usize,
        storage: Arc<dyn Storage>,
        options: EngineOptions,
    ) -> ProtocolEngine {
        assert!(runs > 0, "at least one run");
        let dir = crate::scratch_dir();
        let engine = Engine::open_with(storage, Arc::new(SystemClock), dir.path(), options)
            .expect("opening the bench engine");
        let guards = (0..runs)
            .map(|t| leased_run(&engine, &format!("bench-{t}"), &format!("w{t}")))
            .collect();
        let stats_at_open = engine.wal_stats();
        ProtocolEngine {
            engine: Arc::new(engine),
            guards,
            next_writer: AtomicUsize::new(0),
            stats_at_open,
            _dir: dir,
        }
    }

    /// The leased runs, one per writer thread.
    pub fn runs(&self) -> &[(RunId, Guard)] {
        &self.guards
    }

    /// Commits and fsyncs since the runs were set up, and commits per fsync.
    pub fn wal_summary(&self) -> String {
        wal_summary_since(&self.engine, self.stats_at_open)
    }

    /// One protocol on run `t`: durable intent, durable outcome; returns the settled entry's key.
    pub fn protocol(&self, t: usize, ticket: u64) -> EffectKey {
        let (run, guard) = &self.guards[t];
        let begun = self
            .engine
            .begin_effect(intent(run, guard, ticket))
            .expect("begin_effect");
        let Begun::Proceed { key, .. } = begun else {
            panic!("a fresh step did not proceed: {begun:?}")
        };
        let status = self
            .engine
            .finish_effect(confirmed(key.clone(), guard))
            .expect("finish_effect");
        assert_eq!(status, "confirmed", "the outcome settled the entry");
        key
    }
}

impl DurableLog for ProtocolEngine {
    /// The index of the run this writer thread uses.
    type Writer<'a> = usize;

    fn writer(&self) -> usize {
        // One call per writer thread per sample, so consecutive calls of a sample get distinct
        // runs as long as there are at least as many runs as threads.
        self.next_writer.fetch_add(1, Ordering::Relaxed) % self.guards.len()
    }

    fn summary(&self) -> Option<String> {
        Some(self.wal_summary())
    }

    fn commit(&self, t: &mut usize, ticket: u64) {
        self.protocol(*t, ticket);
    }
}

/// The protocol on a peer ([`crate::OnPeer`]): two durable commits of one record each (intent,
/// outcome), the second with its own ticket so no record overwrites another.
#[derive(Clone, Copy, Debug)]
pub struct TwoCommits;

impl PeerWork for TwoCommits {
    fn commit<L: DurableRows>(&self, peer: &L, writer: &mut L::Writer<'_>, ticket: u64) {
        let first = ticket.checked_mul(2).expect("tickets stay far below 2^63");
        peer.commit(writer, first);
        peer.commit(writer, first + 1);
    }
}

/// Runs `protocols` protocols over `threads` threads (at most one per run); returns the time.
pub fn run_protocols(setup: &ProtocolEngine, threads: usize, protocols: u64) -> Duration {
    assert!(threads <= setup.guards.len(), "one run per writer thread");
    run_writers(setup, threads, 0, protocols)
}

/// A look at a live database, as `actum inspect` takes one: a snapshot of
/// `dir` (`Engine::open_snapshot`), then every run, page by page. Returns
/// how many runs it read. (The `live_reader` bench's reader, and the
/// `snapshot_cost` example's.)
pub fn look_at_live(dir: &std::path::Path, options: EngineOptions) -> actum::Result<u64> {
    let snapshot = Engine::open_snapshot(dir, options)?;
    let mut after: Option<RunId> = None;
    let mut runs = 0u64;
    loop {
        let page = snapshot.runs(None, after.as_ref(), RUNS_PAGE_MAX)?;
        runs += page.len() as u64;
        match page.last() {
            Some(last) => after = Some(last.id.clone()),
            None => return Ok(runs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OnPeer;
    use crate::group_commit::GroupCommitFile;

    #[test]
    fn every_protocol_is_two_commits() {
        let setup = ProtocolEngine::new(4);
        let before = setup.engine.wal_stats();
        run_protocols(&setup, 4, 20);
        let after = setup.engine.wal_stats();
        assert_eq!(after.appends - before.appends, 40);
        assert!(setup.wal_summary().starts_with("40 commits"));
    }

    #[test]
    fn a_peer_protocol_is_two_records() {
        let peer = OnPeer::new(TwoCommits, GroupCommitFile::new());
        run_writers(&peer, 4, 0, 25);
        assert_eq!(peer.peer.counts().0, 50);
    }
}

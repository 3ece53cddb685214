//! What an operator reads: a metrics snapshot ([`Engine::metrics`]), a sweep
//! of runs stuck past an SLA ([`Engine::stuck`]) and a run's audit journal
//! as JSON lines ([`Engine::export_audit`], schema in docs/AUDIT.md).
//!
//! The counters count what the engine decided since the database was
//! created: each checkpoint stores their totals in the state store's meta
//! table (`metric.NAME`), and an open starts from what the last one stored,
//! so a clean restart keeps them exactly and a crash loses at most what
//! was counted since the last checkpoint. The wait-time samples are kept
//! in memory only. The sweep and the export read the books. Times come from
//! the engine's clock, never the wall clock.
//!
//! **Invariant:** counting reads the decided answer and ops only; it never
//! changes a decision.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::books::{
    Answer, AuditWhat, Begun, BooksRead, Command, EffectKey, EffectKind, EffectStatus, Op, RunId,
    RunState, StepId, WorkerId,
};
use crate::error::{Error, Result};

use super::core::Engine;
use crate::hot::HotView;

/// How many ended waits the wait-time percentiles are taken over (the
/// latest ones).
pub const WAIT_SAMPLES_MAX: usize = 4_096;

/// Counters of what the engine decided since the database was created (as
/// of the last checkpoint before this open, plus since).
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters {
    /// Log records and fsyncs counted before this open (the log's own
    /// counters start at zero at every open).
    commits_before: u64,
    fsyncs_before: u64,
    resumes: u64,
    receipts_served: u64,
    acts_prevented: u64,
    resends: u64,
    queries: u64,
    unknowns: u64,
    decisions_replayed: u64,
    /// How long each of the latest ended waits lasted, ms.
    wait_ms: VecDeque<u64>,
}

impl Counters {
    /// The counters a checkpoint stored, as an open finds them (`metric.`
    /// keys; a counter a store lacks starts at zero).
    pub(crate) fn stored(found: &BTreeMap<String, u64>) -> Counters {
        let get = |name: &str| found.get(name).copied().unwrap_or(0);
        Counters {
            commits_before: get("commits"),
            fsyncs_before: get("fsyncs"),
            resumes: get("resumes"),
            receipts_served: get("receipts_served"),
            acts_prevented: get("acts_prevented"),
            resends: get("resends"),
            queries: get("queries"),
            unknowns: get("unknowns"),
            decisions_replayed: get("decisions_replayed"),
            wait_ms: VecDeque::new(),
        }
    }

    /// Every counter's total by name, as a checkpoint stores them, given
    /// the log's counts since this open.
    pub(crate) fn totals(&self, commits: u64, fsyncs: u64) -> [(&'static str, u64); 9] {
        [
            ("commits", self.commits_before + commits),
            ("fsyncs", self.fsyncs_before + fsyncs),
            ("resumes", self.resumes),
            ("receipts_served", self.receipts_served),
            ("acts_prevented", self.acts_prevented),
            ("resends", self.resends),
            ("queries", self.queries),
            ("unknowns", self.unknowns),
            ("decisions_replayed", self.decisions_replayed),
        ]
    }

    /// No counts, the same samples of wait durations.
    #[cfg(feature = "postgres")]
    pub(crate) fn samples_only(&self) -> Counters {
        Counters {
            wait_ms: self.wait_ms.clone(),
            ..Counters::default()
        }
    }

    /// Adds what `other` counted (one command's count, on the PostgreSQL
    /// backend, where a command that logged ops counts as a commit).
    #[cfg(feature = "postgres")]
    pub(crate) fn add(&mut self, other: Counters, committed: bool) {
        self.commits_before += u64::from(committed) + other.commits_before;
        self.fsyncs_before += other.fsyncs_before;
        self.resumes += other.resumes;
        self.receipts_served += other.receipts_served;
        self.acts_prevented += other.acts_prevented;
        self.resends += other.resends;
        self.queries += other.queries;
        self.unknowns += other.unknowns;
        self.decisions_replayed += other.decisions_replayed;
        for sample in other.wait_ms {
            if self.wait_ms.len() == WAIT_SAMPLES_MAX {
                self.wait_ms.pop_front();
            }
            self.wait_ms.push_back(sample);
        }
    }

    /// Counts one decided command: its answer, and its ops read against
    /// `books`, the books before them.
    pub(crate) fn count(
        &mut self,
        cmd: &Command,
        answer: &Answer,
        ops: &[Op],
        books: &dyn BooksRead,
    ) {
        self.count_answer(cmd, answer);
        for op in ops {
            match op {
                Op::EffectSettled {
                    status: EffectStatus::Unknown { .. },
                    ..
                } => self.unknowns += 1,
                Op::WaitEnded {
                    run, step, at_ms, ..
                } => {
                    if let Some(opened_ms) = books
                        .waits(run)
                        .and_then(|book| book.wait_at(step).map(|w| w.opened_ms))
                    {
                        if self.wait_ms.len() == WAIT_SAMPLES_MAX {
                            self.wait_ms.pop_front();
                        }
                        self.wait_ms.push_back(at_ms.saturating_sub(opened_ms));
                    }
                }
                _ => {}
            }
        }
    }

    fn count_answer(&mut self, cmd: &Command, answer: &Answer) {
        match (cmd, answer) {
            (Command::Batch(cmds), Answer::Batch(answers)) => {
                for (cmd, answer) in cmds.iter().zip(answers) {
                    self.count_answer(cmd, answer);
                }
            }
            // A run leased again: picked up after a crash, a lost lease or
            // a wait (its first lease has the first token).
            (Command::ClaimNext(_) | Command::AcquireLease(_), Answer::Leased { token, .. })
                if token.0 > 1 =>
            {
                self.resumes += 1;
            }
            (_, Answer::Begun(begun)) => match begun {
                Begun::Proceed { .. } => {}
                Begun::Replay { .. } => {
                    self.receipts_served += 1;
                    self.acts_prevented += 1;
                }
                Begun::Resend { .. } => self.resends += 1,
                Begun::Reconcile { .. } => {
                    self.queries += 1;
                    self.acts_prevented += 1;
                }
                Begun::Unknown { .. } | Begun::Failed { .. } | Begun::Compensated { .. } => {
                    self.acts_prevented += 1
                }
            },
            (_, Answer::DecisionReplay { .. }) => self.decisions_replayed += 1,
            _ => {}
        }
    }
}

/// A snapshot of what the engine did since the database was created (as of
/// the last checkpoint before this open, plus since; see the module docs),
/// and of what is stuck now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metrics {
    /// Records logged (each a commit of one or more commands).
    pub commits: u64,
    /// `fdatasync` calls of the log.
    pub fsyncs: u64,
    /// Runs leased again after their first lease: picked up after a
    /// crash, a lost lease or a wait.
    pub resumes: u64,
    /// Begins answered with the receipt the ledger holds (`Replay`).
    pub receipts_served: u64,
    /// Begins that told the caller not to act: a receipt served, a query
    /// asked instead, an unknown outcome left for a person, a compensated
    /// step.
    pub acts_prevented: u64,
    /// Begins that resent an intent with its own key.
    pub resends: u64,
    /// Begins that asked the caller to query the tool.
    pub queries: u64,
    /// Outcomes recorded unknown.
    pub unknowns: u64,
    /// Model calls answered from the decision journal.
    pub decisions_replayed: u64,
    /// Waits ended, among the latest `WAIT_SAMPLES_MAX`, the percentiles
    /// are over.
    pub waits_ended: usize,
    /// The median time a wait lasted, ms (0 with no wait ended).
    pub wait_p50_ms: u64,
    /// The 95th percentile of the time a wait lasted, ms.
    pub wait_p95_ms: u64,
    /// Runs [`Engine::stuck`] finds past the SLA the snapshot was asked
    /// with.
    pub stuck: usize,
}

impl Metrics {
    /// Records per fsync: the mean group commit (0 before any fsync).
    pub fn mean_group(&self) -> f64 {
        if self.fsyncs == 0 {
            return 0.0;
        }
        self.commits as f64 / self.fsyncs as f64
    }
}

/// Why a run is stuck.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum StuckReason {
    /// Its wait at `step` has been open since `since_ms`.
    Waiting {
        /// The waiting step.
        step: StepId,
        /// What it waits for, in words.
        waits_for: String,
        /// When the wait opened, ms since the epoch.
        since_ms: u64,
    },
    /// The outcome of effect `key` has been unknown since `since_ms`: a
    /// person must reconcile it.
    Unknown {
        /// The effect.
        key: EffectKey,
        /// When it was recorded unknown, ms since the epoch.
        since_ms: u64,
    },
    /// The run compensates, and its compensation `key` failed for good
    /// since `since_ms`: the saga cannot end by itself (a person settles
    /// the step by hand, then an operator abandons the saga).
    CompensationFailed {
        /// The compensation's attempt.
        key: EffectKey,
        /// When it failed, ms since the epoch.
        since_ms: u64,
    },
}

/// A run stuck past an SLA, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Stuck {
    /// The run.
    pub run: RunId,
    /// Why.
    pub reason: StuckReason,
}

/// One line of the audit export (docs/AUDIT.md).
#[derive(Serialize)]
struct AuditLine<'a> {
    run: &'a str,
    /// The run's trace id, so a line joins the traces it belongs to.
    trace_id: &'a str,
    seq: u64,
    at_ms: u64,
    what: String,
    why: &'a str,
    token: Option<u64>,
    worker: Option<String>,
    effect_key: Option<String>,
}

/// The `p`-th percentile (0 to 100) of sorted `values`, nearest rank.
fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// Why `run` is stuck at `cutoff` (a wait opened, or an effect unknown,
/// no later than it), in the order the sweep lists them.
fn stuck_for(view: &dyn BooksRead, run: &RunId, cutoff: u64) -> Vec<Stuck> {
    let mut stuck = Vec::new();
    if let Some(wait) = view
        .waits(run)
        .and_then(|book| book.open_wait().cloned())
        .filter(|w| w.opened_ms <= cutoff)
    {
        stuck.push(Stuck {
            run: run.clone(),
            reason: StuckReason::Waiting {
                step: wait.step,
                waits_for: wait.wait_for.to_string(),
                since_ms: wait.opened_ms,
            },
        });
    }
    for entry in super::reads::effects_by_intent(view, run) {
        let since_ms = entry.settled_ms.unwrap_or(entry.intended_ms);
        let reason = match (&entry.status, entry.key.kind()) {
            (EffectStatus::Unknown { .. }, _) => StuckReason::Unknown {
                key: entry.key,
                since_ms,
            },
            (EffectStatus::Failed { retryable, .. }, EffectKind::Undo)
                if !retryable && compensation_blocks(view, &entry.key) =>
            {
                StuckReason::CompensationFailed {
                    key: entry.key,
                    since_ms,
                }
            }
            _ => continue,
        };
        if since_ms <= cutoff {
            stuck.push(Stuck {
                run: run.clone(),
                reason,
            });
        }
    }
    stuck
}

/// True if `undo`, failed for good, is the latest compensation of its step
/// in a compensating run: what holds the saga.
fn compensation_blocks(view: &dyn BooksRead, undo: &EffectKey) -> bool {
    let compensating = view
        .run(undo.run())
        .is_some_and(|r| r.state == RunState::Compensating);
    let latest = view.latest_effect(undo.run(), undo.step(), EffectKind::Undo);
    compensating && latest.is_some_and(|l| l.key == *undo)
}

impl Engine {
    /// What the engine did since it was opened, and how many runs are
    /// stuck past `stuck_after_ms` (see [`Engine::stuck`]).
    ///
    /// ```
    /// use actum::books::{Outcome, StepId, ToolClass};
    /// use actum::engine::{Engine, EngineOptions, StepRequest, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("crm-1")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"1"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let before = engine.metrics(3_600_000)?;
    /// let request = StepRequest { guard: &lease.guard, run: &run, step: &StepId::new("update")?,
    ///     tool: ToolSpec { name: "crm.update".into(), class: ToolClass::Queryable },
    ///     args: b"stage: won", rationale: "deal signed", compensation: None };
    /// engine.step(&request, |_| Outcome::Confirmed { receipt: b"ok".to_vec() })?;
    /// engine.step(&request, |_| unreachable!("served from the ledger"))?;
    /// let after = engine.metrics(3_600_000)?;
    /// // The intent and the outcome were logged; the repeat logged nothing.
    /// assert_eq!(after.commits, before.commits + 2);
    /// assert_eq!((after.receipts_served, after.acts_prevented), (1, 1));
    /// assert!(after.fsyncs > before.fsyncs && after.mean_group() > 0.0);
    /// assert_eq!(after.stuck, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn metrics(&self, stuck_after_ms: u64) -> Result<Metrics> {
        #[cfg(feature = "postgres")]
        let counters = match self.postgres() {
            Some(pg) => pg.counters()?,
            None => self.lock().counters.clone(),
        };
        #[cfg(not(feature = "postgres"))]
        let counters = self.lock().counters.clone();
        let wal = self.wal_stats();
        let mut waits: Vec<u64> = counters.wait_ms.iter().copied().collect();
        waits.sort_unstable();
        Ok(Metrics {
            commits: counters.commits_before + wal.appends,
            fsyncs: counters.fsyncs_before + wal.fsyncs,
            resumes: counters.resumes,
            receipts_served: counters.receipts_served,
            acts_prevented: counters.acts_prevented,
            resends: counters.resends,
            queries: counters.queries,
            unknowns: counters.unknowns,
            decisions_replayed: counters.decisions_replayed,
            waits_ended: waits.len(),
            wait_p50_ms: percentile(&waits, 50),
            wait_p95_ms: percentile(&waits, 95),
            stuck: self.stuck(stuck_after_ms)?.len(),
        })
    }

    /// Every counter's total by name, as a checkpoint stores them.
    pub(crate) fn counter_totals(&self) -> [(&'static str, u64); 9] {
        let wal = self.wal_stats();
        self.lock().counters.totals(wal.appends, wal.fsyncs)
    }

    /// Stores the counters' totals if they changed since the state store
    /// last stored them (a close whose checkpoint had no record to write,
    /// after commands that logged nothing, such as receipts served).
    pub(crate) fn store_counters(&self) -> Result<()> {
        let totals = self.counter_totals();
        let stored = self.local().pipeline.state().read_metrics()?;
        if totals
            .iter()
            .all(|(name, value)| stored.get(*name) == Some(value))
        {
            return Ok(());
        }
        let path = self.local().pipeline.state().path().to_path_buf();
        let applied = self.local().pipeline.state().applied_lsn();
        self.local()
            .pipeline
            .materialize_durably((applied.next(), applied), |txn| {
                crate::state::write_metrics(txn, &path, &totals)
            })
            .map(|_| ())
    }

    /// The runs not over that are stuck: a wait open for at least
    /// `older_than_ms`, an effect whose outcome has been unknown that long,
    /// or, in a compensating run, a compensation that failed for good that
    /// long (see [`StuckReason`]). In run id order; a run may be listed
    /// once per reason. Reads every run (it is a sweep, not a query).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use actum::books::{StepId, WaitFor};
    /// use actum::engine::{Engine, EngineOptions, StuckReason};
    /// use actum::{FsStorage, ManualClock};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// const HOUR: u64 = 3_600_000;
    /// let dir = tempfile::tempdir()?;
    /// let clock = Arc::new(ManualClock::new(1_000));
    /// let engine = Engine::open_with(Arc::new(FsStorage::new()), clock.clone(), dir.path(),
    ///     EngineOptions::default())?;
    /// # let run = RunId::new("kyc-3")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"3"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let step = StepId::new("await-documents")?;
    /// let docs = WaitFor::Signal { name: "docs".into() };
    /// engine.open_wait(&run, &lease.guard, &step, docs, None, "ask the customer")?;
    /// clock.advance_ms(2 * HOUR);
    /// let stuck = engine.stuck(HOUR)?;
    /// assert_eq!(stuck.len(), 1);
    /// assert_eq!(stuck[0].run, run);
    /// assert!(matches!(&stuck[0].reason, StuckReason::Waiting { step: s, since_ms: 1_000, .. } if *s == step));
    /// assert!(engine.stuck(3 * HOUR)?.is_empty(), "within that SLA");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stuck(&self, older_than_ms: u64) -> Result<Vec<Stuck>> {
        const PAGE: usize = 1_000;
        let cutoff = self.clock.now_ms().saturating_sub(older_than_ms);
        let skips_parked = self.planted(crate::planted::PlantedBug::SweepSkipsParked);
        let mut stuck = Vec::new();
        let mut after: Option<RunId> = None;
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            loop {
                let last = pg.read_books(|books, _| {
                    let page = books.runs_after(None, after.as_ref(), PAGE);
                    after = page.last().map(|r| r.id.clone());
                    for run in page.iter().filter(|r| !r.state.is_terminal()) {
                        stuck.extend(stuck_for(books, &run.id, cutoff));
                    }
                    Ok(page.len() < PAGE)
                })?;
                if last {
                    return Ok(stuck);
                }
            }
        }
        loop {
            // One read of the books per page: the lock is let go between
            // pages, so commits go on while a long sweep runs.
            let last = self.read_hot(|hot, cold| {
                let page = hot.runs_page(cold, None, after.as_ref(), PAGE);
                after = page.last().map(|r| r.id.clone());
                let view = HotView { hot, cold };
                for run in page.iter().filter(|r| !r.state.is_terminal()) {
                    if skips_parked && !hot.runs.contains_key(&run.id) {
                        continue;
                    }
                    stuck.extend(stuck_for(&view, &run.id, cutoff));
                }
                Ok(page.len() < PAGE)
            })?;
            if last {
                return Ok(stuck);
            }
        }
    }

    /// Writes the audit journal of `run` to `out` as JSON lines, one entry
    /// a line, in order (schema: docs/AUDIT.md); returns how many lines.
    /// `NotFound` for a run that does not exist; a failed write names the
    /// run and the line.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("claim-5")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"5"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// engine.acquire_lease(&run, &WorkerId::new("w1")?, 30_000)?;
    /// let mut out = Vec::new();
    /// let lines = engine.export_audit(&run, &mut out)?;
    /// assert_eq!(lines, engine.audit(&run)?.len() as u64);
    /// // One JSON object a line, in journal order, naming the worker behind a token.
    /// let text = String::from_utf8(out)?;
    /// let parsed: Vec<serde_json::Value> =
    ///     text.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    /// assert_eq!(parsed.len() as u64, lines);
    /// assert_eq!((parsed[0]["run"].as_str(), parsed[0]["seq"].as_u64()), (Some("claim-5"), Some(1)));
    /// assert_eq!(parsed[0]["trace_id"].as_str(), Some("t"));
    /// assert_eq!(parsed[1]["worker"].as_str(), Some("w1"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn export_audit(&self, run: &RunId, out: &mut dyn Write) -> Result<u64> {
        let entries = self.audit(run)?;
        let trace_id = self.run(run)?.map(|r| r.trace_id).unwrap_or_default();
        // The worker behind each token: every lease grant is journaled
        // with the worker it went to, and tokens only grow.
        let mut holders: BTreeMap<u64, &WorkerId> = BTreeMap::new();
        let mut lines = 0;
        for entry in &entries {
            if let (AuditWhat::LeaseAcquired { worker, .. }, Some(token)) =
                (&entry.what, entry.token)
            {
                holders.insert(token.0, worker);
            }
            let worker = entry.token.and_then(|t| holders.get(&t.0).copied());
            let effect_key = match &entry.what {
                AuditWhat::Intended { key, .. }
                | AuditWhat::Resent { key }
                | AuditWhat::Settled { key, .. } => Some(key),
                _ => None,
            };
            let line = AuditLine {
                run: run.as_str(),
                trace_id: &trace_id,
                seq: entry.seq,
                at_ms: entry.at_ms,
                what: entry.what.to_string(),
                why: &entry.why,
                token: entry.token.map(|t| t.0),
                worker: worker.map(|w| w.as_str().to_string()),
                effect_key: effect_key.map(|k| k.to_string()),
            };
            let written = serde_json::to_writer(&mut *out, &line)
                .map_err(std::io::Error::from)
                .and_then(|()| out.write_all(b"\n"));
            written.map_err(|source| Error::Io {
                op: "write a line of an audit export",
                path: PathBuf::from(format!("<audit of run {run}, line {}>", entry.seq)),
                source,
            })?;
            lines += 1;
        }
        Ok(lines)
    }
}

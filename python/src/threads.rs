//! `actum._actum._ThreadBooks`: the engine calls the LangGraph checkpointer
//! (`actum.langgraph.ActumSaver`, python/actum/langgraph.py) is built on.
//!
//! A LangGraph thread is kept as engine runs of the agent version
//! [`THREAD_AGENT`]: each `put` or `put_writes` is one checkpoint of the
//! thread's run (one command, so it lands whole or not at all), and a run is
//! retired (cancelled and pruned) when the saver rewrites or deletes the
//! thread. The saver holds each thread run's lease itself, under the worker
//! [`THREAD_WORKER`]; a lease lost (it ran out, or the database was opened
//! again) is taken again on the next save. The layout of the parts is the
//! saver's; this module only moves bytes, releasing the GIL while the engine
//! works.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use actum::books::{
    BooksRead, CheckpointMeta, CreateRun, Guard, LEASE_TTL_MS_MAX, PRUNE_RUNS_MAX, Part, PartBase,
    Run, RunId, RunState, SaveCheckpoint, StepId, ToolClass, Transition, WorkerId, digest_of,
    load_parts,
};
use actum::engine::{StepPlan, StepRequest, StepResult, ToolSpec};
use actum::{Engine, Error};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::engine::PyEngine;
use crate::errors::error_to_py;
use crate::tool::outcome_of;

/// The agent version of a thread run: runtimes claim only the agents they
/// serve, so they never take one.
pub(crate) const THREAD_AGENT: &str = "langgraph-thread";
/// The worker that holds thread runs' leases.
const THREAD_WORKER: &str = "langgraph-saver";
/// The schema version of a thread run's checkpoints.
const THREAD_SCHEMA: u32 = 1;
/// Runs read per page while listing.
const PAGE: usize = 1_000;

/// Engine calls for the LangGraph checkpointer: thread runs, their
/// checkpoints and their retirement. One per engine (the saver keeps it
/// with the engine), so the leases it caches are the only ones.
#[pyclass(module = "actum", name = "_ThreadBooks", frozen)]
pub struct ThreadBooks {
    engine: Py<PyEngine>,
    worker: WorkerId,
    guards: Mutex<BTreeMap<RunId, Guard>>,
}

impl ThreadBooks {
    fn engine(&self) -> PyResult<Arc<Engine>> {
        self.engine.get().engine()
    }

    fn guard_of(&self, run: &RunId) -> Option<Guard> {
        self.guards
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(run)
            .cloned()
    }

    /// Part `part` of the checkpoints of thread run `name` that `versions`
    /// picks (given the run's newest version), in one read.
    fn parts_of<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        part: &str,
        versions: impl FnOnce(u64) -> Vec<u64> + Send,
    ) -> PyResult<Vec<(u64, Option<Bound<'py, PyBytes>>)>> {
        let engine = self.engine()?;
        let run = run_id(py, name)?;
        let found = py
            .detach(|| {
                engine.read(|books| {
                    let latest = books.checkpoint_latest(&run).map_or(0, |m| m.version);
                    let mut found = Vec::new();
                    for version in versions(latest) {
                        let meta = books.checkpoint_at(&run, version).ok_or_else(|| {
                            Error::Inconsistent {
                                what: format!(
                                    "thread run {run} has checkpoint {latest} but not {version}"
                                ),
                            }
                        })?;
                        found.push((version, read_part(books, &meta, part)?));
                    }
                    Ok(found)
                })
            })
            .map_err(|e| error_to_py(py, &e))?;
        Ok(found
            .into_iter()
            .map(|(v, bytes)| (v, bytes.map(|b| PyBytes::new(py, &b))))
            .collect())
    }

    /// The thread runs whose names start with `prefix` (which ends with
    /// `.`, sorting before every name character after it), in name order.
    fn thread_runs(&self, py: Python<'_>, engine: &Engine, prefix: &str) -> PyResult<Vec<Run>> {
        let start = prefix.strip_suffix('.').unwrap_or(prefix);
        let start = run_id(py, start)?;
        py.detach(|| {
            let mut found = Vec::new();
            let mut after = start;
            // A thread has a run or two: the first page is small (each run
            // in it is read whole), and the pages grow from there.
            let mut page_len = 2;
            loop {
                let page = engine.runs(None, Some(&after), page_len)?;
                let Some(last) = page.last() else { break };
                after = last.id.clone();
                let full = page.len() == page_len;
                page_len = (page_len * 4).min(PAGE);
                let mut past = false;
                for run in page {
                    if !run.id.as_str().starts_with(prefix) {
                        past = true;
                        break;
                    }
                    if run.agent_version == THREAD_AGENT {
                        found.push(run);
                    }
                }
                if past || !full {
                    break;
                }
            }
            Ok(found)
        })
        .map_err(|e: Error| error_to_py(py, &e))
    }

    fn forget(&self, run: &RunId) {
        self.guards
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(run);
    }

    /// The lease on `run`, taken if this saver does not hold it. The map
    /// stays locked while it is taken, so two Python threads calling at
    /// once (a ToolNode runs its calls in parallel) take it once.
    fn lease(&self, engine: &Engine, run: &RunId) -> Result<Guard, Error> {
        let mut guards = self.guards.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(guard) = guards.get(run) {
            return Ok(guard.clone());
        }
        let grant = engine.acquire_lease(run, &self.worker, LEASE_TTL_MS_MAX)?;
        if engine
            .run(run)?
            .is_some_and(|r| r.state == RunState::Pending)
        {
            // Effects begin only in a running run.
            engine.transition(Transition {
                run: run.clone(),
                guard: grant.guard.clone(),
                to: RunState::Running,
                expected_version: None,
                reason: "the LangGraph saver holds the thread".into(),
            })?;
        }
        guards.insert(run.clone(), grant.guard.clone());
        Ok(grant.guard)
    }

    /// Creates the thread run `run` with `input` unless it exists (with
    /// another input: `RunInputMismatch`).
    fn ensure_run(&self, engine: &Engine, run: &RunId, input: &[u8]) -> Result<(), Error> {
        if self.guard_of(run).is_some() {
            // Leased by this saver: it exists.
            return Ok(());
        }
        engine.create_run(CreateRun {
            run: run.clone(),
            input_digest: digest_of(input),
            agent_version: THREAD_AGENT.into(),
            trace_id: String::new(),
            parent: None,
            input: Some(input.to_vec()),
        })?;
        Ok(())
    }

    /// Runs `call` under the lease on `run`; once more with a fresh lease if
    /// the cached one was lost (it ran out, or an open of the database ended
    /// it).
    fn leased<T>(
        &self,
        engine: &Engine,
        run: &RunId,
        call: impl Fn(Guard) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let guard = self.lease(engine, run)?;
        match call(guard) {
            Err(Error::LeaseLost { .. } | Error::Fenced { .. }) => {
                self.forget(run);
                let guard = self.lease(engine, run)?;
                call(guard)
            }
            other => other,
        }
    }
}

/// A part as the saver hands it in: name, bytes, and for the append form
/// the (version, part name) it extends.
type PartIn = (String, Vec<u8>, Option<(u64, String)>);

/// What `step` answers: status, key, receipt or reason, and the exception
/// the act or query raised, if any.
type StepAnswer<'py> = (&'static str, String, Bound<'py, PyBytes>, Option<Py<PyAny>>);

/// The bytes of the part `wanted` of the checkpoint `meta` (None if it has
/// no such part): its blob, or its chunks, each checked against its digest
/// and size, and a chunked part's whole against its own.
fn read_part(
    books: &dyn BooksRead,
    meta: &CheckpointMeta,
    wanted: &str,
) -> Result<Option<Vec<u8>>, Error> {
    let Some(part) = meta.parts.iter().find(|p| p.name == wanted) else {
        return Ok(None);
    };
    let only = CheckpointMeta {
        parts: vec![part.clone()],
        ..meta.clone()
    };
    let loaded = load_parts(books, only)?;
    Ok(loaded.parts.into_iter().next().map(|p| p.bytes))
}

fn run_id(py: Python<'_>, name: &str) -> PyResult<RunId> {
    RunId::new(name).map_err(|e| error_to_py(py, &e))
}

#[pymethods]
impl ThreadBooks {
    #[new]
    fn new(py: Python<'_>, engine: Py<PyEngine>) -> PyResult<Self> {
        let worker = WorkerId::new(THREAD_WORKER).map_err(|e| error_to_py(py, &e))?;
        Ok(ThreadBooks {
            engine,
            worker,
            guards: Mutex::new(BTreeMap::new()),
        })
    }

    /// The thread runs whose names start with `prefix`, in name order:
    /// `(name, state, newest checkpoint version or None)`. `prefix` ends
    /// with `.`, which sorts before every name character after it.
    fn runs(&self, py: Python<'_>, prefix: &str) -> PyResult<Vec<(String, String, Option<u64>)>> {
        let engine = self.engine()?;
        let runs = self.thread_runs(py, &engine, prefix)?;
        py.detach(|| {
            engine.read(|books| {
                let newest = |run: &RunId| books.checkpoint_latest(run).map(|m| m.version);
                Ok(runs
                    .into_iter()
                    .map(|run| (run.id.to_string(), run.state.to_string(), newest(&run.id)))
                    .collect())
            })
        })
        .map_err(|e: Error| error_to_py(py, &e))
    }

    /// What a read of a thread needs of its runs (those `runs` finds for
    /// `prefix`), in one read: `(name, state, newest checkpoint version or
    /// None, part plan of its first checkpoint or None, whether it was
    /// created with input `input`)`.
    #[allow(clippy::type_complexity)]
    fn generations<'py>(
        &self,
        py: Python<'py>,
        prefix: &str,
        input: &[u8],
    ) -> PyResult<
        Vec<(
            String,
            String,
            Option<u64>,
            Option<Bound<'py, PyBytes>>,
            bool,
        )>,
    > {
        let engine = self.engine()?;
        let runs = self.thread_runs(py, &engine, prefix)?;
        let wanted = digest_of(input);
        let found = py
            .detach(|| {
                engine.read(|books| {
                    let mut found = Vec::with_capacity(runs.len());
                    for run in runs {
                        let newest = books.checkpoint_latest(&run.id).map(|m| m.version);
                        let plan = match books.checkpoint_at(&run.id, 1) {
                            Some(first) => read_part(books, &first, "plan")?,
                            None => None,
                        };
                        let same = run.input_digest == wanted;
                        found.push((
                            run.id.to_string(),
                            run.state.to_string(),
                            newest,
                            plan,
                            same,
                        ));
                    }
                    Ok(found)
                })
            })
            .map_err(|e: Error| error_to_py(py, &e))?;
        Ok(found
            .into_iter()
            .map(|(name, state, newest, plan, same)| {
                (
                    name,
                    state,
                    newest,
                    plan.map(|b| PyBytes::new(py, &b)),
                    same,
                )
            })
            .collect())
    }

    /// The input a thread run was created with (the thread's id), or None.
    fn input<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let engine = self.engine()?;
        let run = run_id(py, name)?;
        let input = py
            .detach(|| engine.run_input(&run))
            .map_err(|e| error_to_py(py, &e))?;
        Ok(input.map(|b| PyBytes::new(py, &b)))
    }

    /// Saves `parts` (`(name, bytes, None)`, or `(name, new bytes,
    /// (version, part))` for a part that is part `part` of checkpoint
    /// `version` followed by the new bytes: the engine's append form) as the
    /// next checkpoint of the thread run `name`,
    /// creating the run with `input` first if it does not exist (a run that
    /// exists with another input raises `RunInputMismatch`). Returns the
    /// checkpoint's version and the bytes it wrote (parts whose bytes the
    /// engine held already are not written again). The parts named in
    /// `inline` ask to be held in the checkpoint's metadata if they fit
    /// (`Part::held_inline`): small parts that change with every save.
    #[pyo3(signature = (name, input, parts, inline=Vec::new()))]
    fn save(
        &self,
        py: Python<'_>,
        name: &str,
        input: Vec<u8>,
        parts: Vec<PartIn>,
        inline: Vec<String>,
    ) -> PyResult<(u64, u64)> {
        let engine = self.engine()?;
        let run = run_id(py, name)?;
        let parts: Vec<Part> = parts
            .into_iter()
            .map(|(name, bytes, base)| {
                let held = inline.contains(&name);
                let part = match base {
                    None => Part::whole(name, bytes),
                    Some((version, of)) => Part::append(name, PartBase::new(version, of), bytes),
                };
                if held { part.held_inline() } else { part }
            })
            .collect();
        py.detach(|| {
            self.ensure_run(&engine, &run, &input)?;
            let saved = self.leased(&engine, &run, |guard| {
                engine.save_checkpoint(SaveCheckpoint {
                    run: run.clone(),
                    guard,
                    schema_version: THREAD_SCHEMA,
                    parts: parts.clone(),
                })
            })?;
            Ok((saved.version, saved.bytes_written))
        })
        .map_err(|e: Error| error_to_py(py, &e))
    }

    /// The parts named `names` of checkpoint `version` of the thread run
    /// `name`, in that order (None for a name the checkpoint lacks); only
    /// those parts are read, each checked against its digest. `NotFound` if
    /// the run has no such checkpoint.
    fn load<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        version: u64,
        names: Vec<String>,
    ) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
        let engine = self.engine()?;
        let run = run_id(py, name)?;
        let loaded = py
            .detach(|| {
                engine.read(|books| {
                    let meta =
                        books
                            .checkpoint_at(&run, version)
                            .ok_or_else(|| Error::NotFound {
                                what: format!("checkpoint {version} of thread run {run}"),
                            })?;
                    names
                        .iter()
                        .map(|wanted| read_part(books, &meta, wanted))
                        .collect::<Result<Vec<_>, Error>>()
                })
            })
            .map_err(|e| error_to_py(py, &e))?;
        Ok(loaded
            .into_iter()
            .map(|bytes| bytes.map(|b| PyBytes::new(py, &b)))
            .collect())
    }

    /// The part `part` of every checkpoint of the thread run `name` from
    /// version `from` on (to version `to`, if given), oldest first, in one
    /// read: `(version, bytes or None)`.
    #[pyo3(signature = (name, part, from, to=None))]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        part: &str,
        from: u64,
        to: Option<u64>,
    ) -> PyResult<Vec<(u64, Option<Bound<'py, PyBytes>>)>> {
        self.parts_of(py, name, part, |latest| {
            (from.max(1)..=to.map_or(latest, |to| to.min(latest))).collect()
        })
    }

    /// The part `part` of the checkpoints `versions` of the thread run
    /// `name` (those up to its newest), in the order given, in one read:
    /// `(version, bytes or None)`.
    fn pick<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        part: &str,
        versions: Vec<u64>,
    ) -> PyResult<Vec<(u64, Option<Bound<'py, PyBytes>>)>> {
        self.parts_of(py, name, part, |latest| {
            versions
                .into_iter()
                .filter(|v| (1..=latest).contains(v))
                .collect()
        })
    }

    /// Ends and removes the thread runs `names` (those that exist): each is
    /// cancelled, then pruned with its checkpoints and the blobs no other
    /// run references. Raises if one could not be pruned, naming it and
    /// why.
    fn retire(&self, py: Python<'_>, names: Vec<String>) -> PyResult<()> {
        let engine = self.engine()?;
        let runs = names
            .iter()
            .map(|n| run_id(py, n))
            .collect::<PyResult<Vec<_>>>()?;
        py.detach(|| {
            let mut ended = Vec::new();
            for run in runs {
                let Some(record) = engine.run(&run)? else {
                    self.forget(&run);
                    continue;
                };
                if !record.state.is_terminal() {
                    self.leased(&engine, &run, |guard| {
                        engine.transition(Transition {
                            run: run.clone(),
                            guard,
                            to: RunState::Cancelled,
                            expected_version: None,
                            reason: "the LangGraph thread was rewritten or deleted".into(),
                        })
                    })?;
                }
                self.forget(&run);
                ended.push(run);
            }
            if ended.is_empty() {
                return Ok(());
            }
            for chunk in ended.chunks(PRUNE_RUNS_MAX) {
                let pruned = engine.prune_runs(chunk.to_vec(), 0)?;
                if let Some((run, why)) = pruned.kept.first() {
                    return Err(Error::Inconsistent {
                        what: format!("thread run {run} was ended but not pruned: {why}"),
                    });
                }
            }
            Ok(())
        })
        .map_err(|e: Error| error_to_py(py, &e))
    }

    /// Lets go of every thread run's lease this saver holds, in batches of
    /// one commit each: called as the saver's database closes, so the next
    /// open has no lease of this process to release and leaves every thread
    /// out of memory until it is used. A lease refused because it ran out or
    /// was taken meanwhile is left out; returns how many were released.
    fn release(&self, py: Python<'_>) -> PyResult<u64> {
        let engine = self.engine()?;
        let guards: Vec<Guard> =
            std::mem::take(&mut *self.guards.lock().unwrap_or_else(PoisonError::into_inner))
                .into_values()
                .collect();
        py.detach(|| engine.release_leases(&guards))
            .map_err(|e: Error| error_to_py(py, &e))
    }

    /// One exactly-once call through the ledger of the thread run `name`
    /// (created with `input` if it does not exist): the step `step` of the
    /// tool `tool` of class `kind` (`"idempotent"` with `window_ms`,
    /// `"queryable"`, `"not_idempotent"`) with `args`. A call confirmed
    /// before answers its stored receipt and calls nothing; otherwise the
    /// intent is made durable, then `act(key, token, resend)` is called (or,
    /// for an ambiguous earlier intent on a queryable tool, `query(key,
    /// token)`), and its outcome recorded. Returns `(status, key, bytes)`:
    /// `("done", key, receipt)`, `("replayed", key, receipt)`,
    /// `("failed", key, reason)`, `("retryable", key, reason)` or
    /// `("unknown", key, reason)`, each with the exception the act or query
    /// raised, if it did (recorded as the outcome `outcome_of` maps it to).
    #[pyo3(signature = (name, input, step, tool, kind, args, act, query=None, window_ms=None))]
    #[allow(clippy::too_many_arguments, reason = "one call's facts")]
    fn step<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        input: Vec<u8>,
        step: &str,
        tool: String,
        kind: &str,
        args: Vec<u8>,
        act: Py<PyAny>,
        query: Option<Py<PyAny>>,
        window_ms: Option<u64>,
    ) -> PyResult<StepAnswer<'py>> {
        let engine = self.engine()?;
        let run = run_id(py, name)?;
        let step = StepId::new(step).map_err(|e| error_to_py(py, &e))?;
        let class = match (kind, window_ms) {
            ("idempotent", Some(dedup_window_ms)) => ToolClass::Idempotent { dedup_window_ms },
            ("idempotent", None) => {
                return Err(PyValueError::new_err(
                    "an idempotent tool needs window_ms: how long it remembers a key",
                ));
            }
            ("queryable", _) => ToolClass::Queryable,
            ("not_idempotent", _) => ToolClass::NotIdempotent,
            (other, _) => {
                return Err(PyValueError::new_err(format!(
                    "unknown tool kind {other:?}: idempotent, queryable or not_idempotent"
                )));
            }
        };
        if class == ToolClass::Queryable && query.is_none() {
            return Err(PyValueError::new_err(format!(
                "the queryable tool {tool} needs a query: how to ask whether a key took effect"
            )));
        }
        let spec = ToolSpec { name: tool, class };
        let (plan, guard) = py
            .detach(|| {
                self.ensure_run(&engine, &run, &input)?;
                self.leased(&engine, &run, |guard| {
                    let request = StepRequest {
                        guard: &guard,
                        run: &run,
                        step: &step,
                        tool: spec.clone(),
                        args: &args,
                        rationale: "a LangGraph tool call",
                        compensation: None,
                    };
                    Ok((engine.begin_step(&request)?, guard.clone()))
                })
            })
            .map_err(|e: Error| error_to_py(py, &e))?;
        let (result, raised) = match plan {
            StepPlan::Done(result) => (result, None),
            StepPlan::Act(ctx) => {
                let called = act
                    .bind(py)
                    .call1((ctx.key.encode(), ctx.token.0, ctx.resend));
                let (outcome, raised) = outcome_of(py, called, false);
                let result = py
                    .detach(|| engine.finish_step(&guard, &ctx, outcome))
                    .map_err(|e| error_to_py(py, &e))?;
                (result, raised)
            }
            StepPlan::Query(ctx) => {
                let Some(query) = &query else {
                    unreachable!("a queryable tool was given a query above");
                };
                let called = query.bind(py).call1((ctx.key.encode(), ctx.token.0));
                let (outcome, raised) = outcome_of(py, called, true);
                let result = py
                    .detach(|| engine.resolve_step(&guard, &ctx, outcome))
                    .map_err(|e| error_to_py(py, &e))?;
                (result, raised)
            }
        };
        let (status, key, bytes): (&'static str, _, Vec<u8>) = match result {
            StepResult::Done {
                key,
                receipt,
                replayed,
            } => (if replayed { "replayed" } else { "done" }, key, receipt),
            StepResult::Failed {
                key,
                retryable,
                reason,
            } => (
                if retryable { "retryable" } else { "failed" },
                key,
                reason.into_bytes(),
            ),
            StepResult::Unknown { key, reason } => ("unknown", key, reason.into_bytes()),
            StepResult::NeedsReconcile { key, .. } => (
                "unknown",
                key,
                b"an ambiguous call on a queryable tool awaits its query".to_vec(),
            ),
            StepResult::Compensated { key } => (
                "failed",
                key,
                b"the call was undone by its compensation".to_vec(),
            ),
        };
        let raised = raised.map(|e| e.into_value(py).into_any());
        Ok((status, key.encode(), PyBytes::new(py, &bytes), raised))
    }

    /// The engine's commits and log fsyncs since it opened: their ratio is
    /// the mean group commit (`Metrics::mean_group`, docs/API.md).
    fn commits_and_fsyncs(&self, py: Python<'_>) -> PyResult<(u64, u64)> {
        let engine = self.engine()?;
        let metrics = py
            .detach(|| engine.metrics(u64::MAX))
            .map_err(|e| error_to_py(py, &e))?;
        Ok((metrics.commits, metrics.fsyncs))
    }

    fn __repr__(&self) -> String {
        format!("_ThreadBooks({:?})", self.engine.get().path())
    }
}

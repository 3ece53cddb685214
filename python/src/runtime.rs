//! `actum.Runtime`: serves Python agent functions over an engine.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actum::books::{RunId, WorkerId};
use actum::runtime::{Driven, Runtime, RuntimeOptions};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::engine::{PyEngine, closed_error};
use crate::errors::error_to_py;
use crate::fork;
use crate::handler::drive;
use crate::replies::PyUsage;
use crate::tool::{PyTool, undo_handler};

/// A runtime's hold on its engine; `Engine.close` empties it.
pub(crate) type RuntimeSlot = Mutex<Option<Runtime>>;

/// What `Runtime.start` did.
#[pyclass(module = "actum", name = "Started", frozen, get_all)]
pub struct Started {
    /// The run.
    run_id: String,
    /// False if the run existed with this input already.
    created: bool,
    /// The agent serving it, `kind@version`.
    agent: String,
}

#[pymethods]
impl Started {
    fn __repr__(&self) -> String {
        format!(
            "Started(run_id={:?}, created={}, agent={:?})",
            self.run_id,
            if self.created { "True" } else { "False" },
            self.agent
        )
    }
}

/// What driving one run came to (`Runtime.work_once`): `outcome` is
/// `"completed"`, `"ended"` (failed or cancelled: `detail` is the state),
/// `"compensating"`, `"parked"` (`detail`: the step it waits at),
/// `"paused"` (`detail`: why), `"lease_lost"`, `"shut_down"` or
/// `"skipped"` (`detail`: why).
#[pyclass(module = "actum", name = "Worked", frozen, get_all)]
pub struct Worked {
    /// The run.
    run_id: String,
    /// What became of it.
    outcome: &'static str,
    /// The state, step or reason, when there is one.
    detail: Option<String>,
}

#[pymethods]
impl Worked {
    fn __repr__(&self) -> String {
        let detail = self
            .detail
            .as_deref()
            .map_or_else(|| "None".to_string(), |d| format!("{d:?}"));
        format!(
            "Worked(run_id={:?}, outcome={:?}, detail={detail})",
            self.run_id, self.outcome
        )
    }
}

impl Worked {
    fn of(run: &RunId, driven: Driven) -> Worked {
        let (outcome, detail) = match driven {
            Driven::Completed => ("completed", None),
            Driven::Ended(state) => ("ended", Some(state.to_string())),
            Driven::Compensating => ("compensating", None),
            Driven::Parked(step) => ("parked", Some(step)),
            Driven::Paused(why) => ("paused", Some(why)),
            Driven::LeaseLost => ("lease_lost", None),
            Driven::ShutDown => ("shut_down", None),
            Driven::Skipped(why) => ("skipped", Some(why)),
            Driven::Interrupted(why) => ("interrupted", Some(why)),
            // A new way a drive can end: named by its debug form.
            #[allow(unreachable_patterns)]
            other => ("other", Some(format!("{other:?}"))),
        };
        Worked {
            run_id: run.to_string(),
            outcome,
            detail,
        }
    }
}

/// The durable runtime over an engine: serves agent functions, each a
/// Python function `agent(ctx) -> bytes` written as straight-line code.
/// Resumption is replay: after a crash, a wait or a restart the function is
/// called again from the top, and every `ctx` call it already made answers
/// from the books.
///
/// ```python
/// pay = actum.Tool.idempotent("pay", window_ms=86_400_000)
///
/// with actum.Engine.open("books") as engine:
///     runtime = actum.Runtime(engine)
///
///     @runtime.agent("refund", version="1")
///     def refund(ctx):
///         return ctx.step("pay", pay, ctx.input,
///                         lambda call: b"paid " + call.idempotency_key.encode())
///
///     runtime.start("refund", "refund-42", b"90 EUR")
///     runtime.drain()
///     assert runtime.output("refund-42") == b"paid refund-42/pay/1"
/// ```
#[pyclass(module = "actum", name = "Runtime", frozen)]
pub struct PyRuntime {
    slot: Arc<RuntimeSlot>,
    worker: String,
    path: String,
    /// The process its engine was opened in.
    pid: u32,
}

impl Drop for PyRuntime {
    /// In a forked child its hold on the engine is let go without dropping
    /// it (see `Drop for PyEngine`).
    fn drop(&mut self) {
        if fork::forked(self.pid)
            && let Some(slot) = Arc::get_mut(&mut self.slot)
            && let Some(runtime) = slot
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        {
            std::mem::forget(runtime);
        }
    }
}

impl PyRuntime {
    fn runtime(&self) -> PyResult<Runtime> {
        fork::check(self.pid, &self.path)?;
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| closed_error(&self.path))
    }
}

/// `@runtime.agent(kind, version)`: registers the function it decorates.
#[pyclass(module = "actum", name = "_AgentDecorator", frozen)]
pub struct AgentDecorator {
    runtime: Py<PyRuntime>,
    kind: String,
    version: String,
    compatible: Vec<String>,
}

#[pymethods]
impl AgentDecorator {
    fn __call__(&self, py: Python<'_>, handler: Py<PyAny>) -> PyResult<Py<PyAny>> {
        self.runtime.get().register_compatible(
            py,
            &self.kind,
            &self.version,
            self.compatible.clone(),
            handler.clone_ref(py),
        )?;
        Ok(handler)
    }
}

/// A list of version names, not a lone `str` (which Python would also
/// iterate, one letter a version).
fn versions(compatible: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if compatible.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "compatible must be a list of versions, e.g. [\"1\"], not a str",
        ));
    }
    compatible.extract()
}

#[pymethods]
impl PyRuntime {
    /// A runtime over `engine`. `worker` names its workers (thread `n`
    /// claims as `<worker>-<n>`); `lease_ttl_ms` is the lease a handler
    /// runs under, renewed at a third of it.
    ///
    /// `decision_hold` (a `Usage`) is what a model call of a run with a
    /// budget holds before it is made: by default nothing, so a run may pass
    /// a limit by one call's usage; hold a call's most to stop before it.
    #[new]
    #[pyo3(signature = (engine, *, worker="python", lease_ttl_ms=30_000, decision_hold=None))]
    fn new(
        engine: &Bound<'_, PyEngine>,
        worker: &str,
        lease_ttl_ms: u64,
        decision_hold: Option<PyRef<'_, PyUsage>>,
    ) -> PyResult<PyRuntime> {
        let engine = engine.get();
        engine.check_process()?;
        let mut state = engine.lock();
        let Some(arc) = state.engine.clone() else {
            return Err(closed_error(engine.path()));
        };
        let options = RuntimeOptions {
            worker: worker.to_string(),
            lease_ttl_ms,
            decision_hold: decision_hold.map(|u| u.cost()).unwrap_or_default(),
            ..RuntimeOptions::default()
        };
        let slot = Arc::new(Mutex::new(Some(Runtime::with_options(arc, options))));
        state.runtimes.retain(|w| w.strong_count() > 0);
        state.runtimes.push(Arc::downgrade(&slot));
        Ok(PyRuntime {
            slot,
            worker: worker.to_string(),
            path: engine.path().to_string(),
            pid: engine.pid(),
        })
    }

    /// Serves `kind` at `version` with `handler(ctx) -> bytes` (a `def`
    /// or an `async def`). New runs of `kind` start at the version
    /// registered last; a run keeps the version it started with. With
    /// `compatible`, the handler also resumes the runs started at each of
    /// those older versions (`register_compatible`).
    #[pyo3(signature = (kind, version, handler, *, compatible=None))]
    fn register(
        &self,
        py: Python<'_>,
        kind: &str,
        version: &str,
        handler: Py<PyAny>,
        compatible: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let compatible = compatible.map(versions).transpose()?.unwrap_or_default();
        self.register_compatible(py, kind, version, compatible, handler)
    }

    /// Serves `kind` at `version` with `handler`, which also resumes the
    /// runs started at each of the `compatible` versions (a new deploy of
    /// an agent whose runs are in flight). Compatible means it replays
    /// their journals: the same calls in the same order up to where each
    /// run stands (new calls after that are fine); a run whose journal it
    /// does not match is paused with a divergence, for an operator.
    /// Every version is registered once (`InvalidCommand` otherwise).
    #[pyo3(signature = (kind, version, compatible, handler))]
    fn register_compatible(
        &self,
        py: Python<'_>,
        kind: &str,
        version: &str,
        compatible: Vec<String>,
        handler: Py<PyAny>,
    ) -> PyResult<()> {
        if !handler.bind(py).is_callable() {
            return Err(PyTypeError::new_err(
                "an agent must be callable: agent(ctx) -> bytes",
            ));
        }
        let runtime = self.runtime()?;
        let handler = Arc::new(handler);
        let compatible: Vec<&str> = compatible.iter().map(String::as_str).collect();
        runtime
            .register_compatible(kind, version, &compatible, move |ctx| drive(&handler, ctx))
            .map_err(|e| error_to_py(py, &e))
    }

    /// A decorator that registers the function as the agent `kind` at
    /// `version` (resuming the runs of the `compatible` versions too) and
    /// returns it unchanged.
    #[pyo3(signature = (kind, version="1", *, compatible=None))]
    fn agent(
        slf: Py<Self>,
        kind: &str,
        version: &str,
        compatible: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AgentDecorator> {
        Ok(AgentDecorator {
            runtime: slf,
            kind: kind.to_string(),
            version: version.to_string(),
            compatible: compatible.map(versions).transpose()?.unwrap_or_default(),
        })
    }

    /// Registers `undo(call) -> bytes | None` as what undoes the acts whose
    /// compensation names `tool` (a `Tool` or its name): when a run fails
    /// or is cancelled after such a step, its saga calls it once per
    /// compensable step, latest first, through the ledger (exactly once,
    /// as a step's act). It answers as an act does: bytes (or None) once
    /// undone, `ToolFailed`, `OutcomeUnknown`; `call.query` is True when
    /// it is asked whether an earlier undo request took effect (answer the
    /// receipt, or None if it did not). Registering a tool again replaces
    /// its undo.
    ///
    /// ```python
    /// book = actum.Tool.idempotent("airline.book", window_ms=86_400_000)
    /// cancel = actum.Tool.idempotent("airline.cancel", window_ms=86_400_000)
    /// cancelled = []
    ///
    /// with actum.Engine.open("books") as engine:
    ///     runtime = actum.Runtime(engine)
    ///     runtime.register_undo(cancel, lambda call: cancelled.append(call.receipt))
    ///
    ///     @runtime.agent("trip")
    ///     def trip(ctx):
    ///         ctx.step_with_undo("flight", book, b"TP 123", lambda call: b"PNR-9",
    ///                            undo=(cancel, b"TP 123"))
    ///         raise RuntimeError("no hotel left")
    ///
    ///     runtime.start("trip", "trip-1", b"")
    ///     runtime.drain()
    ///     assert engine.state("trip-1") == "failed" and cancelled == [b"PNR-9"]
    /// ```
    fn register_undo(
        &self,
        py: Python<'_>,
        tool: &Bound<'_, PyAny>,
        undo: Py<PyAny>,
    ) -> PyResult<()> {
        let name = match tool.cast::<PyTool>() {
            Ok(t) => t.get().name().to_string(),
            Err(_) => tool.extract::<String>().map_err(|_| {
                PyTypeError::new_err("register_undo(tool, undo): tool is a Tool or its name")
            })?,
        };
        if !undo.bind(py).is_callable() {
            return Err(PyTypeError::new_err(
                "an undo must be callable: undo(call) -> bytes | None",
            ));
        }
        self.runtime()?.register_undo(&name, undo_handler(undo));
        Ok(())
    }

    /// Declares `tool` for the calls the runtime makes outside a handler,
    /// in a failed or cancelled run's saga: an act the run left without an
    /// outcome is asked about with the tool's query before anything is
    /// undone, and the fencing of an undo's tool decides when the saga may
    /// ask about an undo request. Registering a tool again replaces it.
    fn register_tool(&self, tool: PyRef<'_, PyTool>) -> PyResult<()> {
        self.runtime()?.register_tool(tool.build());
        Ok(())
    }

    /// Starts a run of `kind` named `run_id` on `input`. Idempotent: the
    /// same input again answers the existing run (`created` False); another
    /// input raises `RunInputMismatch`.
    fn start(&self, py: Python<'_>, kind: &str, run_id: &str, input: &[u8]) -> PyResult<Started> {
        let runtime = self.runtime()?;
        let started = py
            .detach(|| runtime.start(kind, run_id, input))
            .map_err(|e| error_to_py(py, &e))?;
        Ok(Started {
            run_id: started.run.to_string(),
            created: started.created,
            agent: started.agent,
        })
    }

    /// Claims one run of a served agent and drives it until it completes,
    /// ends, parks or stops, on this thread; None if nothing was claimable.
    /// For tests and one-shot tools: deterministic, no threads of its own.
    #[pyo3(signature = (worker=None))]
    fn work_once(&self, py: Python<'_>, worker: Option<&str>) -> PyResult<Option<Worked>> {
        let runtime = self.runtime()?;
        let name = worker.map_or_else(|| format!("{}-0", self.worker), str::to_string);
        let worker = WorkerId::new(name).map_err(|e| error_to_py(py, &e))?;
        let worked = py
            .detach(|| runtime.work_once(&worker))
            .map_err(|e| error_to_py(py, &e))?;
        Ok(worked.map(|(run, driven)| Worked::of(&run, driven)))
    }

    /// `work_once` until nothing is claimable (or `max_runs` drives);
    /// returns what each drive came to. Runs parked on a wait stay parked.
    #[pyo3(signature = (max_runs=100_000))]
    fn drain(&self, py: Python<'_>, max_runs: usize) -> PyResult<Vec<Worked>> {
        let mut worked = Vec::new();
        while worked.len() < max_runs {
            match self.work_once(py, None)? {
                Some(w) => worked.push(w),
                None => break,
            }
        }
        Ok(worked)
    }

    /// Serves the registered agents on `threads` worker threads until
    /// `shutdown()` (from another thread, a handler, or Ctrl-C here).
    /// Raises the error that stopped a worker (the engine halted).
    #[pyo3(signature = (threads=1))]
    fn run(&self, py: Python<'_>, threads: usize) -> PyResult<()> {
        let runtime = self.runtime()?;
        let serving = runtime.clone();
        let handle = std::thread::spawn(move || serving.run(threads));
        // Wait with the GIL released, looking up now and then so Ctrl-C
        // (a Python signal handler) can shut the runtime down.
        loop {
            let finished = py.detach(|| {
                std::thread::sleep(Duration::from_millis(50));
                handle.is_finished()
            });
            if finished {
                break;
            }
            if let Err(e) = py.check_signals() {
                runtime.shutdown();
                let _ = py.detach(|| handle.join());
                return Err(e);
            }
        }
        match py.detach(|| handle.join()) {
            Ok(result) => result.map_err(|e| error_to_py(py, &e)),
            Err(_) => Err(crate::errors::ActumError::new_err(
                "the runtime's worker threads panicked",
            )),
        }
    }

    /// `await runtime.awork_once()`: `work_once` on a thread of asyncio's
    /// (`asyncio.to_thread`), so an event loop keeps running meanwhile.
    #[pyo3(signature = (worker=None))]
    fn awork_once<'py>(
        slf: &Bound<'py, Self>,
        worker: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_thread(slf, "work_once", worker.into_pyobject(slf.py())?.into_any())
    }

    /// `await runtime.adrain()`: `drain` on a thread of asyncio's.
    #[pyo3(signature = (max_runs=100_000))]
    fn adrain<'py>(slf: &Bound<'py, Self>, max_runs: usize) -> PyResult<Bound<'py, PyAny>> {
        to_thread(slf, "drain", max_runs.into_pyobject(slf.py())?.into_any())
    }

    /// `await runtime.arun(threads)`: `run` on a thread of asyncio's, until
    /// `shutdown()`.
    #[pyo3(signature = (threads=1))]
    fn arun<'py>(slf: &Bound<'py, Self>, threads: usize) -> PyResult<Bound<'py, PyAny>> {
        to_thread(slf, "run", threads.into_pyobject(slf.py())?.into_any())
    }

    /// Asks every worker to stop: each handler stops at its next `ctx`
    /// call, its lease is released, and `run()` returns.
    fn shutdown(&self) -> PyResult<()> {
        self.runtime()?.shutdown();
        Ok(())
    }

    /// Clears a `shutdown()`, so the runtime can serve again.
    fn restart(&self) -> PyResult<()> {
        self.runtime()?.restart();
        Ok(())
    }

    /// The output of a completed run (its agent's return value), or None
    /// if it has not completed.
    fn output<'py>(&self, py: Python<'py>, run_id: &str) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let runtime = self.runtime()?;
        let run = RunId::new(run_id).map_err(|e| error_to_py(py, &e))?;
        let output = py
            .detach(|| runtime.output(&run))
            .map_err(|e| error_to_py(py, &e))?;
        Ok(output.map(|b| PyBytes::new(py, &b)))
    }

    /// What the workers did so far: claimed, completed, ended, parked,
    /// paused, lease_lost, panicked.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.runtime()?.stats();
        let d = PyDict::new(py);
        d.set_item("claimed", s.claimed)?;
        d.set_item("completed", s.completed)?;
        d.set_item("ended", s.ended)?;
        d.set_item("parked", s.parked)?;
        d.set_item("paused", s.paused)?;
        d.set_item("lease_lost", s.lease_lost)?;
        d.set_item("panicked", s.panicked)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("Runtime(engine={:?}, worker={:?})", self.path, self.worker)
    }
}

/// `asyncio.to_thread(runtime.<method>, arg)`: a coroutine to await.
fn to_thread<'py>(
    slf: &Bound<'py, PyRuntime>,
    method: &str,
    arg: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    // A closed (or forked) runtime raises here, not in the awaiting task.
    slf.get().runtime()?;
    let bound = slf.getattr(method)?;
    let asyncio = slf.py().import("asyncio")?;
    asyncio.getattr("to_thread")?.call1((bound, arg))
}

//! `actum.Runtime`: serves Python agent functions over an engine.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actum::books::{RunId, WorkerId};
use actum::runtime::{Driven, Runtime, RuntimeOptions};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::ctx::drive;
use crate::engine::{PyEngine, closed_error};
use crate::errors::error_to_py;

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
        format!(
            "Worked(run_id={:?}, outcome={:?}, detail={:?})",
            self.run_id, self.outcome, self.detail
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
/// runtime = actum.Runtime(engine)
///
/// @runtime.agent("refund", version="1")
/// def refund(ctx):
///     return ctx.step("pay", psp, ctx.input, lambda call: psp_client.pay(call.idempotency_key))
///
/// runtime.start("refund", "refund-42", b"90 EUR")
/// runtime.drain()
/// ```
#[pyclass(module = "actum", name = "Runtime", frozen)]
pub struct PyRuntime {
    slot: Arc<RuntimeSlot>,
    worker: String,
    path: String,
}

impl PyRuntime {
    fn runtime(&self) -> PyResult<Runtime> {
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
}

#[pymethods]
impl AgentDecorator {
    fn __call__(&self, py: Python<'_>, handler: Py<PyAny>) -> PyResult<Py<PyAny>> {
        self.runtime
            .get()
            .register(py, &self.kind, &self.version, handler.clone_ref(py))?;
        Ok(handler)
    }
}

#[pymethods]
impl PyRuntime {
    /// A runtime over `engine`. `worker` names its workers (thread `n`
    /// claims as `<worker>-<n>`); `lease_ttl_ms` is the lease a handler
    /// runs under, renewed at a third of it.
    #[new]
    #[pyo3(signature = (engine, *, worker="python", lease_ttl_ms=30_000))]
    fn new(engine: &Bound<'_, PyEngine>, worker: &str, lease_ttl_ms: u64) -> PyResult<PyRuntime> {
        let engine = engine.get();
        let mut state = engine.lock();
        let Some(arc) = state.engine.clone() else {
            return Err(closed_error(engine.path()));
        };
        let options = RuntimeOptions {
            worker: worker.to_string(),
            lease_ttl_ms,
            ..RuntimeOptions::default()
        };
        let slot = Arc::new(Mutex::new(Some(Runtime::with_options(arc, options))));
        state.runtimes.retain(|w| w.strong_count() > 0);
        state.runtimes.push(Arc::downgrade(&slot));
        Ok(PyRuntime {
            slot,
            worker: worker.to_string(),
            path: engine.path().to_string(),
        })
    }

    /// Serves `kind` at `version` with `handler(ctx) -> bytes`. New runs of
    /// `kind` start at the version registered last; a run keeps the version
    /// it started with.
    fn register(
        &self,
        py: Python<'_>,
        kind: &str,
        version: &str,
        handler: Py<PyAny>,
    ) -> PyResult<()> {
        if !handler.bind(py).is_callable() {
            return Err(PyTypeError::new_err(
                "an agent must be callable: agent(ctx) -> bytes",
            ));
        }
        let runtime = self.runtime()?;
        let handler = Arc::new(handler);
        runtime
            .register(kind, version, move |ctx| drive(&handler, ctx))
            .map_err(|e| error_to_py(py, &e))
    }

    /// A decorator that registers the function as the agent `kind` at
    /// `version` and returns it unchanged.
    #[pyo3(signature = (kind, version="1"))]
    fn agent(slf: Py<Self>, kind: &str, version: &str) -> AgentDecorator {
        AgentDecorator {
            runtime: slf,
            kind: kind.to_string(),
            version: version.to_string(),
        }
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

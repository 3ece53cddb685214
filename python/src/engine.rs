//! `actum.Engine`: one open database, in a directory or in PostgreSQL.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use actum::books::{
    BudgetLimits, Cost, EffectKey, OperatorAction, Outcome, RunId, StepId, digest_of,
};
use actum::{Engine, EngineOptions};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};

use crate::errors::{ActumError, EngineClosed, error_to_py};
use crate::fork;
use crate::runtime::RuntimeSlot;

/// How long `close` waits for a runtime's workers to let go of the engine.
const CLOSE_WAIT: Duration = Duration::from_secs(30);

pub(crate) struct EngineState {
    pub(crate) engine: Option<Arc<Engine>>,
    /// The runtimes made over this engine: `close` shuts them down and
    /// drops their hold on it.
    pub(crate) runtimes: Vec<Weak<RuntimeSlot>>,
}

/// An open actum database: a directory, or a PostgreSQL database. One
/// process per directory: a second open of the same directory (in this
/// process or another) raises `Locked`. A PostgreSQL database takes any
/// number of engines, in any number of processes and hosts.
///
/// ```python
/// with actum.Engine.open("books") as engine:
///     runtime = actum.Runtime(engine)
///     assert engine.state("no-such-run") is None
/// assert engine.closed
/// ```
#[pyclass(module = "actum", name = "Engine", frozen)]
pub struct PyEngine {
    /// The directory, or the URL without its password.
    path: String,
    /// The process that opened it: any other (a forked child) is refused.
    pid: u32,
    pub(crate) state: Mutex<EngineState>,
}

impl Drop for PyEngine {
    /// In a forked child the engine is let go unclosed (leaked: its last
    /// holder never drops it), as closing writes to the parent's files.
    fn drop(&mut self) {
        if fork::forked(self.pid) {
            let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
            if let Some(engine) = state.engine.take() {
                std::mem::forget(engine);
            }
        }
    }
}

impl PyEngine {
    pub(crate) fn lock(&self) -> MutexGuard<'_, EngineState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The process that opened it.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// `EngineForked` in a process forked from the one that opened it
    /// (checked before any lock is taken: the fork may have copied one held).
    pub(crate) fn check_process(&self) -> PyResult<()> {
        fork::check(self.pid, &self.path)
    }

    /// The open engine, or `EngineClosed` (`EngineForked` in a forked
    /// child).
    pub(crate) fn engine(&self) -> PyResult<Arc<Engine>> {
        self.check_process()?;
        self.lock()
            .engine
            .clone()
            .ok_or_else(|| closed_error(&self.path))
    }
}

pub(crate) fn closed_error(path: &str) -> PyErr {
    EngineClosed::new_err(format!(
        "the engine at {path} is closed: open it again with actum.Engine.open"
    ))
}

fn run_id(py: Python<'_>, run: &str) -> PyResult<RunId> {
    RunId::new(run).map_err(|e| error_to_py(py, &e))
}

#[pymethods]
impl PyEngine {
    /// Opens (or creates) the database in the directory `path`, recovering
    /// whatever a crash left. Raises `Locked` if it is open already. With
    /// `operator_channel=True` it serves the operator channel until closed
    /// (a Unix socket in `path/operator/`, owner-only), so the `actum`
    /// command's writes (`pause`, `approve`, ...) reach it while it runs.
    ///
    /// A `str` that starts with `postgres://` or `postgresql://` opens the
    /// books in that PostgreSQL database instead (creating their tables),
    /// which other processes may open at once; `operator_channel=True` is
    /// refused there (`InvalidConfig`): operators open the database
    /// themselves. A server that cannot be reached raises `Postgres`. For
    /// example `actum.Engine.open("postgres://agents@db.internal:5432/books")`
    /// on every host that runs the agents (docs/PYTHON.md, "PostgreSQL:
    /// many processes on one database").
    #[classmethod]
    #[pyo3(signature = (path, *, operator_channel=false))]
    fn open(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        operator_channel: bool,
    ) -> PyResult<PyEngine> {
        let options = EngineOptions {
            operator_channel,
            ..EngineOptions::default()
        };
        let (shown, opened) = match postgres_url(path)? {
            Some(url) => (
                actum::pg::without_password(&url),
                py.detach(|| Engine::open_postgres(&url, options).map(Arc::new)),
            ),
            None => {
                let path: PathBuf = path.extract().map_err(|e| {
                    PyTypeError::new_err(format!(
                        "Engine.open takes a directory (a str or os.PathLike) or a \
                         postgres:// URL (a str): {e}"
                    ))
                })?;
                let shown = path.display().to_string();
                let opened = py.detach(|| {
                    let engine = Arc::new(Engine::open(&path, options)?);
                    if operator_channel {
                        engine.serve_operators()?;
                    }
                    Ok::<_, actum::Error>(engine)
                });
                (shown, opened)
            }
        };
        let engine = opened.map_err(|e| error_to_py(py, &e))?;
        Ok(PyEngine {
            path: shown,
            pid: fork::this_process(),
            state: Mutex::new(EngineState {
                engine: Some(engine),
                runtimes: Vec::new(),
            }),
        })
    }

    /// Shuts down the runtimes over this engine, waits for their workers to
    /// let go, and closes the database cleanly (the next open replays
    /// nothing). Closing a closed engine does nothing; any other use of it
    /// raises `EngineClosed`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.check_process()?;
        let (engine, runtimes) = {
            let mut state = self.lock();
            (state.engine.take(), std::mem::take(&mut state.runtimes))
        };
        let Some(mut engine) = engine else {
            return Ok(());
        };
        for slot in runtimes.iter().filter_map(Weak::upgrade) {
            let runtime = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(runtime) = runtime {
                runtime.shutdown();
            }
        }
        let closed = py.detach(move || {
            let start = Instant::now();
            loop {
                match Arc::try_unwrap(engine) {
                    Ok(engine) => return Some(engine.close()),
                    Err(shared) if start.elapsed() < CLOSE_WAIT => {
                        engine = shared;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    // Dropped here: the engine closes when its last user
                    // lets go.
                    Err(_) => return None,
                }
            }
        });
        match closed {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(error_to_py(py, &e)),
            None => Err(ActumError::new_err(format!(
                "the engine at {} is still in use after {} s (a runtime's run() or a handler \
                 has not returned): it closes when they do",
                self.path,
                CLOSE_WAIT.as_secs()
            ))),
        }
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        self.check_process()?;
        Ok(self.lock().engine.is_none())
    }

    /// The database directory, or the PostgreSQL URL without its password.
    #[getter(path)]
    fn dir(&self) -> &str {
        &self.path
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// The run's state (`"pending"`, `"running"`, `"completed"`,
    /// `"failed"`, ...), or None if there is no such run.
    fn state(&self, py: Python<'_>, run_id: &str) -> PyResult<Option<String>> {
        let engine = self.engine()?;
        let run = run_id_of(py, run_id)?;
        let found = py
            .detach(|| engine.run(&run))
            .map_err(|e| error_to_py(py, &e))?;
        Ok(found.map(|r| r.state.to_string()))
    }

    /// The run's journal, oldest first: `(what, why)` for each entry, in
    /// words (a failed run's last transition says why it failed).
    fn audit(&self, py: Python<'_>, run_id: &str) -> PyResult<Vec<(String, String)>> {
        let engine = self.engine()?;
        let run = run_id_of(py, run_id)?;
        let entries = py
            .detach(|| engine.audit(&run))
            .map_err(|e| error_to_py(py, &e))?;
        Ok(entries
            .into_iter()
            .map(|e| (e.what.to_string(), e.why))
            .collect())
    }

    /// Sends the signal `name` with `payload` to the run (a webhook, a
    /// person); a run waiting for it wakes.
    #[pyo3(signature = (run_id, name, payload, sender="python"))]
    fn signal(
        &self,
        py: Python<'_>,
        run_id: &str,
        name: &str,
        payload: &[u8],
        sender: &str,
    ) -> PyResult<()> {
        let engine = self.engine()?;
        let run = run_id_of(py, run_id)?;
        py.detach(|| engine.signal(&run, name, payload, sender))
            .map(|_| ())
            .map_err(|e| error_to_py(py, &e))
    }

    /// Delivers the reply to the request a `ctx.step_async` sent under
    /// `key` (the `call.key` its `send` got): `receipt` (bytes) confirms
    /// it; `failed` (a reason) fails it. The waiting run wakes. Returns the
    /// step's name if a run was waiting for it, None if the reply came
    /// before the wait (it is kept, and answers the step when it waits).
    #[pyo3(signature = (key, receipt=None, *, failed=None, sender="python"))]
    fn deliver_reply(
        &self,
        py: Python<'_>,
        key: &str,
        receipt: Option<Vec<u8>>,
        failed: Option<String>,
        sender: &str,
    ) -> PyResult<Option<String>> {
        let engine = self.engine()?;
        let key = EffectKey::parse(key).map_err(|e| error_to_py(py, &e))?;
        let outcome = match (receipt, failed) {
            (Some(receipt), None) => Outcome::Confirmed { receipt },
            (None, Some(reason)) => Outcome::Failed {
                retryable: false,
                reason,
            },
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "deliver_reply takes a receipt or failed=reason, one of them",
                ));
            }
        };
        py.detach(|| engine.deliver_reply(&key, outcome, sender))
            .map(|step| step.map(|s| s.as_str().to_string()))
            .map_err(|e| error_to_py(py, &e))
    }

    /// Decides the approval a run waits for at `step`, bound to `args`
    /// (the bytes the handler passed `ctx.approval`). Returns True if the
    /// run woke.
    #[pyo3(signature = (run_id, step, args, approver, role, approve=true, note=""))]
    #[allow(clippy::too_many_arguments, reason = "the approval's journaled facts")]
    fn decide_approval(
        &self,
        py: Python<'_>,
        run_id: &str,
        step: &str,
        args: &[u8],
        approver: &str,
        role: &str,
        approve: bool,
        note: &str,
    ) -> PyResult<bool> {
        let engine = self.engine()?;
        let run = run_id_of(py, run_id)?;
        let step = StepId::new(step).map_err(|e| error_to_py(py, &e))?;
        let digest = digest_of(args);
        py.detach(|| engine.decide_approval(&run, &step, digest, approver, role, approve, note))
            .map_err(|e| error_to_py(py, &e))
    }

    /// Sets the budget of the live run `run_id` (the limits replace the old
    /// ones whole; `None` is no limit), as the operator `by`. A run whose
    /// budget has no room for its next model or tool call is paused at that
    /// call; raise the budget, then `operate(run_id, "resume")`. Costs are
    /// integer micro-units of your currency; `wall_ms` counts the run's own
    /// time running. Set it before the run is first driven (or before it
    /// resumes): a drive that began without a budget reserves nothing.
    #[pyo3(signature = (run_id, *, tokens_in=None, tokens_out=None, cost_micros=None, tool_calls=None, wall_ms=None, by="python", reason=""))]
    #[allow(clippy::too_many_arguments, reason = "one keyword per limit")]
    fn set_budget(
        &self,
        py: Python<'_>,
        run_id: &str,
        tokens_in: Option<u64>,
        tokens_out: Option<u64>,
        cost_micros: Option<u64>,
        tool_calls: Option<u64>,
        wall_ms: Option<u64>,
        by: &str,
        reason: &str,
    ) -> PyResult<()> {
        let engine = self.engine()?;
        let run = run_id_of(py, run_id)?;
        let limits = BudgetLimits {
            tokens_in,
            tokens_out,
            cost_micros,
            tool_calls,
            wall_ms,
        };
        py.detach(|| engine.set_budget(&run, limits, by, reason))
            .map_err(|e| error_to_py(py, &e))
    }

    /// The run's budget book: `limits` (a dict, or None if it has none),
    /// `spent` and `reserved` (dicts of `tokens_in`, `tokens_out`,
    /// `cost_micros`, `tool_calls`) and `ran_ms`.
    fn budget<'py>(&self, py: Python<'py>, run_id: &str) -> PyResult<Bound<'py, PyDict>> {
        let engine = self.engine()?;
        let run = run_id_of(py, run_id)?;
        let book = py
            .detach(|| engine.budget(&run))
            .map_err(|e| error_to_py(py, &e))?;
        let d = PyDict::new(py);
        match book.limits {
            Some(l) => {
                let limits = PyDict::new(py);
                limits.set_item("tokens_in", l.tokens_in)?;
                limits.set_item("tokens_out", l.tokens_out)?;
                limits.set_item("cost_micros", l.cost_micros)?;
                limits.set_item("tool_calls", l.tool_calls)?;
                limits.set_item("wall_ms", l.wall_ms)?;
                d.set_item("limits", limits)?;
            }
            None => d.set_item("limits", py.None())?,
        }
        d.set_item("spent", cost_dict(py, &book.spent)?)?;
        d.set_item("reserved", cost_dict(py, &book.reserved)?)?;
        d.set_item("ran_ms", book.ran_ms)?;
        Ok(d)
    }

    /// An operator's action on the run, without its lease, journaled with
    /// `operator` and `reason`: `"pause"`, `"resume"`, `"cancel"` (a
    /// cancelled run's saga undoes its compensable steps) or `"abandon"`
    /// (give up a compensating run's saga). Returns the run's state after.
    #[pyo3(signature = (run_id, action, operator="python", reason=""))]
    fn operate(
        &self,
        py: Python<'_>,
        run_id: &str,
        action: &str,
        operator: &str,
        reason: &str,
    ) -> PyResult<String> {
        let action = match action {
            "pause" => OperatorAction::Pause,
            "resume" => OperatorAction::Resume,
            "cancel" => OperatorAction::Cancel,
            "abandon" => OperatorAction::Abandon,
            other => {
                return Err(PyValueError::new_err(format!(
                    "no operator action {other:?}: say \"pause\", \"resume\", \"cancel\" or \
                     \"abandon\""
                )));
            }
        };
        let engine = self.engine()?;
        let run = run_id_of(py, run_id)?;
        let operated = py
            .detach(|| engine.operate(&run, action, operator, reason))
            .map_err(|e| error_to_py(py, &e))?;
        Ok(operated.state.to_string())
    }

    fn __repr__(&self) -> String {
        let state = if fork::forked(self.pid) {
            "forked"
        } else if self.lock().engine.is_none() {
            "closed"
        } else {
            "open"
        };
        format!("Engine({:?}, {state})", self.path)
    }
}

/// A test helper: makes a new, empty database on the PostgreSQL server
/// `url` names (`<prefix>_<process id>_<n>`, dropped first if an earlier
/// run left it) and returns its URL, for `Engine.open`. Raises `Postgres`
/// if the server cannot be reached, `ValueError` for a prefix that is not
/// lowercase ASCII letters, digits and `_` (1 to 40 of them, a letter
/// first: it becomes part of an SQL identifier).
///
/// ```python
/// url = actum._actum.scratch_database(os.environ["ACTUM_PG_URL"], "mytest")
/// ```
#[pyfunction]
pub(crate) fn scratch_database(py: Python<'_>, url: &str, prefix: &str) -> PyResult<String> {
    let plain = prefix.len() <= 40
        && prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !plain {
        return Err(PyValueError::new_err(format!(
            "scratch database prefix {prefix:?}: say 1 to 40 lowercase ASCII letters, digits \
             and _, a letter first"
        )));
    }
    py.detach(|| actum::pg::scratch_database(url, prefix))
        .map_err(|e| error_to_py(py, &e))
}

/// The schemes of a PostgreSQL URL `Engine.open` takes instead of a path.
const POSTGRES_SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// The URL, if `path` is a `str` naming a PostgreSQL database; None for a
/// path (a `str` or path-like that names a directory).
fn postgres_url(path: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    let Ok(text) = path.cast::<PyString>() else {
        return Ok(None);
    };
    let text = text.to_cow()?;
    Ok(POSTGRES_SCHEMES
        .iter()
        .any(|scheme| text.starts_with(scheme))
        .then(|| text.into_owned()))
}

fn run_id_of(py: Python<'_>, run: &str) -> PyResult<RunId> {
    run_id(py, run)
}

fn cost_dict<'py>(py: Python<'py>, cost: &Cost) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("tokens_in", cost.tokens_in)?;
    d.set_item("tokens_out", cost.tokens_out)?;
    d.set_item("cost_micros", cost.cost_micros)?;
    d.set_item("tool_calls", cost.tool_calls)?;
    Ok(d)
}

//! The handler's side of the handler bridge (handler.rs is the worker's):
//! the `ctx` a Python agent function receives. Each call becomes a
//! [`Request`] sent to the worker thread that holds the run, and waits for
//! its answer with the GIL released.
//!
//! Every call has two forms: `ctx.decide(...)` waits on the calling
//! thread; `await ctx.adecide(...)` waits on a thread of asyncio's, so the
//! agent's event loop goes on meanwhile (awaitable.rs).
//!
//! **Invariant:** one call is in flight at a time per run, as on the Rust
//! side (an awaited call, from when it is first awaited until its task
//! resumes). A call made while another is in flight (tasks or threads
//! racing each other, or a model function calling its own `ctx`) is
//! refused with `ActumError` before it is sent, never queued behind it:
//! the order of a run's calls is the order the agent's code makes them,
//! which a replay repeats, never an order a thread scheduler picked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, PoisonError};

use actum::books::{Compensation, Join};
use actum::runtime::{Approval, ChildOutput, Deadline};
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::awaitable::awaited;
use crate::errors::{ActumError, EngineForked, StepFailed, Stopped};
use crate::fork;
use crate::replies::PyChildOutput;
use crate::tool::PyTool;

/// A `ctx` call, as the handler's side sends it.
pub(crate) enum Request {
    Decide {
        name: String,
        input: Vec<u8>,
        model: Py<PyAny>,
        /// The model returns `(output, Usage)`, not only the output.
        with_usage: bool,
    },
    Step {
        name: String,
        tool: Py<PyTool>,
        args: Vec<u8>,
        act: Py<PyAny>,
        undo: Option<Compensation>,
    },
    StepAsync {
        name: String,
        tool: Py<PyTool>,
        args: Vec<u8>,
        send: Py<PyAny>,
        within_ms: Option<u64>,
    },
    Checkpoint(Vec<u8>),
    LastCheckpoint,
    Approval {
        name: String,
        args: Vec<u8>,
        role: String,
        within_ms: u64,
    },
    Sleep {
        name: String,
        until: Deadline,
    },
    Signal {
        name: String,
        within_ms: Option<u64>,
    },
    Child {
        name: String,
        kind: String,
        input: Vec<u8>,
    },
    Children {
        name: String,
        calls: Vec<(String, Vec<u8>)>,
        join: Join,
    },
}

/// The worker's answer to one call.
pub(crate) enum Reply {
    Bytes(Vec<u8>),
    MaybeBytes(Option<Vec<u8>>),
    Unit,
    Approval(Approval),
    Children(Vec<ChildOutput>),
}

/// The kinds of [`Reply`], to check an answer against its request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ReplyKind {
    Bytes,
    MaybeBytes,
    Unit,
    Approval,
    Children,
}

/// Why a call did not answer.
pub(crate) enum Refusal {
    /// Failed for good (`Fail::Failed`): `StepFailed`, which the handler
    /// may handle.
    Failed {
        reason: String,
        cause: Option<PyErr>,
    },
    /// The runtime stopped the handler: `Stopped`.
    Stopped(String),
    /// A model function raised: the same exception, raised again.
    Raised(PyErr),
}

pub(crate) type Answer = Result<Reply, Refusal>;

/// What the handler's side sends the worker.
pub(crate) enum FromHandler {
    Call(Request, Sender<Answer>),
    Done(Result<Vec<u8>, String>),
}

impl Request {
    /// The kind of reply the worker answers this request with.
    fn reply_kind(&self) -> ReplyKind {
        match self {
            Request::Decide { .. }
            | Request::Step { .. }
            | Request::StepAsync { .. }
            | Request::Child { .. } => ReplyKind::Bytes,
            Request::LastCheckpoint | Request::Signal { .. } => ReplyKind::MaybeBytes,
            Request::Checkpoint(_) | Request::Sleep { .. } => ReplyKind::Unit,
            Request::Approval { .. } => ReplyKind::Approval,
            Request::Children { .. } => ReplyKind::Children,
        }
    }
}

impl Reply {
    fn kind(&self) -> ReplyKind {
        match self {
            Reply::Bytes(_) => ReplyKind::Bytes,
            Reply::MaybeBytes(_) => ReplyKind::MaybeBytes,
            Reply::Unit => ReplyKind::Unit,
            Reply::Approval(_) => ReplyKind::Approval,
            Reply::Children(_) => ReplyKind::Children,
        }
    }

    /// The Python value the call returns: `bytes`, `bytes` or None, None,
    /// an `Approval`, or a list of `ChildOutput`.
    fn into_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Reply::Bytes(b) | Reply::MaybeBytes(Some(b)) => Ok(bytes(py, &b).into_any().unbind()),
            Reply::MaybeBytes(None) | Reply::Unit => Ok(py.None()),
            Reply::Approval(a) => PyApproval::of(a).into_py_any(py),
            Reply::Children(ended) => ended
                .into_iter()
                .map(PyChildOutput::of)
                .collect::<Vec<_>>()
                .into_py_any(py),
        }
    }
}

/// What an agent function receives: its run, its input, and the calls that
/// make the run durable. Valid only while the handler runs. Each call has
/// an awaitable twin for `async def` agents (`await ctx.adecide(...)`,
/// `await ctx.astep(...)`, ...): the engine works off the event loop's
/// thread. One call is in flight at a time; another raises `ActumError`.
#[pyclass(module = "actum", name = "Ctx", frozen)]
pub struct PyCtx {
    run: String,
    input: Vec<u8>,
    tx: Mutex<Option<Sender<FromHandler>>>,
    /// Set while a call is in flight: a plain call until it returns, an
    /// awaited one from when it is first awaited until its task resumes.
    in_flight: AtomicBool,
    /// The process the handler runs in: a forked child's calls are refused
    /// (the worker that would answer them is not in the child).
    pid: u32,
}

/// How an approval ended: `status` is `"approved"`, `"rejected"` or
/// `"expired"`; `approver` and `note` are empty when it expired.
#[pyclass(module = "actum", name = "Approval", frozen, get_all)]
pub struct PyApproval {
    /// `"approved"`, `"rejected"` or `"expired"`.
    status: &'static str,
    /// Who decided.
    approver: String,
    /// Their note.
    note: String,
}

#[pymethods]
impl PyApproval {
    /// True if it was approved.
    #[getter]
    fn approved(&self) -> bool {
        self.status == "approved"
    }

    fn __repr__(&self) -> String {
        format!(
            "Approval({}, approver={:?}, note={:?})",
            self.status, self.approver, self.note
        )
    }
}

impl PyApproval {
    fn of(approval: Approval) -> PyApproval {
        let (status, approver, note) = match approval {
            Approval::Approved { approver, note } => ("approved", approver, note),
            Approval::Rejected { approver, note } => ("rejected", approver, note),
            Approval::Expired => ("expired", String::new(), String::new()),
        };
        PyApproval {
            status,
            approver,
            note,
        }
    }
}

/// Lets go of the call in flight when dropped, however the call ended.
struct InFlight<'a>(&'a PyCtx);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl PyCtx {
    /// A ctx for the run `run`, whose calls go to the worker over `tx`.
    pub(crate) fn new(run: String, input: Vec<u8>, tx: Sender<FromHandler>) -> PyCtx {
        PyCtx {
            run,
            input,
            tx: Mutex::new(Some(tx)),
            in_flight: AtomicBool::new(false),
            pid: fork::this_process(),
        }
    }

    /// A call, start to end, on this thread: claims, sends, waits, lets go.
    fn call(&self, py: Python<'_>, request: Request) -> PyResult<Py<PyAny>> {
        let tx = self.claim()?;
        let _in_flight = InFlight(self);
        let sent = send(&tx, request)?;
        sent.wait(py)
    }

    /// The first step of a call: refuses it if the ctx is not usable here
    /// (a forked process, a handler that returned) or another call is in
    /// flight; else marks this one in flight and returns where to send it.
    /// Whoever claimed lets go ([`PyCtx::release`]) once the call is over.
    pub(crate) fn claim(&self) -> PyResult<Sender<FromHandler>> {
        if fork::forked(self.pid) {
            return Err(EngineForked::new_err(format!(
                "the ctx of run {} was used in process {}, forked from the one running its \
                 handler: the worker that answers it is not in this process",
                self.run,
                fork::this_process()
            )));
        }
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                ActumError::new_err(format!(
                    "the ctx of run {} was used after its handler returned: a ctx is valid \
                     only inside the handler call it was passed to",
                    self.run
                ))
            })?;
        if self
            .in_flight
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(ActumError::new_err(format!(
                "a ctx call of run {} was made while another is in flight (from tasks or \
                 threads racing each other, or from inside a model or tool function): await \
                 or finish each ctx call before making the next, so the run's calls keep one \
                 order that a resumed run can replay; this call was not made",
                self.run
            )));
        }
        Ok(tx)
    }

    /// Lets go of the claim of the call in flight.
    pub(crate) fn release(&self) {
        let was = self.in_flight.swap(false, Ordering::AcqRel);
        assert!(was, "a ctx call was let go of twice");
    }

    /// Ends the ctx's life with its handler's: every later call raises.
    pub(crate) fn close(&self) {
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

/// A call sent to the worker, its answer to come.
pub(crate) struct Sent {
    answer: Receiver<Answer>,
    expected: ReplyKind,
}

/// Sends a claimed call to the worker.
pub(crate) fn send(tx: &Sender<FromHandler>, request: Request) -> PyResult<Sent> {
    let expected = request.reply_kind();
    let (reply_tx, answer) = channel();
    tx.send(FromHandler::Call(request, reply_tx))
        .map_err(|_| ActumError::new_err("the runtime no longer serves this handler"))?;
    Ok(Sent { answer, expected })
}

impl Sent {
    /// Waits for the answer with the GIL released; returns it as the
    /// call's Python value, or raises what the call came to.
    pub(crate) fn wait(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let Sent { answer, expected } = self;
        let answer = py
            .detach(move || answer.recv())
            .map_err(|_| ActumError::new_err("the runtime dropped this call unanswered"))?;
        match answer {
            Ok(reply) if reply.kind() == expected => reply.into_py(py),
            Ok(_) => Err(ActumError::new_err(
                "the runtime answered a ctx call with the wrong kind of reply",
            )),
            Err(Refusal::Failed { reason, cause }) => {
                let err = StepFailed::new_err(reason.clone());
                let _ = err.value(py).setattr("reason", reason);
                err.set_cause(py, cause);
                Err(err)
            }
            Err(Refusal::Stopped(text)) => Err(Stopped::new_err(text)),
            Err(Refusal::Raised(err)) => Err(err),
        }
    }
}

fn bytes<'py>(py: Python<'py>, b: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, b)
}

#[pymethods]
impl PyCtx {
    /// The run's id.
    #[getter]
    fn run_id(&self) -> &str {
        &self.run
    }

    /// The input the run was started with.
    #[getter]
    fn input<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        bytes(py, &self.input)
    }

    /// A model call, journaled: `model()` is called the first time and its
    /// bytes recorded at this position; a resumed run gets the recorded
    /// bytes and `model` is not called. `name` and `input` must be the same
    /// on resume, else the run diverged. An exception from `model` is
    /// raised here, and nothing is recorded. `model` may be an `async def`.
    fn decide(
        &self,
        py: Python<'_>,
        name: String,
        input: &[u8],
        model: Py<PyAny>,
    ) -> PyResult<Py<PyAny>> {
        self.call(py, decide(py, name, input, model, false)?)
    }

    /// `decide`, recording what the call cost: `model()` returns
    /// `(output, Usage(tokens_in, tokens_out, cost_micros))`. The usage is
    /// journaled with the answer and charged to the run's budget (and its
    /// ancestors'): a run whose budget has no room for its next call is
    /// paused there (`Engine.set_budget`, `Engine.operate(run, "resume")`).
    fn decide_with_usage(
        &self,
        py: Python<'_>,
        name: String,
        input: &[u8],
        model: Py<PyAny>,
    ) -> PyResult<Py<PyAny>> {
        self.call(py, decide(py, name, input, model, true)?)
    }

    /// A step through `tool`: `act(call)` runs only after the intent is
    /// durable, at most once per attempt, and never again once its outcome
    /// is recorded (a resumed run gets the stored receipt). `act` returns
    /// the receipt (bytes, or None for an empty one), or raises
    /// `ToolFailed(reason, retryable=...)` / `OutcomeUnknown(reason)`; any
    /// other exception fails the attempt for good with its text. A step
    /// that failed for good raises `StepFailed`. `act` may be an
    /// `async def`.
    fn step(
        &self,
        py: Python<'_>,
        name: String,
        tool: Py<PyTool>,
        args: &[u8],
        act: Py<PyAny>,
    ) -> PyResult<Py<PyAny>> {
        self.call(py, step(py, name, tool, args, act, None)?)
    }

    /// `step`, compensable: `undo=(undo_tool, undo_args)` names what undoes
    /// it. If the run fails or is cancelled later, its saga calls the undo
    /// function registered for `undo_tool` (`Runtime.register_undo`) with
    /// `undo_args` and this step's receipt, exactly once, latest step
    /// first; the run ends `failed` (or `cancelled`) once every undo is
    /// done.
    #[pyo3(signature = (name, tool, args, act, *, undo))]
    fn step_with_undo(
        &self,
        py: Python<'_>,
        name: String,
        tool: Py<PyTool>,
        args: &[u8],
        act: Py<PyAny>,
        undo: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let undo = Some(compensation(undo)?);
        self.call(py, step(py, name, tool, args, act, undo)?)
    }

    /// A tool call whose answer comes later, through
    /// `engine.deliver_reply(call.key, ...)` (a webhook): `send(call)` sends
    /// the request once its intent is durable and returns None (accepted:
    /// the run parks, holding no worker, until the reply), or bytes (the
    /// tool answered at once), or raises as an act does. Returns the
    /// reply's receipt. Once the step waited, the request is never sent
    /// again; if `within_ms` passes with no reply, the outcome is unknown
    /// and the run is paused for a person.
    #[pyo3(signature = (name, tool, args, send, within_ms=None))]
    fn step_async(
        &self,
        py: Python<'_>,
        name: String,
        tool: Py<PyTool>,
        args: &[u8],
        send: Py<PyAny>,
        within_ms: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        self.call(py, step_async(py, name, tool, args, send, within_ms)?)
    }

    /// Saves the handler's state as the run's next checkpoint, durable with
    /// the next step's outcome (or wait, model call or end).
    fn checkpoint(&self, py: Python<'_>, state: &[u8]) -> PyResult<Py<PyAny>> {
        self.call(py, Request::Checkpoint(state.to_vec()))
    }

    /// The state of the run's latest saved checkpoint, or None.
    fn last_checkpoint(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.call(py, Request::LastCheckpoint)
    }

    /// Waits for a person of `role` to approve `args`, at most `within_ms`
    /// (from when the wait was first opened): the run parks, holding no
    /// worker, and the handler is called again once it is decided. Returns
    /// an `Approval`.
    fn approval(
        &self,
        py: Python<'_>,
        name: String,
        args: &[u8],
        role: String,
        within_ms: u64,
    ) -> PyResult<Py<PyAny>> {
        self.call(py, approval(name, args, role, within_ms))
    }

    /// A durable timer: the run parks for `ms` from when the timer was
    /// first set (a resumed handler gets the same deadline).
    fn sleep(&self, py: Python<'_>, name: String, ms: u64) -> PyResult<Py<PyAny>> {
        let until = Deadline::In(ms);
        self.call(py, Request::Sleep { name, until })
    }

    /// A durable timer until `at_ms` (ms since the epoch, engine clock).
    fn sleep_until(&self, py: Python<'_>, name: String, at_ms: u64) -> PyResult<Py<PyAny>> {
        let until = Deadline::At(at_ms);
        self.call(py, Request::Sleep { name, until })
    }

    /// Waits for the signal `name` (`Engine.signal`) and returns its
    /// payload, or None if `within_ms` passed first.
    #[pyo3(signature = (name, within_ms=None))]
    fn signal(&self, py: Python<'_>, name: String, within_ms: Option<u64>) -> PyResult<Py<PyAny>> {
        self.call(py, Request::Signal { name, within_ms })
    }

    /// Starts a child run of `kind` on `input`, waits for its end (the run
    /// parks) and returns its output; a child that failed fails this call.
    fn child(
        &self,
        py: Python<'_>,
        name: String,
        kind: String,
        input: &[u8],
    ) -> PyResult<Py<PyAny>> {
        let input = input.to_vec();
        self.call(py, Request::Child { name, kind, input })
    }

    /// A fan-out: starts one child run per `(kind, input)` in `calls`, in
    /// one commit, and waits for them (the run parks, holding no worker):
    /// for all of them (`join="all"`), or for the first to end
    /// (`join="first"`: the others are cancelled in the same commit, their
    /// sagas undoing what they did). Returns a `ChildOutput` per awaited
    /// child, in the order of `calls` (for `"first"`, the one). A child
    /// that failed or was cancelled is reported (`output` None), not
    /// raised: the agent decides what a partial result is worth.
    #[pyo3(signature = (name, calls, join="all"))]
    fn children(
        &self,
        py: Python<'_>,
        name: String,
        calls: Vec<(String, Bound<'_, PyBytes>)>,
        join: &str,
    ) -> PyResult<Py<PyAny>> {
        self.call(py, children(name, calls, join)?)
    }

    /// `await ctx.adecide(name, input, model)`: `decide`, awaited. The
    /// engine works on a thread of asyncio's while the event loop goes on.
    /// Each `a...` call is made when first awaited; one ctx call is in
    /// flight at a time (another raises `ActumError`, and is not made).
    fn adecide<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        input: &[u8],
        model: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        awaited(slf, "adecide", decide(slf.py(), name, input, model, false)?)
    }

    /// `await ctx.adecide_with_usage(name, input, model)`:
    /// `decide_with_usage`, awaited.
    fn adecide_with_usage<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        input: &[u8],
        model: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let request = decide(slf.py(), name, input, model, true)?;
        awaited(slf, "adecide_with_usage", request)
    }

    /// `await ctx.astep(name, tool, args, act)`: `step`, awaited.
    fn astep<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        tool: Py<PyTool>,
        args: &[u8],
        act: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        awaited(slf, "astep", step(slf.py(), name, tool, args, act, None)?)
    }

    /// `await ctx.astep_with_undo(name, tool, args, act, undo=(undo_tool,
    /// undo_args))`: `step_with_undo`, awaited.
    #[pyo3(signature = (name, tool, args, act, *, undo))]
    fn astep_with_undo<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        tool: Py<PyTool>,
        args: &[u8],
        act: Py<PyAny>,
        undo: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let undo = Some(compensation(undo)?);
        let request = step(slf.py(), name, tool, args, act, undo)?;
        awaited(slf, "astep_with_undo", request)
    }

    /// `await ctx.astep_async(name, tool, args, send, within_ms=None)`:
    /// `step_async`, awaited.
    #[pyo3(signature = (name, tool, args, send, within_ms=None))]
    fn astep_async<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        tool: Py<PyTool>,
        args: &[u8],
        send: Py<PyAny>,
        within_ms: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let request = step_async(slf.py(), name, tool, args, send, within_ms)?;
        awaited(slf, "astep_async", request)
    }

    /// `await ctx.acheckpoint(state)`: `checkpoint`, awaited.
    fn acheckpoint<'py>(slf: &Bound<'py, Self>, state: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        awaited(slf, "acheckpoint", Request::Checkpoint(state.to_vec()))
    }

    /// `await ctx.alast_checkpoint()`: `last_checkpoint`, awaited.
    fn alast_checkpoint<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        awaited(slf, "alast_checkpoint", Request::LastCheckpoint)
    }

    /// `await ctx.aapproval(name, args, role, within_ms)`: `approval`,
    /// awaited.
    fn aapproval<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        args: &[u8],
        role: String,
        within_ms: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        awaited(slf, "aapproval", approval(name, args, role, within_ms))
    }

    /// `await ctx.asleep(name, ms)`: `sleep`, awaited (a durable timer,
    /// not `asyncio.sleep`).
    fn asleep<'py>(slf: &Bound<'py, Self>, name: String, ms: u64) -> PyResult<Bound<'py, PyAny>> {
        let until = Deadline::In(ms);
        awaited(slf, "asleep", Request::Sleep { name, until })
    }

    /// `await ctx.asleep_until(name, at_ms)`: `sleep_until`, awaited.
    fn asleep_until<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        at_ms: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let until = Deadline::At(at_ms);
        awaited(slf, "asleep_until", Request::Sleep { name, until })
    }

    /// `await ctx.asignal(name, within_ms=None)`: `signal`, awaited.
    #[pyo3(signature = (name, within_ms=None))]
    fn asignal<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        within_ms: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        awaited(slf, "asignal", Request::Signal { name, within_ms })
    }

    /// `await ctx.achild(name, kind, input)`: `child`, awaited.
    fn achild<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        kind: String,
        input: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        let input = input.to_vec();
        awaited(slf, "achild", Request::Child { name, kind, input })
    }

    /// `await ctx.achildren(name, calls, join="all")`: `children`, awaited.
    #[pyo3(signature = (name, calls, join="all"))]
    fn achildren<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        calls: Vec<(String, Bound<'py, PyBytes>)>,
        join: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        awaited(slf, "achildren", children(name, calls, join)?)
    }

    fn __repr__(&self) -> String {
        format!("Ctx(run_id={:?})", self.run)
    }
}

// The requests, built and checked where the call is made (a wrong argument
// raises there, before anything is sent or awaited).

fn decide(
    py: Python<'_>,
    name: String,
    input: &[u8],
    model: Py<PyAny>,
    with_usage: bool,
) -> PyResult<Request> {
    callable(py, &model, "model")?;
    Ok(Request::Decide {
        name,
        input: input.to_vec(),
        model,
        with_usage,
    })
}

fn step(
    py: Python<'_>,
    name: String,
    tool: Py<PyTool>,
    args: &[u8],
    act: Py<PyAny>,
    undo: Option<Compensation>,
) -> PyResult<Request> {
    callable(py, &act, "act")?;
    Ok(Request::Step {
        name,
        tool,
        args: args.to_vec(),
        act,
        undo,
    })
}

fn step_async(
    py: Python<'_>,
    name: String,
    tool: Py<PyTool>,
    args: &[u8],
    send: Py<PyAny>,
    within_ms: Option<u64>,
) -> PyResult<Request> {
    callable(py, &send, "send")?;
    Ok(Request::StepAsync {
        name,
        tool,
        args: args.to_vec(),
        send,
        within_ms,
    })
}

/// `undo=(undo_tool, undo_args)` as the compensation it names.
fn compensation(undo: &Bound<'_, PyAny>) -> PyResult<Compensation> {
    let shape = || PyTypeError::new_err("undo must be a pair (undo_tool: Tool, undo_args: bytes)");
    let pair = undo.cast::<PyTuple>().map_err(|_| shape())?;
    if pair.len() != 2 {
        return Err(shape());
    }
    let undo_tool = pair.get_item(0)?;
    let undo_tool = undo_tool.cast::<PyTool>().map_err(|_| shape())?;
    let undo_args = pair.get_item(1)?;
    let undo_args = undo_args.cast::<PyBytes>().map_err(|_| shape())?;
    Ok(undo_tool.get().compensation(undo_args.as_bytes().to_vec()))
}

fn approval(name: String, args: &[u8], role: String, within_ms: u64) -> Request {
    Request::Approval {
        name,
        args: args.to_vec(),
        role,
        within_ms,
    }
}

fn children(
    name: String,
    calls: Vec<(String, Bound<'_, PyBytes>)>,
    join: &str,
) -> PyResult<Request> {
    let join = match join {
        "all" => Join::All,
        "first" => Join::First,
        other => {
            return Err(PyValueError::new_err(format!(
                "join is \"all\" or \"first\", not {other:?}"
            )));
        }
    };
    let calls = calls
        .into_iter()
        .map(|(kind, input)| (kind, input.as_bytes().to_vec()))
        .collect();
    Ok(Request::Children { name, calls, join })
}

fn callable(py: Python<'_>, f: &Py<PyAny>, what: &str) -> PyResult<()> {
    if f.bind(py).is_callable() {
        Ok(())
    } else {
        Err(PyTypeError::new_err(format!("{what} must be callable")))
    }
}

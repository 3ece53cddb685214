//! The handler bridge: a Python agent function runs on its own thread with
//! a `ctx` whose calls travel over a channel to the runtime's worker
//! thread, which holds the run's [`RunCtx`] and answers each in turn.
//!
//! Why a thread: a [`RunCtx`] borrows the runtime for the length of one
//! handler call, and a Python object cannot hold a borrow (nor may this
//! crate use `unsafe` to pretend it can). So the worker keeps the `RunCtx`
//! on its own stack and serves the handler's calls; the handler's thread
//! waits for each answer with the GIL released, so the worker can take the
//! GIL to call a tool or model function meanwhile. One call is in flight
//! at a time per run, as on the Rust side.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};

use actum::books::{Compensation, Join, Outcome};
use actum::runtime::{Approval, ChildOutput, Deadline, Fail, RunCtx};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::awaitable::complete;
use crate::errors::{ActumError, EngineForked, StepFailed, Stopped};
use crate::fork;
use crate::replies::{PyChildOutput, model_answer};
use crate::tool::{PyTool, call_tool, describe, outcome_of, reason_of, type_name};

/// A `ctx` call, as the handler's thread sends it.
enum Request {
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
enum Reply {
    Bytes(Vec<u8>),
    MaybeBytes(Option<Vec<u8>>),
    Unit,
    Approval(Approval),
    Children(Vec<ChildOutput>),
}

/// Why a call did not answer.
enum Refusal {
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

type Answer = Result<Reply, Refusal>;

/// What the handler's thread sends the worker.
enum FromHandler {
    Call(Request, Sender<Answer>),
    Done(Result<Vec<u8>, String>),
}

/// What an agent function receives: its run, its input, and the calls that
/// make the run durable. Valid only while the handler runs.
#[pyclass(module = "actum", name = "Ctx", frozen)]
pub struct PyCtx {
    run: String,
    input: Vec<u8>,
    tx: Mutex<Option<Sender<FromHandler>>>,
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

impl PyCtx {
    /// Sends a call to the worker and waits for its answer with the GIL
    /// released.
    /// A call whose answer is bytes.
    fn call_bytes<'py>(&self, py: Python<'py>, request: Request) -> PyResult<Bound<'py, PyBytes>> {
        match self.call(py, request)? {
            Reply::Bytes(b) => Ok(bytes(py, &b)),
            _ => Err(unexpected()),
        }
    }

    fn call(&self, py: Python<'_>, request: Request) -> PyResult<Reply> {
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
        let (reply_tx, reply_rx) = channel();
        tx.send(FromHandler::Call(request, reply_tx))
            .map_err(|_| ActumError::new_err("the runtime no longer serves this handler"))?;
        let answer = py
            .detach(move || reply_rx.recv())
            .map_err(|_| ActumError::new_err("the runtime dropped this call unanswered"))?;
        match answer {
            Ok(reply) => Ok(reply),
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

    fn close(&self) {
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
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
    fn decide<'py>(
        &self,
        py: Python<'py>,
        name: String,
        input: &[u8],
        model: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.decide_inner(py, name, input, model, false)
    }

    /// `decide`, recording what the call cost: `model()` returns
    /// `(output, Usage(tokens_in, tokens_out, cost_micros))`. The usage is
    /// journaled with the answer and charged to the run's budget (and its
    /// ancestors'): a run whose budget has no room for its next call is
    /// paused there (`Engine.set_budget`, `Engine.operate(run, "resume")`).
    fn decide_with_usage<'py>(
        &self,
        py: Python<'py>,
        name: String,
        input: &[u8],
        model: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.decide_inner(py, name, input, model, true)
    }

    /// A step through `tool`: `act(call)` runs only after the intent is
    /// durable, at most once per attempt, and never again once its outcome
    /// is recorded (a resumed run gets the stored receipt). `act` returns
    /// the receipt (bytes, or None for an empty one), or raises
    /// `ToolFailed(reason, retryable=...)` / `OutcomeUnknown(reason)`; any
    /// other exception fails the attempt for good with its text. A step
    /// that failed for good raises `StepFailed`. `act` may be an
    /// `async def`.
    fn step<'py>(
        &self,
        py: Python<'py>,
        name: String,
        tool: Py<PyTool>,
        args: &[u8],
        act: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.step_inner(py, name, tool, args, act, None)
    }

    /// `step`, compensable: `undo=(undo_tool, undo_args)` names what undoes
    /// it. If the run fails or is cancelled later, its saga calls the undo
    /// function registered for `undo_tool` (`Runtime.register_undo`) with
    /// `undo_args` and this step's receipt, exactly once, latest step
    /// first; the run ends `failed` (or `cancelled`) once every undo is
    /// done.
    #[pyo3(signature = (name, tool, args, act, *, undo))]
    fn step_with_undo<'py>(
        &self,
        py: Python<'py>,
        name: String,
        tool: Py<PyTool>,
        args: &[u8],
        act: Py<PyAny>,
        undo: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let shape =
            || PyTypeError::new_err("undo must be a pair (undo_tool: Tool, undo_args: bytes)");
        let pair = undo.cast::<PyTuple>().map_err(|_| shape())?;
        if pair.len() != 2 {
            return Err(shape());
        }
        let undo_tool = pair.get_item(0)?;
        let undo_tool = undo_tool.cast::<PyTool>().map_err(|_| shape())?;
        let undo_args = pair.get_item(1)?;
        let undo_args = undo_args.cast::<PyBytes>().map_err(|_| shape())?;
        let compensation = undo_tool.get().compensation(undo_args.as_bytes().to_vec());
        self.step_inner(py, name, tool, args, act, Some(compensation))
    }

    /// Saves the handler's state as the run's next checkpoint, durable with
    /// the next step's outcome (or wait, model call or end).
    fn checkpoint(&self, py: Python<'_>, state: &[u8]) -> PyResult<()> {
        match self.call(py, Request::Checkpoint(state.to_vec()))? {
            Reply::Unit => Ok(()),
            _ => Err(unexpected()),
        }
    }

    /// The state of the run's latest saved checkpoint, or None.
    fn last_checkpoint<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        match self.call(py, Request::LastCheckpoint)? {
            Reply::MaybeBytes(b) => Ok(b.map(|b| bytes(py, &b))),
            _ => Err(unexpected()),
        }
    }

    /// Waits for a person of `role` to approve `args`, at most `within_ms`
    /// (from when the wait was first opened): the run parks, holding no
    /// worker, and the handler is called again once it is decided.
    fn approval(
        &self,
        py: Python<'_>,
        name: String,
        args: &[u8],
        role: String,
        within_ms: u64,
    ) -> PyResult<PyApproval> {
        let request = Request::Approval {
            name,
            args: args.to_vec(),
            role,
            within_ms,
        };
        match self.call(py, request)? {
            Reply::Approval(a) => Ok(match a {
                Approval::Approved { approver, note } => PyApproval {
                    status: "approved",
                    approver,
                    note,
                },
                Approval::Rejected { approver, note } => PyApproval {
                    status: "rejected",
                    approver,
                    note,
                },
                Approval::Expired => PyApproval {
                    status: "expired",
                    approver: String::new(),
                    note: String::new(),
                },
            }),
            _ => Err(unexpected()),
        }
    }

    /// A durable timer: the run parks for `ms` from when the timer was
    /// first set (a resumed handler gets the same deadline).
    fn sleep(&self, py: Python<'_>, name: String, ms: u64) -> PyResult<()> {
        let until = Deadline::In(ms);
        match self.call(py, Request::Sleep { name, until })? {
            Reply::Unit => Ok(()),
            _ => Err(unexpected()),
        }
    }

    /// A durable timer until `at_ms` (ms since the epoch, engine clock).
    fn sleep_until(&self, py: Python<'_>, name: String, at_ms: u64) -> PyResult<()> {
        let until = Deadline::At(at_ms);
        match self.call(py, Request::Sleep { name, until })? {
            Reply::Unit => Ok(()),
            _ => Err(unexpected()),
        }
    }

    /// Waits for the signal `name` (`Engine.signal`) and returns its
    /// payload, or None if `within_ms` passed first.
    #[pyo3(signature = (name, within_ms=None))]
    fn signal<'py>(
        &self,
        py: Python<'py>,
        name: String,
        within_ms: Option<u64>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        match self.call(py, Request::Signal { name, within_ms })? {
            Reply::MaybeBytes(b) => Ok(b.map(|b| bytes(py, &b))),
            _ => Err(unexpected()),
        }
    }

    /// Starts a child run of `kind` on `input`, waits for its end (the run
    /// parks) and returns its output; a child that failed fails this call.
    fn child<'py>(
        &self,
        py: Python<'py>,
        name: String,
        kind: String,
        input: &[u8],
    ) -> PyResult<Bound<'py, PyBytes>> {
        let input = input.to_vec();
        self.call_bytes(py, Request::Child { name, kind, input })
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
    fn step_async<'py>(
        &self,
        py: Python<'py>,
        name: String,
        tool: Py<PyTool>,
        args: &[u8],
        send: Py<PyAny>,
        within_ms: Option<u64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        callable(py, &send, "send")?;
        let request = Request::StepAsync {
            name,
            tool,
            args: args.to_vec(),
            send,
            within_ms,
        };
        self.call_bytes(py, request)
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
    ) -> PyResult<Vec<PyChildOutput>> {
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
        match self.call(py, Request::Children { name, calls, join })? {
            Reply::Children(ended) => Ok(ended.into_iter().map(PyChildOutput::of).collect()),
            _ => Err(unexpected()),
        }
    }

    fn __repr__(&self) -> String {
        format!("Ctx(run_id={:?})", self.run)
    }
}

impl PyCtx {
    fn decide_inner<'py>(
        &self,
        py: Python<'py>,
        name: String,
        input: &[u8],
        model: Py<PyAny>,
        with_usage: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        callable(py, &model, "model")?;
        let request = Request::Decide {
            name,
            input: input.to_vec(),
            model,
            with_usage,
        };
        self.call_bytes(py, request)
    }

    fn step_inner<'py>(
        &self,
        py: Python<'py>,
        name: String,
        tool: Py<PyTool>,
        args: &[u8],
        act: Py<PyAny>,
        undo: Option<Compensation>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        callable(py, &act, "act")?;
        let request = Request::Step {
            name,
            tool,
            args: args.to_vec(),
            act,
            undo,
        };
        self.call_bytes(py, request)
    }
}

fn callable(py: Python<'_>, f: &Py<PyAny>, what: &str) -> PyResult<()> {
    if f.bind(py).is_callable() {
        Ok(())
    } else {
        Err(PyTypeError::new_err(format!("{what} must be callable")))
    }
}

fn unexpected() -> PyErr {
    ActumError::new_err("the runtime answered a ctx call with the wrong kind of reply")
}

/// Runs the Python agent `func` for the run `ctx` holds: the function on
/// its own thread, its `ctx` calls served here. Returns its output, or how
/// the runtime stopped it, or the failure it raised.
pub(crate) fn drive(func: &Arc<Py<PyAny>>, ctx: &mut RunCtx<'_>) -> Result<Vec<u8>, Fail> {
    let (tx, rx) = channel::<FromHandler>();
    let run = ctx.run_id().to_string();
    let input = ctx.input().to_vec();
    let func = Arc::clone(func);
    std::thread::scope(|scope| {
        let python = scope.spawn(move || python_side(&func, run, input, tx));
        let result = serve_all(ctx, &rx);
        // The thread sent its result and ends (or it panicked: the
        // runtime's answer is already decided above).
        let _ = python.join();
        result
    })
}

/// Serves the handler's calls until it is done.
fn serve_all(ctx: &mut RunCtx<'_>, rx: &Receiver<FromHandler>) -> Result<Vec<u8>, Fail> {
    // Set once a call stopped the handler: from then on every call is
    // refused and the stop is what the runtime gets, whatever the handler
    // returns (it may have caught the exception).
    let mut stopped: Option<Fail> = None;
    loop {
        match rx.recv() {
            Ok(FromHandler::Call(request, reply)) => {
                let answer = match &stopped {
                    Some(stop) => Err(Refusal::Stopped(stop.to_string())),
                    None => serve(ctx, request, &mut stopped),
                };
                let _ = reply.send(answer);
            }
            Ok(FromHandler::Done(done)) => {
                return match stopped {
                    Some(stop) => Err(stop),
                    None => done.map_err(Fail::failed),
                };
            }
            Err(_) => {
                return Err(stopped.unwrap_or_else(|| {
                    Fail::failed("the agent's thread ended without an answer")
                }));
            }
        }
    }
}

/// A refusal for the engine's `Fail`; a stop is kept for the runtime.
fn refuse(fail: Fail, cause: Option<PyErr>, stopped: &mut Option<Fail>) -> Refusal {
    match fail {
        Fail::Failed { reason } => Refusal::Failed { reason, cause },
        stop @ Fail::Stopped(_) => {
            let text = stop.to_string();
            *stopped = Some(stop);
            Refusal::Stopped(text)
        }
    }
}

/// Serves one call on the worker's thread (no GIL held here: a tool or a
/// model function takes it while it runs).
fn serve(ctx: &mut RunCtx<'_>, request: Request, stopped: &mut Option<Fail>) -> Answer {
    match request {
        Request::Decide {
            name,
            input,
            model,
            with_usage,
        } => {
            let mut raised: Option<PyErr> = None;
            let result = ctx.decide_with_usage(&name, &input, || {
                Python::attach(|py| {
                    let answer = model
                        .bind(py)
                        .call0()
                        .and_then(complete)
                        .and_then(|out| model_answer(&out, &name, with_usage));
                    answer.map_err(|e| {
                        let text = describe(py, &e);
                        raised = Some(e);
                        Fail::failed(text)
                    })
                })
            });
            match result {
                Ok(out) => Ok(Reply::Bytes(out)),
                Err(fail @ Fail::Stopped(_)) => Err(refuse(fail, None, stopped)),
                Err(fail) => match raised {
                    Some(e) => Err(Refusal::Raised(e)),
                    None => Err(refuse(fail, None, stopped)),
                },
            }
        }
        Request::Step {
            name,
            tool,
            args,
            act,
            undo,
        } => {
            let engine_tool = tool.get().build();
            let mut raised: Option<PyErr> = None;
            let act = |call: &actum::runtime::Call<'_>| {
                Python::attach(|py| {
                    let (outcome, err) = outcome_of(py, call_tool(py, &act, call), false);
                    raised = err;
                    outcome
                })
            };
            let result = match undo {
                Some(undo) => ctx.step_with_undo(&name, &engine_tool, &args, undo, act),
                None => ctx.step(&name, &engine_tool, &args, act),
            };
            match result {
                Ok(receipt) => Ok(Reply::Bytes(receipt)),
                Err(fail) => Err(refuse(fail, raised, stopped)),
            }
        }
        Request::StepAsync {
            name,
            tool,
            args,
            send,
            within_ms,
        } => {
            let engine_tool = tool.get().build();
            let mut raised: Option<PyErr> = None;
            let send = |call: &actum::runtime::Call<'_>| {
                Python::attach(|py| {
                    let result = call_tool(py, &send, call);
                    if matches!(&result, Ok(value) if value.is_none()) {
                        // Accepted: the reply comes later.
                        return Outcome::Unknown {
                            reason: "sent; the reply comes later".into(),
                        };
                    }
                    let (outcome, err) = outcome_of(py, result, false);
                    raised = err;
                    outcome
                })
            };
            let within = within_ms.map(Deadline::In);
            match ctx.step_async(&name, &engine_tool, &args, within, send) {
                Ok(receipt) => Ok(Reply::Bytes(receipt)),
                Err(fail) => Err(refuse(fail, raised, stopped)),
            }
        }
        Request::Children { name, calls, join } => {
            let calls: Vec<(&str, &[u8])> = calls
                .iter()
                .map(|(kind, input)| (kind.as_str(), input.as_slice()))
                .collect();
            ctx.children(&name, &calls, join)
                .map(Reply::Children)
                .map_err(|f| refuse(f, None, stopped))
        }
        Request::Checkpoint(state) => ctx
            .checkpoint(&state)
            .map(|()| Reply::Unit)
            .map_err(|f| refuse(f, None, stopped)),
        Request::LastCheckpoint => ctx
            .last_checkpoint()
            .map(Reply::MaybeBytes)
            .map_err(|f| refuse(f, None, stopped)),
        Request::Approval {
            name,
            args,
            role,
            within_ms,
        } => ctx
            .approval(&name, &args, &role, Deadline::In(within_ms))
            .map(Reply::Approval)
            .map_err(|f| refuse(f, None, stopped)),
        Request::Sleep { name, until } => ctx
            .sleep(&name, until)
            .map(|()| Reply::Unit)
            .map_err(|f| refuse(f, None, stopped)),
        Request::Signal { name, within_ms } => ctx
            .signal(&name, within_ms.map(Deadline::In))
            .map(Reply::MaybeBytes)
            .map_err(|f| refuse(f, None, stopped)),
        Request::Child { name, kind, input } => ctx
            .child(&name, &kind, &input)
            .map(Reply::Bytes)
            .map_err(|f| refuse(f, None, stopped)),
    }
}

/// The handler's thread: calls the Python function with a fresh `ctx`,
/// then reports its output (bytes; None is empty) or its failure (the
/// exception's type and text; a `StepFailed` left unhandled, its reason).
fn python_side(func: &Py<PyAny>, run: String, input: Vec<u8>, tx: Sender<FromHandler>) {
    let done = Python::attach(|py| {
        let ctx = Py::new(
            py,
            PyCtx {
                run,
                input,
                tx: Mutex::new(Some(tx.clone())),
                pid: fork::this_process(),
            },
        )
        .map_err(|e| describe(py, &e))?;
        // An `async def` agent runs to completion here, on a loop of its
        // own; its ctx calls stay synchronous calls.
        let result = func.bind(py).call1((ctx.clone_ref(py),)).and_then(complete);
        ctx.get().close();
        match result {
            Ok(value) if value.is_none() => Ok(Vec::new()),
            Ok(value) => match value.cast::<PyBytes>() {
                Ok(b) => Ok(b.as_bytes().to_vec()),
                Err(_) => Err(format!(
                    "the agent returned a {}, not bytes or None",
                    type_name(&value)
                )),
            },
            Err(e) if e.is_instance_of::<StepFailed>(py) => {
                Err(reason_of(e.value(py)).unwrap_or_else(|| describe(py, &e)))
            }
            Err(e) => Err(describe(py, &e)),
        }
    });
    let _ = tx.send(FromHandler::Done(done));
}

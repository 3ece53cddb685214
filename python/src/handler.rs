//! The worker's side of the handler bridge (ctx.rs is the handler's side):
//! a Python agent function runs on a thread of its own, and its `ctx`
//! calls arrive here over a channel, where the worker holds the run's
//! [`RunCtx`] and answers them one at a time, in the order they arrive.
//!
//! Why a thread: a [`RunCtx`] borrows the runtime for the length of one
//! handler call, and a Python object cannot hold a borrow (nor may this
//! crate use `unsafe` to pretend it can). So the worker keeps the `RunCtx`
//! on its own stack and serves the handler's calls; the handler's side
//! waits for each answer with the GIL released, so the worker can take the
//! GIL to call a tool or model function meanwhile.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use actum::books::Outcome;
use actum::runtime::{Deadline, Fail, RunCtx};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::awaitable::complete;
use crate::ctx::{Answer, FromHandler, PyCtx, Refusal, Reply, Request};
use crate::errors::StepFailed;
use crate::replies::model_answer;
use crate::tool::{call_tool, describe, outcome_of, reason_of, type_name};

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
        let ctx = Py::new(py, PyCtx::new(run, input, tx.clone())).map_err(|e| describe(py, &e))?;
        // An `async def` agent runs to completion here, on a loop of its
        // own: its `await ctx.a...()` calls wait on threads of that loop's
        // executor, its plain ctx calls on the loop's thread.
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

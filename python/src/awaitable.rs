//! asyncio on both sides of the handler bridge.
//!
//! `async def` agents, models, acts, queries and undos: a function that
//! returns an awaitable is run to completion on the thread that called it,
//! by `actum._run_awaitable` (python/actum/__init__.py): with an event loop
//! of its own, or on a thread of its own if this thread already runs one.
//! So the runtime's side stays synchronous, and an `async def` answers as
//! its `def` twin would.
//!
//! Awaited `ctx` calls (`await ctx.adecide(...)` and the other `a...`
//! calls): each returns a coroutine of `actum._ctx_call` over a [`CtxCall`].
//! When first awaited it claims the ctx on the event loop's thread; then it
//! sends the call and waits for the answer on a thread of asyncio's
//! (`asyncio.to_thread`) with the GIL released, so the loop goes on
//! meanwhile; it lets go of the ctx back on the loop's thread, when the
//! awaiting task resumes.
//!
//! **Invariant:** the claim is taken and let go of on the loop's thread, so
//! whether a ctx call from another task overlaps it is decided by asyncio's
//! scheduling alone, never by how fast the engine answered: of two calls
//! racing each other (`asyncio.gather`) the one awaited first is made and
//! the other refused, on every drive of the run alike. A claimed call is
//! sent at most once, and a call whose task was cancelled before its
//! thread started is never sent.

use std::sync::mpsc::Sender;
use std::sync::{Mutex, PoisonError};

use pyo3::prelude::*;

use crate::ctx::{FromHandler, PyCtx, Request, send};
use crate::errors::ActumError;

/// `value` itself, or, if it is awaitable (a coroutine), what it comes to.
pub(crate) fn complete<'py>(value: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = value.py();
    if !value.hasattr("__await__")? {
        return Ok(value);
    }
    py.import("actum")?
        .getattr("_run_awaitable")?
        .call1((value,))
}

/// The coroutine `ctx.<method>(...)` returns for `request`: awaited, it
/// makes the call and comes to its answer.
pub(crate) fn awaited<'py>(
    ctx: &Bound<'py, PyCtx>,
    method: &str,
    request: Request,
) -> PyResult<Bound<'py, PyAny>> {
    let py = ctx.py();
    let call = CtxCall {
        ctx: ctx.clone().unbind(),
        state: Mutex::new(CallState::Made(request)),
    };
    let coroutine = py
        .import("actum")?
        .getattr("_ctx_call")?
        .call1((Py::new(py, call)?,))?;
    // So a coroutine never awaited is named in Python's warning as the
    // call it is, not as the helper.
    coroutine.setattr("__name__", method)?;
    coroutine.setattr("__qualname__", format!("Ctx.{method}"))?;
    Ok(coroutine)
}

/// Where an awaited call stands.
enum CallState {
    /// Made, not yet awaited.
    Made(Request),
    /// Awaited: the ctx is claimed for it; not yet sent.
    Claimed(Request, Sender<FromHandler>),
    /// Sent to the worker, or (if its awaiting ended first) never to be.
    Over,
}

/// One awaited `ctx` call, driven by `actum._ctx_call`; not API.
#[pyclass(module = "actum", name = "_CtxCall", frozen)]
pub(crate) struct CtxCall {
    ctx: Py<PyCtx>,
    state: Mutex<CallState>,
}

#[pymethods]
impl CtxCall {
    /// On the event loop's thread, when first awaited: claims the ctx for
    /// this call, or raises why not (another call in flight, a handler that
    /// returned, a forked process).
    fn claim(&self) -> PyResult<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let CallState::Made(request) = std::mem::replace(&mut *state, CallState::Over) else {
            return Err(ActumError::new_err("a ctx call is awaited once"));
        };
        let tx = self.ctx.get().claim()?;
        *state = CallState::Claimed(request, tx);
        Ok(())
    }

    /// On a thread of asyncio's: sends the claimed call and waits for its
    /// answer with the GIL released.
    fn answer(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let sent = {
            // Sent under the lock, so once `finish` has run the call is
            // either with the worker or never to be sent.
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let CallState::Claimed(request, tx) = std::mem::replace(&mut *state, CallState::Over)
            else {
                return Err(ActumError::new_err(
                    "this ctx call was cancelled before it was sent, and was not made",
                ));
            };
            send(&tx, request)?
        };
        sent.wait(py)
    }

    /// On the event loop's thread, once the awaiting is over however it
    /// ended (answered, raised, cancelled): lets go of the ctx. A call not
    /// yet sent (its task was cancelled before its thread started) is never
    /// sent.
    fn finish(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let before = std::mem::replace(&mut *state, CallState::Over);
        assert!(
            !matches!(before, CallState::Made(_)),
            "a ctx call finished that was never claimed"
        );
        self.ctx.get().release();
    }
}

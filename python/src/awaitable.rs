//! `async def` agents, models, acts, queries and undos: a function that
//! returns an awaitable is run to completion on the thread that called it,
//! by `actum._run_awaitable` (python/actum/__init__.py): with an event loop
//! of its own, or on a thread of its own if this thread already runs one.
//! So the runtime's side stays synchronous, and an `async def` answers as
//! its `def` twin would.

use pyo3::prelude::*;

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

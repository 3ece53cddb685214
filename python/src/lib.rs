//! actum from Python: the native module `actum._actum`, which the package
//! `actum` (python/actum/) re-exports.
//!
//! It mirrors the durable runtime (engine/src/runtime/): an `Engine`
//! opened on a directory or a PostgreSQL database, a `Runtime` over it serving agent functions, a
//! `ctx` whose calls make a run durable, and tools declared with their
//! class. Every call into the engine releases the GIL; a Python handler or
//! tool runs with it held. See docs/PYTHON.md.

use pyo3::prelude::*;

mod awaitable;
mod ctx;
mod engine;
mod errors;
mod fork;
mod handler;
mod replies;
mod runtime;
mod threads;
mod tool;

/// The module's contents.
#[pymodule]
#[pyo3(name = "_actum")]
fn actum_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::add_errors(m)?;
    m.add_class::<engine::PyEngine>()?;
    m.add_class::<runtime::PyRuntime>()?;
    m.add_class::<runtime::Started>()?;
    m.add_class::<runtime::Worked>()?;
    m.add_class::<runtime::AgentDecorator>()?;
    m.add_class::<ctx::PyCtx>()?;
    m.add_class::<tool::PyCall>()?;
    m.add_class::<ctx::PyApproval>()?;
    m.add_class::<replies::PyUsage>()?;
    m.add_class::<replies::PyChildOutput>()?;
    m.add_class::<tool::PyUndoCall>()?;
    m.add_class::<tool::PyTool>()?;
    m.add_class::<threads::ThreadBooks>()?;
    m.add_function(wrap_pyfunction!(engine::scratch_database, m)?)?;
    Ok(())
}

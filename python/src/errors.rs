//! The engine's errors as Python exceptions: `actum.ActumError`, and under
//! it one class per [`Error`] variant, named as the variant and carrying its
//! fields as attributes (`run`, `key`, `token`, `file`, `offset`, ...).
//! Paths, names, keys, digests and states are `str`; counts, offsets, LSNs
//! and tokens are `int`; a nested error (`cause`) is its own exception
//! object.

use std::path::PathBuf;
use std::sync::Arc;

use actum::Error;
use actum::books::{
    Digest, EffectKey, FencingToken, ResourceId, RunId, RunState, SharedKeyId, StepId, WorkerId,
};
use actum::ids::{DatabaseId, Lsn};
use pyo3::create_exception;
use pyo3::exceptions::{PyBaseException, PyException};
use pyo3::prelude::*;
use pyo3::types::PyList;

create_exception!(
    actum,
    ActumError,
    PyException,
    "The base of every error actum raises."
);
create_exception!(
    actum,
    EngineClosed,
    ActumError,
    "The engine (or a runtime over it) was used after `Engine.close()`."
);
create_exception!(
    actum,
    EngineForked,
    EngineClosed,
    "The engine (or a runtime or `ctx` over it) was used in a process forked \
     from the one that opened it. The child never touches the parent's \
     files: open the database in the child (once the parent closed it), or \
     give the child a directory of its own."
);
create_exception!(
    actum,
    StepFailed,
    ActumError,
    "A step failed for good (its tool raised `ToolFailed`, or an exception, \
     and no attempt is left): the handler may handle it; left unhandled, the \
     run fails with its reason. Attribute: `reason`."
);
create_exception!(
    actum,
    Stopped,
    PyBaseException,
    "The runtime stopped the handler at a `ctx` call: the run waits (an \
     approval, a timer, a signal, a child), the lease was lost, the runtime \
     is shutting down, the handler diverged from the run's journal, or an \
     outcome is unknown. Let it propagate: the runtime decides what becomes \
     of the run (catching it changes nothing: the handler's result is \
     ignored once a call stopped it). A `BaseException`, so `except \
     Exception` does not swallow it."
);

/// One field of an engine error, as a Python value.
trait Field {
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
}

macro_rules! display_fields {
    ($($ty:ty),* $(,)?) => {$(
        impl Field for $ty {
            fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                Ok(self.to_string().into_pyobject(py)?.into_any())
            }
        }
    )*};
}

display_fields!(
    String,
    &'static str,
    RunId,
    StepId,
    EffectKey,
    ResourceId,
    SharedKeyId,
    WorkerId,
    RunState,
    Digest,
    DatabaseId,
    std::io::Error,
    Box<dyn std::error::Error + Send + Sync + 'static>,
);

macro_rules! int_fields {
    ($($ty:ty),* $(,)?) => {$(
        impl Field for $ty {
            fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                Ok(self.into_pyobject(py)?.into_any())
            }
        }
    )*};
}

int_fields!(u64, u32, usize, u8);

impl Field for bool {
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(pyo3::types::PyBool::new(py, *self).to_owned().into_any())
    }
}

impl Field for PathBuf {
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.display().to_string().into_pyobject(py)?.into_any())
    }
}

impl Field for Lsn {
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.0.to_py(py)
    }
}

impl Field for FencingToken {
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.0.to_py(py)
    }
}

impl Field for Vec<String> {
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyList::new(py, self)?.into_any())
    }
}

impl Field for &'static [u8] {
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyList::new(py, self.iter())?.into_any())
    }
}

impl Field for Arc<Error> {
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(error_to_py(py, self)
            .into_value(py)
            .into_bound(py)
            .into_any())
    }
}

impl Field for Box<Error> {
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(error_to_py(py, self)
            .into_value(py)
            .into_bound(py)
            .into_any())
    }
}

impl Field for Option<Arc<Error>> {
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Some(cause) => cause.to_py(py),
            None => Ok(py.None().into_bound(py)),
        }
    }
}

/// Declares a Python class per engine error variant (under `ActumError`),
/// the function that registers them, and the one that turns an [`Error`]
/// into the matching exception with its fields set.
macro_rules! engine_errors {
    ($($variant:ident { $($field:ident),* }),* $(,)?) => {
        $(
            create_exception!(
                actum,
                $variant,
                ActumError,
                concat!(
                    "The engine's error `", stringify!($variant), "`; attributes: ",
                    $(stringify!($field), " ",)* "(see the engine's `Error` docs)."
                )
            );
        )*

        /// The names of the engine error classes, in the engine's order.
        pub(crate) const ENGINE_ERRORS: &[&str] = &[$(stringify!($variant)),*];

        /// Adds the error classes to the module.
        pub(crate) fn add_errors(m: &Bound<'_, PyModule>) -> PyResult<()> {
            let py = m.py();
            m.add("ActumError", py.get_type::<ActumError>())?;
            m.add("EngineClosed", py.get_type::<EngineClosed>())?;
            m.add("EngineForked", py.get_type::<EngineForked>())?;
            m.add("StepFailed", py.get_type::<StepFailed>())?;
            m.add("Stopped", py.get_type::<Stopped>())?;
            $(m.add(stringify!($variant), py.get_type::<$variant>())?;)*
            m.add("ENGINE_ERRORS", ENGINE_ERRORS.to_vec())?;
            Ok(())
        }

        /// The engine error as its Python exception, its fields set as
        /// attributes.
        pub(crate) fn error_to_py(py: Python<'_>, e: &Error) -> PyErr {
            let message = message_of(e);
            let (err, fields): (PyErr, Vec<(&str, PyResult<Bound<'_, PyAny>>)>) = match e {
                $(
                    Error::$variant { $($field),* } => (
                        PyErr::new::<$variant, _>(message),
                        vec![$((stringify!($field), $field.to_py(py))),*],
                    ),
                )*
                // A variant this module does not know yet: the base class
                // and the message.
                #[allow(unreachable_patterns)]
                _ => (PyErr::new::<ActumError, _>(message), Vec::new()),
            };
            let value = err.value(py);
            for (name, field) in fields {
                if let Ok(field) = field {
                    // Setting an attribute on a fresh exception object does
                    // not fail; if it did, the message still says it all.
                    let _ = value.setattr(name, field);
                }
            }
            err
        }
    };
}

/// The error's message: the engine's words, and for a PostgreSQL error
/// the causes of the client's error too (its own words, "error connecting
/// to server", say little without them).
fn message_of(e: &Error) -> String {
    let mut message = e.to_string();
    if let Error::Postgres { .. } = e {
        let mut cause = std::error::Error::source(e).and_then(|s| s.source());
        while let Some(c) = cause {
            message.push_str(&format!(" (because: {c})"));
            cause = c.source();
        }
    }
    message
}

engine_errors! {
    Io { op, path, source },
    Corrupt { file, offset, reason },
    Locked { dir },
    NoDatabase { dir, found },
    SnapshotUnstable { dir, attempts, changed },
    Poisoned { cause },
    RecordTooLarge { size_bytes, max_bytes },
    ForeignFile { file, expected, found },
    UnsupportedFormat { file, found, supported },
    UnsupportedPayload { file, offset, lsn, found, supported },
    NoValidManifest { dir, reasons },
    LsnOutOfRange { requested, first, last },
    InvalidConfig { reason },
    StateStore { file, op, source },
    Postgres { server, op, may_have_landed, source },
    NotOnPostgres { what, instead },
    InvalidName { what, name, reason },
    InvalidCommand { reason },
    NotFound { what },
    RunInputMismatch { run, recorded, presented },
    RunNotRunning { run, state, refused },
    RunTerminal { run, state },
    IllegalTransition { run, from, to },
    VersionConflict { run, expected, actual },
    LeaseHeld { run, worker, expires_ms },
    LeaseLost { run, token },
    GuardOfAnotherRun { run, guard_run },
    Fenced { run, presented, current },
    ArgsMismatch { key, recorded, presented },
    EffectNotOpen { key, status },
    Divergence { run, position, recorded, attempted },
    SchemaMismatch { run, found, expected },
    TooLarge { what, size_bytes, max_bytes },
    BatchRefused { index, cause },
    Inconsistent { what },
    Halted { after, cause },
    WaitMismatch { run, step, recorded, presented },
    WaitOpen { run, step, waits_for },
    WaitEnded { run, step, status },
    ApprovalExpired { run, step, deadline_ms, now_ms },
    ApprovalMismatch { run, step, bound, presented },
    NotReserved { run, charge },
    BudgetExhausted { run, step, limit },
    NotApproved { run, step, status },
    ResourceHeld { resource, holder, expires_ms },
    ResourceNotHeld { resource, run },
    SharedVersionConflict { key, expected, actual },
    SagaOutstanding { run, next },
    ApproverRole { run, step, required, presented },
    OpDecode { reason },
    AgentVersionMismatch { run, expected, found },
    RetryRefused { run, reason },
}

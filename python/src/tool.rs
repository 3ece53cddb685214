//! Tools as Python declares them (`actum.Tool.idempotent(...)`,
//! `.queryable(...)`, `.not_idempotent(...)`), and how a Python tool
//! function's answer becomes the engine's [`Outcome`].

use std::sync::Arc;

use actum::books::{Compensation, Cost, Outcome, ToolClass};
use actum::runtime::{Call, Tool, UndoCall};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::awaitable::complete;

/// What a step (or a query) passes a Python tool function: `call.key`,
/// `call.idempotency_key`, `call.token`, `call.deadline_ms`, `call.resend`,
/// and the key's parts `call.run`, `call.step`, `call.attempt`.
#[pyclass(module = "actum", name = "Call", frozen, get_all)]
pub struct PyCall {
    /// The attempt's key, `run/step/attempt`.
    key: String,
    /// The idempotency key to send the tool (at most 255 bytes).
    idempotency_key: String,
    /// The fencing token to send, for tools that check it.
    token: u64,
    /// True if this resends an earlier attempt's request (same key).
    resend: bool,
    /// The last instant (engine clock, ms) the request may be sent.
    deadline_ms: u64,
    /// The run.
    run: String,
    /// The step.
    step: String,
    /// The attempt, from 1.
    attempt: u32,
}

#[pymethods]
impl PyCall {
    fn __repr__(&self) -> String {
        format!(
            "Call(key={:?}, token={}, resend={}, deadline_ms={})",
            self.key,
            self.token,
            if self.resend { "True" } else { "False" },
            self.deadline_ms
        )
    }
}

impl PyCall {
    fn of(call: &Call<'_>) -> PyCall {
        PyCall {
            key: call.key.to_string(),
            idempotency_key: call.idempotency_key.clone(),
            token: call.token.0,
            resend: call.resend,
            deadline_ms: call.deadline_ms,
            run: call.key.run().to_string(),
            step: call.key.step().to_string(),
            attempt: call.key.attempt(),
        }
    }
}

/// A tool a step calls, declared with its class: how it treats a request
/// sent twice, which decides what the runtime does when it does not know
/// whether a request took effect.
#[pyclass(module = "actum", name = "Tool", frozen)]
#[derive(Clone)]
pub struct PyTool {
    name: String,
    class: ToolClass,
    query: Option<Arc<Py<PyAny>>>,
    attempts: u32,
    backoff: Option<(u64, u64)>,
    ignores_tokens: bool,
    request_lifetime_ms: Option<u64>,
    /// What one call holds of a run's budget (`Tool.hold`).
    hold: Cost,
}

impl PyTool {
    fn declare(
        name: String,
        class: ToolClass,
        query: Option<Py<PyAny>>,
        attempts: u32,
        backoff_ms: Option<(u64, u64)>,
        ignores_tokens: bool,
        request_lifetime_ms: Option<u64>,
    ) -> PyTool {
        PyTool {
            name,
            class,
            query: query.map(Arc::new),
            attempts,
            backoff: backoff_ms,
            ignores_tokens,
            request_lifetime_ms,
            hold: Cost::tool_call(0),
        }
    }

    /// The compensation that undoes a step with this tool on `args`.
    pub(crate) fn compensation(&self, args: Vec<u8>) -> Compensation {
        Compensation {
            tool: self.name.clone(),
            args,
            class: self.class,
        }
    }

    /// The engine's tool, its query calling the Python function.
    pub(crate) fn build(&self) -> Tool {
        let mut tool = Tool::new(self.name.clone(), self.class)
            .attempts(self.attempts)
            .hold(self.hold);
        if let Some((first, max)) = self.backoff {
            tool = tool.backoff(first, max);
        }
        if self.ignores_tokens {
            tool = tool.ignores_tokens(self.request_lifetime_ms);
        }
        if let Some(query) = &self.query {
            let query = Arc::clone(query);
            tool = tool.with_query(move |call| {
                Python::attach(|py| {
                    let result = call_tool(py, &query, call);
                    outcome_of(py, result, true).0
                })
            });
        }
        tool
    }
}

#[pymethods]
impl PyTool {
    /// A tool that deduplicates requests by their idempotency key for
    /// `window_ms` (a payment API with an `Idempotency-Key` header): an
    /// ambiguous request is sent again with the same key inside the window.
    #[staticmethod]
    #[pyo3(signature = (name, *, window_ms, attempts=1, backoff_ms=None, ignores_tokens=false, request_lifetime_ms=None))]
    fn idempotent(
        name: String,
        window_ms: u64,
        attempts: u32,
        backoff_ms: Option<(u64, u64)>,
        ignores_tokens: bool,
        request_lifetime_ms: Option<u64>,
    ) -> PyTool {
        let class = ToolClass::Idempotent {
            dedup_window_ms: window_ms,
        };
        PyTool::declare(
            name,
            class,
            None,
            attempts,
            backoff_ms,
            ignores_tokens,
            request_lifetime_ms,
        )
    }

    /// A tool that can be asked what happened to a request (`query(call)`
    /// returns the receipt if it took effect, `None` if the tool has no
    /// record of it, or raises `OutcomeUnknown`): an ambiguous request is
    /// asked about, never sent blindly again.
    #[staticmethod]
    #[pyo3(signature = (name, *, query, attempts=1, backoff_ms=None, ignores_tokens=false, request_lifetime_ms=None))]
    fn queryable(
        py: Python<'_>,
        name: String,
        query: Py<PyAny>,
        attempts: u32,
        backoff_ms: Option<(u64, u64)>,
        ignores_tokens: bool,
        request_lifetime_ms: Option<u64>,
    ) -> PyResult<PyTool> {
        if !query.bind(py).is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "query must be callable: query(call) -> bytes | None",
            ));
        }
        Ok(PyTool::declare(
            name,
            ToolClass::Queryable,
            Some(query),
            attempts,
            backoff_ms,
            ignores_tokens,
            request_lifetime_ms,
        ))
    }

    /// A tool that neither deduplicates nor can be asked (sending an
    /// email over plain SMTP): an ambiguous request pauses the run for a
    /// person to reconcile (`actum reconcile`).
    #[staticmethod]
    #[pyo3(signature = (name, *, attempts=1, backoff_ms=None))]
    fn not_idempotent(name: String, attempts: u32, backoff_ms: Option<(u64, u64)>) -> PyTool {
        PyTool::declare(
            name,
            ToolClass::NotIdempotent,
            None,
            attempts,
            backoff_ms,
            false,
            None,
        )
    }

    /// The same tool, each call of which holds `cost_micros`, `tokens_in`,
    /// `tokens_out` and `tool_calls` of its run's budget before it is made,
    /// and is charged that once confirmed (default: one tool call, no
    /// money). Only runs with a budget (or an ancestor with one) reserve.
    ///
    /// >>> import actum
    /// >>> pay = actum.Tool.idempotent("pay", window_ms=60_000).hold(cost_micros=2_500)
    /// >>> pay.held["cost_micros"], pay.held["tool_calls"]
    /// (2500, 1)
    #[pyo3(signature = (*, cost_micros=0, tokens_in=0, tokens_out=0, tool_calls=1))]
    fn hold(&self, cost_micros: u64, tokens_in: u64, tokens_out: u64, tool_calls: u64) -> PyTool {
        PyTool {
            hold: Cost {
                tokens_in,
                tokens_out,
                cost_micros,
                tool_calls,
            },
            ..self.clone()
        }
    }

    /// What one call holds of a run's budget: a dict of `tokens_in`,
    /// `tokens_out`, `cost_micros` and `tool_calls`.
    #[getter]
    fn held(&self) -> std::collections::BTreeMap<&'static str, u64> {
        std::collections::BTreeMap::from([
            ("tokens_in", self.hold.tokens_in),
            ("tokens_out", self.hold.tokens_out),
            ("cost_micros", self.hold.cost_micros),
            ("tool_calls", self.hold.tool_calls),
        ])
    }

    /// The tool's name.
    #[getter]
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The tool's class: `"idempotent"`, `"queryable"` or `"not_idempotent"`.
    #[getter]
    fn class_name(&self) -> &'static str {
        self.class.name()
    }

    fn __repr__(&self) -> String {
        format!("Tool({:?}, {})", self.name, self.class_name())
    }
}

/// Calls a Python tool function (an act or a query) with the call.
pub(crate) fn call_tool<'py>(
    py: Python<'py>,
    f: &Py<PyAny>,
    call: &Call<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    let call = Bound::new(py, PyCall::of(call))?;
    complete(f.bind(py).call1((call,))?)
}

/// What an undo function receives: the compensation's `key` and
/// `idempotency_key` (`run/step/undo/n`, send it to the tool), `token`,
/// `resend`, `deadline_ms`, its `args`, the `receipt` of the act it undoes
/// (None if that was never confirmed), `query` (True: answer whether an
/// earlier undo request took effect, do not send one), `run` and `step`.
#[pyclass(module = "actum", name = "UndoCall", frozen)]
pub struct PyUndoCall {
    /// The compensation's key, `run/step/undo/n`.
    #[pyo3(get)]
    key: String,
    /// The idempotency key to send the undo tool.
    #[pyo3(get)]
    idempotency_key: String,
    /// The fencing token to send, for tools that check it.
    #[pyo3(get)]
    token: u64,
    /// True if this resends an earlier undo request (same key).
    #[pyo3(get)]
    resend: bool,
    /// True to ask about an earlier undo request instead of sending one.
    #[pyo3(get)]
    query: bool,
    /// The last instant (engine clock, ms) the request may be sent.
    #[pyo3(get)]
    deadline_ms: u64,
    /// The run.
    #[pyo3(get)]
    run: String,
    /// The step being undone.
    #[pyo3(get)]
    step: String,
    /// The compensation's arguments (the `args` getter).
    args: Vec<u8>,
    /// The undone act's receipt (the `receipt` getter).
    receipt: Option<Vec<u8>>,
}

#[pymethods]
impl PyUndoCall {
    /// The compensation's arguments, as the step gave them.
    #[getter]
    fn args<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.args)
    }

    /// The receipt of the act being undone, or None if it was not confirmed.
    #[getter]
    fn receipt<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.receipt.as_deref().map(|r| PyBytes::new(py, r))
    }

    fn __repr__(&self) -> String {
        format!(
            "UndoCall(key={:?}, query={}, resend={})",
            self.key,
            if self.query { "True" } else { "False" },
            if self.resend { "True" } else { "False" }
        )
    }
}

impl PyUndoCall {
    fn of(call: &UndoCall<'_>) -> PyUndoCall {
        let key = &call.ctx.key;
        PyUndoCall {
            key: key.to_string(),
            idempotency_key: key.tool_key(),
            token: call.ctx.token.0,
            resend: call.ctx.resend,
            query: call.query,
            deadline_ms: call.deadline_ms,
            run: key.run().to_string(),
            step: key.step().to_string(),
            args: call.args.to_vec(),
            receipt: call.receipt.map(<[u8]>::to_vec),
        }
    }
}

/// The runtime's undo handler calling the Python function `undo`: its
/// answer read as an act's (or, for a query, a query's).
pub(crate) fn undo_handler(
    undo: Py<PyAny>,
) -> impl Fn(&UndoCall<'_>) -> Outcome + Send + Sync + 'static {
    move |call| {
        Python::attach(|py| {
            let result = Bound::new(py, PyUndoCall::of(call))
                .and_then(|c| undo.bind(py).call1((c,)))
                .and_then(complete);
            outcome_of(py, result, call.query).0
        })
    }
}

/// `Type: message` for an exception.
pub(crate) fn describe(py: Python<'_>, e: &PyErr) -> String {
    let name = e
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".to_string());
    let text = e.value(py).to_string();
    if text.is_empty() {
        name
    } else {
        format!("{name}: {text}")
    }
}

/// The name of `value`'s type, for the message about a value of a type
/// that was not expected.
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// The text of an exception's `reason` attribute (`ToolFailed`,
/// `OutcomeUnknown`, `StepFailed` carry one); `None` if it has none.
pub(crate) fn reason_of(value: &Bound<'_, PyAny>) -> Option<String> {
    value
        .getattr("reason")
        .and_then(|r| r.str().map(|s| s.to_string()))
        .ok()
}

/// The package's own exception class `name` (defined in actum/__init__.py).
fn package_class<'py>(py: Python<'py>, name: &str) -> Option<Bound<'py, PyAny>> {
    py.import("actum").ok()?.getattr(name).ok()
}

/// A tool function's answer as an outcome: bytes are the receipt (`None`:
/// an empty receipt, or for a query, no record of the request);
/// `ToolFailed(reason, retryable)` failed; `OutcomeUnknown(reason)` is
/// ambiguous; any other exception failed for good with its text; any other
/// value is ambiguous (the function ran: whether it acted is not known).
/// The exception, if one was raised, comes back too (the cause of the
/// step's failure).
pub(crate) fn outcome_of(
    py: Python<'_>,
    result: PyResult<Bound<'_, PyAny>>,
    query: bool,
) -> (Outcome, Option<PyErr>) {
    match result {
        Ok(value) if value.is_none() => {
            if query {
                let reason = "the tool has no record of the request".to_string();
                (
                    Outcome::Failed {
                        retryable: true,
                        reason,
                    },
                    None,
                )
            } else {
                (
                    Outcome::Confirmed {
                        receipt: Vec::new(),
                    },
                    None,
                )
            }
        }
        Ok(value) => match value.cast::<PyBytes>() {
            Ok(bytes) => (
                Outcome::Confirmed {
                    receipt: bytes.as_bytes().to_vec(),
                },
                None,
            ),
            Err(_) => {
                let reason = format!(
                    "the tool returned a {}, not bytes or None: it ran, and whether it acted \
                     is not known",
                    type_name(&value)
                );
                (Outcome::Unknown { reason }, None)
            }
        },
        Err(e) => {
            let value = e.value(py);
            let reason_attr = || reason_of(value).unwrap_or_else(|| value.to_string());
            let is =
                |name: &str| package_class(py, name).is_some_and(|class| e.is_instance(py, &class));
            let outcome = if is("ToolFailed") {
                let retryable = value
                    .getattr("retryable")
                    .and_then(|r| r.is_truthy())
                    .unwrap_or(false);
                Outcome::Failed {
                    retryable,
                    reason: reason_attr(),
                }
            } else if is("OutcomeUnknown") {
                Outcome::Unknown {
                    reason: reason_attr(),
                }
            } else {
                Outcome::Failed {
                    retryable: false,
                    reason: describe(py, &e),
                }
            };
            (outcome, Some(e))
        }
    }
}

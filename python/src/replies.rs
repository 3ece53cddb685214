//! What `ctx` calls take and give back beyond bytes: a model call's
//! `Usage` (charged to the run's budget), how each child of a fan-out ended
//! (`ChildOutput`), and the reading of a model function's answer.

use actum::books::{Cost, Usage};
use actum::runtime::ChildOutput;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

/// What a model call cost (`ctx.decide_with_usage`): prompt and completion
/// tokens and money in integer micro-units; each counts against the run's
/// budget (`Engine.set_budget`).
#[pyclass(module = "actum", name = "Usage", frozen, get_all, eq)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PyUsage {
    /// Prompt tokens.
    tokens_in: u64,
    /// Completion tokens.
    tokens_out: u64,
    /// Money, in integer micro-units.
    cost_micros: u64,
}

#[pymethods]
impl PyUsage {
    #[new]
    #[pyo3(signature = (tokens_in=0, tokens_out=0, cost_micros=0))]
    fn new(tokens_in: u64, tokens_out: u64, cost_micros: u64) -> PyUsage {
        PyUsage {
            tokens_in,
            tokens_out,
            cost_micros,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Usage(tokens_in={}, tokens_out={}, cost_micros={})",
            self.tokens_in, self.tokens_out, self.cost_micros
        )
    }
}

impl PyUsage {
    pub(crate) fn usage(&self) -> Usage {
        Usage {
            tokens_in: self.tokens_in,
            tokens_out: self.tokens_out,
            cost_micros: self.cost_micros,
        }
    }

    /// The usage as a budget's cost (no tool call).
    pub(crate) fn cost(&self) -> Cost {
        Cost::of_usage(self.usage())
    }
}

/// How one child of a fan-out (`ctx.children`) ended: `run_id` (the child
/// run, `<run>:<name>.<n>`, n from 1), `index` (its place among the calls,
/// from 0), `state` (`"completed"`, `"failed"` or `"cancelled"`), `output`
/// (its output if it completed, else None) and `completed`.
#[pyclass(module = "actum", name = "ChildOutput", frozen)]
pub struct PyChildOutput {
    /// The child run.
    #[pyo3(get)]
    run_id: String,
    /// Its place among the calls, from 0.
    #[pyo3(get)]
    index: usize,
    /// Its terminal state.
    #[pyo3(get)]
    state: String,
    /// Its output, if it completed (the `output` getter).
    output: Option<Vec<u8>>,
}

#[pymethods]
impl PyChildOutput {
    /// The child's output if it completed, else None.
    #[getter]
    fn output<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.output.as_deref().map(|o| PyBytes::new(py, o))
    }

    /// True if the child completed.
    #[getter]
    fn completed(&self) -> bool {
        self.output.is_some()
    }

    fn __repr__(&self) -> String {
        format!(
            "ChildOutput(run_id={:?}, index={}, state={:?})",
            self.run_id, self.index, self.state
        )
    }
}

impl PyChildOutput {
    pub(crate) fn of(child: ChildOutput) -> PyChildOutput {
        PyChildOutput {
            run_id: child.run.to_string(),
            index: child.index,
            state: child.state.to_string(),
            output: child.output,
        }
    }
}

/// What a model function returned: bytes, or with `with_usage`, a pair
/// `(bytes, Usage)`.
pub(crate) fn model_answer(
    out: &Bound<'_, PyAny>,
    name: &str,
    with_usage: bool,
) -> PyResult<(Vec<u8>, Usage)> {
    let output = |value: &Bound<'_, PyAny>| {
        value
            .cast::<PyBytes>()
            .map(|b| b.as_bytes().to_vec())
            .map_err(|_| {
                let want = if with_usage {
                    "a pair (bytes, actum.Usage)"
                } else {
                    "bytes"
                };
                PyTypeError::new_err(format!(
                    "the model function of decide({name:?}) must return {want}"
                ))
            })
    };
    if !with_usage {
        return Ok((output(out)?, Usage::default()));
    }
    let shape = || {
        PyTypeError::new_err(format!(
            "the model function of decide_with_usage({name:?}) must return a pair \
             (bytes, actum.Usage)"
        ))
    };
    let pair = out.cast::<PyTuple>().map_err(|_| shape())?;
    if pair.len() != 2 {
        return Err(shape());
    }
    let usage = pair.get_item(1)?;
    let usage = usage.cast::<PyUsage>().map_err(|_| shape())?;
    Ok((output(&pair.get_item(0)?)?, usage.get().usage()))
}

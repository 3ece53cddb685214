//! The simulated model: answers a prompt (by its digest) deterministically
//! and remembers every call it was paid for, so the checker can tell a
//! replayed decision from a second payment.
//!
//! **Invariant:** the same input digest always gets the same output.

use actum::books::{Digest, RunId, Usage};

/// One paid model call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelCall {
    /// The run that asked.
    pub run: RunId,
    /// Its position in the run's decision journal.
    pub position: u64,
    /// The prompt's digest.
    pub input: Digest,
    /// When, virtual ms.
    pub at_ms: u64,
}

/// The model and its bill.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    calls: Vec<ModelCall>,
}

impl Model {
    /// Answers `input` for `run` at `position`: the output and its usage.
    pub fn call(
        &mut self,
        run: &RunId,
        position: u64,
        input: Digest,
        now_ms: u64,
    ) -> (Vec<u8>, Usage) {
        self.calls.push(ModelCall {
            run: run.clone(),
            position,
            input,
            at_ms: now_ms,
        });
        let output = format!("decision {} for {}", input.short(), run).into_bytes();
        let usage = Usage {
            tokens_in: 100 + u64::from(input.0[0]),
            tokens_out: 20 + u64::from(input.0[1]),
            cost_micros: 300 + u64::from(input.0[2]),
        };
        (output, usage)
    }

    /// Every call paid for, in order.
    pub fn calls(&self) -> &[ModelCall] {
        &self.calls
    }
}

//! Journaled decisions: a model call's input digest, output and usage,
//! recorded at a position of the run so that a resumed run replays it. The
//! rule that records one is in `rules/decision.rs`.

use serde::{Deserialize, Serialize};

use crate::books::base::digest::Digest;
use crate::books::base::ids::{FencingToken, RunId};

/// What a model call consumed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Completion tokens.
    pub tokens_out: u64,
    /// Cost in millionths of a US dollar.
    pub cost_micros: u64,
}

/// One recorded model call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// The run that made the call.
    pub run: RunId,
    /// Its position among the run's calls, from 0.
    pub position: u64,
    /// Digest of the call's input (prompt, tools, parameters).
    pub input_digest: Digest,
    /// The model's output, encoded by the caller.
    pub output: Vec<u8>,
    /// Why (the model's stated reasoning or the caller's summary).
    pub rationale: String,
    /// What it cost.
    pub usage: Usage,
    /// When it was recorded, ms since the epoch.
    pub recorded_ms: u64,
    /// The fencing token it was recorded under.
    pub token: FencingToken,
}

//! A run's lease: which worker holds the run, under which fencing token,
//! until when. When a run may be claimed is a question about the run, in
//! `records/run.rs`; the rules that grant leases are in `rules/lease.rs`.

use serde::{Deserialize, Serialize};

use crate::books::base::ids::{FencingToken, WorkerId};

/// Ownership of a run by one worker until `expires_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The worker holding the lease.
    pub worker: WorkerId,
    /// The fencing token of this acquisition.
    pub token: FencingToken,
    /// The first instant (ms since the epoch) at which the lease is dead.
    pub expires_ms: u64,
}

impl Lease {
    /// True while the lease has not expired.
    pub fn is_live(&self, now_ms: u64) -> bool {
        now_ms < self.expires_ms
    }
}

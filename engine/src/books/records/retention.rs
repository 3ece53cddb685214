//! Which runs refer to a blob, so that pruning a run frees the blobs no
//! other run needs. The rule that prunes is in `rules/retention.rs`.

use serde::{Deserialize, Serialize};

use crate::books::base::digest::Digest;
use crate::books::base::ids::RunId;

/// The blobs a run references, each once, in digest order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRefs {
    /// The run.
    pub run: RunId,
    /// The blobs it references (checkpoint parts, stored arguments, receipts
    /// kept by digest).
    pub digests: Vec<Digest>,
}

//! Which runs refer to a blob, so that pruning a run frees the blobs no
//! other run needs. The rule that prunes is in `rules/retention.rs`.

use std::collections::BTreeSet;

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

impl BlobRefs {
    /// No references yet.
    pub fn none(run: RunId) -> BlobRefs {
        BlobRefs {
            run,
            digests: Vec::new(),
        }
    }

    /// Whether `digest` is among them.
    pub fn contains(&self, digest: &Digest) -> bool {
        self.digests.binary_search(digest).is_ok()
    }

    /// Adds `digest` in its place; `false` (nothing changed) if it was there.
    pub fn insert(&mut self, digest: Digest) -> bool {
        let Err(at) = self.digests.binary_search(&digest) else {
            return false;
        };
        self.digests.insert(at, digest);
        true
    }

    /// Adds every digest of `added` (a set, so in order and each once),
    /// keeping them in order and each once.
    pub fn extend(&mut self, added: &BTreeSet<Digest>) {
        let mut all: BTreeSet<Digest> = std::mem::take(&mut self.digests).into_iter().collect();
        all.extend(added.iter().copied());
        self.digests = all.into_iter().collect();
    }
}

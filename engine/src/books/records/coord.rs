//! Resources (a lease on a name shared by runs) and shared keys (a
//! versioned value with its recent changes). The rules that acquire,
//! release and set them are in `rules/coord.rs`.

use serde::{Deserialize, Serialize};

use crate::books::base::digest::Digest;
use crate::books::base::ids::{FencingToken, ResourceId, RunId, SharedKeyId};
use crate::books::base::limits::SHARED_CHANGES_MAX;

/// Who holds a resource, under which token, until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceHold {
    /// The holding run.
    pub run: RunId,
    /// The fencing token of this hold; tools get it.
    pub token: FencingToken,
    /// When the hold dies unless renewed, ms since the epoch.
    pub expires_ms: u64,
    /// When it was granted, ms since the epoch.
    pub acquired_ms: u64,
}

/// A named resource: its current hold (live or expired; `None` once
/// released) and the token its next grant hands out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceBook {
    /// The resource.
    pub resource: ResourceId,
    /// The latest hold, unless released.
    pub hold: Option<ResourceHold>,
    /// The token the next grant hands out.
    pub next_token: FencingToken,
}

/// One change of a shared key, kept with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedChange {
    /// The version it made.
    pub version: u64,
    /// When, ms since the epoch.
    pub at_ms: u64,
    /// Who: the run's name, or the operator's.
    pub by: String,
    /// The run that made it, if a run did (under `token`).
    pub run: Option<RunId>,
    /// The run's lease token, if a run did.
    pub token: Option<FencingToken>,
    /// The digest of the value it set (`None`: the key was cleared).
    pub value_digest: Option<Digest>,
    /// Why.
    pub why: String,
}

/// A shared key: its value (`None`: cleared), version and latest changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedEntry {
    /// The key.
    pub key: SharedKeyId,
    /// The value, or `None` once cleared.
    pub value: Option<Vec<u8>>,
    /// Grows by one per set, from 1; 0 is "never set".
    pub version: u64,
    /// The latest changes, oldest first (at most [`SHARED_CHANGES_MAX`]).
    pub changes: Vec<SharedChange>,
}

/// `entry` after `change` set `value`: the change appended, the oldest
/// dropped past [`SHARED_CHANGES_MAX`].
pub(crate) fn with_change(
    entry: Option<SharedEntry>,
    key: &SharedKeyId,
    value: Option<Vec<u8>>,
    change: SharedChange,
) -> SharedEntry {
    let mut entry = entry.unwrap_or_else(|| SharedEntry {
        key: key.clone(),
        value: None,
        version: 0,
        changes: Vec::new(),
    });
    entry.version = change.version;
    entry.value = value;
    entry.changes.push(change);
    if entry.changes.len() > SHARED_CHANGES_MAX {
        let excess = entry.changes.len() - SHARED_CHANGES_MAX;
        entry.changes.drain(..excess);
    }
    assert!(entry.changes.len() <= SHARED_CHANGES_MAX);
    entry
}

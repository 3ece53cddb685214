//! Checkpoints: the named parts a run saves and the meta record that points
//! at their blobs, and the schema check a loader makes. The rule that saves
//! one and the loaders that read one back are in `rules/checkpoint.rs`.

use serde::{Deserialize, Serialize};

use crate::books::base::digest::Digest;
use crate::books::base::ids::{FencingToken, RunId};
use crate::error::{Error, Result};

/// One named part of a checkpoint, as the caller hands it in
/// (`messages`, `plan`, `cursor`, ...).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// The part's name, unique within the checkpoint.
    pub name: String,
    /// Its bytes, encoded by the caller.
    pub bytes: Vec<u8>,
}

/// A part as the metadata records it: by digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRef {
    /// The part's name.
    pub name: String,
    /// The digest of its bytes (the blob table key).
    pub digest: Digest,
    /// Its size in bytes.
    pub size_bytes: u64,
}

/// One checkpoint's metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// The run checkpointed.
    pub run: RunId,
    /// 1 for the run's first checkpoint, then +1 each.
    pub version: u64,
    /// The caller's schema version of the parts.
    pub schema_version: u32,
    /// The parts, in the order the caller gave them.
    pub parts: Vec<PartRef>,
    /// When it was saved, ms since the epoch.
    pub saved_ms: u64,
    /// The fencing token it was saved under.
    pub token: FencingToken,
}

/// A loaded checkpoint: its metadata and the parts' bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedCheckpoint {
    /// The metadata.
    pub meta: CheckpointMeta,
    /// The parts, in metadata order.
    pub parts: Vec<Part>,
}

/// Refuses a checkpoint whose schema is not `expected_schema`. A caller with
/// a migration registered for `meta.schema_version` runs it instead of
/// calling this.
pub fn check_schema(meta: &CheckpointMeta, expected_schema: u32) -> Result<()> {
    if meta.schema_version == expected_schema {
        return Ok(());
    }
    Err(Error::SchemaMismatch {
        run: meta.run.clone(),
        found: meta.schema_version,
        expected: expected_schema,
    })
}

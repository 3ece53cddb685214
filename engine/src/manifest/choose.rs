//! Choosing the current manifest from the verdicts on both copies: a pure
//! decision, no I/O.
//!
//! **Invariant:** the chosen copy is the valid copy with the highest
//! sequence; an intact copy in an unknown format version, or two valid
//! copies that disagree about which database they belong to or share a
//! sequence, stop the open instead of being guessed around.

use std::path::Path;

use super::codec::{DATABASE_ID_OFFSET, FORMAT_VERSION, SEQUENCE_OFFSET};
use super::content::Manifest;
use super::copy::{Verdict, copy_path};
use crate::error::{Error, Result};

/// The outcome of a successful choice.
#[derive(Debug)]
pub(crate) struct Choice {
    /// The slot (0 or 1) of the winning copy.
    pub(crate) slot: usize,
    /// Its contents.
    pub(crate) manifest: Manifest,
    /// Why each invalid copy was rejected (an older valid copy is not
    /// rejected, merely older).
    pub(crate) rejected: Vec<String>,
}

/// Picks the current manifest from the verdicts on slots 0 and 1 of `dir`.
pub(crate) fn choose(dir: &Path, verdicts: [Verdict; 2]) -> Result<Choice> {
    // An intact copy from a newer format wins over any fallback: see
    // docs/FORMAT.md, "Versioning", for why.
    for (slot, verdict) in verdicts.iter().enumerate() {
        if let Verdict::Unsupported { found } = verdict {
            return Err(Error::UnsupportedFormat {
                file: copy_path(dir, slot),
                found: *found,
                supported: FORMAT_VERSION,
            });
        }
    }
    let [zero, one] = verdicts;
    match (zero, one) {
        (Verdict::Valid(a), Verdict::Valid(b)) => choose_between_valid(dir, a, b),
        (Verdict::Valid(manifest), Verdict::Invalid(reason)) => Ok(Choice {
            slot: 0,
            manifest,
            rejected: vec![reason],
        }),
        (Verdict::Invalid(reason), Verdict::Valid(manifest)) => Ok(Choice {
            slot: 1,
            manifest,
            rejected: vec![reason],
        }),
        (Verdict::Invalid(zero), Verdict::Invalid(one)) => Err(Error::NoValidManifest {
            dir: dir.to_path_buf(),
            reasons: vec![zero, one],
        }),
        (Verdict::Unsupported { .. }, _) | (_, Verdict::Unsupported { .. }) => {
            unreachable!("unsupported copies were refused above")
        }
    }
}

/// Both copies are intact: they must agree on the database, and the one
/// with the higher sequence is current.
fn choose_between_valid(dir: &Path, zero: Manifest, one: Manifest) -> Result<Choice> {
    if zero.database_id != one.database_id {
        return Err(Error::corrupt(
            copy_path(dir, 1),
            DATABASE_ID_OFFSET as u64,
            format!(
                "the manifest copies belong to different databases: {} holds {}, {} holds {}",
                copy_path(dir, 0).display(),
                zero.database_id,
                copy_path(dir, 1).display(),
                one.database_id
            ),
        ));
    }
    if zero.sequence == one.sequence {
        // Updates always write a sequence one above the other copy's, so
        // equal sequences mean a copy was replaced from outside.
        return Err(Error::corrupt(
            copy_path(dir, 1),
            SEQUENCE_OFFSET as u64,
            format!(
                "both manifest copies carry sequence {}; one was not written by an update",
                zero.sequence
            ),
        ));
    }
    let (slot, manifest) = if zero.sequence > one.sequence {
        (0, zero)
    } else {
        (1, one)
    };
    Ok(Choice {
        slot,
        manifest,
        rejected: Vec::new(),
    })
}

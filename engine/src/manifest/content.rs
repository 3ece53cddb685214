//! [`Manifest`]: what the database's durable root says, and the rules every
//! manifest obeys whether it is about to be written or was just read.
//!
//! **Invariant:** a `Manifest` that passes [`Manifest::validate`] encodes to a
//! copy that decodes back to an equal `Manifest`; `decode` never returns one
//! that fails `validate`.

use crate::ids::{DatabaseId, Lsn, SegmentId};

/// The longest state-store file name a manifest can hold, in bytes.
pub const STATE_FILE_NAME_MAX_BYTES: usize = 255;

/// The contents of the database's durable root.
///
/// One manifest names the state-store checkpoint that recovery starts from
/// and the oldest WAL segment that recovery still needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The database this manifest belongs to; identical in both copies.
    pub database_id: DatabaseId,
    /// Grows by exactly one per durable update; the copy with the highest
    /// valid sequence is the current one.
    pub sequence: u64,
    /// The state-store file the checkpoint lives in, a plain file name inside
    /// the database directory (for example `state.redb`).
    pub state_file: String,
    /// Every WAL record up to and including this LSN is reflected in the
    /// state-store checkpoint; recovery replays from the LSN after it.
    pub applied_lsn: Lsn,
    /// The oldest WAL segment recovery needs. Younger live segments are
    /// found by listing the WAL directory and must be contiguous from here.
    pub first_live_segment: SegmentId,
    /// The last LSN of the log when the database was closed cleanly, or
    /// `None` if the last close was not clean (or has not happened yet).
    pub clean_shutdown_lsn: Option<Lsn>,
}

impl Manifest {
    /// The first manifest of a new database: sequence 1, nothing applied,
    /// the log starting at segment 1, no clean shutdown recorded.
    pub fn new(database_id: DatabaseId, state_file: impl Into<String>) -> Manifest {
        Manifest {
            database_id,
            sequence: 1,
            state_file: state_file.into(),
            applied_lsn: Lsn::ZERO,
            first_live_segment: SegmentId(1),
            clean_shutdown_lsn: None,
        }
    }

    /// A copy of this manifest with the sequence advanced by one: the
    /// starting point for the content passed to `ManifestStore::update`.
    pub fn next(&self) -> Manifest {
        let mut next = self.clone();
        next.sequence = self
            .sequence
            .checked_add(1)
            .expect("manifest sequence space exhausted");
        next
    }

    /// Checks the rules every manifest obeys; the error says which one broke.
    ///
    /// The state file must be a plain, non-empty UTF-8 file name of at most
    /// [`STATE_FILE_NAME_MAX_BYTES`] bytes (no `/`, no NUL, not `.` or `..`),
    /// segment numbers start at 1, and a clean shutdown cannot precede the
    /// applied LSN.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(problem) = state_file_problem(&self.state_file) {
            return Err(format!("state file name {:?} {problem}", self.state_file));
        }
        if self.first_live_segment.0 == 0 {
            return Err("first live segment is 0; segment numbers start at 1".to_string());
        }
        if let Some(clean) = self.clean_shutdown_lsn
            && clean < self.applied_lsn
        {
            return Err(format!(
                "clean shutdown at {clean} precedes the applied {}",
                self.applied_lsn
            ));
        }
        Ok(())
    }
}

/// Why `name` cannot be a state-store file name, or `None` if it can.
pub(crate) fn state_file_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.len() > STATE_FILE_NAME_MAX_BYTES {
        Some("is longer than 255 bytes")
    } else if name == "." || name == ".." {
        Some("names a directory")
    } else if name.contains('/') || name.contains('\0') {
        Some("contains '/' or NUL; it must be a plain file name")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_accepts_a_new_manifest_and_rejects_each_broken_rule() {
        let good = Manifest::new(DatabaseId(7), "state.redb");
        assert_eq!(good.validate(), Ok(()));
        assert_eq!(good.next().sequence, 2);

        let broken = [
            Manifest {
                state_file: String::new(),
                ..good.clone()
            },
            Manifest {
                state_file: "a/b".to_string(),
                ..good.clone()
            },
            Manifest {
                state_file: "..".to_string(),
                ..good.clone()
            },
            Manifest {
                state_file: "x".repeat(STATE_FILE_NAME_MAX_BYTES + 1),
                ..good.clone()
            },
            Manifest {
                first_live_segment: SegmentId(0),
                ..good.clone()
            },
            Manifest {
                applied_lsn: Lsn(10),
                clean_shutdown_lsn: Some(Lsn(9)),
                ..good.clone()
            },
        ];
        for manifest in broken {
            assert!(manifest.validate().is_err(), "{manifest:?} must be invalid");
        }
        let longest = Manifest {
            state_file: "x".repeat(STATE_FILE_NAME_MAX_BYTES),
            ..good
        };
        assert_eq!(longest.validate(), Ok(()));
    }
}

//! What a verify found: one [`Finding`] per thing checked or found wrong,
//! each naming its file and, where the engine knows it, the byte offset.
//!
//! **Invariant:** a report is damaged exactly when one of its findings is
//! [`Status::Damaged`]; a torn tail that recovery would cut is a note, not
//! damage, because it was never acknowledged.

use std::path::PathBuf;

use serde::Serialize;

use crate::ids::Lsn;

/// The part of the database a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Area {
    /// A manifest copy, or the choice between them.
    Manifest,
    /// The write-ahead log's segments and records.
    Wal,
    /// The redb state store: its pages and its rows.
    StateStore,
}

impl Area {
    /// The area's name as printed (`manifest`, `wal`, `state store`).
    pub fn name(self) -> &'static str {
        match self {
            Area::Manifest => "manifest",
            Area::Wal => "wal",
            Area::StateStore => "state store",
        }
    }
}

/// How what was checked stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Checked and intact.
    Intact,
    /// Worth knowing, and harmless: a torn tail that was never
    /// acknowledged, an older manifest copy.
    Note,
    /// Damaged: bytes the database acknowledged or depends on are wrong
    /// or missing.
    Damaged,
}

impl Status {
    /// The status's name as printed (`ok`, `note`, `DAMAGED`).
    pub fn name(self) -> &'static str {
        match self {
            Status::Intact => "ok",
            Status::Note => "note",
            Status::Damaged => "DAMAGED",
        }
    }
}

/// One thing checked, or found wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Which part of the database.
    pub area: Area,
    /// The file (or directory) it is about.
    pub file: PathBuf,
    /// The byte offset within `file`, where the engine knows it.
    pub offset: Option<u64>,
    /// How it stands.
    pub status: Status,
    /// What was found, in words.
    pub what: String,
}

/// Everything a verify found, in the order it checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// The database directory.
    pub dir: PathBuf,
    /// What was checked and found, in order.
    pub findings: Vec<Finding>,
    /// WAL records read, both checksums and their payload checked.
    pub wal_records_checked: u64,
    /// State store rows decoded and checksummed.
    pub state_rows_checked: u64,
    /// Set by [`super::verify_snapshot`]: the LSN the copy of the live
    /// database's log ended at, the state every check saw.
    pub snapshot_lsn: Option<Lsn>,
}

impl VerifyReport {
    /// True if any finding is damage.
    pub fn damaged(&self) -> bool {
        self.findings.iter().any(|f| f.status == Status::Damaged)
    }

    /// The damaged findings.
    pub fn damage(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.status == Status::Damaged)
    }

    pub(crate) fn push(
        &mut self,
        area: Area,
        status: Status,
        (file, offset): (PathBuf, Option<u64>),
        what: impl Into<String>,
    ) {
        let what = what.into();
        assert!(!what.is_empty(), "a finding says what it found");
        self.findings.push(Finding {
            area,
            file,
            offset,
            status,
            what,
        });
    }

    /// Records `error` (from checking `area`) as damage at the file and
    /// offset it names, or at `fallback` if it names none.
    pub(crate) fn damaged_by(&mut self, area: Area, fallback: PathBuf, error: &crate::Error) {
        use crate::Error;
        let at = match error {
            Error::Corrupt { file, offset, .. }
            | Error::UnsupportedPayload { file, offset, .. } => (file.clone(), Some(*offset)),
            Error::ForeignFile { file, .. }
            | Error::UnsupportedFormat { file, .. }
            | Error::StateStore { file, .. } => (file.clone(), None),
            Error::Io { path, .. } => (path.clone(), None),
            _ => (fallback, None),
        };
        let what = match error {
            Error::Corrupt { reason, .. } => reason.clone(),
            other => other.to_string(),
        };
        self.push(area, Status::Damaged, at, what);
    }
}

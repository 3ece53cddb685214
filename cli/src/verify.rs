//! `actum verify DIR`: every checksum of the manifest copies, the WAL and
//! the state store, checked without writing (`actum::verify::verify_dir`,
//! or `verify_snapshot` on a copy when another process's engine holds the
//! directory);
//! each finding printed with its file and offset; exit 1 if anything is
//! damaged.
//!
//! **Invariant:** the exit code is 1 exactly when the report holds damage,
//! 0 when it holds none, and 2 when the directory could not be checked.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use actum::Error;
use actum::storage::FsStorage;
use actum::verify::{VerifyReport, verify_dir, verify_snapshot};

use crate::failure::CliError;
use crate::progress;

/// Exit code: the database is damaged.
const EXIT_DAMAGED: u8 = 1;

/// Runs `verify`.
pub fn run(dir: &Path, json: bool) -> Result<ExitCode, CliError> {
    crate::place::refuse_url(
        dir,
        "verify",
        "the server keeps its own checksums (`actum inspect` reads the books there)",
    )?;
    let bar = progress::counter("checking");
    bar.set_message(dir.display().to_string());
    let report = match verify_dir(Arc::new(FsStorage::new()), dir) {
        // Another process's engine holds it: check a consistent copy.
        Err(Error::Locked { .. }) => verify_snapshot(Arc::new(FsStorage::new()), dir),
        other => other,
    };
    bar.finish_and_clear();
    let report = report.map_err(|e| CliError::engine(dir, e))?;
    let mut out = std::io::stdout().lock();
    if json {
        let mut value = serde_json::to_value(&report).map_err(|e| CliError::output(e.into()))?;
        if let Some(object) = value.as_object_mut() {
            object.insert("damaged".into(), report.damaged().into());
        }
        writeln!(out, "{value}").map_err(CliError::output)?;
    } else {
        write_findings(&report, &mut out).map_err(CliError::output)?;
    }
    Ok(if report.damaged() {
        ExitCode::from(EXIT_DAMAGED)
    } else {
        ExitCode::SUCCESS
    })
}

fn write_findings(report: &VerifyReport, out: &mut dyn Write) -> std::io::Result<()> {
    if let Some(lsn) = report.snapshot_lsn {
        writeln!(
            out,
            "as of LSN {lsn} (live database: another process has it open; a consistent copy \
             of the manifest, the state store and the live WAL segments was checked; spare \
             segments and files being prepared were not)\n",
            lsn = lsn.0
        )?;
    }
    for f in &report.findings {
        let at = match f.offset {
            Some(offset) => format!("{} at byte {offset}", f.file.display()),
            None => f.file.display().to_string(),
        };
        writeln!(
            out,
            "{:<8} {:<12} {at}\n         {}",
            f.status.name(),
            f.area.name(),
            f.what
        )?;
    }
    let damaged = report.damage().count();
    if damaged == 0 {
        writeln!(
            out,
            "\n{}: intact ({} WAL records and {} state store rows checked)",
            report.dir.display(),
            report.wal_records_checked,
            report.state_rows_checked
        )
    } else {
        writeln!(
            out,
            "\n{}: DAMAGED ({damaged} finding(s) above); see docs/DURABILITY.md on repair",
            report.dir.display()
        )
    }
}

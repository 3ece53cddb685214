//! `actum repair DIR`: offline, after `verify` finds the log damaged, cut
//! the log back to the last good record so the database opens again,
//! keeping a copy of the log as it was, and say what was lost.
//!
//! It runs `verify` first. With no damage it changes nothing. Damage in the
//! state store is not the log's to cut: it is reported and nothing is
//! changed (restore the directory from a copy). Otherwise the `wal/`
//! directory is copied whole, every file synced, to `DIR.cut-N` beside the
//! database (the first N free), then the engine opens with
//! `WalOptions::repair`, which cuts the log at the damage and reports the
//! acknowledged records it dropped (file, byte offset, LSN range), and
//! closes cleanly.
//!
//! **Invariant:** nothing in DIR changes unless the copy of its log is
//! complete and synced first.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use actum::engine::{Engine, EngineOptions};
use actum::storage::FsStorage;
use actum::verify::{Area, verify_dir};
use serde_json::json;

use crate::args::RepairArgs;
use crate::failure::CliError;
use crate::progress;

/// The most `DIR.cut-N` directories looked at for a free name.
const COPIES_MAX: u32 = 1_000;

/// Runs `repair`.
pub fn run(args: &RepairArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    crate::place::refuse_url(
        dir,
        "repair",
        "there is no log to cut back; the server recovers its own tables",
    )?;
    let bar = progress::counter("checking");
    bar.set_message(dir.display().to_string());
    let report = verify_dir(Arc::new(FsStorage::new()), dir);
    bar.finish_and_clear();
    let report = report.map_err(|e| CliError::engine(dir, e))?;
    if !report.damaged() {
        return say(args, &json!({"damaged": false}), || {
            format!(
                "{}: verify found no damage; nothing was changed",
                dir.display()
            )
        });
    }
    let state_damage: Vec<String> = report
        .damage()
        .filter(|f| f.area == Area::StateStore)
        .map(|f| format!("{} at {:?}: {}", f.file.display(), f.offset, f.what))
        .collect();
    if !state_damage.is_empty() {
        return Err(CliError::unusable(format!(
            "{}: the state store is damaged ({}); repair cuts only the log, so nothing was \
             changed: restore the directory from a copy",
            dir.display(),
            state_damage.join("; ")
        )));
    }
    let damage: Vec<String> = report
        .damage()
        .map(|f| match f.offset {
            Some(at) => format!("{} at byte {at}: {}", f.file.display(), f.what),
            None => format!("{}: {}", f.file.display(), f.what),
        })
        .collect();
    let copy = copy_log(dir)?;
    let mut options = EngineOptions::default();
    options.db.wal.repair = true;
    let fail = |e| CliError::engine(dir, e);
    let engine = Engine::open_existing(dir, options).map_err(fail)?;
    let dropped = engine.recovery().repair_dropped.clone();
    let durable = engine.recovery().durable_lsn;
    engine.close().map_err(fail)?;
    let value = json!({
        "damaged": true,
        "damage": damage,
        "copy": copy,
        "dropped": dropped,
        "log_ends_at": durable.0,
    });
    say(args, &value, || {
        let mut text = format!("{}: verify found damage:\n", dir.display());
        for d in &damage {
            text.push_str(&format!("  {d}\n"));
        }
        match &dropped {
            Some(what) => text.push_str(&format!(
                "cut the log back to the last good record ({durable}); acknowledged records \
                 lost: {what}\n"
            )),
            None => text.push_str(&format!(
                "the log opened without cutting acknowledged records; it ends at {durable}\n"
            )),
        }
        text.push_str(&format!(
            "the log as it was is kept in {}; run `actum verify {}` to check the result",
            copy.display(),
            dir.display()
        ));
        text
    })
}

fn say(
    args: &RepairArgs,
    value: &serde_json::Value,
    text: impl FnOnce() -> String,
) -> Result<ExitCode, CliError> {
    let said = if args.json {
        writeln!(std::io::stdout(), "{value}")
    } else {
        writeln!(std::io::stdout(), "{}", text())
    };
    said.map_err(CliError::output)?;
    Ok(ExitCode::SUCCESS)
}

/// Copies `dir/wal` to `DIR.cut-N/wal` (the first N free), every file and
/// directory synced; returns the copy's directory.
fn copy_log(dir: &Path) -> Result<PathBuf, CliError> {
    let io = |what: &str, path: &Path, e: std::io::Error| {
        CliError::unusable(format!(
            "{what} {}: {e}; nothing was changed",
            path.display()
        ))
    };
    let name = dir
        .file_name()
        .map_or_else(|| "db".into(), |n| n.to_string_lossy().into_owned());
    let parent = dir.parent().unwrap_or_else(|| Path::new("."));
    let target = (1..=COPIES_MAX)
        .map(|n| parent.join(format!("{name}.cut-{n}")))
        .find(|p| !p.exists())
        .ok_or_else(|| {
            CliError::unusable(format!(
                "{}: {COPIES_MAX} copies {name}.cut-N exist already; remove some",
                parent.display()
            ))
        })?;
    let from = dir.join("wal");
    let to = target.join("wal");
    fs::create_dir_all(&to).map_err(|e| io("cannot create", &to, e))?;
    let mut entries: Vec<PathBuf> = fs::read_dir(&from)
        .map_err(|e| io("cannot read", &from, e))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| io("cannot read", &from, e))?;
    entries.sort();
    for path in entries.iter().filter(|p| p.is_file()) {
        let Some(file) = path.file_name() else {
            continue;
        };
        let dest = to.join(file);
        fs::copy(path, &dest).map_err(|e| io("cannot copy", path, e))?;
        fs::File::open(&dest)
            .and_then(|f| f.sync_all())
            .map_err(|e| io("cannot sync", &dest, e))?;
    }
    for d in [&to, &target, parent] {
        fs::File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(|e| io("cannot sync", d, e))?;
    }
    Ok(target)
}

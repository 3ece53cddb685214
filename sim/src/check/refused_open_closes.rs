//! Invariant: an open the engine refuses leaves no file of the database
//! open. A state store refused for damage has its redb handle let go, never
//! closed (its close would write), and the handle's file goes with it; a
//! handle kept until the process ends would hold the file open, and a
//! long-lived process that meets damaged copies again and again (a fuzz
//! campaign, an operator's retries) would pile them up.
//!
//! One documented exception (docs/DURABILITY.md, "State store checks"): a
//! store redb panicked in keeps its handle, since a lock the panic poisoned
//! would make its destructor panic while unwinding, which aborts.

use std::collections::BTreeMap;
use std::path::Path;

use actum::state::sums_path;
use actum::{Error, RedbPanicked};

/// Checks what `open_files` (each file some handle of the simulated disk
/// holds, and how many) says after an open refused with `error`, following
/// bit rot at `what`.
pub fn refused_open_leaves_no_file_open(
    open_files: &BTreeMap<String, u32>,
    error: &Error,
    what: &str,
) -> Result<(), String> {
    let kept = kept_store(error);
    let held: Vec<String> = open_files
        .iter()
        .filter(|(path, _)| {
            let path = Path::new(path.as_str());
            !kept.is_some_and(|store| path == store || path == sums_path(store))
        })
        .map(|(path, handles)| format!("{path} ({handles} handle(s))"))
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    Err(format!(
        "after bit rot at {what} the open was refused ({error}), and it left open: {}",
        held.join(", ")
    ))
}

/// The state store whose handle is kept by design (the exception above):
/// the file of a `StateStore` error, anywhere in `error`'s causes, whose
/// source is redb's panic.
fn kept_store(error: &Error) -> Option<&Path> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(Error::StateStore { file, source, .. }) = e.downcast_ref::<Error>()
            && source.is::<RedbPanicked>()
        {
            return Some(file);
        }
        cause = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(paths: &[&str]) -> BTreeMap<String, u32> {
        paths.iter().map(|p| ((*p).to_string(), 1)).collect()
    }

    #[test]
    fn a_refusal_with_nothing_open_passes_and_a_held_file_is_named() {
        let refused = Error::corrupt("/db/state.redb", 0, "a page sum does not match");
        assert!(refused_open_leaves_no_file_open(&open(&[]), &refused, "x").is_ok());
        let err = refused_open_leaves_no_file_open(&open(&["/db/state.redb"]), &refused, "x")
            .expect_err("a held file is a violation");
        assert!(err.contains("/db/state.redb (1 handle(s))"), "{err}");
    }

    #[test]
    fn a_store_redb_panicked_in_may_keep_its_own_files_and_no_other() {
        let panicked = Error::StateStore {
            file: "/db/state.redb".into(),
            op: "verify page checksums",
            source: Box::new(RedbPanicked {
                message: "index out of range".into(),
            }),
        };
        let kept = open(&["/db/state.redb", "/db/state.redb.sums"]);
        assert!(refused_open_leaves_no_file_open(&kept, &panicked, "x").is_ok());
        // Only that store's files: a segment left open is still a violation.
        let err = refused_open_leaves_no_file_open(
            &open(&["/db/state.redb", "/db/wal/00000001.wal"]),
            &panicked,
            "x",
        )
        .expect_err("a segment held open is a violation");
        assert!(err.contains("00000001.wal (1 handle(s))") && !err.contains("state.redb ("));
    }
}

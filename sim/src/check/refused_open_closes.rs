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

use actum::{Error, RedbPanicked};

/// Checks what `open_files` (each file some handle of the simulated disk
/// holds, and how many) says after an open refused with `error`, following
/// bit rot at `what`.
pub fn refused_open_leaves_no_file_open(
    open_files: &BTreeMap<String, u32>,
    error: &Error,
    what: &str,
) -> Result<(), String> {
    if open_files.is_empty() || redb_panicked(error) {
        return Ok(());
    }
    let held: Vec<String> = open_files
        .iter()
        .map(|(path, handles)| format!("{path} ({handles} handle(s))"))
        .collect();
    Err(format!(
        "after bit rot at {what} the open was refused ({error}), and it left open: {}",
        held.join(", ")
    ))
}

/// Whether `error` is redb's panic on damaged bytes (the exception above).
fn redb_panicked(error: &Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if e.is::<RedbPanicked>() {
            return true;
        }
        cause = e.source();
    }
    false
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
    fn a_store_redb_panicked_in_may_keep_its_file() {
        let panicked = Error::StateStore {
            file: "/db/state.redb".into(),
            op: "verify page checksums",
            source: Box::new(RedbPanicked {
                message: "index out of range".into(),
            }),
        };
        assert!(
            refused_open_leaves_no_file_open(&open(&["/db/state.redb"]), &panicked, "x").is_ok()
        );
    }
}

//! Invariant: a shared registry written by compare-and-set loses no
//! update. Runs sign in to their customer's registry (a shared key whose
//! value lists run ids, each followed by `;`) by reading it and writing it
//! back against the version read, so two runs racing on it never overwrite
//! each other: once the runs are over, every completed run that signs in
//! is listed in its registry exactly once, and a registry lists only runs
//! that sign in to it.

use std::collections::BTreeMap;

use actum::books::{BooksRead, MemBooks, RunId, RunState, SharedKeyId};

/// `Err` naming the first registry that lost or duplicated a run.
/// `signs_in` is every run that signs in to a registry, with its key.
pub fn registries_keep_every_run(
    books: &MemBooks,
    signs_in: &[(RunId, SharedKeyId)],
) -> Result<(), String> {
    let mut expected: BTreeMap<&SharedKeyId, Vec<&RunId>> = BTreeMap::new();
    for (run, key) in signs_in {
        expected.entry(key).or_default().push(run);
    }
    for (key, runs) in expected {
        let value = books.shared(key).and_then(|e| e.value).unwrap_or_default();
        let text = String::from_utf8_lossy(&value);
        let listed: Vec<&str> = text.split_terminator(';').collect();
        for name in &listed {
            let count = listed.iter().filter(|n| *n == name).count();
            if count > 1 {
                return Err(format!("registry {key} lists run {name} {count} times"));
            }
            if !runs.iter().any(|r| r.as_str() == *name) {
                return Err(format!(
                    "registry {key} lists run {name}, which never signs in to it"
                ));
            }
        }
        for run in runs {
            let completed = books
                .run(run)
                .is_some_and(|r| r.state == RunState::Completed);
            if completed && !listed.contains(&run.as_str()) {
                return Err(format!(
                    "run {run} completed, but registry {key} does not list it: an update was lost"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{BooksWrite, SharedChange, SharedEntry};

    fn books(listed: &str) -> MemBooks {
        let mut books = books_with(Vec::new());
        books.put_run(run_record("a", RunState::Completed));
        books.put_run(run_record("b", RunState::Completed));
        books.put_shared(SharedEntry {
            key: key(),
            value: Some(listed.as_bytes().to_vec()),
            version: 2,
            changes: Vec::<SharedChange>::new(),
        });
        books
    }

    fn key() -> SharedKeyId {
        SharedKeyId::new("contacted:customer-1").expect("a valid key")
    }

    fn signs_in() -> Vec<(RunId, SharedKeyId)> {
        vec![(run_id("a"), key()), (run_id("b"), key())]
    }

    #[test]
    fn every_completed_run_listed_once_passes() {
        assert_eq!(
            registries_keep_every_run(&books("b;a;"), &signs_in()),
            Ok(())
        );
    }

    #[test]
    fn a_lost_update_a_duplicate_or_a_stranger_is_caught() {
        let lost = registries_keep_every_run(&books("b;"), &signs_in());
        assert!(lost.is_err_and(|e| e.contains("update was lost")));
        let twice = registries_keep_every_run(&books("a;b;a;"), &signs_in());
        assert!(twice.is_err_and(|e| e.contains("2 times")));
        let stranger = registries_keep_every_run(&books("a;b;c;"), &signs_in());
        assert!(stranger.is_err_and(|e| e.contains("never signs in")));
    }
}

//! Invariant: a replayed decision never calls the model again. The model is
//! paid for a (run, position) only while the books hold no decision there.

use actum::books::{BooksRead, MemBooks, RunId};

/// `Err` if the model is about to be called for a position the books
/// (the reference model of acknowledged commands) already journaled.
pub fn decision_not_paid_twice(books: &MemBooks, run: &RunId, position: u64) -> Result<(), String> {
    match books.decision_at(run, position) {
        None => Ok(()),
        Some(record) => Err(format!(
            "the model was called again for decision {position} of run {run}, journaled at {} ms",
            record.recorded_ms
        )),
    }
}

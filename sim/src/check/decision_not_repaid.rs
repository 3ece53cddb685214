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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{BooksWrite, DecisionRecord, FencingToken, Usage, digest_of};

    #[test]
    fn paying_for_a_journaled_position_is_caught() {
        let mut books = MemBooks::new();
        books.put_decision(DecisionRecord {
            run: run_id("r"),
            position: 0,
            input_digest: digest_of(b"prompt"),
            output: b"answer".to_vec(),
            rationale: String::new(),
            usage: Usage::default(),
            recorded_ms: 5,
            token: FencingToken(1),
        });
        assert!(decision_not_paid_twice(&books, &run_id("r"), 0).is_err());
        assert!(decision_not_paid_twice(&books, &run_id("r"), 1).is_ok());
    }
}

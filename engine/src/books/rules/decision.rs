//! The decision journal: each model call a run made, at its position in the
//! run's sequence of calls, so a resumed run reuses the recorded output
//! instead of paying for the call again and choosing differently.
//!
//! Invariants: a run's positions are 0, 1, 2, ... with no gaps; a recorded
//! position is never overwritten; asking for a position with a different
//! input digest than recorded is a `Divergence`, never a silent re-record.

use crate::books::base::digest::Digest;
use crate::books::base::ids::RunId;
use crate::books::base::limits::{DECISION_OUTPUT_BYTES_MAX, check_size, check_text};
use crate::books::records::decision::DecisionRecord;
use crate::books::rules::checks::{check_live, existing};
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::RecordDecision;
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// The recorded call of `run` at `position` if its input digest is
/// `input_digest`; `None` if nothing is recorded there yet; `Divergence` if
/// something else is.
pub fn replay_at(
    state: &(impl BooksRead + ?Sized),
    run: &RunId,
    position: u64,
    input_digest: &Digest,
) -> Result<Option<DecisionRecord>> {
    match state.decision_at(run, position) {
        None => Ok(None),
        Some(record) => same_input(record, input_digest).map(Some),
    }
}

fn same_input(record: DecisionRecord, attempted: &Digest) -> Result<DecisionRecord> {
    if record.input_digest == *attempted {
        return Ok(record);
    }
    Err(Error::Divergence {
        run: record.run.clone(),
        position: record.position,
        recorded: record.input_digest,
        attempted: *attempted,
    })
}

/// Decides `RecordDecision`: appends at the next position; at a recorded
/// position answers the recorded call (same input) or `Divergence`.
pub(crate) fn decide_record(
    state: &dyn BooksRead,
    cmd: &RecordDecision,
    now_ms: u64,
) -> Result<Decided> {
    check_text("decision rationale", &cmd.rationale)?;
    check_size(
        || {
            format!(
                "model output at position {} of run {}",
                cmd.position, cmd.run
            )
        },
        cmd.output.len(),
        DECISION_OUTPUT_BYTES_MAX,
    )?;
    let run = existing(state, &cmd.run)?;
    check_live(&run, &cmd.guard, now_ms)?;
    let next_position = state.decision_count(&cmd.run);
    if cmd.position < next_position {
        let record = state.decision_at(&cmd.run, cmd.position).ok_or_else(|| {
            Error::Inconsistent {
                what: format!(
                    "decision journal of run {} lacks position {} below its length {next_position}",
                    cmd.run, cmd.position
                ),
            }
        })?;
        let record = same_input(record, &cmd.input_digest)?;
        return Ok(Decided {
            ops: Vec::new(),
            answer: Answer::DecisionReplay { record },
        });
    }
    if cmd.position > next_position {
        return Err(Error::InvalidCommand {
            reason: format!(
                "decision position {} of run {} skips ahead: the journal holds {next_position} \
                 calls, so the next position is {next_position}",
                cmd.position, cmd.run
            ),
        });
    }
    let record = DecisionRecord {
        run: cmd.run.clone(),
        position: cmd.position,
        input_digest: cmd.input_digest,
        output: cmd.output.clone(),
        rationale: cmd.rationale.clone(),
        usage: cmd.usage,
        recorded_ms: now_ms,
        token: cmd.guard.token,
    };
    let answer = Answer::DecisionRecorded {
        run: cmd.run.clone(),
        position: cmd.position,
    };
    Ok(Decided {
        ops: vec![Op::DecisionRecorded { record }],
        answer,
    })
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::digest_of;
    use crate::books::test_support::*;

    #[test]
    fn recorded_call_replays_and_different_input_diverges() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(decision("r", &g, 0, b"prompt 0", b"answer 0"));
        b.ok(decision("r", &g, 1, b"prompt 1", b"answer 1"));
        let replay = replay_at(&b.mem, &rid("r"), 1, &digest_of(b"prompt 1"))
            .unwrap()
            .unwrap();
        assert_eq!(replay.output, b"answer 1".to_vec());
        assert!(
            replay_at(&b.mem, &rid("r"), 2, &digest_of(b"prompt 2"))
                .unwrap()
                .is_none()
        );
        let err = replay_at(&b.mem, &rid("r"), 1, &digest_of(b"prompt X")).unwrap_err();
        assert!(
            matches!(&err, Error::Divergence { position: 1, recorded, attempted, .. }
            if *recorded == digest_of(b"prompt 1") && *attempted == digest_of(b"prompt X")),
            "{err}"
        );
    }

    #[test]
    fn recording_again_replays_or_diverges_and_never_overwrites() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(decision("r", &g, 0, b"p", b"first"));
        let d = b.ok(decision("r", &g, 0, b"p", b"second"));
        assert!(d.ops.is_empty());
        assert!(
            matches!(&d.answer, Answer::DecisionReplay { record } if record.output == b"first".to_vec())
        );
        assert!(matches!(
            b.run(decision("r", &g, 0, b"q", b"x")),
            Err(Error::Divergence { .. })
        ));
        assert_eq!(b.mem.decision_count(&rid("r")), 1);
    }

    #[test]
    fn positions_cannot_skip_ahead() {
        let (mut b, g) = books_with_leased_run("r");
        assert!(matches!(
            b.run(decision("r", &g, 1, b"p", b"o")),
            Err(Error::InvalidCommand { .. })
        ));
        assert_eq!(b.mem.decision_count(&rid("r")), 0);
    }
}

//! The commit path: decide against the state store, log the ops as one WAL
//! record, apply them, answer. One command at a time holds the engine lock
//! for the whole path (see docs/DURABILITY.md, "Engine commit path").
//!
//! **Invariant:** a command is acknowledged (`Ok`) only after its record is
//! durable in the WAL and applied to the state store; a refused command
//! logs nothing; a failure after the record became durable halts the
//! engine, because its in-memory state may no longer match the log.

use crate::books::{Answer, Command, decide, encode_ops};
use crate::error::{Error, Result};
use crate::state::RedbBooks;

use super::core::{Engine, Inner};

impl Engine {
    /// Decides, logs and applies `cmd`; returns its answer once durable.
    ///
    /// This is the one door every mutation goes through; the typed methods
    /// (`create_run`, `begin_effect`, ...) build a [`Command`] and call it.
    pub fn execute(&self, cmd: &Command) -> Result<Answer> {
        let mut inner = self.lock();
        inner.check_running()?;
        let now_ms = self.clock.now_ms();
        let decided = {
            let txn = inner.state.read()?;
            let view = RedbBooks::reader(&txn, &self.state_path);
            let decided = decide(&view, cmd, now_ms);
            // A failed read must not pass for an absent row.
            view.finish()?;
            decided?
        };
        if decided.ops.is_empty() {
            return Ok(decided.answer);
        }
        let record = encode_ops(&decided.ops);
        let lsn = match inner.db.wal().append(&[record.as_slice()]) {
            Ok(lsn) => lsn,
            // Refused before anything was written: the engine is intact.
            Err(e @ Error::RecordTooLarge { .. }) => return Err(e),
            Err(e) => {
                inner.halt(format!("a failed log append ({e})"));
                return Err(e);
            }
        };
        if let Err(e) = inner.apply_record(lsn, &decided.ops) {
            inner.halt(format!("a failed state apply at {lsn} ({e})"));
            return Err(e);
        }
        inner.records_since_checkpoint += 1;
        inner.bytes_since_checkpoint += record.len() as u64;
        self.maybe_checkpoint(&mut inner);
        Ok(decided.answer)
    }

    /// Runs the automatic checkpoint if it is due. The command that
    /// triggered it is already durable, so a failure here does not fail the
    /// command; it halts the engine (the next command reports why).
    fn maybe_checkpoint(&self, inner: &mut Inner) {
        let due = self
            .options
            .checkpoint_due(inner.records_since_checkpoint, inner.bytes_since_checkpoint);
        if !due {
            return;
        }
        if let Err(e) = inner.checkpoint() {
            inner.halt(format!("a failed automatic checkpoint ({e})"));
        }
        assert!(inner.halted.is_some() || inner.records_since_checkpoint == 0);
    }
}

//! The commit path, pipelined so concurrent commands share one fsync:
//!
//! 1. under the engine lock: decide against the state store plus the ops of
//!    commands already logged but not yet durable (`pending`), and enqueue
//!    the new ops as one WAL record (the lock fixes their LSN order);
//! 2. without the lock: wait for the group commit that makes the record
//!    durable (one leader writes and fsyncs every queued record);
//! 3. under the lock again: apply every durable pending record to the state
//!    store, in LSN order, then answer.
//!
//! **Invariant:** the state store only ever holds durable records (a record
//! is applied after its fsync, never before), so a failed fsync can never
//! leave redb ahead of the log; a command is acknowledged (`Ok`) only once
//! its record is durable and applied; a refused command logs nothing; a
//! failure after enqueueing halts the engine.

use crate::books::{Answer, Command, Op, Overlay, apply, decide, encode_ops};
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::state::RedbBooks;

use super::core::{Engine, Inner, apply_group};

/// A command's record, logged (enqueued) but not yet applied.
#[derive(Debug)]
pub(crate) struct Pending {
    /// The record's LSN.
    pub(crate) lsn: Lsn,
    /// Its ops.
    pub(crate) ops: Vec<Op>,
    /// Its encoded size.
    pub(crate) bytes: u64,
}

impl Engine {
    /// Decides, logs and applies `cmd`; returns its answer once durable.
    ///
    /// This is the one door every mutation goes through; the typed methods
    /// (`create_run`, `begin_effect`, ...) build a [`Command`] and call it.
    pub fn execute(&self, cmd: &Command) -> Result<Answer> {
        let (wait_for, answer) = {
            let mut inner = self.lock();
            inner.check_running()?;
            let now_ms = self.clock.now_ms();
            let decided = self.decide_locked(&inner, cmd, now_ms)?;
            if decided.ops.is_empty() {
                // The answer may rest on commands still in flight: it is
                // given only once they are durable.
                (inner.pending.last().map(|p| p.lsn), decided.answer)
            } else {
                let record = encode_ops(&decided.ops);
                let lsn = match self.db.wal().enqueue(&[record.as_slice()]) {
                    Ok(lsn) => lsn,
                    // Refused before anything was queued: the engine is intact.
                    Err(e @ Error::RecordTooLarge { .. }) => return Err(e),
                    Err(e) => {
                        inner.halt(format!("a failed log append ({e})"));
                        return Err(e);
                    }
                };
                assert!(inner.pending.last().is_none_or(|p| p.lsn < lsn));
                inner.pending.push(Pending {
                    lsn,
                    ops: decided.ops,
                    bytes: record.len() as u64,
                });
                (Some(lsn), decided.answer)
            }
        };
        let Some(lsn) = wait_for else {
            return Ok(answer);
        };
        if let Err(e) = self.db.wal().wait_durable(lsn) {
            self.lock().halt(format!("a failed log append ({e})"));
            return Err(e);
        }
        let mut inner = self.lock();
        self.apply_durable(&mut inner)?;
        assert!(inner.pending.first().is_none_or(|p| p.lsn > lsn));
        Ok(answer)
    }

    /// `decide` against the state store seen through the pending ops.
    fn decide_locked(
        &self,
        inner: &Inner,
        cmd: &Command,
        now_ms: u64,
    ) -> Result<crate::books::Decided> {
        let txn = inner.state.read()?;
        let view = RedbBooks::reader(&txn, &self.state_path);
        let decided = if inner.pending.is_empty() {
            decide(&view, cmd, now_ms)
        } else {
            let mut overlay = Overlay::new(&view);
            for op in inner.pending.iter().flat_map(|p| &p.ops) {
                apply(&mut overlay, op);
            }
            decide(&overlay, cmd, now_ms)
        };
        // A failed read must not pass for an absent row.
        view.finish()?;
        decided
    }

    /// Applies every pending record that is durable, in LSN order, then
    /// runs the automatic checkpoint if it is due.
    pub(crate) fn apply_durable(&self, inner: &mut Inner) -> Result<()> {
        inner.check_running()?;
        let durable = self.db.wal().durable_lsn();
        let ready = inner.pending.partition_point(|p| p.lsn <= durable);
        if ready > 0 {
            // Every durable record in one state transaction: a group commit's
            // records cost one redb commit.
            let group: Vec<Pending> = inner.pending.drain(..ready).collect();
            if let Err(e) = apply_group(&mut inner.state, &group) {
                inner.halt(format!("a failed state apply ({e})"));
                return Err(e);
            }
            inner.records_since_checkpoint += group.len() as u64;
            inner.bytes_since_checkpoint += group.iter().map(|p| p.bytes).sum::<u64>();
        }
        assert!(inner.state.applied_lsn() <= durable);
        self.maybe_checkpoint(inner);
        Ok(())
    }

    /// Runs the automatic checkpoint if it is due. The commands that
    /// triggered it are already durable, so a failure here does not fail
    /// them; it halts the engine (the next command reports why).
    fn maybe_checkpoint(&self, inner: &mut Inner) {
        let due = self
            .options
            .checkpoint_due(inner.records_since_checkpoint, inner.bytes_since_checkpoint);
        if !due {
            return;
        }
        if let Err(e) = inner.checkpoint(&self.db) {
            inner.halt(format!("a failed automatic checkpoint ({e})"));
        }
        assert!(inner.halted.is_some() || inner.records_since_checkpoint == 0);
    }
}

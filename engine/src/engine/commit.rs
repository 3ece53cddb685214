//! The commit path, pipelined so concurrent commands share one fsync:
//!
//! 1. under the engine lock: decide against the *pending view* (the state
//!    store plus the ops of commands already logged but not yet applied),
//!    then apply the decided ops to that same view; if `apply` refuses one
//!    (a `decide`/`apply` disagreement, a bug), the command is refused and
//!    nothing is logged. Otherwise enqueue the ops as one WAL record (the
//!    lock fixes their LSN order);
//! 2. without the lock: wait for the group commit that makes the record
//!    durable (one leader writes and fsyncs every queued record);
//! 3. under the lock again: apply every durable pending record to the state
//!    store, in LSN order, through the durable pipeline, then answer.
//!
//! **Invariant:** the state store only ever holds durable records (a record
//! is applied after its fsync, never before), so a failed fsync can never
//! leave redb ahead of the log; every logged op applied cleanly to the
//! view it was decided on; a command is acknowledged (`Ok`) only once its
//! record is durable and applied; a refused command logs nothing; a
//! failure after enqueueing halts the engine.

use crate::books::{
    Answer, Begun, BooksRead, Command, Decided, Op, Overlay, apply, decide, encode_ops,
};
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::planted::{PlantedBug, planted};
use crate::state::RedbBooks;

use super::core::{Engine, Inner, apply_ops};

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

/// A hook between deciding and logging; the identity outside tests.
pub(crate) type Tamper<'a> = &'a dyn Fn(&mut Decided);

impl Engine {
    /// Decides, logs and applies `cmd`; returns its answer once durable.
    ///
    /// This is the one door every mutation goes through; the typed methods
    /// (`create_run`, `begin_effect`, ...) build a [`Command`] and call it.
    pub fn execute(&self, cmd: &Command) -> Result<Answer> {
        self.execute_logged(cmd, &|_| {}).map(|(answer, _)| answer)
    }

    /// [`Engine::execute`], also returning the LSN the answer rests on: the
    /// command's own record, or (for an answer without ops) the last record
    /// in flight when it was decided, or `Lsn::ZERO` if none was.
    pub(crate) fn execute_logged(
        &self,
        cmd: &Command,
        tamper: Tamper<'_>,
    ) -> Result<(Answer, Lsn)> {
        let (rests_on, answer, logged) = {
            let mut inner = self.lock();
            inner.check_running()?;
            let now_ms = self.clock.now_ms();
            let mut decided = self.decide_on_view(&inner, cmd, now_ms, tamper)?;
            if decided.ops.is_empty() {
                // The answer may rest on commands still in flight: it is
                // given only once they are durable.
                let last = inner.pending.last().map(|p| p.lsn);
                (last, decided.answer, false)
            } else {
                let ops = std::mem::take(&mut decided.ops);
                let lsn = self.log(&mut inner, ops)?;
                (Some(lsn), decided.answer, true)
            }
        };
        let Some(lsn) = rests_on else {
            return Ok((answer, Lsn::ZERO));
        };
        let proceed = matches!(answer, Answer::Begun(Begun::Proceed { .. }));
        if logged && proceed && self.planted(PlantedBug::ProceedBeforeDurable) {
            return Ok((answer, lsn));
        }
        if let Err(e) = self.pipeline.wait_durable(lsn) {
            self.lock().halt(format!("a failed log append ({e})"));
            return Err(e);
        }
        let mut inner = self.lock();
        self.apply_durable(&mut inner)?;
        assert!(inner.pending.first().is_none_or(|p| p.lsn > lsn));
        Ok((answer, lsn))
    }

    /// Enqueues `ops` as one record; returns its LSN.
    fn log(&self, inner: &mut Inner, ops: Vec<Op>) -> Result<Lsn> {
        assert!(!ops.is_empty(), "a record holds at least one op");
        let record = encode_ops(&ops);
        let lsn = match self.pipeline.enqueue(&[record.as_slice()]) {
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
            ops,
            bytes: record.len() as u64,
        });
        Ok(lsn)
    }

    /// Decides `cmd` against the pending view, then applies the decided ops
    /// to that view: ops that do not apply refuse the command here, before
    /// anything reaches the log.
    fn decide_on_view(
        &self,
        inner: &Inner,
        cmd: &Command,
        now_ms: u64,
        tamper: Tamper<'_>,
    ) -> Result<Decided> {
        let txn = inner.mat.read()?;
        let view = RedbBooks::reader(&txn, &self.state_path);
        let mut overlay = Overlay::new(&view);
        let decided = pending_view(&mut overlay, inner)
            .and_then(|()| {
                let refreshed = self.planted_refresh_guard(&overlay, cmd, now_ms);
                decide(&overlay, refreshed.as_ref().unwrap_or(cmd), now_ms)
            })
            .and_then(|mut decided| {
                tamper(&mut decided);
                for op in &decided.ops {
                    apply(&mut overlay, op)?;
                }
                Ok(decided)
            });
        drop(overlay);
        // A failed read must not pass for an absent row.
        view.finish()?;
        decided
    }

    /// Applies every pending record that is durable, in LSN order, then
    /// runs the automatic checkpoint if it is due.
    pub(crate) fn apply_durable(&self, inner: &mut Inner) -> Result<()> {
        inner.check_running()?;
        let durable = self.pipeline.durable_lsn();
        let ready = inner.pending.partition_point(|p| p.lsn <= durable);
        if ready > 0 {
            // Every durable record in one state transaction: a group commit's
            // records cost one redb commit.
            let group: Vec<Pending> = inner.pending.drain(..ready).collect();
            let first = group[0].lsn;
            let last = group[group.len() - 1].lsn;
            assert!(
                group.windows(2).all(|w| w[1].lsn == w[0].lsn.next()),
                "a group's records are consecutive"
            );
            let bytes = group.iter().map(|p| p.bytes).sum();
            let path = &self.state_path;
            let result = self
                .pipeline
                .materialize(&mut inner.mat, (first, last), bytes, |txn| {
                    apply_ops(txn, path, group.iter().flat_map(|p| &p.ops))
                });
            if let Err(e) = result {
                inner.halt(format!("a failed state apply ({e})"));
                return Err(e);
            }
        }
        assert!(inner.mat.applied_lsn() <= durable);
        self.maybe_checkpoint(inner);
        Ok(())
    }

    /// Runs the automatic checkpoint if it is due. The commands that
    /// triggered it are already durable, so a failure here does not fail
    /// them; it halts the engine (the next command reports why).
    fn maybe_checkpoint(&self, inner: &mut Inner) {
        if !self.pipeline.checkpoint_due(&inner.mat) {
            return;
        }
        if let Err(e) = self.pipeline.checkpoint(&mut inner.mat) {
            inner.halt(format!("a failed automatic checkpoint ({e})"));
        }
        assert!(inner.halted.is_some() || !self.pipeline.checkpoint_due(&inner.mat));
    }

    /// True if `bug` is planted (test-only `planted-bugs` feature).
    pub(crate) fn planted(&self, bug: PlantedBug) -> bool {
        planted(&self.options.db.wal, bug)
    }

    /// Planted `AcceptStaleToken`: a command presenting a stale token is
    /// rewritten to present the run's live lease, so the check passes.
    fn planted_refresh_guard(
        &self,
        books: &dyn BooksRead,
        cmd: &Command,
        now_ms: u64,
    ) -> Option<Command> {
        if !self.planted(PlantedBug::AcceptStaleToken) {
            return None;
        }
        let mut cmd = cmd.clone();
        let (run, guard) = cmd.guard_mut()?;
        let lease = books.run(&run)?.lease.filter(|l| l.is_live(now_ms))?;
        if guard.token < lease.token {
            guard.token = lease.token;
            guard.worker = lease.worker;
        }
        Some(cmd)
    }
}

/// Applies every pending record's ops to `overlay`, making it the view the
/// next command is decided on.
fn pending_view(overlay: &mut Overlay<'_>, inner: &Inner) -> Result<()> {
    for op in inner.pending.iter().flat_map(|p| &p.ops) {
        apply(overlay, op).map_err(|e| Error::Inconsistent {
            what: format!("a logged op no longer applies to the pending view ({e})"),
        })?;
    }
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;
    use crate::books::{CreateRun, EffectKey, EffectStatus, RunId, StepId, digest_of};
    use crate::engine::EngineOptions;

    fn create(run: &str) -> Command {
        Command::CreateRun(CreateRun {
            run: RunId::new(run).unwrap(),
            input_digest: digest_of(run.as_bytes()),
            agent_version: "a".into(),
            trace_id: "t".into(),
            parent: None,
        })
    }

    #[test]
    fn an_op_that_apply_refuses_is_refused_before_it_reaches_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
        engine.execute(&create("r1")).unwrap();
        let durable = engine.durable_lsn();
        // A decide that disagrees with apply: it settles an effect that
        // does not exist.
        let missing = EffectKey::new(RunId::new("r1").unwrap(), StepId::new("s").unwrap(), 1);
        let bad = Op::EffectSettled {
            key: missing.unwrap(),
            status: EffectStatus::Failed {
                retryable: false,
                reason: "x".into(),
            },
            at_ms: 0,
            token: crate::books::FencingToken(1),
            note: String::new(),
        };
        let tamper = |d: &mut Decided| d.ops.push(bad.clone());
        let err = engine.execute_logged(&create("r2"), &tamper).unwrap_err();
        assert!(matches!(err, Error::Inconsistent { .. }), "{err}");
        assert_eq!(engine.durable_lsn(), durable, "nothing reached the log");
        // The engine is intact: the same command without the bad op lands.
        engine.execute(&create("r2")).unwrap();
        engine.close().unwrap();
        let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
        assert!(engine.run(&RunId::new("r2").unwrap()).unwrap().is_some());
    }
}

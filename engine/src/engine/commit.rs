//! The commit path, pipelined so concurrent commands share one fsync and
//! touch no redb:
//!
//! 1. under the engine lock: decide against the hot books (memory; the
//!    state store only for what left memory); apply the decided ops to an
//!    overlay of that view, so that an op `apply` refuses (a
//!    `decide`/`apply` disagreement, a bug) refuses the command before
//!    anything changes; refuse a record larger than the log takes;
//! 2. still under the lock: bring the runs the ops touch into memory, apply
//!    the ops to the hot books tagged with the LSN the record will get, and
//!    enqueue the record (the lock fixes the LSN order, so the tag is
//!    exact);
//! 3. without the lock: wait for the group commit that makes the record
//!    durable (one leader writes and fsyncs every queued record), then
//!    answer; if a checkpoint is due and no one is writing one, write it.
//!
//! **Invariant:** every logged op applied cleanly to the view it was
//! decided on; a command is acknowledged (`Ok`) only once its record is
//! durable; an answer that rests on records still in flight (a command
//! that changed nothing, a read) is given only once they are durable; a
//! refused command logs nothing and changes nothing; a failure after the
//! hot books changed halts the engine.

use crate::books::{
    Answer, Begun, BooksRead, Command, Decided, Op, Overlay, Writes, apply, decide, encode_ops,
};
use crate::error::{Error, Result};
use crate::hot::{ColdReader, HotView};
use crate::ids::Lsn;
use crate::planted::{PlantedBug, planted};

use super::core::{ApplyFailure, Engine, Inner, Unmaterialized};

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
    /// applied when it was decided, or `Lsn::ZERO` if there was none.
    pub(crate) fn execute_logged(
        &self,
        cmd: &Command,
        tamper: Tamper<'_>,
    ) -> Result<(Answer, Lsn)> {
        let (answer, rests_on, logged) = {
            let mut inner = self.lock();
            inner.check_running()?;
            let now_ms = self.clock.now_ms();
            let (decided, writes) = self.decide_on_hot(&inner, cmd, now_ms, tamper)?;
            if decided.ops.is_empty() {
                (decided.answer, inner.last_applied, false)
            } else {
                let lsn = self.log(&mut inner, decided.ops, writes)?;
                (decided.answer, lsn, true)
            }
        };
        let proceed = matches!(answer, Answer::Begun(Begun::Proceed { .. }));
        if logged && proceed && self.planted(PlantedBug::ProceedBeforeDurable) {
            return Ok((answer, rests_on));
        }
        self.wait_durable(rests_on)?;
        if logged {
            self.maybe_checkpoint();
        }
        Ok((answer, rests_on))
    }

    /// Waits until `lsn` is durable (nothing to wait for if it already is).
    pub(crate) fn wait_durable(&self, lsn: Lsn) -> Result<()> {
        if lsn <= self.pipeline.durable_lsn() {
            return Ok(());
        }
        self.pipeline.wait_durable(lsn).inspect_err(|e| {
            self.lock().halt(format!("a failed log append ({e})"));
        })
    }

    /// Decides `cmd` on the hot books and applies the decided ops to an
    /// overlay of them: ops that do not apply refuse the command here,
    /// before anything changes; the overlay's writes are what the record
    /// will write into memory.
    fn decide_on_hot(
        &self,
        inner: &Inner,
        cmd: &Command,
        now_ms: u64,
        tamper: Tamper<'_>,
    ) -> Result<(Decided, Writes)> {
        let cold = ColdReader::new(self.pipeline.state());
        let view = HotView {
            hot: &inner.hot,
            cold: &cold,
        };
        let refreshed = self.planted_refresh_guard(&view, cmd, now_ms);
        let decided =
            decide(&view, refreshed.as_ref().unwrap_or(cmd), now_ms).and_then(|mut decided| {
                tamper(&mut decided);
                let mut overlay = Overlay::new(&view);
                for op in &decided.ops {
                    apply(&mut overlay, op)?;
                }
                Ok((decided, overlay.into_writes()))
            });
        // A failed read must not pass for an absent row.
        cold.finish()?;
        decided
    }

    /// Writes a command's staged `writes` into the hot books and enqueues
    /// its `ops` as one record; returns its LSN.
    fn log(&self, inner: &mut Inner, ops: Vec<Op>, writes: Writes) -> Result<Lsn> {
        assert!(!ops.is_empty(), "a record holds at least one op");
        let record = encode_ops(&ops);
        let max_bytes = self.options.db.wal.max_record_bytes;
        if record.len() as u64 > max_bytes {
            // Refused before anything changed: the engine is intact.
            return Err(Error::RecordTooLarge {
                size_bytes: record.len() as u64,
                max_bytes,
            });
        }
        let lsn = self.pipeline.next_lsn();
        if let Err(failure) = inner.write(self.pipeline.state(), lsn, writes) {
            let cause = match failure {
                ApplyFailure::Apply(e) => Error::from(e),
                ApplyFailure::Read(e) => e,
            };
            inner.halt(format!(
                "an op that applied to a view did not apply ({cause})"
            ));
            return Err(cause);
        }
        match self.pipeline.enqueue(&[record.as_slice()]) {
            Ok(enqueued) => assert_eq!(enqueued, lsn, "the lock fixes the LSN order"),
            Err(e) => {
                inner.halt(format!("a failed log append ({e})"));
                return Err(e);
            }
        }
        inner.push_unmaterialized(Unmaterialized {
            lsn,
            ops,
            bytes: record.len() as u64,
        });
        Ok(lsn)
    }

    /// Writes a checkpoint if one is due and no one else is writing one.
    /// The commands that triggered it are already durable, so a failure
    /// here does not fail them; it halts the engine (the next command
    /// reports why).
    fn maybe_checkpoint(&self) {
        let due = {
            let inner = self.lock();
            let records = inner.unmaterialized.len() as u64;
            inner.halted.is_none()
                && self
                    .pipeline
                    .checkpoint_due(records, inner.unmaterialized_bytes)
        };
        if !due {
            return;
        }
        let Ok(_turn) = self.checkpointing.try_lock() else {
            return;
        };
        // A failure halts the engine inside; the caller's command stands.
        let _ = self.checkpoint_locked();
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
        assert!(
            engine.run(&RunId::new("r2").unwrap()).unwrap().is_none(),
            "nothing changed"
        );
        // The engine is intact: the same command without the bad op lands.
        engine.execute(&create("r2")).unwrap();
        engine.close().unwrap();
        let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
        assert!(engine.run(&RunId::new("r2").unwrap()).unwrap().is_some());
    }
}

//! The commit path, pipelined so concurrent commands share one fsync and
//! one pass through the engine lock, and touch no redb:
//!
//! 1. a caller submits its command to the combiner (`crate::combine`); the
//!    caller holding the combining role takes every command waiting and,
//!    under the engine lock, for each: decides it against the hot books
//!    (memory; the state store only for what left memory); applies the
//!    decided ops to an overlay of that view, so that an op `apply` refuses
//!    (a `decide`/`apply` disagreement, a bug) refuses the command before
//!    anything changes; refuses a record larger than the log takes; writes
//!    the overlay's changes into the hot books tagged with the LSN the
//!    record will get, and enqueues the record (the lock fixes the LSN
//!    order, so the tag is exact);
//! 2. without the lock (and the role, so the next batch is decided
//!    meanwhile): it waits for the group commit that makes every record it
//!    enqueued durable (one leader writes and fsyncs every queued record),
//!    then wakes each caller with its answer;
//! 3. a caller whose command was logged writes a checkpoint if one is due
//!    and no one is writing one.
//!
//! **Invariant:** every logged op applied cleanly to the view it was
//! decided on; a command is acknowledged (`Ok`) only once its record is
//! durable; an answer that rests on records still in flight (a command
//! that changed nothing, a read) is given only once they are durable; a
//! refused command logs nothing and changes nothing; a failure after the
//! hot books changed halts the engine.

use std::sync::atomic::Ordering;

use crate::books::{
    Answer, Begun, BooksRead, BooksWrite, Command, Decided, Op, Overlay, RunState, Writes, apply,
    decide, encode_ops,
};
use crate::combine::Decision;
use crate::error::{Error, Result};
use crate::hot::{ColdReader, HotView};
use crate::ids::Lsn;
use crate::planted::{PlantedBug, planted};

use super::core::{ApplyFailure, Engine, Inner, Unmaterialized};

/// Most prune commands one automatic checkpoint is followed by (each of at
/// most `PRUNE_RUNS_MAX` runs).
const PRUNE_BATCHES_PER_CHECKPOINT_MAX: usize = 64;

/// A hook between deciding and logging; the identity outside tests. It
/// applies to every command the caller decides while it holds the
/// combining role (tests use it single-threaded).
pub(crate) type Tamper<'a> = &'a dyn Fn(&mut Decided);

/// A command's result: its answer and the LSN the answer rests on.
pub(crate) type Committed = Result<(Answer, Lsn)>;

/// A decided command waiting for its record (or the records its answer
/// rests on) to become durable.
#[derive(Debug)]
pub(crate) struct Undurable {
    answer: Answer,
    rests_on: Lsn,
}

impl Engine {
    /// Decides, logs and applies `cmd`; returns its answer once durable.
    ///
    /// This is the one door every mutation goes through; the typed methods
    /// (`create_run`, `begin_effect`, ...) build a [`Command`] and call it.
    ///
    /// ```
    /// use actum::books::{Answer, Command, CreateRun, FencingToken, Guard, RunId, RunState, Transition,
    ///     WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("job-1")?;
    /// let create = Command::CreateRun(CreateRun { run: run.clone(), input_digest: digest_of(b"1"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None });
    /// let before = engine.durable_lsn();
    /// assert!(matches!(engine.execute(&create)?, Answer::RunCreated { version: 1, .. }));
    /// assert!(engine.durable_lsn() > before, "acknowledged once durable");
    /// // A refused command logs nothing.
    /// let logged = engine.durable_lsn();
    /// let start = Command::Transition(Transition { run: run.clone(), to: RunState::Running,
    ///     guard: Guard { run, worker: WorkerId::new("w1")?, token: FencingToken(1) },
    ///     expected_version: None, reason: "no lease taken".into() });
    /// assert!(matches!(engine.execute(&start), Err(Error::LeaseLost { .. })));
    /// assert_eq!(engine.durable_lsn(), logged);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn execute(&self, cmd: &Command) -> Result<Answer> {
        self.commit(cmd.clone()).map(|(answer, _)| answer)
    }

    /// [`Engine::execute`] taking the command by value (the typed methods).
    pub(crate) fn answer(&self, cmd: Command) -> Result<Answer> {
        self.commit(cmd).map(|(answer, _)| answer)
    }

    /// [`Engine::execute`] taking the command by value, also returning the
    /// LSN the answer rests on: the command's own record, or (for an
    /// answer without ops) the last record applied when it was decided, or
    /// `Lsn::ZERO` if there was none.
    pub(crate) fn commit(&self, cmd: Command) -> Committed {
        self.commit_tampered(cmd, &|_| {})
    }

    /// [`Engine::commit`] with a hook between deciding and logging.
    pub(crate) fn commit_tampered(&self, cmd: Command, tamper: Tamper<'_>) -> Committed {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            let committed = pg.commit(&cmd);
            if committed.is_ok() {
                self.after_postgres_commit(pg);
            }
            return committed;
        }
        let committed = self.local().combiner.submit(
            cmd,
            &mut |cmds| self.decide_batch(cmds, tamper),
            &mut |undurable| self.answer_when_durable(undurable),
            &|| {
                Err(Error::Halted {
                    after: "a panic while deciding a batch of commands",
                    cause: None,
                })
            },
        );
        if committed.is_ok() && self.local().checkpoint_wanted.load(Ordering::Relaxed) {
            self.maybe_checkpoint();
        }
        if committed.is_ok() {
            self.maybe_grow_wal();
        }
        committed
    }

    /// Grows the WAL's active segment one step if its writer asked for it,
    /// after the caller's command is durable, so no commit waits for it
    /// (the writer goes on below the old length meanwhile). A failure
    /// changes nothing the log relies on: the segment keeps its space,
    /// and a write that needs more grows it itself, where an error
    /// poisons the log as any failed write does. So it is not the
    /// caller's, and is dropped here.
    fn maybe_grow_wal(&self) {
        if let Err(error) = self.local().pipeline.grow_wal_ahead() {
            drop(error);
        }
    }

    /// Decides and logs a batch of commands under one hold of the engine
    /// lock; a refused command is final at once, a logged one (or one
    /// whose answer rests on records in flight) waits for durability.
    fn decide_batch(
        &self,
        cmds: Vec<Command>,
        tamper: Tamper<'_>,
    ) -> Vec<Decision<Committed, Undurable>> {
        let mut inner = self.lock();
        // One read transaction of the state store for the whole batch: no
        // checkpoint lets anything leave memory while the lock is held.
        let cold = ColdReader::shared(self.local().pipeline.state());
        let decisions = cmds
            .into_iter()
            .map(
                |cmd| match self.decide_and_log(&mut inner, &cold, &cmd, tamper) {
                    Err(e) => Decision::Done(Err(e)),
                    Ok((answer, rests_on, logged)) => {
                        let proceed = matches!(answer, Answer::Begun(Begun::Proceed { .. }));
                        if logged && proceed && self.planted(PlantedBug::ProceedBeforeDurable) {
                            Decision::Done(Ok((answer, rests_on)))
                        } else {
                            Decision::Pending(Undurable { answer, rests_on })
                        }
                    }
                },
            )
            .collect();
        let due = inner.halted.is_none()
            && self.local().pipeline.checkpoint_due(
                inner.unmaterialized.len() as u64,
                inner.unmaterialized_bytes,
            );
        self.local().checkpoint_wanted.store(due, Ordering::Relaxed);
        decisions
    }

    /// Decides `cmd` and, if it changed anything, logs it; returns its
    /// answer, the LSN the answer rests on and whether it was logged.
    fn decide_and_log(
        &self,
        inner: &mut Inner,
        cold: &ColdReader<'_>,
        cmd: &Command,
        tamper: Tamper<'_>,
    ) -> Result<(Answer, Lsn, bool)> {
        self.check_running(inner)?;
        let now_ms = self.clock.now_ms();
        let (decided, writes) = self.decide_on_hot(inner, cold, cmd, now_ms, tamper)?;
        let view = HotView {
            hot: &inner.hot,
            cold,
        };
        inner
            .counters
            .count(cmd, &decided.answer, &decided.ops, &view);
        if decided.ops.is_empty() {
            Ok((decided.answer, inner.last_applied, false))
        } else {
            let lsn = self.log(inner, cold, decided.ops, writes)?;
            Ok((decided.answer, lsn, true))
        }
    }

    /// Waits once for everything `undurable` rests on, then answers each.
    fn answer_when_durable(&self, undurable: Vec<Undurable>) -> Vec<Committed> {
        let last = undurable.iter().map(|u| u.rests_on).max();
        let all = last.map_or(Ok(()), |lsn| self.wait_durable(lsn));
        undurable
            .into_iter()
            .map(|u| {
                // After a failure, an earlier group may still have landed:
                // each answer stands or falls with its own LSN.
                let durable = match &all {
                    Ok(()) => Ok(()),
                    Err(_) => self.wait_durable(u.rests_on),
                };
                durable.map(|()| (u.answer, u.rests_on))
            })
            .collect()
    }

    /// Waits until `lsn` is durable (nothing to wait for if it already is).
    pub(crate) fn wait_durable(&self, lsn: Lsn) -> Result<()> {
        if lsn <= self.local().pipeline.durable_lsn() {
            return Ok(());
        }
        self.local()
            .pipeline
            .wait_durable(lsn)
            .map(|_| ())
            .map_err(|e| self.lock().halt_with("a failed log append", e))
    }

    /// Decides `cmd` on the hot books and applies the decided ops to an
    /// overlay of them: ops that do not apply refuse the command here,
    /// before anything changes; the overlay's writes are what the record
    /// will write into memory.
    fn decide_on_hot(
        &self,
        inner: &Inner,
        cold: &ColdReader<'_>,
        cmd: &Command,
        now_ms: u64,
        tamper: Tamper<'_>,
    ) -> Result<(Decided, Writes)> {
        let view = HotView {
            hot: &inner.hot,
            cold,
        };
        let refreshed = self
            .planted_refresh_guard(&view, cmd, now_ms)
            .or_else(|| self.planted_any_digest(&view, cmd))
            .or_else(|| self.planted_drop_args(cmd))
            .or_else(|| self.planted_drop_base(cmd))
            .or_else(|| self.planted_drop_inline_base(&view, cmd))
            .or_else(|| self.planted_blind_set(&view, cmd));
        let unpaused = self
            .planted_unpause(&view, cmd)
            .or_else(|| self.planted_wake_early(inner, &view, cmd))
            .or_else(|| self.planted_unlimited(&view, cmd))
            .or_else(|| self.planted_unheld(&view, cmd))
            .or_else(|| self.planted_unleased_move(&view, cmd));
        let decided_on = match (&unpaused, cmd) {
            (_, Command::Reserve(reserve)) if self.planted(PlantedBug::ChargeReplays) => {
                crate::books::decide_reserve_charging_replays(&view, reserve, now_ms)
            }
            (Some(overlay), _) => decide(overlay, refreshed.as_ref().unwrap_or(cmd), now_ms),
            (None, _) => decide(&view, refreshed.as_ref().unwrap_or(cmd), now_ms),
        };
        let decided = decided_on.and_then(|mut decided| {
            tamper(&mut decided);
            self.planted_unsettled_reply(cmd, &mut decided);
            if self.planted(PlantedBug::EndWithoutCompensating) {
                crate::books::skip_sagas(&mut decided.ops);
            }
            if self.planted(PlantedBug::JoinAllAtFirstEnd) {
                let early = crate::books::wake_all_joins_at_first_end(&view, &decided.ops, now_ms);
                decided.ops.extend(early);
            }
            let mut overlay = Overlay::new(&view);
            for op in &decided.ops {
                apply(&mut overlay, op)?;
            }
            Ok((decided, overlay.into_writes()))
        });
        // A failed read must not pass for an absent row.
        cold.check()?;
        decided
    }

    /// Writes a command's staged `writes` into the hot books and enqueues
    /// its `ops` as one record; returns its LSN.
    fn log(
        &self,
        inner: &mut Inner,
        cold: &ColdReader<'_>,
        ops: Vec<Op>,
        mut writes: Writes,
    ) -> Result<Lsn> {
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
        let lsn = self.local().pipeline.next_lsn();
        if self.planted(PlantedBug::ForgetAddedBlobRefs) {
            writes.blob_refs_added.clear();
        }
        if let Err(failure) = inner.write(cold, lsn, writes) {
            let cause = match failure {
                ApplyFailure::Apply(e) => Error::from(e),
                ApplyFailure::Read(e) => e,
            };
            return Err(inner.halt_with("an op that applied to a view did not apply", cause));
        }
        match self.local().pipeline.enqueue(&[record.as_slice()]) {
            Ok(enqueued) => assert_eq!(enqueued, lsn, "the lock fixes the LSN order"),
            Err(e) => return Err(inner.halt_with("a failed log append", e)),
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
        let Ok(_turn) = self.local().checkpointing.try_lock() else {
            return;
        };
        if !self.local().checkpoint_wanted.load(Ordering::Relaxed) {
            return;
        }
        // A failure halts the engine inside; the caller's command stands.
        let checkpointed = self.checkpoint_locked();
        // Retention follows the checkpoint that wrote the runs it prunes
        // into the ended index; a refusal or failure leaves the runs for
        // the next one (a failure halts the engine, and the next command
        // reports why).
        if let (Ok(_), Some(after_ms)) = (checkpointed, self.options.retention.prune_after_ms) {
            self.prune_after_checkpoint(after_ms, PRUNE_BATCHES_PER_CHECKPOINT_MAX);
        }
    }

    /// True if `bug` is planted (test-only `planted-bugs` feature).
    pub(crate) fn planted(&self, bug: PlantedBug) -> bool {
        planted(&self.options.db.wal, bug)
    }

    /// Planted `DropIntentArgs`: a begin is decided as if its caller had
    /// passed only the arguments' digest.
    fn planted_drop_args(&self, cmd: &Command) -> Option<Command> {
        if !self.planted(PlantedBug::DropIntentArgs) {
            return None;
        }
        let Command::BeginEffect(begin) = cmd else {
            return None;
        };
        let mut stripped = begin.clone();
        stripped.args = None;
        Some(Command::BeginEffect(stripped))
    }

    /// Planted `AppendDropsBase`: a save is decided as if every part given
    /// in append form were given whole, as its new bytes alone.
    fn planted_drop_base(&self, cmd: &Command) -> Option<Command> {
        if !self.planted(PlantedBug::AppendDropsBase) {
            return None;
        }
        let Command::SaveCheckpoint(save) = cmd else {
            return None;
        };
        let mut save = save.clone();
        for part in &mut save.parts {
            part.extends = None;
        }
        Some(Command::SaveCheckpoint(save))
    }

    /// Planted `InlineAppendDropsBase`: a part given in append form on a
    /// base held inline is decided as if given whole, as its new bytes alone.
    fn planted_drop_inline_base(&self, books: &dyn BooksRead, cmd: &Command) -> Option<Command> {
        if !self.planted(PlantedBug::InlineAppendDropsBase) {
            return None;
        }
        let Command::SaveCheckpoint(save) = cmd else {
            return None;
        };
        let held_inline = |base: &crate::books::PartBase| {
            let part = books.checkpoint_part(&save.run, base);
            part.is_some_and(|p| p.inline.is_some())
        };
        let mut save = save.clone();
        for part in &mut save.parts {
            if part.extends.as_ref().is_some_and(held_inline) {
                part.extends = None;
            }
        }
        Some(Command::SaveCheckpoint(save))
    }

    /// Planted `SharedSetBlind`: a compare-and-set is decided as if it had
    /// read the key's current version, so a racing writer's update is
    /// overwritten.
    fn planted_blind_set(&self, books: &dyn BooksRead, cmd: &Command) -> Option<Command> {
        if !self.planted(PlantedBug::SharedSetBlind) {
            return None;
        }
        let Command::SetShared(set) = cmd else {
            return None;
        };
        let mut set = set.clone();
        set.expected_version = books.shared(&set.key).map_or(0, |e| e.version);
        Some(Command::SetShared(set))
    }

    /// Planted `ResourceIgnoresHolder`: a resource is granted on a view in
    /// which nobody holds it.
    fn planted_unheld<'v>(&self, books: &'v dyn BooksRead, cmd: &Command) -> Option<Overlay<'v>> {
        if !self.planted(PlantedBug::ResourceIgnoresHolder) {
            return None;
        }
        let Command::AcquireResource(acquire) = cmd else {
            return None;
        };
        let mut book = books.resource(&acquire.resource)?;
        if book.hold.as_ref().is_some_and(|h| h.run == acquire.run) {
            return None;
        }
        book.hold = None;
        let mut overlay = Overlay::new(books);
        overlay.put_resource(book);
        Some(overlay)
    }

    /// Planted `MoveLeasedRun`: a move to another agent version is decided
    /// on a view in which the run holds no lease.
    fn planted_unleased_move<'v>(
        &self,
        books: &'v dyn BooksRead,
        cmd: &Command,
    ) -> Option<Overlay<'v>> {
        if !self.planted(PlantedBug::MoveLeasedRun) {
            return None;
        }
        let Command::MoveVersion(moved) = cmd else {
            return None;
        };
        let mut record = books.run(&moved.run).filter(|r| r.lease.is_some())?;
        record.lease = None;
        let mut overlay = Overlay::new(books);
        overlay.put_run(record);
        Some(overlay)
    }

    /// Planted `ReplyWithoutOutcome`: a delivered reply ends the wait and
    /// wakes the run, but its outcome never reaches the ledger.
    fn planted_unsettled_reply(&self, cmd: &Command, decided: &mut Decided) {
        if self.planted(PlantedBug::ReplyWithoutOutcome) && matches!(cmd, Command::DeliverReply(_))
        {
            decided
                .ops
                .retain(|op| !matches!(op, crate::books::Op::EffectSettled { .. }));
        }
    }

    /// Planted `BeginOnPausedRun`: a begin on a paused run is decided on a
    /// view in which the run is running.
    fn planted_unpause<'v>(&self, books: &'v dyn BooksRead, cmd: &Command) -> Option<Overlay<'v>> {
        if !self.planted(PlantedBug::BeginOnPausedRun) {
            return None;
        }
        let run = match cmd {
            Command::BeginEffect(c) => &c.run,
            Command::BeginCompensation(c) => &c.run,
            _ => return None,
        };
        let mut record = books.run(run).filter(|r| r.state == RunState::Paused)?;
        record.state = RunState::Running;
        let mut overlay = Overlay::new(books);
        overlay.put_run(record);
        Some(overlay)
    }

    /// Planted `ApproveAnyDigest`: an approval is rewritten to name the
    /// digest and role its wait is bound to, so any arguments pass.
    fn planted_any_digest(&self, books: &dyn BooksRead, cmd: &Command) -> Option<Command> {
        if !self.planted(PlantedBug::ApproveAnyDigest) {
            return None;
        }
        let Command::DecideApproval(decision) = cmd else {
            return None;
        };
        let book = books.waits(&decision.run)?;
        let wait = book.approval_at(&decision.step)?;
        let crate::books::WaitFor::Approval { args_digest, role } = &wait.wait_for else {
            return None;
        };
        let mut decision = decision.clone();
        decision.args_digest = *args_digest;
        decision.role = role.clone();
        Some(Command::DecideApproval(decision))
    }

    /// Planted `WakeEarly`: a claim is decided on a view in which every
    /// open wait's deadline is an hour earlier.
    fn planted_wake_early<'v>(
        &self,
        inner: &Inner,
        books: &'v dyn BooksRead,
        cmd: &Command,
    ) -> Option<Overlay<'v>> {
        const HOUR_MS: u64 = 3_600_000;
        if !self.planted(PlantedBug::WakeEarly) || !matches!(cmd, Command::ClaimNext(_)) {
            return None;
        }
        let mut overlay = Overlay::new(books);
        for hot in inner.hot.runs.values() {
            let Some(mut book) = hot.waits.as_deref().cloned() else {
                continue;
            };
            if let Some(at) = book
                .waits
                .last_mut()
                .filter(|w| w.is_open())
                .and_then(|w| w.deadline_ms.as_mut())
            {
                *at = at.saturating_sub(HOUR_MS);
                overlay.put_waits(book);
            }
        }
        Some(overlay)
    }

    /// Planted `OverspendBudget`: a reserve is decided on a view in which
    /// the run and its ancestors have no limits.
    fn planted_unlimited<'v>(
        &self,
        books: &'v dyn BooksRead,
        cmd: &Command,
    ) -> Option<Overlay<'v>> {
        let Command::Reserve(reserve) = cmd else {
            return None;
        };
        if !self.planted(PlantedBug::OverspendBudget) {
            return None;
        }
        let mut overlay = Overlay::new(books);
        let mut next = Some(reserve.run.clone());
        while let Some(id) = next {
            if let Some(mut book) = books.budget(&id) {
                book.limits = None;
                overlay.put_budget(book);
            }
            next = books.run(&id).and_then(|r| r.parent);
        }
        Some(overlay)
    }

    /// Planted `AcceptStaleToken`: a command presenting a stale token is
    /// rewritten to present the run's live lease, so the check passes.
    /// Planted `AcceptAnotherRunsGuard`: a guard of another run is taken as
    /// one of the command's run.
    fn planted_refresh_guard(
        &self,
        books: &dyn BooksRead,
        cmd: &Command,
        now_ms: u64,
    ) -> Option<Command> {
        if !self.planted(PlantedBug::AcceptStaleToken)
            && !self.planted(PlantedBug::AcceptAnotherRunsGuard)
        {
            return None;
        }
        let mut cmd = cmd.clone();
        let (run, guard) = cmd.guard_mut()?;
        if self.planted(PlantedBug::AcceptAnotherRunsGuard) {
            guard.run = run.clone();
        }
        if !self.planted(PlantedBug::AcceptStaleToken) {
            return Some(cmd);
        }
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
            input: None,
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
        let err = engine.commit_tampered(create("r2"), &tamper).unwrap_err();
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

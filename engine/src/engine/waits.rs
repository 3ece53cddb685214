//! Durable waits through the engine: a worker stops its run at a step
//! ([`Engine::open_wait`]) until an approver decides
//! ([`Engine::decide_approval`]), a signal arrives ([`Engine::signal`]) or
//! the wait's deadline passes (the next claim of the run); meanwhile the run
//! holds no lease. A step that sent an asynchronous tool its request waits
//! for the reply ([`WaitFor::Reply`]), which [`Engine::deliver_reply`]
//! records from outside. [`Engine::waits`] reads a run's waits and inbox.
//!
//! **Invariant:** like every typed method, these only build a command and
//! narrow its answer; the rules live in `books::wait`.

use crate::books::{
    Answer, Command, DecideApproval, DeliverReply, EffectKey, Guard, OpenWait, Outcome, RunId,
    RunState, SendSignal, StepId, WaitBook, WaitFor, WaitRecord,
};
use crate::error::Result;

use super::answers::unexpected;
use super::core::Engine;

/// A step's wait as it stands after [`Engine::open_wait`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waited {
    /// The wait. `Open`: the run is waiting and the caller's lease is
    /// gone, so the worker drops the run. Any other status: the wait has
    /// ended (by then, or at once) and the run goes on under the caller's
    /// lease.
    pub wait: WaitRecord,
    /// The run's state now.
    pub state: RunState,
}

/// What [`Engine::signal`] did with a signal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signalled {
    /// The signal's number among the run's signals, from 1.
    pub seq: u64,
    /// The step whose wait it ended (the run is claimable again); `None`
    /// if no wait waited for it: it waits in the run's inbox for the next
    /// wait of its name.
    pub taken_by: Option<StepId>,
}

impl Engine {
    /// Stops the running run `run` at `step` until `wait_for` happens or
    /// `deadline_ms` passes, releasing the caller's lease in the same
    /// commit. Asking again at the same step with the same terms (after a
    /// crash, or once claimed again) answers how the wait stands; other
    /// terms are `WaitMismatch`.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, RunState, StepId, WaitFor, WaitStatus, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("refund-7")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"7"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// engine.transition(actum::books::Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let now = engine.clock().now_ms();
    /// let approval = WaitFor::Approval { args_digest: digest_of(b"refund eur 900"),
    ///     role: "finance".into() };
    /// let step = StepId::new("refund")?;
    /// let waited = engine.open_wait(&run, &lease.guard, &step, approval.clone(),
    ///     Some(now + 3_600_000), "above the threshold")?;
    /// assert_eq!((waited.wait.status.clone(), waited.state), (WaitStatus::Open, RunState::WaitingHuman));
    /// // Nobody holds the run while a person decides.
    /// assert!(engine.claim_next(&WorkerId::new("w2")?, 30_000)?.is_none());
    /// engine.decide_approval(&run, &step, digest_of(b"refund eur 900"), "ann", "finance", true,
    ///     "invoice checked")?;
    /// let lease = engine.claim_next(&WorkerId::new("w2")?, 30_000)?.expect("approved");
    /// let again = engine.open_wait(&run, &lease.guard, &step, approval, Some(now + 3_600_000), "")?;
    /// assert!(matches!(again.wait.status, WaitStatus::Approved { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_wait(
        &self,
        run: &RunId,
        guard: &Guard,
        step: &StepId,
        wait_for: WaitFor,
        deadline_ms: Option<u64>,
        reason: &str,
    ) -> Result<Waited> {
        let cmd = Command::OpenWait(OpenWait {
            run: run.clone(),
            guard: guard.clone(),
            step: step.clone(),
            wait_for,
            deadline_ms,
            reason: reason.to_string(),
        });
        match self.answer(cmd)? {
            Answer::Waited { wait, state } => Ok(Waited { wait, state }),
            other => unexpected(&other, "open_wait"),
        }
    }

    /// An approver (no lease) approves or rejects the open approval at
    /// `step` of `run`. It must name the arguments digest the wait is bound
    /// to (`ApprovalMismatch`) and its role (`ApproverRole`), before the
    /// deadline (`ApprovalExpired`), once (`WaitEnded`). Returns true if
    /// the run woke (it is claimable again); false if an operator paused it
    /// meanwhile.
    ///
    /// ```
    /// use actum::Error;
    /// use actum::books::{CreateRun, RunId, RunState, StepId, Transition, WaitFor, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("vendor-3")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"3"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let step = StepId::new("onboard")?;
    /// let in_48h = engine.clock().now_ms() + 48 * 3_600_000;
    /// engine.open_wait(&run, &lease.guard, &step, WaitFor::Approval {
    ///     args_digest: digest_of(b"pay vendor 3"), role: "finance".into() }, Some(in_48h), "new vendor")?;
    /// let other = engine.decide_approval(&run, &step, digest_of(b"pay vendor 4"), "ann", "finance",
    ///     true, "");
    /// assert!(matches!(other, Err(Error::ApprovalMismatch { .. })));
    /// assert!(engine.decide_approval(&run, &step, digest_of(b"pay vendor 3"), "ann", "finance",
    ///     true, "ok")?);
    /// assert_eq!(engine.run(&run)?.expect("exists").state, RunState::Running);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[expect(
        clippy::too_many_arguments,
        reason = "each argument is one journaled fact of the decision"
    )]
    pub fn decide_approval(
        &self,
        run: &RunId,
        step: &StepId,
        args_digest: crate::books::Digest,
        approver: &str,
        role: &str,
        approve: bool,
        note: &str,
    ) -> Result<bool> {
        let cmd = Command::DecideApproval(DecideApproval {
            run: run.clone(),
            step: step.clone(),
            args_digest,
            approver: approver.to_string(),
            role: role.to_string(),
            approve,
            note: note.to_string(),
        });
        match self.answer(cmd)? {
            Answer::WaitEnded { woke, .. } => Ok(woke),
            other => unexpected(&other, "decide_approval"),
        }
    }

    /// Sends the signal `name` with `payload` to `run` from outside (no
    /// lease): it ends the run's open wait for that name, waking the run,
    /// or waits in the run's inbox for the next such wait. A run that
    /// ended refuses it (`RunTerminal`).
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, RunState, StepId, Transition, WaitFor, WaitStatus, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("shop-1")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"1"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let step = StepId::new("await-payment")?;
    /// let paid = WaitFor::Signal { name: "paid".into() };
    /// engine.open_wait(&run, &lease.guard, &step, paid.clone(), None, "webhook")?;
    /// let sent = engine.signal(&run, "paid", b"psp ref 41", "psp-webhook")?;
    /// assert_eq!(sent.taken_by, Some(step.clone()));
    /// let lease = engine.claim_next(&WorkerId::new("w2")?, 30_000)?.expect("woken");
    /// let waited = engine.open_wait(&run, &lease.guard, &step, paid, None, "")?;
    /// let WaitStatus::Signalled { signal } = waited.wait.status else { panic!() };
    /// assert_eq!(signal.payload, b"psp ref 41");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn signal(
        &self,
        run: &RunId,
        name: &str,
        payload: &[u8],
        sender: &str,
    ) -> Result<Signalled> {
        let cmd = Command::SendSignal(SendSignal {
            run: run.clone(),
            name: name.to_string(),
            payload: payload.to_vec(),
            sender: sender.to_string(),
        });
        match self.answer(cmd)? {
            Answer::Signalled { seq, taken_by, .. } => Ok(Signalled { seq, taken_by }),
            other => unexpected(&other, "signal"),
        }
    }

    /// Records the reply of an asynchronous tool to the effect `key`, from
    /// outside (a webhook: no lease): the effect settles to `outcome`
    /// (confirmed or failed; `Unknown` is refused) and, if the run waits
    /// for this reply, the wait ends and the run wakes, in one commit. The
    /// same reply delivered again is answered as before, with nothing
    /// written; another outcome for a settled effect is `EffectNotOpen`.
    /// Returns the step whose wait it ended, if one was open.
    ///
    /// ```
    /// use actum::books::{CreateRun, EffectStatus, Outcome, RunId, RunState, StepId, ToolClass,
    ///     Transition, WaitFor, WaitStatus, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions, StepPlan, StepRequest, ToolSpec};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("vendor-8")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"8"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// // The step sends the screening request, then waits for its webhook.
    /// let step = StepId::new("screen")?;
    /// let request = StepRequest { guard: &lease.guard, run: &run, step: &step,
    ///     tool: ToolSpec { name: "kyc.screen".into(),
    ///         class: ToolClass::Idempotent { dedup_window_ms: 86_400_000 } },
    ///     args: b"screen vendor 8", rationale: "onboarding", compensation: None };
    /// let StepPlan::Act(ctx) = engine.begin_step(&request)? else { panic!("a fresh step acts") };
    /// let reply = WaitFor::Reply { key: ctx.key.clone() };
    /// let waited = engine.open_wait(&run, &lease.guard, &step, reply.clone(), None, "kyc")?;
    /// assert_eq!(waited.state, RunState::WaitingTool);
    /// let clear = Outcome::Confirmed { receipt: b"clear".to_vec() };
    /// assert_eq!(engine.deliver_reply(&ctx.key, clear.clone(), "kyc-webhook")?, Some(step.clone()));
    /// // A retried webhook changes nothing.
    /// assert_eq!(engine.deliver_reply(&ctx.key, clear, "kyc-webhook")?, None);
    /// assert!(matches!(engine.effect(&ctx.key)?.expect("intended").status,
    ///     EffectStatus::Confirmed { .. }));
    /// let lease = engine.claim_next(&WorkerId::new("w2")?, 30_000)?.expect("woken");
    /// let again = engine.open_wait(&run, &lease.guard, &step, reply, None, "")?;
    /// assert!(matches!(again.wait.status, WaitStatus::Replied { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deliver_reply(
        &self,
        key: &EffectKey,
        outcome: Outcome,
        sender: &str,
    ) -> Result<Option<StepId>> {
        let cmd = Command::DeliverReply(DeliverReply {
            key: key.clone(),
            outcome,
            sender: sender.to_string(),
        });
        match self.answer(cmd)? {
            Answer::Replied { wait_ended, .. } => Ok(wait_ended),
            other => unexpected(&other, "deliver_reply"),
        }
    }

    /// The waits of `run` in the order they were opened, and the signals
    /// no wait has taken yet; an empty book if it never waited.
    ///
    /// ```
    /// use actum::books::{StepId, WaitFor, WaitStatus};
    /// use actum::engine::{Engine, EngineOptions};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("kyc-4")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"4"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// // A signal that comes before anyone waits for it is kept in the inbox.
    /// engine.signal(&run, "docs", b"passport.pdf", "upload-form")?;
    /// let book = engine.waits(&run)?;
    /// assert!(book.waits.is_empty());
    /// assert_eq!(book.inbox[0].payload, b"passport.pdf");
    /// // The first wait for it takes it at once.
    /// let step = StepId::new("await-docs")?;
    /// engine.open_wait(&run, &lease.guard, &step, WaitFor::Signal { name: "docs".into() }, None, "")?;
    /// let book = engine.waits(&run)?;
    /// assert!(book.inbox.is_empty());
    /// assert_eq!(book.waits[0].step, step);
    /// assert!(matches!(book.waits[0].status, WaitStatus::Signalled { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn waits(&self, run: &RunId) -> Result<WaitBook> {
        self.read(|books| {
            crate::books::existing(books, run)?;
            Ok(books
                .waits(run)
                .unwrap_or_else(|| WaitBook::new(run.clone())))
        })
    }
}

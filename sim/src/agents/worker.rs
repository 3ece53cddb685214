//! Simulated workers: each runs agent workflows through the public engine
//! API, one call per step, so that the schedule can crash the process,
//! pause a worker past its lease or jump the clock between any two: before
//! the intent, after it, after the act is sent, after the reply, after the
//! outcome, around the checkpoint.
//!
//! A worker claims a run (`claim_next`), loads its latest checkpoint,
//! starts it, then for each action of the workflow: `begin_step` (or
//! `begin_compensation`), sends the act or query to the world, waits for
//! the reply (or times out), records it with `finish_step` (or
//! `resolve_step`), and saves a checkpoint: odd-numbered workers record an
//! act's outcome, the checkpoint and (after the last step) the run's end
//! in one record with `finish_step_with`, even ones in separate commits.
//! Between steps it renews its
//! lease when half of it is gone (not while a call is in flight). A refusal
//! for a lost lease or a stale token drops the run.
//!
//! **Invariant:** a worker holds nothing the books do not: after a crash it
//! starts idle, and what it does next is decided by the books alone.

use actum::Clock;
use actum::Error;
use actum::books::{
    AcquireResource, Charge, Command, Compensation, Cost, EffectKey, EndSaga, FencingToken, Guard,
    OpenWait, Outcome, Reconcile, RecordDecision, ReleaseResource, RenewLease, Reserve, Reserved,
    ResourceId, RunId, RunState, SagaNext, SaveCheckpoint, SetShared, Settle, SharedKeyId,
    SharedSetter, StepId, ToolClass, Transition, WaitFor, WaitStatus, WorkerId, digest_of,
};
use actum::engine::{
    ChildSpec, CompensationRequest, EffectCtx, StepPlan, StepRequest, StepResult, ToolSpec,
    start_child_command,
};

use super::appends::{self, CHECKPOINT_LOADS_AS_SAVED, NotesBase};
use super::failure::AgentFailure;
use super::migration::{self, MIGRATION_KEEPS_STATE, SCHEMA_1, SCHEMA_2};
use super::sim::{Called, Sim};
use super::workflow::{Action, AgentState, EffectSpec, Failing, WaitSpec, Workflow};
use crate::check;
use crate::world::{Ask, CALL_TIMEOUT_MS, CallId, Fate, Reply, Tool, tool};

/// The lease every worker takes and renews, in ms.
pub const LEASE_TTL_MS: u64 = 30_000;
/// How long a worker holds a customer it contacts: longer than a call
/// can take, so only a pause or a jump lets the hold run out under it.
pub const RESOURCE_TTL_MS: u64 = 2 * crate::world::CALL_TIMEOUT_MS;
/// What a research run holds before a search: one tool call of at most
/// this many micro-units.
pub const SEARCH_HOLD_MICROS: u64 = 500;
/// What a search costs.
pub const SEARCH_COST_MICROS: u64 = 300;
/// What a research run holds before a model call (the model's usage is
/// always below it).
pub const DECISION_HOLD: Cost = Cost {
    tokens_in: 400,
    tokens_out: 300,
    cost_micros: 600,
    tool_calls: 0,
};

/// One simulated worker process.
#[derive(Clone, Debug)]
pub struct Worker {
    index: u8,
    id: WorkerId,
    incarnation: u32,
    /// Not scheduled while paused (a zombie once its lease runs out).
    pub paused: bool,
    /// The run it works on.
    pub job: Option<Job>,
}

impl Worker {
    /// Worker number `index`, idle.
    pub fn new(index: u8) -> Worker {
        Worker {
            index,
            id: WorkerId::new(format!("w{index}")).expect("a valid worker id"),
            incarnation: 0,
            paused: false,
            job: None,
        }
    }

    /// The process died: the worker comes back idle, as a new incarnation.
    pub fn restart(&mut self) {
        self.incarnation += 1;
        self.paused = false;
        self.job = None;
    }

    /// `w<index>#<incarnation>`, for the history.
    pub fn name(&self) -> String {
        format!("w{}#{}", self.index, self.incarnation)
    }
}

/// A run a worker holds.
#[derive(Clone, Debug)]
pub struct Job {
    run: RunId,
    workflow: Workflow,
    guard: Guard,
    expires_ms: u64,
    /// The checkpoint schema its process's code writes and reads.
    schema: u32,
    state: AgentState,
    phase: Phase,
    /// The budget asked for the current action's call, if it pays one.
    budget: Option<Asked>,
    /// True once the run compensates: the worker runs its saga (the books'
    /// `saga_next` decides each step), not the workflow.
    saga: bool,
    /// The resource hold the current act is sent under, if it needs one.
    hold: Option<(ResourceId, FencingToken)>,
    /// What the worker read of a shared registry (its value and version),
    /// to write back at its next step: another worker may write between.
    read: Option<(Vec<u8>, u64)>,
    /// A checkpoint of the run whose notes the worker knows (the one it
    /// loaded or last saved and had acknowledged), on which its saves may
    /// append the notes (`appends.rs`).
    notes_base: Option<NotesBase>,
}

/// A reserve the worker made for the current action's call.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Asked {
    /// What the call is.
    charge: Charge,
    /// True if the engine granted a hold (which the worker settles);
    /// false if it answered that the call was made before.
    held: bool,
    /// What the call cost, once it is recorded: the hold is settled then.
    actual: Option<Cost>,
}

impl Job {
    /// The charge the workflow's next action pays, if it is a research
    /// run's model call or search (the runs with budgets).
    fn charge_of(&self, action: &Action) -> Option<Charge> {
        let budgeted = matches!(self.workflow, Workflow::Research | Workflow::Summary);
        if !budgeted || self.state.failing.is_some() {
            return None;
        }
        match action {
            Action::Decide { position, .. } => Some(Charge::Decision {
                position: *position,
            }),
            Action::Effect(spec) => Some(Charge::Effect {
                step: StepId::new(spec.step.clone()).expect("a valid step id"),
            }),
            _ => None,
        }
    }

    /// The call the held budget was for is recorded, costing `actual`.
    fn recorded(&mut self, actual: Cost) {
        if let Some(asked) = self.budget.as_mut().filter(|a| a.held) {
            asked.actual = Some(actual);
        }
    }

    /// The settle of a recorded call's hold, if one is due.
    fn settle_due(&self) -> Option<Settle> {
        let asked = self.budget.as_ref()?;
        Some(Settle {
            run: self.run.clone(),
            guard: self.guard.clone(),
            charge: asked.charge.clone(),
            actual: asked.actual.filter(|_| asked.held)?,
        })
    }

    /// Moves the agent on from a step's result (`planned`: the books
    /// already knew it): the new state and phase. `false` for a result no
    /// valid workflow gets.
    fn take(&mut self, side: Side, result: &StepResult, planned: bool) -> bool {
        if self.saga {
            // Whatever a saga's call came to, the books say what is next.
            self.phase = Phase::Saga;
            return true;
        }
        if matches!(side, Side::Act(_)) {
            self.recorded(Cost::tool_call(SEARCH_COST_MICROS));
        }
        match result {
            StepResult::Done { receipt, .. } => {
                self.state.notes.extend_from_slice(receipt);
                self.state.cursor += 1;
                self.phase = Phase::Save;
            }
            StepResult::Compensated { .. } => {
                self.state.cursor += 1;
                self.phase = Phase::Save;
            }
            StepResult::Failed {
                retryable: true, ..
            } => self.phase = Phase::Ready,
            StepResult::Failed {
                retryable: false, ..
            } if matches!(side, Side::Act(_)) => {
                self.state.failing = Some(Failing::Declined);
                self.state.cursor = 0;
                self.phase = Phase::Save;
            }
            StepResult::Unknown { .. }
                if planned || side.tool().class == ToolClass::NotIdempotent =>
            {
                // The books cannot resend or query it: a person must.
                self.state.failing = Some(Failing::Unknown);
                self.state.cursor = 0;
                self.phase = Phase::Save;
            }
            // A lost ack: the next begin resends or queries.
            StepResult::Unknown { .. } => self.phase = Phase::Ready,
            _ => return false,
        }
        true
    }

    /// What follows `result` in the same record: the job after it (phase
    /// `Save`), its checkpoint and, if that state finishes the workflow,
    /// the run's transition. `None` if the result leads to no checkpoint
    /// (the outcome is then recorded alone).
    fn follow_ups(&self, side: Side, result: &StepResult) -> Option<FollowUps> {
        if self.saga {
            return None;
        }
        let mut next = self.clone();
        if !next.take(side, result, false) || !matches!(next.phase, Phase::Save) {
            return None;
        }
        let mut then = Vec::new();
        if let Some(settle) = next.settle_due() {
            then.push(Command::Settle(settle));
            next.budget = None;
        }
        then.push(Command::SaveCheckpoint(next.save_command()));
        let finish_to = match next.workflow.action(&next.run, &next.state) {
            Action::Finish { to, reason } => {
                then.push(Command::Transition(next.transition_command(to, reason)));
                Some(to)
            }
            _ => None,
        };
        Some(FollowUps {
            next,
            then,
            finish_to,
        })
    }

    /// The checkpoint of the agent's current state.
    fn save_command(&self) -> SaveCheckpoint {
        SaveCheckpoint {
            run: self.run.clone(),
            guard: self.guard.clone(),
            schema_version: self.schema,
            parts: appends::held(
                appends::in_append_form(
                    migration::encode(self.schema, &self.state, self.workflow),
                    &self.run,
                    &self.state,
                    self.notes_base.as_ref(),
                ),
                &self.run,
            ),
        }
    }

    /// The run's move to `to`.
    fn transition_command(&self, to: RunState, reason: &str) -> Transition {
        Transition {
            run: self.run.clone(),
            guard: self.guard.clone(),
            to,
            expected_version: None,
            reason: reason.to_string(),
        }
    }
}

/// An outcome's follow-ups, planned by `Job::follow_ups`.
struct FollowUps {
    /// The job once they are recorded (before its phase moves on).
    next: Job,
    /// The checkpoint, then the transition if any.
    then: Vec<Command>,
    /// The run's end, if the transition is in `then`.
    finish_to: Option<RunState>,
}

/// Which side of a step a call is for, and the tool it calls.
#[derive(Clone, Copy, Debug)]
enum Side {
    Act(Tool),
    Undo(Tool),
}

impl Side {
    fn tool(self) -> Tool {
        match self {
            Side::Act(t) | Side::Undo(t) => t,
        }
    }
}

/// Where a worker is in its run.
#[derive(Clone, Debug)]
enum Phase {
    /// Read the run and its latest checkpoint.
    Load,
    /// Move the run from pending to running.
    Start,
    /// Take the workflow's next action.
    Ready,
    /// A call is in flight.
    Await {
        ctx: EffectCtx,
        side: Side,
        call: CallId,
        deadline_ms: u64,
        query: bool,
    },
    /// An asynchronous tool took the request: wait for its webhook's
    /// reply, with no lease.
    Park { ctx: EffectCtx },
    /// The reply (or the timeout) is in; record it.
    Report {
        ctx: EffectCtx,
        side: Side,
        outcome: Outcome,
        query: bool,
    },
    /// Save the checkpoint of the new state.
    Save,
    /// The run compensates: ask the books what its saga does next.
    Saga,
}

type Next = Result<Option<Job>, AgentFailure>;

impl Sim<'_> {
    /// Worker `w` takes its next step (nothing if it is paused); returns
    /// whether it did anything (an idle worker finding nothing to claim,
    /// or one still waiting for a reply, does not).
    pub fn advance(&mut self, w: usize) -> Result<bool, AgentFailure> {
        if self.workers[w].paused {
            return Ok(false);
        }
        let waiting_on = |job: &Option<Job>| match job {
            Some(Job {
                phase: Phase::Await { call, .. },
                ..
            }) => Some(*call),
            _ => None,
        };
        let before = waiting_on(&self.workers[w].job);
        let was_idle = self.workers[w].job.is_none();
        let next = match self.workers[w].job.take() {
            None => self.claim(w)?,
            Some(job) => self.work(w, job)?,
        };
        let idle_still = was_idle && next.is_none() && !self.dead;
        let acted = !idle_still && (before.is_none() || waiting_on(&next) != before);
        self.workers[w].job = if self.dead { None } else { next };
        Ok(acted)
    }

    fn work(&mut self, w: usize, job: Job) -> Next {
        // A working worker heartbeats its lease when half of it is gone;
        // not while it waits on a call (a call can outlive the lease) nor
        // before it reports a reply (a late fact must still be recorded).
        let heartbeat = !matches!(job.phase, Phase::Await { .. } | Phase::Report { .. });
        let remaining_ms = job.expires_ms.saturating_sub(self.clock.now_ms());
        if heartbeat && remaining_ms < LEASE_TTL_MS / 2 {
            return self.renew(w, job);
        }
        match job.phase.clone() {
            Phase::Load => self.load(w, job),
            Phase::Start => self.start_run(w, job),
            Phase::Ready | Phase::Saga if job.saga => self.saga_step(w, job),
            Phase::Ready | Phase::Saga => self.ready(w, job),
            Phase::Await {
                ctx,
                side,
                call,
                deadline_ms,
                query,
            } => self.await_reply(job, (ctx, side, query), call, deadline_ms),
            Phase::Report {
                ctx,
                side,
                outcome,
                query,
            } => self.report_outcome(w, job, (ctx, side, query), outcome),
            Phase::Park { ctx } => self.park(w, job, &ctx),
            Phase::Save => self.save(w, job),
        }
    }

    /// True if `run` left the books by retention.
    fn was_pruned(&self, run: &RunId) -> bool {
        use actum::books::BooksRead;
        self.model.run(run).is_none() && self.pruned.run(run).is_some()
    }

    fn who(&self, w: usize) -> String {
        self.workers[w].name()
    }

    /// A refusal that ends the worker's hold on the run; anything else is
    /// a valid workflow refused, which is a failure.
    fn dropped(&mut self, w: usize, job: &Job, error: &Error) -> Next {
        if let Error::RunNotRunning {
            state: RunState::Compensating,
            ..
        } = error
            && !job.saga
        {
            // An operator cancelled the run under this worker, and it
            // compensates: the worker, still holding the lease, runs the
            // saga.
            let who = self.who(w);
            self.note(|| format!("{who} finds {} compensating: {error}", job.run));
            let mut job = job.clone();
            job.saga = true;
            job.phase = Phase::Saga;
            return Ok(Some(job));
        }
        match error {
            Error::Fenced { .. } => self.report.zombies_fenced += 1,
            Error::LeaseLost { .. } => self.report.leases_lost += 1,
            Error::RunTerminal { .. } => {}
            // Retention took the run while this worker slept on it; only
            // a run the operator's pass pruned may be missing.
            Error::NotFound { .. } if self.was_pruned(&job.run) => {}
            // An operator paused the run: the worker lets it go until
            // someone claims it after a resume.
            Error::RunNotRunning { .. } => self.report.not_running_refused += 1,
            _ => {
                return Err(self.fail(
                    "the engine accepts every step of a valid workflow",
                    format!("{} on run {} was refused: {error}", self.who(w), job.run),
                ));
            }
        }
        let who = self.who(w);
        self.note(|| format!("{who} drops {}: {error}", job.run));
        Ok(None)
    }

    fn claim(&mut self, w: usize) -> Next {
        let worker = self.workers[w].id.clone();
        let cmd = Command::ClaimNext(actum::books::ClaimNext {
            worker: worker.clone(),
            ttl_ms: LEASE_TTL_MS,
            agents: None,
        });
        let grant = match self.call(Some(&cmd), |e| e.claim_next(&worker, LEASE_TTL_MS))? {
            Called::Ok(Some(grant)) => grant,
            Called::Ok(None) | Called::Died => return Ok(None),
            Called::Refused(e) => return Err(self.fail("claims succeed", e.to_string())),
        };
        let workflow = self.workflow_of(&grant.run);
        let who = self.who(w);
        self.note(|| format!("{who} claims {} (token {})", grant.run, grant.guard.token.0));
        Ok(Some(Job {
            run: grant.run,
            workflow,
            guard: grant.guard,
            expires_ms: grant.expires_ms,
            schema: self.schema,
            state: AgentState::default(),
            phase: Phase::Load,
            budget: None,
            saga: false,
            hold: None,
            read: None,
            notes_base: None,
        }))
    }

    fn load(&mut self, w: usize, mut job: Job) -> Next {
        let run = job.run.clone();
        let schema = job.schema;
        let keeps_byte_order = self.planted_bad_migration();
        // What a migration was handed: the schema and parts it found.
        let mut found: Option<(u32, Vec<actum::books::Part>)> = None;
        let read = self.call(None, |e| {
            let record = e.run(&run)?;
            let checkpoint = if schema == SCHEMA_1 {
                e.load_latest(&run, SCHEMA_1)?
            } else {
                e.load_latest_migrating(&run, schema, |version, parts| {
                    found = Some((version, parts.clone()));
                    migration::migrate(&run, version, parts, keeps_byte_order)
                })?
            };
            Ok((record, checkpoint))
        })?;
        let (record, checkpoint) = match read {
            Called::Ok(found) => found,
            Called::Died => return Ok(None),
            // Code of an older schema meets a checkpoint of a newer one:
            // it must not misread it, and leaves the run to a worker that
            // reads it.
            Called::Refused(Error::SchemaMismatch { found, .. }) if found > schema => {
                let who = self.who(w);
                self.note(|| format!("{who} leaves {run}: its checkpoint is of schema {found}"));
                return Ok(None);
            }
            Called::Refused(e) => return Err(self.fail("reads succeed", e.to_string())),
        };
        let record = record.ok_or_else(|| self.fail("reads succeed", "a claimed run is gone"))?;
        if let Some(c) = &checkpoint {
            // What the engine loaded, before any migration, is what the
            // acknowledged saves of that version made.
            let loaded = found.as_ref().map_or(&c.parts, |(_, parts)| parts);
            self.report.checked(CHECKPOINT_LOADS_AS_SAVED);
            appends::loads_as_saved(&self.model, &run, c.meta.version, loaded)
                .map_err(|e| self.fail(CHECKPOINT_LOADS_AS_SAVED, e))?;
            job.notes_base = NotesBase::of(c.meta.version, &c.parts);
        }
        job.state = match checkpoint {
            None => AgentState::default(),
            Some(c) => match found {
                Some((version, parts)) => self.check_migration(&run, version, &parts, &c.parts)?,
                None => migration::decode(schema, &c.parts)
                    .ok_or_else(|| self.fail("reads succeed", "a checkpoint does not parse"))?,
            },
        };
        job.saga = record.state == RunState::Compensating;
        job.phase = match record.state {
            RunState::Pending => Phase::Start,
            RunState::Compensating => Phase::Saga,
            _ => Phase::Ready,
        };
        let who = self.who(w);
        self.note(|| {
            format!(
                "{who} loads {}: {}, cursor {}{}",
                job.run,
                record.state,
                job.state.cursor,
                job.state
                    .failing
                    .map(|f| format!(" ({f:?})"))
                    .unwrap_or_default()
            )
        });
        Ok(Some(job))
    }

    fn start_run(&mut self, w: usize, mut job: Job) -> Next {
        match self.transition(w, &job, RunState::Running, "a worker started it")? {
            Some(()) => {
                job.phase = Phase::Ready;
                Ok(Some(job))
            }
            None => Ok(None),
        }
    }

    /// Moves the run to `to`; `Ok(None)` if the worker lost it.
    fn transition(
        &mut self,
        w: usize,
        job: &Job,
        to: RunState,
        reason: &str,
    ) -> Result<Option<()>, AgentFailure> {
        let t = job.transition_command(to, reason);
        let cmd = Command::Transition(t.clone());
        match self.call(Some(&cmd), |e| e.transition(t))? {
            Called::Ok(_) => {
                let who = self.who(w);
                self.note(|| format!("{who} moves {} to {to}", job.run));
                Ok(Some(()))
            }
            // An operator paused and resumed the run after this worker read
            // it pending: it is running already, which is what was asked.
            Called::Refused(Error::IllegalTransition {
                from: RunState::Running,
                to: RunState::Running,
                ..
            }) if to == RunState::Running => Ok(Some(())),
            Called::Refused(e) => self.dropped(w, job, &e).map(|_| None),
            Called::Died => Ok(None),
        }
    }

    fn ready(&mut self, w: usize, job: Job) -> Next {
        if let Some(settle) = job.settle_due() {
            return self.settle_charge(w, job, settle);
        }
        let action = job.workflow.action(&job.run, &job.state);
        if let Some(charge) = job.charge_of(&action)
            && job.budget.as_ref().is_none_or(|a| a.charge != charge)
        {
            return self.reserve(w, job, charge);
        }
        match action {
            Action::Effect(spec) => self.begin_effect(w, job, spec),
            Action::Decide { position, prompt } => self.decide(w, job, position, &prompt),
            Action::Register { key } => self.register(w, job, &key),
            Action::Release { resource } => self.release(w, job, &resource),
            Action::Wait(spec) => self.wait(w, job, &spec),
            Action::Spawn { step } => self.spawn(w, job, step),
            Action::Finish { to, reason } => match self.transition(w, &job, to, reason)? {
                Some(()) => self.saga_if_compensating(w, job),
                None => Ok(None),
            },
        }
    }

    /// Reserves the budget of the call `charge` before making it. An
    /// exhausted budget pauses the run: the worker lets it go, and the
    /// call is never made.
    fn reserve(&mut self, w: usize, mut job: Job, charge: Charge) -> Next {
        let amount = match charge {
            Charge::Decision { .. } => DECISION_HOLD,
            Charge::Effect { .. } => Cost::tool_call(SEARCH_HOLD_MICROS),
        };
        let reserve = Reserve {
            run: job.run.clone(),
            guard: job.guard.clone(),
            charge: charge.clone(),
            amount,
        };
        let cmd = Command::Reserve(reserve.clone());
        let answer = match self.call(Some(&cmd), |e| {
            e.reserve(&reserve.run, &reserve.guard, reserve.charge.clone(), amount)
        })? {
            Called::Ok(answer) => answer,
            Called::Refused(e) => return self.dropped(w, &job, &e),
            Called::Died => return Ok(None),
        };
        let who = self.who(w);
        let held = match answer {
            Reserved::Granted { again, .. } => {
                self.report
                    .checked("a hold is granted only within budget, never for a replay");
                check::reserve_granted_by_the_books(&self.model, &job.run, &charge).map_err(
                    |e| {
                        self.fail(
                            "a hold is granted only within budget, never for a replay",
                            e,
                        )
                    },
                )?;
                self.report.reserves += 1;
                self.note(|| {
                    format!(
                        "{who} reserves {charge} of {}{}",
                        job.run,
                        if again { " (held already)" } else { "" }
                    )
                });
                true
            }
            Reserved::Replayed { .. } => {
                self.note(|| format!("{who} finds {charge} of {} paid before", job.run));
                false
            }
            Reserved::Exhausted { reason } => {
                self.report.budgets_exhausted += 1;
                self.note(|| format!("{who} drops {}: {reason}", job.run));
                return Ok(None);
            }
        };
        job.budget = Some(Asked {
            charge,
            held,
            actual: None,
        });
        Ok(Some(job))
    }

    /// Settles the hold of a recorded call.
    fn settle_charge(&mut self, w: usize, mut job: Job, settle: Settle) -> Next {
        let cmd = Command::Settle(settle.clone());
        match self.call(Some(&cmd), |e| {
            e.settle(
                &settle.run,
                &settle.guard,
                settle.charge.clone(),
                settle.actual,
            )
        })? {
            Called::Ok(settled) => {
                self.report.settles += 1;
                let who = self.who(w);
                self.note(|| {
                    format!(
                        "{who} settles {} of {}: {} micros back",
                        settled.charge, job.run, settled.returned.cost_micros
                    )
                });
                job.budget = None;
                Ok(Some(job))
            }
            Called::Refused(e) => self.dropped(w, &job, &e),
            Called::Died => Ok(None),
        }
    }

    fn renew(&mut self, w: usize, mut job: Job) -> Next {
        let renew = RenewLease {
            run: job.run.clone(),
            guard: job.guard.clone(),
            ttl_ms: LEASE_TTL_MS,
        };
        let cmd = Command::RenewLease(renew);
        let (run, guard) = (job.run.clone(), job.guard.clone());
        match self.call(Some(&cmd), |e| e.renew_lease(&run, &guard, LEASE_TTL_MS))? {
            Called::Ok(expires_ms) => {
                job.expires_ms = expires_ms;
                Ok(Some(job))
            }
            Called::Refused(e) => self.dropped(w, &job, &e),
            Called::Died => Ok(None),
        }
    }

    fn begin_effect(&mut self, w: usize, mut job: Job, spec: EffectSpec) -> Next {
        job.hold = None;
        if let Some(resource) = spec.resource.as_ref().filter(|_| !job.saga) {
            match self.hold(w, &job, resource)? {
                Held::Granted(token) => job.hold = Some((resource.clone(), token)),
                Held::Busy => return Ok(Some(job)),
                Held::Dropped(next) => return Ok(next.map(|job| *job)),
            }
        }
        let step = StepId::new(spec.step.clone()).expect("a valid step id");
        let compensation = spec.compensation.as_ref().map(|(t, args)| Compensation {
            tool: t.name.to_string(),
            args: args.clone(),
            class: t.class,
        });
        let request = StepRequest {
            guard: &job.guard,
            run: &job.run,
            step: &step,
            tool: ToolSpec {
                name: spec.tool.name.to_string(),
                class: spec.tool.class,
            },
            args: &spec.args,
            rationale: "the workflow's next step",
            compensation,
        };
        let cmd = request.command();
        match self.call(Some(&cmd), |e| e.begin_step(&request))? {
            Called::Ok(plan) => {
                if let StepPlan::Act(ctx) | StepPlan::Query(ctx) = &plan {
                    self.report
                        .checked("a confirmed step is never acted on again");
                    check::step_not_confirmed(&self.model, &ctx.key)
                        .map_err(|e| self.fail("a confirmed step is never acted on again", e))?;
                }
                if let StepPlan::Act(EffectCtx {
                    key, resend: true, ..
                })
                | StepPlan::Query(EffectCtx { key, .. }) = &plan
                    && !self.intent_kept_its_args(key, &spec.args)?
                {
                    return Ok(None);
                }
                let digest = digest_of(&spec.args);
                self.follow(w, job, plan, Side::Act(spec.tool), digest)
            }
            Called::Refused(e) => self.dropped(w, &job, &e),
            Called::Died => Ok(None),
        }
    }

    /// Before a resend or a query of an intent written before, the worker
    /// reads what the intent was sent with: it must be the arguments the
    /// workflow asks for now. `false` if the process died meanwhile.
    fn intent_kept_its_args(
        &mut self,
        key: &actum::books::EffectKey,
        args: &[u8],
    ) -> Result<bool, AgentFailure> {
        let stored = match self.call(None, |e| e.effect_args(key))? {
            Called::Ok(stored) => stored,
            Called::Died => return Ok(false),
            // The engine planned a resend or a query of a key it never
            // wrote an intent for.
            Called::Refused(e) => {
                return Err(self.fail(
                    "an intent keeps the arguments it was sent with",
                    format!("the engine plans to resend or query {key}, which has no intent: {e}"),
                ));
            }
        };
        self.report
            .checked("an intent keeps the arguments it was sent with");
        if stored.as_deref() != Some(args) {
            return Err(self.fail(
                "an intent keeps the arguments it was sent with",
                format!(
                    "the intent of {key} holds {:?} as its arguments; it was sent with {:?}",
                    stored.as_deref().map(String::from_utf8_lossy),
                    String::from_utf8_lossy(args)
                ),
            ));
        }
        Ok(true)
    }

    fn begin_undo(&mut self, w: usize, job: Job, step: &str) -> Next {
        let step = StepId::new(step).expect("a valid step id");
        let request = CompensationRequest {
            guard: &job.guard,
            run: &job.run,
            step: &step,
            rationale: "the run's saga undoes what it did",
        };
        let cmd = request.command();
        match self.call(Some(&cmd), |e| e.begin_compensation(&request))? {
            Called::Ok((plan, compensation)) => {
                let digest = digest_of(&compensation.args);
                self.follow(w, job, plan, Side::Undo(tool(&compensation.tool)), digest)
            }
            Called::Refused(e) => self.dropped(w, &job, &e),
            Called::Died => Ok(None),
        }
    }

    /// Carries out what `begin_*` planned: send the act or the query, or
    /// take the known result.
    fn follow(
        &mut self,
        w: usize,
        mut job: Job,
        plan: StepPlan,
        side: Side,
        args_digest: actum::books::Digest,
    ) -> Next {
        let (ctx, ask, query) = match plan {
            StepPlan::Done(result) => return self.settle(w, job, side, result, true),
            StepPlan::Act(ctx) => (ctx, Ask::Act { args_digest }, false),
            StepPlan::Query(ctx) => (ctx, Ask::Query, true),
        };
        if !query {
            let durable = self
                .engine
                .as_ref()
                .map_or(ctx.intent_lsn, |e| e.durable_lsn());
            self.report
                .checked("no application without a durable intent");
            check::intent_durable_before_act(durable, &ctx)
                .map_err(|e| self.fail("no application without a durable intent", e))?;
        }
        let fate = self.next_fate();
        let now_ms = self.clock.now_ms();
        // Only an act is sent under the resource's token; a query asks
        // what a key did, which any holder may learn.
        let hold = job
            .hold
            .clone()
            .filter(|_| matches!(side, Side::Act(_)) && !query);
        let call = self.world.send_holding(
            side.tool(),
            (&ctx.key, ctx.token),
            hold,
            ask,
            (now_ms, fate),
        );
        let who = self.who(w);
        self.note(|| {
            format!(
                "{who} {} {} via {} under token {}{} [{}]",
                if query { "queries" } else { "sends" },
                ctx.key,
                side.tool().name,
                ctx.token.0,
                if ctx.resend { ", a resend" } else { "" },
                fate.name()
            )
        });
        job.phase = Phase::Await {
            ctx,
            side,
            call,
            deadline_ms: now_ms + CALL_TIMEOUT_MS,
            query,
        };
        Ok(Some(job))
    }

    /// The fate of the next tool call: the schedule's, or delivered once the
    /// faults have stopped.
    fn next_fate(&mut self) -> Fate {
        if self.calm {
            return Fate::Delivered;
        }
        let fate = self.schedule.fate(self.calls_made);
        self.calls_made += 1;
        fate
    }

    fn await_reply(
        &mut self,
        mut job: Job,
        (ctx, side, query): (EffectCtx, Side, bool),
        call: CallId,
        deadline_ms: u64,
    ) -> Next {
        let outcome = match self.world.take_reply(call) {
            Some(Reply::Accepted) => {
                job.phase = Phase::Park { ctx };
                return Ok(Some(job));
            }
            Some(reply) => reply.outcome(),
            None if self.clock.now_ms() >= deadline_ms => {
                if self.world.in_flight(call) {
                    return Err(self.fail(
                        "a request lives no longer than a caller waits",
                        format!(
                            "call {call} for {} is still in flight at its timeout",
                            ctx.key
                        ),
                    ));
                }
                Outcome::Unknown {
                    reason: "no reply before the timeout".into(),
                }
            }
            None => return Ok(Some(job)),
        };
        job.phase = Phase::Report {
            ctx,
            side,
            outcome,
            query,
        };
        Ok(Some(job))
    }

    fn report_outcome(
        &mut self,
        w: usize,
        job: Job,
        (ctx, side, query): (EffectCtx, Side, bool),
        outcome: Outcome,
    ) -> Next {
        let guard = job.guard.clone();
        // Odd-numbered workers record an act's outcome, its checkpoint and
        // the run's end in one record; even ones in separate commits, so
        // every seed runs both.
        if !query
            && w % 2 == 1
            && let Some(plan) = job.follow_ups(side, &ctx.result(&outcome))
        {
            return self.report_with_follow_ups(w, &job, (&ctx, outcome), plan);
        }
        let called = if query {
            let cmd = ctx.reconcile_command(&guard, outcome.clone());
            self.call(cmd.as_ref(), |e| e.resolve_step(&guard, &ctx, outcome))?
        } else {
            let cmd = ctx.finish_command(&guard, outcome.clone());
            self.call(Some(&cmd), |e| e.finish_step(&guard, &ctx, outcome))?
        };
        match called {
            Called::Ok(result) => self.settle(w, job, side, result, false),
            // The webhook settled the effect while the worker timed out
            // on the request: the next begin reads the reply from the
            // ledger.
            Called::Refused(Error::EffectNotOpen { key, status })
                if side.tool().replies_by_webhook =>
            {
                let who = self.who(w);
                self.note(|| format!("{who} finds {key} {status} by webhook already"));
                let mut job = job;
                job.phase = Phase::Ready;
                Ok(Some(job))
            }
            Called::Refused(e) => self.dropped(w, &job, &e),
            Called::Died => Ok(None),
        }
    }

    /// Opens `open` (or asks how it stands) for the worker's run: the
    /// wait's status, or `None` if the worker lets the run go (its call was
    /// refused, or the process died).
    fn open_wait(
        &mut self,
        w: usize,
        job: &Job,
        open: OpenWait,
    ) -> Result<Option<WaitStatus>, AgentFailure> {
        let cmd = Command::OpenWait(open.clone());
        let called = self.call(Some(&cmd), |e| {
            e.open_wait(
                &open.run,
                &open.guard,
                &open.step,
                open.wait_for.clone(),
                open.deadline_ms,
                &open.reason,
            )
        })?;
        let now_ms = self.clock.now_ms();
        match called {
            Called::Ok(waited) => Ok(Some(waited.wait.status)),
            // The approval's window closed before the run asked for it (a
            // jump to a tool window's end can carry the clock past it): the
            // engine refuses a new approval that is expired already, and
            // the workflow takes the path of an expired approval.
            Called::Refused(Error::InvalidCommand { reason })
                if matches!(open.wait_for, WaitFor::Approval { .. })
                    && open.deadline_ms.is_some_and(|at| at <= now_ms) =>
            {
                let who = self.who(w);
                self.note(|| format!("{who} finds the approval of {} closed: {reason}", job.run));
                Ok(Some(WaitStatus::Elapsed))
            }
            Called::Refused(e) => self.dropped(w, job, &e).map(|_| None),
            Called::Died => Ok(None),
        }
    }

    /// Waits for the webhook's reply to an asynchronous tool's request
    /// (or learns it came already). Still open: the run is parked and the
    /// lease gone, so the worker lets it go. Replied: the next begin of the
    /// step reads the outcome from the ledger.
    fn park(&mut self, w: usize, mut job: Job, ctx: &EffectCtx) -> Next {
        let step = ctx.key.step().clone();
        let open = OpenWait {
            run: job.run.clone(),
            guard: job.guard.clone(),
            step: step.clone(),
            wait_for: WaitFor::Reply {
                key: ctx.key.clone(),
            },
            deadline_ms: None,
            reason: "the screening answers by webhook".into(),
        };
        let Some(status) = self.open_wait(w, &job, open)? else {
            return Ok(None);
        };
        let who = self.who(w);
        self.note(|| {
            format!(
                "{who} waits for the reply to {}: {}",
                ctx.key,
                status.name()
            )
        });
        match status {
            WaitStatus::Open => {
                self.report.waits_parked += 1;
                Ok(None)
            }
            WaitStatus::Replied { status } => {
                // The reply that ended the wait is in the engine's ledger.
                let held = match self.call(None, |e| e.effect(&ctx.key))? {
                    Called::Ok(entry) => entry.map(|e| e.status),
                    Called::Died => return Ok(None),
                    Called::Refused(e) => return Err(self.fail("reads succeed", e.to_string())),
                };
                self.report.checked("a wait ends only on its own terms");
                if held.as_ref() != Some(&status) {
                    return Err(self.fail(
                        "a wait ends only on its own terms",
                        format!(
                            "the wait for the reply to {} ended {}, but the ledger holds {}",
                            ctx.key,
                            status.name(),
                            held.as_ref().map_or("nothing", |s| s.name())
                        ),
                    ));
                }
                job.phase = Phase::Ready;
                Ok(Some(job))
            }
            other => Err(self.fail(
                "the engine accepts every step of a valid workflow",
                format!("the wait for the reply to {} ended {other:?}", ctx.key),
            )),
        }
    }

    /// Moves the agent on from a step's result. `planned`: the result came
    /// from `begin_*` (the books already knew it), not from a reply.
    fn settle(
        &mut self,
        w: usize,
        mut job: Job,
        side: Side,
        result: StepResult,
        planned: bool,
    ) -> Next {
        let who = self.who(w);
        self.note(|| format!("{who} gets {}", describe(&result)));
        if let StepResult::Done {
            key,
            receipt,
            replayed: true,
        } = &result
        {
            self.report.checked("a replayed receipt equals the world's");
            check::replayed_receipt_is_the_worlds(self.world.log(), key, receipt)
                .map_err(|e| self.fail("a replayed receipt equals the world's", e))?;
        }
        if !job.take(side, &result, planned) {
            return Err(self.fail(
                "the engine accepts every step of a valid workflow",
                format!("{who} on {} got {result:?} from a {side:?} step", job.run),
            ));
        }
        Ok(Some(job))
    }

    /// Records an act's outcome together with what follows it, in one
    /// record (`finish_step_with`): the checkpoint of the agent's new
    /// state and, when that state finishes the workflow, the run's
    /// transition, as `Job::follow_ups` planned them.
    fn report_with_follow_ups(
        &mut self,
        w: usize,
        job: &Job,
        (ctx, outcome): (&EffectCtx, Outcome),
        FollowUps {
            mut next,
            then,
            finish_to,
        }: FollowUps,
    ) -> Next {
        let guard = job.guard.clone();
        let finish = ctx.finish_command(&guard, outcome.clone());
        let called = self.call_finish_with(&finish, then, |e, then| {
            e.finish_step_with(&guard, ctx, outcome, then)
        })?;
        let finished = match called {
            Called::Ok(finished) => finished,
            Called::Refused(e) => return self.dropped(w, job, &e),
            Called::Died => return Ok(None),
        };
        let who = self.who(w);
        self.note(|| format!("{who} gets {}", describe(&finished.result)));
        let Ok(answers) = finished.then else {
            // The outcome is recorded; the follow-ups were refused (the
            // lease ran out): the checkpoint is tried on its own, and its
            // refusal drops the run.
            self.report.follow_ups_refused += 1;
            self.note(|| format!("{who}'s follow-ups were refused; the outcome stands alone"));
            next.budget = job.budget.clone();
            next.recorded(Cost::tool_call(SEARCH_COST_MICROS));
            return Ok(Some(next));
        };
        let saved = answers
            .iter()
            .find(|a| matches!(a, actum::books::Answer::CheckpointSaved { .. }));
        let version = match saved {
            Some(actum::books::Answer::CheckpointSaved { version, .. }) => *version,
            other => {
                return Err(self.fail(
                    "the engine accepts every step of a valid workflow",
                    format!("a checkpoint follow-up answered {other:?}"),
                ));
            }
        };
        self.report.one_record_steps += 1;
        self.note(|| format!("{who} saves {} v{version} in the same record", next.run));
        if let Some(to) = finish_to {
            self.note(|| format!("{who} moves {} to {to} in the same record", next.run));
            return self.saga_if_compensating(w, next);
        }
        next.phase = Phase::Ready;
        Ok(Some(next))
    }

    fn decide(&mut self, w: usize, mut job: Job, position: u64, prompt: &[u8]) -> Next {
        let input = digest_of(prompt);
        let run = job.run.clone();
        let replay = match self.call(None, |e| e.replay_decision(&run, position, &input))? {
            Called::Ok(found) => found,
            Called::Died => return Ok(None),
            Called::Refused(e) => return Err(self.fail("decisions replay", e.to_string())),
        };
        let who = self.who(w);
        let output = match replay {
            Some(record) => {
                self.report.decisions_replayed += 1;
                self.note(|| format!("{who} replays decision {position} of {run}"));
                job.recorded(Cost::of_usage(record.usage));
                record.output
            }
            None => {
                self.report
                    .checked("a replayed decision never calls the model again");
                check::decision_not_paid_twice(&self.model, &run, position)
                    .map_err(|e| self.fail("a replayed decision never calls the model again", e))?;
                let now_ms = self.clock.now_ms();
                let (output, usage) = self.world.model().call(&run, position, input, now_ms);
                self.report.model_calls += 1;
                let record = RecordDecision {
                    run: run.clone(),
                    guard: job.guard.clone(),
                    position,
                    input_digest: input,
                    output: output.clone(),
                    rationale: "the model's answer".into(),
                    usage,
                };
                let cmd = Command::RecordDecision(record.clone());
                match self.call(Some(&cmd), |e| e.record_decision(record))? {
                    Called::Ok(_) => {}
                    Called::Refused(e) => return self.dropped(w, &job, &e),
                    Called::Died => return Ok(None),
                }
                self.note(|| format!("{who} pays the model for decision {position} of {run}"));
                job.recorded(Cost::of_usage(usage));
                output
            }
        };
        job.state.notes.extend_from_slice(&output);
        job.state.cursor += 1;
        job.phase = Phase::Save;
        Ok(Some(job))
    }

    /// Opens the workflow's wait (or asks how it ended, after a resume).
    /// Still open: the run is parked and the lease gone, so the worker
    /// lets it go. Ended: the agent moves on along the path it gives.
    fn wait(&mut self, w: usize, mut job: Job, spec: &WaitSpec) -> Next {
        let step = StepId::new(spec.step).expect("a valid step id");
        let open = OpenWait {
            run: job.run.clone(),
            guard: job.guard.clone(),
            step: step.clone(),
            wait_for: spec.wait_for.clone(),
            deadline_ms: spec.deadline_ms,
            reason: format!("the workflow waits for {}", spec.wait_for),
        };
        let Some(status) = self.open_wait(w, &job, open)? else {
            return Ok(None);
        };
        let who = self.who(w);
        self.note(|| format!("{who} waits at {step} of {}: {}", job.run, status.name()));
        match (&spec.wait_for, status) {
            (_, WaitStatus::Open) => {
                self.report.waits_parked += 1;
                return Ok(None);
            }
            (WaitFor::Approval { .. }, WaitStatus::Rejected { .. } | WaitStatus::Elapsed) => {
                job.state.failing = Some(Failing::NotApproved);
                job.state.cursor = 0;
            }
            (_, WaitStatus::Signalled { signal }) => {
                job.state.notes.extend_from_slice(&signal.payload);
                job.state.cursor += 1;
            }
            (
                _,
                WaitStatus::Approved { .. } | WaitStatus::Elapsed | WaitStatus::Rejected { .. },
            ) => {
                job.state.cursor += 1;
            }
            (
                _,
                other @ (WaitStatus::ChildEnded { .. }
                | WaitStatus::ChildrenEnded { .. }
                | WaitStatus::Replied { .. }),
            ) => {
                return Err(self.fail(
                    "the engine accepts every step of a valid workflow",
                    format!(
                        "a {} wait of {} ended {}",
                        spec.wait_for,
                        job.run,
                        other.name()
                    ),
                ));
            }
        }
        job.phase = Phase::Save;
        Ok(Some(job))
    }

    /// Starts the step's child run and waits for it, in one commit (or
    /// asks how the wait stands, after a resume). Still open: the parent
    /// is parked and the lease gone, so the worker lets it go. Ended: a
    /// completed child's result (its last checkpoint's notes) joins the
    /// parent's notes; any other end fails the parent.
    fn spawn(&mut self, w: usize, mut job: Job, step: &'static str) -> Next {
        let step_id = StepId::new(step).expect("a valid step id");
        let spec = ChildSpec {
            input_digest: digest_of(&job.state.notes),
            agent_version: format!("{} agent 1.0", Workflow::Summary.name()),
            trace_id: format!("trace-{}", job.run),
            input: Some(job.state.notes.clone()),
        };
        let reason = "the research is summarized by a child run";
        let cmd = start_child_command(&job.run, &job.guard, &step_id, spec.clone(), None, reason)
            .expect("a short child id");
        let started = match self.call(Some(&cmd), |e| {
            e.start_child(&job.run, &job.guard, &step_id, spec, None, reason)
        })? {
            Called::Ok(started) => started,
            Called::Refused(e) => return self.dropped(w, &job, &e),
            Called::Died => return Ok(None),
        };
        let who = self.who(w);
        let status = started.wait.status.clone();
        self.note(|| {
            format!(
                "{who} {} child {} of {}: {}",
                if started.created { "starts" } else { "finds" },
                started.child,
                job.run,
                status.name()
            )
        });
        match status {
            WaitStatus::Open => {
                self.report.children_started += u64::from(started.created);
                self.report.waits_parked += 1;
                return Ok(None);
            }
            WaitStatus::ChildEnded {
                state: RunState::Completed,
                checkpoint: Some(version),
            } => {
                let notes = self.child_notes(&job, &started.child, version)?;
                let Some(notes) = notes else {
                    return Ok(None);
                };
                self.report.children_joined += 1;
                job.state.notes.extend_from_slice(&notes);
                job.state.cursor += 1;
            }
            _ => {
                job.state.failing = Some(Failing::ChildFailed);
                job.state.cursor = 0;
            }
        }
        job.phase = Phase::Save;
        Ok(Some(job))
    }

    /// The notes of `child`'s checkpoint `version`, read at `job`'s schema
    /// (a checkpoint of schema 1 migrated, when that is schema 2); `None`
    /// if the process died.
    fn child_notes(
        &mut self,
        job: &Job,
        child: &RunId,
        version: u64,
    ) -> Result<Option<Vec<u8>>, AgentFailure> {
        let schema = job.schema;
        let keeps_byte_order = self.planted_bad_migration();
        let read = self.call(None, |e| match e.load_version(child, version, schema) {
            Err(Error::SchemaMismatch { found, .. }) if found < schema => {
                let old = e.load_version(child, version, found)?;
                let migrated =
                    migration::migrate(child, found, old.parts.clone(), keeps_byte_order)?;
                Ok((old.parts, Some(found), migrated))
            }
            loaded => loaded.map(|c| (Vec::new(), None, c.parts)),
        })?;
        let (old, found, parts) = match read {
            Called::Ok(read) => read,
            Called::Died => return Ok(None),
            Called::Refused(e) => return Err(self.fail("reads succeed", e.to_string())),
        };
        let state = match found {
            Some(found) => self.check_migration(child, found, &old, &parts)?,
            None => migration::decode(schema, &parts)
                .ok_or_else(|| self.fail("reads succeed", "a child's checkpoint does not parse"))?,
        };
        Ok(Some(state.notes))
    }

    /// True if the planted `MigrationKeepsByteOrder` breaks the migration.
    fn planted_bad_migration(&self) -> bool {
        self.config.planted == Some(actum::planted::PlantedBug::MigrationKeepsByteOrder)
    }

    /// Holds a migration of `run`'s checkpoint to [`MIGRATION_KEEPS_STATE`]:
    /// the parts of schema `found` it was handed and the schema-2 parts it
    /// made decode to one state, which it returns.
    fn check_migration(
        &mut self,
        run: &RunId,
        found: u32,
        old: &[actum::books::Part],
        migrated: &[actum::books::Part],
    ) -> Result<AgentState, AgentFailure> {
        let held = migration::decode(found, old)
            .ok_or_else(|| self.fail("reads succeed", "a checkpoint does not parse"))?;
        self.report.migrations += 1;
        self.report.checked(MIGRATION_KEEPS_STATE);
        match migration::decode(SCHEMA_2, migrated) {
            Some(state) if state == held => {
                self.note(|| {
                    format!(
                        "   {run}'s checkpoint of schema {found} is migrated to schema {SCHEMA_2}"
                    )
                });
                Ok(state)
            }
            other => Err(self.fail(
                MIGRATION_KEEPS_STATE,
                format!(
                    "{run}'s checkpoint of schema {found} held {held:?}; migrated to schema \
                     {SCHEMA_2}, it reads {other:?}"
                ),
            )),
        }
    }

    fn save(&mut self, w: usize, mut job: Job) -> Next {
        let save = job.save_command();
        let cmd = Command::SaveCheckpoint(save.clone());
        match self.call(Some(&cmd), |e| e.save_checkpoint(save))? {
            Called::Ok(saved) => {
                let who = self.who(w);
                self.note(|| format!("{who} saves {} v{}", job.run, saved.version));
                if job.schema == SCHEMA_1 {
                    job.notes_base = Some(NotesBase {
                        version: saved.version,
                        notes: job.state.notes.clone(),
                    });
                }
                job.phase = Phase::Ready;
                Ok(Some(job))
            }
            Called::Refused(e) => self.dropped(w, &job, &e),
            Called::Died => Ok(None),
        }
    }
}

impl Sim<'_> {
    /// After the worker moved its run to an end: if the run compensates
    /// instead (its saga has acts to undo), the worker, holding the lease,
    /// runs the saga; otherwise it is done with the run.
    fn saga_if_compensating(&mut self, w: usize, mut job: Job) -> Next {
        let run = job.run.clone();
        let state = match self.call(None, |e| e.run(&run))? {
            Called::Ok(record) => record.map(|r| r.state),
            Called::Died => return Ok(None),
            Called::Refused(e) => return Err(self.fail("reads succeed", e.to_string())),
        };
        if state != Some(RunState::Compensating) {
            return Ok(None);
        }
        self.report.sagas_opened += 1;
        let who = self.who(w);
        self.note(|| format!("{who} runs the saga of {run}"));
        job.saga = true;
        job.phase = Phase::Saga;
        Ok(Some(job))
    }

    /// One step of a compensating run's saga, as the books decide it: undo
    /// the latest step not undone, resolve an act in flight by its tool's
    /// class, have a person settle what nobody else can (once the faults
    /// stop), or end the saga.
    fn saga_step(&mut self, w: usize, job: Job) -> Next {
        let run = job.run.clone();
        let next = match self.call(None, |e| e.saga_next(&run))? {
            Called::Ok(next) => next,
            Called::Died => return Ok(None),
            Called::Refused(e) => return Err(self.fail("reads succeed", e.to_string())),
        };
        let who = self.who(w);
        self.note(|| format!("{who}: the saga of {run} is at {next:?}"));
        match next {
            SagaNext::Undo { step } => {
                self.report.saga_undos += 1;
                self.begin_undo(w, job, step.as_str())
            }
            SagaNext::Resolve { key } => {
                let spec = job
                    .workflow
                    .effect_at(&job.run, key.step().as_str())
                    .ok_or_else(|| {
                        self.fail(
                            "a saga resolves only the acts its workflow made",
                            format!("{key} is no effect of a {} run", job.workflow.name()),
                        )
                    })?;
                self.begin_effect(w, job, spec)
            }
            SagaNext::Stuck { key, status } if self.calm => {
                self.person_settles(w, job, &key, status)
            }
            SagaNext::Stuck { key, status } => {
                self.report.sagas_stuck += 1;
                self.note(|| format!("{who} leaves {run}: {key} is {status}, for a person"));
                Ok(None)
            }
            SagaNext::End { .. } => self.end_saga(w, &job),
        }
    }

    /// Ends the saga: the run reaches the end it was headed for.
    fn end_saga(&mut self, w: usize, job: &Job) -> Next {
        let end = EndSaga {
            run: job.run.clone(),
            guard: job.guard.clone(),
            reason: "every compensation is done".into(),
        };
        let cmd = Command::EndSaga(end.clone());
        match self.call(Some(&cmd), |e| {
            e.end_saga(&end.run, &end.guard, &end.reason)
        })? {
            Called::Ok(state) => {
                self.report.sagas_ended += 1;
                let who = self.who(w);
                self.note(|| format!("{who} ends the saga of {}: {state}", job.run));
                Ok(None)
            }
            Called::Refused(e) => self.dropped(w, job, &e),
            Called::Died => Ok(None),
        }
    }

    /// A person looks in the world for what `key` did (the bank's
    /// statement) and the worker records it: confirmed with its receipt,
    /// or failed if nothing happened and no request for it is on its way.
    fn person_settles(&mut self, w: usize, mut job: Job, key: &EffectKey, status: &str) -> Next {
        let who = self.who(w);
        let Some(outcome) = self.world.person_checks(key) else {
            self.note(|| format!("{who} waits: a request for {key} is still on its way"));
            return Ok(Some(job));
        };
        let reconcile = Reconcile {
            key: key.clone(),
            guard: job.guard.clone(),
            outcome: outcome.clone(),
            note: format!("a person checked the statement ({status} before)"),
        };
        let cmd = Command::Reconcile(reconcile.clone());
        match self.call(Some(&cmd), |e| e.reconcile(reconcile))? {
            Called::Ok(_) => {
                self.report.person_reconciles += 1;
                self.note(|| format!("{who} records a person's finding for {key}: {outcome:?}"));
                job.phase = Phase::Saga;
                Ok(Some(job))
            }
            Called::Refused(e) => self.dropped(w, &job, &e),
            Called::Died => Ok(None),
        }
    }
}

/// What a worker's try for a resource came to.
enum Held {
    /// The run holds it (anew or renewed) under this token.
    Granted(FencingToken),
    /// Another run holds it: try again later.
    Busy,
    /// The worker lets the run go (this is what the job becomes).
    Dropped(Option<Box<Job>>),
}

impl Sim<'_> {
    /// Takes or renews `resource` for the job's run, for long enough to
    /// outlast a call the worker waits for.
    fn hold(&mut self, w: usize, job: &Job, resource: &ResourceId) -> Result<Held, AgentFailure> {
        let acquire = AcquireResource {
            resource: resource.clone(),
            run: job.run.clone(),
            guard: job.guard.clone(),
            ttl_ms: RESOURCE_TTL_MS,
        };
        let cmd = Command::AcquireResource(acquire.clone());
        let who = self.who(w);
        match self.call(Some(&cmd), |e| {
            e.acquire_resource(
                &acquire.resource,
                &acquire.run,
                &acquire.guard,
                acquire.ttl_ms,
            )
        })? {
            Called::Ok(grant) => {
                self.report.resource_grants += u64::from(!grant.renewed);
                self.note(|| {
                    format!(
                        "{who} holds {resource} for {} (token {})",
                        job.run, grant.token.0
                    )
                });
                Ok(Held::Granted(grant.token))
            }
            Called::Refused(Error::ResourceHeld { holder, .. }) => {
                self.report.resource_busy += 1;
                self.note(|| format!("{who} waits: {holder} holds {resource}"));
                Ok(Held::Busy)
            }
            Called::Refused(e) => Ok(Held::Dropped(self.dropped(w, job, &e)?.map(Box::new))),
            Called::Died => Ok(Held::Dropped(None)),
        }
    }

    /// Adds the run to the shared registry `key`: reads it, and writes it
    /// back with the run's id against the version read; a conflict (a
    /// racing run wrote meanwhile) is tried again at the worker's next
    /// step.
    fn register(&mut self, w: usize, mut job: Job, key: &SharedKeyId) -> Next {
        let Some((mut names, version)) = job.read.take() else {
            // First read it; the write comes at the worker's next step, so
            // a racing worker may write in between.
            let read = match self.call(None, |e| e.shared(key))? {
                Called::Ok(entry) => entry,
                Called::Died => return Ok(None),
                Called::Refused(e) => return Err(self.fail("reads succeed", e.to_string())),
            };
            job.read = Some(read.map_or((Vec::new(), 0), |e| {
                (e.value.unwrap_or_default(), e.version)
            }));
            return Ok(Some(job));
        };
        let me = format!("{};", job.run);
        let listed = String::from_utf8_lossy(&names)
            .split_terminator(';')
            .any(|n| n == job.run.as_str());
        let who = self.who(w);
        if !listed {
            names.extend_from_slice(me.as_bytes());
            let set = SetShared {
                key: key.clone(),
                expected_version: version,
                value: Some(names),
                by: SharedSetter::Run {
                    run: job.run.clone(),
                    guard: job.guard.clone(),
                },
                reason: "contacted the customer".into(),
            };
            let cmd = Command::SetShared(set.clone());
            match self.call(Some(&cmd), |e| {
                e.set_shared(
                    &set.key,
                    set.expected_version,
                    set.value.clone(),
                    &set.by,
                    &set.reason,
                )
            })? {
                Called::Ok(now) => {
                    self.note(|| format!("{who} registers {} in {key} (v{now})", job.run))
                }
                Called::Refused(Error::SharedVersionConflict { actual, .. }) => {
                    self.report.cas_conflicts += 1;
                    self.note(|| {
                        format!("{who} lost a race on {key} (now v{actual}); reads again")
                    });
                    return Ok(Some(job));
                }
                Called::Refused(e) => return self.dropped(w, &job, &e),
                Called::Died => return Ok(None),
            }
        }
        job.state.cursor += 1;
        job.phase = Phase::Save;
        Ok(Some(job))
    }

    /// Lets the resource go; a hold that expired (or went to another run)
    /// meanwhile has nothing left to release.
    fn release(&mut self, w: usize, mut job: Job, resource: &ResourceId) -> Next {
        let release = ReleaseResource {
            resource: resource.clone(),
            run: job.run.clone(),
            guard: job.guard.clone(),
        };
        let cmd = Command::ReleaseResource(release.clone());
        match self.call(Some(&cmd), |e| {
            e.release_resource(&release.resource, &release.run, &release.guard)
        })? {
            Called::Ok(()) | Called::Refused(Error::ResourceNotHeld { .. }) => {
                let who = self.who(w);
                self.note(|| format!("{who} lets {resource} go"));
                job.state.cursor += 1;
                job.phase = Phase::Save;
                Ok(Some(job))
            }
            Called::Refused(e) => self.dropped(w, &job, &e),
            Called::Died => Ok(None),
        }
    }
}

/// A step result in words, for the history.
fn describe(result: &StepResult) -> String {
    match result {
        StepResult::Done {
            key,
            receipt,
            replayed,
        } => format!(
            "{key} done{}, receipt {}",
            if *replayed { " (from the books)" } else { "" },
            String::from_utf8_lossy(receipt)
        ),
        StepResult::Failed {
            key,
            retryable,
            reason,
        } => format!(
            "{key} failed{} ({reason})",
            if *retryable {
                ", retryable"
            } else {
                " for good"
            }
        ),
        StepResult::Unknown { key, reason } => format!("{key} unknown ({reason})"),
        StepResult::NeedsReconcile { key, .. } => format!("{key} needs a reconcile"),
        StepResult::Compensated { key } => format!("{key} compensated"),
    }
}

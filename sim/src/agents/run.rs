//! Runs one agent schedule: the fault phase (the schedule's events, each
//! followed, if the process died, by a crash and a checked recovery), the
//! calm phase (faults stop; workers run until every run is over), then a
//! clean close, a reopen, and the end-of-run invariants.
//!
//! **Invariant:** everything random comes from the seed, so a failure
//! replays exactly with the command it prints.

use actum::Clock;
use actum::books::{
    Answer, BooksRead, BudgetLimits, Command, DecideApproval, DeliverReply, EffectKey,
    EffectStatus, Guard, Lease, OperatorAction, Outcome, Prune, RenewLease, RunId, RunState,
    StepId, WaitFor, digest_of,
};

use super::config::AgentConfig;
use super::failure::{AgentFailure, Origin};
use super::report::AgentReport;
use super::schedule::{AgentSchedule, ApproverMove, EdgeAge, Event, SignalMove};
use super::sim::{Called, Sim};
use super::worker::LEASE_TTL_MS;
use super::workflow::{
    FINANCE, HOUR_MS, VERIFIED, Workflow, contacted_key, customer, vendor_payment,
};
use actum::operator::{Act, Done, Plan, Request, plan};

use crate::check;
use crate::rng::Rng;

/// Rounds of the calm phase before a run still going is a liveness failure.
const CALM_ROUNDS_MAX: u32 = 4_000;
/// Virtual time each calm round lets pass, in ms.
const CALM_TICK_MS: u64 = 5_000;

/// The invariant of operators' requests.
pub const REQUEST_ONCE: &str =
    "an operator's request is carried out once, however often it is sent";

/// A request's answer, for the history.
fn said(called: &Called<Done>) -> String {
    match called {
        Called::Ok(done) => format!("{done:?}"),
        Called::Refused(e) => format!("refused: {e}"),
        Called::Died => "the process died".to_string(),
    }
}

/// How long a run must have been over before the operator's retention
/// pass after a checkpoint prunes it.
const PRUNE_AFTER_MS: u64 = 60_000;

/// Runs the schedule `seed` stands for. A failure is replayed with the
/// history on, so it carries the readable story of the run.
pub fn run_agent_seed(seed: u64, config: &AgentConfig) -> Result<AgentReport, AgentFailure> {
    let schedule = AgentSchedule::from_seed(seed, config.events);
    run_agent_schedule(&schedule, config).map_err(|failure| AgentFailure {
        origin: Origin::Seed,
        ..failure
    })
}

/// Runs `schedule`; on failure, runs it again recording its history.
pub fn run_agent_schedule(
    schedule: &AgentSchedule,
    config: &AgentConfig,
) -> Result<AgentReport, AgentFailure> {
    match run_once(schedule, config).map(|(report, _)| report) {
        Err(failure) if !config.history => {
            let recording = AgentConfig {
                history: true,
                ..config.clone()
            };
            match run_once(schedule, &recording) {
                Err(with_history) => Err(with_history),
                // A run that passes the second time is not deterministic.
                Ok(_) => Err(AgentFailure {
                    invariant: "a seed replays identically",
                    detail: format!("failed without history, passed with it: {failure}"),
                    ..failure
                }),
            }
        }
        other => other,
    }
}

/// Runs the schedule `seed` stands for with its history recorded; returns
/// the history.
pub fn replay_history(seed: u64, config: &AgentConfig) -> Result<Vec<String>, AgentFailure> {
    let schedule = AgentSchedule::from_seed(seed, config.events);
    schedule_history(&schedule, config)
}

/// Runs `schedule` with its history recorded; returns the history.
pub fn schedule_history(
    schedule: &AgentSchedule,
    config: &AgentConfig,
) -> Result<Vec<String>, AgentFailure> {
    let recording = AgentConfig {
        history: true,
        ..config.clone()
    };
    run_once(schedule, &recording).map(|(_, history)| history)
}

fn run_once(
    schedule: &AgentSchedule,
    config: &AgentConfig,
) -> Result<(AgentReport, Vec<String>), AgentFailure> {
    // An assertion of the engine that fails (a bug it caught in itself) is
    // a failure of this schedule, reported with its seed and replay
    // command like any invariant, not the end of the whole campaign.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut sim = Sim::new(schedule, config);
        sim.start()?;
        sim.fault_phase()?;
        sim.calm_phase()?;
        sim.finish()
    }))
    .unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_else(|| "a panic without a message".to_string());
        Err(AgentFailure {
            seed: schedule.seed,
            invariant: PANICKED,
            detail: format!("the run panicked: {message}"),
            planted: config.planted,
            history: Vec::new(),
            origin: Origin::Schedule(Box::new(schedule.clone())),
        })
    })
}

/// The invariant a schedule fails when the engine (or the harness) panics:
/// an assertion caught a state no rule allows.
pub const PANICKED: &str = "no assertion of the engine fails";

/// What a probe run of a schedule (which must pass) shows: where a crash
/// can fall.
pub(crate) struct Probe {
    /// The indexes of the events at which a worker acted: the step
    /// boundaries.
    pub(crate) acting_events: Vec<usize>,
    /// The I/O calls the fault phase made.
    pub(crate) io_calls: u64,
}

/// Runs the fault phase of `schedule` and reports where a crash can fall.
pub(crate) fn probe(schedule: &AgentSchedule) -> Result<Probe, AgentFailure> {
    let mut sim = Sim::new(schedule, &AgentConfig::default());
    sim.start()?;
    let before = sim.disk.ops_count();
    sim.fault_phase()?;
    Ok(Probe {
        io_calls: sim.disk.ops_count() - before,
        acting_events: sim.acted_at,
    })
}

impl Sim<'_> {
    /// The schedule's events, each followed, if the process died, by a
    /// crash and a checked recovery; records where a worker acted.
    fn fault_phase(&mut self) -> Result<(), AgentFailure> {
        let events = self.schedule.events.clone();
        // When an operator reads the live database between events: its own
        // stream, and the disk does not count the reads (`SimDisk::quietly`),
        // so the seed's other draws and its armed cuts stay as they were.
        let mut reader = Rng::new(self.schedule.seed).fork("live reader, faults");
        for (index, event) in events.into_iter().enumerate() {
            self.deliver()?;
            if self.event(event)? {
                self.acted_at.push(index);
            }
            if self.dead || self.disk.is_powered_off() {
                self.crash("during the step above")?;
            } else if reader.below(16) == 0 {
                self.live_read(true)?;
            }
        }
        Ok(())
    }

    /// Plays `event`; true if a worker acted.
    fn event(&mut self, event: Event) -> Result<bool, AgentFailure> {
        let workers = self.workers.len();
        match event {
            Event::Advance(n) => return self.advance(usize::from(n) % workers),
            Event::Tick(ms) => {
                self.clock.advance_ms(u64::from(ms));
            }
            Event::Jump(ms) => {
                self.note(|| format!("the clock jumps {ms} ms"));
                self.clock.advance_ms(u64::from(ms));
            }
            Event::EdgeJump(code) => self.edge_jump(code),
            Event::Crash => self.crash("at a step boundary")?,
            Event::ArmIoCrash(n) => self.disk.set_crash_after_ops(u64::from(n)),
            Event::Pause(n) => {
                let worker = &mut self.workers[usize::from(n) % workers];
                worker.paused = true;
                let who = worker.name();
                self.note(|| format!("{who} pauses"));
            }
            Event::Resume(n) => {
                let worker = &mut self.workers[usize::from(n) % workers];
                if worker.paused {
                    worker.paused = false;
                    let who = worker.name();
                    self.note(|| format!("{who} resumes"));
                }
            }
            Event::Operate(action, n) => {
                // Any run the books hold: a schedule's, or a child. A
                // pause goes to a run a worker holds, if any does: an
                // operator pauses what is busy, and a pause between a
                // worker's last check and its next call is the race the
                // lifecycle rules exist for.
                let now_ms = self.clock.now_ms();
                let held: Vec<RunId> = self
                    .model
                    .runs()
                    .filter(|r| r.lease.as_ref().is_some_and(|l| l.is_live(now_ms)))
                    .map(|r| r.id.clone())
                    .collect();
                let all: Vec<RunId> = self.model.runs().map(|r| r.id.clone()).collect();
                let pool = if action == OperatorAction::Pause && !held.is_empty() {
                    held
                } else {
                    all
                };
                // Retention may have taken every run.
                let Some(run) = pool.get(usize::from(n) % pool.len().max(1)).cloned() else {
                    return Ok(false);
                };
                // An operator who resumes a run its budget paused grants
                // it one more search first.
                if action == OperatorAction::Resume {
                    self.raise_spent_budget(&run, "an operator's event")?;
                }
                self.resend_unanswered()?;
                if !self.dead {
                    self.operate(&run, action, "an operator's event")?;
                }
            }
            Event::Approve(code, n) => {
                let run = self.runs[usize::from(n) % self.runs.len()].0.clone();
                self.approve(&run, ApproverMove::of(code))?;
            }
            Event::Signal(code, n) => {
                let run = self.runs[usize::from(n) % self.runs.len()].0.clone();
                self.resend_unanswered()?;
                if self.dead {
                    return Ok(false);
                }
                match SignalMove::of(code) {
                    SignalMove::Verified => self.signal(&run, VERIFIED)?,
                    SignalMove::VerifiedTwice => {
                        self.signal(&run, VERIFIED)?;
                        if !self.dead {
                            self.signal(&run, VERIFIED)?;
                        }
                    }
                    SignalMove::Noise => self.signal(&run, "noise")?,
                    SignalMove::Reply => self.webhook_replies(&run)?,
                    SignalMove::ReplyTwice => {
                        self.webhook_replies(&run)?;
                        if !self.dead {
                            self.webhook_replies(&run)?;
                        }
                    }
                }
            }
            Event::MixGuard(n) => self.mix_guard(n)?,
            Event::Checkpoint => {
                let result = self.engine.as_ref().map(actum::Engine::checkpoint);
                if let Some(Err(e)) = result {
                    if !self.disk.is_powered_off() {
                        return Err(self.fail(
                            "no error without a fault",
                            format!("a checkpoint failed with the power on: {e}"),
                        ));
                    }
                    self.dead = true;
                }
                if !self.dead {
                    self.prune_old_runs()?;
                }
            }
        }
        Ok(false)
    }

    /// Jumps the clock so that the intent of an open act on a tool that
    /// deduplicates reaches the age `code` picks at the end of its tool's
    /// window ([`Event::EdgeJump`]): its next begin is decided there.
    fn edge_jump(&mut self, code: u8) {
        let open: Vec<(EffectKey, u64, u64, u64)> = self
            .model
            .effects()
            .filter(|e| e.status.is_open())
            .filter(|e| {
                self.model
                    .run(e.key.run())
                    .is_some_and(|r| !r.state.is_terminal())
            })
            .filter_map(|e| {
                let class = e.tool_class;
                let window = class.dedup_window_ms()?;
                Some((
                    e.key.clone(),
                    e.intended_ms,
                    window,
                    class.resend_horizon_ms()?,
                ))
            })
            .collect();
        let Some((key, intended_ms, window_ms, horizon_ms)) =
            open.get(usize::from(code / 5) % open.len().max(1)).cloned()
        else {
            return;
        };
        let edge = EdgeAge::of(code);
        let at_ms = intended_ms.saturating_add(edge.age_ms(window_ms, horizon_ms));
        let now_ms = self.clock.now_ms();
        if at_ms <= now_ms {
            return;
        }
        self.note(|| {
            format!(
                "the clock jumps {} ms, to {edge:?} of {key} (intended at {intended_ms}, window \
                 {window_ms} ms, resent until {horizon_ms} ms)",
                at_ms - now_ms
            )
        });
        self.clock.advance_ms(at_ms - now_ms);
        self.report.edge_jumps += 1;
    }

    /// An operator's retention pass after a checkpoint: the runs over for
    /// [`PRUNE_AFTER_MS`] leave the books, unless a dedup window of theirs
    /// is open or their parent is not over. The model decides the same
    /// prune, and the engine must answer as it does; the pruned runs' rows
    /// go to `pruned` first, for the checks of what the world saw.
    fn prune_old_runs(&mut self) -> Result<(), AgentFailure> {
        let now_ms = self.clock.now_ms();
        let runs: Vec<RunId> = self
            .model
            .runs()
            .filter(|r| {
                r.state.is_terminal() && now_ms.saturating_sub(r.updated_ms) >= PRUNE_AFTER_MS
            })
            .map(|r| r.id.clone())
            .take(actum::books::PRUNE_RUNS_MAX)
            .collect();
        if runs.is_empty() {
            return Ok(());
        }
        for run in &runs {
            self.pruned.copy_run(&self.model, run);
        }
        let cmd = Command::Prune(Prune {
            runs: runs.clone(),
            older_than_ms: PRUNE_AFTER_MS,
        });
        let expected = actum::books::decide(&self.model, &cmd, now_ms).map(|d| d.answer);
        let called = self.call(Some(&cmd), |e| e.prune_runs(runs, PRUNE_AFTER_MS))?;
        let outcome = match called {
            Called::Ok(done) => {
                self.report
                    .checked("the engine decides as the reference model does");
                let answered = Answer::Pruned {
                    pruned: done.pruned.clone(),
                    kept: done.kept.clone(),
                };
                if expected.as_ref().ok() != Some(&answered) {
                    return Err(self.fail(
                        "the engine decides as the reference model does",
                        format!(
                            "the engine's prune answered {answered:?}, the model's {expected:?}"
                        ),
                    ));
                }
                self.report.runs_pruned += done.pruned.len() as u64;
                self.report.runs_kept += done.kept.len() as u64;
                format!("{} pruned, {} kept", done.pruned.len(), done.kept.len())
            }
            Called::Refused(e) => format!("refused: {e}"),
            Called::Died => "the process died".to_string(),
        };
        self.note(|| format!("an operator prunes the runs over for a minute: {outcome}"));
        Ok(())
    }

    /// An operator's `action` on `run`, with no lease, sent as an
    /// operator's request ([`Sim::send_request`]) and held to the model
    /// like every call; a refusal (the run is over, or not paused) is part
    /// of the game.
    fn operate(
        &mut self,
        run: &RunId,
        action: OperatorAction,
        why: &'static str,
    ) -> Result<(), AgentFailure> {
        let act = Act::Operate {
            run: run.clone(),
            action,
        };
        let called = self.request(act, "ops", why)?;
        let outcome = match called {
            Called::Ok(Done::Operated { before, after, .. }) => {
                self.report.operator_actions += u64::from(before != after);
                format!(
                    "{after} ({})",
                    if before == after {
                        "already"
                    } else {
                        "changed"
                    }
                )
            }
            Called::Ok(other) => format!("{other:?}"),
            Called::Refused(e) => format!("refused: {e}"),
            Called::Died => "the process died".to_string(),
        };
        self.note(|| format!("an operator asks to {} {run}: {outcome}", action.name()));
        Ok(())
    }

    /// Sends a new operator's request: the next id, `act`, who and why.
    fn request(
        &mut self,
        act: Act,
        operator: &str,
        why: &str,
    ) -> Result<Called<Done>, AgentFailure> {
        self.requests_sent += 1;
        let request = Request {
            id: format!("op-{}", self.requests_sent),
            operator: operator.to_string(),
            reason: why.to_string(),
            act,
        };
        self.send_request(&request)
    }

    /// Sends `request` (again, if it was sent before) and holds the
    /// engine's answer to the model: a request the model carried out
    /// already must be answered `Repeated` and change nothing; any other
    /// is decided as the model decides it. An answer lost on its way back
    /// (the seed decides which) is asked for again at once, under the same
    /// id; a request the process died under is sent again once it is up
    /// ([`Sim::resend_unanswered`]).
    fn send_request(&mut self, request: &Request) -> Result<Called<Done>, AgentFailure> {
        let planned = plan(request, &self.model);
        let called = match &planned {
            Ok(Plan::Commit { command, .. }) => {
                self.call(Some(command), |e| e.carry_out(request))?
            }
            // Carried out already, or refused by the model: nothing for
            // the model to apply.
            Ok(Plan::Repeated(_)) | Err(_) => self.call(None, |e| e.carry_out(request))?,
        };
        self.report.checked(REQUEST_ONCE);
        let wrong = match (&planned, &called) {
            (Ok(Plan::Repeated(_)), Called::Ok(done)) if !matches!(done, Done::Repeated { .. }) => {
                Some((
                    REQUEST_ONCE,
                    format!("carried out before, and again: {done:?}"),
                ))
            }
            (Ok(Plan::Repeated(_)), Called::Refused(e)) => Some((
                REQUEST_ONCE,
                format!("carried out before, and now refused: {e}"),
            )),
            (Ok(Plan::Commit { .. }), Called::Ok(Done::Repeated { .. })) => Some((
                REQUEST_ONCE,
                "never carried out, and answered as carried out before".to_string(),
            )),
            (Err(e), Called::Ok(done)) => Some((
                "the engine decides as the reference model does",
                format!("the engine carried out what the model refuses ({e}): {done:?}"),
            )),
            _ => None,
        };
        if let Some((invariant, detail)) = wrong {
            return Err(self.fail(
                invariant,
                format!("operator request {}: {detail}", request.id),
            ));
        }
        match &called {
            Called::Died => self.unanswered.push(request.clone()),
            Called::Ok(Done::Repeated { .. }) => self.report.operator_repeats += 1,
            Called::Ok(_) if self.answer_rng.below(4) == 0 => {
                // The answer is lost on its way back: the sender asks again.
                self.report.operator_answers_lost += 1;
                self.note(|| format!("   the answer to {} is lost; sent again", request.id));
                return self.send_request(request);
            }
            Called::Ok(_) | Called::Refused(_) => {}
        }
        Ok(called)
    }

    /// Sends again, under their ids, the requests the process died under.
    fn resend_unanswered(&mut self) -> Result<(), AgentFailure> {
        for request in std::mem::take(&mut self.unanswered) {
            if self.dead {
                self.unanswered.push(request);
                continue;
            }
            let called = self.send_request(&request)?;
            self.note(|| format!("an operator sends {} again: {}", request.id, said(&called)));
        }
        Ok(())
    }

    /// A worker's code that mixed up two runs renews the `n`-th run leased
    /// live (modulo their count) under its holder's worker and token, but
    /// with a guard granted on another run: the engine must refuse it, as
    /// the model does ([`Event::MixGuard`]).
    fn mix_guard(&mut self, n: u8) -> Result<(), AgentFailure> {
        let now_ms = self.clock.now_ms();
        let held: Vec<(RunId, Lease)> = self
            .model
            .runs()
            .filter_map(|r| {
                let lease = r.lease.clone().filter(|l| l.is_live(now_ms))?;
                Some((r.id.clone(), lease))
            })
            .collect();
        let Some((run, lease)) = held.get(usize::from(n) % held.len().max(1)).cloned() else {
            return Ok(());
        };
        // Another run of the books if there is one; a name no run has
        // otherwise (a guard of a pruned run).
        let other = self
            .model
            .runs()
            .map(|r| r.id.clone())
            .find(|id| *id != run)
            .unwrap_or_else(|| RunId::new(format!("{run}-other")).expect("a valid run id"));
        let guard = Guard {
            run: other.clone(),
            worker: lease.worker.clone(),
            token: lease.token,
        };
        let cmd = Command::RenewLease(RenewLease {
            run: run.clone(),
            guard: guard.clone(),
            ttl_ms: LEASE_TTL_MS,
        });
        let called = self.call(Some(&cmd), |e| e.renew_lease(&run, &guard, LEASE_TTL_MS))?;
        let outcome = match called {
            Called::Ok(_) => "renewed".to_string(),
            Called::Refused(e) => {
                self.report.mixed_guards_refused += 1;
                format!("refused: {e}")
            }
            Called::Died => "the process died".to_string(),
        };
        self.note(|| {
            format!(
                "{} renews {run} under a guard of {other}: {outcome}",
                lease.worker
            )
        });
        Ok(())
    }

    /// An approver decides the payment approval of `run` (a vendor's step
    /// `pay`), with no lease. The model decides too, so a decision on a
    /// run that asked for none, a stale screen, a late or a second
    /// decision must be refused by the engine as by the model.
    fn approve(&mut self, run: &RunId, how: ApproverMove) -> Result<(), AgentFailure> {
        let mut args = vendor_payment(run);
        if how == ApproverMove::ApproveOther {
            args.extend_from_slice(b" (plus the second invoice)");
        }
        let decision = DecideApproval {
            run: run.clone(),
            step: StepId::new("pay").expect("a valid step id"),
            args_digest: digest_of(&args),
            approver: "ann".into(),
            role: FINANCE.into(),
            approve: how != ApproverMove::Reject,
            note: format!("{how:?}"),
        };
        let cmd = Command::DecideApproval(decision.clone());
        let called = self.call(Some(&cmd), |e| {
            e.decide_approval(
                &decision.run,
                &decision.step,
                decision.args_digest,
                &decision.approver,
                &decision.role,
                decision.approve,
                &decision.note,
            )
        })?;
        let outcome = match called {
            Called::Ok(woke) => {
                self.report.approvals += 1;
                format!("taken (woke: {woke})")
            }
            Called::Refused(e) => {
                self.report.approvals_refused += 1;
                format!("refused: {e}")
            }
            Called::Died => "the process died".to_string(),
        };
        self.note(|| format!("an approver decides {how:?} on {run}: {outcome}"));
        Ok(())
    }

    /// A webhook sends the signal `name` to `run`, with no lease, as a
    /// request ([`Sim::send_request`]): a resent signal must land once.
    fn signal(&mut self, run: &RunId, name: &str) -> Result<(), AgentFailure> {
        let act = Act::Signal {
            run: run.clone(),
            name: name.to_string(),
            payload: format!("{name} for {run}").into_bytes(),
        };
        let called = self.request(act, "bank-webhook", "a payment notice")?;
        let outcome = match called {
            Called::Ok(Done::Signalled { seq, taken_by, .. }) => {
                self.report.signals += 1;
                match taken_by {
                    Some(step) => format!("signal {seq} ends the wait at {step}"),
                    None => format!("signal {seq} waits in the inbox"),
                }
            }
            other => said(&other),
        };
        self.note(|| format!("a webhook signals {name} to {run}: {outcome}"));
        Ok(())
    }

    /// The screening service's webhook replies to every request of `run`
    /// it took, with no lease; nothing if it took none.
    fn webhook_replies(&mut self, run: &RunId) -> Result<(), AgentFailure> {
        for (key, receipt) in self.world.webhook_replies(run) {
            if self.dead {
                break;
            }
            self.deliver_reply(&key, receipt)?;
        }
        Ok(())
    }

    /// Delivers one webhook reply: the effect `key` confirmed with
    /// `receipt`. The model decides it too: a reply to a settled effect,
    /// or to a cancelled run's, is refused or answered as the model does.
    fn deliver_reply(&mut self, key: &EffectKey, receipt: Vec<u8>) -> Result<(), AgentFailure> {
        let reply = DeliverReply {
            key: key.clone(),
            outcome: Outcome::Confirmed { receipt },
            sender: "kyc-webhook".into(),
        };
        let cmd = Command::DeliverReply(reply.clone());
        let called = self.call(Some(&cmd), |e| {
            e.deliver_reply(&reply.key, reply.outcome.clone(), &reply.sender)
        })?;
        let outcome = match called {
            Called::Ok(ended) => {
                self.report.replies += 1;
                match ended {
                    Some(step) => format!("recorded, ends the wait at {step}"),
                    None => "recorded".to_string(),
                }
            }
            Called::Refused(e) => format!("refused: {e}"),
            Called::Died => "the process died".to_string(),
        };
        self.note(|| format!("a webhook replies to {key}: {outcome}"));
        Ok(())
    }

    /// The world receives every request due, then its promises are checked.
    fn deliver(&mut self) -> Result<(), AgentFailure> {
        let seen = self.world.deliveries().len();
        self.world.deliver_due(self.clock.now_ms());
        if seen == self.world.deliveries().len() {
            return Ok(());
        }
        if self.history.recording() {
            let lines: Vec<String> = self.world.deliveries()[seen..]
                .iter()
                .map(|d| match (d.applied, d.args_digest) {
                    (Some(seq), _) => format!(
                        "   {} applies {} under token {}: {}",
                        d.tool,
                        d.key,
                        d.token.0,
                        crate::world::receipt_text(&self.world.log()[seq].receipt)
                    ),
                    (None, Some(_)) => format!(
                        "   {} receives {} under token {}, applies nothing",
                        d.tool, d.key, d.token.0
                    ),
                    (None, None) => format!("   {} is asked about {}", d.tool, d.key),
                })
                .collect();
            for line in lines {
                self.note(|| line);
            }
        }
        self.check_world()
    }

    /// The world's own promises, checked as acts land: no step applied
    /// twice, no stale token applied, resends carry their intent's payload.
    fn check_world(&mut self) -> Result<(), AgentFailure> {
        self.report.checked("no side effect fires twice");
        check::effect_applied_at_most_once(self.world.log())
            .map_err(|e| self.fail("no side effect fires twice", e))?;
        self.report.checked("no world mutation under a stale token");
        check::world_refuses_stale_tokens(self.world.deliveries())
            .map_err(|e| self.fail("no world mutation under a stale token", e))?;
        self.report.checked("a resend carries its intent's payload");
        check::resends_carry_the_same_payload(self.world.deliveries())
            .map_err(|e| self.fail("a resend carries its intent's payload", e))
    }

    /// Faults stop: no cuts, plain crashes, every call delivered, paused
    /// workers resume; the workers run until every run is over.
    fn calm_phase(&mut self) -> Result<(), AgentFailure> {
        self.calm = true;
        self.disk.stop_faults();
        self.note(|| "the faults stop".to_string());
        for worker in &mut self.workers {
            worker.paused = false;
        }
        self.redeploy_if_due()?;
        // The requests the process died under reach it now.
        self.resend_unanswered()?;
        self.resume_paused()?;
        // How the calm phase's approver treats the approvals still open:
        // drawn once per seed, so some runs see their approval expire.
        let mut approver = Rng::new(self.schedule.seed).fork("calm approver");
        let lets_expire = approver.below(4) == 0;
        // When an operator reads the live database: its own stream, so the
        // other draws of the seed stay as they were.
        let mut reader = Rng::new(self.schedule.seed).fork("live reader");
        for _ in 0..CALM_ROUNDS_MAX {
            let idle = self.workers.iter().all(|w| w.job.is_none());
            if idle && self.all_runs_over() {
                return Ok(());
            }
            self.answer_open_waits(lets_expire)?;
            self.resume_paused()?;
            if reader.below(8) == 0 {
                self.live_read(false)?;
            }
            self.clock.advance_ms(CALM_TICK_MS);
            let mut acted = false;
            for w in 0..self.workers.len() {
                self.deliver()?;
                acted |= self.advance(w)?;
                if self.dead {
                    return Err(self.fail(
                        "no error without a fault",
                        "the process died after the faults stopped",
                    ));
                }
            }
            // Nothing to do but wait for a deadline (a timer, an approval
            // left to expire): let up to an hour pass, in steps drawn from
            // the seed, so a wake before the deadline would be seen.
            if !acted && idle {
                let jump = 60_000 + approver.below(HOUR_MS - 60_000);
                self.clock.advance_ms(jump);
            }
        }
        let stuck: Vec<String> = self
            .model
            .runs()
            .filter(|r| !r.state.is_terminal())
            .map(|r| format!("{} {}", r.id, r.state))
            .collect();
        Err(self.fail(
            "every run ends once the faults stop",
            format!("after {CALM_ROUNDS_MAX} calm rounds still going: {stuck:?}"),
        ))
    }

    /// A process no crash redeployed in the fault phase is redeployed now
    /// (`migration`): a clean close, every worker restarted idle on the
    /// code of checkpoint schema 2, a reopen held to the model. So every
    /// seed's runs checkpointed under schema 1 and not over are resumed
    /// through the migration.
    fn redeploy_if_due(&mut self) -> Result<(), AgentFailure> {
        if self.schema != super::migration::SCHEMA_1 {
            return Ok(());
        }
        let engine = self.engine.take().expect("a process is up");
        engine
            .close()
            .map_err(|e| self.fail("a clean close succeeds", e.to_string()))?;
        for worker in &mut self.workers {
            worker.restart();
        }
        self.redeploy();
        self.recover()
    }

    /// The calm phase's operator: resumes what is paused (an operator, or
    /// an exhausted budget, which it raises first), so every run can end.
    fn resume_paused(&mut self) -> Result<(), AgentFailure> {
        let paused: Vec<RunId> = self
            .model
            .runs()
            .filter(|r| r.state == RunState::Paused)
            .map(|r| r.id.clone())
            .collect();
        for run in paused {
            self.raise_spent_budget(&run, "the calm phase")?;
            self.operate(&run, OperatorAction::Resume, "the calm phase")?;
        }
        Ok(())
    }

    /// Raises by one search the budget that stops `run`, if it is paused
    /// with the searches of its own budget, or of the nearest ancestor's
    /// it draws on, spent (held or settled).
    fn raise_spent_budget(&mut self, run: &RunId, who: &'static str) -> Result<(), AgentFailure> {
        let paused = self
            .model
            .run(run)
            .is_some_and(|r| r.state == RunState::Paused);
        if !paused {
            return Ok(());
        }
        let mut next = Some(run.clone());
        while let Some(id) = next {
            next = self.model.run(&id).and_then(|r| r.parent);
            let Some(book) = self.model.budget(&id) else {
                continue;
            };
            let used = book.spent.tool_calls + book.reserved.tool_calls;
            let Some(limits) = book
                .limits
                .filter(|l| l.tool_calls.is_some_and(|c| c <= used))
            else {
                continue;
            };
            self.report.budgets_raised += 1;
            let raised = BudgetLimits {
                tool_calls: Some(used + 1),
                ..limits
            };
            return self.set_budget(&id, raised, who);
        }
        Ok(())
    }

    /// The calm phase's approver and webhooks: every open approval is
    /// approved (unless this seed lets them expire), every open wait for
    /// the bank's verification is signalled, every open wait for a
    /// screening's reply gets it.
    fn answer_open_waits(&mut self, lets_expire: bool) -> Result<(), AgentFailure> {
        let open: Vec<(RunId, WaitFor)> = self
            .runs
            .iter()
            .filter_map(|(run, _)| {
                let live = self.model.run(run)?;
                if live.state.is_terminal() {
                    return None;
                }
                let book = self.model.waits(run)?;
                let wait = book.open_wait()?;
                Some((run.clone(), wait.wait_for.clone()))
            })
            .collect();
        for (run, wait_for) in open {
            match wait_for {
                WaitFor::Approval { .. } if !lets_expire => {
                    self.approve(&run, ApproverMove::Approve)?;
                }
                WaitFor::Signal { name } => self.signal(&run, &name)?,
                WaitFor::Reply { key } => {
                    // A worker parks a run for a reply only once the
                    // service took the request.
                    let owed = self.world.webhook_replies(&run);
                    let Some((_, receipt)) = owed.into_iter().find(|(k, _)| *k == key) else {
                        return Err(self.fail(
                            "a run waits only for a reply that is owed",
                            format!(
                                "{run} waits for the reply to {key}, a request no service took"
                            ),
                        ));
                    };
                    self.deliver_reply(&key, receipt)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A clean close and a reopen, then the end-of-run invariants.
    fn finish(mut self) -> Result<(AgentReport, Vec<String>), AgentFailure> {
        self.deliver()?;
        let engine = self.engine.take().expect("a process is up");
        engine
            .close()
            .map_err(|e| self.fail("a clean close succeeds", e.to_string()))?;
        self.recover()?;
        let books = self.whole(&self.model).into_owned();
        let log = self.world.log().to_vec();
        self.report.checked("a wait ends only on its own terms");
        check::waits_keep_their_terms(&books)
            .map_err(|e| self.fail("a wait ends only on its own terms", e))?;
        self.report
            .checked("a parent's step starts one child, and waits for it");
        check::children_are_awaited(&books)
            .map_err(|e| self.fail("a parent's step starts one child, and waits for it", e))?;
        self.check_budgets(&books, None)?;
        self.report.checked("every run ends once the faults stop");
        check::every_run_ends_settled(&books)
            .map_err(|e| self.fail("every run ends once the faults stop", e))?;
        self.report
            .checked("every done effect happened exactly once");
        check::effect_applied_exactly_once(&books, &log)
            .map_err(|e| self.fail("every done effect happened exactly once", e))?;
        self.report
            .checked("a resource is held by one run at a time");
        check::resource_holds_are_fenced(&log)
            .map_err(|e| self.fail("a resource is held by one run at a time", e))?;
        let signs_in: Vec<_> = self
            .runs
            .iter()
            .filter(|(_, w)| matches!(w, Workflow::Shop | Workflow::Refund))
            .map(|(run, _)| (run.clone(), contacted_key(&customer())))
            .collect();
        self.report
            .checked("a registry written by compare-and-set loses no update");
        check::registries_keep_every_run(&books, &signs_in)
            .map_err(|e| self.fail("a registry written by compare-and-set loses no update", e))?;
        self.report
            .checked("a saga undoes what its run did, last first, each once");
        check::sagas_undo_last_first(&books, &log)
            .map_err(|e| self.fail("a saga undoes what its run did, last first, each once", e))?;
        // The engine lists, sweeps and exports what its books hold.
        let held = self.model.clone();
        self.check_listing(&held)?;
        self.check_stuck(&held)?;
        self.check_audit_export(&held)?;
        let engine = self.engine.take().expect("recovered");
        engine
            .close()
            .map_err(|e| self.fail("a clean close succeeds", e.to_string()))?;
        self.tally(&books);
        let history = self.history.lines().to_vec();
        Ok((self.report, history))
    }

    /// The engine's listing of runs by state, read in pages of a few, is
    /// the books' runs in that state, record for record.
    fn check_listing(&mut self, books: &actum::books::MemBooks) -> Result<(), AgentFailure> {
        const PAGE: usize = 3;
        for state in std::iter::once(None).chain(RunState::ALL.map(Some)) {
            let mut listed = Vec::new();
            let mut after: Option<RunId> = None;
            loop {
                let engine = self.engine.as_ref().expect("recovered");
                let page = engine
                    .runs(state, after.as_ref(), PAGE)
                    .map_err(|e| self.fail("reads succeed", e.to_string()))?;
                after = page.last().map(|r| r.id.clone());
                let last = page.len() < PAGE;
                listed.extend(page);
                if last {
                    break;
                }
            }
            let expected: Vec<_> = books
                .runs()
                .filter(|r| state.is_none_or(|s| r.state == s))
                .cloned()
                .collect();
            self.report
                .checked("the runs listed by state are the books'");
            if listed != expected {
                let ids = |runs: &[actum::books::Run]| {
                    runs.iter().map(|r| r.id.to_string()).collect::<Vec<_>>()
                };
                return Err(self.fail(
                    "the runs listed by state are the books'",
                    format!(
                        "{state:?}: the engine lists {:?}, the books hold {:?}",
                        ids(&listed),
                        ids(&expected)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every run's audit export, read back, is its journal in the books:
    /// one JSON line per entry, in order, with its time and words.
    fn check_audit_export(&mut self, books: &actum::books::MemBooks) -> Result<(), AgentFailure> {
        for run in books.runs() {
            let mut out = Vec::new();
            let engine = self.engine.as_ref().expect("recovered");
            engine
                .export_audit(&run.id, &mut out)
                .map_err(|e| self.fail("reads succeed", e.to_string()))?;
            let journal = books.audit(&run.id, 1);
            let exported: Vec<(u64, u64, String)> = String::from_utf8_lossy(&out)
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .map(|v| {
                    let what = v["what"].as_str().unwrap_or_default().to_string();
                    (
                        v["seq"].as_u64().unwrap_or(0),
                        v["at_ms"].as_u64().unwrap_or(0),
                        what,
                    )
                })
                .collect();
            let expected: Vec<(u64, u64, String)> = journal
                .iter()
                .map(|e| (e.seq, e.at_ms, e.what.to_string()))
                .collect();
            self.report.checked("the audit export is the journal");
            if exported != expected {
                return Err(self.fail(
                    "the audit export is the journal",
                    format!(
                        "run {}: the export holds {} lines, the journal {} entries",
                        run.id,
                        exported.len(),
                        expected.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn tally(&mut self, books: &actum::books::MemBooks) {
        use actum::books::RunState;
        let stats = self.world.stats().clone();
        let elapsed_ms = self.clock.now_ms() - super::sim::START_MS;
        let report = &mut self.report;
        // The schedule's runs and the children they started.
        report.runs = books.runs().count() as u64;
        report.completed = books
            .runs()
            .filter(|r| r.state == RunState::Completed)
            .count() as u64;
        report.failed = books.runs().filter(|r| r.state == RunState::Failed).count() as u64;
        report.unknowns = books
            .effects()
            .filter(|e| matches!(e.status, EffectStatus::Unknown { .. }))
            .count() as u64;
        report.compensations = books
            .effects()
            .filter(|e| e.status.is_compensated())
            .count() as u64;
        report.receipts_by_digest = books
            .effects()
            .filter(|e| !e.status.stored_receipts().is_empty())
            .count() as u64;
        report.acks_dropped = stats.acks_dropped;
        report.queries = stats.queries;
        report.applications = stats.applications;
        report.simulated_ms = elapsed_ms;
    }
}

//! [`Shared`]: what the handlers, the undo handlers and the harness share
//! in one run of the runtime family: the world of tools and its fates, the
//! process's disk and clock, the runtime of the current process, and the
//! checks made at the moment the runtime hands a call to a tool.
//!
//! Every act goes through [`Shared::act`]: it checks what the runtime
//! promises at that moment (the run's lease is live under the call's
//! token; a step the books call confirmed is not sent again), then draws
//! the call's fate from the seed: delivered, acknowledgement dropped,
//! request lost, declined, slow; a stall past the lease during which
//! another worker takes a turn; or the process dying just after the
//! request left.
//!
//! **Invariant:** no lock is held while a nested turn runs or while the
//! engine is called, so a turn inside a tool call sees the same world a
//! turn outside it would.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actum::books::{Outcome, RunId, Usage, WorkerId, digest_of};
use actum::runtime::{Call, Driven, Fail, Runtime};
use actum::{Clock, Engine};

use super::clock::TickingClock;
use super::report::RuntimeReport;
use super::versions::Move;
use crate::agents::History;
use crate::disk::SimDisk;
use crate::rng::Rng;
use crate::world::{Ask, CALL_TIMEOUT_MS, Fate, Reply, Tool, World};

/// The tool that runs out of stock: a shop run's shipment may be declined
/// for good until a person restocks it and retries the run.
pub const OUT_OF_STOCK_TOOL: &str = "warehouse.ship";
/// One shipment in this many, in the fault phase, is out of stock.
const OUT_OF_STOCK_IN: u64 = 3;
/// Invariant: the runtime hands an act to its tool only while the run's
/// lease is live under the call's token.
pub const LIVE_LEASE: &str = "an act is sent only under a live lease";
/// Invariant: a step whose act the books call confirmed is answered from
/// the ledger, never sent again.
pub const CONFIRMED_NOT_SENT: &str = "a confirmed step is never sent again";
/// Invariant: a request whose reply the books await (its step waited for
/// the reply) left already: it is never sent again.
pub const AWAITED_NOT_SENT: &str = "a request whose reply is awaited is never sent again";
/// Invariant: a model call journaled at a position is replayed, never
/// asked (and paid) again.
pub const DECISION_ONCE: &str = "a journaled model call is never asked again";
/// Invariant: the runtime errs only when its process died.
pub const ERRS_ONLY_DEAD: &str = "the runtime errs only when its process dies";

/// Per mille of calls that stall past the lease before they are sent.
const STALL_PER_MILLE: u64 = 30;
/// Per mille of acts after which the process dies, the request sent.
const DIE_AFTER_SEND_PER_MILLE: u64 = 25;
/// One asynchronous request in this many is answered by webhook before
/// its caller waits for the reply.
const EARLY_WEBHOOK_IN: u64 = 6;

/// What the harness and the handlers share.
pub struct Shared {
    pub clock: Arc<TickingClock>,
    pub disk: SimDisk,
    pub workers: Vec<WorkerId>,
    /// The lease the runtime's handlers hold, in ms.
    pub lease_ttl_ms: u64,
    runtime: Mutex<Option<Arc<Runtime>>>,
    state: Mutex<State>,
}

/// The mutable part, behind one lock taken briefly.
pub struct State {
    pub world: World,
    pub fates: Rng,
    pub calm: bool,
    /// True while a turn runs inside a tool call (no deeper nesting).
    pub nested: bool,
    pub violation: Option<(&'static str, String)>,
    pub history: History,
    pub report: RuntimeReport,
    /// Runs the runtime answered `Completed` for: they must stay so.
    pub completed: BTreeSet<RunId>,
    /// The operator's choices (`versions.rs`).
    pub operator: Rng,
    /// True once the process serves version 2.
    pub serves_v2: bool,
    /// The handlers running now, innermost last: the run and the agent
    /// versions the handler serves.
    pub serving: Vec<(RunId, Vec<String>)>,
    /// The moves to another version the engine answered done.
    pub moves: Vec<Move>,
    /// Runs the runtime paused because their handler diverged from their
    /// journal.
    pub diverged: BTreeSet<RunId>,
    /// Runs whose shipment the warehouse has stock for again (a person
    /// restocked it before retrying the run, `retries.rs`); until then a
    /// run's shipment may be declined for good, out of stock.
    pub restocked: BTreeSet<RunId>,
    /// The failures a person has looked at to retry: each run at the
    /// version its failure left it.
    pub retries_asked: BTreeSet<(RunId, u64)>,
}

impl Shared {
    /// A world with nothing in it yet, and no process.
    pub fn new(
        clock: Arc<TickingClock>,
        disk: SimDisk,
        workers: Vec<WorkerId>,
        lease_ttl_ms: u64,
        (fates, operator): (Rng, Rng),
        history: History,
    ) -> Shared {
        Shared {
            clock,
            disk,
            workers,
            lease_ttl_ms,
            runtime: Mutex::new(None),
            state: Mutex::new(State {
                world: World::new(),
                fates,
                calm: false,
                nested: false,
                violation: None,
                history,
                report: RuntimeReport::default(),
                completed: BTreeSet::new(),
                operator,
                serves_v2: false,
                serving: Vec::new(),
                moves: Vec::new(),
                diverged: BTreeSet::new(),
                restocked: BTreeSet::new(),
                retries_asked: BTreeSet::new(),
            }),
        }
    }

    /// The mutable part.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The runtime of the live process, if one is up.
    pub fn runtime(&self) -> Option<Arc<Runtime>> {
        self.runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Installs (or, with `None`, tears down) the process's runtime.
    pub fn set_runtime(&self, runtime: Option<Arc<Runtime>>) {
        *self.runtime.lock().unwrap_or_else(PoisonError::into_inner) = runtime;
    }

    /// The live process's engine.
    pub fn engine(&self) -> Option<Arc<Engine>> {
        self.runtime().map(|r| Arc::clone(r.engine()))
    }

    /// True once the power is off: the process is dead, whatever it runs.
    pub fn dead(&self) -> bool {
        self.disk.is_powered_off()
    }

    /// A history line at the current virtual time.
    pub fn note(&self, line: impl FnOnce() -> String) {
        let now = self.clock.peek();
        self.state().history.note(now, line);
    }

    /// Records the first violated invariant; the harness stops at it.
    pub fn violate(&self, invariant: &'static str, detail: String) {
        let mut state = self.state();
        state.history.note(self.clock.peek(), || {
            format!("VIOLATED {invariant}: {detail}")
        });
        state.violation.get_or_insert((invariant, detail));
    }

    /// One turn of worker `w`: claim a run and drive it until it ends,
    /// parks or stops.
    pub fn turn(&self, w: usize) {
        let Some(runtime) = self.runtime() else {
            return;
        };
        let worker = &self.workers[w];
        let result = runtime.work_once(worker);
        drop(runtime);
        match result {
            Ok(None) => {}
            Ok(Some((run, driven))) => {
                self.note(|| format!("{worker} drove {run}: {driven:?}"));
                let mut state = self.state();
                state.report.turns += 1;
                match driven {
                    Driven::Completed => {
                        state.report.completed += 1;
                        state.completed.insert(run);
                    }
                    Driven::LeaseLost => state.report.leases_lost += 1,
                    Driven::Paused(why) => {
                        state.report.paused += 1;
                        if why.contains("diverged from its journal") {
                            state.report.diverged += 1;
                            state.diverged.insert(run);
                        }
                    }
                    Driven::Parked(_) => state.report.parked += 1,
                    _ => {}
                }
            }
            Err(e) if self.dead() => self.note(|| format!("{worker} dies with its process: {e}")),
            Err(e) => self.violate(ERRS_ONLY_DEAD, format!("{worker}'s turn failed: {e}")),
        }
    }

    /// Sends `call` to `tool` as the runtime asks (an act, an undo or a
    /// query) and answers what the caller learns.
    pub fn act(&self, tool: Tool, call: &Call<'_>, ask: Ask) -> Outcome {
        let unknown = |reason: &str| Outcome::Unknown {
            reason: reason.to_string(),
        };
        if self.dead() {
            return unknown("not sent: the process is dead");
        }
        let acting = matches!(ask, Ask::Act { .. });
        if acting && !self.runtime_may_send(call) {
            return unknown("not sent: the harness found the runtime wrong");
        }
        if acting {
            // After the check at the handoff: the operator's engine calls
            // read the clock, which may jump, and the runtime's promise is
            // about the moment it hands the call over.
            self.maybe_move_mid_call(call.key.run());
        }
        if self.dead() {
            return unknown("not sent: the process died reading its books");
        }
        // The call's fate, drawn before anything else moves.
        let (stall, fate, dies, tool, early) = {
            let mut state = self.state();
            let calm = state.calm;
            let nested = state.nested;
            // Out of stock: the warehouse declines a shipment for good
            // until a person restocks it for the run (`retries.rs`).
            let stocked = state.restocked.contains(call.key.run());
            let fates = &mut state.fates;
            let stall = !calm && !nested && fates.below(1000) < STALL_PER_MILLE;
            let business_decline = acting && tool.declines_for_good && fates.below(4) == 0;
            let out_of_stock = acting
                && !calm
                && !stocked
                && tool.name == OUT_OF_STOCK_TOOL
                && fates.below(OUT_OF_STOCK_IN) == 0;
            let tool = Tool {
                declines_for_good: tool.declines_for_good || out_of_stock,
                ..tool
            };
            let fate = if business_decline || out_of_stock {
                Fate::Declined
            } else if calm {
                Fate::Delivered
            } else {
                // A tool that ignores tokens is slow more often, and its
                // slow requests may arrive long after the caller gave up;
                // the bank's recalls queue behind its batch runs, so most
                // of its undo requests are slow.
                let undo = acting && call.key.kind() == actum::books::EffectKind::Undo;
                let slow_to = match (tool.ignores_tokens, undo) {
                    (true, true) => 70,
                    (true, false) => 40,
                    (false, _) => 16,
                };
                match fates.below(100) {
                    0..6 => Fate::AckDropped,
                    6..10 => Fate::RequestLost,
                    // A slow recall waits for the bank's next batch: it
                    // lands late in its lifetime, long after its caller
                    // gave up.
                    roll if roll < slow_to && undo && tool.ignores_tokens => Fate::Slow {
                        delay_ms: u32::try_from(
                            tool.request_lifetime_ms * 3 / 4
                                + fates.below(tool.request_lifetime_ms / 4 + 1),
                        )
                        .expect("a lifetime fits u32"),
                    },
                    roll if roll < slow_to => Fate::Slow {
                        delay_ms: u32::try_from(fates.below(tool.request_lifetime_ms + 1))
                            .expect("a lifetime fits u32"),
                    },
                    roll if roll < slow_to + 6 && acting => Fate::Declined,
                    _ => Fate::Delivered,
                }
            };
            let dies = !calm && acting && fates.below(1000) < DIE_AFTER_SEND_PER_MILLE;
            let early = acting && tool.replies_by_webhook && fates.below(EARLY_WEBHOOK_IN) == 0;
            (stall, fate, dies, tool, early)
        };
        if stall {
            self.stall(call);
            if self.dead() {
                return unknown("not sent: the process died while the call stalled");
            }
        }
        let now = self.clock.peek();
        if acting && tool.ignores_tokens && now > call.deadline_ms {
            // The client of a tool that cannot fence checks the deadline
            // itself, right before it sends: a stalled request past it
            // would land after a successor took over.
            self.note(|| format!("{} act {} not sent: past its deadline", tool.name, call.key));
            return unknown("not sent: past the act's deadline");
        }
        let id = {
            let mut state = self.state();
            state.report.calls += 1;
            state
                .world
                .send(tool, (call.key, call.token), ask, now, fate)
        };
        let what = if acting { "act" } else { "query" };
        self.note(|| {
            format!(
                "{} {what} {} under token {}: {}",
                tool.name,
                call.key,
                call.token.0,
                fate.name()
            )
        });
        if dies {
            self.note(|| "the process dies with the request sent".to_string());
            self.state().report.died_after_send += 1;
            self.disk.set_crash_after_ops(0);
            return unknown("the process died");
        }
        if let Fate::Slow { delay_ms } = fate {
            let delay_ms = u64::from(delay_ms);
            if delay_ms > CALL_TIMEOUT_MS {
                // The caller gives up before the request arrives; it
                // still will, and take effect (a tool that ignores tokens
                // refuses no late request).
                self.clock.advance_ms(CALL_TIMEOUT_MS);
                let mut state = self.state();
                state.report.late += 1;
                state.world.deliver_due(self.clock.peek());
                return unknown("no reply before the timeout; the request is still on its way");
            }
            self.clock.advance_ms(delay_ms);
        }
        let mut state = self.state();
        state.world.deliver_due(self.clock.peek());
        let reply = state.world.take_reply(id);
        drop(state);
        if early {
            // The service's webhook beats the caller's wait for it.
            self.webhook(call.key.run(), false);
        }
        match reply {
            Some(Reply::Fenced) => unknown("the service saw a newer token"),
            Some(reply) => reply.outcome(),
            None => {
                // The caller waits out its timeout: by then the request
                // has arrived or never will.
                self.clock.advance_ms(CALL_TIMEOUT_MS);
                self.state().world.deliver_due(self.clock.peek());
                unknown("no reply before the timeout")
            }
        }
    }

    /// The runtime's promises at the moment it hands over an act: the
    /// lease is live under the call's token and the step is not confirmed.
    /// False (with the violation recorded) if one is broken.
    fn runtime_may_send(&self, call: &Call<'_>) -> bool {
        let Some(engine) = self.engine() else {
            return true;
        };
        let now = self.clock.peek();
        let key = call.key.clone();
        let read = engine.read(|books| {
            Ok((
                books.run(key.run()),
                books.effect(&key),
                books.waits(key.run()),
            ))
        });
        let Ok((run, entry, waits)) = read else {
            return true; // the process died reading: nothing is sent
        };
        let lease = run.and_then(|r| r.lease);
        let live = lease
            .as_ref()
            .is_some_and(|l| l.token == call.token && now < l.expires_ms);
        if !live {
            let held = lease.map_or("no lease".to_string(), |l| {
                format!("token {} until {} ms", l.token.0, l.expires_ms)
            });
            self.violate(
                LIVE_LEASE,
                format!(
                    "{} was handed to its tool at {now} ms under token {} (deadline {} ms) while \
                     the books hold {held}",
                    call.key, call.token.0, call.deadline_ms
                ),
            );
            return false;
        }
        if let Some(served) = self.serving(key.run())
            && !self.check_version(key.run(), call.token, &served, "acts")
        {
            return false;
        }
        let awaited = waits
            .iter()
            .flat_map(|b| &b.waits)
            .find(|w| matches!(&w.wait_for, actum::books::WaitFor::Reply { key: k } if *k == key));
        if let Some(wait) = awaited {
            self.violate(
                AWAITED_NOT_SENT,
                format!(
                    "{} was handed to its tool again, its reply awaited since {} ms (wait {})",
                    call.key,
                    wait.opened_ms,
                    wait.status.name()
                ),
            );
            return false;
        }
        if let Some(entry) = entry
            && entry.status.is_confirmed()
        {
            self.violate(
                CONFIRMED_NOT_SENT,
                format!(
                    "{} was handed to its tool again, confirmed in the books",
                    call.key
                ),
            );
            return false;
        }
        true
    }

    /// The asynchronous service's webhook for `run`: the verdict of each
    /// request it applied whose reply the books do not hold yet, delivered
    /// with `deliver_reply`; `again`: every verdict delivered twice, held
    /// or not, as a webhook that retries.
    pub fn webhook(&self, run: &RunId, again: bool) {
        let Some(engine) = self.engine() else {
            return;
        };
        let owed = self.state().world.webhook_replies(run);
        for (key, receipt) in owed {
            for _ in 0..if again { 2 } else { 1 } {
                if self.dead() {
                    return;
                }
                let read = engine.read(|books| {
                    let open = books.effect(&key).is_some_and(|e| e.status.is_open());
                    let waiting = books.waits(run).is_some_and(|b| {
                        b.open_wait().is_some_and(|w| {
                            w.wait_for == actum::books::WaitFor::Reply { key: key.clone() }
                        })
                    });
                    Ok((open, waiting))
                });
                let Ok((open, waiting)) = read else {
                    return;
                };
                if !open && !again {
                    continue;
                }
                let verdict = Outcome::Confirmed {
                    receipt: receipt.clone(),
                };
                let delivered = engine.deliver_reply(&key, verdict, "kyc-webhook");
                self.note(|| format!("the webhook delivers {key}: {delivered:?}"));
                if delivered.is_ok() {
                    let mut state = self.state();
                    state.report.webhooks += 1;
                    if !open {
                        state.report.webhooks_repeated += 1;
                    } else if !waiting {
                        state.report.replies_early += 1;
                    }
                }
            }
        }
    }

    /// The caller stalls past its lease before its request leaves (a
    /// pause, a swap storm): meanwhile another worker takes a turn.
    fn stall(&self, call: &Call<'_>) {
        let (pause, w) = {
            let mut state = self.state();
            state.report.stalls += 1;
            state.nested = true;
            let pause = self.lease_ttl_ms + state.fates.below(self.lease_ttl_ms);
            let w = state.fates.below(self.workers.len() as u64) as usize;
            (pause, w)
        };
        self.note(|| format!("the caller of {} stalls {pause} ms", call.key));
        self.clock.advance_ms(pause);
        self.turn(w);
        self.state().nested = false;
    }

    /// The model answers `prompt` for `run` at `position`: a paid call.
    pub fn model(
        &self,
        run: &RunId,
        position: u64,
        prompt: &[u8],
    ) -> Result<(Vec<u8>, Usage), Fail> {
        if self.dead() {
            return Err(Fail::failed("the process died before the model was asked"));
        }
        if let Some(engine) = self.engine()
            && let Ok(Some(record)) = engine.read(|books| Ok(books.decision_at(run, position)))
        {
            self.violate(
                DECISION_ONCE,
                format!(
                    "the model was asked again for decision {position} of {run}, journaled at {} ms",
                    record.recorded_ms
                ),
            );
        }
        let now = self.clock.now_ms();
        let mut state = self.state();
        state.report.model_calls += 1;
        Ok(state
            .world
            .model()
            .call(run, position, digest_of(prompt), now))
    }
}

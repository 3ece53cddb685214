//! [`WorkflowEnv`]: what a user's workflow gets each time the harness runs
//! it: the engine, the run and the lease it holds, and the simulated tools,
//! whose calls the harness may answer with a lost ack, a lost request or a
//! decline, and during which it may cut the power or let the lease expire.
//!
//! **Invariant:** every fault is drawn from the seed's stream in call order,
//! so the same seed and the same workflow give the same run.

use std::sync::Arc;

use actum::books::{Guard, Outcome, RunId, digest_of};
use actum::engine::{EffectCtx, StepPlan, StepRequest, StepResult};
use actum::{Clock, Engine};

use crate::clock::SimClock;
use crate::disk::SimDisk;
use crate::rng::Rng;
use crate::world::{Ask, CALL_TIMEOUT_MS, Fate, Tool, World};

/// How often each fault strikes a tool call while faults are on, in ppm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallFaults {
    pub(crate) ack_dropped_ppm: u32,
    pub(crate) request_lost_ppm: u32,
    pub(crate) declined_ppm: u32,
    /// The power is cut right after the act (before its outcome is kept).
    pub(crate) crash_after_act_ppm: u32,
    /// The call outlives the lease: the clock jumps past it.
    pub(crate) lease_expires_ppm: u32,
}

/// The world as one run of the user's workflow sees it.
pub struct WorkflowEnv<'h> {
    pub(crate) engine: Arc<Engine>,
    pub(crate) run: RunId,
    pub(crate) guard: Guard,
    pub(crate) lease_ttl_ms: u64,
    pub(crate) world: &'h mut World,
    pub(crate) clock: &'h SimClock,
    pub(crate) disk: &'h SimDisk,
    pub(crate) rng: &'h mut Rng,
    pub(crate) faults: Option<CallFaults>,
    pub(crate) calls: &'h mut u64,
}

impl WorkflowEnv<'_> {
    /// The engine (a handle: keep it for the whole run of the workflow).
    pub fn engine(&self) -> Arc<Engine> {
        Arc::clone(&self.engine)
    }

    /// The run the workflow works on.
    pub fn run(&self) -> &RunId {
        &self.run
    }

    /// The lease it holds: present it on every engine call.
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// Virtual time, in ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The whole step ceremony for `request` against the simulated `tool`:
    /// `Engine::begin_step`, then the act (or, for an ambiguous intent on a
    /// queryable tool, the query), then `finish_step` (or `resolve_step`).
    pub fn step(&mut self, request: &StepRequest<'_>, tool: Tool) -> actum::Result<StepResult> {
        assert_eq!(
            request.tool.name, tool.name,
            "the request names the tool it calls"
        );
        let engine = Arc::clone(&self.engine);
        match engine.begin_step(request)? {
            StepPlan::Act(ctx) => {
                let outcome = self.act(tool, &ctx, request.args);
                engine.finish_step(request.guard, &ctx, outcome)
            }
            StepPlan::Query(ctx) => {
                let found = self.query(tool, &ctx);
                engine.resolve_step(request.guard, &ctx, found)
            }
            StepPlan::Done(result) => Ok(result),
        }
    }

    /// Calls `tool` to act under `ctx` (from inside `Engine::step`) with
    /// `args`; returns what the caller sees: the receipt, a decline, or
    /// `Unknown` when the reply never came.
    pub fn act(&mut self, tool: Tool, ctx: &EffectCtx, args: &[u8]) -> Outcome {
        let ask = Ask::Act {
            args_digest: digest_of(args),
        };
        self.call(tool, ctx, ask)
    }

    /// Asks the queryable `tool` whether `ctx.key` was acted on (from the
    /// query closure of `Engine::step_queryable`).
    pub fn query(&mut self, tool: Tool, ctx: &EffectCtx) -> Outcome {
        self.call(tool, ctx, Ask::Query)
    }

    fn call(&mut self, tool: Tool, ctx: &EffectCtx, ask: Ask) -> Outcome {
        *self.calls += 1;
        let is_act = matches!(ask, Ask::Act { .. });
        let (fate, crash, expire) = self.draw();
        let now_ms = self.clock.now_ms();
        let id = self
            .world
            .send(tool, (&ctx.key, ctx.token), ask, now_ms, fate);
        self.world.deliver_due(now_ms);
        if expire {
            // The call outlives the lease.
            self.clock.advance_ms(self.lease_ttl_ms + 1);
        }
        if crash && is_act {
            // The act happened; the process dies before it can say so.
            self.disk.set_crash_after_ops(0);
        }
        match self.world.take_reply(id) {
            Some(reply) => reply.outcome(),
            None => {
                // The caller waits out its timeout.
                self.clock.advance_ms(CALL_TIMEOUT_MS);
                Outcome::Unknown {
                    reason: "no reply before the timeout".into(),
                }
            }
        }
    }

    /// The fate of the next call: always the same number of draws.
    fn draw(&mut self) -> (Fate, bool, bool) {
        let rolls = [
            self.rng.below(1_000_000) as u32,
            self.rng.below(1_000_000) as u32,
            self.rng.below(1_000_000) as u32,
        ];
        let Some(f) = self.faults else {
            return (Fate::Delivered, false, false);
        };
        let fate = if rolls[0] < f.ack_dropped_ppm {
            Fate::AckDropped
        } else if rolls[0] < f.ack_dropped_ppm + f.request_lost_ppm {
            Fate::RequestLost
        } else if rolls[0] < f.ack_dropped_ppm + f.request_lost_ppm + f.declined_ppm {
            Fate::Declined
        } else {
            Fate::Delivered
        };
        (
            fate,
            rolls[1] < f.crash_after_act_ppm,
            rolls[2] < f.lease_expires_ppm,
        )
    }
}

//! Helpers for the books' unit tests: a `MemBooks` with a clock reading,
//! driven through decide then apply exactly as the engine will, and short
//! constructors for commands.
//!
//! Invariant: `Books::run` applies the ops of a decision only if decide
//! accepted it, so a refused command can never change the books.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly on an unexpected None or Err"
)]

pub(crate) use super::BooksRead;
use super::MemBooks;
use super::Part;
use super::RunState;
use super::Usage;
use super::apply;
use super::digest_of;
use super::{
    AcquireLease, BeginCompensation, BeginEffect, ClaimNext, CreateRun, FinishEffect, Reconcile,
    RecordDecision, ReleaseLease, RenewLease, SaveCheckpoint, Transition,
};
use super::{Answer, Decided, decide};
pub(crate) use super::{Command, Guard};
use super::{EffectKey, RunId, StepId, WorkerId};
use super::{Outcome, ToolClass};
use crate::error::Result;

/// The ttl of the lease `books_with_leased_run` takes.
pub(crate) const LEASE_MS: u64 = 10_000;

#[derive(Debug)]
pub(crate) struct Books {
    pub mem: MemBooks,
    pub now_ms: u64,
}

impl Default for Books {
    fn default() -> Self {
        Books {
            mem: MemBooks::new(),
            now_ms: 1_000,
        }
    }
}

impl Books {
    /// Decides `cmd` and, if accepted, applies its ops.
    pub fn run(&mut self, cmd: Command) -> Result<Decided> {
        let decided = decide(&self.mem, &cmd, self.now_ms)?;
        for op in &decided.ops {
            apply(&mut self.mem, op).expect("decide's ops apply to the books it read");
        }
        Ok(decided)
    }

    /// Like `run`, for commands the test expects to be accepted.
    pub fn ok(&mut self, cmd: Command) -> Decided {
        match self.run(cmd.clone()) {
            Ok(d) => d,
            Err(e) => panic!("{cmd:?} refused: {e}"),
        }
    }
}

pub(crate) fn rid(s: &str) -> RunId {
    RunId::new(s).unwrap()
}
pub(crate) fn sid(s: &str) -> StepId {
    StepId::new(s).unwrap()
}
pub(crate) fn wid(s: &str) -> WorkerId {
    WorkerId::new(s).unwrap()
}

/// Books holding run `name`, pending, leased by worker `w1` for `LEASE_MS`.
pub(crate) fn books_with_leased_run(name: &str) -> (Books, Guard) {
    let mut b = Books::default();
    b.ok(create(name, b"input"));
    let d = b.ok(acquire(name, "w1", LEASE_MS));
    let Answer::Leased {
        run: leased, token, ..
    } = d.answer
    else {
        panic!("{:?}", d.answer)
    };
    (
        b,
        Guard {
            run: leased,
            worker: wid("w1"),
            token,
        },
    )
}

/// Books holding run `name`, leased by `w1` and moved to running: effects
/// begin only on a running run.
pub(crate) fn books_with_running_run(name: &str) -> (Books, Guard) {
    let (mut b, g) = books_with_leased_run(name);
    b.ok(transition(name, &g, RunState::Running));
    (b, g)
}

pub(crate) fn create(run: &str, input: &[u8]) -> Command {
    Command::CreateRun(CreateRun {
        run: rid(run),
        input_digest: digest_of(input),
        agent_version: "agent/v1".into(),
        trace_id: "trace-1".into(),
        parent: None,
        input: None,
    })
}
pub(crate) fn transition(run: &str, g: &Guard, to: RunState) -> Command {
    Command::Transition(Transition {
        run: rid(run),
        guard: g.clone(),
        to,
        expected_version: None,
        reason: format!("to {to}"),
    })
}
pub(crate) fn acquire(run: &str, worker: &str, ttl_ms: u64) -> Command {
    Command::AcquireLease(AcquireLease {
        run: rid(run),
        worker: wid(worker),
        ttl_ms,
    })
}
pub(crate) fn claim(worker: &str, ttl_ms: u64) -> Command {
    Command::ClaimNext(ClaimNext {
        worker: wid(worker),
        ttl_ms,
        agents: None,
    })
}
pub(crate) fn renew(run: &str, g: &Guard, ttl_ms: u64) -> Command {
    Command::RenewLease(RenewLease {
        run: rid(run),
        guard: g.clone(),
        ttl_ms,
    })
}
pub(crate) fn release(run: &str, g: &Guard) -> Command {
    Command::ReleaseLease(ReleaseLease {
        run: rid(run),
        guard: g.clone(),
    })
}
pub(crate) fn begin(
    run: &str,
    step: &str,
    g: &Guard,
    tool_class: ToolClass,
    args: &[u8],
) -> Command {
    Command::BeginEffect(BeginEffect {
        run: rid(run),
        step: sid(step),
        guard: g.clone(),
        tool: "bank.wire".into(),
        tool_class,
        args_digest: digest_of(args),
        args: None,
        rationale: "policy says so".into(),
        compensation: None,
    })
}
pub(crate) fn confirmed(receipt: &[u8]) -> Outcome {
    Outcome::Confirmed {
        receipt: receipt.to_vec(),
    }
}
pub(crate) fn finish(key: &EffectKey, g: &Guard, outcome: Outcome) -> Command {
    Command::FinishEffect(FinishEffect {
        key: key.clone(),
        guard: g.clone(),
        outcome,
    })
}
pub(crate) fn reconcile(key: &EffectKey, g: &Guard, outcome: Outcome) -> Command {
    Command::Reconcile(Reconcile {
        key: key.clone(),
        guard: g.clone(),
        outcome,
        note: "asked the bank".into(),
    })
}
pub(crate) fn compensate(run: &str, step: &str, g: &Guard) -> Command {
    Command::BeginCompensation(BeginCompensation {
        run: rid(run),
        step: sid(step),
        guard: g.clone(),
        rationale: "the next step failed".into(),
    })
}
pub(crate) fn save(run: &str, g: &Guard, schema_version: u32, parts: Vec<Part>) -> Command {
    Command::SaveCheckpoint(SaveCheckpoint {
        run: rid(run),
        guard: g.clone(),
        schema_version,
        parts,
    })
}
pub(crate) fn decision(
    run: &str,
    g: &Guard,
    position: u64,
    input: &[u8],
    output: &[u8],
) -> Command {
    Command::RecordDecision(RecordDecision {
        run: rid(run),
        guard: g.clone(),
        position,
        input_digest: digest_of(input),
        output: output.to_vec(),
        rationale: "model chose".into(),
        usage: Usage {
            tokens_in: 10,
            tokens_out: 5,
            cost_micros: 30,
        },
    })
}

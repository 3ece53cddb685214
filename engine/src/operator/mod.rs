//! An operator's requests, carried out exactly once: pause, resume,
//! cancel or abandon a run, settle an effect from what the operator found
//! out, answer an approval, signal a run, set its budget.
//!
//! A [`Request`] names itself with an id its sender picks. The engine
//! carries it out as one atomic batch: the operator's command, and a mark
//! in the shared key `operator-request:<id>` holding the request's digest.
//! A request sent again under the same id (its answer was lost, the
//! sender retried) finds the mark and answers [`Done::Repeated`], changing
//! nothing; the same id with another request is refused. So a retried
//! request lands once, however often it is sent, and the mark is in the
//! books with who sent it and why.
//!
//! [`Engine::carry_out`] is the one way in: the `actum` command calls it on
//! a database it opened, and the operator channel ([`channel`], a Unix
//! socket a live engine serves when asked to) calls it for a command sent
//! from another process. [`plan`] is its pure half, over any books, so the
//! agent simulator holds the engine to its reference model.
//!
//! **Invariant:** for every request id, the books hold at most one
//! carried-out request, and its mark commits with it or not at all.

#[cfg(unix)]
pub mod channel;

use serde::{Deserialize, Serialize};

use crate::books::{
    Answer, BooksRead, BudgetLimits, Command, DecideApproval, DeliverReply, Digest, EffectKey,
    NAME_LEN_BYTES_MAX, Operate, OperatorAction, Outcome, RunId, RunState, SendSignal, SetBudget,
    SetShared, SharedKeyId, SharedSetter, StepId, WaitFor, digest_of,
};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::planted::PlantedBug;

/// The prefix of the shared key that marks a carried-out request.
pub const REQUEST_KEY_PREFIX: &str = "operator-request:";

/// The fewest hex digits of an approval's arguments digest an operator
/// must give (what `actum show` prints).
pub const DIGEST_PREFIX_MIN: usize = 8;

/// One operator's request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Picked by the sender, the same for every retry of one request: a
    /// name (`A-Z a-z 0-9 . _ - :`) of at most
    /// `NAME_LEN_BYTES_MAX - REQUEST_KEY_PREFIX.len()` bytes.
    pub id: String,
    /// Who asks (journaled).
    pub operator: String,
    /// Why (journaled).
    pub reason: String,
    /// What.
    pub act: Act,
}

/// What an operator asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Act {
    /// Pause, resume, cancel or abandon a run (`Engine::operate`).
    Operate {
        /// The run.
        run: RunId,
        /// The action.
        action: OperatorAction,
    },
    /// Settle an effect whose outcome is pending or unknown from what the
    /// operator found out (`Engine::deliver_reply`, journaled as a reply
    /// from `operator NAME: REASON`).
    Reconcile {
        /// The effect.
        key: EffectKey,
        /// What the operator found.
        outcome: Outcome,
    },
    /// Approve or reject the run's open approval, bound to the arguments'
    /// digest the operator saw: at least [`DIGEST_PREFIX_MIN`] hex digits
    /// of it.
    Approval {
        /// The run.
        run: RunId,
        /// A prefix of the arguments' digest, lowercase hex.
        digest_prefix: String,
        /// Approve (true) or reject.
        approve: bool,
    },
    /// Send the run a signal, from the operator.
    Signal {
        /// The run.
        run: RunId,
        /// The signal's name.
        name: String,
        /// Its payload.
        payload: Vec<u8>,
    },
    /// Set the run's budget limits.
    Budget {
        /// The run.
        run: RunId,
        /// The new limits.
        limits: BudgetLimits,
    },
    /// Remove the runs over for at least `older_than_ms` whose dedup
    /// windows have passed (`Engine::prune_all`, after a checkpoint). Many
    /// commits, not one: the mark commits after the last, so a request cut
    /// off before it prunes again when sent again, which removes nothing a
    /// first whole run would not have.
    Prune {
        /// How long a run must have been over.
        older_than_ms: u64,
    },
}

/// What a request did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Done {
    /// The run's state before and after (`changed` is `before != after`).
    Operated {
        /// The run.
        run: RunId,
        /// Its state before.
        before: RunState,
        /// Its state after.
        after: RunState,
        /// Its version after.
        version: u64,
    },
    /// The effect's status before and after, and the step whose wait for
    /// it ended.
    Reconciled {
        /// The effect.
        key: EffectKey,
        /// `EffectStatus::name` before.
        before: String,
        /// `EffectStatus::name` after.
        after: String,
        /// The step whose wait ended, if one did.
        wait_ended: Option<StepId>,
    },
    /// The approval was answered.
    Approval {
        /// The run.
        run: RunId,
        /// The step that waited.
        step: StepId,
        /// The role the approval asked for.
        role: String,
        /// Approved (true) or rejected.
        approve: bool,
        /// The run can go on (its wait ended).
        woke: bool,
    },
    /// The signal arrived.
    Signalled {
        /// The run.
        run: RunId,
        /// Its sequence number in the run's inbox.
        seq: u64,
        /// The step whose wait it ended, if it ended one.
        taken_by: Option<StepId>,
    },
    /// The budget limits were set.
    Budgeted {
        /// The run.
        run: RunId,
        /// The limits now.
        limits: BudgetLimits,
    },
    /// The runs over for long enough left the books.
    Pruned {
        /// How many left.
        pruned: u64,
        /// How many were kept, by reason (the run's name in a reason
        /// written `RUN`), in reason order.
        kept: Vec<(String, u64)>,
    },
    /// The request was carried out before, under this id: nothing changed.
    Repeated {
        /// The request id.
        id: String,
        /// When it was carried out, ms since the epoch.
        at_ms: u64,
        /// Who sent it.
        by: String,
    },
}

/// What carrying a request out takes, decided over the books as they
/// stand ([`plan`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Carried out before: answer this, commit nothing.
    Repeated(Done),
    /// Commit `command` (a batch: the mark, then the operator's command).
    Commit {
        /// The batch.
        command: Box<Command>,
        /// What the answer needs from before the commit.
        before: Before,
    },
}

/// What [`Plan::Commit`] remembers from before the commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Before {
    /// The run's state.
    Run(RunState),
    /// The effect's status name.
    Effect(&'static str),
    /// The approval's step and role.
    Approval(StepId, String),
    /// Nothing.
    Nothing,
}

/// The shared key marking request `id`.
pub fn request_key(id: &str) -> Result<SharedKeyId> {
    SharedKeyId::new(format!("{REQUEST_KEY_PREFIX}{id}")).map_err(|e| match e {
        Error::InvalidName { reason, .. } => Error::InvalidName {
            what: "operator request id",
            name: id.chars().take(NAME_LEN_BYTES_MAX).collect(),
            reason: format!("{reason} (with the prefix {REQUEST_KEY_PREFIX:?})"),
        },
        other => other,
    })
}

/// The digest a request's mark holds: of its whole content, so the same
/// id with another request is told apart.
pub fn request_digest(request: &Request) -> Result<Digest> {
    let bytes = postcard::to_allocvec(request).map_err(|e| Error::InvalidCommand {
        reason: format!("operator request {}: cannot encode it: {e}", request.id),
    })?;
    Ok(digest_of(&bytes))
}

/// Decides what carrying `request` out takes over `books`: its answer if
/// it was carried out before, the batch to commit otherwise. Refuses what
/// no commit could make valid (a bad id, a reused id, a digest prefix too
/// short or of another approval, a missing run or effect).
pub fn plan(request: &Request, books: &dyn BooksRead) -> Result<Plan> {
    let key = request_key(&request.id)?;
    let digest = request_digest(request)?;
    if let Some(done) = repeated(request, books, &key, &digest)? {
        return Ok(Plan::Repeated(done));
    }
    let (command, before) = command_for(request, books)?;
    let mark = mark(request, key, digest);
    Ok(Plan::Commit {
        command: Box::new(Command::Batch(vec![mark, command])),
        before,
    })
}

/// `Done::Repeated` if `request`'s mark is in `books`; refused if the mark
/// is another request's.
fn repeated(
    request: &Request,
    books: &dyn BooksRead,
    key: &SharedKeyId,
    digest: &Digest,
) -> Result<Option<Done>> {
    let Some(mark) = books.shared(key) else {
        return Ok(None);
    };
    let first = mark.changes.first();
    if mark.value.as_deref() != Some(digest.0.as_slice()) {
        return Err(Error::InvalidCommand {
            reason: format!(
                "operator request id {:?} was used before for another request (by {}): give \
                 each request its own id",
                request.id,
                first.map_or("?", |c| c.by.as_str())
            ),
        });
    }
    Ok(Some(Done::Repeated {
        id: request.id.clone(),
        at_ms: first.map_or(0, |c| c.at_ms),
        by: first.map_or_else(String::new, |c| c.by.clone()),
    }))
}

/// The command that marks `request` carried out.
fn mark(request: &Request, key: SharedKeyId, digest: Digest) -> Command {
    Command::SetShared(SetShared {
        key,
        expected_version: 0,
        value: Some(digest.0.to_vec()),
        by: SharedSetter::Operator {
            name: request.operator.clone(),
        },
        reason: request.reason.clone(),
    })
}

/// The operator's command for `request`, and what its answer needs from
/// before.
fn command_for(request: &Request, books: &dyn BooksRead) -> Result<(Command, Before)> {
    let run_state = |run: &RunId| {
        books
            .run(run)
            .map(|r| r.state)
            .ok_or_else(|| Error::NotFound {
                what: format!("run {run}"),
            })
    };
    Ok(match &request.act {
        Act::Operate { run, action } => (
            Command::Operate(Operate {
                run: run.clone(),
                action: *action,
                operator: request.operator.clone(),
                reason: request.reason.clone(),
            }),
            Before::Run(run_state(run)?),
        ),
        Act::Reconcile { key, outcome } => {
            let sender = format!("operator {}: {}", request.operator, request.reason);
            if sender.len() > NAME_LEN_BYTES_MAX {
                return Err(Error::InvalidCommand {
                    reason: format!(
                        "the operator and reason are journaled together as {sender:?}, {} \
                         bytes; they must fit {NAME_LEN_BYTES_MAX}: shorten the reason",
                        sender.len()
                    ),
                });
            }
            let entry = books.effect(key).ok_or_else(|| Error::NotFound {
                what: format!("effect {key}"),
            })?;
            (
                Command::DeliverReply(DeliverReply {
                    key: key.clone(),
                    outcome: outcome.clone(),
                    sender,
                }),
                Before::Effect(entry.status.name()),
            )
        }
        Act::Approval {
            run,
            digest_prefix,
            approve,
        } => {
            let (step, digest, role) = the_approval(books, run, digest_prefix)?;
            (
                Command::DecideApproval(DecideApproval {
                    run: run.clone(),
                    step: step.clone(),
                    args_digest: digest,
                    approver: request.operator.clone(),
                    role: role.clone(),
                    approve: *approve,
                    note: request.reason.clone(),
                }),
                Before::Approval(step, role),
            )
        }
        Act::Signal { run, name, payload } => (
            Command::SendSignal(SendSignal {
                run: run.clone(),
                name: name.clone(),
                payload: payload.clone(),
                sender: request.operator.clone(),
            }),
            Before::Nothing,
        ),
        Act::Prune { .. } => {
            return Err(Error::InvalidCommand {
                reason: format!(
                    "operator request {}: a prune is carried out in batches by \
                     Engine::carry_out, not planned as one command",
                    request.id
                ),
            });
        }
        Act::Budget { run, limits } => (
            Command::SetBudget(SetBudget {
                run: run.clone(),
                limits: *limits,
                by: request.operator.clone(),
                reason: request.reason.clone(),
            }),
            Before::Nothing,
        ),
    })
}

/// The approval `run` waits for, if it waits for one: its step, the
/// arguments' digest it is bound to, and the role it asks of.
pub fn open_approval(books: &dyn BooksRead, run: &RunId) -> Option<(StepId, Digest, String)> {
    books.waits(run).and_then(|book| {
        book.waits
            .into_iter()
            .filter(|w| w.is_open())
            .find_map(|w| match w.wait_for {
                WaitFor::Approval { args_digest, role } => Some((w.step, args_digest, role)),
                _ => None,
            })
    })
}

/// The open approval of `run` whose arguments' digest starts with
/// `prefix`: its step, digest and role; or why there is none.
pub fn the_approval(
    books: &dyn BooksRead,
    run: &RunId,
    prefix: &str,
) -> Result<(StepId, Digest, String)> {
    let given = prefix.to_ascii_lowercase();
    if given.len() < DIGEST_PREFIX_MIN || !given.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::InvalidCommand {
            reason: format!(
                "digest {prefix:?}: give at least {DIGEST_PREFIX_MIN} hex digits of the \
                 arguments' digest (`actum show DIR {run}` prints them under waits)"
            ),
        });
    }
    if books.run(run).is_none() {
        return Err(Error::NotFound {
            what: format!("run {run}"),
        });
    }
    let Some((step, digest, role)) = open_approval(books, run) else {
        return Err(Error::InvalidCommand {
            reason: format!("run {run} waits for no approval"),
        });
    };
    if !digest.to_string().starts_with(&given) {
        return Err(Error::InvalidCommand {
            reason: format!(
                "the approval run {run} waits for (step {step}) is for arguments {}, not \
                 {prefix}: read them again with `actum show`",
                digest.short()
            ),
        });
    }
    Ok((step, digest, role))
}

/// What `Engine::prune_all` did, as a request's answer: the runs kept
/// counted by reason, each reason with the run's name written `RUN`.
pub fn pruned(done: &crate::engine::Pruned) -> Done {
    let mut kept: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for (run, why) in &done.kept {
        *kept.entry(why.replace(run.as_str(), "RUN")).or_default() += 1;
    }
    Done::Pruned {
        pruned: done.pruned.len() as u64,
        kept: kept.into_iter().collect(),
    }
}

/// The answer of a committed plan, from the operator's command's answer.
pub fn done(request: &Request, before: &Before, answer: &Answer) -> Result<Done> {
    let shape = || Error::Inconsistent {
        what: format!(
            "operator request {} answered {answer:?} after {before:?}",
            request.id
        ),
    };
    Ok(match (&request.act, before, answer) {
        (
            Act::Operate { .. },
            Before::Run(before),
            Answer::Operated {
                run,
                state,
                version,
                ..
            },
        ) => Done::Operated {
            run: run.clone(),
            before: *before,
            after: *state,
            version: *version,
        },
        (
            Act::Reconcile { key, .. },
            Before::Effect(before),
            Answer::Replied {
                status, wait_ended, ..
            },
        ) => Done::Reconciled {
            key: key.clone(),
            before: (*before).to_string(),
            after: (*status).to_string(),
            wait_ended: wait_ended.clone(),
        },
        (
            Act::Approval { run, approve, .. },
            Before::Approval(step, role),
            Answer::WaitEnded { woke, .. },
        ) => Done::Approval {
            run: run.clone(),
            step: step.clone(),
            role: role.clone(),
            approve: *approve,
            woke: *woke,
        },
        (Act::Signal { run, .. }, _, Answer::Signalled { seq, taken_by, .. }) => Done::Signalled {
            run: run.clone(),
            seq: *seq,
            taken_by: taken_by.clone(),
        },
        (Act::Budget { run, limits }, _, Answer::BudgetSet { .. }) => Done::Budgeted {
            run: run.clone(),
            limits: *limits,
        },
        _ => return Err(shape()),
    })
}

impl Engine {
    /// Carries `request` out exactly once: the operator's command and the
    /// request's mark commit together; a request sent again under the
    /// same id answers [`Done::Repeated`] and changes nothing (module
    /// docs). Answered once durable.
    ///
    /// ```
    /// use actum::books::{CreateRun, OperatorAction, RunId, RunState, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::operator::{Act, Done, Request};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("invoice-9")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"9"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let pause = Request { id: "req-1".into(), operator: "ops-anna".into(),
    ///     reason: "vendor on hold".into(),
    ///     act: Act::Operate { run: run.clone(), action: OperatorAction::Pause } };
    /// let done = engine.carry_out(&pause)?;
    /// assert!(matches!(done, Done::Operated { after: RunState::Paused, .. }));
    /// // Its answer was lost and it is sent again: carried out once.
    /// assert!(matches!(engine.carry_out(&pause)?, Done::Repeated { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn carry_out(&self, request: &Request) -> Result<Done> {
        if let Act::Prune { older_than_ms } = request.act {
            return self.carry_out_prune(request, older_than_ms);
        }
        // Two senders of one id race at most once: the loser's mark is
        // refused for its version, and it reads the winner's.
        for _ in 0..2 {
            let planned = self.read(|books| plan(request, books))?;
            let (command, before) = match planned {
                Plan::Repeated(done) => {
                    if !self.planted(PlantedBug::RepeatOperatorRequest) {
                        return Ok(done);
                    }
                    // Planted: the mark is read, but not taken for "done".
                    let (command, before) = self.read(|books| command_for(request, books))?;
                    (Command::Batch(vec![command]), before)
                }
                Plan::Commit { command, before } => (*command, before),
            };
            let last = match &command {
                Command::Batch(commands) => commands.len() - 1,
                _ => 0,
            };
            match self.answer(command) {
                Ok(Answer::Batch(answers)) => {
                    let answer = answers.get(last).ok_or_else(|| Error::Inconsistent {
                        what: format!("operator request {} answered no command", request.id),
                    })?;
                    return done(request, &before, answer);
                }
                Ok(other) => {
                    return Err(Error::Inconsistent {
                        what: format!("operator request {} answered {other:?}", request.id),
                    });
                }
                Err(Error::BatchRefused { index, cause }) => {
                    if index == last || !matches!(*cause, Error::SharedVersionConflict { .. }) {
                        return Err(*cause);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::Inconsistent {
            what: format!(
                "operator request {}: its mark changed twice under it",
                request.id
            ),
        })
    }

    /// A prune request: the checkpoint and `prune_all`'s batches, then its
    /// mark alone ([`Act::Prune`]).
    fn carry_out_prune(&self, request: &Request, older_than_ms: u64) -> Result<Done> {
        let key = request_key(&request.id)?;
        let digest = request_digest(request)?;
        if let Some(done) = self.read(|books| repeated(request, books, &key, &digest))? {
            return Ok(done);
        }
        self.checkpoint()?;
        let done = self.prune_all(older_than_ms, &mut |_| {})?;
        match self.answer(mark(request, key, digest)) {
            // Sent twice at once: the other send marked it.
            Ok(_) | Err(Error::SharedVersionConflict { .. }) => {}
            Err(e) => return Err(e),
        }
        Ok(pruned(&done))
    }
}

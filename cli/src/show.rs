//! `actum show DIR RUN`: one run's story for a person: its states over
//! time, each step with its key, tool, attempts, outcome and receipt size,
//! its model calls with their usage, its waits and who ended them, its
//! budget spent and held, its saga, and its journal; times in the machine's
//! time zone, spans as durations; `--json` for programs.
//!
//! **Invariant:** reads only, through the engine's public reads, and every
//! line it prints comes from the books (nothing inferred): the journal is
//! the run's audit entries in order, the steps its ledger entries in the
//! order their intents were written.

use std::io::Write;
use std::process::ExitCode;

use actum::books::{
    AuditWhat, BudgetBook, DecisionRecord, EffectEntry, EffectStatus, Receipt, Run, RunId,
    SagaBook, WaitRecord, WaitStatus,
};
use actum::engine::Engine;
use serde::Serialize;

use crate::args::ShowArgs;
use crate::failure::CliError;
use crate::live::open_to_read;
use crate::text::{Table, fmt_bytes, fmt_duration, fmt_local};

/// The run's record.
#[derive(Debug, Serialize)]
pub(crate) struct Head {
    pub run: String,
    pub state: &'static str,
    pub agent: String,
    pub trace_id: String,
    pub parent: Option<String>,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Changes made to the record so far.
    pub record_version: u64,
    /// The lease as the record holds it (live or expired), if any.
    pub lease: Option<LeaseNow>,
}

#[derive(Debug, Serialize)]
pub(crate) struct LeaseNow {
    pub worker: String,
    pub token: u64,
    pub expires_ms: u64,
    pub live: bool,
}

/// One change of state.
#[derive(Debug, Serialize)]
pub(crate) struct StateChange {
    pub at_ms: u64,
    pub from: Option<String>,
    pub to: String,
    pub why: String,
}

/// One ledger entry: an act or a compensation, one attempt.
#[derive(Debug, Serialize)]
pub(crate) struct Step {
    pub key: String,
    pub step: String,
    pub tool: String,
    pub class: &'static str,
    pub attempt: u32,
    pub resends: u32,
    pub outcome: &'static str,
    /// Why it failed or is unknown, when it did or is.
    pub detail: Option<String>,
    pub receipt_bytes: Option<u64>,
    pub intended_ms: u64,
    pub settled_ms: Option<u64>,
    pub rationale: String,
    /// The tool that undoes it, if it registered one.
    pub undo: Option<String>,
}

/// One journaled model call.
#[derive(Debug, Serialize)]
pub(crate) struct ModelCall {
    pub position: u64,
    pub input_digest: String,
    pub output_bytes: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_micros: u64,
    pub recorded_ms: u64,
    pub rationale: String,
}

/// One wait.
#[derive(Debug, Serialize)]
pub(crate) struct Wait {
    pub step: String,
    pub waits_for: String,
    pub opened_ms: u64,
    pub deadline_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    pub how: &'static str,
    /// Who ended it and what they said, or what ended it.
    pub by: Option<String>,
}

/// One journal line.
#[derive(Debug, Serialize)]
pub(crate) struct Line {
    pub seq: u64,
    pub at_ms: u64,
    pub token: Option<u64>,
    /// The engine's words for it (instants in ms since the epoch).
    pub what: String,
    /// The same for a person: instants as local times.
    #[serde(skip)]
    pub said: String,
    pub why: String,
}

/// Everything `show` reports.
#[derive(Debug, Serialize)]
pub(crate) struct Story {
    pub now_ms: u64,
    /// The LSN the books were read at.
    pub durable_lsn: u64,
    /// True if another process had the database open (a snapshot).
    pub live: bool,
    /// The PostgreSQL server the books were read from (its URL without the
    /// password), if they are there (then `durable_lsn` is 0).
    pub postgres: Option<String>,
    pub head: Head,
    pub states: Vec<StateChange>,
    pub steps: Vec<Step>,
    pub model_calls: Vec<ModelCall>,
    pub waits: Vec<Wait>,
    pub budget: Option<BudgetNow>,
    pub saga: Option<SagaNow>,
    pub journal: Vec<Line>,
}

#[derive(Debug, Serialize)]
pub(crate) struct BudgetNow {
    pub limits: Option<String>,
    pub spent: String,
    pub held: String,
    pub open_reservations: usize,
    pub ran_ms: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct SagaNow {
    /// The steps with a compensation, in the order their acts began.
    pub steps: Vec<String>,
    /// How the run ends once compensated (`failed` or `cancelled`), once
    /// it compensates.
    pub ends: Option<&'static str>,
}

/// Runs `show`.
pub fn run(args: &ShowArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let fail = |e| CliError::engine(dir, e);
    let id = RunId::new(args.run.as_str())
        .map_err(|e| CliError::unusable(format!("{}: {e}", args.run)))?;
    let reading = open_to_read(dir).map_err(fail)?;
    let engine = &reading.engine;
    let story = gather(engine, &id).map_err(fail)?;
    let postgres = reading.postgres.clone();
    drop(reading);
    let Some(mut story) = story else {
        let shown = crate::place::shown(dir);
        return Err(CliError::unusable(format!(
            "{shown}: no run {id} (`actum runs {shown}` lists them)"
        )));
    };
    story.postgres = postgres;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &story).map_err(|e| CliError::output(e.into()))?;
        writeln!(out).map_err(CliError::output)?;
    } else {
        write_story(&story, &mut out).map_err(CliError::output)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads the run's books; `None` if there is no such run.
pub(crate) fn gather(engine: &Engine, id: &RunId) -> actum::Result<Option<Story>> {
    let Some(run) = engine.run(id)? else {
        return Ok(None);
    };
    let now_ms = engine.clock().now_ms();
    let audit = engine.audit(id)?;
    let effects = engine.effects(id)?;
    let waits = engine.waits(id)?;
    let budget = engine.budget(id)?;
    let (decisions, saga) = engine.read(|books| {
        let count = books.decision_count(id);
        let decisions: Vec<DecisionRecord> = (0..count)
            .filter_map(|p| books.decision_at(id, p))
            .collect();
        Ok((decisions, books.saga(id)))
    })?;
    let states = audit
        .iter()
        .filter_map(|e| match &e.what {
            AuditWhat::Created { .. } => Some(StateChange {
                at_ms: e.at_ms,
                from: None,
                to: "pending".into(),
                why: e.why.clone(),
            }),
            AuditWhat::Transitioned { from, to } => Some(StateChange {
                at_ms: e.at_ms,
                from: Some(from.to_string()),
                to: to.to_string(),
                why: e.why.clone(),
            }),
            _ => None,
        })
        .collect();
    let journal = audit
        .into_iter()
        .map(|e| Line {
            seq: e.seq,
            at_ms: e.at_ms,
            token: e.token.map(|t| t.0),
            said: what_for_people(&e.what),
            what: e.what.to_string(),
            why: e.why,
        })
        .collect();
    Ok(Some(Story {
        now_ms,
        durable_lsn: engine.durable_lsn().0,
        live: engine.snapshot_lsn().is_some(),
        postgres: None,
        head: head(&run, now_ms),
        states,
        steps: effects.into_iter().map(step).collect(),
        model_calls: decisions.into_iter().map(model_call).collect(),
        waits: waits.waits.into_iter().map(wait).collect(),
        budget: budget_now(&budget),
        saga: saga.map(saga_now),
        journal,
    }))
}

fn head(run: &Run, now_ms: u64) -> Head {
    Head {
        run: run.id.as_str().to_string(),
        state: run.state.name(),
        agent: run.agent_version.clone(),
        trace_id: run.trace_id.clone(),
        parent: run.parent.as_ref().map(|p| p.as_str().to_string()),
        created_ms: run.created_ms,
        updated_ms: run.updated_ms,
        record_version: run.version,
        lease: run.lease.as_ref().map(|l| LeaseNow {
            worker: l.worker.as_str().to_string(),
            token: l.token.0,
            expires_ms: l.expires_ms,
            live: l.expires_ms > now_ms,
        }),
    }
}

fn receipt_len(receipt: &Receipt) -> u64 {
    match receipt {
        Receipt::Inline(bytes) => bytes.len() as u64,
        Receipt::Stored(stored) => stored.len_bytes,
    }
}

/// The size of the act's receipt, when the act happened; and why it failed
/// or is unknown, when it did or is.
fn receipt_and_detail(status: &EffectStatus) -> (Option<u64>, Option<String>) {
    match status {
        EffectStatus::Intended => (None, None),
        EffectStatus::Confirmed { receipt } | EffectStatus::Compensated { receipt, .. } => {
            (Some(receipt.len() as u64), None)
        }
        EffectStatus::ConfirmedStored { receipt } => (Some(receipt.len_bytes), None),
        EffectStatus::CompensatedStored { receipt, .. } => (Some(receipt_len(receipt)), None),
        EffectStatus::Failed { reason, .. } | EffectStatus::Unknown { reason } => {
            (None, Some(reason.clone()))
        }
    }
}

fn step(entry: EffectEntry) -> Step {
    let (receipt_bytes, detail) = receipt_and_detail(&entry.status);
    Step {
        key: entry.key.encode(),
        step: entry.key.step().as_str().to_string(),
        class: entry.tool_class.name(),
        attempt: entry.key.attempt(),
        resends: entry.resends,
        outcome: entry.status.name(),
        detail,
        receipt_bytes,
        intended_ms: entry.intended_ms,
        settled_ms: entry.settled_ms,
        rationale: entry.rationale,
        undo: entry.compensation.map(|c| c.tool),
        tool: entry.tool,
    }
}

fn model_call(d: DecisionRecord) -> ModelCall {
    ModelCall {
        position: d.position,
        input_digest: d.input_digest.short(),
        output_bytes: d.output.len() as u64,
        tokens_in: d.usage.tokens_in,
        tokens_out: d.usage.tokens_out,
        cost_micros: d.usage.cost_micros,
        recorded_ms: d.recorded_ms,
        rationale: d.rationale,
    }
}

fn wait(w: WaitRecord) -> Wait {
    let by = match &w.status {
        WaitStatus::Approved { approver, note } | WaitStatus::Rejected { approver, note } => {
            Some(if note.is_empty() {
                approver.clone()
            } else {
                format!("{approver}: {note}")
            })
        }
        WaitStatus::Signalled { signal } => Some(format!(
            "signal {} ({}) from {}",
            signal.seq, signal.name, signal.sender
        )),
        WaitStatus::ChildEnded { state, .. } => Some(format!("the child ended {state}")),
        WaitStatus::Replied { status } => Some(format!("the reply: {}", status.name())),
        WaitStatus::ChildrenEnded { ended } => Some(format!("{} children ended", ended.len())),
        WaitStatus::Open | WaitStatus::Elapsed => None,
    };
    Wait {
        step: w.step.as_str().to_string(),
        waits_for: w.wait_for.to_string(),
        opened_ms: w.opened_ms,
        deadline_ms: w.deadline_ms,
        ended_ms: w.ended_ms,
        how: w.status.name(),
        by,
    }
}

fn budget_now(book: &BudgetBook) -> Option<BudgetNow> {
    let untouched = book.limits.is_none()
        && book.spent == Default::default()
        && book.reserved == Default::default()
        && book.open.is_empty();
    (!untouched).then(|| BudgetNow {
        limits: book.limits.as_ref().map(ToString::to_string),
        spent: book.spent.to_string(),
        held: book.reserved.to_string(),
        open_reservations: book.open.len(),
        ran_ms: book.ran_ms,
    })
}

fn saga_now(saga: SagaBook) -> SagaNow {
    SagaNow {
        steps: saga.steps.iter().map(|s| s.as_str().to_string()).collect(),
        ends: saga.end.map(|s| s.name()),
    }
}

/// A journal line's words for a person: the engine's, with the instants
/// they name (a lease's or a resource's expiry, a wait's deadline) in the
/// machine's time zone instead of milliseconds since the epoch.
pub fn what_for_people(what: &AuditWhat) -> String {
    match what {
        AuditWhat::LeaseAcquired { worker, expires_ms } => {
            format!(
                "lease acquired by {worker} until {}",
                fmt_local(*expires_ms)
            )
        }
        AuditWhat::LeaseRenewed { expires_ms } => {
            format!("lease renewed until {}", fmt_local(*expires_ms))
        }
        AuditWhat::WaitOpened {
            step,
            wait_for,
            deadline_ms: Some(at),
        } => format!("step {step} waits for {wait_for} until {}", fmt_local(*at)),
        AuditWhat::ResourceAcquired {
            resource,
            expires_ms,
        } => format!(
            "resource {resource} acquired until {}",
            fmt_local(*expires_ms)
        ),
        AuditWhat::ResourceRenewed {
            resource,
            expires_ms,
        } => format!(
            "resource {resource} renewed until {}",
            fmt_local(*expires_ms)
        ),
        other => other.to_string(),
    }
}

/// A span from `from_ms` to `to_ms`, or what it has lasted until `now_ms`.
pub(crate) fn span(from_ms: u64, to_ms: Option<u64>, now_ms: u64) -> String {
    match to_ms {
        Some(to) => fmt_duration(to.saturating_sub(from_ms)),
        None => format!("{} so far", fmt_duration(now_ms.saturating_sub(from_ms))),
    }
}

fn write_story(s: &Story, out: &mut dyn Write) -> std::io::Result<()> {
    let h = &s.head;
    writeln!(out, "run {}: {} (agent {})", h.run, h.state, h.agent)?;
    writeln!(
        out,
        "created {}, last changed {} later; trace {}; parent {}",
        fmt_local(h.created_ms),
        fmt_duration(h.updated_ms.saturating_sub(h.created_ms)),
        h.trace_id,
        h.parent.as_deref().unwrap_or("none")
    )?;
    match &h.lease {
        Some(l) if l.live => writeln!(
            out,
            "held by {} (token {}) until {}",
            l.worker,
            l.token,
            fmt_local(l.expires_ms)
        )?,
        Some(l) => writeln!(
            out,
            "no live lease (the last, token {} of {}, ran out {} ago)",
            l.token,
            l.worker,
            fmt_duration(s.now_ms.saturating_sub(l.expires_ms))
        )?,
        None => writeln!(out, "no lease held")?,
    }
    match &s.postgres {
        Some(server) => writeln!(out, "from PostgreSQL {server}")?,
        None => writeln!(
            out,
            "as of LSN {}{}",
            s.durable_lsn,
            if s.live {
                " (live database: another process has it open; this is a consistent snapshot)"
            } else {
                ""
            }
        )?,
    }

    writeln!(out, "\nstates")?;
    let mut table = Table::new(&["WHEN", "FROM", "TO", "WHY"]);
    for c in &s.states {
        table.row(vec![
            fmt_local(c.at_ms),
            c.from.clone().unwrap_or_else(|| "-".into()),
            c.to.clone(),
            c.why.clone(),
        ]);
    }
    table.write(out)?;

    if !s.steps.is_empty() {
        writeln!(out, "\nsteps")?;
        let mut table = Table::new(&[
            "KEY", "TOOL", "CLASS", "ATTEMPT", "OUTCOME", "RECEIPT", "BEGAN", "TOOK", "WHY",
        ]);
        for st in &s.steps {
            let outcome = match &st.detail {
                Some(d) => format!("{}: {d}", st.outcome),
                None => st.outcome.to_string(),
            };
            let attempt = if st.resends > 0 {
                format!("{} (resent {})", st.attempt, st.resends)
            } else {
                st.attempt.to_string()
            };
            table.row(vec![
                st.key.clone(),
                st.tool.clone(),
                st.class.to_string(),
                attempt,
                outcome,
                st.receipt_bytes.map_or_else(|| "-".into(), fmt_bytes),
                fmt_local(st.intended_ms),
                span(st.intended_ms, st.settled_ms, s.now_ms),
                st.rationale.clone(),
            ]);
        }
        table.write(out)?;
    }

    if !s.model_calls.is_empty() {
        writeln!(out, "\nmodel calls")?;
        let mut table = Table::new(&[
            "#",
            "INPUT",
            "OUTPUT",
            "TOKENS IN",
            "TOKENS OUT",
            "COST",
            "WHEN",
            "WHY",
        ]);
        for m in &s.model_calls {
            table.row(vec![
                m.position.to_string(),
                m.input_digest.clone(),
                fmt_bytes(m.output_bytes),
                m.tokens_in.to_string(),
                m.tokens_out.to_string(),
                m.cost_micros.to_string(),
                fmt_local(m.recorded_ms),
                m.rationale.clone(),
            ]);
        }
        table.write(out)?;
    }

    if !s.waits.is_empty() {
        writeln!(out, "\nwaits")?;
        let mut table = Table::new(&["STEP", "FOR", "OPENED", "LASTED", "HOW", "BY"]);
        for w in &s.waits {
            table.row(vec![
                w.step.clone(),
                w.waits_for.clone(),
                fmt_local(w.opened_ms),
                span(w.opened_ms, w.ended_ms, s.now_ms),
                w.how.to_string(),
                w.by.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        table.write(out)?;
    }

    if let Some(b) = &s.budget {
        writeln!(out, "\nbudget")?;
        writeln!(
            out,
            "limits {}; spent {}; held {} ({} open reservations); ran {}",
            b.limits.as_deref().unwrap_or("none"),
            b.spent,
            b.held,
            b.open_reservations,
            fmt_duration(b.ran_ms)
        )?;
    }

    if let Some(saga) = &s.saga {
        writeln!(out, "\nsaga")?;
        writeln!(
            out,
            "compensable steps, in order: {}; {}",
            if saga.steps.is_empty() {
                "none".to_string()
            } else {
                saga.steps.join(", ")
            },
            match saga.ends {
                Some(end) => format!("compensating, then the run ends {end}"),
                None => "not compensating".to_string(),
            }
        )?;
    }

    writeln!(out, "\njournal ({} lines)", s.journal.len())?;
    let mut table = Table::new(&["#", "WHEN", "TOKEN", "WHAT", "WHY"]);
    for l in &s.journal {
        table.row(vec![
            l.seq.to_string(),
            fmt_local(l.at_ms),
            l.token.map_or_else(|| "-".into(), |t| t.to_string()),
            l.said.clone(),
            l.why.clone(),
        ]);
    }
    table.write(out)
}

//! The campaign's workflows as runtime handlers: each agent is one
//! function over a [`RunCtx`], as a user would write it; the runtime does
//! the claiming, leases, replay, waits and sagas. The tools are the
//! world's ([`Shared::act`]), the model is the world's ([`Shared::model`]).
//!
//! - `shop`: charge the card (deduplicated), ship (queryable); a
//!   checkpoint before each.
//! - `refund`: the model decides, refund (queryable), mail (applies every
//!   request: an ambiguous one goes to a person), book the courier to
//!   pick up the return (queryable, but it ignores fencing tokens and its
//!   requests may arrive ten minutes late: the runtime waits that out
//!   before it asks).
//! - `treasury`: sweep and fund (by a queryable wire), each with an undo; hedge (the desk may
//!   refuse for good, failing the run: the saga recalls the funding, then
//!   the sweep); post. The bank's recall is queryable but ignores
//!   fencing tokens and its requests may arrive ten minutes late, so the
//!   saga asks about one only once it can no longer land.
//! - `research`: four rounds of a model call and a search, a checkpoint
//!   after each; then one to three `summary` children (a model call and a
//!   search each), all awaited or the first taken.
//! - `vendor`: the vendor screened by an asynchronous service (the request
//!   sent, the run parked until the service's webhook delivers the
//!   verdict, which may come twice, late, or before the run parks), a 48 h
//!   approval of the exact payment, the bank's signal, a week's
//!   cooling-off timer, then the payment.
//!
//! **Invariant:** every handler is deterministic in its run and input:
//! what it calls, in what order and with what arguments, depends on
//! nothing else, so a resumed handler replays its journal.

use std::sync::Arc;

use actum::books::{Compensation, Cost, RunId, digest_of};
use actum::runtime::{Approval, Deadline, Fail, Join, RunCtx, Runtime, Tool as RtTool, UndoCall};

use super::versions::Deploy;
use super::world::Shared;
use crate::agents::worker::SEARCH_HOLD_MICROS;
use crate::agents::workflow::{APPROVAL_WINDOW_MS, COOL_OFF_MS, FINANCE, VERIFIED, vendor_payment};
use crate::world::{Ask, Tool, catalogue, tool};

/// The version every handler is registered at.
pub const VERSION: &str = "1";
/// Attempts a step gets when its tool answers a retryable failure.
const ATTEMPTS: u32 = 3;
/// Rounds of a research run.
const ROUNDS: u64 = 4;
/// The asynchronous screening tool a vendor run waits on.
pub const SCREENING_TOOL: &str = "kyc.screen";
/// How long a vendor run waits for the screening's webhook before its
/// outcome is unknown and the run is paused for a person.
pub const SCREENING_WINDOW_MS: u64 = 3_600_000;

/// A kind of run the campaign starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Shop,
    Refund,
    Treasury,
    Research,
    Vendor,
}

impl Kind {
    /// Every kind a schedule starts runs of.
    pub const ALL: [Kind; 5] = [
        Kind::Shop,
        Kind::Refund,
        Kind::Treasury,
        Kind::Research,
        Kind::Vendor,
    ];

    /// The kind's name, as registered.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Shop => "shop",
            Kind::Refund => "refund",
            Kind::Treasury => "treasury",
            Kind::Research => "research",
            Kind::Vendor => "vendor",
        }
    }
}

/// The version a redeployed process registers, compatible with
/// [`VERSION`] or beside it: the same handlers, so they replay its
/// journals.
pub const REDEPLOYED: &str = "2";

/// Registers every handler and undo handler with `runtime`: at
/// [`VERSION`]; or, redeployed, at [`REDEPLOYED`], compatible with it or
/// beside it (runs keep the version they started with until an operator
/// moves them; new runs and children start at 2). Each handler runs
/// through [`Shared::serve`], which checks the run's version.
pub fn register(runtime: &Runtime, shared: &Arc<Shared>, deploy: Deploy) -> actum::Result<()> {
    type Agent = fn(&mut RunCtx<'_>, &Arc<Shared>) -> Result<Vec<u8>, Fail>;
    let agents: [(&str, Agent); 6] = [
        ("shop", shop),
        ("refund", refund),
        ("treasury", treasury),
        ("research", research),
        ("summary", summary),
        ("vendor", vendor),
    ];
    for (kind, agent) in agents {
        let handler = |version: &str| {
            let s = Arc::clone(shared);
            let served = deploy.served(kind, version);
            // Version 2's research renamed its searches: only the broken
            // deploy and its fix run that code.
            let renamed = version == REDEPLOYED
                && kind == "research"
                && matches!(deploy, Deploy::Broken | Deploy::RolledBack);
            let agent: Agent = if renamed { research_renamed } else { agent };
            move |ctx: &mut RunCtx<'_>| s.serve(ctx, &served, |ctx| agent(ctx, &s))
        };
        match deploy {
            Deploy::First => runtime.register(kind, VERSION, handler(VERSION))?,
            Deploy::Compatible | Deploy::Broken => {
                runtime.register_compatible(kind, REDEPLOYED, &[VERSION], handler(REDEPLOYED))?;
            }
            Deploy::SideBySide | Deploy::RolledBack => {
                runtime.register(kind, VERSION, handler(VERSION))?;
                runtime.register(kind, REDEPLOYED, handler(REDEPLOYED))?;
            }
        }
    }
    let s = Arc::clone(shared);
    runtime.register_undo("bank.recall", move |undo| {
        if undo.query {
            s.state().report.saga_asks += 1;
        }
        undo_call(&s, tool("bank.recall"), undo)
    });
    // What the saga asks about an act a compensating run left open, and
    // the fencing of the undo tools (the recall ignores tokens).
    for world_tool in catalogue() {
        let mut saga_tool = rt_tool(shared, world_tool.name);
        if world_tool.class == actum::books::ToolClass::Queryable {
            let s = Arc::clone(shared);
            saga_tool = saga_tool.with_query(move |call| {
                s.state().report.saga_asks += 1;
                s.act(world_tool, call, Ask::Query)
            });
        }
        runtime.register_tool(saga_tool);
    }
    Ok(())
}

/// The runtime's tool for the world's `name`: its class, its attempts, and
/// for a queryable one the query.
fn rt_tool(shared: &Arc<Shared>, name: &str) -> RtTool {
    let world_tool = tool(name);
    let mut rt = RtTool::new(name, world_tool.class).attempts(ATTEMPTS);
    if name == "search.query" {
        // What a research run's budget holds for a search.
        rt = rt.hold(Cost::tool_call(SEARCH_HOLD_MICROS));
    }
    if world_tool.ignores_tokens {
        rt = rt.ignores_tokens(Some(world_tool.request_lifetime_ms));
    }
    if world_tool.class == actum::books::ToolClass::Queryable {
        let s = Arc::clone(shared);
        rt = rt.with_query(move |call| s.act(world_tool, call, Ask::Query));
    }
    rt
}

/// A step of `run` calling the world's tool `name` with `args`.
fn step(
    ctx: &mut RunCtx<'_>,
    shared: &Arc<Shared>,
    name: &str,
    tool_name: &str,
    args: &[u8],
) -> Result<Vec<u8>, Fail> {
    let world_tool = tool(tool_name);
    let args_digest = digest_of(args);
    ctx.step(name, &rt_tool(shared, tool_name), args, |call| {
        shared.act(world_tool, call, Ask::Act { args_digest })
    })
}

/// A step that the world's `undo` tool compensates.
fn step_with_undo(
    ctx: &mut RunCtx<'_>,
    shared: &Arc<Shared>,
    (name, tool_name, args): (&str, &str, &[u8]),
    (undo, undo_args): (&str, Vec<u8>),
) -> Result<Vec<u8>, Fail> {
    let world_tool = tool(tool_name);
    let args_digest = digest_of(args);
    let compensation = Compensation {
        tool: undo.to_string(),
        args: undo_args,
        class: tool(undo).class,
    };
    ctx.step_with_undo(
        name,
        &rt_tool(shared, tool_name),
        args,
        compensation,
        |call| shared.act(world_tool, call, Ask::Act { args_digest }),
    )
}

/// An undo the runtime's saga asks for: sent (or asked about) like an act.
fn undo_call(shared: &Shared, undo: Tool, call: &UndoCall<'_>) -> actum::books::Outcome {
    let rt_call = actum::runtime::Call {
        key: &call.ctx.key,
        idempotency_key: call.ctx.key.tool_key(),
        token: call.ctx.token,
        resend: call.ctx.resend,
        deadline_ms: call.deadline_ms,
    };
    let ask = if call.query {
        Ask::Query
    } else {
        Ask::Act {
            args_digest: digest_of(call.args),
        }
    };
    shared.act(undo, &rt_call, ask)
}

fn run_of(ctx: &RunCtx<'_>) -> RunId {
    ctx.run_id().clone()
}

fn shop(ctx: &mut RunCtx<'_>, s: &Arc<Shared>) -> Result<Vec<u8>, Fail> {
    let run = run_of(ctx);
    // Two checkpoints, so a person can retry a shipment that failed from
    // the latest or the one before it (`retries.rs`).
    ctx.checkpoint(b"order taken")?;
    let charged = step(
        ctx,
        s,
        "charge",
        "stripe.charge",
        format!("charge {run}").as_bytes(),
    )?;
    ctx.checkpoint(&charged)?;
    let shipped = step(
        ctx,
        s,
        "ship",
        "warehouse.ship",
        format!("ship {run}").as_bytes(),
    )?;
    Ok([charged, shipped].join(&b' '))
}

fn refund(ctx: &mut RunCtx<'_>, s: &Arc<Shared>) -> Result<Vec<u8>, Fail> {
    let run = run_of(ctx);
    let prompt = format!("should {run} be refunded?").into_bytes();
    let decided = ctx.decide_with_usage("decide", &prompt, || s.model(&run, 0, &prompt))?;
    let refunded = step(ctx, s, "refund", "bank.refund", &decided)?;
    let mailed = step(
        ctx,
        s,
        "email",
        "mail.send",
        format!("mail {run}").as_bytes(),
    )?;
    let pickup = step(
        ctx,
        s,
        "pickup",
        "courier.book",
        format!("pick up the return of {run}").as_bytes(),
    )?;
    Ok([decided, refunded, mailed, pickup].join(&b' '))
}

fn treasury(ctx: &mut RunCtx<'_>, s: &Arc<Shared>) -> Result<Vec<u8>, Fail> {
    let run = run_of(ctx);
    let swept = step_with_undo(
        ctx,
        s,
        ("sweep", "bank.sweep", format!("sweep {run}").as_bytes()),
        (
            "bank.recall",
            format!("recall the sweep of {run}").into_bytes(),
        ),
    )?;
    let funded = step_with_undo(
        ctx,
        s,
        ("fund", "bank.wire", format!("fund {run}").as_bytes()),
        (
            "bank.recall",
            format!("recall the funding of {run}").into_bytes(),
        ),
    )?;
    let hedged = step(
        ctx,
        s,
        "hedge",
        "fx.hedge",
        format!("hedge {run}").as_bytes(),
    )?;
    let posted = step(
        ctx,
        s,
        "post",
        "ledger.post",
        format!("post {run}").as_bytes(),
    )?;
    Ok([swept, funded, hedged, posted].join(&b' '))
}

fn research(ctx: &mut RunCtx<'_>, s: &Arc<Shared>) -> Result<Vec<u8>, Fail> {
    research_naming(ctx, s, |round| format!("search-{round}"))
}

/// Version 2's research, as the broken deploy ships it: from round 2 on
/// its searches are named `lookup-<round>`, a change a run of version 1
/// that reached round 2 cannot replay.
fn research_renamed(ctx: &mut RunCtx<'_>, s: &Arc<Shared>) -> Result<Vec<u8>, Fail> {
    research_naming(ctx, s, |round| {
        if round >= 2 {
            format!("lookup-{round}")
        } else {
            format!("search-{round}")
        }
    })
}

fn research_naming(
    ctx: &mut RunCtx<'_>,
    s: &Arc<Shared>,
    search: impl Fn(u64) -> String,
) -> Result<Vec<u8>, Fail> {
    let run = run_of(ctx);
    let mut notes = ctx.input().to_vec();
    for round in 0..ROUNDS {
        let prompt = format!("what should {run} search in round {round}?").into_bytes();
        let name = format!("round-{round}");
        let query = ctx.decide_with_usage(&name, &prompt, || s.model(&run, round, &prompt))?;
        let found = step(ctx, s, &search(round), "search.query", &query)?;
        notes.extend_from_slice(&found);
        ctx.checkpoint(&notes)?;
    }
    let (count, join) = fan_out(ctx.input());
    if count == 1 {
        let summary = ctx.child("summarize", "summary", &notes)?;
        notes.extend_from_slice(&summary);
        return Ok(notes);
    }
    let inputs: Vec<Vec<u8>> = (0..count)
        .map(|i| [notes.as_slice(), format!(" angle {i}").as_bytes()].concat())
        .collect();
    let calls: Vec<(&str, &[u8])> = inputs.iter().map(|i| ("summary", i.as_slice())).collect();
    for end in ctx.children("summarize", &calls, join)? {
        match end.output {
            Some(summary) => notes.extend_from_slice(&summary),
            None => {
                return Err(Fail::failed(format!(
                    "summary {} ended {}",
                    end.run, end.state
                )));
            }
        }
    }
    Ok(notes)
}

/// How many summaries a research run asks for, and whether it waits for
/// all or takes the first: 1 to 3, from its input (one is `ctx.child`).
fn fan_out(input: &[u8]) -> (usize, Join) {
    let byte = digest_of(input).0[0];
    let count = 1 + usize::from(byte % 3);
    let join = if byte & 8 == 0 {
        Join::All
    } else {
        Join::First
    };
    (count, join)
}

fn summary(ctx: &mut RunCtx<'_>, s: &Arc<Shared>) -> Result<Vec<u8>, Fail> {
    let run = run_of(ctx);
    let prompt = [b"summarize: ".as_slice(), ctx.input()].concat();
    let summary = ctx.decide_with_usage("summarize", &prompt, || s.model(&run, 0, &prompt))?;
    let cited = step(ctx, s, "cite", "search.query", &summary)?;
    Ok([summary, cited].join(&b' '))
}

fn vendor(ctx: &mut RunCtx<'_>, s: &Arc<Shared>) -> Result<Vec<u8>, Fail> {
    let run = run_of(ctx);
    let screening = format!("screen the vendor of {run}").into_bytes();
    let world_tool = tool(SCREENING_TOOL);
    let args_digest = digest_of(&screening);
    let screened = ctx.step_async(
        "screen",
        &rt_tool(s, SCREENING_TOOL),
        &screening,
        Some(Deadline::In(SCREENING_WINDOW_MS)),
        |call| s.act(world_tool, call, Ask::Act { args_digest }),
    )?;
    let payment = vendor_payment(&run);
    match ctx.approval("pay", &payment, FINANCE, Deadline::In(APPROVAL_WINDOW_MS))? {
        Approval::Approved { .. } => {}
        other => return Err(Fail::failed(format!("finance did not approve: {other:?}"))),
    }
    let verified = ctx.signal(VERIFIED, None)?.unwrap_or_default();
    ctx.sleep("cool-off", Deadline::In(COOL_OFF_MS))?;
    let paid = step(ctx, s, "pay", "bank.pay", &payment)?;
    Ok([screened, verified, paid].join(&b' '))
}

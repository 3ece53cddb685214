//! A refund agent (seed 000) on actum: refunds up to 500 EUR go straight
//! through; a larger one waits, with no worker holding it, for a refund
//! supervisor's approval bound to that exact refund (the digest of its
//! arguments, the approver's role, a 24-hour expiry). The refund itself is
//! one step of the engine's ceremony with a stable idempotency key, so a
//! worker that dies after paying is answered from the ledger when the run
//! is claimed again: a refund is never paid twice, and one that was
//! rejected, or never approved in time, is never paid at all. The service
//! also restarts while refunds wait for their supervisors.
//!
//! Run it with `cargo run --example refund_approval` (`-- --quick` for the
//! four scripted refunds only, `-- --dir PATH` to keep the database).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use actum::books::{
    CreateRun, Digest, EffectKey, Guard, Outcome, Run, RunId, RunState, StepId, ToolClass,
    Transition, WaitFor, WaitStatus, WorkerId, digest_of,
};
use actum::engine::{LeaseGrant, StepRequest, StepResult, ToolSpec};
use actum::{Engine, EngineOptions, Error, FsStorage, ManualClock};
use actum_examples::{BoxError, Checks, Cli, XorShift, euros, main_of};

/// 2026-01-01 09:00 UTC: the engine's clock starts here and moves only
/// when the example says so.
const START_MS: u64 = 1_767_258_000_000;
/// An hour, in the engine clock's milliseconds.
const HOUR_MS: u64 = 3_600_000;
/// Refunds above this many cents need a supervisor.
const THRESHOLD_CENTS: u64 = 50_000;
/// How long a supervisor has to decide.
const APPROVAL_WINDOW_MS: u64 = 24 * HOUR_MS;
/// The role an approval must come from.
const ROLE: &str = "refund-supervisor";
/// A worker's lease: a dead worker's run is claimable again once it ran
/// out, or at once after a restart (the open releases it).
const LEASE_MS: u64 = 30_000;
/// The payment provider deduplicates a refund's key for a day.
const PSP_DEDUP_MS: u64 = 24 * HOUR_MS;

/// Runs the example; the exit code says whether every invariant held.
fn main() -> ExitCode {
    main_of("refund_approval", refunds)
}

/// What the supervisor will do with a refund that needs an approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Approve,
    Reject,
    /// Nobody answers; the approval expires after 24 hours.
    Silent,
}

/// A customer's refund request, as the booking system holds it. The
/// engine keeps only its digest (the run's input); the worker reads the
/// request from here.
#[derive(Clone, Debug)]
struct RefundRequest {
    run: RunId,
    booking: String,
    amount_cents: u64,
    /// Only read for refunds above the threshold.
    decision: Decision,
    /// The worker dies right after the refund is paid and recorded, before
    /// the customer's mail, the first time it runs this refund.
    crash_after_refund: bool,
}

impl RefundRequest {
    fn new(n: u64, amount_cents: u64, decision: Decision, crash: bool) -> Result<Self, Error> {
        Ok(RefundRequest {
            run: RunId::new(format!("refund-{n:04}"))?,
            booking: format!("BK-{n:04}"),
            amount_cents,
            decision,
            crash_after_refund: crash,
        })
    }

    /// The refund tool's arguments: what the supervisor approves, byte
    /// for byte (the approval is bound to their digest).
    fn args(&self) -> Vec<u8> {
        format!(
            "refund booking {} EUR {} to the card on file",
            self.booking,
            euros(self.amount_cents)
        )
        .into_bytes()
    }

    fn needs_approval(&self) -> bool {
        self.amount_cents > THRESHOLD_CENTS
    }

    /// Whether the customer should end up refunded (once).
    fn due(&self) -> bool {
        !self.needs_approval() || self.decision == Decision::Approve
    }
}

/// The day's requests: four scripted ones (one of each path), then, unless
/// `--quick`, sixteen more drawn from a seeded generator.
fn requests(quick: bool) -> Result<Vec<RefundRequest>, Error> {
    let mut requests = vec![
        RefundRequest::new(1, 12_000, Decision::Approve, true)?,
        RefundRequest::new(2, 84_000, Decision::Approve, false)?,
        RefundRequest::new(3, 120_000, Decision::Reject, false)?,
        RefundRequest::new(4, 250_000, Decision::Silent, false)?,
    ];
    if quick {
        return Ok(requests);
    }
    let mut rng = XorShift::new(0x000_64e8_e183);
    for n in 5..=20 {
        let amount = 5_000 + rng.below(295_000);
        let decision = match rng.below(10) {
            0..=5 => Decision::Approve,
            6 | 7 => Decision::Reject,
            _ => Decision::Silent,
        };
        requests.push(RefundRequest::new(n, amount, decision, rng.below(4) == 0)?);
    }
    Ok(requests)
}

/// The payment provider: it deduplicates refunds by idempotency key, as
/// Stripe does (for a day; this one keeps every key), and remembers every
/// refund it made.
#[derive(Debug, Default)]
struct Psp {
    /// Requests received, duplicates included.
    calls: usize,
    /// Refunds made, by idempotency key.
    refunds: BTreeMap<String, PspRefund>,
}

#[derive(Clone, Debug)]
struct PspRefund {
    booking: String,
    amount_cents: u64,
    receipt: String,
}

impl Psp {
    /// Refunds `request` under `key`, or answers the refund that key
    /// already made.
    fn refund(&mut self, key: &str, request: &RefundRequest) -> Outcome {
        self.calls += 1;
        if let Some(done) = self.refunds.get(key) {
            if (done.booking.as_str(), done.amount_cents)
                != (request.booking.as_str(), request.amount_cents)
            {
                return Outcome::Failed {
                    retryable: false,
                    reason: format!("key {key} was used for another refund"),
                };
            }
            return Outcome::Confirmed {
                receipt: done.receipt.clone().into_bytes(),
            };
        }
        let receipt = format!("re_{:04}", self.refunds.len() + 1);
        let refund = PspRefund {
            booking: request.booking.clone(),
            amount_cents: request.amount_cents,
            receipt: receipt.clone(),
        };
        self.refunds.insert(key.to_string(), refund);
        Outcome::Confirmed {
            receipt: receipt.into_bytes(),
        }
    }

    fn refunds_of(&self, booking: &str) -> Vec<&PspRefund> {
        self.refunds
            .values()
            .filter(|r| r.booking == booking)
            .collect()
    }
}

/// Everything outside the engine: the provider, the mailer, and what the
/// example counts to check at the end.
#[derive(Debug, Default)]
struct World {
    psp: Psp,
    /// Mails sent, by booking.
    mails: Vec<String>,
    /// Runs whose worker already died once (it dies only the first time).
    crashed: BTreeSet<RunId>,
    /// Those runs, once a worker claimed them again.
    resumed: BTreeSet<RunId>,
    /// Refund steps answered from the ledger instead of calling the PSP.
    replays: usize,
}

/// How one pass of the agent over a claimed run ended.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    /// Waiting for a supervisor; the lease went back with the wait.
    Parked,
    /// Finished, completed or failed.
    Ended,
    /// The worker died holding the lease.
    Crashed,
}

/// Refusals the engine must give, and what it gave.
#[derive(Debug, Default)]
struct Refusals {
    wrong_role: Option<String>,
    other_amount: Option<String>,
    second_decision: Option<String>,
    after_expiry: Option<String>,
}

/// The example: the day's refunds, from requests to checks.
fn refunds(cli: &Cli, dir: &Path, checks: &mut Checks) -> Result<(), BoxError> {
    let clock = Arc::new(ManualClock::new(START_MS));
    let requests = requests(cli.quick)?;
    let desk: BTreeMap<RunId, RefundRequest> = requests
        .iter()
        .map(|r| (r.run.clone(), r.clone()))
        .collect();
    let mut world = World::default();
    let mut refusals = Refusals::default();

    let mut engine = open(dir, &clock)?;
    println!("== {} refund requests arrive", requests.len());
    for request in &requests {
        engine.create_run(CreateRun {
            run: request.run.clone(),
            input_digest: digest_of(&request.args()),
            agent_version: "refund-agent 2.1".into(),
            trace_id: format!("trace-{}", request.booking),
            parent: None,
            input: None,
        })?;
    }
    println!("== workers take the queue");
    work(&engine, &desk, &mut world)?;

    let waiting = engine.runs(Some(RunState::WaitingHuman), None, 1000)?;
    println!(
        "== a deploy restarts the service while {} refunds wait for a supervisor",
        waiting.len()
    );
    drop(engine); // no close: to the engine this is a crash
    engine = open(dir, &clock)?;
    let after = engine.runs(Some(RunState::WaitingHuman), None, 1000)?;
    let leased = after.iter().filter(|r| r.lease.is_some()).count();
    println!(
        "   reopened: {} log records replayed, {} lease(s) of the dead process released, {} \
         refunds still waiting, {leased} of them leased",
        engine.recovery().replayed_records,
        engine.recovery().leases_released,
        after.len()
    );

    clock.advance_ms(2 * HOUR_MS);
    println!("== two hours later, the supervisors go through their queue");
    supervisors(&engine, &desk, &mut refusals)?;
    println!("== workers take the woken refunds");
    work(&engine, &desk, &mut world)?;

    clock.advance_ms(APPROVAL_WINDOW_MS);
    println!("== a day later: unanswered approvals have expired");
    late_approval(&engine, &desk, &mut refusals)?;
    work(&engine, &desk, &mut world)?;

    println!("== the checks");
    check(&engine, &requests, &world, &refusals, checks)?;
    checks.equal(
        "the restart kept every waiting refund, with no lease held",
        (after.len(), leased),
        (waiting.len(), 0),
    );
    engine.close()?;
    Ok(())
}

/// Opens the engine in `dir` on the real file system and the example's
/// clock.
fn open(dir: &Path, clock: &Arc<ManualClock>) -> Result<Engine, Error> {
    Engine::open_with(
        Arc::new(FsStorage::new()),
        clock.clone(),
        dir,
        EngineOptions::default(),
    )
}

/// Workers drain the queue: every claimable run goes through the agent.
/// Runs come back to the queue when they are woken or their worker's
/// lease runs out (or a restart released it), never while they wait.
fn work(
    engine: &Engine,
    desk: &BTreeMap<RunId, RefundRequest>,
    world: &mut World,
) -> Result<(), BoxError> {
    let worker = WorkerId::new("refund-worker-1")?;
    // Each pass parks, ends or crashes its run, so the queue drains; the
    // bound turns an agent bug that loops into an error.
    for _ in 0..4 * desk.len() + 4 {
        let Some(lease) = engine.claim_next(&worker, LEASE_MS)? else {
            return Ok(());
        };
        let request = desk
            .get(&lease.run)
            .ok_or_else(|| format!("claimed {}, which no request names", lease.run))?;
        if world.crashed.contains(&lease.run) && world.resumed.insert(lease.run.clone()) {
            println!(
                "   [{}] the dead worker's run is claimed again under token {}",
                request.booking, lease.guard.token.0
            );
        }
        if refund_agent(engine, &lease, request, world)? == Flow::Crashed {
            println!(
                "   [{}] the worker dies holding the lease (token {})",
                request.booking, lease.guard.token.0
            );
        }
    }
    Err("the workers did not drain the queue".into())
}

/// One pass of the refund agent over a claimed run. It starts from the top
/// every time: each step asks the engine, which answers from the books
/// what is already done.
fn refund_agent(
    engine: &Engine,
    lease: &LeaseGrant,
    request: &RefundRequest,
    world: &mut World,
) -> Result<Flow, BoxError> {
    let (run, guard) = (&lease.run, &lease.guard);
    let who = &request.booking;
    let record = engine
        .run(run)?
        .ok_or_else(|| format!("claimed {run}, which does not exist"))?;
    if record.input_digest != digest_of(&request.args()) {
        return Err(format!("{run} was created for another request than {who}").into());
    }
    if record.state == RunState::Pending {
        engine.transition(move_to(
            run,
            guard,
            RunState::Running,
            "refund agent starts",
        ))?;
    }
    let step = StepId::new("refund")?;
    let args = request.args();
    if request.needs_approval() {
        match approval(engine, &record, guard, &step, &args)? {
            WaitStatus::Open => {
                println!(
                    "   [{who}] EUR {} is above the threshold: waits for a {ROLE}",
                    euros(request.amount_cents)
                );
                return Ok(Flow::Parked);
            }
            WaitStatus::Approved { approver, .. } => {
                println!("   [{who}] approved by {approver}");
            }
            other => return end_unpaid(engine, run, guard, who, &other),
        }
    }
    let receipt = pay(engine, guard, request, &step, &args, world)?;
    if request.crash_after_refund && world.crashed.insert(run.clone()) {
        return Ok(Flow::Crashed);
    }
    mail(engine, run, guard, request, &receipt, world)?;
    engine.transition(move_to(run, guard, RunState::Completed, "refunded"))?;
    Ok(Flow::Ended)
}

/// The refund, through the engine's ceremony: the key is derived from
/// (run, step, attempt), the intent is durable before the PSP is called,
/// and a refund already recorded is answered from the ledger without
/// calling the PSP. Returns the PSP's receipt.
fn pay(
    engine: &Engine,
    guard: &Guard,
    request: &RefundRequest,
    step: &StepId,
    args: &[u8],
    world: &mut World,
) -> Result<String, BoxError> {
    let who = &request.booking;
    let refund = StepRequest {
        guard,
        run: &request.run,
        step,
        tool: ToolSpec {
            name: "psp.refund".into(),
            class: ToolClass::Idempotent {
                dedup_window_ms: PSP_DEDUP_MS,
            },
        },
        args,
        rationale: "the booking was cancelled within the refund policy",
        compensation: None,
    };
    let result = engine.step(&refund, |ctx| world.psp.refund(&ctx.key.encode(), request))?;
    let StepResult::Done {
        key,
        receipt,
        replayed,
    } = result
    else {
        return Err(format!("[{who}] the refund did not go through: {result:?}").into());
    };
    let receipt = String::from_utf8_lossy(&receipt).into_owned();
    if replayed {
        world.replays += 1;
        println!("   [{who}] refund {key} is in the ledger ({receipt}): the PSP is not called");
    } else {
        println!(
            "   [{who}] refunded EUR {} under key {key}: {receipt}",
            euros(request.amount_cents)
        );
    }
    Ok(receipt)
}

/// Asks for the supervisor's approval of exactly `args`, or, if it was
/// asked before, how it stands. The deadline is read from the books (the
/// run's creation plus the window), so asking again names the same terms.
fn approval(
    engine: &Engine,
    record: &Run,
    guard: &Guard,
    step: &StepId,
    args: &[u8],
) -> Result<WaitStatus, Error> {
    let wait_for = WaitFor::Approval {
        args_digest: digest_of(args),
        role: ROLE.into(),
    };
    let deadline = record.created_ms + APPROVAL_WINDOW_MS;
    let waited = engine.open_wait(
        &record.id,
        guard,
        step,
        wait_for,
        Some(deadline),
        "a refund above 500 EUR needs a supervisor",
    )?;
    Ok(waited.wait.status)
}

/// Ends a refund the supervisor did not approve: failed, never paid.
fn end_unpaid(
    engine: &Engine,
    run: &RunId,
    guard: &Guard,
    who: &str,
    status: &WaitStatus,
) -> Result<Flow, BoxError> {
    let reason = match status {
        WaitStatus::Rejected { approver, note } => format!("rejected by {approver}: {note}"),
        WaitStatus::Elapsed => "no supervisor decided within 24 hours".to_string(),
        other => format!("the approval ended {}", other.name()),
    };
    println!("   [{who}] not refunded: {reason}");
    engine.transition(move_to(run, guard, RunState::Failed, &reason))?;
    Ok(Flow::Ended)
}

/// Tells the customer, through the engine too: the mailer cannot
/// deduplicate, so the ledger is what keeps a resumed worker from mailing
/// twice.
fn mail(
    engine: &Engine,
    run: &RunId,
    guard: &Guard,
    request: &RefundRequest,
    receipt: &str,
    world: &mut World,
) -> Result<(), BoxError> {
    let step = StepId::new("mail")?;
    let text = format!(
        "Your refund for {} is on its way ({receipt}).",
        request.booking
    );
    let result = engine.step(
        &StepRequest {
            guard,
            run,
            step: &step,
            tool: ToolSpec {
                name: "mail.send".into(),
                class: ToolClass::NotIdempotent,
            },
            args: text.as_bytes(),
            rationale: "the customer hears that the money is coming",
            compensation: None,
        },
        |_| {
            world.mails.push(request.booking.clone());
            Outcome::Confirmed {
                receipt: format!("msg-{}", world.mails.len()).into_bytes(),
            }
        },
    )?;
    match result {
        StepResult::Done { .. } => Ok(()),
        other => Err(format!("[{}] the mail: {other:?}", request.booking).into()),
    }
}

/// The supervisors' queue: every run waiting for a person. A supervisor
/// reads the refund from the booking system, checks that it is what the
/// approval is bound to, and decides. On the first one, the engine is also
/// shown refusing what it must refuse.
fn supervisors(
    engine: &Engine,
    desk: &BTreeMap<RunId, RefundRequest>,
    refusals: &mut Refusals,
) -> Result<(), BoxError> {
    let waiting = engine.runs(Some(RunState::WaitingHuman), None, 1000)?;
    for (n, run) in waiting.iter().enumerate() {
        let request = desk
            .get(&run.id)
            .ok_or_else(|| format!("{} waits, but no request names it", run.id))?;
        let book = engine.waits(&run.id)?;
        let wait = book
            .open_wait()
            .ok_or_else(|| format!("{} is waiting_human with no open wait", run.id))?;
        let WaitFor::Approval { args_digest, role } = &wait.wait_for else {
            return Err(format!("{} waits for {}, not an approval", run.id, wait.wait_for).into());
        };
        if *args_digest != digest_of(&request.args()) {
            return Err(
                format!("{} asks to approve another refund than the request", run.id).into(),
            );
        }
        if n == 0 {
            refuse_impostors(engine, request, &wait.step, *args_digest, refusals);
        }
        let who = &request.booking;
        let decide = |approve, note| {
            engine.decide_approval(
                &run.id,
                &wait.step,
                *args_digest,
                "sam",
                role,
                approve,
                note,
            )
        };
        match request.decision {
            Decision::Approve => {
                decide(true, "the return was received")?;
                println!(
                    "   [{who}] sam ({role}) approves EUR {}",
                    euros(request.amount_cents)
                );
            }
            Decision::Reject => {
                decide(false, "no proof of return")?;
                println!("   [{who}] sam ({role}) rejects it");
            }
            Decision::Silent => println!("   [{who}] nobody looks at it"),
        }
        if n == 0 && request.decision != Decision::Silent {
            let again = decide(true, "a second click");
            refusals.second_decision = refused(again, |e| matches!(e, Error::WaitEnded { .. }));
            if let Some(refusal) = &refusals.second_decision {
                println!("   [{who}] a second decision is refused: {refusal}");
            }
        }
    }
    Ok(())
}

/// What the engine refuses before any supervisor decides: a person
/// without the role, and an approval of another amount than the one the
/// agent will pay.
fn refuse_impostors(
    engine: &Engine,
    request: &RefundRequest,
    step: &StepId,
    bound: Digest,
    refusals: &mut Refusals,
) {
    let (run, who) = (&request.run, &request.booking);
    let by_support = engine.decide_approval(run, step, bound, "alex", "support", true, "");
    refusals.wrong_role = refused(by_support, |e| matches!(e, Error::ApproverRole { .. }));
    let inflated = RefundRequest {
        amount_cents: request.amount_cents * 10,
        ..request.clone()
    };
    let other = digest_of(&inflated.args());
    let other_amount = engine.decide_approval(run, step, other, "sam", ROLE, true, "");
    refusals.other_amount = refused(other_amount, |e| {
        matches!(e, Error::ApprovalMismatch { .. })
    });
    for refusal in [&refusals.wrong_role, &refusals.other_amount]
        .into_iter()
        .flatten()
    {
        println!("   [{who}] refused, as it must be: {refusal}");
    }
}

/// A supervisor who answers after the deadline is refused.
fn late_approval(
    engine: &Engine,
    desk: &BTreeMap<RunId, RefundRequest>,
    refusals: &mut Refusals,
) -> Result<(), BoxError> {
    let silent = desk
        .values()
        .find(|r| r.needs_approval() && r.decision == Decision::Silent)
        .ok_or("no refund was left unanswered")?;
    let late = engine.decide_approval(
        &silent.run,
        &StepId::new("refund")?,
        digest_of(&silent.args()),
        "sam",
        ROLE,
        true,
        "sorry, I was away",
    );
    refusals.after_expiry = refused(late, |e| matches!(e, Error::ApprovalExpired { .. }));
    if let Some(refusal) = &refusals.after_expiry {
        println!(
            "   [{}] a late approval is refused: {refusal}",
            silent.booking
        );
    }
    Ok(())
}

/// The refusal's text if `result` is the expected refusal; `None` if it
/// was accepted or refused for another reason (which the checks report).
fn refused(result: Result<bool, Error>, expected: impl Fn(&Error) -> bool) -> Option<String> {
    match result {
        Err(e) if expected(&e) => Some(e.to_string()),
        Err(e) => {
            println!("   unexpected refusal: {e}");
            None
        }
        Ok(_) => None,
    }
}

/// A transition of `run` under `guard`.
fn move_to(run: &RunId, guard: &Guard, to: RunState, reason: &str) -> Transition {
    Transition {
        run: run.clone(),
        guard: guard.clone(),
        to,
        expected_version: None,
        reason: reason.to_string(),
    }
}

/// The invariants, from the provider's records and the engine's books.
fn check(
    engine: &Engine,
    requests: &[RefundRequest],
    world: &World,
    refusals: &Refusals,
    checks: &mut Checks,
) -> Result<(), BoxError> {
    let mut wrong_count = Vec::new();
    let mut twice = Vec::new();
    let mut unbound = Vec::new();
    let mut intended_unpaid = Vec::new();
    let mut wrong_end = Vec::new();
    for request in requests {
        let paid = world.psp.refunds_of(&request.booking);
        if paid.len() != usize::from(request.due()) {
            wrong_count.push(format!(
                "{} refunded {} time(s)",
                request.booking,
                paid.len()
            ));
        }
        if paid.len() > 1 {
            twice.push(request.booking.clone());
        }
        if request.needs_approval() && !paid.is_empty() && !approved_exactly(engine, request)? {
            unbound.push(request.booking.clone());
        }
        let step = StepId::new("refund")?;
        let effects = engine.effects(&request.run)?;
        if !request.due() && effects.iter().any(|e| e.key.step() == &step) {
            intended_unpaid.push(request.booking.clone());
        }
        let state = engine.run(&request.run)?.map(|r| r.state);
        let expected = if request.due() {
            RunState::Completed
        } else {
            RunState::Failed
        };
        if state != Some(expected) {
            wrong_end.push(format!("{}: {state:?}", request.booking));
        }
    }
    checks.none_of(
        "each due refund paid exactly once, the others never",
        &wrong_count,
    );
    checks.none_of("no booking refunded twice", &twice);
    checks.none_of(
        "every refund above 500 EUR that was paid had exactly its arguments approved by a refund-supervisor in time",
        &unbound,
    );
    checks.none_of(
        "a rejected or expired refund never even got an intent in the ledger",
        &intended_unpaid,
    );
    checks.none_of(
        "every run ended: completed if refunded, failed if not",
        &wrong_end,
    );
    let crashes = requests
        .iter()
        .filter(|r| r.crash_after_refund && r.due())
        .count();
    checks.equal(
        "every dead worker's refund was answered from the ledger on resume",
        world.replays,
        crashes,
    );
    checks.equal(
        "the PSP got one request per refund (no resend was needed)",
        world.psp.calls,
        world.psp.refunds.len(),
    );
    let refunded: BTreeSet<&String> = world.psp.refunds.values().map(|r| &r.booking).collect();
    let mailed: BTreeSet<&String> = world.mails.iter().collect();
    checks.equal(
        "each refunded customer got exactly one mail",
        (world.mails.len(), mailed),
        (refunded.len(), refunded.clone()),
    );
    checks.check(
        "the engine refused a supervisor without the role, another amount, a second decision and a late one",
        refusals.wrong_role.is_some()
            && refusals.other_amount.is_some()
            && refusals.second_decision.is_some()
            && refusals.after_expiry.is_some(),
        || format!("{refusals:?}"),
    );
    Ok(())
}

/// True if the refund's step waited for an approval that was granted
/// before its deadline, bound to the digest of exactly the arguments the
/// ledger's refund was sent with.
fn approved_exactly(engine: &Engine, request: &RefundRequest) -> Result<bool, BoxError> {
    let step = StepId::new("refund")?;
    let book = engine.waits(&request.run)?;
    let Some(wait) = book.wait_at(&step) else {
        return Ok(false);
    };
    let WaitFor::Approval { args_digest, role } = &wait.wait_for else {
        return Ok(false);
    };
    let in_time = matches!((wait.ended_ms, wait.deadline_ms), (Some(ended), Some(deadline)) if ended < deadline);
    let key = EffectKey::new(request.run.clone(), step, 1)?;
    let sent = engine.effect_args(&key)?;
    Ok(matches!(wait.status, WaitStatus::Approved { .. })
        && role == ROLE
        && in_time
        && *args_digest == digest_of(&request.args())
        && sent.as_deref() == Some(request.args().as_slice()))
}

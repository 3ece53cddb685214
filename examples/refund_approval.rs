//! A refund agent (seed 000) on the runtime: refunds up to 500 EUR go
//! straight through; a larger one waits, with no worker holding it, for a
//! refund supervisor's approval bound to that exact refund (the digest of
//! its arguments, the approver's role, a 24-hour expiry: `ctx.approval`).
//! The refund itself is one `ctx.step` with a stable idempotency key, so a
//! process that dies after paying is answered from the ledger when the run
//! is resumed: a refund is never paid twice, and one that was rejected, or
//! never approved in time, is never paid at all. The service also restarts
//! while refunds wait for their supervisors.
//!
//! The agent is one function; the runtime claims the runs, parks them on
//! their approvals and resumes them. The supervisors are outside the
//! service: they read the waiting runs and decide through the engine
//! (`decide_approval`, no lease), which refuses the wrong role, another
//! amount, a second decision and a late one. A crash is the process's disk
//! dying between the refund and the mail ([`MortalDisk`]); the engine is
//! then dropped without `close` and reopened on a new disk.
//!
//! Run it with `cargo run --example refund_approval` (`-- --quick` for the
//! four scripted refunds only, `-- --dir PATH` to keep the database).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actum::books::{
    Digest, EffectKey, Outcome, RunId, RunState, StepId, ToolClass, WaitFor, WaitStatus, WorkerId,
    digest_of,
};
use actum::engine::{Engine, EngineOptions};
use actum::runtime::{Approval, Deadline, Fail, RunCtx, Runtime, Tool};
use actum::{Error, ManualClock};
use actum_examples::{BoxError, Checks, Cli, MortalDisk, XorShift, euros, main_of};

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
/// The payment provider deduplicates a refund's key for a day.
const PSP: ToolClass = ToolClass::Idempotent {
    dedup_window_ms: 24 * HOUR_MS,
};

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

/// A customer's refund request, as the booking system holds it, with what
/// the world will do with it.
#[derive(Clone, Debug)]
struct RefundRequest {
    run: RunId,
    booking: String,
    amount_cents: u64,
    /// Only read for refunds above the threshold.
    decision: Decision,
    /// The process dies right after the refund is paid and recorded,
    /// before the customer's mail, the first time it runs this refund.
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

    /// The run's input: what the agent starts from.
    fn input(&self) -> String {
        format!("{} {}", self.booking, self.amount_cents)
    }

    fn args(&self) -> Vec<u8> {
        refund_args(&self.booking, self.amount_cents)
    }

    fn needs_approval(&self) -> bool {
        self.amount_cents > THRESHOLD_CENTS
    }

    /// Whether the customer should end up refunded (once).
    fn due(&self) -> bool {
        !self.needs_approval() || self.decision == Decision::Approve
    }
}

/// The refund tool's arguments: what the supervisor approves, byte for
/// byte (the approval is bound to their digest).
fn refund_args(booking: &str, cents: u64) -> Vec<u8> {
    format!(
        "refund booking {booking} EUR {} to the card on file",
        euros(cents)
    )
    .into_bytes()
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
    /// Refunds `booking` under `key`, or answers the refund that key
    /// already made.
    fn refund(&mut self, key: &str, booking: &str, amount_cents: u64) -> Outcome {
        self.calls += 1;
        if let Some(done) = self.refunds.get(key) {
            if (done.booking.as_str(), done.amount_cents) != (booking, amount_cents) {
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
            booking: booking.to_string(),
            amount_cents,
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

/// Everything outside the engine (it outlives every process): the
/// provider, the mailer, and what the example counts to check at the end.
#[derive(Debug, Default)]
struct World {
    psp: Psp,
    /// Mails sent, by booking.
    mails: Vec<String>,
    /// Runs whose process dies after the refund, the first time.
    crash_after_refund: BTreeSet<RunId>,
    /// Runs whose process already died once.
    crashed: BTreeSet<RunId>,
    /// Those runs, once a worker resumed them.
    resumed: BTreeSet<RunId>,
    /// Refund steps answered from the ledger instead of calling the PSP.
    replays: usize,
}

type Shared = Arc<Mutex<World>>;

fn lock(world: &Shared) -> MutexGuard<'_, World> {
    world.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Refusals the engine must give, and what it gave.
#[derive(Debug, Default)]
struct Refusals {
    wrong_role: Option<String>,
    other_amount: Option<String>,
    second_decision: Option<String>,
    after_expiry: Option<String>,
}

/// The refund agent, written as if nothing ever failed. `disk` is its
/// process's disk, which the world kills where a refund's crash is.
fn refund_agent(
    world: Shared,
    disk: MortalDisk,
) -> impl Fn(&mut RunCtx<'_>) -> Result<Vec<u8>, Fail> + Send + Sync + 'static {
    move |ctx| {
        let run = ctx.run_id().clone();
        let input = String::from_utf8_lossy(ctx.input()).into_owned();
        let (who, cents) = input.split_once(' ').ok_or("a refund names its booking")?;
        let cents: u64 = cents.parse().map_err(|_| "a refund's amount is in cents")?;
        let mut w = lock(&world);
        if w.crashed.contains(&run) && w.resumed.insert(run.clone()) {
            let token = ctx.token().0;
            println!("   [{who}] the dead process's run is resumed under token {token}");
        }
        drop(w);
        let args = refund_args(who, cents);
        if cents > THRESHOLD_CENTS {
            if !ctx.replaying() {
                let amount = euros(cents);
                println!("   [{who}] EUR {amount} is above the threshold: waits for a {ROLE}");
            }
            let window = Deadline::In(APPROVAL_WINDOW_MS);
            let reason = match ctx.approval("refund", &args, ROLE, window)? {
                Approval::Approved { approver, .. } => {
                    if !ctx.replaying() {
                        println!("   [{who}] approved by {approver}");
                    }
                    None
                }
                Approval::Rejected { approver, note } => {
                    Some(format!("rejected by {approver}: {note}"))
                }
                Approval::Expired => Some("no supervisor decided within 24 hours".into()),
            };
            if let Some(reason) = reason {
                println!("   [{who}] not refunded: {reason}");
                return Err(Fail::failed(reason));
            }
        }
        let psp = Tool::new("psp.refund", PSP);
        let mut sent = false;
        let receipt = ctx.step("refund", &psp, &args, |call| {
            sent = true;
            let key = &call.idempotency_key;
            let outcome = lock(&world).psp.refund(key, who, cents);
            if let Outcome::Confirmed { receipt } = &outcome {
                let receipt = String::from_utf8_lossy(receipt);
                println!(
                    "   [{who}] refunded EUR {} under key {key}: {receipt}",
                    euros(cents)
                );
            }
            outcome
        })?;
        let receipt = String::from_utf8_lossy(&receipt).into_owned();
        let mut w = lock(&world);
        if !sent {
            w.replays += 1;
            println!("   [{who}] the refund is in the ledger ({receipt}): the PSP is not called");
        }
        if w.crash_after_refund.contains(&run) && w.crashed.insert(run.clone()) {
            let token = ctx.token().0;
            println!(
                "   [{who}] the process dies before the mail, holding the lease (token {token})"
            );
            disk.kill();
        }
        drop(w);
        // The mailer cannot deduplicate: the ledger is what keeps a resumed
        // run from mailing twice.
        let mailer = Tool::new("mail.send", ToolClass::NotIdempotent);
        let text = format!("Your refund for {who} is on its way ({receipt}).");
        ctx.step("mail", &mailer, text.as_bytes(), |_| {
            let mut w = lock(&world);
            w.mails.push(who.to_string());
            Outcome::Confirmed {
                receipt: format!("msg-{}", w.mails.len()).into_bytes(),
            }
        })?;
        Ok(receipt.into_bytes())
    }
}

/// One process of the refund service: its disk, and a runtime over an
/// engine on that disk serving the agent.
struct Process {
    disk: MortalDisk,
    runtime: Runtime,
}

impl Process {
    fn engine(&self) -> &Engine {
        self.runtime.engine()
    }
}

fn boot(dir: &Path, clock: &Arc<ManualClock>, world: &Shared) -> Result<Process, BoxError> {
    let disk = MortalDisk::new();
    let engine = Engine::open_with(
        Arc::new(disk.clone()),
        clock.clone(),
        dir,
        EngineOptions::default(),
    )?;
    let runtime = Runtime::new(Arc::new(engine));
    runtime.register("refund", "2.1", refund_agent(world.clone(), disk.clone()))?;
    Ok(Process { disk, runtime })
}

/// The worker drains the queue: every claimable run goes through the agent.
/// Runs come back to the queue when they are woken (or a restart released
/// their lease), never while they wait. If the process dies, the service
/// restarts it and goes on.
fn work(
    mut process: Process,
    dir: &Path,
    clock: &Arc<ManualClock>,
    world: &Shared,
) -> Result<Process, BoxError> {
    let worker = WorkerId::new("refund-worker-1")?;
    for _ in 0..1_000 {
        match process.runtime.work_once(&worker) {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(process),
            Err(_) if process.disk.is_dead() => {
                drop(process); // no close: to the engine this is a crash
                process = boot(dir, clock, world)?;
                let recovery = process.engine().recovery();
                println!(
                    "   the service restarts: {} log records replayed, {} lease(s) of the dead \
                     process released",
                    recovery.replayed_records, recovery.leases_released
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err("the workers did not drain the queue".into())
}

/// The example: the day's refunds, from requests to checks.
fn refunds(cli: &Cli, dir: &Path, checks: &mut Checks) -> Result<(), BoxError> {
    let clock = Arc::new(ManualClock::new(START_MS));
    let requests = requests(cli.quick)?;
    let desk: BTreeMap<RunId, RefundRequest> = requests
        .iter()
        .map(|r| (r.run.clone(), r.clone()))
        .collect();
    let world: Shared = Arc::default();
    lock(&world).crash_after_refund = requests
        .iter()
        .filter(|r| r.crash_after_refund)
        .map(|r| r.run.clone())
        .collect();
    let mut refusals = Refusals::default();

    let mut process = boot(dir, &clock, &world)?;
    println!("== {} refund requests arrive", requests.len());
    for request in &requests {
        let input = request.input();
        process
            .runtime
            .start("refund", request.run.as_str(), input.as_bytes())?;
    }
    println!("== workers take the queue");
    process = work(process, dir, &clock, &world)?;

    let waiting = process
        .engine()
        .runs(Some(RunState::WaitingHuman), None, 1000)?;
    println!(
        "== a deploy restarts the service while {} refunds wait for a supervisor",
        waiting.len()
    );
    drop(process); // no close: to the engine this is a crash
    process = boot(dir, &clock, &world)?;
    let engine = process.engine();
    let after = engine.runs(Some(RunState::WaitingHuman), None, 1000)?;
    let leased = after.iter().filter(|r| r.lease.is_some()).count();
    println!(
        "   reopened: {} log records replayed, {} refunds still waiting, {leased} of them leased",
        engine.recovery().replayed_records,
        after.len()
    );

    clock.advance_ms(2 * HOUR_MS);
    println!("== two hours later, the supervisors go through their queue");
    supervisors(process.engine(), &desk, &mut refusals)?;
    println!("== workers take the woken refunds");
    process = work(process, dir, &clock, &world)?;

    clock.advance_ms(APPROVAL_WINDOW_MS);
    println!("== a day later: unanswered approvals have expired");
    late_approval(process.engine(), &desk, &mut refusals)?;
    process = work(process, dir, &clock, &world)?;

    println!("== the checks");
    check(
        process.engine(),
        &requests,
        &lock(&world),
        &refusals,
        checks,
    )?;
    checks.equal(
        "the restart kept every waiting refund, with no lease held",
        (after.len(), leased),
        (waiting.len(), 0),
    );
    Ok(())
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
    let other = digest_of(&refund_args(who, request.amount_cents * 10));
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
        "every dead process's refund was answered from the ledger on resume",
        (world.replays, world.resumed.len()),
        (crashes, crashes),
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

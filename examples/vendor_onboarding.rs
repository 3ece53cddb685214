//! Vendor onboarding (seed 003) on actum: a new vendor's first payment
//! waits up to 48 hours for finance to approve exactly that payment, then
//! the bank verifies the vendor's account and answers by webhook
//! (`deliver_reply`), then a 24-hour cooling-off timer runs, and only then
//! is the vendor paid, once. While a run waits it holds no worker and no
//! lease; the service restarts twice (dropped without `close`, reopened)
//! while runs are parked, and they carry on. The engine reads a
//! `ManualClock`, so two simulated days pass in an instant.
//!
//! Run it with `cargo run --example vendor_onboarding` (`-- --quick` for the
//! three scripted vendors only, `-- --dir PATH` to keep the database).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use actum::books::{
    CreateRun, EffectKey, Guard, Outcome, Run, RunId, RunState, StepId, ToolClass, Transition,
    WaitFor, WaitStatus, WorkerId, digest_of,
};
use actum::engine::{LeaseGrant, StepPlan, StepRequest, StepResult, ToolSpec};
use actum::{Engine, EngineOptions, Error, FsStorage, ManualClock};
use actum_examples::{BoxError, Checks, Cli, XorShift, main_of};

/// 2026-06-08 08:00 UTC: the engine's clock starts here and moves an hour
/// at a time, when the example says so.
const START_MS: u64 = 1_780_905_600_000;
/// An hour, in the engine clock's milliseconds.
const HOUR_MS: u64 = 3_600_000;
/// How long finance has to approve the first payment.
const APPROVAL_WINDOW_MS: u64 = 48 * HOUR_MS;
/// How long after the account is verified the payment may go out.
const COOLING_OFF_MS: u64 = 24 * HOUR_MS;
/// A worker's lease.
const LEASE_MS: u64 = 60_000;
/// The hours at which the service restarts.
const RESTART_HOURS: [u64; 2] = [6, 45];
/// By then every run has ended, or the example failed.
const LAST_HOUR: u64 = 120;
/// The bank deduplicates verification requests and payments by key.
const BANK: ToolClass = ToolClass::Idempotent {
    dedup_window_ms: 72 * HOUR_MS,
};

/// Runs the example; the exit code says whether every invariant held.
fn main() -> ExitCode {
    main_of("vendor_onboarding", onboarding)
}

/// What finance does with the first payment, and at which hour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finance {
    Approve {
        at_hour: u64,
    },
    Reject {
        at_hour: u64,
    },
    /// Nobody decides; the approval expires after 48 hours.
    Silent,
}

/// A vendor to onboard, as the procurement system holds it.
#[derive(Clone, Debug)]
struct Vendor {
    run: RunId,
    name: String,
    iban: String,
    cents: u64,
    finance: Finance,
    /// Whether the account belongs to the vendor.
    account_ok: bool,
    /// How many hours the bank takes to answer the verification.
    reply_after_hours: u64,
    /// The bank's webhook fires twice.
    duplicate_webhook: bool,
}

impl Vendor {
    fn new(n: u64, name: &str, cents: u64, finance: Finance) -> Result<Vendor, Error> {
        Ok(Vendor {
            run: RunId::new(format!("vendor-{n:03}"))?,
            name: name.to_string(),
            iban: format!("DE89 3704 0044 0532 {:04} 00", 1000 + n),
            cents,
            finance,
            account_ok: true,
            reply_after_hours: 3,
            duplicate_webhook: false,
        })
    }

    /// The first payment's arguments: what finance approves, byte for byte.
    fn payment(&self) -> Vec<u8> {
        format!(
            "pay USD {}.{:02} to {} ({})",
            self.cents / 100,
            self.cents % 100,
            self.name,
            self.iban
        )
        .into_bytes()
    }

    /// Whether the vendor should end up paid (once).
    fn due(&self) -> bool {
        matches!(self.finance, Finance::Approve { .. }) && self.account_ok
    }
}

/// Three scripted vendors (paid; account mismatch; finance silent), then,
/// unless `--quick`, nine more from a seeded generator.
fn vendors(quick: bool) -> Result<Vec<Vendor>, Error> {
    let mut harbor = Vendor::new(
        1,
        "Harbor Logistics",
        84_000 * 100,
        Finance::Approve { at_hour: 30 },
    )?;
    harbor.duplicate_webhook = true;
    let mut northwind = Vendor::new(
        2,
        "Northwind Freight",
        12_500 * 100,
        Finance::Approve { at_hour: 20 },
    )?;
    northwind.account_ok = false;
    northwind.reply_after_hours = 2;
    let anchor = Vendor::new(3, "Blue Anchor Ltd", 3_900 * 100, Finance::Silent)?;
    let mut vendors = vec![harbor, northwind, anchor];
    if quick {
        return Ok(vendors);
    }
    let mut rng = XorShift::new(0x003_61a6_00b6);
    for n in 4..=12 {
        let at_hour = 1 + rng.below(47);
        let finance = match rng.below(10) {
            0..=6 => Finance::Approve { at_hour },
            7 | 8 => Finance::Reject { at_hour },
            _ => Finance::Silent,
        };
        let mut vendor = Vendor::new(
            n,
            &format!("Supplier {n}"),
            1_000 * 100 + rng.below(99_000 * 100),
            finance,
        )?;
        vendor.account_ok = rng.below(6) != 0;
        vendor.reply_after_hours = 1 + rng.below(6);
        vendor.duplicate_webhook = rng.below(3) == 0;
        vendors.push(vendor);
    }
    Ok(vendors)
}

/// The bank: verifies accounts (answering later, by webhook) and pays,
/// deduplicating both by idempotency key.
#[derive(Debug, Default)]
struct Bank {
    /// Verification requests by key: the vendor and the hour the webhook
    /// is due.
    verifications: BTreeMap<String, (RunId, u64)>,
    /// Verification requests received, duplicates included.
    verification_calls: usize,
    /// Payments by key.
    payments: BTreeMap<String, Payment>,
    /// Webhook deliveries that wrote nothing (retries).
    duplicate_replies_ignored: usize,
    /// Duplicate deliveries that did write something (must stay 0).
    duplicate_replies_written: usize,
}

impl Bank {
    /// Takes a verification request; the answer comes by webhook.
    fn verify(&mut self, key: &EffectKey, vendor: &Vendor, hour: u64) {
        self.verification_calls += 1;
        let due = hour + vendor.reply_after_hours;
        self.verifications
            .entry(key.encode())
            .or_insert((vendor.run.clone(), due));
    }

    /// Pays `vendor` under `key`, or answers the payment that key made.
    fn pay(&mut self, key: &str, vendor: &Vendor, now_ms: u64) -> Outcome {
        let number = self.payments.len() + 1;
        let payment = self
            .payments
            .entry(key.to_string())
            .or_insert_with(|| Payment {
                run: vendor.run.clone(),
                args: vendor.payment(),
                at_ms: now_ms,
                receipt: format!("PAY-{number:04}"),
            });
        Outcome::Confirmed {
            receipt: payment.receipt.clone().into_bytes(),
        }
    }

    fn payments_to(&self, run: &RunId) -> Vec<&Payment> {
        self.payments.values().filter(|p| p.run == *run).collect()
    }
}

/// A payment the bank made.
#[derive(Debug)]
struct Payment {
    run: RunId,
    /// What it was told to pay.
    args: Vec<u8>,
    at_ms: u64,
    receipt: String,
}

/// How one pass of the agent over a claimed run ended.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    /// Waiting (approval, webhook or timer); the lease went with the wait.
    Parked,
    Ended,
}

/// What a restart found: the runs waiting before and after, and whether
/// anyone held or could claim one.
#[derive(Debug, PartialEq, Eq)]
struct Restart {
    waiting_before: Vec<RunId>,
    waiting_after: Vec<RunId>,
    leased: usize,
    claimable: bool,
}

/// The example: hour by hour, the vendors' runs from creation to payment.
fn onboarding(cli: &Cli, dir: &Path, checks: &mut Checks) -> Result<(), BoxError> {
    let clock = Arc::new(ManualClock::new(START_MS));
    let vendors = vendors(cli.quick)?;
    let erp: BTreeMap<RunId, Vendor> = vendors.iter().map(|v| (v.run.clone(), v.clone())).collect();
    let mut bank = Bank::default();
    let mut restarts = Vec::new();
    let mut engine = open(dir, &clock)?;
    say(0, &format!("{} vendors to onboard", vendors.len()));
    for vendor in &vendors {
        engine.create_run(CreateRun {
            run: vendor.run.clone(),
            input_digest: digest_of(&vendor.payment()),
            agent_version: "vendor-onboard 14".into(),
            trace_id: format!("trace-{}", vendor.run),
            parent: None,
            input: None,
        })?;
    }
    for hour in 0..=LAST_HOUR {
        finance_desk(&engine, &vendors, hour)?;
        webhooks(&engine, &erp, &mut bank, hour)?;
        work(&engine, &erp, &mut bank, hour)?;
        if RESTART_HOURS.contains(&hour) {
            let (reopened, restart) = restart(engine, dir, &clock, hour)?;
            engine = reopened;
            restarts.push(restart);
        }
        if all_ended(&engine, &vendors)? {
            say(hour, "every run has ended");
            break;
        }
        clock.advance_ms(HOUR_MS);
    }
    println!("== the checks");
    check(&engine, &vendors, &bank, &restarts, checks)?;
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

/// A deploy: the engine is dropped without `close` (a crash, to it) while
/// runs are parked, and reopened.
fn restart(
    engine: Engine,
    dir: &Path,
    clock: &Arc<ManualClock>,
    hour: u64,
) -> Result<(Engine, Restart), BoxError> {
    let waiting_before = waiting(&engine)?;
    drop(engine);
    let engine = open(dir, clock)?;
    let after = engine.runs(None, None, 1000)?;
    let parked: Vec<&Run> = after.iter().filter(|r| is_waiting(r.state)).collect();
    let leased = parked.iter().filter(|r| r.lease.is_some()).count();
    let claimable = engine
        .claim_next(&WorkerId::new("onboarding-worker")?, LEASE_MS)?
        .is_some();
    say(
        hour,
        &format!(
            "a deploy restarts the service (no clean close): {} log records replayed, {} runs \
             still parked, {leased} leased",
            engine.recovery().replayed_records,
            parked.len()
        ),
    );
    let restart = Restart {
        waiting_before,
        waiting_after: parked.iter().map(|r| r.id.clone()).collect(),
        leased,
        claimable,
    };
    Ok((engine, restart))
}

/// True for the states of a parked run.
fn is_waiting(state: RunState) -> bool {
    matches!(state, RunState::WaitingHuman | RunState::WaitingTool)
}

/// The runs parked now.
fn waiting(engine: &Engine) -> Result<Vec<RunId>, Error> {
    Ok(engine
        .runs(None, None, 1000)?
        .into_iter()
        .filter(|r| is_waiting(r.state))
        .map(|r| r.id)
        .collect())
}

/// True once every vendor's run has ended.
fn all_ended(engine: &Engine, vendors: &[Vendor]) -> Result<bool, Error> {
    for vendor in vendors {
        if !engine
            .run(&vendor.run)?
            .is_some_and(|r| r.state.is_terminal())
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Finance decides the approvals due this hour. It reads the payment from
/// the purchase order and the approval the run asks for, and approves
/// only if the two are the same payment.
fn finance_desk(engine: &Engine, vendors: &[Vendor], hour: u64) -> Result<(), BoxError> {
    for vendor in vendors {
        let (approve, note) = match vendor.finance {
            Finance::Approve { at_hour } if at_hour == hour => {
                (true, "matches the signed contract")
            }
            Finance::Reject { at_hour } if at_hour == hour => (false, "no signed contract on file"),
            _ => continue,
        };
        let book = engine.waits(&vendor.run)?;
        let wait = book
            .open_wait()
            .ok_or_else(|| format!("{} asks finance nothing", vendor.name))?;
        let WaitFor::Approval { args_digest, role } = &wait.wait_for else {
            return Err(format!("{} waits for {}, not finance", vendor.name, wait.wait_for).into());
        };
        if *args_digest != digest_of(&vendor.payment()) {
            return Err(format!(
                "{} asks approval of another payment than its order",
                vendor.name
            )
            .into());
        }
        engine.decide_approval(
            &vendor.run,
            &wait.step,
            *args_digest,
            "fiona",
            role,
            approve,
            note,
        )?;
        let verb = if approve { "approves" } else { "rejects" };
        say(
            hour,
            &format!("finance {verb} the payment to {} ({note})", vendor.name),
        );
    }
    Ok(())
}

/// The bank's webhook delivers the verifications due this hour; a
/// retried delivery writes nothing.
fn webhooks(
    engine: &Engine,
    erp: &BTreeMap<RunId, Vendor>,
    bank: &mut Bank,
    hour: u64,
) -> Result<(), BoxError> {
    let due: Vec<(String, RunId)> = bank
        .verifications
        .iter()
        .filter(|(_, (_, at))| *at == hour)
        .map(|(key, (run, _))| (key.clone(), run.clone()))
        .collect();
    for (key, run) in due {
        let vendor = erp.get(&run).ok_or("a verification of an unknown vendor")?;
        let outcome = if vendor.account_ok {
            Outcome::Confirmed {
                receipt: b"account holder matches".to_vec(),
            }
        } else {
            Outcome::Failed {
                retryable: false,
                reason: "the account holder is not the vendor".into(),
            }
        };
        let key = EffectKey::parse(&key)?;
        let woke = engine.deliver_reply(&key, outcome.clone(), "bank-webhook")?;
        let said = if vendor.account_ok {
            "account verified"
        } else {
            "account holder mismatch"
        };
        let wakes = if woke.is_some() {
            "the run wakes"
        } else {
            "no run was waiting"
        };
        say(
            hour,
            &format!("the bank's webhook for {}: {said}; {wakes}", vendor.name),
        );
        if vendor.duplicate_webhook {
            match engine.deliver_reply(&key, outcome, "bank-webhook")? {
                None => {
                    bank.duplicate_replies_ignored += 1;
                    say(hour, "the webhook fires again: nothing is written");
                }
                Some(_) => bank.duplicate_replies_written += 1,
            }
        }
    }
    Ok(())
}

/// Workers drain the queue: every claimable run goes through the agent.
fn work(
    engine: &Engine,
    erp: &BTreeMap<RunId, Vendor>,
    bank: &mut Bank,
    hour: u64,
) -> Result<(), BoxError> {
    let worker = WorkerId::new("onboarding-worker")?;
    for _ in 0..4 * erp.len() + 4 {
        let Some(lease) = engine.claim_next(&worker, LEASE_MS)? else {
            return Ok(());
        };
        let vendor = erp
            .get(&lease.run)
            .ok_or_else(|| format!("claimed {}, which no vendor names", lease.run))?;
        onboard(engine, &lease, vendor, bank, hour)?;
    }
    Err("the workers did not drain the queue".into())
}

/// One pass of the onboarding agent over a claimed run. It starts from the
/// top every time: each wait and step asks the engine, which answers from
/// the books what already happened.
fn onboard(
    engine: &Engine,
    lease: &LeaseGrant,
    vendor: &Vendor,
    bank: &mut Bank,
    hour: u64,
) -> Result<Flow, BoxError> {
    let (run, guard) = (&lease.run, &lease.guard);
    let record = engine
        .run(run)?
        .ok_or_else(|| format!("claimed {run}, which does not exist"))?;
    if record.state == RunState::Pending {
        engine.transition(move_to(run, guard, RunState::Running, "onboarding starts"))?;
    }
    let stop = |why: String| end_unpaid(engine, hour, run, guard, &vendor.name, &why);
    match finance_approval(engine, &record, guard, vendor, hour)? {
        Gate::Pass(()) => {}
        Gate::Parked => return Ok(Flow::Parked),
        Gate::Stop(why) => return stop(why),
    }
    let verified_ms = match verify_account(engine, run, guard, vendor, bank, hour)? {
        Gate::Pass(at) => at,
        Gate::Parked => return Ok(Flow::Parked),
        Gate::Stop(why) => return stop(why),
    };
    match cooling_off(engine, run, guard, verified_ms, vendor, hour)? {
        Gate::Pass(()) => {}
        Gate::Parked => return Ok(Flow::Parked),
        Gate::Stop(why) => return stop(why),
    }
    pay(engine, run, guard, vendor, bank, hour)?;
    engine.transition(move_to(
        run,
        guard,
        RunState::Completed,
        "onboarded and paid",
    ))?;
    Ok(Flow::Ended)
}

/// Where one of the run's gates (finance, the bank's verification, the
/// cooling-off) leaves it.
enum Gate<T> {
    /// Passed, with what the next gate needs.
    Pass(T),
    /// The run waits; its lease went with the wait.
    Parked,
    /// The vendor must not be paid, for this reason.
    Stop(String),
}

/// Asks finance to approve exactly the first payment within 48 hours of
/// the run's creation, or, if asked before, how it stands (the same terms,
/// read from the books). The payment step is where the approval waits:
/// the engine lets that step's effect begin only once approved, and only
/// with the approved arguments.
fn finance_approval(
    engine: &Engine,
    record: &Run,
    guard: &Guard,
    vendor: &Vendor,
    hour: u64,
) -> Result<Gate<()>, Error> {
    let payment = vendor.payment();
    let approval = WaitFor::Approval {
        args_digest: digest_of(&payment),
        role: "finance".into(),
    };
    let deadline = record.created_ms + APPROVAL_WINDOW_MS;
    let waited = engine.open_wait(
        &record.id,
        guard,
        &StepId::new("pay")?,
        approval,
        Some(deadline),
        "a new vendor's first payment",
    )?;
    Ok(match waited.wait.status {
        WaitStatus::Open => {
            let payment = String::from_utf8_lossy(&payment);
            let line = format!(
                "[{}] waits up to 48 h for finance to approve \"{payment}\"",
                vendor.name
            );
            say(hour, &line);
            Gate::Parked
        }
        WaitStatus::Approved { .. } => Gate::Pass(()),
        WaitStatus::Rejected { approver, note } => {
            Gate::Stop(format!("finance ({approver}) rejected it: {note}"))
        }
        WaitStatus::Elapsed => {
            Gate::Stop("finance did not decide within 48 h; the approval expired".into())
        }
        other => Gate::Stop(format!("finance's approval ended {}", other.name())),
    })
}

/// The bank's account verification, an asynchronous tool: the request is
/// an effect (intent first, with its key), its answer comes later by
/// webhook, which settles the effect and wakes the run. Woken, the step
/// answers from the ledger; the request is not sent again. Passes with
/// the time the verification settled.
fn verify_account(
    engine: &Engine,
    run: &RunId,
    guard: &Guard,
    vendor: &Vendor,
    bank: &mut Bank,
    hour: u64,
) -> Result<Gate<u64>, BoxError> {
    let step = StepId::new("verify-account")?;
    let args = format!("verify that {} belongs to {}", vendor.iban, vendor.name);
    let request = StepRequest {
        guard,
        run,
        step: &step,
        tool: ToolSpec {
            name: "bank.verify-account".into(),
            class: BANK,
        },
        args: args.as_bytes(),
        rationale: "pay no account before the bank says whose it is",
        compensation: None,
    };
    // A reply can beat the wait; then the wait ends at once and the next
    // turn reads the ledger.
    for _ in 0..2 {
        let key = match engine.begin_step(&request) {
            Ok(StepPlan::Act(ctx)) => ctx.key,
            Ok(StepPlan::Done(StepResult::Done { key, .. })) => {
                let settled = engine.effect(&key)?.and_then(|e| e.settled_ms);
                return Ok(Gate::Pass(
                    settled.ok_or("a verification with no settle time")?,
                ));
            }
            // A failure the webhook recorded is final: the ledger answers
            // with it, and the request is not sent again.
            Ok(StepPlan::Done(StepResult::Failed {
                retryable: false,
                reason,
                ..
            })) => {
                return Ok(Gate::Stop(format!(
                    "the bank could not verify the account: {reason}"
                )));
            }
            Ok(other) => {
                return Err(format!("[{}] the verification: {other:?}", vendor.name).into());
            }
            Err(e) => return Err(e.into()),
        };
        bank.verify(&key, vendor, hour);
        let reply = WaitFor::Reply { key: key.clone() };
        let waited = engine.open_wait(
            run,
            guard,
            &step,
            reply,
            None,
            "the bank answers by webhook",
        )?;
        if waited.wait.status == WaitStatus::Open {
            let line = format!(
                "[{}] approved; account verification sent under key {key}, waits for the webhook",
                vendor.name
            );
            say(hour, &line);
            return Ok(Gate::Parked);
        }
    }
    Err(format!(
        "[{}] the verification neither waited nor settled",
        vendor.name
    )
    .into())
}

/// The cooling-off: a durable timer 24 hours after the account was
/// verified (read from the ledger, so asking again names the same
/// deadline).
fn cooling_off(
    engine: &Engine,
    run: &RunId,
    guard: &Guard,
    verified_ms: u64,
    vendor: &Vendor,
    hour: u64,
) -> Result<Gate<()>, Error> {
    let step = StepId::new("cooling-off")?;
    let until = verified_ms + COOLING_OFF_MS;
    let waited = engine.open_wait(
        run,
        guard,
        &step,
        WaitFor::Timer,
        Some(until),
        "cooling-off before the first payment",
    )?;
    if waited.wait.status == WaitStatus::Open {
        say(
            hour,
            &format!("[{}] account verified; cooling off for 24 h", vendor.name),
        );
        return Ok(Gate::Parked);
    }
    Ok(Gate::Pass(()))
}

/// The payment, at the step finance approved, with exactly the approved
/// arguments (the engine refuses others).
fn pay(
    engine: &Engine,
    run: &RunId,
    guard: &Guard,
    vendor: &Vendor,
    bank: &mut Bank,
    hour: u64,
) -> Result<(), BoxError> {
    let payment = vendor.payment();
    let result = engine.step(
        &StepRequest {
            guard,
            run,
            step: &StepId::new("pay")?,
            tool: ToolSpec {
                name: "bank.pay".into(),
                class: BANK,
            },
            args: &payment,
            rationale: "finance approved it, the account is verified, the cooling-off is over",
            compensation: None,
        },
        |ctx| bank.pay(&ctx.key.encode(), vendor, engine.clock().now_ms()),
    )?;
    let StepResult::Done { key, receipt, .. } = result else {
        return Err(format!("[{}] the payment: {result:?}", vendor.name).into());
    };
    let receipt = String::from_utf8_lossy(&receipt);
    let line = format!(
        "[{}] cooling-off over: paid under key {key} ({receipt})",
        vendor.name
    );
    say(hour, &line);
    Ok(())
}

/// Ends an onboarding that must not pay: failed, never paid.
fn end_unpaid(
    engine: &Engine,
    hour: u64,
    run: &RunId,
    guard: &Guard,
    name: &str,
    reason: &str,
) -> Result<Flow, BoxError> {
    say(hour, &format!("[{name}] not paid: {reason}"));
    engine.transition(move_to(run, guard, RunState::Failed, reason))?;
    Ok(Flow::Ended)
}

/// Prints one line of the story, stamped with the simulated hour.
fn say(hour: u64, line: &str) {
    println!("hour {hour:>3}  {line}");
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

/// The invariants, from the bank's records and the engine's books.
fn check(
    engine: &Engine,
    vendors: &[Vendor],
    bank: &Bank,
    restarts: &[Restart],
    checks: &mut Checks,
) -> Result<(), BoxError> {
    let mut paid_wrong = Vec::new();
    let mut unbound = Vec::new();
    let mut early = Vec::new();
    let mut verified_wrong = Vec::new();
    let mut ends = Vec::new();
    for vendor in vendors {
        let paid = bank.payments_to(&vendor.run);
        if paid.len() != usize::from(vendor.due()) {
            paid_wrong.push(format!("{}: paid {} times", vendor.name, paid.len()));
        }
        if paid.iter().any(|p| p.args != vendor.payment()) {
            unbound.push(vendor.name.clone());
        }
        if let Some(payment) = paid.first()
            && !paid_in_order(engine, vendor, payment.at_ms)?
        {
            early.push(vendor.name.clone());
        }
        let asked = bank
            .verifications
            .values()
            .filter(|(r, _)| *r == vendor.run)
            .count();
        let approved = matches!(vendor.finance, Finance::Approve { .. });
        if asked != usize::from(approved) {
            verified_wrong.push(format!("{}: {asked} verifications", vendor.name));
        }
        let expected = if vendor.due() {
            RunState::Completed
        } else {
            RunState::Failed
        };
        let state = engine.run(&vendor.run)?.map(|r| r.state);
        if state != Some(expected) {
            ends.push(format!("{}: {state:?}", vendor.name));
        }
    }
    checks.none_of(
        "each approved, verified vendor paid exactly once; the others never",
        &paid_wrong,
    );
    checks.none_of("every payment had exactly the approved arguments", &unbound);
    checks.none_of(
        "no payment before finance's approval, the account's verification and 24 h of cooling-off",
        &early,
    );
    checks.none_of(
        "each approved vendor's account verified with one request; unapproved ones never asked",
        &verified_wrong,
    );
    checks.equal(
        "no verification request was sent twice",
        bank.verification_calls,
        bank.verifications.len(),
    );
    checks.equal(
        "a retried webhook wrote nothing",
        bank.duplicate_replies_written,
        0,
    );
    checks.none_of("every run ended: completed if paid, failed if not", &ends);
    checks.equal(
        "the service restarted twice while runs were parked",
        restarts.len(),
        RESTART_HOURS.len(),
    );
    for (restart, hour) in restarts.iter().zip(RESTART_HOURS) {
        checks.check(
            &format!(
                "the restart at hour {hour} kept every parked run parked, unleased, unclaimable"
            ),
            !restart.waiting_before.is_empty()
                && restart.waiting_after == restart.waiting_before
                && restart.leased == 0
                && !restart.claimable,
            || format!("{restart:?}"),
        );
    }
    Ok(())
}

/// True if the payment of `vendor` (made at `paid_ms`) came after
/// finance's approval of exactly it, the verification and the cooling-off
/// timer, as the books record them.
fn paid_in_order(engine: &Engine, vendor: &Vendor, paid_ms: u64) -> Result<bool, BoxError> {
    let book = engine.waits(&vendor.run)?;
    let approved = book.wait_at(&StepId::new("pay")?).is_some_and(|w| {
        matches!(w.status, WaitStatus::Approved { .. })
            && w.wait_for
                == WaitFor::Approval {
                    args_digest: digest_of(&vendor.payment()),
                    role: "finance".into(),
                }
            && w.ended_ms.is_some_and(|at| at <= paid_ms)
    });
    let cooled = book.wait_at(&StepId::new("cooling-off")?).is_some_and(|w| {
        w.status == WaitStatus::Elapsed && w.deadline_ms.is_some_and(|due| due <= paid_ms)
    });
    let effects = engine.effects(&vendor.run)?;
    let verified_ms = effects
        .iter()
        .find(|e| e.key.step().as_str() == "verify-account")
        .and_then(|e| e.settled_ms);
    let cooled_long_enough = verified_ms.is_some_and(|at| at + COOLING_OFF_MS <= paid_ms);
    Ok(approved && cooled && cooled_long_enough)
}

//! Vendor onboarding (seed 003) on the runtime: a new vendor's first
//! payment waits up to 48 hours for finance to approve exactly that payment
//! (`ctx.approval`), then the bank verifies the vendor's account and answers
//! later by webhook, then a 24-hour cooling-off timer runs (`ctx.sleep`),
//! and only then is the vendor paid, once (`ctx.step`). While a run waits it
//! holds no worker and no lease; the service restarts twice (dropped without
//! `close`, reopened) while runs are parked, and they carry on. The engine
//! reads a `ManualClock`, so five simulated days pass in an instant.
//!
//! The bank's verification is an asynchronous tool: the request is a step
//! (the bank acknowledges it at once, under the step's idempotency key), and
//! its answer a signal the webhook sends (`Engine::signal`), which the agent
//! waits for (`ctx.signal`). The engine-API version of this example settled
//! the request's ledger entry with the webhook (`deliver_reply`) and waited
//! for that reply (`WaitFor::Reply`); the runtime has no step that waits for
//! its own reply, so the answer travels as a signal. A webhook the bank
//! retries is then kept in the run's inbox, taken by no wait, where
//! `deliver_reply` wrote nothing.
//!
//! Run it with `cargo run --example vendor_onboarding` (`-- --quick` for the
//! three scripted vendors only, `-- --dir PATH` to keep the database).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actum::books::{
    Outcome, RunId, RunState, StepId, ToolClass, WaitFor, WaitStatus, WorkerId, digest_of,
};
use actum::engine::{Engine, EngineOptions};
use actum::runtime::{Approval, Deadline, Fail, RunCtx, Runtime, Tool};
use actum::{Clock, Error, FsStorage, ManualClock};
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
/// The hours at which the service restarts.
const RESTART_HOURS: [u64; 2] = [6, 45];
/// By then every run has ended, or the example failed.
const LAST_HOUR: u64 = 120;
/// The bank deduplicates verification requests and payments by key.
const BANK: ToolClass = ToolClass::Idempotent {
    dedup_window_ms: 72 * HOUR_MS,
};
/// The signal that carries the bank's answer, and the wait that takes it.
const VERIFIED: &str = "account-verified";
/// The answer of a verification that found the vendor's account.
const ACCOUNT_OK: &[u8] = b"account holder matches";

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

/// A vendor to onboard, as the procurement system holds it, with what the
/// world will do with it.
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

    /// The run's input: what the agent starts from.
    fn input(&self) -> String {
        format!("{}\n{}\n{}", self.name, self.iban, self.cents)
    }

    fn payment(&self) -> Vec<u8> {
        payment_args(&self.name, &self.iban, self.cents)
    }

    /// Whether the vendor should end up paid (once).
    fn due(&self) -> bool {
        matches!(self.finance, Finance::Approve { .. }) && self.account_ok
    }
}

/// The first payment's arguments: what finance approves, byte for byte.
fn payment_args(name: &str, iban: &str, cents: u64) -> Vec<u8> {
    format!(
        "pay USD {}.{:02} to {name} ({iban})",
        cents / 100,
        cents % 100
    )
    .into_bytes()
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

/// The bank: verifies accounts (acknowledging the request at once and
/// answering later, by webhook) and pays, deduplicating both by key.
#[derive(Debug, Default)]
struct Bank {
    /// How long it takes to verify each vendor's account.
    reply_after_hours: BTreeMap<RunId, u64>,
    /// Verification requests by key: the vendor and the hour the webhook
    /// is due.
    verifications: BTreeMap<String, (RunId, u64)>,
    /// Verification requests received, duplicates included.
    verification_calls: usize,
    /// Payments by key.
    payments: BTreeMap<String, Payment>,
    /// Webhook retries that no run took.
    duplicate_replies_ignored: usize,
    /// Webhook retries a run took as a second answer (must stay 0).
    duplicate_replies_taken: usize,
}

impl Bank {
    /// Takes a verification request; the answer comes by webhook.
    fn verify(&mut self, key: &str, run: &RunId, hour: u64) -> Outcome {
        self.verification_calls += 1;
        let due = hour + self.reply_after_hours.get(run).copied().unwrap_or(1);
        self.verifications
            .entry(key.to_string())
            .or_insert((run.clone(), due));
        Outcome::Confirmed {
            receipt: format!("verification {key} accepted").into_bytes(),
        }
    }

    /// Pays what `args` says under `key`, or answers the payment that key
    /// made.
    fn pay(&mut self, key: &str, run: &RunId, args: &[u8], now_ms: u64) -> Outcome {
        let number = self.payments.len() + 1;
        let payment = self
            .payments
            .entry(key.to_string())
            .or_insert_with(|| Payment {
                run: run.clone(),
                args: args.to_vec(),
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

type Shared = Arc<Mutex<Bank>>;

fn lock(bank: &Shared) -> MutexGuard<'_, Bank> {
    bank.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The simulated hour the clock shows.
fn hour_of(clock: &ManualClock) -> u64 {
    (clock.now_ms() - START_MS) / HOUR_MS
}

/// The onboarding agent, written as if nothing ever failed or waited. It
/// reads the clock only to stamp what it prints; no decision depends on it.
fn onboard(
    bank: Shared,
    clock: Arc<ManualClock>,
) -> impl Fn(&mut RunCtx<'_>) -> Result<Vec<u8>, Fail> + Send + Sync + 'static {
    move |ctx| {
        let hour = hour_of(&clock);
        let run = ctx.run_id().clone();
        let input = String::from_utf8_lossy(ctx.input()).into_owned();
        let mut lines = input.lines();
        let (Some(name), Some(iban), Some(cents)) = (lines.next(), lines.next(), lines.next())
        else {
            return Err(Fail::failed(
                "a vendor's input is its name, IBAN and amount",
            ));
        };
        let cents: u64 = cents.parse().map_err(|_| "an amount is in cents")?;
        let stop = |why: String| {
            say(hour, &format!("[{name}] not paid: {why}"));
            Err(Fail::failed(why))
        };
        // The payment step is where the approval waits: the engine lets
        // that step act only once approved, and only with these arguments.
        let payment = payment_args(name, iban, cents);
        if !ctx.replaying() {
            let text = String::from_utf8_lossy(&payment);
            say(
                hour,
                &format!("[{name}] waits up to 48 h for finance to approve \"{text}\""),
            );
        }
        match ctx.approval("pay", &payment, "finance", Deadline::In(APPROVAL_WINDOW_MS))? {
            Approval::Approved { .. } => {}
            Approval::Rejected { approver, note } => {
                return stop(format!("finance ({approver}) rejected it: {note}"));
            }
            Approval::Expired => {
                return stop("finance did not decide within 48 h; the approval expired".into());
            }
        }
        let verifier = Tool::new("bank.verify-account", BANK);
        let request = format!("verify that {iban} belongs to {name}");
        ctx.step("verify-account", &verifier, request.as_bytes(), |call| {
            let key = &call.idempotency_key;
            say(hour, &format!("[{name}] approved; account verification sent under key {key}, waits for the webhook"));
            lock(&bank).verify(key, &run, hour)
        })?;
        let answer = ctx.signal(VERIFIED, None)?.unwrap_or_default();
        if answer != ACCOUNT_OK {
            let answer = String::from_utf8_lossy(&answer);
            return stop(format!("the bank could not verify the account: {answer}"));
        }
        if !ctx.replaying() {
            say(
                hour,
                &format!("[{name}] account verified; cooling off for 24 h"),
            );
        }
        ctx.sleep("cooling-off", Deadline::In(COOLING_OFF_MS))?;
        let payer = Tool::new("bank.pay", BANK);
        ctx.step("pay", &payer, &payment, |call| {
            let key = &call.idempotency_key;
            let outcome = lock(&bank).pay(key, &run, &payment, clock.now_ms());
            if let Outcome::Confirmed { receipt } = &outcome {
                let receipt = String::from_utf8_lossy(receipt);
                say(
                    hour,
                    &format!("[{name}] cooling-off over: paid under key {key} ({receipt})"),
                );
            }
            outcome
        })
    }
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

/// A process of the service: an engine and a runtime serving the agent.
fn deploy(dir: &Path, clock: &Arc<ManualClock>, bank: &Shared) -> Result<Runtime, BoxError> {
    let engine = Engine::open_with(
        Arc::new(FsStorage::new()),
        clock.clone(),
        dir,
        EngineOptions::default(),
    )?;
    let runtime = Runtime::new(Arc::new(engine));
    runtime.register("vendor-onboard", "14", onboard(bank.clone(), clock.clone()))?;
    Ok(runtime)
}

/// The example: hour by hour, the vendors' runs from creation to payment.
fn onboarding(cli: &Cli, dir: &Path, checks: &mut Checks) -> Result<(), BoxError> {
    let clock = Arc::new(ManualClock::new(START_MS));
    let vendors = vendors(cli.quick)?;
    let erp: BTreeMap<RunId, Vendor> = vendors.iter().map(|v| (v.run.clone(), v.clone())).collect();
    let bank: Shared = Arc::default();
    lock(&bank).reply_after_hours = vendors
        .iter()
        .map(|v| (v.run.clone(), v.reply_after_hours))
        .collect();
    let mut restarts = Vec::new();
    let mut runtime = deploy(dir, &clock, &bank)?;
    say(0, &format!("{} vendors to onboard", vendors.len()));
    for vendor in &vendors {
        runtime.start(
            "vendor-onboard",
            vendor.run.as_str(),
            vendor.input().as_bytes(),
        )?;
    }
    for hour in 0..=LAST_HOUR {
        finance_desk(runtime.engine(), &vendors, hour)?;
        webhooks(runtime.engine(), &erp, &mut lock(&bank), hour)?;
        work(&runtime, erp.len())?;
        if RESTART_HOURS.contains(&hour) {
            let (reopened, restart) = restart(runtime, dir, &clock, &bank, hour)?;
            runtime = reopened;
            restarts.push(restart);
        }
        if all_ended(runtime.engine(), &vendors)? {
            say(hour, "every run has ended");
            break;
        }
        clock.advance_ms(HOUR_MS);
    }
    println!("== the checks");
    check(runtime.engine(), &vendors, &lock(&bank), &restarts, checks)
}

/// The worker drains the queue: every run claimable now goes through the
/// agent, until it ends or parks.
fn work(runtime: &Runtime, runs: usize) -> Result<(), BoxError> {
    let worker = WorkerId::new("onboarding-worker")?;
    for _ in 0..4 * runs + 4 {
        if runtime.work_once(&worker)?.is_none() {
            return Ok(());
        }
    }
    Err("the workers did not drain the queue".into())
}

/// A deploy: the engine is dropped without `close` (a crash, to it) while
/// runs are parked, and reopened.
fn restart(
    runtime: Runtime,
    dir: &Path,
    clock: &Arc<ManualClock>,
    bank: &Shared,
    hour: u64,
) -> Result<(Runtime, Restart), BoxError> {
    let waiting_before = waiting(runtime.engine())?;
    drop(runtime);
    let runtime = deploy(dir, clock, bank)?;
    let engine = runtime.engine();
    let after = engine.runs(None, None, 1000)?;
    let parked: Vec<_> = after.iter().filter(|r| is_waiting(r.state)).collect();
    let leased = parked.iter().filter(|r| r.lease.is_some()).count();
    // A probe: an engine-level claim by anyone, which must find nothing.
    let claimable = engine
        .claim_next(&WorkerId::new("probe")?, 60_000)?
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
    Ok((runtime, restart))
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

/// The bank's webhook delivers the verifications due this hour, as a
/// signal to the run; a retried delivery is taken by no wait.
fn webhooks(
    engine: &Engine,
    erp: &BTreeMap<RunId, Vendor>,
    bank: &mut Bank,
    hour: u64,
) -> Result<(), BoxError> {
    let due: Vec<RunId> = bank
        .verifications
        .values()
        .filter(|(_, at)| *at == hour)
        .map(|(run, _)| run.clone())
        .collect();
    for run in due {
        let vendor = erp.get(&run).ok_or("a verification of an unknown vendor")?;
        let answer: &[u8] = if vendor.account_ok {
            ACCOUNT_OK
        } else {
            b"the account holder is not the vendor"
        };
        let sent = engine.signal(&run, VERIFIED, answer, "bank-webhook")?;
        let said = String::from_utf8_lossy(answer);
        let wakes = if sent.taken_by.is_some() {
            "the run wakes"
        } else {
            "no run was waiting"
        };
        say(
            hour,
            &format!("the bank's webhook for {}: {said}; {wakes}", vendor.name),
        );
        if vendor.duplicate_webhook {
            let again = engine.signal(&run, VERIFIED, answer, "bank-webhook")?;
            if again.taken_by.is_none() {
                bank.duplicate_replies_ignored += 1;
                say(hour, "the webhook fires again: no wait takes it");
            } else {
                bank.duplicate_replies_taken += 1;
            }
        }
    }
    Ok(())
}

/// Prints one line of the story, stamped with the simulated hour.
fn say(hour: u64, line: &str) {
    println!("hour {hour:>3}  {line}");
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
    let retried = vendors
        .iter()
        .filter(|v| v.duplicate_webhook && bank.verifications.values().any(|(r, _)| *r == v.run))
        .count();
    checks.equal(
        "a retried webhook was taken by no wait (each run took one answer)",
        (bank.duplicate_replies_taken, bank.duplicate_replies_ignored),
        (0, retried),
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
/// finance's approval of exactly it, the bank's positive answer and the
/// cooling-off timer, as the books record them.
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
    let verified_ms = book
        .wait_at(&StepId::new(VERIFIED)?)
        .and_then(|w| match &w.status {
            WaitStatus::Signalled { signal } if signal.payload == ACCOUNT_OK => w.ended_ms,
            _ => None,
        });
    let cooled = book.wait_at(&StepId::new("cooling-off")?).is_some_and(|w| {
        w.status == WaitStatus::Elapsed && w.deadline_ms.is_some_and(|due| due <= paid_ms)
    });
    let cooled_long_enough = verified_ms.is_some_and(|at| at + COOLING_OFF_MS <= paid_ms);
    Ok(approved && cooled && cooled_long_enough)
}

//! A shop that crashes between payment and order, on the runtime. The
//! shop's agent is one function: charge the customer's card, then place the
//! order with the warehouse (`ctx.step` twice; the runtime makes each intent
//! durable before the call and records the outcome after). The process dies
//! in the worst place: the payment provider has charged the card, and the
//! engine never heard back. Reopened, the engine releases the dead worker's
//! lease (the directory lock proves that process gone), so the runtime
//! claims the run again at once under a larger fencing token and calls the
//! agent from the top; the charge is resent with the SAME idempotency key,
//! the provider recognises it and charges nothing new, and the order is
//! placed once. Other orders crash elsewhere (after the intent, after the
//! charge was recorded, after the order was sent): every card is charged
//! exactly once and every order placed exactly once.
//!
//! A crash is the process's disk dying at that instant ([`MortalDisk`]):
//! the runtime calls the agent inside the engine's calls, so the engine
//! cannot be dropped there; a dead disk makes the engine's next write fail,
//! which leaves the database as a killed process would. The engine is then
//! dropped without `close` and reopened on a new disk.
//!
//! Run it with `cargo run --example shop_crash` (`-- --quick` for three
//! orders, `-- --dir PATH` to keep the database).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actum::ManualClock;
use actum::books::{EffectStatus, FencingToken, Outcome, RunId, RunState, ToolClass, WorkerId};
use actum::engine::{Engine, EngineOptions};
use actum::runtime::{Call, Fail, RunCtx, Runtime, Tool};
use actum_examples::{BoxError, Checks, Cli, MortalDisk, XorShift, euros, main_of};

/// 2026-11-27 10:00 UTC: the engine's clock starts here and moves only
/// when the example says so.
const START_MS: u64 = 1_795_773_600_000;
/// Both services deduplicate by key for a day.
const IDEMPOTENT: ToolClass = ToolClass::Idempotent {
    dedup_window_ms: 86_400_000,
};

/// Runs the example; the exit code says whether every invariant held.
fn main() -> ExitCode {
    main_of("shop_crash", shop)
}

/// Where the process dies, the first time it runs the order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Crash {
    Never,
    /// The charge's intent is durable; the provider was never called.
    AfterChargeIntent,
    /// The provider charged the card; the engine never heard back.
    AfterChargeSent,
    /// The charge is recorded; the order not begun.
    AfterChargeRecorded,
    /// The warehouse took the order; the engine never heard back.
    AfterOrderSent,
}

/// A customer's order, and where its first process dies.
#[derive(Clone, Debug)]
struct Order {
    run: RunId,
    item: &'static str,
    cents: u64,
    crash: Crash,
}

impl Order {
    /// The run's input: what the agent starts from.
    fn input(&self) -> String {
        format!("{} {}", self.cents, self.item)
    }
}

/// The charge's arguments.
fn charge_args(run: &RunId, cents: u64) -> Vec<u8> {
    format!("charge card 4242 EUR {} for {run}", euros(cents)).into_bytes()
}

/// The warehouse order's arguments.
fn shipment_args(run: &RunId, item: &str) -> Vec<u8> {
    format!("ship one {item} for {run}").into_bytes()
}

/// Three scripted orders (the crash between payment and order first),
/// then, unless `--quick`, twenty-seven more from a seeded generator.
fn orders(quick: bool) -> Result<Vec<Order>, BoxError> {
    const ITEMS: [&str; 6] = [
        "desk lamp",
        "kettle",
        "backpack",
        "chess set",
        "teapot",
        "umbrella",
    ];
    let order = |n: usize, cents, crash| -> Result<Order, BoxError> {
        Ok(Order {
            run: RunId::new(format!("order-{n:04}"))?,
            item: ITEMS[n % ITEMS.len()],
            cents,
            crash,
        })
    };
    let mut orders = vec![
        order(1, 4_990, Crash::AfterChargeSent)?,
        order(2, 2_450, Crash::AfterChargeRecorded)?,
        order(3, 12_900, Crash::Never)?,
    ];
    if quick {
        return Ok(orders);
    }
    let mut rng = XorShift::new(0x5b0b_c4a5);
    for n in 4..=30 {
        let crash = match rng.below(5) {
            0 => Crash::Never,
            1 => Crash::AfterChargeIntent,
            2 => Crash::AfterChargeSent,
            3 => Crash::AfterChargeRecorded,
            _ => Crash::AfterOrderSent,
        };
        orders.push(order(n, 500 + rng.below(20_000), crash)?);
    }
    Ok(orders)
}

/// An outside service that deduplicates requests by idempotency key, as
/// payment providers do (for a day; this one keeps every key, and the
/// runtime resends only inside the window the tool declares): it records
/// every request and every application.
#[derive(Debug, Default)]
struct Service {
    prefix: &'static str,
    /// Every request: the key it carried.
    requests: Vec<String>,
    /// What was actually done: the key, the arguments, the reference.
    applied: Vec<(String, Vec<u8>, String)>,
    /// Requests answered with an earlier application's reference.
    deduplicated: usize,
}

impl Service {
    fn new(prefix: &'static str) -> Service {
        Service {
            prefix,
            ..Service::default()
        }
    }

    /// Applies `args` under `key`, unless the key was seen: then answers
    /// the first application (or refuses other arguments under it).
    fn apply(&mut self, key: &str, args: &[u8]) -> (Outcome, bool) {
        self.requests.push(key.to_string());
        if let Some((_, first, reference)) = self.applied.iter().find(|(k, _, _)| k == key) {
            if first != args {
                let reason = format!("key {key} was used with other arguments");
                return (
                    Outcome::Failed {
                        retryable: false,
                        reason,
                    },
                    false,
                );
            }
            self.deduplicated += 1;
            let receipt = reference.clone().into_bytes();
            return (Outcome::Confirmed { receipt }, true);
        }
        let reference = format!("{}_{:04}", self.prefix, self.applied.len() + 1);
        self.applied
            .push((key.to_string(), args.to_vec(), reference.clone()));
        (
            Outcome::Confirmed {
                receipt: reference.into_bytes(),
            },
            false,
        )
    }

    /// What was applied for `run`'s keys.
    fn applied_for(&self, run: &RunId) -> Vec<&(String, Vec<u8>, String)> {
        let prefix = format!("{run}/");
        self.applied
            .iter()
            .filter(|(k, _, _)| k.starts_with(&prefix))
            .collect()
    }

    /// The distinct keys `run`'s requests carried.
    fn keys_for(&self, run: &RunId) -> BTreeSet<&String> {
        let prefix = format!("{run}/");
        self.requests
            .iter()
            .filter(|k| k.starts_with(&prefix))
            .collect()
    }
}

/// Everything outside the engine; it outlives every process.
#[derive(Debug)]
struct World {
    provider: Service,
    warehouse: Service,
    /// Where each order's first process dies.
    crash_at: BTreeMap<RunId, Crash>,
    /// Orders whose process already died once (it dies only the first time).
    crashed: BTreeSet<RunId>,
    /// The fencing token each run's agent last ran under.
    tokens: BTreeMap<RunId, FencingToken>,
    /// After each restart, with the dead worker's lease still unexpired by
    /// the clock: the crashed run, and whether the restarted process ran it
    /// under a larger token than the dead worker's.
    retaken: Vec<(RunId, bool)>,
}

impl World {
    /// True, once per order, when its process is to die at `point`.
    fn dies_at(&mut self, run: &RunId, point: Crash) -> bool {
        self.crash_at.get(run) == Some(&point) && self.crashed.insert(run.clone())
    }
}

type Shared = Arc<Mutex<World>>;

fn lock(world: &Shared) -> MutexGuard<'_, World> {
    world.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The shop's agent, written as if nothing ever failed. `disk` is its
/// process's disk, which the world kills where the order's crash is.
fn shop_agent(
    world: Shared,
    disk: MortalDisk,
) -> impl Fn(&mut RunCtx<'_>) -> Result<Vec<u8>, Fail> + Send + Sync + 'static {
    move |ctx| {
        let run = ctx.run_id().clone();
        lock(&world).tokens.insert(run.clone(), ctx.token());
        let input = String::from_utf8_lossy(ctx.input()).into_owned();
        let (cents, item) = input.split_once(' ').ok_or("an order names its price")?;
        let cents: u64 = cents.parse().map_err(|_| "an order's price is in cents")?;
        let charge = Tool::new("psp.charge", IDEMPOTENT);
        let args = charge_args(&run, cents);
        let mut sent = false;
        let receipt = ctx.step("charge", &charge, &args, |call| {
            sent = true;
            let mut w = lock(&world);
            if w.dies_at(&run, Crash::AfterChargeIntent) {
                println!(
                    "   charge intent {} is durable; the process dies before calling the provider",
                    call.key
                );
                disk.kill();
                return Outcome::Unknown {
                    reason: "the process died".into(),
                };
            }
            let (outcome, deduplicated) = w.provider.apply(&call.idempotency_key, &args);
            tell("charge", call, &outcome, deduplicated, "the provider");
            if w.dies_at(&run, Crash::AfterChargeSent) {
                println!("   the process dies before the charge's outcome is recorded");
                disk.kill();
            }
            outcome
        })?;
        if !sent {
            let receipt = String::from_utf8_lossy(&receipt);
            println!("   charge: in the ledger ({receipt}); the provider is not called");
        }
        if lock(&world).dies_at(&run, Crash::AfterChargeRecorded) {
            println!("   the process dies after the charge was recorded, before the order");
            disk.kill();
        }
        let warehouse = Tool::new("warehouse.order", IDEMPOTENT);
        let shipment = shipment_args(&run, item);
        let reference = ctx.step("place-order", &warehouse, &shipment, |call| {
            let mut w = lock(&world);
            let (outcome, deduplicated) = w.warehouse.apply(&call.idempotency_key, &shipment);
            tell("order", call, &outcome, deduplicated, "the warehouse");
            if w.dies_at(&run, Crash::AfterOrderSent) {
                println!("   the process dies before the order's outcome is recorded");
                disk.kill();
            }
            outcome
        })?;
        Ok(reference)
    }
}

/// Says what a call to `service` did: a first send, or a resend with the
/// same key that the service recognised.
fn tell(what: &str, call: &Call<'_>, outcome: &Outcome, deduplicated: bool, service: &str) {
    let reference = match outcome {
        Outcome::Confirmed { receipt } => String::from_utf8_lossy(receipt).into_owned(),
        Outcome::Failed { reason, .. } | Outcome::Unknown { reason } => reason.clone(),
    };
    match (call.resend, deduplicated) {
        (false, _) => println!("   {what} sent under key {}: {reference}", call.key),
        (true, true) => println!(
            "   {what} resent with the SAME key {}: {service} recognises it, nothing new is done ({reference})",
            call.key
        ),
        (true, false) => println!(
            "   {what} resent with the same key {}: {service} had never received it, so it acts now ({reference})",
            call.key
        ),
    }
}

/// One process of the shop's service: its disk, and a runtime over an
/// engine on that disk serving the agent.
struct Process {
    disk: MortalDisk,
    runtime: Runtime,
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
    runtime.register("shop", "1", shop_agent(world.clone(), disk.clone()))?;
    Ok(Process { disk, runtime })
}

/// The worker drains the queue; false if the process died on the way.
fn serve(process: &Process) -> Result<bool, BoxError> {
    let worker = WorkerId::new("shop-worker")?;
    for _ in 0..100 {
        match process.runtime.work_once(&worker) {
            Ok(Some((run, driven))) => println!("   [{run}] {driven:?}"),
            Ok(None) => return Ok(true),
            Err(_) if process.disk.is_dead() => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    Err("the worker did not drain the queue".into())
}

/// The example: each order, its crash and its restart.
fn shop(cli: &Cli, dir: &Path, checks: &mut Checks) -> Result<(), BoxError> {
    let clock = Arc::new(ManualClock::new(START_MS));
    let orders = orders(cli.quick)?;
    let world: Shared = Arc::new(Mutex::new(World {
        provider: Service::new("ch"),
        warehouse: Service::new("wh"),
        crash_at: orders.iter().map(|o| (o.run.clone(), o.crash)).collect(),
        crashed: BTreeSet::new(),
        tokens: BTreeMap::new(),
        retaken: Vec::new(),
    }));
    let mut process = boot(dir, &clock, &world)?;
    for order in &orders {
        println!(
            "== {}: one {} for EUR {}",
            order.run,
            order.item,
            euros(order.cents)
        );
        process
            .runtime
            .start("shop", order.run.as_str(), order.input().as_bytes())?;
        if !serve(&process)? {
            process = restart(process, dir, &clock, &world, &order.run)?;
        }
        clock.advance_ms(60_000);
    }
    let w = lock(&world);
    statement(&orders, &w);
    println!("== the checks");
    check(process.runtime.engine(), &orders, &w, checks)
}

/// The process died: everything it held in memory went with it (its engine
/// is dropped without `close`). A new one opens the database; no clock
/// moves, yet the run is claimed again at once: the open released the lease.
fn restart(
    dead: Process,
    dir: &Path,
    clock: &Arc<ManualClock>,
    world: &Shared,
    run: &RunId,
) -> Result<Process, BoxError> {
    drop(dead);
    let dead_token = lock(world).tokens.get(run).copied();
    let process = boot(dir, clock, world)?;
    let recovery = process.runtime.engine().recovery();
    println!(
        "   restarted: {} log records replayed, {} lease of the dead worker released",
        recovery.replayed_records, recovery.leases_released,
    );
    if !serve(&process)? {
        return Err(format!("{run} crashed twice").into());
    }
    let mut w = lock(world);
    let token = w.tokens.get(run).copied();
    println!(
        "   the run was claimed again under token {}",
        token.map_or(0, |t| t.0)
    );
    w.retaken.push((run.clone(), token > dead_token));
    Ok(process)
}

/// Prints the card statement: what the provider charged, order by order.
fn statement(orders: &[Order], world: &World) {
    println!(
        "== the card statement: {} charges for {} orders",
        world.provider.applied.len(),
        orders.len()
    );
    for order in orders {
        let charges = world.provider.applied_for(&order.run);
        let references: Vec<&str> = charges.iter().map(|(_, _, r)| r.as_str()).collect();
        println!(
            "   {}  EUR {:>7}  charged {} time(s)  {}",
            order.run,
            euros(order.cents),
            charges.len(),
            references.join(" ")
        );
    }
}

/// The invariants, from the provider's and the warehouse's records and
/// the engine's books.
fn check(
    engine: &Engine,
    orders: &[Order],
    world: &World,
    checks: &mut Checks,
) -> Result<(), BoxError> {
    let mut charged = Vec::new();
    let mut shipped = Vec::new();
    let mut keys = Vec::new();
    let mut books = Vec::new();
    for order in orders {
        let charges = world.provider.applied_for(&order.run);
        let args = charge_args(&order.run, order.cents);
        if charges.len() != 1 || charges.iter().any(|(_, a, _)| *a != args) {
            charged.push(format!("{}: {} charges", order.run, charges.len()));
        }
        let shipments = world.warehouse.applied_for(&order.run);
        if shipments.len() != 1 {
            shipped.push(format!("{}: {} orders", order.run, shipments.len()));
        }
        let (charge_keys, order_keys) = (
            world.provider.keys_for(&order.run),
            world.warehouse.keys_for(&order.run),
        );
        if charge_keys.len() != 1 || order_keys.len() != 1 {
            keys.push(format!("{}: {charge_keys:?} {order_keys:?}", order.run));
        }
        if !books_agree(engine, order, world)? {
            books.push(order.run.to_string());
        }
    }
    checks.none_of(
        "every card charged exactly once, for its order's amount",
        &charged,
    );
    checks.none_of("every order placed exactly once", &shipped);
    checks.none_of("every resend carried the same key as the first send", &keys);
    checks.none_of(
        "the ledger holds each charge's and each order's receipt; every run completed",
        &books,
    );
    let expected_total: u64 = orders.iter().map(|o| o.cents).sum();
    // What the card was charged, charge by charge, as the provider did it.
    let amount_of = |key: &String| {
        orders
            .iter()
            .find(|o| key.starts_with(&format!("{}/", o.run)))
            .map_or(0, |o| o.cents)
    };
    let statement: u64 = world
        .provider
        .applied
        .iter()
        .map(|(key, _, _)| amount_of(key))
        .sum();
    checks.equal(
        "the card statement totals the orders, cent for cent",
        statement,
        expected_total,
    );
    let sent_then_crashed = |point| orders.iter().filter(|o| o.crash == point).count();
    checks.equal(
        "the provider recognised exactly the resends of charges it had already made",
        world.provider.deduplicated,
        sent_then_crashed(Crash::AfterChargeSent),
    );
    checks.equal(
        "the warehouse recognised exactly the resends of orders it had already taken",
        world.warehouse.deduplicated,
        sent_then_crashed(Crash::AfterOrderSent),
    );
    let crashed: Vec<(RunId, bool)> = orders
        .iter()
        .filter(|o| o.crash != Crash::Never)
        .map(|o| (o.run.clone(), true))
        .collect();
    checks.equal(
        "after every crash, the restarted process claimed the run at once, under a larger token",
        world.retaken.clone(),
        crashed,
    );
    checks.check(
        "the scripted crash between payment and order happened",
        orders
            .first()
            .is_some_and(|o| o.crash == Crash::AfterChargeSent && world.crashed.contains(&o.run)),
        || "it did not".into(),
    );
    Ok(())
}

/// True if the run completed and its ledger's charge and order carry the
/// references the provider and the warehouse gave.
fn books_agree(engine: &Engine, order: &Order, world: &World) -> Result<bool, BoxError> {
    let completed = engine
        .run(&order.run)?
        .is_some_and(|r| r.state == RunState::Completed);
    let effects = engine.effects(&order.run)?;
    let receipt_of = |step: &str| {
        effects
            .iter()
            .filter(|e| e.key.step().as_str() == step)
            .map(|e| match &e.status {
                EffectStatus::Confirmed { receipt } => Some((e.key.encode(), receipt.clone())),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let applied = |service: &Service| -> Vec<Option<(String, Vec<u8>)>> {
        service
            .applied_for(&order.run)
            .into_iter()
            .map(|(key, _, reference)| Some((key.clone(), reference.clone().into_bytes())))
            .collect()
    };
    Ok(completed
        && receipt_of("charge") == applied(&world.provider)
        && receipt_of("place-order") == applied(&world.warehouse))
}

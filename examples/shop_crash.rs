//! A shop that crashes between payment and order, on actum. The shop's
//! agent charges the customer's card, then places the order with the
//! warehouse, each through the engine's step ceremony (intent durable
//! before the call, outcome recorded after). The process dies in the worst
//! place: the payment provider has charged the card, and the engine never
//! heard back. Reopened, the engine releases the dead worker's lease (the
//! directory lock proves that process gone), so the run is claimed again
//! at once under a larger fencing token; the next worker resends the charge
//! with the SAME idempotency key, the provider recognises it and charges nothing
//! new, and the order is placed once. Other orders crash elsewhere (after
//! the intent, after the charge was recorded, after the order was sent):
//! every card is charged exactly once and every order placed exactly once.
//!
//! Run it with `cargo run --example shop_crash` (`-- --quick` for three
//! orders, `-- --dir PATH` to keep the database).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use actum::books::{
    Command, CreateRun, EffectStatus, Guard, Outcome, RunId, RunState, StepId, ToolClass,
    Transition, WorkerId, digest_of,
};
use actum::engine::{EffectCtx, LeaseGrant, StepPlan, StepRequest, StepResult, ToolSpec};
use actum::{Engine, EngineOptions, Error, FsStorage, ManualClock};
use actum_examples::{BoxError, Checks, Cli, XorShift, euros, main_of};

/// 2026-11-27 10:00 UTC: the engine's clock starts here and moves only
/// when the example says so.
const START_MS: u64 = 1_795_773_600_000;
/// A worker's lease: how long a run stays with a worker that stops
/// renewing it. A crash frees it at once: the next open releases it.
const LEASE_MS: u64 = 30_000;
/// The provider and the warehouse remember a key for a day.
const DEDUP_MS: u64 = 86_400_000;
/// Both services deduplicate by key within the window.
const IDEMPOTENT: ToolClass = ToolClass::Idempotent {
    dedup_window_ms: DEDUP_MS,
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

/// A customer's order.
#[derive(Clone, Debug)]
struct Order {
    run: RunId,
    item: &'static str,
    cents: u64,
    crash: Crash,
}

impl Order {
    /// The charge's arguments.
    fn charge(&self) -> Vec<u8> {
        format!(
            "charge card 4242 EUR {} for {}",
            euros(self.cents),
            self.run
        )
        .into_bytes()
    }

    /// The warehouse order's arguments.
    fn shipment(&self) -> Vec<u8> {
        format!("ship one {} for {}", self.item, self.run).into_bytes()
    }
}

/// Three scripted orders (the crash between payment and order first),
/// then, unless `--quick`, twenty-seven more from a seeded generator.
fn orders(quick: bool) -> Result<Vec<Order>, Error> {
    const ITEMS: [&str; 6] = [
        "desk lamp",
        "kettle",
        "backpack",
        "chess set",
        "teapot",
        "umbrella",
    ];
    let order = |n: usize, cents, crash| -> Result<Order, Error> {
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
/// engine resends only inside the window the tool declares): it records
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

/// Everything outside the engine.
#[derive(Debug)]
struct World {
    provider: Service,
    warehouse: Service,
    /// Orders whose process already died once (it dies only the first time).
    crashed: BTreeSet<RunId>,
    /// Claims made right after each restart, with the dead worker's lease
    /// still unexpired by the clock: the run claimed, and whether under a
    /// larger token than the dead worker's.
    retaken: Vec<(RunId, bool)>,
}

/// How one pass of the agent over a claimed run ended.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Ended,
    /// The process died holding the lease.
    Crashed,
}

/// The example: each order, its crash and its restart.
fn shop(cli: &Cli, dir: &Path, checks: &mut Checks) -> Result<(), BoxError> {
    let clock = Arc::new(ManualClock::new(START_MS));
    let orders = orders(cli.quick)?;
    let mut world = World {
        provider: Service::new("ch"),
        warehouse: Service::new("wh"),
        crashed: BTreeSet::new(),
        retaken: Vec::new(),
    };
    let mut engine = open(dir, &clock)?;
    for order in &orders {
        engine = sell(engine, dir, &clock, order, &mut world)?;
        clock.advance_ms(60_000);
    }
    statement(&orders, &world);
    println!("== the checks");
    check(&engine, &orders, &world, checks)?;
    engine.close()?;
    Ok(())
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

/// One order: the run is created and claimed; if the process dies, the
/// engine is reopened and the run claimed again at once (the open released
/// the dead worker's lease). Returns the engine (reopened if it crashed).
fn sell(
    mut engine: Engine,
    dir: &Path,
    clock: &Arc<ManualClock>,
    order: &Order,
    world: &mut World,
) -> Result<Engine, BoxError> {
    println!(
        "== {}: one {} for EUR {}",
        order.run,
        order.item,
        euros(order.cents)
    );
    engine.create_run(CreateRun {
        run: order.run.clone(),
        input_digest: digest_of(&order.charge()),
        agent_version: "shop-agent 1.0".into(),
        trace_id: format!("trace-{}", order.run),
        parent: None,
        input: None,
    })?;
    let worker = WorkerId::new("shop-worker")?;
    let lease = engine
        .claim_next(&worker, LEASE_MS)?
        .ok_or("nothing to claim")?;
    if shop_agent(&engine, &lease, order, world)? == Flow::Ended {
        return Ok(engine);
    }
    // The process is gone: everything the engine held in memory with it.
    // Dropping without `close` is exactly that, to the engine.
    drop(engine);
    let dead_token = lease.guard.token;
    engine = open(dir, clock)?;
    // No clock moves: the open released the lease, so the run is free now.
    let lease = engine
        .claim_next(&worker, LEASE_MS)?
        .ok_or("the crashed order is not claimable")?;
    world
        .retaken
        .push((lease.run.clone(), lease.guard.token > dead_token));
    println!(
        "   restarted: {} log records replayed, {} lease of the dead worker released; the run \
         is claimed again at once under token {}",
        engine.recovery().replayed_records,
        engine.recovery().leases_released,
        lease.guard.token.0
    );
    if shop_agent(&engine, &lease, order, world)? != Flow::Ended {
        return Err(format!("{} crashed twice", order.run).into());
    }
    Ok(engine)
}

/// True, once per order, when its process is to die at `point`.
fn dies_at(world: &mut World, order: &Order, point: Crash) -> bool {
    order.crash == point && world.crashed.insert(order.run.clone())
}

/// One pass of the shop's agent over its claimed run. It starts from the
/// top every time: each step asks the engine, which answers from the books
/// what is already done, and says when to resend with the same key.
fn shop_agent(
    engine: &Engine,
    lease: &LeaseGrant,
    order: &Order,
    world: &mut World,
) -> Result<Flow, BoxError> {
    let (run, guard) = (&lease.run, &lease.guard);
    if engine.run(run)?.map(|r| r.state) == Some(RunState::Pending) {
        engine.transition(move_to(
            run,
            guard,
            RunState::Running,
            "the customer checked out",
        ))?;
    }
    let step = StepId::new("charge")?;
    let args = order.charge();
    let charge = StepRequest {
        guard,
        run,
        step: &step,
        tool: ToolSpec {
            name: "psp.charge".into(),
            class: IDEMPOTENT,
        },
        args: &args,
        rationale: "the customer confirmed the cart",
        compensation: None,
    };
    match engine.begin_step(&charge)? {
        StepPlan::Act(ctx) => {
            if dies_at(world, order, Crash::AfterChargeIntent) {
                println!(
                    "   charge intent {} is durable; the process dies before calling the provider",
                    ctx.key
                );
                return Ok(Flow::Crashed);
            }
            let (outcome, deduplicated) = world.provider.apply(&ctx.key.encode(), &args);
            tell("charge", &ctx, &outcome, deduplicated, "the provider");
            if dies_at(world, order, Crash::AfterChargeSent) {
                println!("   the process dies before the charge's outcome is recorded");
                return Ok(Flow::Crashed);
            }
            let result = engine.finish_step(guard, &ctx, outcome)?;
            if !matches!(result, StepResult::Done { .. }) {
                return Err(format!("{run}: the charge: {result:?}").into());
            }
        }
        StepPlan::Done(StepResult::Done { key, receipt, .. }) => {
            let receipt = String::from_utf8_lossy(&receipt);
            println!("   charge {key}: in the ledger ({receipt}); the provider is not called");
        }
        other => return Err(format!("{run}: the charge: {other:?}").into()),
    }
    if dies_at(world, order, Crash::AfterChargeRecorded) {
        println!("   the process dies after the charge was recorded, before the order");
        return Ok(Flow::Crashed);
    }
    place_order(engine, run, guard, order, world)
}

/// Places the order; its outcome and the run's end land in one commit.
fn place_order(
    engine: &Engine,
    run: &RunId,
    guard: &Guard,
    order: &Order,
    world: &mut World,
) -> Result<Flow, BoxError> {
    let step = StepId::new("place-order")?;
    let args = order.shipment();
    let request = StepRequest {
        guard,
        run,
        step: &step,
        tool: ToolSpec {
            name: "warehouse.order".into(),
            class: IDEMPOTENT,
        },
        args: &args,
        rationale: "the card was charged",
        compensation: None,
    };
    let ctx = match engine.begin_step(&request)? {
        StepPlan::Act(ctx) => ctx,
        StepPlan::Done(StepResult::Done { .. }) => {
            engine.transition(move_to(run, guard, RunState::Completed, "ordered"))?;
            return Ok(Flow::Ended);
        }
        other => return Err(format!("{run}: the order: {other:?}").into()),
    };
    let (outcome, deduplicated) = world.warehouse.apply(&ctx.key.encode(), &args);
    tell("order", &ctx, &outcome, deduplicated, "the warehouse");
    if dies_at(world, order, Crash::AfterOrderSent) {
        println!("   the process dies before the order's outcome is recorded");
        return Ok(Flow::Crashed);
    }
    let then = match ctx.result(&outcome) {
        StepResult::Done { .. } => vec![Command::Transition(move_to(
            run,
            guard,
            RunState::Completed,
            "ordered",
        ))],
        _ => Vec::new(),
    };
    let finished = engine.finish_step_with(guard, &ctx, outcome, then)?;
    finished.then?;
    if !matches!(finished.result, StepResult::Done { .. }) {
        return Err(format!("{run}: the order: {:?}", finished.result).into());
    }
    println!("   order placed; the run completed in the same commit");
    Ok(Flow::Ended)
}

/// Says what a call to `service` did: a first send, or a resend with the
/// same key that the service recognised.
fn tell(what: &str, ctx: &EffectCtx, outcome: &Outcome, deduplicated: bool, service: &str) {
    let reference = match outcome {
        Outcome::Confirmed { receipt } => String::from_utf8_lossy(receipt).into_owned(),
        Outcome::Failed { reason, .. } | Outcome::Unknown { reason } => reason.clone(),
    };
    match (ctx.resend, deduplicated) {
        (false, _) => println!("   {what} sent under key {}: {reference}", ctx.key),
        (true, true) => println!(
            "   {what} resent with the SAME key {}: {service} recognises it, nothing new is done ({reference})",
            ctx.key
        ),
        (true, false) => println!(
            "   {what} resent with the same key {}: {service} had never received it, so it acts now ({reference})",
            ctx.key
        ),
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
        if charges.len() != 1 || charges.iter().any(|(_, args, _)| *args != order.charge()) {
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

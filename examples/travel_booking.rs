//! A travel-booking agent on the runtime (seed 002, "The travel agent"): an
//! agent is a function. A model picks the itinerary, the traveller's manager
//! approves exactly that itinerary (48 h), the flight is booked (the airline
//! cannot deduplicate), the hotel booked, the card charged (the provider
//! deduplicates by key for 24 h) and the traveller mailed (the mailer applies
//! every request it receives). A hotel that is sold out fails the trip, and
//! the runtime undoes the flight with the booking reference the airline gave.
//!
//! The service is redeployed while trips wait for their managers, and again
//! in the middle of a trip, between the hotel and the card; one card charge
//! loses its acknowledgement. The handler below knows nothing of any of it:
//! the runtime resumes each trip at the call where it stopped.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use actum::books::{Compensation, Outcome, RunId, RunState, StepId, ToolClass, digest_of};
use actum::engine::{Engine, EngineOptions};
use actum::runtime::{Approval, Deadline, Fail, RunCtx, Runtime, ShutdownHandle, Tool};
use actum::{FsStorage, ManualClock};
use actum_examples::{BoxError, Checks, Cli, XorShift, euros, main_of};

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;

fn main() -> ExitCode {
    main_of("travel_booking", trips)
}

/// One trip request, and how the world will treat it.
#[derive(Clone, Debug)]
struct Trip {
    run: String,
    city: &'static str,
    cents: u64,
    /// The manager: approves, rejects, or never answers.
    manager: Manager,
    /// The hotel is sold out.
    sold_out: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Manager {
    Approves,
    Rejects,
    Silent,
}

fn requests(quick: bool) -> Vec<Trip> {
    let cities = ["Lisbon", "Singapore", "Osaka", "Bogota", "Tallinn", "Accra"];
    let mut trips = vec![
        trip(1, "Singapore", 184_000, Manager::Approves, false),
        trip(2, "Lisbon", 92_000, Manager::Approves, true),
        trip(3, "Osaka", 231_000, Manager::Rejects, false),
        trip(4, "Accra", 77_000, Manager::Silent, false),
    ];
    if !quick {
        let mut rng = XorShift::new(2026);
        for n in 5..=40 {
            let city = cities[rng.below(cities.len() as u64) as usize];
            let manager = match rng.below(10) {
                0 => Manager::Rejects,
                1 => Manager::Silent,
                _ => Manager::Approves,
            };
            trips.push(trip(
                n,
                city,
                50_000 + rng.below(200_000),
                manager,
                rng.below(8) == 0,
            ));
        }
    }
    trips
}

fn trip(n: u64, city: &'static str, cents: u64, manager: Manager, sold_out: bool) -> Trip {
    Trip {
        run: format!("trip-{n}"),
        city,
        cents,
        manager,
        sold_out,
    }
}

/// The outside world: services that outlive every process and record every
/// request they receive.
#[derive(Default)]
struct World {
    /// Itineraries the model was asked for, per trip.
    model_calls: BTreeMap<String, u64>,
    /// PNR → trip, for every booking the airline made.
    flights: BTreeMap<String, String>,
    /// PNRs cancelled.
    cancelled: Vec<String>,
    /// Hotel bookings, per trip.
    hotels: BTreeMap<String, u64>,
    /// Idempotency key → trip: the card provider's 24 h memory.
    charges: BTreeMap<String, String>,
    /// Charges whose acknowledgement the network loses once.
    lose_ack: Vec<String>,
    /// Mails sent, per trip (the mailer applies every request).
    mails: BTreeMap<String, u64>,
    /// The trip at whose hotel the service is redeployed.
    redeploy_at: Option<String>,
}

type Shared = Arc<Mutex<World>>;

/// The agent: one function, written as if nothing ever failed.
fn travel_agent(
    world: Shared,
    redeploy: ShutdownHandle,
) -> impl Fn(&mut RunCtx<'_>) -> Result<Vec<u8>, Fail> {
    move |ctx| {
        let trip = String::from_utf8_lossy(ctx.input()).into_owned();
        let run = ctx.run_id().as_str().to_string();
        let itinerary = ctx.decide("itinerary", trip.as_bytes(), || {
            *world
                .lock()
                .expect("world")
                .model_calls
                .entry(run.clone())
                .or_default() += 1;
            Ok(format!("{trip}: flight AT-{}, hotel 3 nights", trip.len()).into_bytes())
        })?;
        match ctx.approval(
            "book-flight",
            &itinerary,
            "manager",
            Deadline::In(48 * HOUR_MS),
        )? {
            Approval::Approved { .. } => {}
            Approval::Rejected { approver, note } => {
                return Err(Fail::failed(format!("rejected by {approver}: {note}")));
            }
            Approval::Expired => return Err(Fail::failed("no manager decided within 48 h")),
        }
        let airline = Tool::new("airline.book", ToolClass::NotIdempotent);
        let cancel = Compensation {
            tool: "airline.cancel".into(),
            args: itinerary.clone(),
            class: ToolClass::Idempotent {
                dedup_window_ms: DAY_MS,
            },
        };
        let pnr = ctx.step_with_undo("book-flight", &airline, &itinerary, cancel, |_| {
            let mut w = world.lock().expect("world");
            let pnr = format!("PNR{:04}", w.flights.len() + 1);
            w.flights.insert(pnr.clone(), run.clone());
            Outcome::Confirmed {
                receipt: pnr.into_bytes(),
            }
        })?;
        let hotel = Tool::new(
            "hotel.book",
            ToolClass::Idempotent {
                dedup_window_ms: DAY_MS,
            },
        );
        ctx.step("book-hotel", &hotel, &itinerary, |_| {
            let mut w = world.lock().expect("world");
            if trip.contains("sold out") {
                return Outcome::Failed {
                    retryable: false,
                    reason: "the hotel is sold out".into(),
                };
            }
            *w.hotels.entry(run.clone()).or_default() += 1;
            if w.redeploy_at.as_deref() == Some(run.as_str()) {
                // A deployment recycles the process right after the hotel.
                redeploy.shutdown();
            }
            Outcome::Confirmed {
                receipt: b"HTL-OK".to_vec(),
            }
        })?;
        let card = Tool::new(
            "card.charge",
            ToolClass::Idempotent {
                dedup_window_ms: DAY_MS,
            },
        )
        .attempts(3);
        let charge = ctx.step("charge", &card, &itinerary, |call| {
            let key = call.idempotency_key.clone();
            let mut w = world.lock().expect("world");
            w.charges.entry(key.clone()).or_insert_with(|| run.clone());
            if let Some(at) = w.lose_ack.iter().position(|k| *k == key) {
                w.lose_ack.remove(at);
                return Outcome::Unknown {
                    reason: "the acknowledgement was lost".into(),
                };
            }
            Outcome::Confirmed {
                receipt: format!("ch_{key}").into_bytes(),
            }
        })?;
        let mailer = Tool::new("mail.send", ToolClass::NotIdempotent);
        ctx.step("mail", &mailer, &pnr, |_| {
            *world
                .lock()
                .expect("world")
                .mails
                .entry(run.clone())
                .or_default() += 1;
            Outcome::Confirmed {
                receipt: b"sent".to_vec(),
            }
        })?;
        Ok([pnr, b" ".to_vec(), charge].concat())
    }
}

/// A process of the service: an engine and a runtime serving the agent.
fn deploy(dir: &Path, clock: &Arc<ManualClock>, world: &Shared) -> Result<Runtime, BoxError> {
    let engine = Engine::open_with(
        Arc::new(FsStorage::new()),
        clock.clone(),
        dir,
        EngineOptions::default(),
    )?;
    let runtime = Runtime::new(Arc::new(engine));
    runtime.register(
        "travel",
        "1",
        travel_agent(world.clone(), runtime.shutdown_handle()),
    )?;
    let w = world.clone();
    runtime.register_undo("airline.cancel", move |undo| {
        let pnr = String::from_utf8_lossy(undo.receipt.unwrap_or_default()).into_owned();
        println!("   [{}] flight {pnr} cancelled", undo.ctx.key.run());
        w.lock().expect("world").cancelled.push(pnr);
        Outcome::Confirmed {
            receipt: b"cancelled".to_vec(),
        }
    });
    Ok(runtime)
}

/// Runs the workers until no trip can go on.
fn serve(runtime: &Runtime) -> Result<(), BoxError> {
    let worker = actum::books::WorkerId::new("travel-worker")?;
    for _ in 0..1_000 {
        match runtime.work_once(&worker)? {
            Some((run, driven)) => println!("   [{run}] {driven:?}"),
            None => return Ok(()),
        }
    }
    Err("the workers did not drain the queue".into())
}

fn trips(cli: &Cli, dir: &Path, checks: &mut Checks) -> Result<(), BoxError> {
    let trips = requests(cli.quick);
    let clock = Arc::new(ManualClock::new(1_790_000_000_000));
    let world: Shared = Arc::default();
    {
        let mut w = world.lock().expect("world");
        w.lose_ack.push("trip-1/charge/1".into());
        w.redeploy_at = Some("trip-1".into());
    }
    println!("== {} trips are requested", trips.len());
    let runtime = deploy(dir, &clock, &world)?;
    for t in &trips {
        let input = if t.sold_out {
            format!("{} for EUR {} (sold out)", t.city, euros(t.cents))
        } else {
            format!("{} for EUR {}", t.city, euros(t.cents))
        };
        runtime.start("travel", &t.run, input.as_bytes())?;
    }
    serve(&runtime)?;
    println!("== the service is redeployed while the trips wait for managers");
    drop(runtime);
    let runtime = deploy(dir, &clock, &world)?;
    clock.advance_ms(2 * HOUR_MS);
    println!("== managers decide");
    decide_approvals(&runtime, &trips)?;
    serve(&runtime)?;
    println!("== the service is redeployed in the middle of a trip");
    drop(runtime);
    let runtime = deploy(dir, &clock, &world)?;
    serve(&runtime)?;
    println!("== two days pass: approvals nobody gave expire");
    clock.advance_ms(2 * DAY_MS);
    serve(&runtime)?;
    check(&runtime, &trips, &world, checks)
}

/// The managers: each reads the itinerary the model proposed (the run's
/// first model call) and approves or rejects exactly it; a silent one
/// lets the approval expire.
fn decide_approvals(runtime: &Runtime, trips: &[Trip]) -> Result<(), BoxError> {
    let engine = runtime.engine();
    for t in trips {
        let run = RunId::new(&t.run)?;
        let itinerary = engine
            .read(|books| Ok(books.decision_at(&run, 0)))?
            .map(|d| d.output)
            .ok_or("the itinerary was decided before the approval")?;
        let step = StepId::new("book-flight")?;
        let (approve, note) = match t.manager {
            Manager::Approves => (true, "within policy"),
            Manager::Rejects => (false, "take the train"),
            Manager::Silent => continue,
        };
        engine.decide_approval(
            &run,
            &step,
            digest_of(&itinerary),
            "mia",
            "manager",
            approve,
            note,
        )?;
    }
    Ok(())
}

fn check(
    runtime: &Runtime,
    trips: &[Trip],
    world: &Shared,
    checks: &mut Checks,
) -> Result<(), BoxError> {
    println!("== invariants");
    let engine = runtime.engine();
    let w = world.lock().expect("world");
    let mut broken = Vec::new();
    let mut states = Vec::new();
    for t in trips {
        let run = RunId::new(&t.run)?;
        let state = engine.run(&run)?.map(|r| r.state);
        let flights: Vec<&String> = w
            .flights
            .iter()
            .filter(|(_, r)| **r == t.run)
            .map(|(p, _)| p)
            .collect();
        let cancelled = flights.iter().filter(|p| w.cancelled.contains(p)).count();
        let charged = w.charges.values().filter(|r| **r == t.run).count();
        let hotels = w.hotels.get(&t.run).copied().unwrap_or(0);
        let mails = w.mails.get(&t.run).copied().unwrap_or(0);
        let expected = match (t.manager, t.sold_out) {
            (Manager::Approves, false) => (Some(RunState::Completed), 1, 0, 1, 1, 1),
            (Manager::Approves, true) => (Some(RunState::Failed), 1, 1, 0, 0, 0),
            _ => (Some(RunState::Failed), 0, 0, 0, 0, 0),
        };
        let found = (state, flights.len(), cancelled, hotels, charged, mails);
        if found != expected {
            broken.push(format!("{}: found {found:?}, expected {expected:?}", t.run));
        }
        states.push(state);
    }
    checks.none_of(
        "each trip ends as its manager and hotel decided: every flight, hotel, charge and mail once",
        &broken,
    );
    let asked_twice: Vec<String> = w
        .model_calls
        .iter()
        .filter(|(_, n)| **n != 1)
        .map(|(run, n)| format!("{run} asked {n} times"))
        .collect();
    checks.none_of(
        "the model is asked once per trip, never again on resume",
        &asked_twice,
    );
    checks.equal(
        "every trip asked the model",
        w.model_calls.len(),
        trips.len(),
    );
    // The charge whose acknowledgement was lost was sent again under its
    // key (the provider kept one charge: the first check counts keys).
    checks.equal(
        "the charge that lost its acknowledgement was sent (and resent)",
        w.lose_ack.len(),
        0,
    );
    let cancels: Vec<&String> = w
        .cancelled
        .iter()
        .filter(|p| !w.flights.contains_key(*p))
        .collect();
    checks.check(
        "only booked flights are cancelled, by their booking reference",
        cancels.is_empty(),
        || format!("{cancels:?}"),
    );
    checks.check(
        "no trip is left unfinished",
        states.iter().all(|s| s.is_some_and(|s| s.is_terminal())),
        || format!("{states:?}"),
    );
    Ok(())
}

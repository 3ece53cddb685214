//! A worker process of the kill loop: one engine on the PostgreSQL
//! database, the runtime serving the `pay` agent on several threads,
//! until it is killed. Its tools act on the shared [`World`].
//!
//! The agent: `charge` (a queryable tool that deduplicates nothing) the
//! run's input, then `mail` (an idempotent tool) the receipt; after each
//! step the handler notes in the world that it got the result back.

use std::path::PathBuf;
use std::sync::Arc;

use actum::books::ToolClass;
use actum::engine::{Engine, EngineOptions};
use actum::planted::PlantedBug;
use actum::runtime::{Fail, Runtime, RuntimeOptions, Tool};

use super::world::World;

/// The agent's kind and version.
pub const AGENT: (&str, &str) = ("pay", "1");

/// What a worker process is told on its command line.
#[derive(Clone, Debug)]
pub struct WorkerArgs {
    /// The database.
    pub url: String,
    /// The world's directory.
    pub world: PathBuf,
    /// The process's name (`p<slot>-g<generation>`): its workers'
    /// names start with it.
    pub name: String,
    /// Worker threads.
    pub threads: usize,
    /// Lease of a run, ms.
    pub lease_ms: u64,
    /// A planted bug of the backend's, if any.
    pub planted: Option<PlantedBug>,
    /// Every how many optimistic commands one waits half a lease between
    /// its read and its write (0: none; `KillConfig::stall_every`).
    pub stall_every: u64,
}

/// The exit code of a worker that could not start for a failure of the
/// server's or the network's (the server is down): the driver starts it
/// again.
pub const EXIT_TRANSIENT: u8 = 75;
/// The exit code of a worker that stopped for any other reason: a
/// violation (the engine answered what it never should, such as
/// `Inconsistent`).
pub const EXIT_FAILED: u8 = 70;

/// Why a worker process ended.
#[derive(Debug)]
pub struct Ended {
    /// What it says.
    pub message: String,
    /// Whether the server or the network was the cause.
    pub transient: bool,
}

/// Serves the agent until the process is killed (or the runtime stops on
/// an error that is not the server's or the network's).
pub fn serve(args: &WorkerArgs) -> Result<(), Ended> {
    let failed = |message: String| Ended {
        message,
        transient: false,
    };
    let world = World::new(&args.world).map_err(|e| failed(format!("the world: {e}")))?;
    let mut options = EngineOptions::default();
    options.db.wal.planted_bug = args.planted;
    let engine = Engine::open_postgres(&args.url, options).map_err(|e| Ended {
        message: format!("open {}: {e}", actum::pg::without_password(&args.url)),
        transient: e.is_transient(),
    })?;
    if let Some(store) = engine.pg_store() {
        store.stall_optimistic_writes(args.stall_every, args.lease_ms / 2);
    }
    let runtime = Runtime::with_options(
        Arc::new(engine),
        RuntimeOptions {
            worker: args.name.clone(),
            lease_ttl_ms: args.lease_ms,
            idle_ms: 5,
            ..RuntimeOptions::default()
        },
    );
    let (charge_world, query_world, mail_world) = (world.clone(), world.clone(), world.clone());
    let charge = Tool::new("charge", ToolClass::Queryable)
        .with_query(move |call| query_world.charge_query(call.key.run().as_str(), call))
        .attempts(5)
        .backoff(0, 0);
    let mail = Tool::new(
        "mail",
        ToolClass::Idempotent {
            dedup_window_ms: 86_400_000,
        },
    );
    runtime
        .register(AGENT.0, AGENT.1, move |ctx| {
            let run = ctx.run_id().as_str().to_string();
            let input = ctx.input().to_vec();
            let receipt = ctx.step("charge", &charge, &input, |call| {
                charge_world.charge(&run, call)
            })?;
            ack(&world, &run, "charge", &receipt)?;
            let sent = ctx.step("mail", &mail, &receipt, |call| mail_world.mail(&run, call))?;
            ack(&world, &run, "mail", &sent)?;
            Ok(receipt)
        })
        .map_err(|e| failed(format!("register: {e}")))?;
    runtime
        .run(args.threads)
        .map_err(|e| failed(format!("the runtime stopped: {e}")))
}

/// Notes the step's result in the world: its receipt names its key.
fn ack(world: &World, run: &str, step: &str, receipt: &[u8]) -> Result<(), Fail> {
    let text = String::from_utf8_lossy(receipt);
    let key = text.split_once(':').map_or(&*text, |(_, key)| key);
    world
        .ack(run, step, key)
        .map_err(|e| Fail::failed(format!("the world: {e}")))
}

//! What the effect protocol costs the client over PostgreSQL, apart from
//! the server: one writer runs `PROTOCOLS` protocols (intent, then outcome,
//! through the `Engine`, as the `pg_protocol` bench's `engine_pg` does) and
//! the probe prints the CPU time the writer's thread spent a protocol
//! (`/proc/thread-self/schedstat`: on CPU, kernel included; the server's
//! processes are not counted) and its wall time. The CPU time is not a
//! speed target (the machine is shared), only a way to see the client's
//! share of the machine. Under valgrind it counts what the client does a
//! protocol, the same from run to run: `--tool=callgrind` its instructions,
//! `--tool=dhat` its heap allocations (docs/PERFORMANCE.md, "The client's
//! share"): run it for two counts of protocols and divide the difference
//! of the totals by the difference of the counts, so the connections, the
//! run's creation and the warm-up drop out.
//!
//! Run: `scripts/postgres.sh cargo run --release -p actum-benches --example
//! pg_client_cost -- [PROTOCOLS]`

use actum::books::Begun;
use actum::engine::{Engine, EngineOptions};
use actum::pg::scratch_database;
use actum_benches::protocol::{confirmed, intent, leased_run_on};

/// The CPU time this thread has spent, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat")
        .expect("reading /proc/thread-self/schedstat");
    stat.split_whitespace()
        .next()
        .and_then(|ns| ns.parse().ok())
        .expect("schedstat's first field is the time on CPU")
}

fn main() {
    let protocols: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000);
    let Some(server) = std::env::var("ACTUM_PG_URL").ok().filter(|u| !u.is_empty()) else {
        eprintln!(
            "pg_client_cost: ACTUM_PG_URL names no server (run it under scripts/postgres.sh)"
        );
        std::process::exit(2);
    };
    let url = scratch_database(&server, "client_cost").expect("a scratch database");
    let engine = Engine::open_postgres(&url, EngineOptions::default()).expect("opening");
    let (run, guard) = leased_run_on(&|cmd| engine.execute(cmd), "probe", "w0");
    let protocol = |ticket: u64| {
        let begun = engine
            .begin_effect(intent(&run, &guard, ticket))
            .expect("beginning an effect");
        let Begun::Proceed { key, .. } = begun else {
            panic!("a fresh step proceeds: {begun:?}");
        };
        engine
            .finish_effect(confirmed(key, &guard))
            .expect("finishing an effect");
    };
    // Warm: connections made, statements prepared, the run held.
    for ticket in 0..100 {
        protocol(ticket);
    }
    let (cpu, wall) = (thread_cpu_ns(), std::time::Instant::now());
    for ticket in 100..100 + protocols {
        protocol(ticket);
    }
    let cpu = thread_cpu_ns() - cpu;
    let wall = wall.elapsed();
    let per = |n: u64| n as f64 / protocols as f64;
    println!(
        "{protocols} protocols, one writer: {:.1} µs of the writer's CPU a protocol \
         ({:.1} µs of wall time)",
        per(cpu) / 1e3,
        wall.as_secs_f64() * 1e6 / protocols as f64,
    );
    // What the figures are of: every command of the protocol decided on
    // what the process held of its run, written by one statement, none run
    // again (else this measures another path, and says so).
    let counts = engine
        .pg_store()
        .expect("an engine over PostgreSQL")
        .optimistic_counts();
    println!(
        "{} commands tried optimistically, {} decided with no read, {} ran again",
        counts.tried, counts.from_memory, counts.again
    );
    let commands = 2 * (100 + protocols);
    if counts.tried != commands || counts.from_memory != commands || counts.again != 0 {
        eprintln!(
            "pg_client_cost: expected all {commands} commands decided with no read and none run \
             again; the figures above are not of the one-statement path"
        );
        std::process::exit(1);
    }
}

//! What a worker's claim costs beside many runs of another agent that no
//! lease holds, say the LangGraph saver's threads between their puts: builds
//! a database of OTHERS pending runs of the agent version
//! `langgraph-thread`, closes it, opens it again (so they are parked out of
//! memory, docs/DURABILITY.md), then times CLAIMS calls of
//! `claim_next_of(["agent 1"])`, a runtime polling for an agent none of
//! them is: each visits the claim index past every one of them and finds
//! nothing. Prints the mean per claim. Files go to `$ACTUM_BENCH_DIR`
//! (default: the system temp dir).
//!
//! Run: `cargo run --release -p actum-benches --example claim_beside_threads -- [OTHERS] [CLAIMS]`

use std::time::Instant;

use actum::books::{CreateRun, RunId, WorkerId, digest_of};
use actum::engine::{Engine, EngineOptions};

/// Runs of the other agent when no count is given.
const OTHERS_DEFAULT: u64 = 20_000;
/// Claims timed when no count is given.
const CLAIMS_DEFAULT: u32 = 200;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| {
        a.parse::<u64>()
            .expect("numbers: claim_beside_threads [OTHERS] [CLAIMS]")
    });
    let others = args.next().unwrap_or(OTHERS_DEFAULT);
    let claims = args.next().map_or(CLAIMS_DEFAULT, |c| {
        u32::try_from(c).expect("CLAIMS fits in 32 bits")
    });
    let dir = actum_benches::scratch_dir();
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("open");
    for n in 0..others {
        let name = format!("thread-{n:08}");
        engine
            .create_run(CreateRun {
                run: RunId::new(&name).expect("a valid name"),
                input_digest: digest_of(name.as_bytes()),
                agent_version: "langgraph-thread".into(),
                trace_id: String::new(),
                parent: None,
                input: None,
            })
            .expect("create");
    }
    engine.close().expect("close");
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("reopen");
    assert_eq!(engine.runs_in_memory(), 0, "every run parked at the open");
    let worker = WorkerId::new("w1").expect("a valid name");
    let ours = ["agent 1".to_string()];
    let start = Instant::now();
    for _ in 0..claims {
        let found = engine.claim_next_of(&worker, 30_000, &ours).expect("claim");
        assert!(found.is_none(), "no run of ours");
    }
    let took = start.elapsed();
    println!(
        "{others} parked runs of another agent: {claims} claims, mean {:.1} us a claim",
        took.as_secs_f64() * 1e6 / f64::from(claims.max(1))
    );
    engine.close().expect("close");
}

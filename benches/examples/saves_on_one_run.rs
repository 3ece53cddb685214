//! Saves checkpoints on one run, over and over, each with one of its ten
//! 1 KiB parts changed (the agent step's save), and prints per block of
//! saves the time a save took and the bytes the state store wrote per save:
//! whether a save's cost grows with the run's history. Every save references
//! one new blob, so the run's list of referenced blobs grows by one a save.
//!
//! Run: `cargo run --release -p actum-benches --example saves_on_one_run -- [BLOCKS] [SAVES_PER_BLOCK]`

use std::time::Instant;

use actum::books::SaveCheckpoint;

use actum_benches::agent::{
    CountedEngine, SCHEMA_VERSION, STEP_PART_BYTES, STEP_STATE_PARTS, change_one_part,
    initial_state,
};

fn main() {
    let mut args = std::env::args().skip(1);
    let blocks: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(8);
    let per_block: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2_000);
    let counted = CountedEngine::new(1);
    let engine = &counted.setup.engine;
    let (run, guard) = &counted.setup.runs()[0];
    let mut parts = initial_state(STEP_STATE_PARTS, STEP_PART_BYTES, 0);
    let mut ticket = 0u64;
    println!("saves so far | µs a save | state store bytes a save | log bytes a save");
    for _ in 0..blocks {
        let before = counted.counts.totals();
        let start = Instant::now();
        for _ in 0..per_block {
            ticket += 1;
            change_one_part(&mut parts, ticket, 0);
            engine
                .save_checkpoint(SaveCheckpoint {
                    run: run.clone(),
                    guard: guard.clone(),
                    schema_version: SCHEMA_VERSION,
                    parts: parts.clone(),
                })
                .expect("save_checkpoint");
        }
        let took = start.elapsed();
        let wrote = counted.counts.totals().since(before);
        println!(
            "{ticket:>12} | {:>9.1} | {:>24} | {:>16}",
            took.as_secs_f64() * 1e6 / per_block as f64,
            wrote.state_bytes / per_block,
            wrote.log_bytes / per_block
        );
    }
}

//! What `verify_state_on_open` catches: TRIALS copies of the `state_store`
//! fuzz target's database (closed cleanly and crashed, in turn), each with
//! one run of garbage (1 to 511 bytes) written into `state.redb` at a
//! random offset, the damage a torn or misdirected write leaves. Each copy
//! is opened twice, in a child process each (an abort must not end the
//! count): with the page check off and on. The child reads everything the
//! public API can read, then checkpoints and closes, as a program would.
//! Prints how many copies of each image ended which way with the check off
//! and on. The clean image carries the page sums its close wrote, so its
//! reads are checked against them with the option off too; the crashed
//! one has none (docs/DURABILITY.md, "Page sums").
//!
//! Run: `cargo run --release -p actum-sim --example damaged_copies -- [TRIALS]`
//! (default 200). Trial `k` is the same damage on every machine.

use std::collections::BTreeMap;
use std::process::{Command, ExitCode};
use std::sync::Arc;

use actum::engine::Engine;
use actum::{Error, RedbPanicked};
use actum_sim::fuzz::state_store::{DIR, clock, damaged, read_everything};

/// Trials when no count is given: as many as the experiment that found
/// redb panicking on damaged copies.
const TRIALS_DEFAULT: u64 = 200;

/// The `state_store` input of trial `k`: the clean image for even `k`,
/// the crashed one for odd; one garbage edit in the state store.
fn input(k: u64) -> Vec<u8> {
    let mut noise = 0x9e37_79b9_7f4a_7c15u64 ^ (k + 1).wrapping_mul(0xff51_afd7_ed55_8ccd);
    let mut next = || {
        noise ^= noise << 13;
        noise ^= noise >> 7;
        noise ^= noise << 17;
        noise
    };
    let offset = u32::try_from(next() % u64::from(u32::MAX)).unwrap_or(0);
    let len = u8::try_from(next() % 256).unwrap_or(0);
    let value = next().to_le_bytes()[0];
    let mut out = vec![u8::try_from(k % 2).unwrap_or(0), 12, 0];
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&[len, value]);
    out
}

fn is_redb_panic(error: &Error) -> bool {
    match error {
        Error::StateStore { source, .. } => source.downcast_ref::<RedbPanicked>().is_some(),
        Error::Halted {
            cause: Some(cause), ..
        } => is_redb_panic(cause),
        _ => false,
    }
}

/// One copy, in this (child) process: prints how it ended.
fn one(k: u64, verify: bool) -> &'static str {
    let mut db = damaged(&input(k));
    db.options.verify_state_on_open = verify;
    let engine = match Engine::open_with(Arc::clone(&db.storage), clock(), DIR, db.options) {
        Ok(engine) => engine,
        Err(error) if is_redb_panic(&error) => return "open: redb panicked, caught",
        Err(_) => return "open: refused",
    };
    let mut errors = read_everything(&engine);
    if let Err(error) = engine.checkpoint() {
        errors.push(error);
    }
    if let Err(error) = engine.close() {
        errors.push(error);
    }
    if errors.iter().any(is_redb_panic) {
        "opened: redb panicked later, caught"
    } else if errors.is_empty() {
        "opened: no error at all"
    } else {
        "opened: an error later"
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--one") {
        let k: u64 = args[2].parse().expect("a trial number");
        let verify = args[3] == "on";
        // Quiet: a panic the engine catches is an answer, not a crash.
        std::panic::set_hook(Box::new(|_| {}));
        println!("{}", one(k, verify));
        return ExitCode::SUCCESS;
    }
    let trials: u64 = args.get(1).map_or(TRIALS_DEFAULT, |s| {
        s.parse().expect("TRIALS must be a whole number")
    });
    println!("command: {}", args.join(" "));
    let me = std::env::current_exe().expect("this program's path");
    let run = |k: u64, setting: &str| -> String {
        let out = Command::new(&me)
            .args(["--one", &k.to_string(), setting])
            .output()
            .expect("a child process");
        if out.status.success() {
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        } else {
            match out.status.code() {
                Some(code) => format!("exited {code}"),
                None => "aborted (killed by a signal)".to_string(),
            }
        }
    };
    // (image, outcome with the check off, outcome with it on) -> copies.
    // The clean image carries the page sums of its close (pages checked as
    // read, whatever the option); the crashed one has none.
    let mut tally: BTreeMap<(&str, String, String), u64> = BTreeMap::new();
    for k in 0..trials {
        let image = if k % 2 == 0 {
            "clean, with page sums"
        } else {
            "crashed, no page sums"
        };
        *tally
            .entry((image, run(k, "off"), run(k, "on")))
            .or_default() += 1;
    }
    println!("copies | image | verify_state_on_open off | on");
    for ((image, off, on), count) in &tally {
        println!("{count:>6} | {image} | {off} | {on}");
    }
    let aborted_with_check = tally.keys().any(|(_, _, on)| on.starts_with("aborted"));
    if aborted_with_check {
        println!("a copy aborted with the page check on");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

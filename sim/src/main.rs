//! The simulator's command line: runs storage crash campaigns.
//!
//! `actum-sim --seed N` replays one seed (also `ACTUM_SEED=N`);
//! `actum-sim --seeds COUNT [--from FIRST]` runs COUNT consecutive seeds and
//! prints progress; `--planted BUG` plants a known bug to show it is caught.
//! Every failure prints its seed and the command that replays it.

use std::process::ExitCode;

use actum_sim::campaign::{CampaignConfig, PlantedBug, SeedReport, run_seed};

const USAGE: &str = "usage: actum-sim [--seed N | --seeds COUNT [--from FIRST]] \
                     [--steps N] [--planted ack-before-fsync|accept-bad-checksum|\
                     skip-segment-dir-sync|corruption-as-torn-tail]";

/// What the command line asked for.
struct Args {
    first_seed: u64,
    seed_count: u64,
    config: CampaignConfig,
}

fn parse_u64(flag: &str, text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let parsed = match trimmed.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => trimmed.parse(),
    };
    parsed.map_err(|error| format!("{flag}: invalid number {text:?}: {error}"))
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        first_seed: 0,
        seed_count: 100,
        config: CampaignConfig::default(),
    };
    if let Ok(value) = std::env::var("ACTUM_SEED") {
        args.first_seed = parse_u64("ACTUM_SEED", &value)?;
        args.seed_count = 1;
    }
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        let mut value = || words.next().ok_or(format!("{flag} needs a value; {USAGE}"));
        match flag.as_str() {
            "--seed" => {
                args.first_seed = parse_u64("--seed", &value()?)?;
                args.seed_count = 1;
            }
            "--seeds" => args.seed_count = parse_u64("--seeds", &value()?)?,
            "--from" => args.first_seed = parse_u64("--from", &value()?)?,
            "--steps" => {
                let steps = parse_u64("--steps", &value()?)?;
                args.config.steps = u32::try_from(steps).map_err(|e| e.to_string())?;
            }
            "--planted" => {
                let name = value()?;
                let bug =
                    PlantedBug::from_name(&name).ok_or(format!("unknown bug {name:?}; {USAGE}"))?;
                args.config.planted = Some(bug);
            }
            _ => return Err(format!("unexpected argument {flag:?}; {USAGE}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("actum-sim: {message}");
            return ExitCode::from(2);
        }
    };
    let last_seed = args.first_seed.saturating_add(args.seed_count);
    println!(
        "actum-sim: storage campaign, seeds {}..{last_seed}, {} steps each{}",
        args.first_seed,
        args.config.steps,
        args.config
            .planted
            .map(|bug| format!(", planted bug {}", bug.name()))
            .unwrap_or_default()
    );
    let mut total = SeedReport::default();
    let progress_every = (args.seed_count / 10).max(1);
    for (done, seed) in (args.first_seed..last_seed).enumerate() {
        match run_seed(seed, &args.config) {
            Ok(report) => {
                total.crashes += report.crashes;
                total.recoveries += report.recoveries;
                total.acked_batches += report.acked_batches;
                total.checkpoints += report.checkpoints;
                total.io_errors += report.io_errors;
                total.rot_detected |= report.rot_detected;
            }
            Err(failure) => {
                eprintln!("actum-sim: FAILED {failure}");
                return ExitCode::FAILURE;
            }
        }
        let done = done as u64 + 1;
        if done.is_multiple_of(progress_every) || done == args.seed_count {
            println!(
                "  {done}/{} seeds passed: {} crashes, {} checked recoveries, {} acknowledged \
                 appends, {} checkpoints, {} injected I/O errors",
                args.seed_count,
                total.crashes,
                total.recoveries,
                total.acked_batches,
                total.checkpoints,
                total.io_errors
            );
        }
    }
    println!(
        "actum-sim: all {} seeds kept every invariant: acknowledged appends survive, nothing \
         unacknowledged is half-visible, recovery is idempotent, redb's committed state \
         survives, damage gives an error",
        args.seed_count
    );
    ExitCode::SUCCESS
}

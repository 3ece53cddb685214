//! The PostgreSQL kill loop (`actum_sim::pgkill`), under
//! scripts/postgres.sh (it finds the server, and how to crash and start it,
//! in the environment that script sets):
//!
//! - `actum-pg-kill drive [--quick | --long] [--seed N] [--kills N]
//!   [--crashes N] [--processes N] [--threads N] [--refusals PER_MILLE]
//!   [--planted BUG]` runs the
//!   loop and checks the world; exits 1 on a violation, printing the seed
//!   and the command that runs the same schedule again.
//! - `actum-pg-kill worker ...` is one worker process (the driver starts
//!   it).

use std::path::PathBuf;
use std::process::ExitCode;

use actum::planted::PlantedBug;
use actum_sim::pgkill::worker::{EXIT_FAILED, EXIT_TRANSIENT, WorkerArgs, serve};
use actum_sim::pgkill::{KillConfig, drive};

const USAGE: &str = "usage: actum-pg-kill drive [--quick | --long] [--seed N] [--kills N] \
                     [--crashes N] [--processes N] [--threads N] [--refusals PER_MILLE] \
                     [--stall-every N] [--planted BUG]\n       \
                     actum-pg-kill worker --url URL --world DIR --name NAME --threads N \
                     --lease-ms MS [--stall-every N] [--planted BUG]";

fn main() -> ExitCode {
    let words: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match words.first().map(String::as_str) {
        Some("drive") => run_drive(&words[1..]),
        Some("worker") => run_worker(&words[1..]),
        _ => Err(USAGE.to_string()),
    };
    match outcome {
        Ok(code) => code,
        Err(message) => {
            eprintln!("actum-pg-kill: {message}");
            ExitCode::from(2)
        }
    }
}

/// The value after `flag`.
fn value<'a>(words: &'a [String], at: &mut usize, flag: &str) -> Result<&'a str, String> {
    *at += 1;
    words
        .get(*at)
        .map(String::as_str)
        .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
}

fn number(text: &str, flag: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|e| format!("{flag}: invalid number {text:?}: {e}"))
}

fn bug(name: &str) -> Result<PlantedBug, String> {
    PlantedBug::from_name(name).ok_or_else(|| format!("--planted: no bug named {name:?}"))
}

fn run_drive(words: &[String]) -> Result<ExitCode, String> {
    let mut config = KillConfig::quick(1);
    let mut mode = "--quick";
    let mut at = 0;
    while at < words.len() {
        let flag = words[at].as_str();
        match flag {
            "--quick" => mode = "--quick",
            "--long" => {
                mode = "--long";
                config = KillConfig {
                    seed: config.seed,
                    planted: config.planted,
                    ..KillConfig::long(config.seed)
                };
            }
            "--seed" => config.seed = number(value(words, &mut at, flag)?, flag)?,
            "--kills" => config.kills = number(value(words, &mut at, flag)?, flag)?,
            "--crashes" => config.crashes = number(value(words, &mut at, flag)?, flag)?,
            "--stall-every" => config.stall_every = number(value(words, &mut at, flag)?, flag)?,
            "--processes" => {
                config.processes = number(value(words, &mut at, flag)?, flag)?.max(1) as usize;
            }
            "--threads" => {
                config.threads = number(value(words, &mut at, flag)?, flag)?.max(1) as usize;
            }
            "--refusals" => {
                config.refusals_per_mille = number(value(words, &mut at, flag)?, flag)?;
            }
            "--planted" => config.planted = Some(bug(value(words, &mut at, flag)?)?),
            _ => return Err(format!("unknown argument {flag:?}\n{USAGE}")),
        }
        at += 1;
    }
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let report = drive(&config, &exe)?;
    println!("pg-kill: seed {}: {report}", config.seed);
    if report.checked.violations.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let planted = config
        .planted
        .map(|b| format!(" --planted {}", b.name()))
        .unwrap_or_default();
    println!(
        "  again: scripts/postgres.sh cargo run --release -p actum-sim --bin actum-pg-kill -- \
         drive {mode} --seed {} --kills {} --crashes {} --refusals {}{planted} (real time: the \
         same schedule, not the same interleaving)",
        config.seed, config.kills, config.crashes, config.refusals_per_mille
    );
    Ok(ExitCode::FAILURE)
}

fn run_worker(words: &[String]) -> Result<ExitCode, String> {
    let mut args = WorkerArgs {
        url: String::new(),
        world: PathBuf::new(),
        name: String::new(),
        threads: 1,
        lease_ms: 1_000,
        planted: None,
        stall_every: 0,
    };
    let mut at = 0;
    while at < words.len() {
        let flag = words[at].as_str();
        match flag {
            "--url" => args.url = value(words, &mut at, flag)?.to_string(),
            "--world" => args.world = PathBuf::from(value(words, &mut at, flag)?),
            "--name" => args.name = value(words, &mut at, flag)?.to_string(),
            "--threads" => args.threads = number(value(words, &mut at, flag)?, flag)? as usize,
            "--lease-ms" => args.lease_ms = number(value(words, &mut at, flag)?, flag)?,
            "--stall-every" => args.stall_every = number(value(words, &mut at, flag)?, flag)?,
            "--planted" => args.planted = Some(bug(value(words, &mut at, flag)?)?),
            _ => return Err(format!("unknown argument {flag:?}\n{USAGE}")),
        }
        at += 1;
    }
    match serve(&args) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(ended) => {
            eprintln!("actum-pg-kill: {}", ended.message);
            Ok(ExitCode::from(if ended.transient {
                EXIT_TRANSIENT
            } else {
                EXIT_FAILED
            }))
        }
    }
}

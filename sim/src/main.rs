//! The simulator's command line: runs one seed (for now, says what it would
//! run). Replay any failure with `actum-sim --seed N` or `ACTUM_SEED=N`.

use std::process::ExitCode;

use actum_sim::{FaultConfig, Rng};

/// Where the seed came from, for the replay line.
enum SeedSource {
    Flag,
    Env,
    Fresh,
}

fn parse_seed(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let parsed = match trimmed.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => trimmed.parse(),
    };
    parsed.map_err(|error| format!("invalid seed {text:?}: {error}"))
}

fn choose_seed() -> Result<(u64, SeedSource), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {}
        [flag, value] if flag == "--seed" => return Ok((parse_seed(value)?, SeedSource::Flag)),
        _ => {
            return Err(format!(
                "unexpected arguments {args:?}; usage: actum-sim [--seed N]"
            ));
        }
    }
    if let Ok(value) = std::env::var("ACTUM_SEED") {
        return Ok((parse_seed(&value)?, SeedSource::Env));
    }
    // A fresh seed is the one place the wall clock may enter: it is printed,
    // so the run replays with `--seed`.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    Ok((nanos as u64, SeedSource::Fresh))
}

fn main() -> ExitCode {
    let (seed, source) = match choose_seed() {
        Ok(chosen) => chosen,
        Err(message) => {
            eprintln!("actum-sim: {message}");
            return ExitCode::from(2);
        }
    };
    let origin = match source {
        SeedSource::Flag => "--seed",
        SeedSource::Env => "ACTUM_SEED",
        SeedSource::Fresh => "fresh",
    };
    let mut rng = Rng::new(seed);
    let faults = FaultConfig::swarm(&mut rng.fork("faults"));
    println!(
        "actum-sim: seed {seed} ({origin}); replay with: cargo run -p actum-sim -- --seed {seed}"
    );
    println!("would run one campaign on a SimDisk with faults {faults:?}");
    ExitCode::SUCCESS
}

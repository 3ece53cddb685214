//! The simulator's command line.
//!
//! - `actum-sim agents --seeds COUNT [--from FIRST]` runs the agent
//!   campaign (the product's guarantee: no side effect fires twice under
//!   crashes, dropped acks and expired leases) on consecutive seeds;
//!   `--seed N` replays one (`--history` prints its story); `--exhaustive`
//!   runs every crash point × ack fate × lease expiry of the shop workflow.
//! - `actum-sim runtime --seeds COUNT [--from FIRST] | --seed N [--history]`
//!   runs the runtime family: the workflows as `actum::runtime` handlers,
//!   the runtime doing the worker loop, under the same kinds of faults.
//! - `actum-sim storage --seeds COUNT [--from FIRST] | --seed N` runs the
//!   storage crash campaign (WAL, manifest and redb on the faulty disk).
//!
//! `--planted BUG` plants a known bug to show it is caught. Every failure
//! prints its seed and the one command that replays it. Output holds no
//! timings, so a replay prints the same bytes every time.
//!
//! Seeds are independent worlds, so a campaign runs them on every core
//! (`--jobs N` to choose): about a tenth of the seeds at a time, each
//! tenth's reports added in seed order, so the progress lines, the totals
//! and the failure reported (the lowest failing seed of its tenth) are the
//! same bytes whatever the number of jobs.

use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use actum_sim::agents::{self, AgentConfig, AgentReport};
use actum_sim::campaign::{CampaignConfig, PlantedBug, SeedReport, run_seed};

const USAGE: &str = "usage: actum-sim agents [--seed N [--history] | --seeds COUNT [--from FIRST] | \
                     --exhaustive] [--events N] [--planted BUG] [--jobs N]\n       actum-sim runtime [--seed N [--history] | --seeds COUNT \
                     [--from FIRST]] [--events N] [--planted BUG] [--jobs N]\n       actum-sim storage \
                     [--seed N | --seeds COUNT [--from FIRST]] [--steps N] [--planted BUG] [--jobs N]";

/// Which campaign, over which seeds.
struct Args {
    campaign: Campaign,
    first_seed: u64,
    seed_count: u64,
    planted: Option<PlantedBug>,
    history: bool,
    exhaustive: bool,
    length: Option<u32>,
    /// Threads running seeds at once.
    jobs: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Campaign {
    Agents,
    Runtime,
    Storage,
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
    let mut words = std::env::args().skip(1);
    let campaign = match words.next().as_deref() {
        Some("agents") => Campaign::Agents,
        Some("runtime") => Campaign::Runtime,
        Some("storage") => Campaign::Storage,
        Some(other) => return Err(format!("unknown campaign {other:?}\n{USAGE}")),
        None => return Err(USAGE.to_string()),
    };
    let mut args = Args {
        campaign,
        first_seed: 0,
        seed_count: 100,
        planted: None,
        history: false,
        exhaustive: false,
        length: None,
        jobs: std::thread::available_parallelism().map_or(1, usize::from),
    };
    if let Ok(value) = std::env::var("ACTUM_SEED") {
        args.first_seed = parse_u64("ACTUM_SEED", &value)?;
        args.seed_count = 1;
    }
    while let Some(flag) = words.next() {
        let mut value = || words.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--seed" => {
                args.first_seed = parse_u64("--seed", &value()?)?;
                args.seed_count = 1;
            }
            "--seeds" => args.seed_count = parse_u64("--seeds", &value()?)?,
            "--from" => args.first_seed = parse_u64("--from", &value()?)?,
            "--events" | "--steps" => {
                let n = parse_u64(&flag, &value()?)?;
                args.length = Some(u32::try_from(n).map_err(|e| e.to_string())?);
            }
            "--planted" => {
                let name = value()?;
                let bug = PlantedBug::from_name(&name).ok_or(format!(
                    "unknown bug {name:?}; one of: {}",
                    PlantedBug::ALL.map(PlantedBug::name).join(", ")
                ))?;
                args.planted = Some(bug);
            }
            "--jobs" => {
                let n = parse_u64("--jobs", &value()?)?;
                args.jobs = usize::try_from(n).map_err(|e| e.to_string())?.max(1);
            }
            "--history" => args.history = true,
            "--exhaustive" => args.exhaustive = true,
            _ => return Err(format!("unexpected argument {flag:?}\n{USAGE}")),
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
    let passed = match (args.campaign, args.exhaustive) {
        (Campaign::Agents, true) => agents_exhaustive(&args),
        (Campaign::Agents, false) => agents_campaign(&args),
        (Campaign::Runtime, _) => runtime_campaign(&args),
        (Campaign::Storage, _) => storage_campaign(&args),
    };
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn planted_note(planted: Option<PlantedBug>) -> String {
    planted
        .map(|bug| format!(", planted bug {}", bug.name()))
        .unwrap_or_default()
}

/// Prints progress about ten times over a block of seeds.
fn progress_due(done: u64, total: u64) -> bool {
    done.is_multiple_of((total / 10).max(1)) || done == total
}

/// Runs `run(i)` for every `i` in `0..count` on `jobs` threads, a tenth of
/// the range at a time (the blocks `progress_due` ends), and hands each
/// result to `each(i, result)` in order of `i`. Stops after the block
/// holding the first error and returns the error of the lowest `i`, so
/// what `each` sees, and the error, do not depend on `jobs`.
fn in_blocks<R: Send, E: Send>(
    count: u64,
    jobs: usize,
    run: impl Fn(u64) -> Result<R, E> + Sync,
    mut each: impl FnMut(u64, R),
) -> Result<(), E> {
    let block = (count / 10).max(1);
    let mut start = 0;
    while start < count {
        let end = start.saturating_add(block).min(count);
        let next = AtomicU64::new(start);
        let results: Mutex<Vec<(u64, Result<R, E>)>> = Mutex::new(Vec::new());
        let threads = usize::try_from(end - start).map_or(jobs, |n| n.min(jobs));
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= end {
                            break;
                        }
                        let result = run(i);
                        results
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push((i, result));
                    }
                });
            }
        });
        let mut results = results
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        results.sort_by_key(|(i, _)| *i);
        for (i, result) in results {
            each(i, result?);
        }
        start = end;
    }
    Ok(())
}

fn agents_campaign(args: &Args) -> bool {
    let config = AgentConfig {
        events: args.length.unwrap_or(AgentConfig::default().events),
        planted: args.planted,
        history: args.history,
    };
    let last_seed = args.first_seed.saturating_add(args.seed_count);
    println!(
        "actum-sim: agent campaign, seeds {}..{last_seed}, {} events each{}",
        args.first_seed,
        config.events,
        planted_note(args.planted)
    );
    let mut total = AgentReport::default();
    let count = last_seed - args.first_seed;
    let outcome = in_blocks(
        count,
        args.jobs,
        |i| agents::run_agent_seed(args.first_seed + i, &config),
        |i, report| {
            total.add(&report);
            let done = i + 1;
            if progress_due(done, args.seed_count) {
                println!(
                    "  {done}/{} seeds passed: {}",
                    args.seed_count,
                    total.summary()
                );
            }
        },
    );
    if let Err(failure) = outcome {
        eprintln!("actum-sim: FAILED {failure}");
        return false;
    }
    if args.history && args.seed_count == 1 {
        let recorded = AgentConfig {
            history: true,
            ..config
        };
        match agents::replay_history(args.first_seed, &recorded) {
            Ok(lines) => lines.iter().for_each(|line| println!("    {line}")),
            Err(failure) => {
                eprintln!("actum-sim: FAILED {failure}");
                return false;
            }
        }
    }
    print_agent_verdict(args.seed_count, "seeds", &total);
    true
}

fn runtime_campaign(args: &Args) -> bool {
    let config = AgentConfig {
        events: args.length.unwrap_or(AgentConfig::default().events),
        planted: args.planted,
        history: false,
    };
    let last_seed = args.first_seed.saturating_add(args.seed_count);
    println!(
        "actum-sim: runtime campaign, seeds {}..{last_seed}, {} events each{}",
        args.first_seed,
        config.events,
        planted_note(args.planted)
    );
    let mut total = agents::rt::RuntimeReport::default();
    let count = last_seed - args.first_seed;
    let outcome = in_blocks(
        count,
        args.jobs,
        |i| {
            let seed = args.first_seed + i;
            agents::rt::run_runtime_seed(seed, &config).map_err(|failure| {
                // Replayed with its history, so the failure tells its story.
                agents::rt::runtime_history(seed, &config)
                    .err()
                    .unwrap_or(failure)
            })
        },
        |i, report| {
            total.add(&report);
            let done = i + 1;
            if progress_due(done, args.seed_count) {
                println!("  {done}/{} seeds passed: {total}", args.seed_count);
            }
        },
    );
    if let Err(failure) = outcome {
        eprintln!("actum-sim: FAILED {failure}");
        return false;
    }
    if args.history && args.seed_count == 1 {
        match agents::rt::runtime_history(args.first_seed, &config) {
            Ok(lines) => lines.iter().for_each(|line| println!("    {line}")),
            Err(failure) => {
                eprintln!("actum-sim: FAILED {failure}");
                return false;
            }
        }
    }
    println!(
        "actum-sim: all {} seeds kept every invariant: acts sent only under a live lease, no \
         confirmed step resent, no awaited request resent, no journaled model call asked again, every done effect exactly \
         once in the world, sagas last first, completed runs survived every crash, a moved run \
         resumed only by its new version's handler and every move journaled, a retry refused \
         only as the books say and every fork journaled, every run ended once the faults \
         stopped",
        args.seed_count
    );
    true
}

fn print_agent_verdict(count: u64, what: &str, total: &AgentReport) {
    println!(
        "actum-sim: all {count} {what} kept every invariant: no side effect fired twice, every \
         act had a durable intent, stale leases were refused, the books equalled the model \
         after every recovery, every run ended once the faults stopped"
    );
    println!(
        "  simulated {} s of agent time; invariant checks:",
        total.simulated_ms / 1000
    );
    for (invariant, count) in &total.checks {
        println!("    {count:>10}  {invariant}");
    }
}

fn agents_exhaustive(args: &Args) -> bool {
    let all = match agents::exhaustive_schedules() {
        Ok(schedules) => schedules,
        Err(failure) => {
            eprintln!("actum-sim: FAILED a probe run: {failure}");
            return false;
        }
    };
    let config = AgentConfig {
        planted: args.planted,
        ..AgentConfig::default()
    };
    // `--seed I` runs only schedule I of the enumeration.
    let first = if args.seed_count == 1 {
        usize::try_from(args.first_seed).unwrap_or(usize::MAX)
    } else {
        0
    };
    let count = if args.seed_count == 1 { 1 } else { all.len() };
    let Some(schedules) = all.get(first..first.saturating_add(count)) else {
        eprintln!("actum-sim: the enumeration has {} schedules", all.len());
        return false;
    };
    println!(
        "actum-sim: exhaustive agent campaign: the shop workflow, every crash point × ack fate × \
         lease expiry, {} of {} schedules{}",
        schedules.len(),
        all.len(),
        planted_note(args.planted)
    );
    let mut total = AgentReport::default();
    let outcome = in_blocks(
        schedules.len() as u64,
        args.jobs,
        |i| {
            let index = usize::try_from(i).unwrap_or(usize::MAX);
            agents::run_agent_schedule(&schedules[index], &config).map_err(|failure| {
                let failure = agents::AgentFailure {
                    origin: agents::Origin::Exhaustive(first + index),
                    ..failure
                };
                (first + index, failure)
            })
        },
        |i, report| {
            total.add(&report);
            let done = i + 1;
            if progress_due(done, schedules.len() as u64) {
                println!(
                    "  {done}/{} schedules passed: {}",
                    schedules.len(),
                    total.summary()
                );
            }
        },
    );
    if let Err((index, failure)) = outcome {
        eprintln!("actum-sim: FAILED exhaustive schedule {index}: {failure}");
        return false;
    }
    if args.history && count == 1 {
        match agents::schedule_history(&schedules[0], &config) {
            Ok(lines) => lines.iter().for_each(|line| println!("    {line}")),
            Err(failure) => {
                eprintln!("actum-sim: FAILED {failure}");
                return false;
            }
        }
    }
    print_agent_verdict(schedules.len() as u64, "schedules", &total);
    true
}

fn storage_campaign(args: &Args) -> bool {
    let config = CampaignConfig {
        steps: args.length.unwrap_or(CampaignConfig::default().steps),
        planted: args.planted,
        ..CampaignConfig::default()
    };
    let last_seed = args.first_seed.saturating_add(args.seed_count);
    println!(
        "actum-sim: storage campaign, seeds {}..{last_seed}, {} steps each{}",
        args.first_seed,
        config.steps,
        planted_note(args.planted)
    );
    let mut total = SeedReport::default();
    // Seeds whose damaged log a repair cut, the cut still in place after
    // an ordinary reopen.
    let mut repairs = 0u64;
    let mut copies = 0u64;
    let count = last_seed - args.first_seed;
    let outcome = in_blocks(
        count,
        args.jobs,
        |i| run_seed(args.first_seed + i, &config),
        |i, report| {
            total.crashes += report.crashes;
            total.recoveries += report.recoveries;
            total.acked_batches += report.acked_batches;
            total.checkpoints += report.checkpoints;
            total.grows += report.grows;
            total.io_errors += report.io_errors;
            total.rot_detected |= report.rot_detected;
            repairs += u64::from(report.repaired);
            copies += u64::from(report.copy_restored);
            let done = i + 1;
            if progress_due(done, args.seed_count) {
                println!(
                    "  {done}/{} seeds passed: {} crashes, {} checked recoveries, {} acknowledged \
                     appends, {} checkpoints, {} segment grows, {} injected I/O errors, {repairs} \
                     repairs kept, {copies} copies restored",
                    args.seed_count,
                    total.crashes,
                    total.recoveries,
                    total.acked_batches,
                    total.checkpoints,
                    total.grows,
                    total.io_errors
                );
            }
        },
    );
    if let Err(failure) = outcome {
        eprintln!("actum-sim: FAILED {failure}");
        return false;
    }
    println!(
        "actum-sim: all {} seeds kept every invariant: acknowledged appends survive, nothing \
         unacknowledged is half-visible, recovery is idempotent, redb's committed state \
         survives, damage gives an error, a refused open leaves no file open",
        args.seed_count
    );
    true
}

#[cfg(test)]
mod tests {
    use super::in_blocks;

    /// What `in_blocks` hands on, and the error it returns, for `count`
    /// items on `jobs` threads, item `i` failing when `fails(i)`.
    fn seen(count: u64, jobs: usize, fails: fn(u64) -> bool) -> (Vec<u64>, Result<(), u64>) {
        let mut order = Vec::new();
        let outcome = in_blocks(
            count,
            jobs,
            |i| if fails(i) { Err(i) } else { Ok(i * 10) },
            |i, r| {
                assert_eq!(r, i * 10, "each result reaches its own index");
                order.push(i);
            },
        );
        (order, outcome)
    }

    #[test]
    fn blocks_hand_on_results_in_order_whatever_the_jobs() {
        let all = seen(57, 1, |_| false);
        assert_eq!(all, ((0..57).collect(), Ok(())));
        for jobs in [2, 3, 8, 64] {
            assert_eq!(seen(57, jobs, |_| false), all, "{jobs} jobs");
        }
    }

    #[test]
    fn the_lowest_failure_of_its_block_is_returned_after_the_items_before_it() {
        // Blocks of 5 (50 items): items 23 and 21 fail, both in the block
        // 20..25; everything before 21 is handed on, nothing after it.
        let fails = |i: u64| i == 23 || i == 21;
        let one = seen(50, 1, fails);
        assert_eq!(one, ((0..21).collect(), Err(21)));
        for jobs in [2, 4, 16] {
            assert_eq!(seen(50, jobs, fails), one, "{jobs} jobs");
        }
    }
}

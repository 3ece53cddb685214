//! The demo's parent process: makes the database and the runs, then starts
//! worker processes and kills them with SIGKILL after seeded random delays,
//! as many times as asked, then lets the last one finish every run; then
//! checks and summarises.
//!
//! **Invariant:** at most one worker process lives at a time (each killed
//! one is reaped before the next starts), and the demo ends by its
//! deadline even if the runs do not.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use actum::books::{CreateRun, RunId, digest_of};
use actum::engine::{Engine, EngineOptions};
use indicatif::ProgressBar;

use super::check::{self, Tally};
use super::rng::Rng;
use super::{WORKER_LOG, db_dir, run_name};
use crate::args::{CheckArgs, DemoArgs};
use crate::failure::CliError;
use crate::progress;

/// How the demo is run: from the arguments, with the defaults filled in.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Runs of the workflow.
    pub runs: u32,
    /// Worker processes to kill.
    pub kills: u32,
    /// The seed.
    pub seed: u64,
    /// A worker is killed this long after it starts, ms (seeded, inclusive).
    pub kill_after_ms: (u64, u64),
    /// The demo gives up after this long.
    pub deadline: Duration,
}

impl Plan {
    fn from(args: &DemoArgs) -> Plan {
        let (runs, kills) = if args.quick { (80, 25) } else { (600, 100) };
        let runs = args.runs.unwrap_or(runs).max(1);
        let kills = args.kills.unwrap_or(kills);
        Plan {
            runs,
            kills,
            seed: args.seed,
            kill_after_ms: (10, 200),
            // Generous for a loaded machine: a run takes a few fsyncs, a
            // kill a restart (the next worker's open releases its leases).
            deadline: Duration::from_secs(60 + u64::from(runs) / 2 + u64::from(kills) * 3),
        }
    }
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<ExitCode, CliError> {
    let plan = Plan::from(args);
    let (dir, made) = demo_dir(args)?;
    let started = Instant::now();
    create_runs(&dir, plan.runs)?;
    eprintln!(
        "actum demo: {} runs, {} kills asked, seed {}, in {}",
        plan.runs,
        plan.kills,
        plan.seed,
        dir.display()
    );
    let tally = drive(&dir, &plan)?;
    let summary = check::check(&dir, &plan, &tally, started.elapsed())?;
    print!("{summary}");
    if summary.passed() {
        if made {
            // Only a directory the demo made itself is removed.
            let _ = fs::remove_dir_all(&dir);
        }
        Ok(ExitCode::SUCCESS)
    } else {
        println!("the demo directory is kept for a look: {}", dir.display());
        Ok(ExitCode::from(1))
    }
}

/// Checks a kept demo directory as the demo's end does.
pub fn check_only(args: &CheckArgs) -> Result<ExitCode, CliError> {
    let plan = Plan {
        runs: args.runs,
        kills: 0,
        seed: 0,
        kill_after_ms: (0, 0),
        deadline: Duration::ZERO,
    };
    let tally = Tally {
        finished: true,
        ..Tally::default()
    };
    let summary = check::check(&args.dir, &plan, &tally, Duration::ZERO)?;
    print!("{summary}");
    Ok(if summary.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The demo's directory (new and empty); true if the demo made its name.
fn demo_dir(args: &DemoArgs) -> Result<(PathBuf, bool), CliError> {
    let (dir, made) = match &args.dir {
        Some(dir) => (dir.clone(), false),
        None => {
            let name = format!("actum-demo-{}-{}", std::process::id(), args.seed);
            (std::env::temp_dir().join(name), true)
        }
    };
    let busy = fs::read_dir(&dir).map(|mut d| d.next().is_some());
    if matches!(busy, Ok(true)) {
        return Err(CliError::unusable(format!(
            "{} is not empty; the demo needs a new or empty directory",
            dir.display()
        )));
    }
    fs::create_dir_all(&dir)
        .map_err(|e| CliError::unusable(format!("cannot make {}: {e}", dir.display())))?;
    Ok((dir, made))
}

/// Makes the database and its runs, then closes it.
pub(super) fn create_runs(dir: &Path, runs: u32) -> Result<(), CliError> {
    let db = db_dir(dir);
    let fail = |e| CliError::engine(&db, e);
    let engine = Engine::open(&db, EngineOptions::default()).map_err(fail)?;
    for n in 1..=runs {
        let run = RunId::new(run_name(n)).map_err(fail)?;
        engine
            .create_run(CreateRun {
                input_digest: digest_of(run.as_str().as_bytes()),
                run,
                agent_version: "invoice-agent 1.0".into(),
                trace_id: format!("demo-{n}"),
                parent: None,
                input: None,
            })
            .map_err(fail)?;
    }
    engine.close().map_err(fail)
}

/// Starts, kills and restarts workers until the runs are done (or the
/// deadline passes); what happened.
fn drive(dir: &Path, plan: &Plan) -> Result<Tally, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::unusable(format!("cannot find the actum binary: {e}")))?;
    let deadline = Instant::now() + plan.deadline;
    let mut rng = Rng::new(plan.seed);
    let mut tally = Tally::default();
    let done = Arc::new(Mutex::new(BTreeSet::new()));
    let bar = progress::bar(u64::from(plan.runs), "runs done");
    // Bounded by the deadline: every pass starts one worker.
    while Instant::now() < deadline {
        let mut child = spawn(&exe, dir, rng.next_u64())?;
        tally.workers_started += 1;
        let reader = count_done(&mut child, &done, &bar);
        let killing = tally.kills < plan.kills;
        let wait = if killing {
            Duration::from_millis(rng.between(plan.kill_after_ms.0, plan.kill_after_ms.1))
        } else {
            deadline.saturating_duration_since(Instant::now())
        };
        let status = wait_for(&mut child, wait)?;
        if status.is_none() {
            // SIGKILL: `Child::kill` sends it on Unix.
            child.kill().map_err(io_failure)?;
            child.wait().map_err(io_failure)?;
        }
        let _ = reader.join();
        match status {
            None if killing => {
                tally.kills += 1;
                bar.set_message(format!("({} kills)", tally.kills));
            }
            None => {
                tally.timed_out = true;
                break;
            }
            Some(status) if status.success() => {
                tally.finished = true;
                break;
            }
            Some(_) => tally.worker_failures += 1,
        }
    }
    tally.timed_out |= !tally.finished;
    bar.finish_and_clear();
    Ok(tally)
}

fn spawn(exe: &Path, dir: &Path, seed: u64) -> Result<Child, CliError> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(WORKER_LOG))
        .map_err(io_failure)?;
    Command::new(exe)
        .arg("demo-worker")
        .arg("--dir")
        .arg(dir)
        .arg("--seed")
        .arg(seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| CliError::unusable(format!("cannot start a worker process: {e}")))
}

/// Reads the worker's `done RUN` lines into `done` and the bar.
fn count_done(
    child: &mut Child,
    done: &Arc<Mutex<BTreeSet<String>>>,
    bar: &ProgressBar,
) -> JoinHandle<()> {
    let stdout = child.stdout.take();
    let (done, bar) = (Arc::clone(done), bar.clone());
    thread::spawn(move || {
        let Some(stdout) = stdout else { return };
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(run) = line.strip_prefix("done ") {
                let mut done = done.lock().unwrap_or_else(PoisonError::into_inner);
                done.insert(run.to_string());
                bar.set_position(done.len() as u64);
            }
        }
    })
}

/// Waits up to `wait` for `child` to exit; `None` if it is still running.
fn wait_for(child: &mut Child, wait: Duration) -> Result<Option<ExitStatus>, CliError> {
    const POLL: Duration = Duration::from_millis(5);
    let until = Instant::now() + wait;
    // Bounded by `wait`.
    loop {
        if let Some(status) = child.try_wait().map_err(io_failure)? {
            return Ok(Some(status));
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        thread::sleep(POLL);
    }
}

fn io_failure(e: std::io::Error) -> CliError {
    CliError::unusable(format!("demo: {e}"))
}

/// The demo's worker log, for a failed run's report.
pub fn worker_log(dir: &Path) -> String {
    let mut text = String::new();
    if let Ok(file) = File::open(dir.join(WORKER_LOG)) {
        for line in BufReader::new(file).lines().map_while(Result::ok) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    text
}

//! `actum demo`: an agent workflow with real side effects, whose worker
//! processes are killed with SIGKILL at random points, many times, and
//! restarted, until every run is done; then every side effect is checked
//! to have happened exactly once.
//!
//! The workflow pays an invoice: a model call decides the amount
//! (journaled), a bank transfer pays it, a mail confirms it quoting the
//! bank's receipt, and the run completes. The bank and the mailer
//! (`tools`) are append-only files that record every application; the bank
//! deduplicates by idempotency key, as a payment API does, and the mailer
//! sends every request it receives, as SMTP does, so a mail sent twice
//! shows in its file (it answers whether it sent a key instead). The parent
//! (`parent`) makes the database and the runs, starts a worker process
//! (`worker`: `actum demo-worker`, hidden), kills it after a seeded random
//! delay, starts another, and so on; then `check` holds the books and the
//! tools' files to the invariants and prints the summary.
//!
//! **Invariant:** every transfer and every mail is applied once, and only
//! after its intent was durable; the demo exits 1 otherwise.

mod check;
mod parent;
mod rng;
mod tools;
mod worker;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::args::{CheckArgs, DemoArgs, WorkerArgs};
use crate::failure::CliError;

/// The database inside the demo directory.
const DB_DIR: &str = "db";
/// The bank's applications.
const BANK_FILE: &str = "bank.log";
/// The mailer's applications.
const MAIL_FILE: &str = "mail.log";
/// What the worker processes wrote to stderr.
const WORKER_LOG: &str = "workers.log";
/// Every run's id starts with this, then its number.
const RUN_PREFIX: &str = "invoice-";

fn db_dir(dir: &Path) -> PathBuf {
    dir.join(DB_DIR)
}

/// The id of run number `n`.
fn run_name(n: u32) -> String {
    format!("{RUN_PREFIX}{n:05}")
}

/// The amount run `run` pays, in euros: fixed by its name, so a replay
/// asks the model the same question.
fn amount_of(run: &str) -> u64 {
    let n: u64 = run
        .trim_start_matches(RUN_PREFIX)
        .parse()
        .unwrap_or_default();
    100 + n * 37 % 900
}

/// Runs `actum demo`.
pub fn run(args: &DemoArgs) -> Result<ExitCode, CliError> {
    parent::run(args)
}

/// Runs one demo worker process (`actum demo-worker`).
pub fn worker(args: &WorkerArgs) -> Result<ExitCode, CliError> {
    worker::run(args)
}

/// Runs the demo's end check alone on a kept demo directory
/// (`actum demo-check`): exit 1 if an invariant is broken.
pub fn check_only(args: &CheckArgs) -> Result<ExitCode, CliError> {
    parent::check_only(args)
}

//! `actum`: the operator's command for an actum database directory, or a
//! PostgreSQL database named by a `postgres://` URL in the directory's
//! place (`place.rs`).
//!
//! Read-only commands (`inspect`, `verify`, `export`, `stuck`) open the
//! directory on the engine's read-only view, so they write, create and
//! remove nothing, even where an open would recover a torn tail; on a
//! directory another process's engine holds they read a snapshot of the
//! live database and say which LSN it is as of (`live.rs`); the
//! writes an operator needs (`pause`, `resume`, `cancel`, `reconcile`,
//! `migrate`)
//! open it normally, say what changed and close it cleanly. `demo` runs an
//! agent workflow in child processes killed at random and checks that
//! every side effect happened exactly once. `ui` serves all of this as a
//! local web page (`ui/`).
//!
//! Exit codes: 0 done (and, for `verify`, intact); 1 `verify` found damage
//! or `demo` found a broken invariant; 2 the command could not run (usage,
//! no database, locked, unreadable).
//!
//! **Invariant:** a command that was not asked to write never opens the
//! directory for writing.

mod answer;
mod args;
mod demo;
mod export;
mod failure;
mod inspect;
mod live;
mod migrate;
mod operate;
mod operator;
mod paused;
mod place;
mod progress;
mod prune;
mod repair;
mod retry;
mod runs;
mod show;
mod stuck;
mod tail;
mod text;
mod ui;
mod verify;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use failure::CliError;

fn main() -> ExitCode {
    let cli = Cli::parse();
    quiet_caught_panics();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli.command)));
    let result = outcome.unwrap_or_else(|panic| {
        // A panic that no guard caught is a bug: say where, and exit as
        // Rust's panics do (101).
        let last = LAST_PANIC.lock().map(|l| l.clone()).unwrap_or_default();
        eprintln!("actum: internal error (please report it): {last}");
        std::panic::resume_unwind(panic)
    });
    match result {
        Ok(code) => code,
        Err(CliError::OutputClosed) => ExitCode::SUCCESS,
        Err(CliError::Failed { message, code }) => {
            eprintln!("actum: {message}");
            ExitCode::from(code)
        }
    }
}

/// The last panic's message and place, kept by the hook below.
static LAST_PANIC: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Replaces the default panic hook with one that only remembers the panic.
/// The engine catches a panic of redb's on damaged bytes and answers an
/// error carrying its message, which this command prints as it prints any
/// error; the default hook would print it once more as a crash. An
/// uncaught panic is printed by `main`.
fn quiet_caught_panics() {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let place = info
            .location()
            .map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
        if let Ok(mut last) = LAST_PANIC.lock() {
            *last = format!("{message}{place}");
        }
    }));
}

/// Runs one command; the exit code on success (`verify` and `demo` say 1
/// for what they found).
fn run(command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Inspect(a) => inspect::run(&a.dir, a.json),
        Command::Verify(a) => verify::run(&a.dir, a.json),
        Command::Export(a) => export::run(&a.dir, a.which.run.as_deref()),
        Command::Stuck(a) => stuck::run(&a.dir, a.older_than_ms, a.json),
        Command::Runs(a) => runs::run(&a),
        Command::Show(a) => show::run(&a),
        Command::Tail(a) => tail::run(&a),
        Command::Pause(a) => operate::run(&a, actum::books::OperatorAction::Pause),
        Command::Resume(a) => operate::run(&a, actum::books::OperatorAction::Resume),
        Command::Approve(a) => answer::approve(&a, true),
        Command::Reject(a) => answer::approve(&a, false),
        Command::Signal(a) => answer::signal(&a),
        Command::Budget(a) => answer::budget(&a),
        Command::Prune(a) => prune::run(&a),
        Command::Repair(a) => repair::run(&a),
        Command::Cancel(a) => operate::run(&a, actum::books::OperatorAction::Cancel),
        Command::Abandon(a) => operate::run(&a, actum::books::OperatorAction::Abandon),
        Command::Reconcile(a) => operate::reconcile(&a),
        Command::Migrate(a) => migrate::run(&a),
        Command::Retry(a) => retry::retry(&a),
        Command::Fork(a) => retry::fork(&a),
        Command::Ui(a) => ui::run(&a),
        Command::Demo(a) => demo::run(&a),
        Command::DemoWorker(a) => demo::worker(&a),
        Command::DemoCheck(a) => demo::check_only(&a),
    }
}

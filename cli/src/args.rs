//! The command line, declared with clap: one struct per command's
//! arguments, each documented as `actum help` shows it.
//!
//! **Invariant:** every argument is parsed and checked here (durations,
//! outcomes), so a command's code receives values, never raw text.

use std::path::PathBuf;

use actum::books::RunState;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::text::parse_duration_ms;

/// The operator's command for an actum database directory.
#[derive(Debug, Parser)]
#[command(
    name = "actum",
    version,
    about,
    after_help = "DIR is a database directory, or a postgres:// (postgresql://) URL naming \
                  a PostgreSQL database that holds the books; `verify`, `repair` and `tail` \
                  take a directory only."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs by state, leases held, pending and unknown effects, open waits
    /// and file sizes (read-only).
    Inspect(ReadArgs),
    /// Checks every checksum of the manifest, the WAL and the state store
    /// and says what is damaged and where (read-only; exit 1 if damaged).
    Verify(ReadArgs),
    /// Writes the audit journal of one run, or of every run, as JSON lines
    /// (read-only; schema in docs/AUDIT.md).
    Export(ExportArgs),
    /// Lists the runs waiting, or holding an unknown effect, for longer
    /// than a time (read-only).
    Stuck(StuckArgs),
    /// Lists runs in id order, a page at a time, by state, agent kind and
    /// version, and age (read-only).
    Runs(RunsArgs),
    /// Follows the journal as it grows: each op committed since the last
    /// look, one line each, in the audit journal's words (read-only).
    Tail(TailArgs),
    /// One run's story for a person: its states over time, its steps, model
    /// calls, waits, budget, saga and journal (read-only).
    Show(ShowArgs),
    /// Pauses a run: no worker moves it and no effect begins until it is
    /// resumed (writes).
    Pause(OperateArgs),
    /// Resumes a paused run (writes).
    Resume(OperateArgs),
    /// Approves the approval a run waits for, bound to the arguments'
    /// digest `show` printed (writes).
    Approve(ApproveArgs),
    /// Rejects the approval a run waits for, bound to the arguments'
    /// digest `show` printed (writes).
    Reject(ApproveArgs),
    /// Sends a run a signal: it ends a wait for that name, or waits in the
    /// run's inbox (writes).
    Signal(SignalArgs),
    /// Sets a run's budget limits; a limit left out is no limit (writes).
    Budget(BudgetArgs),
    /// After `verify` finds the log damaged: cuts it back to the last good
    /// record so the database opens, keeping a copy of the log as it was
    /// beside it, and says which acknowledged records were lost (offline;
    /// writes).
    Repair(RepairArgs),
    /// Removes the runs over for at least a time whose dedup windows have
    /// all passed, with their journals, ledgers and checkpoints (writes).
    Prune(PruneArgs),
    /// Cancels a run; effects already made stand (writes).
    Cancel(OperateArgs),
    /// Gives up the saga of a compensating run: it ends now, at the end its
    /// saga was headed for, and the compensations not yet done are not done
    /// (the journal names them) (writes).
    Abandon(OperateArgs),
    /// Settles an intended or unknown effect to confirmed or failed, from
    /// what the operator found out (writes).
    Reconcile(ReconcileArgs),
    /// Moves the runs of an agent version that are not over (or the runs
    /// named) to another version of the agent, journaled; the next claim
    /// resumes each with the new version's handler (writes).
    Migrate(MigrateArgs),
    /// Puts a failed run back to pending, from its latest checkpoint or an
    /// earlier one; confirmed acts stay confirmed, failed steps act again
    /// under their next key (writes).
    Retry(RetryArgs),
    /// Starts a new run from a run's checkpoint, at its agent version and
    /// input, acting anew under its own keys (writes).
    Fork(ForkArgs),
    /// Serves a web page for operators on this machine: the runs, one run's
    /// story on a time line, stuck runs, approvals to decide, unknown
    /// effects to reconcile, and `/metrics` for Prometheus. Reads work on a
    /// live database; writes need the token printed at start, and a
    /// database no other process has open.
    Ui(UiArgs),
    /// Runs an agent workflow with a file-backed bank and mailer in child
    /// processes killed at random, and checks every effect happened once.
    Demo(DemoArgs),
    /// One worker process of the demo (started by `actum demo`).
    #[command(hide = true)]
    DemoWorker(WorkerArgs),
    /// The demo's end check alone, on a demo directory kept after a run.
    #[command(hide = true)]
    DemoCheck(CheckArgs),
}

/// A read-only command's arguments.
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`) for `inspect`;
    /// `verify` checks a directory's files.
    pub dir: PathBuf,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Which runs to export.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct Which {
    /// The run to export.
    #[arg(long)]
    pub run: Option<String>,
    /// Every run, in id order.
    #[arg(long)]
    pub all: bool,
}

/// `export`'s arguments.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// One run (`--run ID`) or all of them (`--all`).
    #[command(flatten)]
    pub which: Which,
}

/// `stuck`'s arguments.
#[derive(Debug, Args)]
pub struct StuckArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// How long a wait or an unknown outcome may last: `90s`, `15m`, `1h`,
    /// `2d` (or `500ms`).
    #[arg(
        long = "older-than",
        value_name = "DURATION",
        value_parser = parse_duration_ms,
        default_value = "1h"
    )]
    pub older_than_ms: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `runs`' arguments.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// Only runs in this state (`pending`, `running`, `waiting_tool`,
    /// `waiting_human`, `paused`, `completed`, `failed`, `cancelled`,
    /// `compensating`).
    #[arg(long, value_parser = parse_state)]
    pub state: Option<RunState>,
    /// Only runs of this agent kind (the part of `kind@version` before `@`).
    #[arg(long)]
    pub kind: Option<String>,
    /// Only runs of this agent version (the part after `@`).
    #[arg(long)]
    pub version: Option<String>,
    /// Only runs created within this long: `90s`, `15m`, `2h`, `7d`.
    #[arg(long = "since", value_name = "DURATION", value_parser = parse_duration_ms)]
    pub since_ms: Option<u64>,
    /// At most this many runs (1 to 10,000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    pub limit: u16,
    /// Start after this run id (what the previous page printed last).
    #[arg(long)]
    pub after: Option<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `tail`'s arguments.
#[derive(Debug, Args)]
pub struct TailArgs {
    /// The database directory (its log and files: not a postgres:// URL).
    pub dir: PathBuf,
    /// Only the lines of this run.
    #[arg(long)]
    pub run: Option<String>,
    /// Start at the oldest record the log still holds, not at its end.
    #[arg(long)]
    pub from_start: bool,
    /// How long to wait between two looks: `200ms`, `1s`, `5s`.
    #[arg(long = "interval", value_name = "DURATION", value_parser = parse_duration_ms, default_value = "1s")]
    pub interval_ms: u64,
    /// Stop after this many looks (default: follow until stopped).
    #[arg(long)]
    pub reads: Option<u64>,
}

/// `show`'s arguments.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// The run.
    pub run: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `ui`'s arguments.
#[derive(Debug, Args)]
pub struct UiArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// The address to listen on: loopback unless told otherwise (port 0
    /// takes a free one; the URL printed says which).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8750")]
    pub listen: std::net::SocketAddr,
}

/// Parses a run state by its name, as `actum inspect` prints it.
pub(crate) fn parse_state(text: &str) -> Result<RunState, String> {
    RunState::ALL
        .into_iter()
        .find(|s| s.name() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = RunState::ALL.iter().map(|s| s.name()).collect();
            format!(
                "no run state is called {text:?}; the states are {}",
                names.join(", ")
            )
        })
}

/// An operator's move on a run: who, on which run, and why.
#[derive(Debug, Args)]
pub struct OperateArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// The request's id, the same for every retry of one request: a
    /// request the engine carried out already under it is not carried out
    /// again. One is made up if none is given.
    #[arg(long = "request-id", value_name = "ID")]
    pub request_id: Option<String>,
    /// The run.
    #[arg(long)]
    pub run: String,
    /// Who does it (journaled).
    #[arg(long)]
    pub operator: String,
    /// Why (journaled).
    #[arg(long)]
    pub reason: String,
    /// Print one JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

/// `approve`'s and `reject`'s arguments.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// The request's id, the same for every retry of one request: a
    /// request the engine carried out already under it is not carried out
    /// again. One is made up if none is given.
    #[arg(long = "request-id", value_name = "ID")]
    pub request_id: Option<String>,
    /// The run that waits.
    #[arg(long)]
    pub run: String,
    /// The first hex digits (8 or more) of the digest of the arguments
    /// being approved, as `actum show` prints them: the answer is refused
    /// if the run waits for an approval of other arguments.
    #[arg(long)]
    pub digest: String,
    /// Who decides (journaled).
    #[arg(long)]
    pub approver: String,
    /// What they note (journaled).
    #[arg(long, default_value = "")]
    pub note: String,
    /// Print one JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

/// `repair`'s arguments.
#[derive(Debug, Args)]
pub struct RepairArgs {
    /// The database directory (its log and files: not a postgres:// URL).
    pub dir: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `prune`'s arguments.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// How long a run must have been over: `90s`, `15m`, `2h`, `30d`.
    #[arg(long = "older-than", value_name = "DURATION", value_parser = parse_duration_ms)]
    pub older_than_ms: u64,
    /// Who prunes (journaled with the request's mark).
    #[arg(long, default_value = "operator")]
    pub operator: String,
    /// Why (journaled with the request's mark).
    #[arg(long, default_value = "retention")]
    pub reason: String,
    /// The request's id, the same for every retry of one request: a
    /// request the engine carried out already under it is not carried out
    /// again. One is made up if none is given.
    #[arg(long = "request-id", value_name = "ID")]
    pub request_id: Option<String>,
    /// Print one JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

/// `signal`'s arguments.
#[derive(Debug, Args)]
pub struct SignalArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// The request's id, the same for every retry of one request: a
    /// request the engine carried out already under it is not carried out
    /// again. One is made up if none is given.
    #[arg(long = "request-id", value_name = "ID")]
    pub request_id: Option<String>,
    /// The run.
    #[arg(long)]
    pub run: String,
    /// The signal's name (what the run's step waits for).
    #[arg(long)]
    pub name: String,
    /// What it carries, as text (default: nothing).
    #[arg(long)]
    pub payload: Option<String>,
    /// Who sends it (journaled).
    #[arg(long)]
    pub sender: String,
    /// Print one JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

/// `budget`'s arguments: the limits (a limit left out is no limit).
#[derive(Debug, Args)]
pub struct BudgetArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// The request's id, the same for every retry of one request: a
    /// request the engine carried out already under it is not carried out
    /// again. One is made up if none is given.
    #[arg(long = "request-id", value_name = "ID")]
    pub request_id: Option<String>,
    /// The run.
    #[arg(long)]
    pub run: String,
    /// Prompt tokens.
    #[arg(long)]
    pub tokens_in: Option<u64>,
    /// Completion tokens.
    #[arg(long)]
    pub tokens_out: Option<u64>,
    /// Money, in integer micro-units of the caller's currency.
    #[arg(long)]
    pub cost_micros: Option<u64>,
    /// Tool calls.
    #[arg(long)]
    pub tool_calls: Option<u64>,
    /// Time running, as `90s`, `15m`, `2h`.
    #[arg(long = "wall", value_name = "DURATION", value_parser = parse_duration_ms)]
    pub wall_ms: Option<u64>,
    /// Who sets it (journaled).
    #[arg(long)]
    pub by: String,
    /// Why (journaled).
    #[arg(long)]
    pub reason: String,
    /// Print one JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

/// What the operator found an effect's act did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Found {
    /// The act happened: give its `--receipt`.
    Confirmed,
    /// The act did not happen: give the `--error`.
    Failed,
}

/// `reconcile`'s arguments.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// The request's id, the same for every retry of one request: a
    /// request the engine carried out already under it is not carried out
    /// again. One is made up if none is given.
    #[arg(long = "request-id", value_name = "ID")]
    pub request_id: Option<String>,
    /// The effect's key, `run/step/attempt` (or `run/step/undo/attempt`).
    #[arg(long)]
    pub key: String,
    /// What the act did.
    #[arg(long, value_enum)]
    pub outcome: Found,
    /// The tool's receipt, for `--outcome confirmed`.
    #[arg(long, required_if_eq("outcome", "confirmed"), conflicts_with = "error")]
    pub receipt: Option<String>,
    /// What went wrong, for `--outcome failed`.
    #[arg(long, required_if_eq("outcome", "failed"))]
    pub error: Option<String>,
    /// With `--outcome failed`: the step may be tried again (a new attempt,
    /// with a new key).
    #[arg(long, requires = "error")]
    pub retryable: bool,
    /// Who settles it (journaled).
    #[arg(long)]
    pub operator: String,
    /// How it was found out (journaled).
    #[arg(long)]
    pub reason: String,
    /// Print one JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

/// `demo`'s arguments.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Runs of the workflow (default 600, or 80 with `--quick`).
    #[arg(long)]
    pub runs: Option<u32>,
    /// Times a worker process is killed with SIGKILL (default 100, or 25
    /// with `--quick`).
    #[arg(long)]
    pub kills: Option<u32>,
    /// Seeds every random choice: the kill delays and the tools' latency.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A short run for CI: fewer runs and kills.
    #[arg(long)]
    pub quick: bool,
    /// Where to keep the database, bank and mailer (default: a new
    /// temporary directory, removed after a passing run).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// A demo worker's arguments.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The demo directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Seeds the tools' latency in this process.
    #[arg(long)]
    pub seed: u64,
    /// Worker threads in this process.
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
}

/// `demo-check`'s arguments.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The demo directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// How many runs the demo made.
    #[arg(long)]
    pub runs: u32,
}

/// `migrate`'s arguments.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// The agent kind (a runtime's runs are `KIND@VERSION`).
    #[arg(long)]
    pub kind: String,
    /// The version the runs are at now.
    #[arg(long)]
    pub from: String,
    /// The version to move them to.
    #[arg(long)]
    pub to: String,
    /// Only this run (repeat for more); by default every run of
    /// `KIND@FROM` that is not over.
    #[arg(long = "run", value_name = "RUN")]
    pub runs: Vec<String>,
    /// Who moves them (journaled).
    #[arg(long)]
    pub operator: String,
    /// Why (journaled).
    #[arg(long)]
    pub reason: String,
    /// Print one JSON object instead of sentences.
    #[arg(long)]
    pub json: bool,
}

/// `retry`'s arguments.
#[derive(Debug, Args)]
pub struct RetryArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// The failed run.
    #[arg(long)]
    pub run: String,
    /// The checkpoint version it goes on from (default: its latest).
    #[arg(long)]
    pub checkpoint: Option<u64>,
    /// Who retries it (journaled).
    #[arg(long)]
    pub operator: String,
    /// Why (journaled).
    #[arg(long)]
    pub reason: String,
    /// Print one JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

/// `fork`'s arguments.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The database directory, or a postgres:// URL (the books in
    /// PostgreSQL: `postgres://user@host:port/dbname`).
    pub dir: PathBuf,
    /// The run forked.
    #[arg(long)]
    pub run: String,
    /// The new run's name.
    #[arg(long)]
    pub into: String,
    /// The checkpoint version of `--run` it starts from (default: its
    /// latest).
    #[arg(long)]
    pub checkpoint: Option<u64>,
    /// Who forks it (journaled).
    #[arg(long)]
    pub operator: String,
    /// Why (journaled).
    #[arg(long)]
    pub reason: String,
    /// Print one JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

//! The one public error type. Every variant carries what a person needs to
//! act on it at 3 a.m.: the file, offset, run or key involved.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::books::{Digest, EffectKey, FencingToken, RunId, RunState, StepId};
use crate::ids::{DatabaseId, Lsn};

pub use crate::state::RedbPanicked;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in actum.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An I/O call failed.
    Io {
        /// What the engine was doing (`"sync segment"`, `"read manifest"`, ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// Bytes on disk that the engine had acknowledged, or depends on, are
    /// damaged. The database is not opened; nothing is guessed.
    Corrupt {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damage within `file`.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// Another open database holds the directory's lock.
    Locked {
        /// The database directory.
        dir: PathBuf,
    },
    /// A snapshot of a live database (`Engine::open_snapshot`) found the
    /// files changed under every copy it took (a checkpoint each time):
    /// nothing wrong was read, and trying again later may succeed.
    SnapshotUnstable {
        /// The database directory.
        dir: PathBuf,
        /// How many copies were taken.
        attempts: u64,
        /// What changed under the last one.
        changed: String,
    },
    /// An open that needs a database (`Engine::open_read_only`,
    /// `Engine::open_existing`) or a verify found none in the directory,
    /// and created none.
    NoDatabase {
        /// The directory.
        dir: PathBuf,
        /// What is there instead (nothing, other files, an interrupted
        /// creation).
        found: String,
    },
    /// An earlier `fsync` failed, so the log no longer knows what is on disk.
    /// Every write fails until the database is reopened.
    Poisoned {
        /// The failure that poisoned the log: the flush's own error (an
        /// `Io` naming the segment file, as a rule). Shared, as every later
        /// write is refused with it.
        cause: Arc<Error>,
    },
    /// A record larger than the configured maximum was refused.
    RecordTooLarge {
        /// The record's size in bytes.
        size_bytes: u64,
        /// The configured maximum in bytes.
        max_bytes: u64,
    },
    /// A file belongs to another database.
    ForeignFile {
        /// The file.
        file: PathBuf,
        /// This database's id.
        expected: DatabaseId,
        /// The id found in the file.
        found: DatabaseId,
    },
    /// A file was written by a format version this build cannot read.
    UnsupportedFormat {
        /// The file.
        file: PathBuf,
        /// The version found in the file.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// A WAL record, intact by its checksums, holds a payload version this
    /// build does not read: another build wrote it. Nothing is skipped and
    /// nothing is changed; the database is not opened.
    UnsupportedPayload {
        /// The segment file holding the record.
        file: PathBuf,
        /// The record's byte offset within `file`.
        offset: u64,
        /// The record's LSN.
        lsn: Lsn,
        /// The payload version found (the payload's first byte).
        found: u8,
        /// The payload versions this build reads, oldest first.
        supported: &'static [u8],
    },
    /// No copy of the manifest is valid, so the database root is unknown.
    NoValidManifest {
        /// The database directory.
        dir: PathBuf,
        /// Why each copy was rejected.
        reasons: Vec<String>,
    },
    /// A read asked for an LSN the log no longer (or never) held.
    LsnOutOfRange {
        /// The LSN asked for.
        requested: Lsn,
        /// The oldest LSN the log still holds.
        first: Lsn,
        /// The newest LSN the log holds.
        last: Lsn,
    },
    /// Options given to the engine are inconsistent.
    InvalidConfig {
        /// What is wrong with them.
        reason: String,
    },
    /// The redb state store failed.
    StateStore {
        /// The state store file.
        file: PathBuf,
        /// What the engine was doing.
        op: &'static str,
        /// redb's error (boxed, so redb's types stay out of this crate's
        /// API; [`std::error::Error::source`] returns it), or a
        /// [`RedbPanicked`] when redb panicked on damaged bytes instead of
        /// returning one.
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A call to the PostgreSQL server the books live in failed
    /// (`actum::pg`, the `postgres` feature).
    Postgres {
        /// The server, as its URL names it without a password.
        server: String,
        /// What the engine was doing.
        op: &'static str,
        /// Whether the command may have landed: `false` when the failure
        /// came before the commit was sent, so nothing of it is in the
        /// books; `true` when the connection broke while the commit was in
        /// flight, so it landed whole or not at all, as after a failed
        /// fsync: read the books to find out.
        may_have_landed: bool,
        /// The client's error (boxed, so its types stay out of this
        /// crate's API).
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The call belongs to the embedded engine's directory (its log, its
    /// operator channel) and the books are in PostgreSQL
    /// (`Engine::open_postgres`).
    NotOnPostgres {
        /// The call.
        what: &'static str,
        /// What to do instead.
        instead: &'static str,
    },
    /// A run, step, worker, tool or part name is not acceptable.
    InvalidName {
        /// What the name names (`"run id"`, `"tool"`, ...).
        what: &'static str,
        /// The name (cut to a bounded length).
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A command is malformed in a way no state could make valid.
    InvalidCommand {
        /// What is wrong with it.
        reason: String,
    },
    /// A run, effect or checkpoint the command names does not exist.
    NotFound {
        /// What was looked for (`"run po-17"`, `"effect po-17/pay/1"`).
        what: String,
    },
    /// A run was created again under the same id with a different input.
    RunInputMismatch {
        /// The run.
        run: RunId,
        /// The recorded input and agent version.
        recorded: String,
        /// The ones presented now.
        presented: String,
    },
    /// The run is not running (pending, paused or waiting), and what was
    /// asked needs it to be: no effect begins, and no worker moves a paused
    /// run, until it runs (an operator resumes a paused run).
    RunNotRunning {
        /// The run.
        run: RunId,
        /// Its state.
        state: RunState,
        /// What was refused (`begin an effect`).
        refused: &'static str,
    },
    /// The run has finished; nothing may change it any more.
    RunTerminal {
        /// The run.
        run: RunId,
        /// Its terminal state.
        state: RunState,
    },
    /// The run's state machine does not allow this move.
    IllegalTransition {
        /// The run.
        run: RunId,
        /// Its current state.
        from: RunState,
        /// The state asked for.
        to: RunState,
    },
    /// The run changed since the caller read it (optimistic concurrency).
    VersionConflict {
        /// The run.
        run: RunId,
        /// The version the caller expected.
        expected: u64,
        /// The run's version now.
        actual: u64,
    },
    /// Another worker holds a live lease on the run.
    LeaseHeld {
        /// The run.
        run: RunId,
        /// The holder.
        worker: crate::books::WorkerId,
        /// When its lease expires, ms since the epoch.
        expires_ms: u64,
    },
    /// The caller's lease expired or was released; it no longer owns the run.
    LeaseLost {
        /// The run.
        run: RunId,
        /// The token the caller presented.
        token: FencingToken,
    },
    /// The caller presented a guard granted on another run: a worker's code
    /// mixed up two runs (tokens count per run, so the worker and token
    /// alone could match).
    GuardOfAnotherRun {
        /// The run the command is about.
        run: RunId,
        /// The run the guard was granted on.
        guard_run: RunId,
    },
    /// The caller presented a stale fencing token: someone else owns the run.
    Fenced {
        /// The run.
        run: RunId,
        /// The token presented.
        presented: FencingToken,
        /// The run's current token.
        current: FencingToken,
    },
    /// A step was begun with a different tool or arguments than its
    /// recorded intent.
    ArgsMismatch {
        /// The recorded attempt's key.
        key: EffectKey,
        /// The recorded tool and args digest.
        recorded: String,
        /// The presented tool and args digest.
        presented: String,
    },
    /// The effect is not in a status that allows this (already settled, ...).
    EffectNotOpen {
        /// The attempt.
        key: EffectKey,
        /// Its status.
        status: &'static str,
    },
    /// A replayed model call has a different input than the journal records
    /// at that position: the run took another path than before.
    Divergence {
        /// The run.
        run: RunId,
        /// The position in the run's decision journal.
        position: u64,
        /// The recorded input digest.
        recorded: Digest,
        /// The input digest attempted now.
        attempted: Digest,
    },
    /// A checkpoint was written under another schema version than the
    /// reader expects, and no migration was applied.
    SchemaMismatch {
        /// The run.
        run: RunId,
        /// The checkpoint's schema version.
        found: u32,
        /// The version the reader expects.
        expected: u32,
    },
    /// A payload exceeds its limit.
    TooLarge {
        /// What was too large.
        what: String,
        /// Its size in bytes (or count, where `what` says so).
        size_bytes: u64,
        /// The limit.
        max_bytes: u64,
    },
    /// One command of an atomic batch was refused, so none was applied.
    BatchRefused {
        /// Index of the refused command in the batch, from 0.
        index: usize,
        /// Why it was refused.
        cause: Box<Error>,
    },
    /// The books contradict themselves (a missing or damaged blob, a gap in
    /// a journal): a bug or corruption, never guessed around.
    Inconsistent {
        /// What is inconsistent.
        what: String,
    },
    /// The engine stopped accepting commands: a failure after a record
    /// became durable (applying it to the state store, or a checkpoint)
    /// left the in-memory state uncertain. Reopening replays the log.
    Halted {
        /// What failed (`"a failed log append"`, `"a failed checkpoint"`,
        /// `"a panic while holding the engine lock"`, ...).
        after: &'static str,
        /// The error that failure returned, if it was one (a panic is not):
        /// the first call to meet it gets it here too, and so does every
        /// later one.
        cause: Option<Arc<Error>>,
    },
    /// A step asked again for a wait with other terms than the wait it
    /// opened.
    WaitMismatch {
        /// The run.
        run: RunId,
        /// The step.
        step: StepId,
        /// The recorded terms.
        recorded: String,
        /// The presented terms.
        presented: String,
    },
    /// The run waits at a step; it runs again only when that wait ends.
    WaitOpen {
        /// The run.
        run: RunId,
        /// The waiting step.
        step: StepId,
        /// What it waits for.
        waits_for: String,
    },
    /// The wait at the step already ended (decided, signalled, elapsed).
    WaitEnded {
        /// The run.
        run: RunId,
        /// The step.
        step: StepId,
        /// How it ended (`approved`, ...).
        status: &'static str,
    },
    /// An approval came at or after the wait's deadline.
    ApprovalExpired {
        /// The run.
        run: RunId,
        /// The step.
        step: StepId,
        /// The deadline, ms since the epoch.
        deadline_ms: u64,
        /// When the approval came, ms since the epoch.
        now_ms: u64,
    },
    /// An approval named other arguments than the effect the wait is bound
    /// to.
    ApprovalMismatch {
        /// The run.
        run: RunId,
        /// The step.
        step: StepId,
        /// The digest the wait is bound to.
        bound: Digest,
        /// The digest the approver named.
        presented: Digest,
    },
    /// A settle named a charge that was neither reserved nor recorded.
    NotReserved {
        /// The run.
        run: RunId,
        /// The charge, in words (`model call 3`, `the act of step pay`).
        charge: String,
    },
    /// A step's act was begun on a run with budget limits, and it would
    /// pass one: one more tool call than `tool_calls` allows (unless a
    /// reserve already holds this act), or a limit of the run or of an
    /// ancestor it draws on is already passed, or the run's time running
    /// is used up. The act is not begun and nothing is recorded.
    BudgetExhausted {
        /// The run.
        run: RunId,
        /// The step whose act was refused.
        step: StepId,
        /// Which limit, of which run's budget, and what it holds.
        limit: String,
    },
    /// An effect was begun at a step whose approval was not granted.
    NotApproved {
        /// The run.
        run: RunId,
        /// The step.
        step: StepId,
        /// Where its approval stands (`open`, `rejected`, `elapsed`).
        status: &'static str,
    },
    /// Another run holds the resource's live lease.
    ResourceHeld {
        /// The resource.
        resource: crate::books::ResourceId,
        /// The run that holds it.
        holder: RunId,
        /// When its hold expires, ms since the epoch.
        expires_ms: u64,
    },
    /// The run does not hold the resource's live lease (it expired, was
    /// released, or another run holds it).
    ResourceNotHeld {
        /// The resource.
        resource: crate::books::ResourceId,
        /// The run.
        run: RunId,
    },
    /// A shared key's compare-and-set named a version the key is not at.
    SharedVersionConflict {
        /// The key.
        key: crate::books::SharedKeyId,
        /// The version the setter read.
        expected: u64,
        /// The key's version now.
        actual: u64,
    },
    /// A saga cannot end yet: something it must undo, or learn, is
    /// outstanding.
    SagaOutstanding {
        /// The compensating run.
        run: RunId,
        /// What is outstanding, in words (the step or the attempt).
        next: String,
    },
    /// An approval came in another role than the wait asks for.
    ApproverRole {
        /// The run.
        run: RunId,
        /// The step.
        step: StepId,
        /// The role the wait asks for.
        required: String,
        /// The role presented.
        presented: String,
    },
    /// Bytes given to the op decoder are not a valid op.
    OpDecode {
        /// What the decoder found.
        reason: String,
    },
    /// An operator's move of a run to another agent version expected it at
    /// one version and found it at another.
    AgentVersionMismatch {
        /// The run.
        run: RunId,
        /// The agent version the move expected (its `from`).
        expected: String,
        /// The agent version the run is at.
        found: String,
    },
    /// An operator's retry of a run was refused: the run is not failed,
    /// its saga undid what it did, or a parent waits or waited for it.
    RetryRefused {
        /// The run.
        run: RunId,
        /// Why, in words.
        reason: String,
    },
}

impl Error {
    /// Wraps an I/O error with the operation and path it came from.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Whether the call may succeed when made again as it is: a failure of
    /// the PostgreSQL server's or of the network's (`Error::Postgres`: the
    /// next call connects again), not a refusal of the books' and not
    /// damage.
    ///
    /// ```
    /// use actum::Error;
    ///
    /// let refused = Error::InvalidCommand { reason: "no".into() };
    /// assert!(!refused.is_transient());
    /// ```
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Postgres { .. })
    }

    /// A `Corrupt` error at `file`:`offset`.
    pub fn corrupt(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => {
                write!(f, "I/O error during {op} on {}: {source}", path.display())
            }
            Error::Corrupt {
                file,
                offset,
                reason,
            } => write!(
                f,
                "corruption in {} at byte offset {offset}: {reason}; the database was not \
                 opened so nothing acknowledged is silently lost (see docs/DURABILITY.md, repair)",
                file.display()
            ),
            Error::Locked { dir } => write!(
                f,
                "database directory {} is already open (its LOCK is held by another process or \
                 handle); close that one first",
                dir.display()
            ),
            Error::SnapshotUnstable {
                dir,
                attempts,
                changed,
            } => write!(
                f,
                "no consistent snapshot of {} in {attempts} attempts: the engine writing it \
                 changed the files under each copy (the last time: {changed}); try again",
                dir.display()
            ),
            Error::NoDatabase { dir, found } => write!(
                f,
                "no actum database in {}: {found}; nothing was created or changed",
                dir.display()
            ),
            Error::Poisoned { cause } => write!(
                f,
                "the write-ahead log is poisoned by an earlier fsync failure ({cause}); no \
                 further writes are accepted: reopen the database to recover the durable prefix"
            ),
            Error::RecordTooLarge {
                size_bytes,
                max_bytes,
            } => write!(
                f,
                "record of {size_bytes} bytes refused: the configured maximum is {max_bytes} bytes"
            ),
            Error::ForeignFile {
                file,
                expected,
                found,
            } => write!(
                f,
                "{} belongs to database {found}, not to this database {expected}; refusing to \
                 read it",
                file.display()
            ),
            Error::UnsupportedFormat {
                file,
                found,
                supported,
            } => write!(
                f,
                "{} has format version {found}; this build reads version {supported}",
                file.display()
            ),
            Error::UnsupportedPayload {
                file,
                offset,
                lsn,
                found,
                supported,
            } => unsupported_payload(f, file, (*offset, *lsn), *found, supported),
            Error::NoValidManifest { dir, reasons } => write!(
                f,
                "no valid manifest copy in {}: {}",
                dir.display(),
                reasons.join("; ")
            ),
            Error::LsnOutOfRange {
                requested,
                first,
                last,
            } => write!(
                f,
                "{requested} is outside the log, which holds {} to {}",
                first.0, last.0
            ),
            Error::InvalidConfig { reason } => write!(f, "invalid configuration: {reason}"),
            Error::NotOnPostgres { what, instead } => write!(
                f,
                "{what} is the embedded engine's and the books are in PostgreSQL: {instead}"
            ),
            Error::StateStore { file, op, source } => {
                write!(
                    f,
                    "state store {} failed during {op}: {source}",
                    file.display()
                )
            }
            Error::Postgres {
                server,
                op,
                may_have_landed,
                source,
            } => {
                write!(f, "PostgreSQL at {server} failed during {op}: {source}")?;
                if *may_have_landed {
                    write!(
                        f,
                        " (the connection broke while the commit was in flight: the command \
                         landed whole or not at all; read the books to see which)"
                    )?;
                }
                Ok(())
            }
            Error::InvalidName { what, name, reason } => {
                write!(f, "invalid {what} {name:?}: {reason}")
            }
            Error::InvalidCommand { reason } => write!(f, "invalid command: {reason}"),
            Error::NotFound { what } => write!(f, "{what} does not exist in the books"),
            Error::RunInputMismatch {
                run,
                recorded,
                presented,
            } => write!(
                f,
                "run {run} already exists with {recorded}, but was created again with \
                 {presented}; a run id names one input: pick a new id for a new input"
            ),
            Error::RunNotRunning {
                run,
                state,
                refused,
            } => write!(
                f,
                "run {run} is {state}, not running: cannot {refused}{}",
                match state {
                    RunState::Paused => " until an operator resumes it",
                    RunState::Pending => " before a worker starts it (transition to running)",
                    RunState::Compensating =>
                        " while it compensates (its saga undoes its acts, then ends it)",
                    _ => " while it waits (it runs again when the wait ends)",
                }
            ),
            Error::RunTerminal { run, state } => write!(
                f,
                "run {run} is {state}, which is final; nothing may change it (start a new run \
                 to continue the work)"
            ),
            Error::IllegalTransition { run, from, to } => write!(
                f,
                "run {run} cannot go from {from} to {to}: the run state machine does not allow \
                 it (see transition_allowed)"
            ),
            Error::VersionConflict {
                run,
                expected,
                actual,
            } => write!(
                f,
                "run {run} is at version {actual}, not the expected {expected}: it changed since \
                 it was read; re-read the run and decide again"
            ),
            Error::LeaseHeld {
                run,
                worker,
                expires_ms,
            } => write!(
                f,
                "run {run} is leased by worker {worker} until {expires_ms} ms; wait for expiry or \
                 claim another run"
            ),
            Error::LeaseLost { run, token } => write!(
                f,
                "run {run}: the lease under {token} expired or was released, so this worker no \
                 longer owns the run; stop acting on it and claim it again to resume"
            ),
            Error::GuardOfAnotherRun { run, guard_run } => write!(
                f,
                "run {run}: the guard presented was granted on run {guard_run}, not on this one; \
                 present the guard of the lease on {run}"
            ),
            Error::Fenced {
                run,
                presented,
                current,
            } => write!(
                f,
                "run {run}: {presented} is stale, the run is now at {current}; another worker \
                 took the run over, so this (paused or partitioned) worker must stop and not act"
            ),
            Error::ArgsMismatch {
                key,
                recorded,
                presented,
            } => write!(
                f,
                "effect {key} was recorded as {recorded} but is now begun as {presented}; the \
                 same step must repeat the same call (use a new step id for a different act)"
            ),
            Error::EffectNotOpen { key, status } => write!(
                f,
                "effect {key} is {status}, so this outcome cannot be recorded for it"
            ),
            Error::Divergence {
                run,
                position,
                recorded,
                attempted,
            } => write!(
                f,
                "run {run} diverged at model call {position}: the journal holds input {} but \
                 the replay attempted input {}; the agent code or its inputs changed since the \
                 run was recorded",
                recorded.short(),
                attempted.short()
            ),
            Error::SchemaMismatch {
                run,
                found,
                expected,
            } => write!(
                f,
                "the checkpoint of run {run} has schema version {found}, this code expects \
                 {expected}; register a migration from {found} or run a matching agent version"
            ),
            Error::TooLarge {
                what,
                size_bytes,
                max_bytes,
            } => write!(
                f,
                "{what} is {size_bytes} bytes, over the limit of {max_bytes}; split it or store \
                 it elsewhere and keep its digest"
            ),
            Error::BatchRefused { index, cause } => write!(
                f,
                "batch refused at command {index}, so none of it was committed: {cause}"
            ),
            Error::Inconsistent { what } => write!(
                f,
                "the books are inconsistent: {what}; this is a bug or corruption, nothing was \
                 guessed (verify the database directory)"
            ),
            Error::Halted { after, cause } => {
                write!(f, "the engine halted after {after}")?;
                if let Some(cause) = cause {
                    write!(f, " ({cause})")?;
                }
                write!(
                    f,
                    "; the log holds every acknowledged command, so close this handle and \
                     reopen the database to recover"
                )
            }
            Error::WaitMismatch {
                run,
                step,
                recorded,
                presented,
            } => write!(
                f,
                "step {step} of run {run} waits for {recorded}, but was asked to wait for \
                 {presented}; the same step must ask for the same wait (use a new step id for \
                 another)"
            ),
            Error::WaitOpen {
                run,
                step,
                waits_for,
            } => write!(
                f,
                "run {run} waits at step {step} for {waits_for}; it runs again when that wait \
                 ends (an approval, a signal, or its deadline), not on a worker's transition"
            ),
            Error::WaitEnded { run, step, status } => write!(
                f,
                "the wait at step {step} of run {run} already ended ({status}); it is decided \
                 once"
            ),
            Error::ApprovalExpired {
                run,
                step,
                deadline_ms,
                now_ms,
            } => write!(
                f,
                "the approval at step {step} of run {run} expired at {deadline_ms} ms (now \
                 {now_ms} ms); the run takes its path for an expired approval"
            ),
            Error::ApprovalMismatch {
                run,
                step,
                bound,
                presented,
            } => write!(
                f,
                "the approval at step {step} of run {run} is bound to arguments {}, not {}: \
                 the approver saw another effect than the run will make; nothing was approved",
                bound.short(),
                presented.short()
            ),
            Error::NotReserved { run, charge } => write!(
                f,
                "{charge} of run {run} has no open reservation to settle, and was never \
                 recorded; reserve before the call"
            ),
            Error::BudgetExhausted { run, step, limit } => write!(
                f,
                "the act of step {step} of run {run} would pass its budget: {limit}; nothing \
                 was begun (reserve the call first: a refused reserve pauses the run until an \
                 operator raises the budget)"
            ),
            Error::NotApproved { run, step, status } => write!(
                f,
                "step {step} of run {run} asked for an approval that is {status}; its effect \
                 does not begin without one"
            ),
            Error::ResourceHeld {
                resource,
                holder,
                expires_ms,
            } => write!(
                f,
                "resource {resource} is held by run {holder} until {expires_ms} ms; try again \
                 after that, or once it is released"
            ),
            Error::ResourceNotHeld { resource, run } => write!(
                f,
                "run {run} does not hold resource {resource} (its hold expired, was released, \
                 or went to another run); acquire it again before acting on it"
            ),
            Error::SharedVersionConflict {
                key,
                expected,
                actual,
            } => write!(
                f,
                "shared key {key} is at version {actual}, not {expected}: someone set it since \
                 it was read; read it again and decide again"
            ),
            Error::SagaOutstanding { run, next } => write!(
                f,
                "the saga of run {run} cannot end yet: {next} (Engine::saga_next says what to \
                 do; an operator may abandon it)"
            ),
            Error::ApproverRole {
                run,
                step,
                required,
                presented,
            } => write!(
                f,
                "the approval at step {step} of run {run} needs the role {required}, not \
                 {presented}"
            ),
            Error::OpDecode { reason } => write!(f, "bytes are not a valid books op: {reason}"),
            Error::AgentVersionMismatch {
                run,
                expected,
                found,
            } => write!(
                f,
                "run {run} runs agent {found}, not {expected}: it was not moved (read the run \
                 again and name the version it is at)"
            ),
            Error::RetryRefused { run, reason } => {
                write!(f, "run {run} cannot be retried: {reason}")
            }
        }
    }
}

/// The message of [`Error::UnsupportedPayload`]: what was found, and which
/// build can read it.
fn unsupported_payload(
    f: &mut fmt::Formatter<'_>,
    file: &std::path::Path,
    (offset, lsn): (u64, Lsn),
    found: u8,
    supported: &[u8],
) -> fmt::Result {
    let newest = supported.iter().copied().max().unwrap_or(0);
    let remedy = if found > newest {
        "a newer build of actum wrote this record, so open the database with that build"
    } else {
        "an older build wrote this record and this build no longer reads its version, so open \
         the database with a build that does and checkpoint it"
    };
    write!(
        f,
        "{} at byte offset {offset}: the record at {lsn} has record payload version {found}; \
         this build reads {}. The database was not opened and nothing was changed: {remedy}",
        file.display(),
        crate::books::versions_text(supported)
    )
}

/// An op that does not apply to the books `decide` read: `decide` and
/// `apply` disagree, which is a bug. The command is refused before anything
/// is logged (on replay the engine reports `Corrupt` with the record's place
/// instead).
impl From<crate::books::ApplyError> for Error {
    fn from(error: crate::books::ApplyError) -> Error {
        Error::Inconsistent {
            what: format!("decide produced an op that apply refuses ({error})"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::BatchRefused { cause, .. } => Some(cause.as_ref()),
            Error::Poisoned { cause } => Some(cause.as_ref()),
            Error::Halted {
                cause: Some(cause), ..
            } => Some(cause.as_ref()),
            Error::StateStore { source, .. } => Some(source.as_ref()),
            Error::Postgres { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;

    /// A token prints as `token N`, so a message must not say "token"
    /// before it again ("under token token 1").
    #[test]
    fn messages_name_a_token_once() {
        let run = RunId::new("r").unwrap();
        let messages = [
            Error::LeaseLost {
                run: run.clone(),
                token: FencingToken(1),
            },
            Error::Fenced {
                run: run.clone(),
                presented: FencingToken(1),
                current: FencingToken(2),
            },
        ]
        .map(|e| e.to_string());
        for message in messages {
            assert!(message.contains("token 1"), "{message}");
            assert!(!message.contains("token token"), "{message}");
        }
    }
}

//! How an operator's write reaches the books: through the operator channel
//! of the engine that has the directory open (`actum::operator::channel`),
//! or, with no engine serving one, by opening the directory itself, as
//! before there was a channel. Either way the engine carries the request
//! out with `Engine::carry_out`: once, however often it is sent under its
//! id.
//!
//! A request whose answer was lost on the channel (the engine went away,
//! or the socket broke after the request left) is sent once more under
//! the same id: the engine that carried it out answers `Repeated`.
//!
//! On PostgreSQL (a `postgres://` URL in the directory's place) there is
//! no channel: the command opens the database itself, as any process may
//! while others have it open.
//!
//! **Invariant:** a directory held by an engine that serves no channel is
//! never written; the command says what to do instead.

use std::io::Write;
use std::path::Path;

use actum::Error;
use actum::engine::{Engine, EngineOptions};
use actum::operator::{Act, Done, Request, channel};

use crate::failure::CliError;
use crate::operate::say_leases_released;

/// How a request reached the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The live engine's operator channel.
    Channel,
    /// This command opened the directory itself.
    Opened,
}

impl Via {
    /// Its name in `--json` answers.
    pub fn name(self) -> &'static str {
        match self {
            Via::Channel => "channel",
            Via::Opened => "opened",
        }
    }
}

/// A request id for a command that was given none (or a form the page
/// draws): unique among one machine's requests (process id, the clock's
/// nanoseconds and a count).
pub fn made_up_id(given: Option<&str>) -> String {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    given.filter(|id| !id.is_empty()).map_or_else(
        || {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            format!("cli-{}-{nanos}-{n}", std::process::id())
        },
        str::to_string,
    )
}

/// Carries `request` out on the database in `dir` (module docs).
pub fn carry(dir: &Path, request: &Request) -> Result<(Done, Via), CliError> {
    carry_with(dir, request, |engine| engine.carry_out(request))
}

/// [`carry`], with `here` in place of `Engine::carry_out` when this
/// command opens the directory itself (a prune with its progress counter).
pub fn carry_with(
    dir: &Path,
    request: &Request,
    here: impl FnOnce(&Engine) -> actum::Result<Done>,
) -> Result<(Done, Via), CliError> {
    let fail = |e| CliError::engine(dir, e);
    if let Some(url) = crate::place::postgres_url(dir) {
        // No channel and no lock on PostgreSQL: the command opens the
        // database as any process does, beside the engines running there.
        let engine = crate::place::open_postgres(url).map_err(fail)?;
        let done = here(&engine);
        let closed = engine.close();
        let done = done.map_err(fail)?;
        closed.map_err(fail)?;
        return Ok((done, Via::Opened));
    }
    let mut tries = 0;
    loop {
        tries += 1;
        match channel::send(dir, request) {
            Ok(Some(Ok(done))) => return Ok((done, Via::Channel)),
            Ok(Some(Err(refused))) => {
                return Err(CliError::unusable(format!(
                    "{}: the engine that has it open refused request {}: {refused}",
                    dir.display(),
                    request.id
                )));
            }
            Ok(None) => break,
            Err(Error::Io { op, .. }) if tries < 2 && op != channel::CONNECT => {
                // A failed write to stderr is no reason to fail the command.
                let _ = writeln!(
                    std::io::stderr(),
                    "note: the operator channel of {} broke before it answered request {}; \
                     sending it again under the same id",
                    dir.display(),
                    request.id
                );
            }
            Err(e) => return Err(fail(e)),
        }
    }
    let engine = match Engine::open_existing(dir, EngineOptions::default()) {
        Ok(engine) => engine,
        Err(Error::Locked { .. }) => {
            return Err(CliError::unusable(format!(
                "{} is in use by another process whose engine serves no operator channel, \
                 so this write cannot reach it: open it there with \
                 `EngineOptions::operator_channel` (a Runtime then serves the channel), or \
                 run this again once that process has closed it",
                dir.display()
            )));
        }
        Err(e) => return Err(fail(e)),
    };
    say_leases_released(&engine, dir);
    let done = here(&engine);
    let closed = engine.close();
    let done = done.map_err(fail)?;
    closed.map_err(fail)?;
    Ok((done, Via::Opened))
}

/// What a request did, for a person, a line each: what `actum pause`,
/// `reconcile`, `approve`, `signal` and `budget` print, and what the page
/// shows.
pub fn lines(done: &Done, request: &Request) -> Vec<String> {
    let (operator, reason) = (&request.operator, &request.reason);
    match done {
        Done::Operated {
            run,
            before,
            after,
            version,
        } if before != after => vec![format!(
            "run {run}: {before} -> {after} (version {version}), by {operator}: {reason}"
        )],
        Done::Operated { run, before, .. } => {
            vec![format!("run {run} is {before} already; nothing changed")]
        }
        Done::Reconciled {
            key, before, after, ..
        } if before == after => vec![format!("effect {key} is {after} already; nothing changed")],
        Done::Reconciled {
            key,
            before,
            after,
            wait_ended,
        } => {
            let sender = format!("operator {operator}: {reason}");
            let mut lines = vec![format!(
                "effect {key}: {before} -> {after} (journaled as from {sender:?})"
            )];
            if let Some(step) = wait_ended {
                lines.push(format!(
                    "run {}: its wait at step {step} ended; a worker can claim the run again",
                    key.run()
                ));
            }
            lines
        }
        Done::Approval {
            run,
            step,
            role,
            approve,
            woke,
        } => vec![format!(
            "run {run}: step {step} {} by {operator} as {role}{}",
            if *approve { "approved" } else { "rejected" },
            if *woke { "; the run can go on" } else { "" }
        )],
        Done::Signalled { run, seq, taken_by } => {
            let name = match &request.act {
                Act::Signal { name, .. } => name.as_str(),
                _ => "?",
            };
            vec![match taken_by {
                Some(step) => {
                    format!("run {run}: signal {seq} ({name}) ended the wait of step {step}")
                }
                None => format!(
                    "run {run}: signal {seq} ({name}) kept in its inbox until a step waits for it"
                ),
            }]
        }
        Done::Budgeted { run, limits } => vec![format!(
            "run {run}: budget {limits}, set by {operator}: {reason}"
        )],
        Done::Pruned { pruned, kept } => {
            let older = match &request.act {
                Act::Prune { older_than_ms } => crate::text::fmt_duration(*older_than_ms),
                _ => "?".to_string(),
            };
            let total: u64 = kept.iter().map(|(_, n)| n).sum();
            let mut lines = vec![format!(
                "{pruned} run(s) over for {older} or longer left the books; {total} kept"
            )];
            lines.extend(kept.iter().map(|(why, n)| format!("  {n} kept: {why}")));
            lines
        }
        Done::Repeated { id, at_ms, by } => vec![say_repeated(id, *at_ms, by)],
    }
}

/// Carries `request` out on `dir` and says what it did: its lines
/// ([`lines`]), or with `json` one object, `fields` of the command's
/// answer with the request's id and how it went (`via`), or, for a
/// request carried out before, `{"request", "repeated": true, "at_ms",
/// "by"}`. Returns the answer.
pub fn carry_and_say(
    dir: &Path,
    request: &Request,
    json: bool,
    fields: impl FnOnce(&Done) -> Option<serde_json::Value>,
) -> Result<Done, CliError> {
    let (done, via) = carry(dir, request)?;
    say(&done, via, request, json, fields)?;
    Ok(done)
}

/// Says what `request` did ([`carry_and_say`]).
pub fn say(
    done: &Done,
    via: Via,
    request: &Request,
    json: bool,
    fields: impl FnOnce(&Done) -> Option<serde_json::Value>,
) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let said = match (done, json) {
        (Done::Repeated { id, at_ms, by }, true) => {
            let value =
                serde_json::json!({ "request": id, "repeated": true, "at_ms": at_ms, "by": by });
            writeln!(out, "{value}")
        }
        (_, true) => {
            let mut value = fields(done).ok_or_else(|| {
                CliError::unusable(format!(
                    "internal error (please report it): request {} answered {done:?}",
                    request.id
                ))
            })?;
            value["request"] = serde_json::json!(request.id);
            value["via"] = serde_json::json!(via.name());
            writeln!(out, "{value}")
        }
        (_, false) => lines(done, request)
            .iter()
            .try_for_each(|line| writeln!(out, "{line}")),
    };
    said.map_err(CliError::output)
}

/// The sentence for a request carried out before: nothing changed.
pub fn say_repeated(id: &str, at_ms: u64, by: &str) -> String {
    format!(
        "request {id} was carried out already ({}, by {by}); nothing changed",
        crate::text::fmt_local(at_ms)
    )
}

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
//! **Invariant:** a directory held by an engine that serves no channel is
//! never written; the command says what to do instead.

use std::io::Write;
use std::path::Path;

use actum::Error;
use actum::engine::{Engine, EngineOptions};
use actum::operator::{Done, Request, channel};

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

/// A request id for a command that was given none: unique enough for one
/// operator's commands (process id and the clock's nanoseconds).
pub fn made_up_id(given: Option<&str>) -> String {
    given.map_or_else(
        || {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            format!("cli-{}-{nanos}", std::process::id())
        },
        str::to_string,
    )
}

/// Carries `request` out on the database in `dir` (module docs).
pub fn carry(dir: &Path, request: &Request) -> Result<(Done, Via), CliError> {
    let fail = |e| CliError::engine(dir, e);
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
    let done = engine.carry_out(request);
    let closed = engine.close();
    let done = done.map_err(fail)?;
    closed.map_err(fail)?;
    Ok((done, Via::Opened))
}

/// The sentence for a request carried out before: nothing changed.
pub fn say_repeated(id: &str, at_ms: u64, by: &str) -> String {
    format!(
        "request {id} was carried out already ({}, by {by}); nothing changed",
        crate::text::fmt_local(at_ms)
    )
}

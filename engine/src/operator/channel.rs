//! The operator channel: how a command from another process (the `actum`
//! command, the operator's page) reaches the engine that has the database
//! open. The engine serves it when asked to
//! ([`EngineOptions::operator_channel`](crate::engine::EngineOptions) and
//! [`Engine::serve_operators`]): a Unix socket `operator/socket` in the
//! database directory, inside a directory only the engine's owner may
//! enter (mode 0700), so a caller without permission on it gets nothing.
//!
//! One message per connection, each way one frame: a version byte
//! ([`FRAME_VERSION`]), the body's length (4 bytes, little-endian, at most
//! [`FRAME_BYTES_MAX`]) and the body, postcard of a [`Message`] one way and
//! of a [`Response`] the other (docs/FORMAT.md, "Operator channel"). A
//! request ([`send`]) is carried out with [`Engine::carry_out`], under the
//! engine's lock as the command it is, and answered once it is durable; a
//! sender whose answer is lost sends the same request (the same id) again:
//! it is carried out once. A look ([`look`]) is answered with
//! [`Engine::look`]: the whole books as of a durable LSN, read by the
//! engine itself, so a reader of a live database copies no file and
//! replays no log; the metrics ([`metrics`]) with [`Engine::metrics`], the
//! live counters.
//!
//! **Invariant:** the socket exists only while an engine serves it; an
//! engine that stops serving (closed, dropped) removes it, and one that
//! starts replaces a socket a dead process left.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Done, Request};
use crate::engine::{Engine, Look, Metrics};
use crate::error::{Error, Result};

/// The directory, inside the database directory, that holds the socket.
pub const CHANNEL_DIR: &str = "operator";
/// The socket's name in [`CHANNEL_DIR`].
pub const SOCKET_NAME: &str = "socket";
/// The first byte of every frame (1: the body was a bare `Request`).
pub const FRAME_VERSION: u8 = 2;
/// The largest frame body: a request carries at most a receipt or a
/// signal's payload.
pub const FRAME_BYTES_MAX: u32 = 16 << 20;
/// How long either side waits for the other's frame. The engine answers
/// once the request is durable: a group commit, or a checkpoint's wait.
const FRAME_WAIT: Duration = Duration::from_secs(60);

/// The `op` of the `Io` error [`send`] returns when it cannot connect (no
/// request left).
pub const CONNECT: &str = "connect to the operator socket";

/// What the engine answers: what the request did, or why it was refused
/// or failed (the engine's error, as text).
pub type Reply = std::result::Result<Done, String>;

/// What a caller sends (postcard encodes a variant by its index: variants
/// are only ever appended).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// Carry out an operator's request.
    Carry(Request),
    /// Look at the whole books ([`Engine::look`]).
    Look,
    /// The engine's counters, live ([`Engine::metrics`]), with the runs
    /// stuck for `stuck_after_ms` or longer.
    Metrics {
        /// The SLA past which a run counts as stuck.
        stuck_after_ms: u64,
    },
}

/// What the engine answers a [`Message`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The reply to [`Message::Carry`].
    Carried(Reply),
    /// The look, or why it failed (the engine's error, as text).
    Looked(std::result::Result<Look, String>),
    /// The metrics, or why they could not be read.
    Metrics(std::result::Result<Metrics, String>),
}

impl Response {
    /// A response of the same kind saying `reason`.
    fn failed(&self, reason: String) -> Response {
        match self {
            Response::Carried(_) => Response::Carried(Err(reason)),
            Response::Looked(_) => Response::Looked(Err(reason)),
            Response::Metrics(_) => Response::Metrics(Err(reason)),
        }
    }
}

/// What `engine` answers `message`: the engine's errors as text.
fn respond(engine: &Engine, message: Message) -> Response {
    match message {
        Message::Carry(request) => {
            Response::Carried(engine.carry_out(&request).map_err(|e| e.to_string()))
        }
        Message::Look => Response::Looked(engine.look().map_err(|e| e.to_string())),
        Message::Metrics { stuck_after_ms } => {
            Response::Metrics(engine.metrics(stuck_after_ms).map_err(|e| e.to_string()))
        }
    }
}

/// The socket of the database in `dir`.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(CHANNEL_DIR).join(SOCKET_NAME)
}

/// An engine's serving of its channel; stops when dropped.
pub(crate) struct Serving {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Serving {
    /// Stops serving: no request is taken after this returns (one being
    /// answered is finished first), and the socket is gone.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let Some(thread) = self.thread.take() else {
            return;
        };
        // The serving thread may hold the last handle of the engine and
        // be dropping it: it cannot wait for itself.
        if thread.thread().id() == std::thread::current().id() {
            let _ = std::fs::remove_file(&self.path);
            return;
        }
        // Wake its accept. If the socket cannot be reached, the thread is
        // left to end at its next connection.
        if UnixStream::connect(&self.path).is_ok() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Engine {
    /// Serves the operator channel (module docs) until the engine is
    /// closed or dropped, and returns the socket's path. A second call
    /// while serving returns the same path. `InvalidConfig` if the path is
    /// too long for a Unix socket; an `Io` error names what failed.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use actum::books::{CreateRun, OperatorAction, RunId, RunState, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::operator::{Act, Done, Request, channel};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Arc::new(Engine::open(dir.path(), EngineOptions::default())?);
    /// let run = RunId::new("invoice-4")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"4"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// engine.serve_operators()?;
    /// // Another process (here, this one) sends a request through the socket.
    /// let pause = Request { id: "req-7".into(), operator: "ops-anna".into(),
    ///     reason: "vendor on hold".into(),
    ///     act: Act::Operate { run: run.clone(), action: OperatorAction::Pause } };
    /// let reply = channel::send(dir.path(), &pause)?.expect("the engine serves its channel");
    /// assert!(matches!(reply, Ok(Done::Operated { after: RunState::Paused, .. })));
    /// assert_eq!(engine.run(&run)?.expect("created").state, RunState::Paused);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn serve_operators(self: &Arc<Self>) -> Result<PathBuf> {
        let mut serving = self
            .operator_channel
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(serving) = serving.as_ref() {
            return Ok(serving.path.clone());
        }
        #[cfg(feature = "postgres")]
        if self.postgres().is_some() {
            return Err(crate::engine::not_on_postgres(
                "the operator channel",
                "an operator opens the PostgreSQL database with Engine::open_postgres and runs \
                 the command there, as any other process does",
            ));
        }
        let dir = self.local().pipeline.db().dir().join(CHANNEL_DIR);
        let path = dir.join(SOCKET_NAME);
        let io = |op: &'static str, path: &Path, source: std::io::Error| Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        };
        // The sun_path of a Unix socket address holds 107 bytes and a NUL.
        if path.as_os_str().len() > 107 {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "the operator channel's socket {} is {} bytes long; a Unix socket's path \
                     may be 107: open the database from a shorter path",
                    path.display(),
                    path.as_os_str().len()
                ),
            });
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Ok(()),
                _ => Err(e),
            })
            .map_err(|e| io("create the operator channel's directory", &dir, e))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io("make the operator channel's directory owner-only", &dir, e))?;
        // This engine holds the directory's lock: a socket there was left
        // by a process that died.
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("remove a stale operator socket", &path, e)),
        }
        let listener =
            UnixListener::bind(&path).map_err(|e| io("bind the operator socket", &path, e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let engine = Arc::downgrade(self);
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("actum-operator".into())
            .spawn(move || serve(&listener, &engine, &stopping))
            .map_err(|e| io("start the thread serving the operator socket", &path, e))?;
        *serving = Some(Serving {
            path: path.clone(),
            stop,
            thread: Some(thread),
        });
        Ok(path)
    }

    /// Stops serving the operator channel, if it is served.
    pub(crate) fn stop_serving_operators(&self) {
        let serving = self
            .operator_channel
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(mut serving) = serving {
            serving.stop();
        }
    }
}

/// The serving thread: one request per connection, until told to stop or
/// the engine is gone.
fn serve(listener: &UnixListener, engine: &Weak<Engine>, stop: &AtomicBool) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut stream) = stream else {
            continue;
        };
        // A client that sends garbage or goes away gets nothing; the next
        // is served.
        if let Err(Gone) = answer(&mut stream, engine) {
            return;
        }
    }
}

/// The engine was dropped: nothing is served any more.
struct Gone;

/// Reads one request from `stream` and writes the engine's reply. The
/// engine is held only while the request is carried out, so whoever holds
/// the last other handle can close it once the reply is read.
fn answer(stream: &mut UnixStream, engine: &Weak<Engine>) -> std::result::Result<(), Gone> {
    let read = stream
        .set_read_timeout(Some(FRAME_WAIT))
        .and_then(|()| stream.set_write_timeout(Some(FRAME_WAIT)))
        .and_then(|()| read_frame(stream));
    let Ok(body) = read else {
        return Ok(());
    };
    let response = match postcard::from_bytes::<Message>(&body) {
        Ok(message) => {
            let engine = engine.upgrade().ok_or(Gone)?;
            let response = respond(&engine, message);
            drop(engine);
            response
        }
        Err(e) => Response::Carried(Err(format!("the message could not be read: {e}"))),
    };
    if let Err(e) = write_frame(stream, &response) {
        // Too large for a frame: say so, in one that fits.
        let _ = write_frame(
            stream,
            &response.failed(format!("the answer could not be sent: {e}")),
        );
    }
    Ok(())
}

/// Sends `message` to the engine serving the database in `dir`, and
/// returns its response; `Ok(None)` if no engine serves a channel there.
fn exchange(dir: &Path, message: &Message) -> Result<Option<Response>> {
    let path = socket_path(dir);
    let io = |op: &'static str, source: std::io::Error| Error::Io {
        op,
        path: path.clone(),
        source,
    };
    let mut stream = match UnixStream::connect(&path) {
        Ok(stream) => stream,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(io(CONNECT, e)),
    };
    stream
        .set_read_timeout(Some(FRAME_WAIT))
        .and_then(|()| stream.set_write_timeout(Some(FRAME_WAIT)))
        .map_err(|e| io("set the operator socket's timeouts", e))?;
    write_frame(&mut stream, message).map_err(|e| io("send an operator request", e))?;
    let body = read_frame(&mut stream)
        .map_err(|e| io("read the engine's reply (the request may or may not have been carried out; send it again with the same id)", e))?;
    let response = postcard::from_bytes::<Response>(&body).map_err(|e| Error::Corrupt {
        file: path.clone(),
        offset: 0,
        reason: format!("the engine's reply does not decode ({e})"),
    })?;
    Ok(Some(response))
}

/// The answer of another kind than the message's.
fn mismatched(dir: &Path) -> Error {
    Error::Corrupt {
        file: socket_path(dir),
        offset: 0,
        reason: "the engine answered with a response of another kind than the message's"
            .to_string(),
    }
}

/// Asks the engine serving the database in `dir` for a look at its whole
/// books ([`Engine::look`]): as of a durable LSN, read by the engine, no
/// file copied. `Ok(None)` if no engine serves a channel there; the
/// engine's error, as text, in an `Io` error naming the socket if the look
/// failed there.
///
/// ```
/// use std::sync::Arc;
/// use actum::books::{CreateRun, RunId, digest_of};
/// use actum::engine::{Engine, EngineOptions};
/// use actum::operator::channel;
///
/// let dir = tempfile::tempdir()?;
/// let engine = Arc::new(Engine::open(dir.path(), EngineOptions::default())?);
/// engine.create_run(CreateRun { run: RunId::new("audit-1")?, input_digest: digest_of(b"1"),
///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
/// assert!(channel::look(dir.path())?.is_none(), "not served yet");
/// engine.serve_operators()?;
/// let look = channel::look(dir.path())?.expect("the engine serves its channel");
/// assert_eq!((look.runs(), look.lsn), (1, engine.durable_lsn().0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn look(dir: &Path) -> Result<Option<Look>> {
    read(dir, &Message::Look, "look at the live books", |r| match r {
        Response::Looked(look) => Some(look),
        _ => None,
    })
}

/// Sends the read `message` and takes its answer with `pick` (`None`: an
/// answer of another kind); the engine's error in an `Io` error whose
/// `op` is `op`, naming the socket.
fn read<T>(
    dir: &Path,
    message: &Message,
    op: &'static str,
    pick: fn(Response) -> Option<std::result::Result<T, String>>,
) -> Result<Option<T>> {
    let Some(response) = exchange(dir, message)? else {
        return Ok(None);
    };
    match pick(response).ok_or_else(|| mismatched(dir))? {
        Ok(answer) => Ok(Some(answer)),
        Err(reason) => Err(Error::Io {
            op,
            path: socket_path(dir),
            source: std::io::Error::other(reason),
        }),
    }
}

/// Asks the engine serving the database in `dir` for its metrics
/// ([`Engine::metrics`] with `stuck_after_ms`): its live counters and wait
/// times, which only the engine that has the database open holds (a
/// snapshot has the counters its last checkpoint stored, and no wait
/// times). `Ok(None)` if no engine serves a channel there.
///
/// ```
/// use std::sync::Arc;
/// use actum::books::{CreateRun, RunId, digest_of};
/// use actum::engine::{Engine, EngineOptions};
/// use actum::operator::channel;
///
/// let dir = tempfile::tempdir()?;
/// let engine = Arc::new(Engine::open(dir.path(), EngineOptions::default())?);
/// engine.create_run(CreateRun { run: RunId::new("audit-2")?, input_digest: digest_of(b"2"),
///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
/// engine.serve_operators()?;
/// let served = channel::metrics(dir.path(), 3_600_000)?.expect("served");
/// assert_eq!(served, engine.metrics(3_600_000)?);
/// assert!(served.commits >= 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn metrics(dir: &Path, stuck_after_ms: u64) -> Result<Option<Metrics>> {
    let message = Message::Metrics { stuck_after_ms };
    read(
        dir,
        &message,
        "read the live engine's metrics",
        |r| match r {
            Response::Metrics(metrics) => Some(metrics),
            _ => None,
        },
    )
}

/// Sends `request` to the engine serving the database in `dir`, and
/// returns its reply; `Ok(None)` if no engine serves a channel there (no
/// socket, or one a process that died left). An `Io` error names the
/// socket: no permission, or the engine went away before it answered (the
/// request may or may not have been carried out; send it again, with the
/// same id).
pub fn send(dir: &Path, request: &Request) -> Result<Option<Reply>> {
    match exchange(dir, &Message::Carry(request.clone()))? {
        None => Ok(None),
        Some(Response::Carried(reply)) => Ok(Some(reply)),
        Some(_) => Err(mismatched(dir)),
    }
}

fn write_frame(stream: &mut UnixStream, value: &impl serde::Serialize) -> std::io::Result<()> {
    let body = postcard::to_allocvec(value).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|len| *len <= FRAME_BYTES_MAX)
        .ok_or_else(|| {
            std::io::Error::other(format!(
                "a frame of {} bytes; the most is {FRAME_BYTES_MAX}",
                body.len()
            ))
        })?;
    let mut frame = Vec::with_capacity(5 + body.len());
    frame.push(FRAME_VERSION);
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    stream.write_all(&frame)?;
    stream.flush()
}

fn read_frame(stream: &mut UnixStream) -> std::io::Result<Vec<u8>> {
    let mut head = [0u8; 5];
    stream.read_exact(&mut head)?;
    if head[0] != FRAME_VERSION {
        return Err(std::io::Error::other(format!(
            "a frame of version {}; this build speaks version {FRAME_VERSION}",
            head[0]
        )));
    }
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
    if len > FRAME_BYTES_MAX {
        return Err(std::io::Error::other(format!(
            "a frame of {len} bytes; the most is {FRAME_BYTES_MAX}"
        )));
    }
    let mut body = vec![0u8; len as usize];
    stream.read_exact(&mut body)?;
    Ok(body)
}

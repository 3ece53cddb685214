//! `Connection`: one connection to the server, driven from the calling
//! thread, that sends several statements before it waits for any answer.
//!
//! A command's statements are tiny (a row read by key, a row written), so
//! what they cost is the round trip: the client's write, the server's wake
//! up, its answer, the client's wake up. The synchronous client waits for
//! each statement's answer before it sends the next; this one queues a
//! command's writes and sends them with its next read, or with `COMMIT`
//! (PostgreSQL answers a pipeline's statements in order, each after the
//! one before ran). Measured on the effect protocol: 15 round trips down to
//! 4 (docs/PERFORMANCE.md, "The effect protocol on PostgreSQL through the
//! Engine").
//!
//! The client is tokio-postgres (the asynchronous crate under the
//! synchronous `postgres`), on a single-threaded runtime of the
//! connection's own: the socket is driven by whichever thread calls, as the
//! synchronous client drives it, so no thread is added and no request hops
//! between threads.
//!
//! **Invariant:** a pipeline's requests reach the server in the order they
//! are given (each is handed to the connection when it is first polled,
//! and they are polled in order before any answer is awaited).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;

use postgres::types::ToSql;
use postgres::{Error, Row, Statement};

/// A parameter a queued statement owns (it is sent after the call that
/// queued it returned): one of the few types the books' statements bind,
/// held in place (a boxed value cost an allocation per parameter, a dozen
/// a command: docs/PERFORMANCE.md, "The client's share").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param {
    /// `text`.
    Text(String),
    /// `bytea`.
    Bytes(Vec<u8>),
    /// `smallint`.
    Small(i16),
    /// `bigint`.
    Big(i64),
    /// `bigint` or `NULL`.
    MaybeBig(Option<i64>),
}

impl Param {
    /// The value, as the client binds it.
    pub fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Text(value) => value,
            Param::Bytes(value) => value,
            Param::Small(value) => value,
            Param::Big(value) => value,
            Param::MaybeBig(value) => value,
        }
    }
}

impl From<&str> for Param {
    fn from(value: &str) -> Param {
        Param::Text(value.to_owned())
    }
}

impl From<&[u8]> for Param {
    fn from(value: &[u8]) -> Param {
        Param::Bytes(value.to_vec())
    }
}

impl From<Vec<u8>> for Param {
    fn from(value: Vec<u8>) -> Param {
        Param::Bytes(value)
    }
}

impl From<i16> for Param {
    fn from(value: i16) -> Param {
        Param::Small(value)
    }
}

impl From<i64> for Param {
    fn from(value: i64) -> Param {
        Param::Big(value)
    }
}

impl From<Option<i64>> for Param {
    fn from(value: Option<i64>) -> Param {
        Param::MaybeBig(value)
    }
}

/// The statements prepared on one connection, by their SQL text.
pub type Statements = BTreeMap<Cow<'static, str>, Statement>;

/// Statements composed of static pieces, prepared on one connection, by
/// their pieces and each piece's count of parameters (see
/// [`Connection::composed`]).
pub type Composed = BTreeMap<Vec<(&'static str, usize)>, Statement>;

/// A request whose answer is only success or failure.
pub enum Request {
    /// A statement without parameters, sent as a simple query (`START
    /// TRANSACTION`, `COMMIT`).
    Simple(&'static str),
    /// A statement with its parameters (prepared when sent, once per
    /// connection); `op` names it in errors.
    Execute {
        /// What the statement does, as errors name it.
        op: &'static str,
        /// Its SQL.
        sql: Cow<'static, str>,
        /// Its parameters, `$1` first.
        params: Vec<Param>,
    },
}

/// A request whose statement is prepared.
enum Prepared {
    Simple(&'static str),
    Execute {
        op: &'static str,
        statement: Statement,
        params: Vec<Param>,
    },
}

/// A read in a pipeline: a prepared statement and its parameters.
pub type Read<'p> = (&'p Statement, &'p [&'p (dyn ToSql + Sync)]);

/// A request's answer: done, or failed with the `op` that names it.
pub type Written = Result<(), (&'static str, Error)>;

/// A pipelined request's answer.
enum Answer {
    Done(Written),
    Rows(Result<Vec<Row>, Error>),
}

type Driver = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;
type Pending<'c, T> = Pin<Box<dyn Future<Output = T> + 'c>>;

/// One connection, its own runtime, and the statements prepared on it.
pub struct Connection {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    /// The connection's socket, polled while a call waits; dropped when
    /// it ended (the connection closed or failed), which fails every
    /// request the client makes after.
    driver: Option<Driver>,
    /// The round trips made on it, added to its store's count.
    round_trips: Arc<AtomicU64>,
    /// Whether a transaction was begun on it and not yet ended.
    pub(crate) in_transaction: bool,
    pub(crate) statements: Statements,
    composed: Composed,
}

impl Connection {
    /// Connects to `url`, counting its round trips in `round_trips`.
    pub fn connect(
        url: &str,
        round_trips: Arc<AtomicU64>,
    ) -> std::io::Result<Result<Connection, Error>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let connected = runtime.block_on(tokio_postgres::connect(url, postgres::NoTls));
        Ok(connected.map(|(client, connection)| Connection {
            runtime,
            client,
            driver: Some(Box::pin(connection)),
            round_trips,
            in_transaction: false,
            statements: Statements::new(),
            composed: Composed::new(),
        }))
    }

    /// Whether the connection is known to be closed.
    pub fn is_closed(&self) -> bool {
        self.driver.is_none() || self.client.is_closed()
    }

    /// Runs `work` (which uses the client) to its end, driving the socket
    /// meanwhile; once the socket ends, the client's requests fail, so
    /// `work` still ends.
    fn drive<T>(
        runtime: &tokio::runtime::Runtime,
        driver: &mut Option<Driver>,
        round_trips: &AtomicU64,
        work: impl Future<Output = T>,
    ) -> T {
        round_trips.fetch_add(1, Ordering::Relaxed);
        let mut work = std::pin::pin!(work);
        runtime.block_on(poll_fn(|cx| {
            if let Some(socket) = driver
                && socket.as_mut().poll(cx).is_ready()
            {
                *driver = None;
            }
            work.as_mut().poll(cx)
        }))
    }

    /// The statement for `sql`, prepared on this connection on first use.
    pub fn prepare(&mut self, sql: Cow<'static, str>) -> Result<Statement, Error> {
        if let Some(prepared) = self.statements.get(&sql) {
            return Ok(prepared.clone());
        }
        let prepared = self.prepare_once(&sql)?;
        self.statements.insert(sql, prepared.clone());
        Ok(prepared)
    }

    /// Prepares `sql` on the server: a round trip; the caller keeps it.
    fn prepare_once(&mut self, sql: &str) -> Result<Statement, Error> {
        let client = &self.client;
        Self::drive(
            &self.runtime,
            &mut self.driver,
            &self.round_trips,
            client.prepare(sql),
        )
    }

    /// The statement made of `pieces` (static pieces of SQL, or markers a
    /// caller gives a meaning, each with its count of parameters), prepared
    /// on this connection: `compose` writes its SQL the first time these
    /// pieces come, and later the prepared statement is found by the
    /// pieces alone, with no SQL composed nor compared (a command's write
    /// is the same few shapes again and again: docs/PERFORMANCE.md, "The
    /// client's share"). `None` when `compose` refuses the pieces (nothing
    /// is kept, and it is asked again next time).
    pub fn composed(
        &mut self,
        pieces: Vec<(&'static str, usize)>,
        compose: impl FnOnce(&[(&'static str, usize)]) -> Option<String>,
    ) -> Option<Result<Statement, Error>> {
        if let Some(statement) = self.composed.get(&pieces) {
            return Some(Ok(statement.clone()));
        }
        let sql = compose(&pieces)?;
        let prepared = self.prepare_once(&sql);
        if let Ok(statement) = &prepared {
            self.composed.insert(pieces, statement.clone());
        }
        Some(prepared)
    }

    /// Runs one statement prepared on this connection (see
    /// [`Self::composed`]) and waits for its answer: a pipeline of one,
    /// without the pipeline's queue (its boxed futures cost an allocation
    /// and a copy each: docs/PERFORMANCE.md, "The client's share").
    pub fn execute_prepared(
        &mut self,
        op: &'static str,
        statement: &Statement,
        params: &[Param],
    ) -> Written {
        let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(Param::as_sql).collect();
        let client = &self.client;
        Self::drive(
            &self.runtime,
            &mut self.driver,
            &self.round_trips,
            client.execute(statement, &params),
        )
        .map(|_| ())
        .map_err(|e| (op, e))
    }

    /// Sends `requests`, then `reads`, in that order and all at once, and
    /// waits for their answers: each request's failure with its `op`, each
    /// read's rows. A `START TRANSACTION` among the requests marks the
    /// connection in a transaction; a `COMMIT` or `ROLLBACK` ends it
    /// (whatever its answer: a failed transaction's `COMMIT` rolls back).
    pub fn pipeline(
        &mut self,
        requests: Vec<Request>,
        reads: &[Read<'_>],
    ) -> (Vec<Written>, Vec<Result<Vec<Row>, Error>>) {
        for request in &requests {
            if let Request::Simple(sql) = request {
                if sql.starts_with("START") || sql.starts_with("BEGIN") {
                    self.in_transaction = true;
                } else if *sql == "COMMIT" || *sql == "ROLLBACK" {
                    self.in_transaction = false;
                }
            }
        }
        // Each statement prepared (on first use: a round trip of its own).
        let requests: Vec<Result<Prepared, (&'static str, Error)>> = requests
            .into_iter()
            .map(|request| match request {
                Request::Simple(sql) => Ok(Prepared::Simple(sql)),
                Request::Execute { op, sql, params } => self
                    .prepare(sql)
                    .map(|statement| Prepared::Execute {
                        op,
                        statement,
                        params,
                    })
                    .map_err(|e| (op, e)),
            })
            .collect();
        let client = &self.client;
        let mut pending: Vec<Pending<'_, Answer>> =
            Vec::with_capacity(requests.len() + reads.len());
        for request in requests {
            pending.push(match request {
                Err(failed) => Box::pin(async move { Answer::Done(Err(failed)) }),
                Ok(Prepared::Simple(sql)) => Box::pin(async move {
                    Answer::Done(client.batch_execute(sql).await.map_err(|e| (sql, e)))
                }),
                Ok(Prepared::Execute {
                    op,
                    statement,
                    params,
                }) => Box::pin(async move {
                    let params: Vec<&(dyn ToSql + Sync)> =
                        params.iter().map(Param::as_sql).collect();
                    let executed = client.execute(&statement, &params).await;
                    Answer::Done(executed.map(|_| ()).map_err(|e| (op, e)))
                }),
            });
        }
        for (statement, params) in reads {
            pending.push(Box::pin(async move {
                Answer::Rows(client.query(*statement, params).await)
            }));
        }
        let answers = Self::drive(
            &self.runtime,
            &mut self.driver,
            &self.round_trips,
            in_order(pending),
        );
        let mut done = Vec::new();
        let mut rows = Vec::new();
        for answer in answers {
            match answer {
                Answer::Done(result) => done.push(result),
                Answer::Rows(result) => rows.push(result),
            }
        }
        (done, rows)
    }

    /// Runs `sql` (unprepared: for the rare statements) and returns its
    /// rows.
    pub fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Error> {
        let client = &self.client;
        Self::drive(
            &self.runtime,
            &mut self.driver,
            &self.round_trips,
            client.query(sql, params),
        )
    }

    /// Runs `sql` (unprepared) and returns how many rows it changed.
    pub fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error> {
        let client = &self.client;
        Self::drive(
            &self.runtime,
            &mut self.driver,
            &self.round_trips,
            client.execute(sql, params),
        )
    }

    /// Runs `sql`, statements without parameters, as one simple query.
    pub fn batch_execute(&mut self, sql: &'static str) -> Result<(), Error> {
        let (mut done, _) = self.pipeline(vec![Request::Simple(sql)], &[]);
        done.pop()
            .expect("one answer a request")
            .map_err(|(_, e)| e)
    }
}

/// Polls every one of `pending` once, in order (which hands each request
/// to the connection), then waits for each answer, in order.
async fn in_order<T>(mut pending: Vec<Pending<'_, T>>) -> Vec<T> {
    let mut answers: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    poll_fn(|cx| {
        for (future, answer) in pending.iter_mut().zip(answers.iter_mut()) {
            if let Poll::Ready(value) = future.as_mut().poll(cx) {
                *answer = Some(value);
            }
        }
        Poll::Ready(())
    })
    .await;
    let mut done = Vec::with_capacity(answers.len());
    for (future, answer) in pending.into_iter().zip(answers) {
        done.push(match answer {
            Some(value) => value,
            None => future.await,
        });
    }
    done
}

//! `PgStore`: the books in a PostgreSQL database, one command per
//! transaction.
//!
//! A command runs as the embedded engine's does, on the server's rows:
//! `books::decide` over a [`PgBooks`] view of a transaction, then
//! `books::apply` of its ops through the same view, then `COMMIT`; the
//! answer is returned only after the commit returned.
//!
//! The transaction is `REPEATABLE READ` (one snapshot for all of the
//! command's reads), and every run the command reads is locked (`FOR
//! UPDATE`): commands on one run take their turns, in the order they lock
//! it, so a lease or a fencing token a command checked cannot change before
//! it commits; a row another transaction changed since the snapshot is a
//! serialization failure, run again. `SERIALIZABLE` was measured first and
//! dropped: its predicate locks are per index page, so on small tables
//! commands on different runs failed each other (at 16 writers, 1,862 of
//! 3,271 attempts rolled back; docs/PERFORMANCE.md, "The effect protocol on
//! PostgreSQL"). Time is the server's
//! (`now()`, the transaction's start on the server's clock), so hosts whose
//! clocks disagree still agree on leases, deadlines and timers.
//!
//! A serialization failure, a deadlock or a key another transaction
//! inserted first (SQLSTATE 40001, 40P01, 23505) rolls the transaction back, nothing of it applied, and the command runs again from
//! its reads, at most [`RETRIES`] times. A connection lost before `COMMIT`
//! was sent loses the command whole (`may_have_landed: false`); one lost
//! while `COMMIT` was in flight may or may not have landed, whole
//! (`may_have_landed: true`), as a failed fsync on the embedded engine. The
//! next call connects again.
//!
//! **Invariant:** a command's reads and writes happen in one transaction,
//! and it is answered only when that transaction committed.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use postgres::error::SqlState;
use postgres::{Client, IsolationLevel, NoTls};

use super::books::{Failed, PgBooks, digest_of_key};
use super::schema;
use crate::books::{Answer, Decided};
use crate::books::{
    AuditEntry, BlobRefs, BooksRead, BooksWrite, BudgetBook, CheckpointMeta, Command,
    DecisionRecord, EffectEntry, MemBooks, ResourceBook, Run, RunId, SagaBook, SharedEntry,
    WaitBook, apply, decide,
};
use crate::error::{Error, Result};
use crate::state::rows::{RowTable, decode_row};

/// How many times a command is run again after a serialization failure.
pub const RETRIES: u32 = 64;

/// A connection to the books in PostgreSQL.
pub struct PgStore {
    url: String,
    /// The server as errors name it: the URL without its password.
    server: String,
    client: Mutex<Option<Connection>>,
}

/// A connection and the statements prepared on it (by SQL text): a
/// prepared statement costs one round trip to the server once, not on
/// every use.
pub(crate) struct Connection {
    client: Client,
    statements: Statements,
}

/// The statements prepared on one connection, by their SQL text.
pub(crate) type Statements = BTreeMap<&'static str, postgres::Statement>;

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// `url` without the password it may carry (`postgres://user:secret@host`).
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(name, _)| name);
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_string(),
    }
}

/// `Error::Postgres` for `e`, met on `server` while doing `op`.
pub(crate) fn postgres_error(
    server: &str,
    op: &'static str,
    may_have_landed: bool,
    e: postgres::Error,
) -> Error {
    Error::Postgres {
        server: server.to_string(),
        op,
        may_have_landed,
        source: Box::new(e),
    }
}

/// Makes a new, empty database on the server `url` names, for a test or a
/// bench: `<prefix>_<process id>_<n>`, dropped first if a run before left
/// it. Returns the URL of the new database (`url` with its database name
/// replaced). The tables are made when a store first connects to it.
pub fn scratch_database(url: &str, prefix: &str) -> Result<String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    let server = without_password(url);
    let failed = |op: &'static str| {
        let server = server.clone();
        move |e| postgres_error(&server, op, false, e)
    };
    let mut admin = Client::connect(url, NoTls).map_err(failed("connect"))?;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .map_err(failed("drop a scratch database"))?;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .map_err(failed("create a scratch database"))?;
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let root = base.rsplit_once('/').map_or(base, |(root, _)| root);
    Ok(match query {
        Some(query) => format!("{root}/{name}?{query}"),
        None => format!("{root}/{name}"),
    })
}

/// Whether the server asks for the transaction to be run again.
fn retryable(error: &postgres::Error) -> bool {
    matches!(
        error.code(),
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::UNIQUE_VIOLATION
    )
}

impl PgStore {
    /// Connects to the database `url` names (a libpq-style URL,
    /// `postgres://user@host:port/dbname`), and creates or upgrades the
    /// books' tables in it (refusing a newer version than this build's).
    pub fn connect(url: &str) -> Result<PgStore> {
        let store = PgStore {
            url: url.to_string(),
            server: without_password(url),
            client: Mutex::new(None),
        };
        {
            let mut slot = store.client()?;
            let connected = slot.as_mut().expect("connected by client()");
            schema::prepare(&mut connected.client, &store.server)?;
        }
        Ok(store)
    }

    /// The server, as errors name it.
    pub fn server(&self) -> &str {
        &self.server
    }

    fn error(&self, op: &'static str, may_have_landed: bool, e: postgres::Error) -> Error {
        postgres_error(&self.server, op, may_have_landed, e)
    }

    /// Drops the connection after a failure of the server's or of the
    /// network: the client does not always notice a connection the server
    /// ended (an administrator's `pg_terminate_backend`, a restart) until a
    /// second call fails on it, so the next call connects afresh instead.
    fn forget_connection(&self) {
        let mut slot = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        *slot = None;
    }

    /// `result`, the connection dropped first if it failed on the server's
    /// or the network's account.
    fn forgetting<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(Error::Postgres { .. }) = &result {
            self.forget_connection();
        }
        result
    }

    /// The connection, made again if it was lost.
    fn client(&self) -> Result<MutexGuard<'_, Option<Connection>>> {
        let mut slot = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_none_or(|c| c.client.is_closed()) {
            let client =
                Client::connect(&self.url, NoTls).map_err(|e| self.error("connect", false, e))?;
            *slot = Some(Connection {
                client,
                statements: BTreeMap::new(),
            });
        }
        Ok(slot)
    }

    /// Runs `cmd`: decides it on the server's rows, applies its ops and
    /// commits, in one transaction, run again on a
    /// serialization failure. Its answer, once committed.
    pub fn execute(&self, cmd: &Command) -> Result<Answer> {
        self.execute_on(cmd, None)
    }

    /// [`Self::execute`] at the clock reading `now_ms` instead of the
    /// server's: for tests that compare with the reference model.
    #[cfg(test)]
    pub(crate) fn execute_at(&self, cmd: &Command, now_ms: u64) -> Result<Answer> {
        self.execute_on(cmd, Some(now_ms))
    }

    fn execute_on(&self, cmd: &Command, now_ms: Option<u64>) -> Result<Answer> {
        let mut last = None;
        for _ in 0..=RETRIES {
            match self.attempt(cmd, now_ms) {
                Err(Attempt::Retry(e)) => last = Some(e),
                Err(Attempt::Failed(error)) => return self.forgetting(Err(error)),
                Ok(answer) => return Ok(answer),
            }
        }
        let e = last.expect("at least one attempt");
        Err(self.error(
            "run a command (serialization failures every time)",
            false,
            e,
        ))
    }

    fn attempt(&self, cmd: &Command, at_ms: Option<u64>) -> std::result::Result<Answer, Attempt> {
        let mut slot = self.client().map_err(Attempt::Failed)?;
        let Connection { client, statements } = slot.as_mut().expect("connected by client()");
        let begun = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .start();
        let mut txn = begun.map_err(|e| self.failed("begin", e))?;
        let now_ms = match at_ms {
            Some(at_ms) => at_ms,
            None => {
                server_now_ms(&mut txn).map_err(|e| self.failed("read the server's clock", e))?
            }
        };
        let mut books = PgBooks::new(&mut txn, statements);
        let decided = decide(&books, cmd, now_ms);
        let applied = decided.and_then(|Decided { ops, answer }| {
            for op in &ops {
                if books.has_failed() {
                    break;
                }
                apply(&mut books, op)?;
            }
            Ok(answer)
        });
        // A failed read must not pass for an absent row: it decides first.
        match books.finish() {
            Some(Failed::Query(op, e)) => return Err(self.failed(op, e)),
            Some(Failed::Corrupt(error)) => return Err(Attempt::Failed(error)),
            None => {}
        }
        // A refused command changes nothing: the transaction is dropped,
        // which rolls it back.
        let answer = applied.map_err(Attempt::Failed)?;
        match txn.commit() {
            Ok(()) => Ok(answer),
            Err(e) if retryable(&e) => Err(Attempt::Retry(e)),
            // The connection broke with COMMIT in flight: the server may
            // have committed it, whole, or not at all.
            Err(e) if e.is_closed() || e.code().is_none() => {
                Err(Attempt::Failed(self.error("commit", true, e)))
            }
            Err(e) => Err(Attempt::Failed(self.error("commit", false, e))),
        }
    }

    /// A failure before `COMMIT` was sent: nothing landed.
    fn failed(&self, op: &'static str, e: postgres::Error) -> Attempt {
        if retryable(&e) {
            Attempt::Retry(e)
        } else {
            Attempt::Failed(self.error(op, false, e))
        }
    }

    /// Runs `read` over the books as of one snapshot (a read-only,
    /// repeatable-read transaction; nothing is locked, so no command waits
    /// for it), with the server's clock reading at its start. A read that
    /// failed on the server, or a damaged row, is the `Err`; a value `read`
    /// computed from a failed read is never returned.
    pub fn read<T>(&self, read: impl FnOnce(&dyn BooksRead, u64) -> Result<T>) -> Result<T> {
        self.in_snapshot(|txn, statements| {
            let now_ms =
                server_now_ms(txn).map_err(|e| self.error("read the server's clock", false, e))?;
            let books = PgBooks::reader(txn, statements);
            let value = read(&books, now_ms);
            match books.finish() {
                Some(Failed::Query(op, e)) => Err(self.error(op, false, e)),
                Some(Failed::Corrupt(error)) => Err(error),
                None => value,
            }
        })
    }

    /// The server's clock, in milliseconds since the epoch.
    pub fn now_ms(&self) -> Result<u64> {
        self.read(|_, now_ms| Ok(now_ms))
    }

    /// Runs `read` in a read-only, repeatable-read transaction on the
    /// connection; a failure of the server's drops the connection.
    fn in_snapshot<T>(
        &self,
        read: impl FnOnce(&mut postgres::Transaction<'_>, &mut Statements) -> Result<T>,
    ) -> Result<T> {
        let result = self.client().and_then(|mut slot| {
            let Connection { client, statements } = slot.as_mut().expect("connected by client()");
            let mut txn = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .map_err(|e| self.error("begin", false, e))?;
            read(&mut txn, statements)
        });
        self.forgetting(result)
    }

    /// Every row of the books, read in one transaction into a [`MemBooks`]
    /// (for checks and tests: it holds the whole database in memory).
    pub fn read_all(&self) -> Result<MemBooks> {
        self.in_snapshot(|txn, _| self.read_all_in(txn))
    }

    fn read_all_in(&self, txn: &mut postgres::Transaction<'_>) -> Result<MemBooks> {
        let mut books = MemBooks::new();
        let read = |txn: &mut postgres::Transaction<'_>, sql: &str| {
            txn.query(sql, &[])
                .map_err(|e| self.error("read every row", false, e))
        };
        let corrupt = |reason: String| Error::Corrupt {
            file: "postgres".into(),
            offset: 0,
            reason,
        };
        macro_rules! rows {
            ($sql:expr, $table:expr, $ty:ty, |$value:ident| $put:expr) => {
                for row in read(txn, $sql)? {
                    let bytes: Vec<u8> = row.get(0);
                    let $value: $ty = decode_row($table, &bytes)
                        .map_err(|e| corrupt(format!("a row of {:?}: {e}", $table)))?;
                    $put;
                }
            };
        }
        rows!("SELECT row FROM actum_runs", RowTable::Run, Run, |v| books
            .put_run(v));
        rows!(
            "SELECT row FROM actum_effects",
            RowTable::Effect,
            EffectEntry,
            |v| books.put_effect(v)
        );
        rows!(
            "SELECT row FROM actum_checkpoints",
            RowTable::Checkpoint,
            CheckpointMeta,
            |v| { books.put_checkpoint(v) }
        );
        rows!(
            "SELECT row FROM actum_decisions",
            RowTable::Decision,
            DecisionRecord,
            |v| { books.put_decision(v) }
        );
        for row in read(txn, "SELECT run, row FROM actum_audit ORDER BY run, seq")? {
            let run: String = row.get(0);
            let run = RunId::new(&run).map_err(|e| corrupt(format!("an audit row's run: {e}")))?;
            let bytes: Vec<u8> = row.get(1);
            let entry: AuditEntry = decode_row(RowTable::Audit, &bytes)
                .map_err(|e| corrupt(format!("an audit row of run {run}: {e}")))?;
            books.push_audit(&run, entry);
        }
        rows!(
            "SELECT row FROM actum_waits",
            RowTable::Waits,
            WaitBook,
            |v| books.put_waits(v)
        );
        rows!(
            "SELECT row FROM actum_budgets",
            RowTable::Budgets,
            BudgetBook,
            |v| books.put_budget(v)
        );
        rows!(
            "SELECT row FROM actum_sagas",
            RowTable::Sagas,
            SagaBook,
            |v| books.put_saga(v)
        );
        rows!(
            "SELECT row FROM actum_resources",
            RowTable::Resources,
            ResourceBook,
            |v| { books.put_resource(v) }
        );
        rows!(
            "SELECT row FROM actum_shared",
            RowTable::Shared,
            SharedEntry,
            |v| books.put_shared(v)
        );
        rows!(
            "SELECT row FROM actum_blob_refs",
            RowTable::BlobRefs,
            BlobRefs,
            |v| books.put_blob_refs(v)
        );
        for row in read(txn, "SELECT digest, bytes FROM actum_blobs")? {
            let key: Vec<u8> = row.get(0);
            let digest = digest_of_key(&key).ok_or_else(|| corrupt("a blob key".into()))?;
            books.put_blob(digest, row.get(1));
        }
        for row in read(txn, "SELECT digest, holders FROM actum_blob_holders")? {
            let key: Vec<u8> = row.get(0);
            let digest = digest_of_key(&key).ok_or_else(|| corrupt("a blob holder key".into()))?;
            let holders = u64::try_from(row.get::<_, i64>(1))
                .map_err(|_| corrupt("a negative blob holder count".into()))?;
            books.put_blob_holders(digest, Some(holders));
        }
        Ok(books)
    }
}

/// Why one attempt at a command ended without an answer.
enum Attempt {
    /// The server asked for it to run again.
    Retry(postgres::Error),
    /// It failed for good (or was refused by the rules).
    Failed(Error),
}

fn server_now_ms(txn: &mut postgres::Transaction<'_>) -> std::result::Result<u64, postgres::Error> {
    let row = txn.query_one(
        "SELECT floor(extract(epoch FROM now()) * 1000)::bigint",
        &[],
    )?;
    Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}

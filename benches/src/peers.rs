//! The peers, each configured so one record is one durable transaction.
//!
//! [`Redb`]: one shared `Database`, a `Durability::Immediate` write transaction per record
//! inserting `u64 -> [u8; 256]`; redb serialises write transactions itself.
//! [`Sqlite`]: WAL journal mode, `synchronous=FULL`, one autocommit `INSERT` per record; every
//! writer thread opens its own connection to the same file and waits on the busy handler.
//! [`SqliteShared`]: the same file and settings, but one connection behind a mutex shared by
//! every writer thread, the usual way to use SQLite from many threads.
//! None of them shares an fsync between writers, which is what group commit is measured against.
//! Each also commits several rows of any length as one transaction ([`DurableRows`]): the agent
//! step's peers ([`crate::peer_step`]).

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redb::{Database, Durability, ReadableDatabase, TableDefinition};
use rusqlite::Connection;

use crate::{DurableLog, DurableRows, record};

const REDB_TABLE: TableDefinition<'static, u64, &[u8]> = TableDefinition::new("records");

/// How long a SQLite writer waits for the write lock before failing the bench.
pub const SQLITE_BUSY_TIMEOUT_MS: u64 = 60_000;

/// redb 4.5 with one durable write transaction per record.
pub struct Redb {
    db: Database,
    _dir: tempfile::TempDir,
}

impl Redb {
    /// Creates a database with an empty `records` table in a fresh scratch directory.
    pub fn new() -> Redb {
        let dir = crate::scratch_dir();
        let db = Database::create(dir.path().join("peer.redb")).expect("creating the redb file");
        let txn = db.begin_write().expect("redb setup transaction");
        txn.open_table(REDB_TABLE).expect("creating the redb table");
        txn.commit().expect("committing the redb setup");
        Redb { db, _dir: dir }
    }

    /// Number of records in the table (for tests).
    pub fn len(&self) -> u64 {
        use redb::ReadableTableMetadata;
        let txn = self.db.begin_read().expect("redb read transaction");
        let table = txn.open_table(REDB_TABLE).expect("opening the redb table");
        table.len().expect("counting redb records")
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for Redb {
    fn default() -> Self {
        Redb::new()
    }
}

impl DurableLog for Redb {
    type Writer<'a> = ();

    fn writer(&self) {}

    fn commit(&self, writer: &mut (), ticket: u64) {
        self.commit_rows(writer, ticket, &[&record(ticket)]);
    }
}

impl DurableRows for Redb {
    fn commit_rows(&self, _: &mut (), first_key: u64, rows: &[&[u8]]) {
        assert!(!rows.is_empty(), "a transaction writes at least one row");
        let mut txn = self.db.begin_write().expect("redb write transaction");
        txn.set_durability(Durability::Immediate)
            .expect("redb immediate durability");
        {
            let mut table = txn.open_table(REDB_TABLE).expect("opening the redb table");
            for (key, row) in (first_key..).zip(rows) {
                table.insert(key, *row).expect("redb insert");
            }
        }
        txn.commit().expect("redb commit");
    }
}

/// SQLite in WAL mode with `synchronous=FULL`, one transaction per record.
pub struct Sqlite {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Sqlite {
    /// Creates the database file, switches it to WAL mode and creates the `records` table.
    pub fn new() -> Sqlite {
        let dir = crate::scratch_dir();
        let path = dir.path().join("peer.sqlite");
        let sqlite = Sqlite { path, _dir: dir };
        let conn = sqlite.connect();
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .expect("switching SQLite to WAL mode");
        assert_eq!(mode, "wal", "SQLite must run in WAL mode");
        conn.execute_batch("CREATE TABLE records (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
            .expect("creating the SQLite table");
        sqlite
    }

    /// Opens one connection with the bench's durability settings.
    pub fn connect(&self) -> Connection {
        let conn = Connection::open(&self.path).expect("opening the SQLite file");
        conn.busy_timeout(Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS))
            .expect("setting the SQLite busy timeout");
        conn.pragma_update(None, "synchronous", "FULL")
            .expect("setting synchronous=FULL");
        let level: i64 = conn
            .query_row("PRAGMA synchronous", [], |row| row.get(0))
            .expect("reading back synchronous");
        assert_eq!(level, 2, "synchronous must be FULL");
        conn
    }

    /// Number of records in the table (for tests).
    pub fn len(&self) -> u64 {
        let count: i64 = self
            .connect()
            .query_row("SELECT count(*) FROM records", [], |row| row.get(0))
            .expect("counting SQLite records");
        u64::try_from(count).expect("a count is never negative")
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for Sqlite {
    fn default() -> Self {
        Sqlite::new()
    }
}

impl DurableLog for Sqlite {
    type Writer<'a> = Connection;

    fn writer(&self) -> Connection {
        self.connect()
    }

    fn commit(&self, conn: &mut Connection, ticket: u64) {
        self.commit_rows(conn, ticket, &[&record(ticket)]);
    }
}

impl DurableRows for Sqlite {
    fn commit_rows(&self, conn: &mut Connection, first_key: u64, rows: &[&[u8]]) {
        assert!(!rows.is_empty(), "a transaction writes at least one row");
        // One row is one autocommit INSERT; several are one IMMEDIATE transaction (the write
        // lock taken up front, so a busy writer waits in the busy handler, not mid-way).
        let several = rows.len() > 1;
        if several {
            conn.execute_batch("BEGIN IMMEDIATE").expect("SQLite begin");
        }
        for (key, row) in (first_key..).zip(rows) {
            let id = i64::try_from(key).expect("a key fits in a SQLite integer");
            conn.prepare_cached("INSERT INTO records (id, payload) VALUES (?1, ?2)")
                .and_then(|mut stmt| stmt.execute(rusqlite::params![id, *row]))
                .expect("SQLite insert");
        }
        if several {
            conn.execute_batch("COMMIT").expect("SQLite commit");
        }
    }
}

/// SQLite as [`Sqlite`] sets it up, with one connection behind a mutex for all writers: they
/// queue on the mutex instead of SQLite's busy handler.
pub struct SqliteShared {
    conn: Mutex<Connection>,
    sqlite: Sqlite,
}

impl SqliteShared {
    /// Creates the database as [`Sqlite::new`] does and opens the one shared connection.
    pub fn new() -> SqliteShared {
        let sqlite = Sqlite::new();
        let conn = Mutex::new(sqlite.connect());
        SqliteShared { conn, sqlite }
    }

    /// Number of records in the table (for tests).
    pub fn len(&self) -> u64 {
        self.sqlite.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for SqliteShared {
    fn default() -> Self {
        SqliteShared::new()
    }
}

impl DurableLog for SqliteShared {
    type Writer<'a> = ();

    fn writer(&self) {}

    fn commit(&self, writer: &mut (), ticket: u64) {
        self.commit_rows(writer, ticket, &[&record(ticket)]);
    }
}

impl DurableRows for SqliteShared {
    fn commit_rows(&self, _: &mut (), first_key: u64, rows: &[&[u8]]) {
        // A writer that panicked mid-transaction fails the bench anyway, so a poisoned lock's
        // connection is only ever used to finish reporting.
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        self.sqlite.commit_rows(&mut conn, first_key, rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::run_writers;

    #[test]
    fn redb_keeps_every_record() {
        let db = Redb::new();
        run_writers(&db, 4, 0, 40);
        assert_eq!(db.len(), 40);
    }

    #[test]
    fn sqlite_keeps_every_record() {
        let db = Sqlite::new();
        run_writers(&db, 4, 0, 40);
        assert_eq!(db.len(), 40);
    }

    #[test]
    fn shared_sqlite_keeps_every_record() {
        let db = SqliteShared::new();
        run_writers(&db, 4, 0, 40);
        assert_eq!(db.len(), 40);
    }
}

//! The PostgreSQL tables of the books, versioned: created or upgraded when a
//! store connects, under an advisory lock so processes connecting at once
//! do not race, and refused (never misread) when the database holds a newer
//! version than this build knows. docs/FORMAT.md, "PostgreSQL tables", is
//! the reference; this file is its code.

use postgres::Client;

use super::store::postgres_error;
use crate::error::{Error, Result};

/// The version of the tables this build writes and reads.
pub const PG_SCHEMA_VERSION: i64 = 1;

/// The advisory lock key (a constant of this project's) held while the
/// tables are created or upgraded.
const SCHEMA_LOCK: i64 = 0x6163_7475_6d00_0001;

/// Version 1: the books' tables. Each row is the embedded store's row bytes
/// (checksum and postcard body) beside the key columns; `claim_from` is the
/// claim index (when the run became claimable; null: not claimable).
const VERSION_1: &str = r#"
CREATE TABLE actum_runs (
    id text COLLATE "C" PRIMARY KEY,
    claim_from bigint,
    row bytea NOT NULL
);
CREATE INDEX actum_runs_claimable ON actum_runs (claim_from, id) WHERE claim_from IS NOT NULL;
CREATE TABLE actum_effects (
    run text COLLATE "C" NOT NULL,
    step text COLLATE "C" NOT NULL,
    kind smallint NOT NULL,
    attempt bigint NOT NULL,
    row bytea NOT NULL,
    PRIMARY KEY (run, step, kind, attempt)
);
CREATE TABLE actum_blobs (digest bytea PRIMARY KEY, bytes bytea NOT NULL);
CREATE TABLE actum_checkpoints (
    run text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    row bytea NOT NULL,
    PRIMARY KEY (run, version)
);
CREATE TABLE actum_decisions (
    run text COLLATE "C" NOT NULL,
    position bigint NOT NULL,
    row bytea NOT NULL,
    PRIMARY KEY (run, position)
);
CREATE TABLE actum_audit (
    run text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    row bytea NOT NULL,
    PRIMARY KEY (run, seq)
);
CREATE TABLE actum_waits (run text COLLATE "C" PRIMARY KEY, row bytea NOT NULL);
CREATE TABLE actum_budgets (run text COLLATE "C" PRIMARY KEY, row bytea NOT NULL);
CREATE TABLE actum_sagas (run text COLLATE "C" PRIMARY KEY, row bytea NOT NULL);
CREATE TABLE actum_resources (id text COLLATE "C" PRIMARY KEY, row bytea NOT NULL);
CREATE TABLE actum_shared (key text COLLATE "C" PRIMARY KEY, row bytea NOT NULL);
CREATE TABLE actum_blob_holders (digest bytea PRIMARY KEY, holders bigint NOT NULL);
CREATE TABLE actum_blob_refs (run text COLLATE "C" PRIMARY KEY, row bytea NOT NULL);
"#;

/// Each version's statements, oldest first: version `n` is `STEPS[n - 1]`.
const STEPS: [&str; 1] = [VERSION_1];

/// Creates the tables, or upgrades them to [`PG_SCHEMA_VERSION`], in one
/// transaction; refuses a database whose version is newer. Returns the
/// version found before (0: none).
pub(crate) fn prepare(client: &mut Client, server: &str) -> Result<i64> {
    let failed = |op: &'static str| move |e| postgres_error(server, op, false, e);
    let mut txn = client.transaction().map_err(failed("begin schema check"))?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .map_err(failed("lock the schema"))?;
    txn.batch_execute(
        "CREATE TABLE IF NOT EXISTS actum_meta (key text COLLATE \"C\" PRIMARY KEY, value bigint NOT NULL)",
    )
    .map_err(failed("create the meta table"))?;
    let found: i64 = txn
        .query_opt(
            "SELECT value FROM actum_meta WHERE key = 'schema_version'",
            &[],
        )
        .map_err(failed("read the schema version"))?
        .map_or(0, |row| row.get(0));
    if !(0..=PG_SCHEMA_VERSION).contains(&found) {
        return Err(Error::UnsupportedFormat {
            file: server.into(),
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: u32::try_from(PG_SCHEMA_VERSION).expect("a small version"),
        });
    }
    let from = usize::try_from(found).expect("checked above");
    for step in &STEPS[from..] {
        txn.batch_execute(step)
            .map_err(failed("create the tables"))?;
    }
    txn.execute(
        "INSERT INTO actum_meta (key, value) VALUES ('schema_version', $1) \
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        &[&PG_SCHEMA_VERSION],
    )
    .map_err(failed("record the schema version"))?;
    txn.commit().map_err(failed("commit the schema"))?;
    Ok(found)
}

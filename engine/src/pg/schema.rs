//! The PostgreSQL tables of the books, versioned: created or upgraded when a
//! store connects, under an advisory lock so processes connecting at once
//! do not race, and refused (never misread) when the database holds a newer
//! version than this build knows. docs/FORMAT.md, "PostgreSQL tables", is
//! the reference; this file is its code.

use postgres::{Client, Transaction};

use super::store::postgres_error;
use crate::books::{Run, RunState};
use crate::error::{Error, Result};
use crate::state::rows::{RowTable, decode_row};

/// The version of the tables this build writes and reads.
pub const PG_SCHEMA_VERSION: i64 = 2;

/// The advisory lock key (a constant of this project's) held while the
/// tables are created or upgraded.
const SCHEMA_LOCK: i64 = 0x6163_7475_6d00_0001;

/// Version 1: the books' tables. Each row is the embedded store's row bytes
/// (checksum and postcard body) beside the key columns; `claim_from` is the
/// claim index (when the run became claimable; null: not claimable).
pub(crate) const VERSION_1: &str = r#"
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

/// Version 2: the runs' state and the instant a run ended beside its row,
/// indexed, so listing runs by state and finding the runs retention may
/// prune are index scans (`Engine::runs`, `Engine::prune`). The columns of
/// the runs version 1 stored are filled from their rows
/// ([`backfill_run_columns`]), then `state` is made `NOT NULL`. And the
/// engine's counters (`Engine::metrics`), which every process adds what
/// it counted to at `checkpoint` and `close`.
const VERSION_2: &str = r#"
ALTER TABLE actum_runs ADD COLUMN state smallint, ADD COLUMN ended_ms bigint;
CREATE INDEX actum_runs_state ON actum_runs (state, id);
CREATE INDEX actum_runs_ended ON actum_runs (ended_ms, id) WHERE ended_ms IS NOT NULL;
CREATE TABLE actum_metrics (name text COLLATE "C" PRIMARY KEY, value bigint NOT NULL);
"#;

/// Each version's statements, oldest first: version `n` is `STEPS[n - 1]`.
const STEPS: [&str; 2] = [VERSION_1, VERSION_2];

/// The code of `state` in the `state` column: its place in
/// [`RunState::ALL`] (0 pending ... 8 compensating).
pub(crate) fn state_code(state: RunState) -> i16 {
    let at = RunState::ALL
        .iter()
        .position(|s| *s == state)
        .expect("every state is in ALL");
    i16::try_from(at).expect("nine states")
}

/// The `ended_ms` column of `run`: when it ended, if it is over.
pub(crate) fn ended_ms(run: &Run) -> Option<i64> {
    run.state
        .is_terminal()
        .then(|| i64::try_from(run.updated_ms).unwrap_or(i64::MAX))
}

/// Fills the version 2 columns of every run a version 1 database stored,
/// from its row; a row that does not decode is `Corrupt` (the upgrade is
/// rolled back, nothing changed).
fn backfill_run_columns(txn: &mut Transaction<'_>, server: &str) -> Result<()> {
    let failed = |op: &'static str| move |e| postgres_error(server, op, false, e);
    let rows = txn
        .query("SELECT id, row FROM actum_runs WHERE state IS NULL", &[])
        .map_err(failed("read the runs to upgrade"))?;
    for row in rows {
        let id: String = row.get(0);
        let bytes: Vec<u8> = row.get(1);
        let run: Run = decode_row(RowTable::Run, &bytes).map_err(|e| Error::Corrupt {
            file: server.into(),
            offset: 0,
            reason: format!("the row of run {id} in actum_runs does not decode: {e}"),
        })?;
        txn.execute(
            "UPDATE actum_runs SET state = $2, ended_ms = $3 WHERE id = $1",
            &[&id, &state_code(run.state), &ended_ms(&run)],
        )
        .map_err(failed("upgrade a run's row"))?;
    }
    txn.batch_execute("ALTER TABLE actum_runs ALTER COLUMN state SET NOT NULL")
        .map_err(failed("make the state column required"))
}

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
    for (at, step) in STEPS.iter().enumerate().skip(from) {
        txn.batch_execute(step)
            .map_err(failed("create the tables"))?;
        if at + 1 == 2 {
            backfill_run_columns(&mut txn, server)?;
        }
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

//! The system under test: a database directory plus its redb state store,
//! opened, recovered and driven the way the engine's own commit path is.
//!
//! Invariant: after `open` returns, the state store has applied exactly the
//! WAL's durable records (`applied_lsn == durable_lsn`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use actum::db::{Db, DbOptions};
use actum::state::{StateStore, replay_log};
use actum::wal::WalOptions;
use actum::{Clock, DatabaseId, Lsn, Result, Storage};

use super::config::CampaignConfig;
use super::kv;
use super::model::Put;

/// The database directory on the simulated disk.
pub const DB_DIR: &str = "/db";

/// What a recovery found, for the checkers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The WAL's durable LSN after recovery.
    pub durable_lsn: Lsn,
    /// The LSN redb's durable state covered when opened (before replay).
    pub redb_applied_at_open: Lsn,
    /// redb's contents when opened, before replay.
    pub redb_state_at_open: BTreeMap<u64, Vec<u8>>,
    /// The full state after replaying the WAL.
    pub state: BTreeMap<u64, Vec<u8>>,
}

/// An open database with its state store.
#[derive(Debug)]
pub struct Node {
    db: Db,
    state: StateStore,
}

impl Node {
    /// Opens (creating or recovering) the database on `storage` and replays
    /// the WAL into the state store.
    pub fn open(
        storage: Arc<dyn Storage>,
        clock: &dyn Clock,
        config: &CampaignConfig,
        database_id: DatabaseId,
    ) -> Result<(Node, Observed)> {
        let options = DbOptions {
            wal: WalOptions {
                segment_size_bytes: config.segment_size_bytes,
                max_record_bytes: config.segment_size_bytes / 4,
                planted_bug: config.planted,
                ..WalOptions::default()
            },
            database_id: Some(database_id),
        };
        let dir = Path::new(DB_DIR);
        let (db, _report) = Db::open(Arc::clone(&storage), clock, dir, options)?;
        let state_path: PathBuf = dir.join(db.manifest().state_file);
        let mut state = StateStore::open(&storage, &state_path, true)?;
        let redb_applied_at_open = state.applied_lsn();
        let redb_state_at_open = kv::read_all(&state.read()?)?;
        // The engine's own recovery: manifest check, replay through the
        // same apply as the live path, log and state agree at the end.
        replay_log(&db, &mut state, |state, lsn, payload| {
            state.apply(lsn, |txn| kv::apply(txn, payload))
        })?;
        let durable_lsn = db.wal().durable_lsn();
        let observed = Observed {
            durable_lsn,
            redb_applied_at_open,
            redb_state_at_open,
            state: kv::read_all(&state.read()?)?,
        };
        Ok((Node { db, state }, observed))
    }

    /// Appends `batch` durably and applies it; returns its last LSN.
    pub fn append(&mut self, batch: &[Put]) -> Result<Lsn> {
        let records: Vec<Vec<u8>> = batch.iter().map(kv::encode).collect();
        let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let last = self.db.wal().append(&refs)?;
        let first = Lsn(last.0 + 1 - records.len() as u64);
        for (offset, record) in records.iter().enumerate() {
            self.state
                .apply(Lsn(first.0 + offset as u64), |txn| kv::apply(txn, record))?;
        }
        Ok(last)
    }

    /// Makes the state durable, records it in the manifest and lets the WAL
    /// drop covered segments; returns the LSN covered.
    pub fn checkpoint(&mut self) -> Result<Lsn> {
        let lsn = self.state.checkpoint()?;
        self.db.checkpoint(lsn)?;
        Ok(lsn)
    }

    /// Closes cleanly (the manifest records the clean-shutdown LSN).
    pub fn close(self) -> Result<()> {
        let Node { db, state } = self;
        drop(state);
        db.close()
    }
}

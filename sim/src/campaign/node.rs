//! The system under test: a database directory plus its redb state store,
//! driven through the engine's own durable pipeline (`actum::db::Pipeline`):
//! the same open, replay, append, apply, checkpoint and close, with a
//! key-value state machine in place of the books.
//!
//! Invariant: after `open` returns, the state store has applied exactly the
//! WAL's durable records (`applied_lsn == durable_lsn`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use actum::db::{DbOptions, Pipeline, PipelineOptions};
use actum::wal::WalOptions;
use actum::wal::format::SEGMENT_HEADER_BYTES;
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
    pipeline: Pipeline,
}

impl Node {
    /// Opens (creating or recovering) the database on `storage` and replays
    /// the WAL into the state store; with `repair`, cutting the log past
    /// damage to acknowledged records (`WalOptions::repair`).
    pub fn open(
        storage: Arc<dyn Storage>,
        clock: &dyn Clock,
        config: &CampaignConfig,
        database_id: DatabaseId,
        repair: bool,
    ) -> Result<(Node, Observed)> {
        let options = PipelineOptions {
            db: DbOptions {
                wal: WalOptions {
                    segment_size_bytes: config.segment_size_bytes,
                    // Small, so a segment grows twice or more (a header
                    // and 1 KiB, then doubling) and grows meet crashes.
                    segment_first_step_bytes: SEGMENT_HEADER_BYTES + 1024,
                    max_record_bytes: config.segment_size_bytes / 4,
                    planted_bug: config.planted,
                    repair,
                },
                database_id: Some(database_id),
            },
            verify_state_on_open: true,
            // The campaign's own steps decide when to checkpoint.
            checkpoint_every_records: 0,
            checkpoint_every_bytes: 0,
            // Compacts at every clean close that finds a sixteenth of the
            // store free (after a session that wrote a sixteenth of it), so
            // compactions meet the campaign's faults.
            compact_at_close_free_bytes: 1,
        };
        let recovering = Pipeline::open(storage, clock, Path::new(DB_DIR), options)?;
        let redb_applied_at_open = recovering.state().applied_lsn();
        let redb_state_at_open = kv::read_all(&recovering.state().read()?)?;
        // The engine's own recovery: manifest check, then replay through the
        // same apply as the live path.
        let (pipeline, recovery) =
            recovering.replay_into_state(|txn, _at, payload| kv::apply(txn, payload))?;
        let observed = Observed {
            durable_lsn: recovery.durable_lsn,
            redb_applied_at_open,
            redb_state_at_open,
            state: kv::read_all(&pipeline.state().read()?)?,
        };
        Ok((Node { pipeline }, observed))
    }

    /// Appends `batch` durably and applies it; returns its last LSN.
    pub fn append(&mut self, batch: &[Put]) -> Result<Lsn> {
        let records: Vec<Vec<u8>> = batch.iter().map(kv::encode).collect();
        let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let last = self.pipeline.enqueue(&refs)?;
        self.pipeline.wait_durable(last)?;
        let first = Lsn(last.0 + 1 - records.len() as u64);
        self.pipeline.materialize((first, last), |txn| {
            records.iter().try_for_each(|record| kv::apply(txn, record))
        })?;
        Ok(last)
    }

    /// Grows the WAL's active segment ahead of need if its writer asked,
    /// as the engine does after each acknowledged commit; returns whether
    /// it grew.
    pub fn grow_ahead(&mut self) -> Result<bool> {
        self.pipeline.grow_wal_ahead()
    }

    /// Makes the state durable, records it in the manifest and lets the WAL
    /// drop covered segments; returns the LSN covered.
    pub fn checkpoint(&mut self) -> Result<Lsn> {
        self.pipeline.checkpoint()
    }

    /// Closes cleanly (the manifest records the clean-shutdown LSN).
    pub fn close(self) -> Result<()> {
        self.pipeline.close()
    }
}

//! Reads: a run, an effect, a run's audit journal, checkpoints and recorded
//! decisions, and a whole-books snapshot, all from the hot books (and the
//! state store for what left memory), under the engine lock.
//!
//! **Invariant:** a read sees every acknowledged command, and returns only
//! once everything it saw is durable (it waits for the records in flight
//! when it read, as a command without ops does), so it never reports what
//! a crash could undo; a failed read is an `Err`, never an empty answer.

use crate::books::{
    AuditEntry, BooksRead, DecisionRecord, Digest, EffectEntry, EffectKey, LoadedCheckpoint,
    MemBooks, Part, Run, RunId, check_schema, load_parts, replay_at,
};
use crate::error::{Error, Result};
use crate::hot::{ColdReader, HotView};

use super::core::Engine;

impl Engine {
    /// Runs `read` over a consistent view of the books: every acknowledged
    /// command, and, once this returns, nothing a crash could undo.
    pub fn read<T>(&self, read: impl FnOnce(&dyn BooksRead) -> Result<T>) -> Result<T> {
        let (value, rests_on) = {
            let inner = self.lock();
            inner.check_running()?;
            let cold = ColdReader::new(self.pipeline.state());
            let view = HotView {
                hot: &inner.hot,
                cold: &cold,
            };
            let value = read(&view);
            cold.finish()?;
            (value, inner.last_applied)
        };
        self.wait_durable(rests_on)?;
        value
    }

    /// The run named `run`, if it exists.
    pub fn run(&self, run: &RunId) -> Result<Option<Run>> {
        self.read(|books| Ok(books.run(run)))
    }

    /// The ledger entry of `key`, if it exists.
    pub fn effect(&self, key: &EffectKey) -> Result<Option<EffectEntry>> {
        self.read(|books| Ok(books.effect(key)))
    }

    /// The ordered journal of `run`: what happened, why, when and under
    /// which lease token, one entry per change, from the first.
    pub fn audit(&self, run: &RunId) -> Result<Vec<AuditEntry>> {
        self.read(|books| {
            if books.run(run).is_none() {
                return Err(Error::NotFound {
                    what: format!("run {run}"),
                });
            }
            let entries = books.audit(run, 1);
            assert!(entries.iter().zip(1u64..).all(|(e, seq)| e.seq == seq));
            Ok(entries)
        })
    }

    /// The newest checkpoint of `run` (`None` if it has none), checking its
    /// schema version (`SchemaMismatch` if it is not `expected_schema`) and
    /// every part's digest.
    pub fn load_latest(
        &self,
        run: &RunId,
        expected_schema: u32,
    ) -> Result<Option<LoadedCheckpoint>> {
        self.read(|books| crate::books::load_latest(books, run, expected_schema))
    }

    /// Like [`Engine::load_latest`], but a checkpoint of another schema
    /// version is handed to `migrate` (found version, parts) instead of
    /// being refused; what it returns is the loaded state.
    pub fn load_latest_migrating(
        &self,
        run: &RunId,
        expected_schema: u32,
        migrate: impl FnOnce(u32, Vec<Part>) -> Result<Vec<Part>>,
    ) -> Result<Option<LoadedCheckpoint>> {
        let loaded = self.read(|books| {
            books
                .checkpoint_latest(run)
                .map(|meta| load_parts(books, meta))
                .transpose()
        })?;
        let Some(mut loaded) = loaded else {
            return Ok(None);
        };
        if loaded.meta.schema_version != expected_schema {
            loaded.parts = migrate(loaded.meta.schema_version, loaded.parts)?;
        }
        Ok(Some(loaded))
    }

    /// Checkpoint `version` of `run`, checking schema and digests;
    /// `NotFound` if there is no such version.
    pub fn load_version(
        &self,
        run: &RunId,
        version: u64,
        expected_schema: u32,
    ) -> Result<LoadedCheckpoint> {
        self.read(|books| {
            let meta = books
                .checkpoint_at(run, version)
                .ok_or_else(|| Error::NotFound {
                    what: format!("checkpoint {version} of run {run}"),
                })?;
            check_schema(&meta, expected_schema)?;
            load_parts(books, meta)
        })
    }

    /// The model call recorded for `run` at `position` if its input digest
    /// is `input_digest`; `None` if nothing is recorded there yet;
    /// `Divergence` if a call with another input is.
    pub fn replay_decision(
        &self,
        run: &RunId,
        position: u64,
        input_digest: &Digest,
    ) -> Result<Option<DecisionRecord>> {
        self.read(|books| replay_at(books, run, position, input_digest))
    }

    /// Every table of the books as a [`MemBooks`], to compare with the
    /// reference model.
    pub fn snapshot(&self) -> Result<MemBooks> {
        let (books, rests_on) = {
            let inner = self.lock();
            inner.check_running()?;
            let cold = ColdReader::new(self.pipeline.state());
            let books = inner.hot.snapshot(&cold);
            cold.finish()?;
            (books, inner.last_applied)
        };
        self.wait_durable(rests_on)?;
        books
    }
}

//! [`HotState`]: the hot books' data. Runs in memory are whole; a claim
//! index orders the claimable ones; deltas hold what changed since the last
//! checkpoint and is not needed to decide (blob bytes, checkpoint metadata
//! of older versions, audit entries), each tagged with the LSN that wrote
//! it, so a checkpoint that wrote up to LSN `L` lets everything tagged
//! `<= L` go.
//!
//! **Invariant:** the claim index holds exactly `(claimable_from_ms, id)`
//! of every run in memory that has a claimable instant; a run's `last_lsn`
//! is the LSN of the last record that changed anything of it (`ZERO` if
//! loaded from the state store unchanged).

use std::collections::{BTreeMap, BTreeSet};

use crate::books::{
    AuditEntry, BooksWrite, CheckpointMeta, DecisionRecord, Digest, EffectEntry, EffectKey,
    MemBooks, Run, RunId, Writes, claimable_from_ms,
};
use crate::error::Result;
use crate::ids::Lsn;

use super::cold::ColdReader;

/// One run held whole in memory.
#[derive(Clone, Debug)]
pub(crate) struct HotRun {
    pub(crate) run: Run,
    /// Every ledger entry of the run, by key.
    pub(crate) effects: BTreeMap<EffectKey, EffectEntry>,
    pub(crate) checkpoint_latest: Option<CheckpointMeta>,
    /// Checkpoint metadata not yet in the state store, by version.
    pub(crate) checkpoints: BTreeMap<u64, (CheckpointMeta, Lsn)>,
    /// Every journaled decision of the run, by position.
    pub(crate) decisions: BTreeMap<u64, DecisionRecord>,
    pub(crate) audit_len: u64,
    /// Audit entries not yet in the state store, in order.
    pub(crate) audit: Vec<(AuditEntry, Lsn)>,
    pub(crate) last_lsn: Lsn,
}

impl HotRun {
    fn new(run: Run) -> HotRun {
        HotRun {
            run,
            effects: BTreeMap::new(),
            checkpoint_latest: None,
            checkpoints: BTreeMap::new(),
            decisions: BTreeMap::new(),
            audit_len: 0,
            audit: Vec::new(),
            last_lsn: Lsn::ZERO,
        }
    }
}

/// The hot books' data (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct HotState {
    pub(crate) runs: BTreeMap<RunId, HotRun>,
    pub(crate) claims: BTreeSet<(u64, RunId)>,
    /// Blobs not yet in the state store.
    pub(crate) blobs: BTreeMap<Digest, (Vec<u8>, Lsn)>,
}

impl HotState {
    /// The hot books of a state store: every run it lists as live, whole.
    pub(crate) fn load(cold: &ColdReader<'_>) -> HotState {
        let mut hot = HotState::default();
        for run in cold.live_runs() {
            hot.fault_in(&run, cold);
        }
        hot
    }

    /// Brings `run` into memory, whole, from the state store, if it is not
    /// in memory yet; a run the state store does not hold stays absent.
    pub(crate) fn fault_in(&mut self, id: &RunId, cold: &ColdReader<'_>) {
        if self.runs.contains_key(id) {
            return;
        }
        let Some(run) = cold.with(|books| crate::books::BooksRead::run(books, id)) else {
            return;
        };
        let mut hot = HotRun::new(run);
        let (effects, decisions, latest, audit_len) = cold.with(|books| {
            use crate::books::BooksRead;
            (
                books.effects_of(id),
                books.decisions_of(id),
                books.checkpoint_latest(id),
                books.audit_len(id),
            )
        });
        hot.effects = effects.into_iter().map(|e| (e.key.clone(), e)).collect();
        hot.decisions = decisions.into_iter().map(|d| (d.position, d)).collect();
        hot.checkpoint_latest = latest;
        hot.audit_len = audit_len;
        self.insert_run(hot);
    }

    fn insert_run(&mut self, hot: HotRun) {
        if let Some(from_ms) = claimable_from_ms(&hot.run) {
            self.claims.insert((from_ms, hot.run.id.clone()));
        }
        let previous = self.runs.insert(hot.run.id.clone(), hot);
        assert!(previous.is_none(), "a run is brought into memory once");
    }

    /// Replaces the record of a run in memory (or adds a new run), keeping
    /// the claim index in step.
    pub(crate) fn set_run(&mut self, run: Run, lsn: Lsn) {
        let new_key = claimable_from_ms(&run).map(|from_ms| (from_ms, run.id.clone()));
        match self.runs.get_mut(&run.id) {
            Some(hot) => {
                if let Some(from_ms) = claimable_from_ms(&hot.run) {
                    let removed = self.claims.remove(&(from_ms, run.id.clone()));
                    assert!(removed, "the claim index held run {}", run.id);
                }
                hot.run = run;
                hot.last_lsn = lsn;
            }
            None => {
                let mut hot = HotRun::new(run);
                hot.last_lsn = lsn;
                self.runs.insert(hot.run.id.clone(), hot);
            }
        }
        if let Some(key) = new_key {
            self.claims.insert(key);
        }
    }

    /// The run `id` in memory, which the caller must have brought in.
    pub(crate) fn run_mut(&mut self, id: &RunId, lsn: Lsn) -> &mut HotRun {
        let hot = self
            .runs
            .get_mut(id)
            .unwrap_or_else(|| panic!("run {id} is brought into memory before it changes"));
        hot.last_lsn = lsn;
        hot
    }

    /// Writes what applying the record at `lsn` wrote (an overlay's
    /// [`Writes`]) into memory. Every run it touches is in memory (the
    /// caller brought it in) or new.
    pub(crate) fn merge(&mut self, writes: Writes, lsn: Lsn) {
        let Writes {
            runs,
            effects,
            blobs,
            checkpoints,
            decisions,
            audit,
        } = writes;
        for run in runs.into_values() {
            self.set_run(run, lsn);
        }
        for (key, entry) in effects {
            self.run_mut(key.run(), lsn).effects.insert(key, entry);
        }
        for (digest, bytes) in blobs {
            self.blobs.entry(digest).or_insert((bytes, lsn));
        }
        for ((run, version), meta) in checkpoints {
            let hot = self.run_mut(&run, lsn);
            assert!(
                hot.checkpoint_latest
                    .as_ref()
                    .is_none_or(|m| m.version < version),
                "checkpoint versions of run {run} grow"
            );
            hot.checkpoints.insert(version, (meta.clone(), lsn));
            hot.checkpoint_latest = Some(meta);
        }
        for ((run, position), record) in decisions {
            self.run_mut(&run, lsn).decisions.insert(position, record);
        }
        for (run, entries) in audit {
            let hot = self.run_mut(&run, lsn);
            for entry in entries {
                assert_eq!(
                    entry.seq,
                    hot.audit_len + 1,
                    "audit of run {run} out of sequence"
                );
                hot.audit_len = entry.seq;
                hot.audit.push((entry, lsn));
            }
        }
    }

    /// A checkpoint wrote every record up to `lsn` to the state store: what
    /// those records changed may leave memory, and so may terminal runs
    /// nothing changed since. Returns how many runs left.
    pub(crate) fn evict_through(&mut self, lsn: Lsn) -> usize {
        self.blobs.retain(|_, (_, at)| *at > lsn);
        let mut gone = Vec::new();
        for (id, hot) in &mut self.runs {
            hot.checkpoints.retain(|_, (_, at)| *at > lsn);
            hot.audit.retain(|(_, at)| *at > lsn);
            if hot.run.state.is_terminal() && hot.last_lsn <= lsn {
                assert!(hot.checkpoints.is_empty() && hot.audit.is_empty());
                gone.push(id.clone());
            }
        }
        for id in &gone {
            let hot = self.runs.remove(id).expect("listed above");
            assert!(
                claimable_from_ms(&hot.run).is_none(),
                "a terminal run is never claimable"
            );
        }
        gone.len()
    }

    /// Every table of the books: the state store's, overlaid with memory.
    pub(crate) fn snapshot(&self, cold: &ColdReader<'_>) -> Result<MemBooks> {
        let mut books = cold.read_all()?;
        for hot in self.runs.values() {
            let id = &hot.run.id;
            books.put_run(hot.run.clone());
            for entry in hot.effects.values() {
                books.put_effect(entry.clone());
            }
            for (meta, _) in hot.checkpoints.values() {
                books.put_checkpoint(meta.clone());
            }
            for record in hot.decisions.values() {
                books.put_decision(record.clone());
            }
            // A checkpoint may have written some of these since the state
            // store was read (it runs beside readers): skip what it has.
            let stored = crate::books::BooksRead::audit_len(&books, id);
            for (entry, _) in hot.audit.iter().filter(|(e, _)| e.seq > stored) {
                books.push_audit(id, entry.clone());
            }
            assert_eq!(
                crate::books::BooksRead::audit_len(&books, id),
                hot.audit_len
            );
        }
        for (digest, (bytes, _)) in &self.blobs {
            books.put_blob(*digest, bytes.clone());
        }
        Ok(books)
    }

    /// How many runs are held in memory.
    pub(crate) fn run_count(&self) -> usize {
        self.runs.len()
    }
}

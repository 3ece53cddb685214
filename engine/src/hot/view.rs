//! [`HotView`]: the books traits over the hot books. It reads memory, and the
//! state store for what memory does not hold (a run that left it, a blob,
//! a resource or a shared key already checkpointed). A record is applied to an overlay of this view,
//! and the overlay's writes are merged into memory (`HotState::merge`).
//!
//! **Invariant:** a run held in memory is answered from memory, and from
//! the state store only for what it let go of (settled ledger entries of a
//! fingerprinted step, decisions below its count); a run not in memory
//! from the state store, where it is unchanged since the checkpoint that
//! wrote it.

use crate::books::{
    AuditEntry, BlobRefs, BooksRead, BudgetBook, CheckpointMeta, DecisionRecord, Digest,
    EffectEntry, EffectKey, EffectKind, ResourceBook, ResourceId, Run, RunId, SagaBook,
    SharedEntry, SharedKeyId, StepId, WaitBook,
};

use super::cold::ColdReader;
use super::state::{HotRun, HotState};
use crate::state::RedbBooks;

/// Reads of the hot books, falling back to the state store.
pub(crate) struct HotView<'a> {
    pub(crate) hot: &'a HotState,
    pub(crate) cold: &'a ColdReader<'a>,
}

impl HotView<'_> {
    fn hot_run(&self, id: &RunId) -> Option<&HotRun> {
        self.hot.runs.get(id)
    }

    /// `read` over the state store if it holds the run `run`; otherwise
    /// the run has no rows there, and the answer is "absent" unread.
    fn cold_of<T: Default>(&self, run: &RunId, read: impl FnOnce(&RedbBooks<'_>) -> T) -> T {
        // A run pruned since the last checkpoint is still in the state
        // store, but no longer in the books.
        if !self.hot.pruned.contains_key(run) && self.cold.holds_run(run) {
            self.cold.with(read)
        } else {
            T::default()
        }
    }

    /// Visits the claim index's runs of the agent versions `serves`
    /// accepts (all if `None`): a claimable run is in memory, or parked out
    /// of it (in a wait until its deadline, or unleased since the open),
    /// read from the state store, where it is as the checkpoint that let
    /// it go wrote it.
    fn visit_indexed(
        &self,
        now_ms: u64,
        serves: Option<&dyn Fn(&str) -> bool>,
        visit: &mut dyn FnMut(&Run) -> bool,
    ) {
        let served = |run: &Run| {
            let served = serves.is_none_or(|serves| serves(&run.agent_version));
            assert!(served, "run {} is indexed under its agent version", run.id);
            served
        };
        self.hot
            .claims
            .visit(now_ms, serves, &mut |id| match self.hot.runs.get(id) {
                Some(hot) => served(&hot.run) && visit(&hot.run),
                None => match self.cold.run(id) {
                    Some(run) => served(&run) && visit(&run),
                    // A failed read; the reader reports it.
                    None => false,
                },
            });
    }
}

impl BooksRead for HotView<'_> {
    fn run(&self, id: &RunId) -> Option<Run> {
        match self.hot_run(id) {
            Some(hot) => Some(hot.run.clone()),
            None if self.hot.pruned.contains_key(id) => None,
            None => self.cold.run(id),
        }
    }

    fn visit_claimable(&self, now_ms: u64, visit: &mut dyn FnMut(&Run) -> bool) {
        self.visit_indexed(now_ms, None, visit);
    }

    fn visit_claimable_served(
        &self,
        now_ms: u64,
        serves: &dyn Fn(&str) -> bool,
        visit: &mut dyn FnMut(&Run) -> bool,
    ) {
        // The claim index keeps each agent version's runs apart: a worker
        // claiming for its agents walks theirs only, and never reads the
        // runs of others (a LangGraph thread, say, between its puts).
        self.visit_indexed(now_ms, Some(serves), visit);
    }

    fn effect(&self, key: &EffectKey) -> Option<EffectEntry> {
        let Some(hot) = self.hot_run(key.run()) else {
            return self.cold_of(key.run(), |b| b.effect(key));
        };
        match hot.effects.get(key) {
            Some(held) => Some(held.0.clone()),
            None if hot.may_be_cold(key.step(), key.kind()) => self.cold.with(|b| b.effect(key)),
            None => None,
        }
    }

    fn latest_effect(&self, run: &RunId, step: &StepId, kind: EffectKind) -> Option<EffectEntry> {
        let Some(hot) = self.hot_run(run) else {
            return self.cold_of(run, |b| b.latest_effect(run, step, kind));
        };
        let first = EffectKey::of_kind(run.clone(), step.clone(), kind, 1).ok()?;
        let last = EffectKey::of_kind(run.clone(), step.clone(), kind, u32::MAX).ok()?;
        let warm = hot
            .effects
            .range(first..=last)
            .next_back()
            .map(|(_, held)| held.0.clone());
        if !hot.may_be_cold(step, kind) {
            return warm;
        }
        // Memory holds the newest write of every entry it holds; the state
        // store may hold later attempts memory let go of.
        let cold = self.cold.with(|b| b.latest_effect(run, step, kind));
        match (warm, cold) {
            (Some(w), Some(c)) if c.key.attempt() > w.key.attempt() => Some(c),
            (Some(w), _) => Some(w),
            (None, c) => c,
        }
    }

    fn checkpoint_latest(&self, run: &RunId) -> Option<CheckpointMeta> {
        match self.hot_run(run) {
            Some(hot) => hot.checkpoint_latest.clone(),
            None => self.cold_of(run, |b| b.checkpoint_latest(run)),
        }
    }

    fn checkpoint_at(&self, run: &RunId, version: u64) -> Option<CheckpointMeta> {
        let unwritten = self
            .hot_run(run)
            .and_then(|hot| hot.checkpoints.get(&version))
            .map(|(meta, _)| meta.clone());
        unwritten.or_else(|| self.cold_of(run, |b| b.checkpoint_at(run, version)))
    }

    fn blob_exists(&self, digest: &Digest) -> bool {
        self.hot.blobs.contains_key(digest)
            || (!self.hot.blobs_deleted.contains_key(digest)
                && self.cold.with(|b| b.blob_exists(digest)))
    }

    fn blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        match self.hot.blobs.get(digest) {
            Some((bytes, _)) => Some(bytes.clone()),
            None if self.hot.blobs_deleted.contains_key(digest) => None,
            None => self.cold.with(|b| b.blob(digest)),
        }
    }

    fn decision_at(&self, run: &RunId, position: u64) -> Option<DecisionRecord> {
        let Some(hot) = self.hot_run(run) else {
            return self.cold_of(run, |b| b.decision_at(run, position));
        };
        match hot.decisions.get(&position) {
            Some((record, _)) => Some(record.clone()),
            None if position < hot.decision_count => {
                self.cold.with(|b| b.decision_at(run, position))
            }
            None => None,
        }
    }

    fn decision_count(&self, run: &RunId) -> u64 {
        match self.hot_run(run) {
            Some(hot) => hot.decision_count,
            None => self.cold_of(run, |b| b.decision_count(run)),
        }
    }

    fn audit_len(&self, run: &RunId) -> u64 {
        match self.hot_run(run) {
            Some(hot) => hot.audit_len,
            None => self.cold_of(run, |b| b.audit_len(run)),
        }
    }

    fn audit(&self, run: &RunId, from_seq: u64) -> Vec<AuditEntry> {
        let Some(hot) = self.hot_run(run) else {
            return self.cold_of(run, |b| b.audit(run, from_seq));
        };
        // The state store holds the entries before the first one in memory
        // (and, if a checkpoint ran beside this read, some of those too).
        let first_unwritten = hot.audit.first().map_or(hot.audit_len + 1, |(e, _)| e.seq);
        let mut entries: Vec<AuditEntry> = self
            .cold_of(run, |b| b.audit(run, from_seq))
            .into_iter()
            .filter(|e| e.seq < first_unwritten)
            .collect();
        entries.extend(
            hot.audit
                .iter()
                .filter(|(e, _)| e.seq >= from_seq)
                .map(|(e, _)| e.clone()),
        );
        entries
    }

    fn waits(&self, run: &RunId) -> Option<WaitBook> {
        match self.hot_run(run) {
            Some(hot) => hot.waits.as_deref().cloned(),
            None => self.cold_of(run, |b| b.waits(run)),
        }
    }

    fn budget(&self, run: &RunId) -> Option<BudgetBook> {
        match self.hot_run(run) {
            Some(hot) => hot.budget.as_deref().cloned(),
            None => self.cold_of(run, |b| b.budget(run)),
        }
    }

    fn saga(&self, run: &RunId) -> Option<SagaBook> {
        match self.hot_run(run) {
            Some(hot) => hot.saga.as_deref().cloned(),
            None => self.cold_of(run, |b| b.saga(run)),
        }
    }

    fn resource(&self, resource: &ResourceId) -> Option<ResourceBook> {
        match self.hot.resources.get(resource) {
            Some((book, _)) => Some(book.clone()),
            None => self.cold.with(|b| b.resource(resource)),
        }
    }

    fn shared(&self, key: &SharedKeyId) -> Option<SharedEntry> {
        match self.hot.shared.get(key) {
            Some((entry, _)) => Some(entry.clone()),
            None => self.cold.with(|b| b.shared(key)),
        }
    }

    fn effects_of(&self, run: &RunId) -> Vec<EffectEntry> {
        self.hot.effects_of(self.cold, run)
    }

    fn blob_holders(&self, digest: &Digest) -> Option<u64> {
        match self.hot.blob_holders.get(digest) {
            Some((holders, _)) => *holders,
            None => self.cold.with(|b| b.blob_holders(digest)),
        }
    }

    fn blob_refs(&self, run: &RunId) -> Option<BlobRefs> {
        match self.hot_run(run) {
            Some(hot) => (!hot.blob_refs.is_empty()).then(|| BlobRefs {
                run: run.clone(),
                digests: hot.blob_refs.iter().copied().collect(),
            }),
            None => self.cold_of(run, |b| b.blob_refs(run)),
        }
    }

    fn blob_referenced(&self, run: &RunId, digest: &Digest) -> bool {
        match self.hot_run(run) {
            Some(hot) => hot.blob_refs.contains(digest),
            None => self.cold_of(run, |b| b.blob_referenced(run, digest)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::books::{BooksRead, CreateRun, RunId, digest_of};
    use crate::engine::{Engine, EngineOptions};
    use crate::hot::ColdReader;

    use super::HotView;

    fn create(engine: &Engine, name: &str, agent: &str) {
        engine
            .create_run(CreateRun {
                run: RunId::new(name).expect("a valid name"),
                input_digest: digest_of(name.as_bytes()),
                agent_version: agent.into(),
                trace_id: String::new(),
                parent: None,
                input: None,
            })
            .expect("created");
    }

    /// The claims a visit for `agent` finds, in order, up to 10.
    fn claims_for(engine: &Engine, agent: &str) -> Vec<String> {
        let inner = engine.lock();
        let cold = ColdReader::new(engine.local().pipeline.state());
        let view = HotView {
            hot: &inner.hot,
            cold: &cold,
        };
        let mut found = Vec::new();
        view.visit_claimable_served(u64::MAX, &|a| a == agent, &mut |run| {
            found.push(run.id.to_string());
            found.len() < 10
        });
        found
    }

    #[test]
    fn a_visit_for_some_agents_walks_their_runs_and_never_reads_the_others() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let engine = Engine::open(dir.path(), EngineOptions::default()).expect("opened");
        create(&engine, "other-a", "langgraph-thread");
        create(&engine, "mine", "agent 1");
        create(&engine, "other-b", "langgraph-thread");
        engine.close().expect("closed");
        let engine = Engine::open(dir.path(), EngineOptions::default()).expect("reopened");
        assert_eq!(engine.runs_in_memory(), 0, "all three parked");
        assert_eq!(claims_for(&engine, "agent 1"), ["mine"]);
        assert_eq!(
            claims_for(&engine, "langgraph-thread"),
            ["other-a", "other-b"]
        );
        // A parked entry of another agent whose row the state store does not
        // hold: a visit that read it would stop at the failed read and find
        // nothing; one that passes it by on its agent finds ours.
        {
            let mut inner = engine.lock();
            let ghost = RunId::new("another-ghost").expect("a valid name");
            let slot = (inner.hot.claims.agent("langgraph-thread"), 0);
            assert!(inner.hot.claims.insert(slot, ghost.clone()));
            inner.hot.parked.insert(ghost, slot);
        }
        assert_eq!(claims_for(&engine, "agent 1"), ["mine"]);
    }
}

//! `Overlay`: a scratch layer of writes over read-only books, so a batch is
//! decided command by command against the state the earlier commands would
//! leave, without touching the real state. It wraps any `&dyn BooksRead`,
//! so it works the same over `MemBooks` and the redb-backed store.
//!
//! Invariant: every read answers as if the overlay's writes had been applied
//! to the base; the base is never written (the overlay is dropped after
//! deciding, and the ops it gathered are what gets logged).

use std::collections::{BTreeMap, BTreeSet};

use super::audit::AuditEntry;
use super::budget::BudgetBook;
use super::checkpoint::CheckpointMeta;
use super::coord::{ResourceBook, SharedEntry};
use super::decision::DecisionRecord;
use super::digest::Digest;
use super::ids::{EffectKey, EffectKind, ResourceId, RunId, SharedKeyId, StepId};
use super::lease::{claim_order, claimable_from_ms};
use super::ledger::EffectEntry;
use super::run::Run;
use super::saga::SagaBook;
use super::state::{BooksRead, BooksWrite};
use super::wait::{WaitBook, wake_ms};

/// Pending writes over a read-only base (see the module docs).
pub struct Overlay<'a> {
    base: &'a dyn BooksRead,
    runs: BTreeMap<RunId, Run>,
    effects: BTreeMap<EffectKey, EffectEntry>,
    blobs: BTreeMap<Digest, Vec<u8>>,
    checkpoints: BTreeMap<(RunId, u64), CheckpointMeta>,
    decisions: BTreeMap<(RunId, u64), DecisionRecord>,
    audit: BTreeMap<RunId, Vec<AuditEntry>>,
    waits: BTreeMap<RunId, WaitBook>,
    budgets: BTreeMap<RunId, BudgetBook>,
    sagas: BTreeMap<RunId, SagaBook>,
    resources: BTreeMap<ResourceId, ResourceBook>,
    shared: BTreeMap<SharedKeyId, SharedEntry>,
}

impl<'a> Overlay<'a> {
    /// An empty overlay over `base`.
    pub fn new(base: &'a dyn BooksRead) -> Overlay<'a> {
        Overlay {
            base,
            runs: BTreeMap::new(),
            effects: BTreeMap::new(),
            blobs: BTreeMap::new(),
            checkpoints: BTreeMap::new(),
            decisions: BTreeMap::new(),
            audit: BTreeMap::new(),
            waits: BTreeMap::new(),
            budgets: BTreeMap::new(),
            sagas: BTreeMap::new(),
            resources: BTreeMap::new(),
            shared: BTreeMap::new(),
        }
    }
}

/// Everything an overlay wrote, in key order: what applying its ops to the
/// base would write.
#[derive(Debug, Default)]
pub struct Writes {
    /// Runs, by id.
    pub runs: BTreeMap<RunId, Run>,
    /// Ledger entries, by key.
    pub effects: BTreeMap<EffectKey, EffectEntry>,
    /// Blobs, by digest.
    pub blobs: BTreeMap<Digest, Vec<u8>>,
    /// Checkpoint metadata, by (run, version).
    pub checkpoints: BTreeMap<(RunId, u64), CheckpointMeta>,
    /// Decisions, by (run, position).
    pub decisions: BTreeMap<(RunId, u64), DecisionRecord>,
    /// Audit entries appended, by run, in order.
    pub audit: BTreeMap<RunId, Vec<AuditEntry>>,
    /// Wait books, by run.
    pub waits: BTreeMap<RunId, WaitBook>,
    /// Budget books, by run.
    pub budgets: BTreeMap<RunId, BudgetBook>,
    /// Saga books, by run.
    pub sagas: BTreeMap<RunId, SagaBook>,
    /// Resource lease books, by resource.
    pub resources: BTreeMap<ResourceId, ResourceBook>,
    /// Shared keys, by key.
    pub shared: BTreeMap<SharedKeyId, SharedEntry>,
}

impl Overlay<'_> {
    /// What the overlay wrote, to be written to the base's owner as is:
    /// applying the same ops again would only recompute it.
    pub fn into_writes(self) -> Writes {
        Writes {
            runs: self.runs,
            effects: self.effects,
            blobs: self.blobs,
            checkpoints: self.checkpoints,
            decisions: self.decisions,
            audit: self.audit,
            waits: self.waits,
            budgets: self.budgets,
            sagas: self.sagas,
            resources: self.resources,
            shared: self.shared,
        }
    }
}

impl BooksRead for Overlay<'_> {
    fn run(&self, id: &RunId) -> Option<Run> {
        self.runs.get(id).cloned().or_else(|| self.base.run(id))
    }

    fn visit_claimable(&self, now_ms: u64, visit: &mut dyn FnMut(&Run) -> bool) {
        // Merge, in claim order, the overlay's own claimable runs with the
        // base's, skipping base runs the overlay has rewritten (their
        // record or their wait book, on which claimability depends).
        let rewritten: BTreeSet<&RunId> = self.runs.keys().chain(self.waits.keys()).collect();
        let mut mine: Vec<(u64, Run)> = rewritten
            .iter()
            .filter_map(|id| self.run(id))
            .filter_map(|run| {
                let wake = wake_ms(self.waits(&run.id).as_ref());
                claimable_from_ms(&run, wake)
                    .filter(|from_ms| *from_ms <= now_ms)
                    .map(|from_ms| (from_ms, run))
            })
            .collect();
        mine.sort_by(|(a, x), (b, y)| (a, &x.id).cmp(&(b, &y.id)));
        let mut mine = mine.into_iter().peekable();
        let mut going = true;
        self.base.visit_claimable(now_ms, &mut |run: &Run| {
            let base_wake = wake_ms(self.base.waits(&run.id).as_ref());
            let order = claim_order(run, base_wake);
            while let Some((_, next)) = mine.next_if(|(from_ms, m)| Some((*from_ms, &m.id)) < order)
            {
                going = visit(&next);
                if !going {
                    return false;
                }
            }
            if !rewritten.contains(&run.id) {
                going = visit(run);
            }
            going
        });
        if going {
            for (_, run) in mine {
                if !visit(&run) {
                    return;
                }
            }
        }
    }

    fn effect(&self, key: &EffectKey) -> Option<EffectEntry> {
        self.effects
            .get(key)
            .cloned()
            .or_else(|| self.base.effect(key))
    }

    fn latest_effect(&self, run: &RunId, step: &StepId, kind: EffectKind) -> Option<EffectEntry> {
        // Keys order by run, step, kind, then attempt: the step's latest
        // attempt of `kind` is the last key of its range.
        let mine = self
            .effects
            .range(EffectKey::attempts_of(run, step, kind))
            .next_back()
            .map(|(_, e)| e.clone());
        let base = self.base.latest_effect(run, step, kind);
        match (mine, base) {
            (Some(m), Some(b)) if b.key.attempt() > m.key.attempt() => Some(b),
            (Some(m), _) => Some(m),
            (None, b) => b,
        }
    }

    fn checkpoint_latest(&self, run: &RunId) -> Option<CheckpointMeta> {
        let range = (run.clone(), 0)..=(run.clone(), u64::MAX);
        self.checkpoints
            .range(range)
            .next_back()
            .map(|(_, meta)| meta.clone())
            .or_else(|| self.base.checkpoint_latest(run))
    }

    fn checkpoint_at(&self, run: &RunId, version: u64) -> Option<CheckpointMeta> {
        self.checkpoints
            .get(&(run.clone(), version))
            .cloned()
            .or_else(|| self.base.checkpoint_at(run, version))
    }

    fn blob_exists(&self, digest: &Digest) -> bool {
        self.blobs.contains_key(digest) || self.base.blob_exists(digest)
    }

    fn blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        self.blobs
            .get(digest)
            .cloned()
            .or_else(|| self.base.blob(digest))
    }

    fn decision_at(&self, run: &RunId, position: u64) -> Option<DecisionRecord> {
        let key = (run.clone(), position);
        self.decisions
            .get(&key)
            .cloned()
            .or_else(|| self.base.decision_at(run, position))
    }

    fn decision_count(&self, run: &RunId) -> u64 {
        let range = (run.clone(), 0)..=(run.clone(), u64::MAX);
        let mine = self
            .decisions
            .range(range)
            .next_back()
            .map_or(0, |((_, p), _)| p + 1);
        mine.max(self.base.decision_count(run))
    }

    fn audit_len(&self, run: &RunId) -> u64 {
        self.base.audit_len(run) + self.audit.get(run).map_or(0, |a| a.len() as u64)
    }

    fn audit(&self, run: &RunId, from_seq: u64) -> Vec<AuditEntry> {
        let mut entries = self.base.audit(run, from_seq);
        let mine = self.audit.get(run).map_or(&[][..], |a| &a[..]);
        entries.extend(mine.iter().filter(|e| e.seq >= from_seq).cloned());
        entries
    }

    fn waits(&self, run: &RunId) -> Option<WaitBook> {
        self.waits
            .get(run)
            .cloned()
            .or_else(|| self.base.waits(run))
    }

    fn budget(&self, run: &RunId) -> Option<BudgetBook> {
        self.budgets
            .get(run)
            .cloned()
            .or_else(|| self.base.budget(run))
    }

    fn saga(&self, run: &RunId) -> Option<SagaBook> {
        self.sagas.get(run).cloned().or_else(|| self.base.saga(run))
    }

    fn resource(&self, resource: &ResourceId) -> Option<ResourceBook> {
        self.resources
            .get(resource)
            .cloned()
            .or_else(|| self.base.resource(resource))
    }

    fn shared(&self, key: &SharedKeyId) -> Option<SharedEntry> {
        self.shared
            .get(key)
            .cloned()
            .or_else(|| self.base.shared(key))
    }
}

impl BooksWrite for Overlay<'_> {
    fn put_run(&mut self, run: Run) {
        self.runs.insert(run.id.clone(), run);
    }

    fn put_effect(&mut self, entry: EffectEntry) {
        self.effects.insert(entry.key.clone(), entry);
    }

    fn put_blob(&mut self, digest: Digest, bytes: Vec<u8>) {
        self.blobs.entry(digest).or_insert(bytes);
    }

    fn put_checkpoint(&mut self, meta: CheckpointMeta) {
        let newer = self
            .checkpoint_latest(&meta.run)
            .is_none_or(|m| m.version < meta.version);
        assert!(newer, "checkpoint versions of run {} must grow", meta.run);
        self.checkpoints
            .insert((meta.run.clone(), meta.version), meta);
    }

    fn put_decision(&mut self, record: DecisionRecord) {
        self.decisions
            .insert((record.run.clone(), record.position), record);
    }

    fn push_audit(&mut self, run: &RunId, entry: AuditEntry) {
        assert_eq!(
            entry.seq,
            self.audit_len(run) + 1,
            "audit of run {run} out of sequence"
        );
        self.audit.entry(run.clone()).or_default().push(entry);
    }

    fn put_waits(&mut self, book: WaitBook) {
        self.waits.insert(book.run.clone(), book);
    }

    fn put_budget(&mut self, book: BudgetBook) {
        self.budgets.insert(book.run.clone(), book);
    }

    fn put_saga(&mut self, book: SagaBook) {
        self.sagas.insert(book.run.clone(), book);
    }

    fn put_resource(&mut self, book: ResourceBook) {
        self.resources.insert(book.resource.clone(), book);
    }

    fn put_shared(&mut self, entry: SharedEntry) {
        self.shared.insert(entry.key.clone(), entry);
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::apply::apply;
    use crate::books::test_support::*;

    #[test]
    fn overlay_reads_its_writes_and_leaves_the_base_alone() {
        let (b, g) = books_with_running_run("r");
        let before = b.mem.clone();
        let mut overlay = Overlay::new(&b.mem);
        let d = crate::books::decide::decide(
            &overlay,
            &begin(
                "r",
                "s",
                &g,
                crate::books::ledger::ToolClass::Queryable,
                b"a",
            ),
            b.now_ms,
        )
        .unwrap();
        for op in &d.ops {
            apply(&mut overlay, op).unwrap();
        }
        assert!(
            overlay
                .latest_effect(&rid("r"), &sid("s"), EffectKind::Act)
                .is_some()
        );
        assert_eq!(overlay.audit_len(&rid("r")), b.mem.audit_len(&rid("r")) + 1);
        drop(overlay);
        assert_eq!(b.mem, before);
        assert!(
            b.mem
                .latest_effect(&rid("r"), &sid("s"), EffectKind::Act)
                .is_none()
        );
    }
}

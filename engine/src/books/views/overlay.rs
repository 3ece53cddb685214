//! `Overlay`: a scratch layer of writes over read-only books, so a batch is
//! decided command by command against the state the earlier commands would
//! leave, without touching the real state. It wraps any `&dyn BooksRead`,
//! so it works the same over `MemBooks` and the redb-backed store.
//!
//! Deletions (a pruned run, a deleted blob) are kept as such: a pruned
//! run's rows read as absent from the base, while what the overlay wrote
//! after the prune (the name taken by a new run) is answered as usual.
//!
//! Invariant: every read answers as if the overlay's writes had been applied
//! to the base; the base is never written (the overlay is dropped after
//! deciding, and the ops it gathered are what gets logged).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use crate::books::base::digest::Digest;
use crate::books::base::ids::{EffectKey, EffectKind, ResourceId, RunId, SharedKeyId, StepId};
use crate::books::records::audit::AuditEntry;
use crate::books::records::budget::BudgetBook;
use crate::books::records::checkpoint::CheckpointMeta;
use crate::books::records::coord::{ResourceBook, SharedEntry};
use crate::books::records::decision::DecisionRecord;
use crate::books::records::ledger::EffectEntry;
use crate::books::records::retention::BlobRefs;
use crate::books::records::run::Run;
use crate::books::records::run::{claim_order, claimable_from_ms};
use crate::books::records::saga::SagaBook;
use crate::books::records::wait::{WaitBook, wake_ms};
use crate::books::vocabulary::state::{BooksRead, BooksWrite};

/// Pending writes over a read-only base (see the module docs).
pub struct Overlay<'a> {
    base: &'a dyn BooksRead,
    runs: BTreeMap<RunId, Run>,
    /// Boxed: an entry is 352 bytes, and a map's first node holds eleven
    /// values in place, so a batch's one entry cost a 4.3 KB node (the
    /// allocator's slow path) where a box and a node of keys and pointers
    /// cost two small ones.
    effects: BTreeMap<EffectKey, Box<EffectEntry>>,
    blobs: BTreeMap<Digest, Vec<u8>>,
    /// The digests of `blobs` in the order they were first put (a digest
    /// deleted and put again may be listed twice).
    blob_order: Vec<Digest>,
    checkpoints: BTreeMap<(RunId, u64), CheckpointMeta>,
    decisions: BTreeMap<(RunId, u64), DecisionRecord>,
    audit: BTreeMap<RunId, Vec<AuditEntry>>,
    waits: BTreeMap<RunId, WaitBook>,
    budgets: BTreeMap<RunId, BudgetBook>,
    sagas: BTreeMap<RunId, SagaBook>,
    resources: BTreeMap<ResourceId, ResourceBook>,
    shared: BTreeMap<SharedKeyId, SharedEntry>,
    pruned: BTreeSet<RunId>,
    blobs_deleted: BTreeSet<Digest>,
    blob_holders: BTreeMap<Digest, Option<u64>>,
    /// A run's references whole (put whole, or begun after a prune).
    blob_refs: BTreeMap<RunId, BlobRefs>,
    /// References added to a run's in the base, not copied from it (a run
    /// is in this map or in `blob_refs`, never both).
    blob_refs_added: BTreeMap<RunId, BTreeSet<Digest>>,
    /// The base's audit length of the run whose length was read last: an
    /// op that appends to a run's audit reads its length, then the append
    /// checks it again, and over the hot books each read searches every
    /// run in memory. The base does not change while the overlay lives.
    base_audit_len: RefCell<Option<(RunId, u64)>>,
}

impl<'a> Overlay<'a> {
    /// An empty overlay over `base`.
    pub fn new(base: &'a dyn BooksRead) -> Overlay<'a> {
        Overlay {
            base,
            runs: BTreeMap::new(),
            effects: BTreeMap::new(),
            blobs: BTreeMap::new(),
            blob_order: Vec::new(),
            checkpoints: BTreeMap::new(),
            decisions: BTreeMap::new(),
            audit: BTreeMap::new(),
            waits: BTreeMap::new(),
            budgets: BTreeMap::new(),
            sagas: BTreeMap::new(),
            resources: BTreeMap::new(),
            shared: BTreeMap::new(),
            pruned: BTreeSet::new(),
            blobs_deleted: BTreeSet::new(),
            blob_holders: BTreeMap::new(),
            blob_refs: BTreeMap::new(),
            blob_refs_added: BTreeMap::new(),
            base_audit_len: RefCell::new(None),
        }
    }

    /// The base, for the rows of `run`; `None` once the overlay pruned
    /// it, so those rows read as absent.
    fn base_of(&self, run: &RunId) -> Option<&'a dyn BooksRead> {
        (!self.pruned.contains(run)).then_some(self.base)
    }

    /// The base's audit length of `run` (0 once the overlay pruned it).
    fn base_audit_len(&self, run: &RunId) -> u64 {
        let Some(base) = self.base_of(run) else {
            return 0;
        };
        if let Some((last, len)) = &*self.base_audit_len.borrow()
            && last == run
        {
            return *len;
        }
        let len = base.audit_len(run);
        *self.base_audit_len.borrow_mut() = Some((run.clone(), len));
        len
    }
}

/// Everything an overlay wrote, in key order: what applying its ops to the
/// base would write. Deletions come first: a run in `pruned` loses every
/// row in the base before the rows below (of a new run of that name) are
/// written.
#[derive(Debug, Default)]
pub struct Writes {
    /// Runs, by id.
    pub runs: BTreeMap<RunId, Run>,
    /// Ledger entries, by key (boxed: see the overlay's field).
    pub effects: BTreeMap<EffectKey, Box<EffectEntry>>,
    /// Blobs, each once, in the order they were first put: the order a
    /// checkpoint appends them to the state store's blob stream in.
    pub blobs: Vec<(Digest, Vec<u8>)>,
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
    /// Runs pruned: every row of theirs in the base is deleted.
    pub pruned: BTreeSet<RunId>,
    /// Blobs deleted.
    pub blobs_deleted: BTreeSet<Digest>,
    /// Blob holder counts set (`None`: deleted).
    pub blob_holders: BTreeMap<Digest, Option<u64>>,
    /// Blob references, by run, whole: they replace the run's.
    pub blob_refs: BTreeMap<RunId, BlobRefs>,
    /// Blob references added, by run: the run's (as the base holds them)
    /// and these. A run is here or in `blob_refs`, never both, and never
    /// here if it is in `pruned`.
    pub blob_refs_added: BTreeMap<RunId, BTreeSet<Digest>>,
}

/// The blobs of `by_digest` in `order` (a digest listed twice, or no longer
/// held, is taken once or not at all); `put_blob` lists every digest it
/// holds, so nothing is left over.
fn in_put_order(
    mut by_digest: BTreeMap<Digest, Vec<u8>>,
    order: Vec<Digest>,
) -> Vec<(Digest, Vec<u8>)> {
    let blobs: Vec<_> = order
        .into_iter()
        .filter_map(|digest| by_digest.remove(&digest).map(|bytes| (digest, bytes)))
        .collect();
    debug_assert!(by_digest.is_empty(), "put_blob lists every blob it holds");
    blobs
}

impl Overlay<'_> {
    /// What the overlay wrote, to be written to the base's owner as is:
    /// applying the same ops again would only recompute it.
    pub fn into_writes(self) -> Writes {
        Writes {
            runs: self.runs,
            effects: self.effects,
            blobs: in_put_order(self.blobs, self.blob_order),
            checkpoints: self.checkpoints,
            decisions: self.decisions,
            audit: self.audit,
            waits: self.waits,
            budgets: self.budgets,
            sagas: self.sagas,
            resources: self.resources,
            shared: self.shared,
            pruned: self.pruned,
            blobs_deleted: self.blobs_deleted,
            blob_holders: self.blob_holders,
            blob_refs: self.blob_refs,
            blob_refs_added: self.blob_refs_added,
        }
    }
}

impl Overlay<'_> {
    /// The claimable runs of the overlay and its base merged in claim
    /// order, of the agent versions `serves` accepts (all if `None`).
    fn visit_merged(
        &self,
        now_ms: u64,
        serves: Option<&dyn Fn(&str) -> bool>,
        visit: &mut dyn FnMut(&Run) -> bool,
    ) {
        // Merge, in claim order, the overlay's own claimable runs with the
        // base's, skipping base runs the overlay has rewritten (their
        // record or their wait book, on which claimability depends) or
        // pruned.
        let rewritten: BTreeSet<&RunId> = self
            .runs
            .keys()
            .chain(self.waits.keys())
            .chain(self.pruned.iter())
            .collect();
        let mut mine: Vec<(u64, Run)> = rewritten
            .iter()
            .filter_map(|id| self.run(id))
            .filter(|run| serves.is_none_or(|serves| serves(&run.agent_version)))
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
        let mut merge = |run: &Run| {
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
        };
        match serves {
            None => self.base.visit_claimable(now_ms, &mut merge),
            Some(serves) => self.base.visit_claimable_served(now_ms, serves, &mut merge),
        }
        if going {
            for (_, run) in mine {
                if !visit(&run) {
                    return;
                }
            }
        }
    }
}

impl BooksRead for Overlay<'_> {
    fn run(&self, id: &RunId) -> Option<Run> {
        self.runs
            .get(id)
            .cloned()
            .or_else(|| self.base_of(id)?.run(id))
    }

    fn visit_claimable(&self, now_ms: u64, visit: &mut dyn FnMut(&Run) -> bool) {
        self.visit_merged(now_ms, None, visit);
    }

    fn visit_claimable_served(
        &self,
        now_ms: u64,
        serves: &dyn Fn(&str) -> bool,
        visit: &mut dyn FnMut(&Run) -> bool,
    ) {
        self.visit_merged(now_ms, Some(serves), visit);
    }

    fn effect(&self, key: &EffectKey) -> Option<EffectEntry> {
        self.effects
            .get(key)
            .map(|entry| (**entry).clone())
            .or_else(|| self.base_of(key.run())?.effect(key))
    }

    fn latest_effect(&self, run: &RunId, step: &StepId, kind: EffectKind) -> Option<EffectEntry> {
        // Keys order by run, step, kind, then attempt: the step's latest
        // attempt of `kind` is the last key of its range.
        let mine = self
            .effects
            .range(EffectKey::attempts_of(run, step, kind))
            .next_back()
            .map(|(_, e)| (**e).clone());
        let base = self
            .base_of(run)
            .and_then(|b| b.latest_effect(run, step, kind));
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
            .or_else(|| self.base_of(run)?.checkpoint_latest(run))
    }

    fn checkpoint_at(&self, run: &RunId, version: u64) -> Option<CheckpointMeta> {
        self.checkpoints
            .get(&(run.clone(), version))
            .cloned()
            .or_else(|| self.base_of(run)?.checkpoint_at(run, version))
    }

    fn blob_exists(&self, digest: &Digest) -> bool {
        self.blobs.contains_key(digest)
            || (!self.blobs_deleted.contains(digest) && self.base.blob_exists(digest))
    }

    fn blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        if let Some(bytes) = self.blobs.get(digest) {
            return Some(bytes.clone());
        }
        (!self.blobs_deleted.contains(digest))
            .then(|| self.base.blob(digest))
            .flatten()
    }

    fn decision_at(&self, run: &RunId, position: u64) -> Option<DecisionRecord> {
        let key = (run.clone(), position);
        self.decisions
            .get(&key)
            .cloned()
            .or_else(|| self.base_of(run)?.decision_at(run, position))
    }

    fn decision_count(&self, run: &RunId) -> u64 {
        let range = (run.clone(), 0)..=(run.clone(), u64::MAX);
        let mine = self
            .decisions
            .range(range)
            .next_back()
            .map_or(0, |((_, p), _)| p + 1);
        mine.max(self.base_of(run).map_or(0, |b| b.decision_count(run)))
    }

    fn audit_len(&self, run: &RunId) -> u64 {
        self.base_audit_len(run) + self.audit.get(run).map_or(0, |a| a.len() as u64)
    }

    fn audit(&self, run: &RunId, from_seq: u64) -> Vec<AuditEntry> {
        let mut entries = self
            .base_of(run)
            .map_or_else(Vec::new, |b| b.audit(run, from_seq));
        let mine = self.audit.get(run).map_or(&[][..], |a| &a[..]);
        entries.extend(mine.iter().filter(|e| e.seq >= from_seq).cloned());
        entries
    }

    fn waits(&self, run: &RunId) -> Option<WaitBook> {
        self.waits
            .get(run)
            .cloned()
            .or_else(|| self.base_of(run)?.waits(run))
    }

    fn budget(&self, run: &RunId) -> Option<BudgetBook> {
        self.budgets
            .get(run)
            .cloned()
            .or_else(|| self.base_of(run)?.budget(run))
    }

    fn saga(&self, run: &RunId) -> Option<SagaBook> {
        self.sagas
            .get(run)
            .cloned()
            .or_else(|| self.base_of(run)?.saga(run))
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

    fn effects_of(&self, run: &RunId) -> Vec<EffectEntry> {
        let mut all: BTreeMap<EffectKey, EffectEntry> = self
            .base_of(run)
            .map_or_else(Vec::new, |b| b.effects_of(run))
            .into_iter()
            .map(|e| (e.key.clone(), e))
            .collect();
        all.extend(
            self.effects
                .values()
                .filter(|e| e.key.run() == run)
                .map(|e| (e.key.clone(), (**e).clone())),
        );
        all.into_values().collect()
    }

    fn blob_holders(&self, digest: &Digest) -> Option<u64> {
        match self.blob_holders.get(digest) {
            Some(holders) => *holders,
            None => self.base.blob_holders(digest),
        }
    }

    fn blob_refs(&self, run: &RunId) -> Option<BlobRefs> {
        if let Some(refs) = self.blob_refs.get(run) {
            return Some(refs.clone());
        }
        let base = self.base_of(run).and_then(|base| base.blob_refs(run));
        let Some(added) = self.blob_refs_added.get(run) else {
            return base;
        };
        let mut refs = base.unwrap_or_else(|| BlobRefs::none(run.clone()));
        refs.extend(added);
        Some(refs)
    }

    fn blob_referenced(&self, run: &RunId, digest: &Digest) -> bool {
        if let Some(refs) = self.blob_refs.get(run) {
            return refs.contains(digest);
        }
        self.blob_refs_added
            .get(run)
            .is_some_and(|added| added.contains(digest))
            || self
                .base_of(run)
                .is_some_and(|base| base.blob_referenced(run, digest))
    }
}

impl BooksWrite for Overlay<'_> {
    fn put_run(&mut self, run: Run) {
        self.runs.insert(run.id.clone(), run);
    }

    fn put_effect(&mut self, entry: EffectEntry) {
        self.effects.insert(entry.key.clone(), Box::new(entry));
    }

    fn put_blob(&mut self, digest: Digest, bytes: Vec<u8>) {
        self.blobs_deleted.remove(&digest);
        if let std::collections::btree_map::Entry::Vacant(slot) = self.blobs.entry(digest) {
            slot.insert(bytes);
            self.blob_order.push(digest);
        }
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

    fn delete_run(&mut self, run: &RunId) {
        self.pruned.insert(run.clone());
        self.runs.remove(run);
        self.effects.retain(|key, _| key.run() != run);
        self.checkpoints.retain(|(r, _), _| r != run);
        self.decisions.retain(|(r, _), _| r != run);
        self.audit.remove(run);
        self.waits.remove(run);
        self.budgets.remove(run);
        self.sagas.remove(run);
        self.blob_refs.remove(run);
        self.blob_refs_added.remove(run);
    }

    fn delete_blob(&mut self, digest: &Digest) {
        self.blobs.remove(digest);
        self.blobs_deleted.insert(*digest);
    }

    fn put_blob_holders(&mut self, digest: Digest, holders: Option<u64>) {
        self.blob_holders.insert(digest, holders);
    }

    fn put_blob_refs(&mut self, refs: BlobRefs) {
        self.blob_refs_added.remove(&refs.run);
        self.blob_refs.insert(refs.run.clone(), refs);
    }

    fn add_blob_ref(&mut self, run: &RunId, digest: Digest) -> bool {
        if let Some(refs) = self.blob_refs.get_mut(run) {
            return refs.insert(digest);
        } else if self.blob_referenced(run, &digest) {
            return false;
        } else if self.pruned.contains(run) {
            // The base's are gone: the run's list begins here, whole.
            let mut refs = BlobRefs::none(run.clone());
            refs.insert(digest);
            self.blob_refs.insert(run.clone(), refs);
        } else {
            self.blob_refs_added
                .entry(run.clone())
                .or_default()
                .insert(digest);
        }
        true
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::apply;
    use crate::books::test_support::*;

    #[test]
    fn overlay_reads_its_writes_and_leaves_the_base_alone() {
        let (b, g) = books_with_running_run("r");
        let before = b.mem.clone();
        let mut overlay = Overlay::new(&b.mem);
        let d = crate::books::decide(
            &overlay,
            &begin("r", "s", &g, crate::books::ToolClass::Queryable, b"a"),
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

    #[test]
    fn a_reference_added_is_written_as_the_change_not_the_whole_list() {
        let mut base = crate::books::MemBooks::default();
        let run = rid("r");
        let d = |n: u8| Digest([n; 32]);
        base.put_blob_refs(BlobRefs {
            run: run.clone(),
            digests: vec![d(1), d(3)],
        });
        let mut overlay = Overlay::new(&base);
        assert!(overlay.add_blob_ref(&run, d(2)), "a new reference");
        assert!(!overlay.add_blob_ref(&run, d(1)), "the base holds it");
        assert!(!overlay.add_blob_ref(&run, d(2)), "the overlay holds it");
        assert!(overlay.blob_referenced(&run, &d(3)) && !overlay.blob_referenced(&run, &d(4)));
        assert_eq!(
            overlay.blob_refs(&run).unwrap().digests,
            vec![d(1), d(2), d(3)]
        );
        let writes = overlay.into_writes();
        assert!(writes.blob_refs.is_empty(), "the run's list is not copied");
        assert_eq!(
            writes.blob_refs_added.get(&run),
            Some(&BTreeSet::from([d(2)]))
        );

        // Pruned, the run's list begins again, whole.
        let mut overlay = Overlay::new(&base);
        overlay.delete_run(&run);
        assert!(!overlay.blob_referenced(&run, &d(1)));
        assert!(overlay.add_blob_ref(&run, d(1)));
        let writes = overlay.into_writes();
        assert!(writes.pruned.contains(&run) && writes.blob_refs_added.is_empty());
        assert_eq!(writes.blob_refs[&run].digests, vec![d(1)]);
    }
}

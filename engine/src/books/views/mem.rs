//! `MemBooks`: the books in ordered in-memory maps. It is the reference model
//! the simulator compares the redb-backed store against, and the state the
//! unit tests run on.
//!
//! Invariants: only `BTreeMap`s (iteration is deterministic, so two
//! `MemBooks` fed the same ops compare equal); effect keys order by (run,
//! step, attempt), so a step's latest attempt is the last of its range.

use std::collections::BTreeMap;

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
use crate::books::records::run::{claim_order, claimable};
use crate::books::records::saga::SagaBook;
use crate::books::records::wait::{WaitBook, wake_ms};
use crate::books::vocabulary::state::{BooksRead, BooksWrite};

/// The books in memory (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemBooks {
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
    blob_holders: BTreeMap<Digest, u64>,
    blob_refs: BTreeMap<RunId, BlobRefs>,
}

impl MemBooks {
    /// Empty books.
    pub fn new() -> MemBooks {
        MemBooks::default()
    }

    /// How many blobs are stored.
    pub fn blob_count(&self) -> usize {
        self.blobs.len()
    }

    /// What does not hold in the blob reference counts, in digest and key
    /// order; empty if they hold. A run's reference names a stored, counted
    /// blob; a counted blob's holder count is the number of runs naming it,
    /// and at least one (a blob no run names is a leak: retention would never
    /// free it); a receipt an entry keeps by digest is a stored blob its run
    /// names. Blobs written before counting began (no holder count) are not
    /// held to it.
    pub fn blob_reference_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut named: BTreeMap<Digest, u64> = BTreeMap::new();
        for refs in self.blob_refs.values() {
            for digest in &refs.digests {
                *named.entry(*digest).or_default() += 1;
                if !self.blobs.contains_key(digest) {
                    problems.push(format!(
                        "run {} references blob {}, which is not stored",
                        refs.run,
                        digest.short()
                    ));
                }
            }
        }
        for (digest, holders) in &self.blob_holders {
            let found = named.get(digest).copied().unwrap_or(0);
            if *holders != found || found == 0 {
                problems.push(format!(
                    "blob {} counts {holders} holder(s), but {found} run(s) reference it",
                    digest.short()
                ));
            }
        }
        self.checkpoint_blob_problems(&mut problems);
        for entry in self.effects.values() {
            for receipt in entry.status.stored_receipts() {
                let named = self
                    .blob_refs
                    .get(entry.key.run())
                    .is_some_and(|refs| refs.contains(&receipt.digest));
                if !self.blobs.contains_key(&receipt.digest) || !named {
                    problems.push(format!(
                        "effect {} keeps its receipt as blob {}, which is {}",
                        entry.key,
                        receipt.digest.short(),
                        if named {
                            "not stored"
                        } else {
                            "not among its run's references"
                        }
                    ));
                }
            }
        }
        problems
    }

    /// The checkpoint blobs (each chunk of a chunked part) that are not
    /// stored, or are counted yet not among their run's references.
    fn checkpoint_blob_problems(&self, problems: &mut Vec<String>) {
        for meta in self.checkpoints.values() {
            let refs = self.blob_refs.get(&meta.run);
            for part in &meta.parts {
                for blob in part.blobs() {
                    let named = refs.is_some_and(|refs| refs.contains(&blob.digest));
                    let counted = self.blob_holders.contains_key(&blob.digest);
                    let why = if !self.blobs.contains_key(&blob.digest) {
                        "not stored"
                    } else if counted && !named {
                        "not among its run's references"
                    } else {
                        continue;
                    };
                    problems.push(format!(
                        "checkpoint {} of run {} stores part {} in blob {}, which is {why}",
                        meta.version,
                        meta.run,
                        part.name,
                        blob.digest.short()
                    ));
                }
            }
        }
    }

    /// Every run, by id.
    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        self.runs.values()
    }

    /// Every ledger entry, by key.
    pub fn effects(&self) -> impl Iterator<Item = &EffectEntry> {
        self.effects.values()
    }

    /// Copies every row `from` holds of `run` (its record, ledger entries,
    /// checkpoints, decisions, audit, waits, budget, saga and the blobs it
    /// references) into these books, replacing what they held of it: how a
    /// checker keeps what retention removes from the books it checks.
    pub fn copy_run(&mut self, from: &MemBooks, run: &RunId) {
        self.delete_run(run);
        let Some(record) = from.runs.get(run) else {
            return;
        };
        self.runs.insert(run.clone(), record.clone());
        let of_run = |key: &(RunId, u64)| key.0 == *run;
        for (key, entry) in from.effects.iter().filter(|(k, _)| k.run() == run) {
            self.effects.insert(key.clone(), entry.clone());
        }
        for (key, meta) in from.checkpoints.iter().filter(|(k, _)| of_run(k)) {
            self.checkpoints.insert(key.clone(), meta.clone());
        }
        for (key, record) in from.decisions.iter().filter(|(k, _)| of_run(k)) {
            self.decisions.insert(key.clone(), record.clone());
        }
        if let Some(audit) = from.audit.get(run) {
            self.audit.insert(run.clone(), audit.clone());
        }
        if let Some(book) = from.waits.get(run) {
            self.waits.insert(run.clone(), book.clone());
        }
        if let Some(book) = from.budgets.get(run) {
            self.budgets.insert(run.clone(), book.clone());
        }
        if let Some(book) = from.sagas.get(run) {
            self.sagas.insert(run.clone(), book.clone());
        }
        if let Some(refs) = from.blob_refs.get(run) {
            for digest in &refs.digests {
                if let Some(bytes) = from.blobs.get(digest) {
                    self.blobs.insert(*digest, bytes.clone());
                }
            }
            self.blob_refs.insert(run.clone(), refs.clone());
        }
    }

    /// The first difference between `self` and `other`, in words (`None` if
    /// they are equal): which table, which row, and both values.
    pub fn diff(&self, other: &MemBooks) -> Option<String> {
        fn first<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
            table: &str,
            a: &BTreeMap<K, V>,
            b: &BTreeMap<K, V>,
        ) -> Option<String> {
            let keys: std::collections::BTreeSet<&K> = a.keys().chain(b.keys()).collect();
            keys.into_iter().find_map(|k| {
                let (x, y) = (a.get(k), b.get(k));
                (x != y).then(|| format!("{table} {k:?}: {x:?} here, {y:?} there"))
            })
        }
        first("run", &self.runs, &other.runs)
            .or_else(|| first("effect", &self.effects, &other.effects))
            .or_else(|| first("blob", &self.blobs, &other.blobs))
            .or_else(|| first("checkpoint", &self.checkpoints, &other.checkpoints))
            .or_else(|| first("decision", &self.decisions, &other.decisions))
            .or_else(|| first("audit", &self.audit, &other.audit))
            .or_else(|| first("waits", &self.waits, &other.waits))
            .or_else(|| first("budgets", &self.budgets, &other.budgets))
            .or_else(|| first("sagas", &self.sagas, &other.sagas))
            .or_else(|| first("resources", &self.resources, &other.resources))
            .or_else(|| first("shared", &self.shared, &other.shared))
            .or_else(|| first("blob holders", &self.blob_holders, &other.blob_holders))
            .or_else(|| first("blob refs", &self.blob_refs, &other.blob_refs))
    }

    /// Replaces a blob's bytes without checking them, to test corruption
    /// detection.
    #[cfg(test)]
    pub(crate) fn corrupt_blob_for_test(&mut self, digest: &Digest, bytes: Vec<u8>) {
        assert!(self.blobs.contains_key(digest));
        self.blobs.insert(*digest, bytes);
    }
}

impl BooksRead for MemBooks {
    fn run(&self, id: &RunId) -> Option<Run> {
        self.runs.get(id).cloned()
    }

    fn visit_claimable(&self, now_ms: u64, visit: &mut dyn FnMut(&Run) -> bool) {
        // The model scans every run; the engine's hot books keep an index.
        let wake = |run: &Run| wake_ms(self.waits.get(&run.id));
        let mut claimable: Vec<&Run> = self
            .runs
            .values()
            .filter(|run| claimable(run, wake(run), now_ms))
            .collect();
        claimable.sort_by(|a, b| claim_order(a, wake(a)).cmp(&claim_order(b, wake(b))));
        for run in claimable {
            if !visit(run) {
                return;
            }
        }
    }

    fn effect(&self, key: &EffectKey) -> Option<EffectEntry> {
        self.effects.get(key).cloned()
    }

    fn latest_effect(&self, run: &RunId, step: &StepId, kind: EffectKind) -> Option<EffectEntry> {
        let first = EffectKey::of_kind(run.clone(), step.clone(), kind, 1).ok()?;
        let last = EffectKey::of_kind(run.clone(), step.clone(), kind, u32::MAX).ok()?;
        let found = self
            .effects
            .range(first..=last)
            .next_back()
            .map(|(_, e)| e.clone());
        debug_assert!(
            found
                .as_ref()
                .is_none_or(|e| e.key.run() == run && e.key.step() == step && e.key.kind() == kind)
        );
        found
    }

    fn checkpoint_latest(&self, run: &RunId) -> Option<CheckpointMeta> {
        let range = (run.clone(), 0)..=(run.clone(), u64::MAX);
        self.checkpoints
            .range(range)
            .next_back()
            .map(|(_, m)| m.clone())
    }

    fn checkpoint_at(&self, run: &RunId, version: u64) -> Option<CheckpointMeta> {
        self.checkpoints.get(&(run.clone(), version)).cloned()
    }

    fn blob_exists(&self, digest: &Digest) -> bool {
        self.blobs.contains_key(digest)
    }

    fn blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        self.blobs.get(digest).cloned()
    }

    fn decision_at(&self, run: &RunId, position: u64) -> Option<DecisionRecord> {
        self.decisions.get(&(run.clone(), position)).cloned()
    }

    fn decision_count(&self, run: &RunId) -> u64 {
        let range = (run.clone(), 0)..=(run.clone(), u64::MAX);
        self.decisions
            .range(range)
            .next_back()
            .map_or(0, |((_, p), _)| p + 1)
    }

    fn audit_len(&self, run: &RunId) -> u64 {
        self.audit.get(run).map_or(0, |a| a.len() as u64)
    }

    fn audit(&self, run: &RunId, from_seq: u64) -> Vec<AuditEntry> {
        let entries = self.audit.get(run).map_or(&[][..], |a| &a[..]);
        entries
            .iter()
            .filter(|e| e.seq >= from_seq)
            .cloned()
            .collect()
    }

    fn waits(&self, run: &RunId) -> Option<WaitBook> {
        self.waits.get(run).cloned()
    }

    fn budget(&self, run: &RunId) -> Option<BudgetBook> {
        self.budgets.get(run).cloned()
    }

    fn saga(&self, run: &RunId) -> Option<SagaBook> {
        self.sagas.get(run).cloned()
    }

    fn resource(&self, resource: &ResourceId) -> Option<ResourceBook> {
        self.resources.get(resource).cloned()
    }

    fn shared(&self, key: &SharedKeyId) -> Option<SharedEntry> {
        self.shared.get(key).cloned()
    }

    fn effects_of(&self, run: &RunId) -> Vec<EffectEntry> {
        self.effects
            .values()
            .filter(|e| e.key.run() == run)
            .cloned()
            .collect()
    }

    fn blob_holders(&self, digest: &Digest) -> Option<u64> {
        self.blob_holders.get(digest).copied()
    }

    fn blob_refs(&self, run: &RunId) -> Option<BlobRefs> {
        self.blob_refs.get(run).cloned()
    }

    fn blob_referenced(&self, run: &RunId, digest: &Digest) -> bool {
        self.blob_refs
            .get(run)
            .is_some_and(|refs| refs.contains(digest))
    }
}

impl BooksWrite for MemBooks {
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
        self.checkpoints
            .insert((meta.run.clone(), meta.version), meta);
    }

    fn put_decision(&mut self, record: DecisionRecord) {
        self.decisions
            .insert((record.run.clone(), record.position), record);
    }

    fn push_audit(&mut self, run: &RunId, entry: AuditEntry) {
        let entries = self.audit.entry(run.clone()).or_default();
        assert_eq!(
            entry.seq,
            entries.len() as u64 + 1,
            "audit of run {run} out of sequence"
        );
        entries.push(entry);
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
        self.runs.remove(run);
        self.effects.retain(|key, _| key.run() != run);
        self.checkpoints.retain(|(r, _), _| r != run);
        self.decisions.retain(|(r, _), _| r != run);
        self.audit.remove(run);
        self.waits.remove(run);
        self.budgets.remove(run);
        self.sagas.remove(run);
        self.blob_refs.remove(run);
    }

    fn delete_blob(&mut self, digest: &Digest) {
        self.blobs.remove(digest);
    }

    fn put_blob_holders(&mut self, digest: Digest, holders: Option<u64>) {
        match holders {
            Some(n) => self.blob_holders.insert(digest, n),
            None => self.blob_holders.remove(&digest),
        };
    }

    fn put_blob_refs(&mut self, refs: BlobRefs) {
        self.blob_refs.insert(refs.run.clone(), refs);
    }
}

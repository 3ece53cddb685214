//! The state traits: what [`decide`](crate::books::decide) reads and what
//! [`apply`](crate::books::apply) writes. [`MemBooks`](crate::books::MemBooks)
//! is the in-memory reference model; the redb-backed store implements the
//! same traits, so both run the same decide and apply code.
//!
//! Invariants: reads return owned values (a store may deserialize them);
//! every iteration is in a deterministic order; writes are plain puts, so
//! all rules live in decide and apply, none in a store. Both traits are
//! object safe: decide and apply work over `&dyn`.

use crate::books::base::digest::Digest;
use crate::books::base::ids::{EffectKey, EffectKind, ResourceId, RunId, SharedKeyId, StepId};
use crate::books::records::audit::AuditEntry;
use crate::books::records::budget::BudgetBook;
use crate::books::records::checkpoint::{CheckpointMeta, PartBase, PartRef};
use crate::books::records::coord::{ResourceBook, SharedEntry};
use crate::books::records::decision::DecisionRecord;
use crate::books::records::ledger::EffectEntry;
use crate::books::records::retention::BlobRefs;
use crate::books::records::run::Run;
use crate::books::records::saga::SagaBook;
use crate::books::records::wait::WaitBook;

/// The reads that deciding needs.
pub trait BooksRead {
    /// The run named `id`.
    fn run(&self, id: &RunId) -> Option<Run>;

    /// Calls `visit` with each run claimable at `now_ms`, in claim order
    /// ([`claim_order`](crate::books::claim_order): claimable since, then
    /// id), until it returns `false`. Whether and since when a run is
    /// claimable depends on its record and on its open wait's deadline
    /// ([`wake_ms`](crate::books::wake_ms)).
    fn visit_claimable(&self, now_ms: u64, visit: &mut dyn FnMut(&Run) -> bool);

    /// [`visit_claimable`](BooksRead::visit_claimable) over the runs whose
    /// agent version `serves` accepts: a claim for some agents. A view that
    /// indexes its claimable runs by agent version (the hot books) walks
    /// the served ones only, and never reads the others.
    fn visit_claimable_served(
        &self,
        now_ms: u64,
        serves: &dyn Fn(&str) -> bool,
        visit: &mut dyn FnMut(&Run) -> bool,
    ) {
        self.visit_claimable(now_ms, &mut |run: &Run| {
            !serves(&run.agent_version) || visit(run)
        });
    }

    /// The ledger entry with `key`.
    fn effect(&self, key: &EffectKey) -> Option<EffectEntry>;

    /// The entry of the highest attempt of the `kind` side of `step` in
    /// `run` (its act, or its compensation).
    fn latest_effect(&self, run: &RunId, step: &StepId, kind: EffectKind) -> Option<EffectEntry>;

    /// The newest checkpoint's metadata of `run`.
    fn checkpoint_latest(&self, run: &RunId) -> Option<CheckpointMeta>;

    /// The metadata of checkpoint `version` of `run`.
    fn checkpoint_at(&self, run: &RunId, version: u64) -> Option<CheckpointMeta>;

    /// The part `base` names (a part of an earlier checkpoint of `run`), if
    /// that checkpoint is kept and has it.
    fn checkpoint_part(&self, run: &RunId, base: &PartBase) -> Option<PartRef> {
        let meta = self.checkpoint_at(run, base.version)?;
        assert_eq!(
            meta.version, base.version,
            "checkpoint {} of run {run}",
            base.version
        );
        meta.parts.into_iter().find(|p| p.name == base.name)
    }

    /// True if the blob table holds `digest`.
    fn blob_exists(&self, digest: &Digest) -> bool;

    /// The bytes stored under `digest`.
    fn blob(&self, digest: &Digest) -> Option<Vec<u8>>;

    /// The model call of `run` at `position`.
    fn decision_at(&self, run: &RunId, position: u64) -> Option<DecisionRecord>;

    /// How many model calls `run` has journaled (the next position).
    fn decision_count(&self, run: &RunId) -> u64;

    /// How many audit entries `run` has (the last `seq`).
    fn audit_len(&self, run: &RunId) -> u64;

    /// The audit entries of `run` with `seq` in `from_seq..`, in order.
    fn audit(&self, run: &RunId, from_seq: u64) -> Vec<AuditEntry>;

    /// The waits and untaken signals of `run`; `None` if it never waited
    /// nor received a signal.
    fn waits(&self, run: &RunId) -> Option<WaitBook>;

    /// The budget book of `run`; `None` if it never had a budget nor
    /// reserved any.
    fn budget(&self, run: &RunId) -> Option<BudgetBook>;

    /// The saga book of `run`; `None` if none of its acts registered a
    /// compensation.
    fn saga(&self, run: &RunId) -> Option<SagaBook>;

    /// The lease book of a named resource; `None` if it was never held.
    fn resource(&self, resource: &ResourceId) -> Option<ResourceBook>;

    /// A shared key; `None` if it was never set.
    fn shared(&self, key: &SharedKeyId) -> Option<SharedEntry>;

    /// Every ledger entry of `run`, in key order.
    fn effects_of(&self, run: &RunId) -> Vec<EffectEntry>;

    /// How many runs reference the blob `digest`; `None` for a blob not
    /// counted (written before counting began, or deleted).
    fn blob_holders(&self, digest: &Digest) -> Option<u64>;

    /// The blobs `run` references; `None` if it references none counted.
    fn blob_refs(&self, run: &RunId) -> Option<BlobRefs>;

    /// Whether `run` references the blob `digest`: [`BooksRead::blob_refs`]
    /// asked about one digest. A view that holds a run's references in
    /// memory answers without copying them: a run references a blob for
    /// every part it ever saved, so the list grows with its history, and
    /// each save asks (docs/PERFORMANCE.md, "A save's cost and the run's
    /// history").
    fn blob_referenced(&self, run: &RunId, digest: &Digest) -> bool {
        self.blob_refs(run)
            .is_some_and(|refs| refs.contains(digest))
    }
}

/// The writes that applying needs: puts keyed by the values' own ids.
pub trait BooksWrite: BooksRead {
    /// Stores `run`, replacing the record with the same id.
    fn put_run(&mut self, run: Run);

    /// Stores `entry`, replacing the entry with the same key.
    fn put_effect(&mut self, entry: EffectEntry);

    /// Stores `bytes` under `digest` (a second put of the same digest is a
    /// no-op).
    fn put_blob(&mut self, digest: Digest, bytes: Vec<u8>);

    /// Stores a checkpoint's metadata under (run, version).
    fn put_checkpoint(&mut self, meta: CheckpointMeta);

    /// Stores a model call under (run, position).
    fn put_decision(&mut self, record: DecisionRecord);

    /// Appends `entry` to `run`'s audit; `entry.seq` is `audit_len + 1`.
    fn push_audit(&mut self, run: &RunId, entry: AuditEntry);

    /// Stores `book`, replacing the wait book of its run.
    fn put_waits(&mut self, book: WaitBook);

    /// Stores `book`, replacing the budget book of its run.
    fn put_budget(&mut self, book: BudgetBook);

    /// Stores `book`, replacing the saga book of its run.
    fn put_saga(&mut self, book: SagaBook);

    /// Stores `book`, replacing the lease book of its resource.
    fn put_resource(&mut self, book: ResourceBook);

    /// Stores `entry`, replacing its key.
    fn put_shared(&mut self, entry: SharedEntry);

    /// Deletes `run` and every row of it (its record, ledger entries,
    /// checkpoints, decisions, audit, waits, budget, saga and blob
    /// references); blobs and shared keys stay.
    fn delete_run(&mut self, run: &RunId);

    /// Deletes the blob `digest`.
    fn delete_blob(&mut self, digest: &Digest);

    /// Sets (or, `None`, deletes) the holder count of the blob `digest`.
    fn put_blob_holders(&mut self, digest: Digest, holders: Option<u64>);

    /// Stores `refs`, replacing the blob references of its run.
    fn put_blob_refs(&mut self, refs: BlobRefs);

    /// Adds `digest` to the blobs `run` references; `false` (and nothing
    /// changed) if it was there. A view that stages writes adds it without
    /// copying the run's list (see [`BooksRead::blob_referenced`]).
    fn add_blob_ref(&mut self, run: &RunId, digest: Digest) -> bool {
        let mut refs = self
            .blob_refs(run)
            .unwrap_or_else(|| BlobRefs::none(run.clone()));
        let added = refs.insert(digest);
        if added {
            self.put_blob_refs(refs);
        }
        added
    }
}

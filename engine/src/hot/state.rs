//! [`HotState`]: the hot books' data. A run in memory has its record, its
//! open ledger entries (intended or unknown), its latest checkpoint's
//! metadata and its counters in memory; a claim index orders the claimable
//! runs. What changed since the last checkpoint (settled ledger entries,
//! decisions, audit entries, blob bytes, older checkpoint metadata) stays
//! too, each tagged with the LSN that wrote it, so a checkpoint that wrote
//! up to LSN `L` lets everything settled and tagged `<= L` go. What left
//! memory is read from the state store; a run keeps a fingerprint of each
//! step whose entries left, so a step never begun is answered "absent"
//! without a read.
//!
//! A run parked in a wait (waiting for a person, a signal, a reply, a child
//! or a timer, with no lease) leaves memory too once a checkpoint wrote
//! it: it costs its stored bytes and, if its wait has a deadline, one entry
//! of the claim index. Whatever changes it (an approval, a signal, a
//! reply, a claim at its deadline, an operator) brings it back first, as it
//! brings back any run that left. An open parks every live run the state
//! store holds without a lease the same way (pending, running or waiting):
//! it comes into memory when a command first touches it.
//!
//! **Invariant:** the claim index holds exactly `(claimable_from_ms, id)`,
//! under the run's agent version, of every run in memory that has a
//! claimable instant (from its record and its open wait's deadline), and
//! each run remembers its slot, and of every parked run out of memory that
//! has one (a waiting run's deadline, or the instant a run left unleased
//! became claimable), remembered in `parked`; a run's `last_lsn`
//! is the LSN of the last record that changed anything of it (`ZERO` if
//! loaded from the state store unchanged); every ledger entry of a run in
//! memory is either in `effects` or in the state store with its step's
//! fingerprint in `cold_steps`; every decision at a position below
//! `decision_count` is in `decisions` or in the state store.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use crate::books::{
    AuditEntry, BlobRefs, BooksWrite, BudgetBook, CheckpointMeta, DecisionRecord, Digest,
    EffectEntry, EffectKey, EffectKind, MemBooks, ResourceBook, ResourceId, Run, RunId, RunState,
    SagaBook, SharedEntry, SharedKeyId, StepId, WaitBook, Writes, claimable_from_ms, may_park,
    wake_ms,
};
use crate::error::Result;
use crate::ids::Lsn;
use crate::state::LiveClaim;

use super::claims::{ClaimIndex, ClaimSlot};
use super::cold::ColdReader;

/// One run held in memory.
#[derive(Clone, Debug)]
pub(crate) struct HotRun {
    pub(crate) run: Run,
    /// Ledger entries in memory: every open one, and settled ones no
    /// checkpoint has written yet, each with the LSN that last wrote it.
    pub(crate) effects: BTreeMap<EffectKey, (EffectEntry, Lsn)>,
    /// Sorted fingerprints ([`step_fingerprint`]) of the steps with ledger
    /// entries only in the state store.
    pub(crate) cold_steps: Vec<u32>,
    pub(crate) checkpoint_latest: Option<CheckpointMeta>,
    /// Checkpoint metadata not yet in the state store, by version.
    pub(crate) checkpoints: BTreeMap<u64, (CheckpointMeta, Lsn)>,
    /// Journaled decisions not yet in the state store, by position.
    pub(crate) decisions: BTreeMap<u64, (DecisionRecord, Lsn)>,
    /// How many decisions the run has journaled (the next position).
    pub(crate) decision_count: u64,
    pub(crate) audit_len: u64,
    /// Audit entries not yet in the state store, in order.
    pub(crate) audit: Vec<(AuditEntry, Lsn)>,
    pub(crate) last_lsn: Lsn,
    /// The run's waits and untaken signals (kept whole while the run is in
    /// memory: a run waits at few steps), boxed so that a run that never
    /// waits pays one word for it.
    pub(crate) waits: Option<Box<WaitBook>>,
    /// The run's budget book, boxed like its wait book.
    pub(crate) budget: Option<Box<BudgetBook>>,
    /// The run's saga book, boxed like its wait book.
    pub(crate) saga: Option<Box<SagaBook>>,
    /// The counted blobs the run references: a set, so that a save adds
    /// one without moving the others (a run references a blob for every
    /// part it ever saved); empty for a run that references none.
    pub(crate) blob_refs: BTreeSet<Digest>,
    /// Where the claim index holds the run (its agent version's number
    /// and the instant), if it does.
    claim_from: Option<ClaimSlot>,
    /// True while the run is on the list a checkpoint looks at to evict.
    listed: bool,
}

impl HotRun {
    fn new(run: Run) -> HotRun {
        HotRun {
            run,
            effects: BTreeMap::new(),
            cold_steps: Vec::new(),
            checkpoint_latest: None,
            checkpoints: BTreeMap::new(),
            decisions: BTreeMap::new(),
            decision_count: 0,
            audit_len: 0,
            audit: Vec::new(),
            last_lsn: Lsn::ZERO,
            waits: None,
            budget: None,
            saga: None,
            blob_refs: BTreeSet::new(),
            claim_from: None,
            listed: false,
        }
    }

    /// Since when the run is claimable, from its record and its open wait.
    fn claimable_from_ms(&self) -> Option<u64> {
        claimable_from_ms(&self.run, wake_ms(self.waits.as_deref()))
    }

    /// True if entries of `kind` of `step` may be in the state store only.
    pub(crate) fn may_be_cold(&self, step: &StepId, kind: EffectKind) -> bool {
        self.cold_steps
            .binary_search(&step_fingerprint(step, kind))
            .is_ok()
    }

    /// Lets go of what the state store holds up to `lsn` and no decision
    /// needs in memory; true if something newer is still held. (`forget`:
    /// the planted bug `ForgetEvictedSteps`.)
    fn evict_through(&mut self, lsn: Lsn, forget: bool) -> bool {
        let mut gone = Vec::new();
        self.effects.retain(|key, held| {
            let (entry, at) = &*held;
            let keep = *at > lsn || entry.status.is_open();
            if !keep && !forget {
                gone.push(step_fingerprint(key.step(), key.kind()));
            }
            keep
        });
        if !gone.is_empty() {
            self.cold_steps.extend(gone);
            self.cold_steps.sort_unstable();
            self.cold_steps.dedup();
        }
        self.decisions.retain(|_, (_, at)| *at > lsn);
        self.checkpoints.retain(|_, (_, at)| *at > lsn);
        self.audit.retain(|(_, at)| *at > lsn);
        self.effects
            .values()
            .any(|held| !held.0.status.is_open() || held.1 > lsn)
            || !self.decisions.is_empty()
            || !self.checkpoints.is_empty()
            || !self.audit.is_empty()
    }
}

/// The fingerprint of one side of a step: a CRC-32 of its name and kind.
/// Two steps may share one; that costs a state-store read, never a wrong
/// answer.
pub(crate) fn step_fingerprint(step: &StepId, kind: EffectKind) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(step.as_str().as_bytes());
    hasher.update(&[match kind {
        EffectKind::Act => 0,
        EffectKind::Undo => 1,
    }]);
    hasher.finalize()
}

/// Puts the claim index `claims` in step with `hot`: its entry moves to
/// the instant the run's record and open wait now give, or goes.
fn reindex_run(claims: &mut ClaimIndex, hot: &mut HotRun) {
    let now = hot
        .claimable_from_ms()
        .map(|from_ms| (claims.agent(&hot.run.agent_version), from_ms));
    if now == hot.claim_from {
        return;
    }
    let id = &hot.run.id;
    if let Some(slot) = hot.claim_from {
        let removed = claims.remove(slot, id);
        assert!(removed, "the claim index held run {id}");
    }
    if let Some(slot) = now {
        claims.insert(slot, id.clone());
    }
    hot.claim_from = now;
}

/// Notes that the record at `lsn` changed `hot`, and puts it on `listed`
/// (the runs the next checkpoint looks at) if it is not there yet.
fn list_run(listed: &mut Vec<RunId>, hot: &mut HotRun, lsn: Lsn) {
    hot.last_lsn = lsn;
    if !hot.listed {
        hot.listed = true;
        listed.push(hot.run.id.clone());
    }
}

/// Appends `entries`, written by the record at `lsn`, to the audit of
/// `hot`, each the next in sequence.
fn append_audit(hot: &mut HotRun, entries: Vec<AuditEntry>, lsn: Lsn) {
    for entry in entries {
        assert_eq!(
            entry.seq,
            hot.audit_len + 1,
            "audit of run {} out of sequence",
            hot.run.id
        );
        hot.audit_len = entry.seq;
        hot.audit.push((entry, lsn));
    }
    assert!(hot.last_lsn == lsn && hot.listed);
}

/// What an eviction forgets that it must remember: the planted bugs
/// `ForgetEvictedSteps` and `ForgetParkedDeadlines`; both off in a build
/// without them.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Forget {
    /// The fingerprints of the steps whose entries leave memory.
    pub(crate) steps: bool,
    /// The claim index entry of a parked run that leaves memory.
    pub(crate) deadlines: bool,
}

/// The hot books' data (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct HotState {
    pub(crate) runs: BTreeMap<RunId, HotRun>,
    pub(crate) claims: ClaimIndex,
    /// Blobs not yet in the state store.
    pub(crate) blobs: BTreeMap<Digest, (Vec<u8>, Lsn)>,
    /// Resource lease books changed since the state store was written,
    /// each with the LSN that last changed it (they belong to no run).
    pub(crate) resources: BTreeMap<ResourceId, (ResourceBook, Lsn)>,
    /// Shared keys changed since the state store was written, likewise.
    pub(crate) shared: BTreeMap<SharedKeyId, (SharedEntry, Lsn)>,
    /// Runs pruned since the state store was written, with the LSN of the
    /// prune: the state store still holds their rows until a checkpoint
    /// writes it, and reads must not find them there.
    pub(crate) pruned: BTreeMap<RunId, Lsn>,
    /// Blobs deleted since the state store was written, likewise.
    pub(crate) blobs_deleted: BTreeMap<Digest, Lsn>,
    /// Blob holder counts changed since the state store was written
    /// (`None`: the count was deleted with its blob).
    pub(crate) blob_holders: BTreeMap<Digest, (Option<u64>, Lsn)>,
    /// The runs holding something a checkpoint may let go of (each once).
    listed: Vec<RunId>,
    /// Parked runs out of memory with a claimable instant: where the claim
    /// index holds each.
    pub(crate) parked: BTreeMap<RunId, ClaimSlot>,
}

impl HotState {
    /// The hot books of a state store: every run it lists as live that
    /// holds a lease (the open releases those leases, which changes the
    /// runs). Every other live run stays out of memory, parked, until a
    /// command touches it: only its claim index entry, if it has a
    /// claimable instant, is kept. (A database of many live runs, say a
    /// LangGraph thread each, opens without reading each run's books.)
    /// (`unindexed`: the planted `ParkAtOpenUnindexed`, which parks a run
    /// no wait holds without its claim index entry; `in_turn`: the planted
    /// `ClaimAgentsInTurn`, see [`ClaimIndex::new`].)
    ///
    /// A live run is filed from its claim row (`LiveClaim`), not its run
    /// row, unless it holds a lease or has no claim row (a store written
    /// before schema 15); with `check_claims` (`check_live_claims`) the run
    /// row is read too and must agree, else the open fails
    /// (`Inconsistent`).
    pub(crate) fn load(
        cold: &ColdReader<'_>,
        check_claims: bool,
        unindexed: bool,
        in_turn: bool,
    ) -> HotState {
        let mut hot = HotState {
            claims: ClaimIndex::new(in_turn),
            ..HotState::default()
        };
        for (id, claim) in cold.live_claims() {
            // An unleased run is filed by its claim row; a leased one, or
            // one without a claim row, is read from its run row.
            let claim = match claim.filter(|c| !c.leased) {
                Some(claim) => {
                    if check_claims && !cold.claim_agrees(&id, &claim) {
                        continue;
                    }
                    claim
                }
                None => {
                    let Some(run) = cold.run(&id) else {
                        continue;
                    };
                    if run.lease.is_some() {
                        hot.bring_in(run, cold);
                        continue;
                    }
                    LiveClaim::of(&run)
                }
            };
            // Only a waiting run's wait can move its claimable instant.
            let waits = claim
                .parks
                .then(|| {
                    cold.with(|books| {
                        use crate::books::BooksRead;
                        books.waits(&id)
                    })
                })
                .flatten();
            let from_ms = match claim.parks {
                true => wake_ms(waits.as_ref()),
                false => claim.from_ms,
            };
            hot.park(
                id,
                &claim.agent_version,
                from_ms.filter(|_| !unindexed || claim.parks),
            );
        }
        hot
    }

    /// Keeps the parked run `id` of the agent version `agent`, out of
    /// memory, in the claim index under `from_ms`, if it has a claimable
    /// instant.
    fn park(&mut self, id: RunId, agent: &str, from_ms: Option<u64>) {
        if let Some(from_ms) = from_ms {
            let slot = (self.claims.agent(agent), from_ms);
            let added = self.claims.insert(slot, id.clone());
            assert!(added, "run {id} is parked once");
            self.parked.insert(id, slot);
        }
    }

    /// Brings `run` into memory from the state store, if it is not in
    /// memory yet: its open ledger entries, the fingerprints of its other
    /// steps, its latest checkpoint and its counters. A run the state store
    /// does not hold stays absent.
    pub(crate) fn fault_in(&mut self, id: &RunId, cold: &ColdReader<'_>) {
        // A run the state store is known not to hold has nothing to bring
        // in, whether memory holds it or not (a run just created): asked
        // first, it spares a search of every run in memory.
        if cold.known_absent(id) {
            return;
        }
        // A pruned run's rows in the state store are gone from the books: a
        // new run of its name starts afresh, not from them.
        if self.runs.contains_key(id) || self.pruned.contains_key(id) {
            return;
        }
        let Some(run) = cold.run(id) else {
            return;
        };
        if let Some(slot) = self.parked.remove(id) {
            let removed = self.claims.remove(slot, id);
            assert!(removed, "the claim index held parked run {id}");
        }
        self.bring_in(run, cold);
    }

    /// Brings `run`, just read from the state store and not in memory, in
    /// whole (see `fault_in`).
    fn bring_in(&mut self, run: Run, cold: &ColdReader<'_>) {
        let mut hot = HotRun::new(run);
        let id = &hot.run.id;
        let (effects, decision_count, latest, audit_len, books_of_run) = cold.with(|books| {
            use crate::books::BooksRead;
            (
                books.effects_of(id),
                books.decision_count(id),
                books.checkpoint_latest(id),
                books.audit_len(id),
                (
                    books.waits(id),
                    books.budget(id),
                    books.saga(id),
                    books.blob_refs(id),
                ),
            )
        });
        let (waits, budget, saga, blob_refs) = books_of_run;
        hot.waits = waits.map(Box::new);
        hot.budget = budget.map(Box::new);
        hot.saga = saga.map(Box::new);
        hot.blob_refs = blob_refs
            .map(|refs| refs.digests.into_iter().collect())
            .unwrap_or_default();
        for entry in effects {
            if entry.status.is_open() {
                hot.effects.insert(entry.key.clone(), (entry, Lsn::ZERO));
            } else {
                hot.cold_steps
                    .push(step_fingerprint(entry.key.step(), entry.key.kind()));
            }
        }
        hot.cold_steps.sort_unstable();
        hot.cold_steps.dedup();
        hot.decision_count = decision_count;
        hot.checkpoint_latest = latest;
        hot.audit_len = audit_len;
        self.insert_run(hot);
    }

    fn insert_run(&mut self, hot: HotRun) {
        let id = hot.run.id.clone();
        let previous = self.runs.insert(id.clone(), hot);
        assert!(previous.is_none(), "a run is brought into memory once");
        self.reindex(&id);
    }

    /// Puts the claim index in step with the run `id` in memory: its entry
    /// moves to the instant its record and open wait now give, or goes.
    fn reindex(&mut self, id: &RunId) {
        let hot = self.runs.get_mut(id).expect("a run is reindexed in memory");
        reindex_run(&mut self.claims, hot);
    }

    /// Lets a pruned run go from memory and from the claim index (a run
    /// that is over is in neither, but one pruned right as it ended may
    /// still be held).
    fn forget_run(&mut self, id: &RunId) {
        if let Some(hot) = self.runs.remove(id)
            && let Some(slot) = hot.claim_from
        {
            let removed = self.claims.remove(slot, id);
            assert!(removed, "the claim index held run {id}");
        }
        if let Some(slot) = self.parked.remove(id) {
            self.claims.remove(slot, id);
        }
        assert!(!self.runs.contains_key(id));
    }

    /// Replaces the record of a run in memory (or adds a new run), keeping
    /// the claim index in step: one search of the runs in memory, which a
    /// replay does for every record. (The key is cloned even for a run
    /// held: under callgrind a search of a few thousand runs by name costs
    /// several times a clone.)
    pub(crate) fn set_run(&mut self, run: Run, lsn: Lsn) -> &mut HotRun {
        let hot = match self.runs.entry(run.id.clone()) {
            Entry::Occupied(held) => {
                let hot = held.into_mut();
                hot.run = run;
                hot
            }
            Entry::Vacant(slot) => slot.insert(HotRun::new(run)),
        };
        reindex_run(&mut self.claims, hot);
        list_run(&mut self.listed, hot, lsn);
        assert_eq!(hot.last_lsn, lsn);
        hot
    }

    /// The run `id` in memory, which the caller must have brought in,
    /// listed for the next checkpoint to look at.
    pub(crate) fn run_mut(&mut self, id: &RunId, lsn: Lsn) -> &mut HotRun {
        let hot = self
            .runs
            .get_mut(id)
            .unwrap_or_else(|| panic!("run {id} is brought into memory before it changes"));
        list_run(&mut self.listed, hot, lsn);
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
            waits,
            budgets,
            sagas,
            resources,
            shared,
            pruned,
            blobs_deleted,
            blob_holders,
            blob_refs,
            blob_refs_added,
        } = writes;
        // Most tables of a record's writes are empty, and a replay merges
        // one record's writes at a time: each table is asked first, since
        // taking apart even an empty map costs calls (docs/PERFORMANCE.md,
        // "Open time after a crash").
        // Deletions first: a run pruned and created again in one record
        // starts afresh.
        if !pruned.is_empty() {
            for run in pruned {
                self.forget_run(&run);
                self.pruned.insert(run, lsn);
            }
        }
        if !blobs_deleted.is_empty() {
            for digest in blobs_deleted {
                self.blobs.remove(&digest);
                self.blobs_deleted.insert(digest, lsn);
            }
        }
        if !blob_holders.is_empty() {
            for (digest, holders) in blob_holders {
                self.blob_holders.insert(digest, (holders, lsn));
            }
        }
        if !resources.is_empty() {
            for (resource, book) in resources {
                self.resources.insert(resource, (book, lsn));
            }
        }
        if !shared.is_empty() {
            for (key, entry) in shared {
                self.shared.insert(key, (entry, lsn));
            }
        }
        // A run's audit entries go in with its record (they depend on
        // nothing else merged here): one search of the runs in memory.
        let mut audit = audit;
        for run in runs.into_values() {
            let entries = audit.remove(&run.id);
            let hot = self.set_run(run, lsn);
            if let Some(entries) = entries {
                append_audit(hot, entries, lsn);
            }
        }
        if !waits.is_empty() {
            for (run, book) in waits {
                self.run_mut(&run, lsn).waits = Some(Box::new(book));
                self.reindex(&run);
            }
        }
        if !budgets.is_empty() {
            for (run, book) in budgets {
                self.run_mut(&run, lsn).budget = Some(Box::new(book));
            }
        }
        if !sagas.is_empty() {
            for (run, book) in sagas {
                self.run_mut(&run, lsn).saga = Some(Box::new(book));
            }
        }
        if !blob_refs.is_empty() {
            for (run, refs) in blob_refs {
                self.run_mut(&run, lsn).blob_refs = refs.digests.into_iter().collect();
            }
        }
        if !blob_refs_added.is_empty() {
            // (A run in memory holds its references whole: these join them.)
            for (run, added) in blob_refs_added {
                self.run_mut(&run, lsn).blob_refs.extend(added);
            }
        }
        if !effects.is_empty() {
            for (key, entry) in effects {
                self.run_mut(key.run(), lsn)
                    .effects
                    .insert(key, (*entry, lsn));
            }
        }
        if !blobs.is_empty() {
            for (digest, bytes) in blobs {
                self.blobs_deleted.remove(&digest);
                self.blobs.entry(digest).or_insert((bytes, lsn));
            }
        }
        if !checkpoints.is_empty() {
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
        }
        if !decisions.is_empty() {
            for ((run, position), record) in decisions {
                let hot = self.run_mut(&run, lsn);
                assert_eq!(
                    position, hot.decision_count,
                    "decisions of run {run} are journaled in order"
                );
                hot.decision_count = position + 1;
                hot.decisions.insert(position, (record, lsn));
            }
        }
        if !audit.is_empty() {
            for (run, entries) in audit {
                append_audit(self.run_mut(&run, lsn), entries, lsn);
            }
        }
    }

    /// A checkpoint wrote every record up to `lsn` to the state store: what
    /// those records changed may leave memory if no decision needs it, and
    /// so may terminal and parked runs nothing changed since. Only the runs changed
    /// since the last eviction are looked at. Returns how many runs left.
    /// (`forget`: the planted bugs that forget what must be remembered.)
    pub(crate) fn evict_through(&mut self, lsn: Lsn, forget: Forget) -> usize {
        self.blobs.retain(|_, (_, at)| *at > lsn);
        self.resources.retain(|_, (_, at)| *at > lsn);
        self.shared.retain(|_, (_, at)| *at > lsn);
        self.pruned.retain(|_, at| *at > lsn);
        self.blobs_deleted.retain(|_, at| *at > lsn);
        self.blob_holders.retain(|_, (_, at)| *at > lsn);
        let mut gone = 0;
        let listed = std::mem::take(&mut self.listed);
        for id in listed {
            // A listed run may have been pruned since.
            let Some(hot) = self.runs.get_mut(&id) else {
                continue;
            };
            let still_held = hot.evict_through(lsn, forget.steps);
            if hot.run.state.is_terminal() && hot.last_lsn <= lsn {
                assert!(
                    !still_held,
                    "a terminal run written whole holds nothing newer"
                );
                let hot = self.runs.remove(&id).expect("looked up above");
                assert!(
                    hot.claimable_from_ms().is_none() && hot.claim_from.is_none(),
                    "a terminal run is never claimable"
                );
                gone += 1;
            } else if may_park(&hot.run) && hot.last_lsn <= lsn && !still_held {
                // Its claim index entry, if any, stays where it is.
                let hot = self.runs.remove(&id).expect("looked up above");
                assert_eq!(
                    hot.claim_from.map(|(_, from_ms)| from_ms),
                    hot.claimable_from_ms()
                );
                if let Some(slot) = hot.claim_from {
                    if forget.deadlines {
                        self.claims.remove(slot, &id);
                    } else {
                        self.parked.insert(id, slot);
                    }
                }
                gone += 1;
            } else if still_held {
                self.listed.push(id);
            } else {
                hot.listed = false;
            }
        }
        gone
    }

    /// Every table of the books: the state store's, overlaid with memory.
    pub(crate) fn snapshot(&self, cold: &ColdReader<'_>) -> Result<MemBooks> {
        let mut books = cold.read_all()?;
        for run in self.pruned.keys() {
            books.delete_run(run);
        }
        for digest in self.blobs_deleted.keys() {
            books.delete_blob(digest);
        }
        for (digest, (holders, _)) in &self.blob_holders {
            books.put_blob_holders(*digest, *holders);
        }
        for hot in self.runs.values() {
            let id = &hot.run.id;
            books.put_run(hot.run.clone());
            if let Some(book) = hot.waits.as_deref() {
                books.put_waits(book.clone());
            }
            if let Some(book) = hot.budget.as_deref() {
                books.put_budget(book.clone());
            }
            if let Some(book) = hot.saga.as_deref() {
                books.put_saga(book.clone());
            }
            if !hot.blob_refs.is_empty() {
                books.put_blob_refs(BlobRefs {
                    run: id.clone(),
                    digests: hot.blob_refs.iter().copied().collect(),
                });
            }
            for held in hot.effects.values() {
                books.put_effect(held.0.clone());
            }
            for (meta, _) in hot.checkpoints.values() {
                books.put_checkpoint(meta.clone());
            }
            for (record, _) in hot.decisions.values() {
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
        for (book, _) in self.resources.values() {
            books.put_resource(book.clone());
        }
        for (entry, _) in self.shared.values() {
            books.put_shared(entry.clone());
        }
        Ok(books)
    }

    /// Up to `limit` runs with ids after `after`, in id order, in `state`
    /// if given: the state store's runs read in id order, each replaced by
    /// its record in memory if it has one, merged with the runs only memory
    /// holds. Runs in other states are skipped, which costs a read each.
    pub(crate) fn runs_page(
        &self,
        cold: &ColdReader<'_>,
        state: Option<RunState>,
        after: Option<&RunId>,
        limit: usize,
    ) -> Vec<Run> {
        const CHUNK: usize = 256;
        let wanted = |run: &Run| state.is_none_or(|s| run.state == s);
        // Every run is wanted without a state to match: the store is read
        // a page at a time, not 256 runs for a page of two (a LangGraph
        // thread's runs are such a page, read at every resume).
        let chunk = if state.is_none() {
            limit.clamp(1, CHUNK)
        } else {
            CHUNK
        };
        let mut page = Vec::new();
        let mut cursor = after.cloned();
        while page.len() < limit {
            let stored = cold.with(|books| books.runs_after(cursor.as_ref(), chunk));
            // The stored chunk covers ids up to its last; past it, only the
            // runs memory holds (if the chunk is the store's last).
            let end = (stored.len() == chunk).then(|| stored.last().map(|r| r.id.clone()));
            let end = end.flatten();
            let from = cursor.as_ref();
            let in_memory = self
                .runs
                .range::<RunId, _>((
                    from.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded),
                    end.as_ref()
                        .map_or(std::ops::Bound::Unbounded, std::ops::Bound::Included),
                ))
                .map(|(_, hot)| hot.run.clone());
            let mut merged: BTreeMap<RunId, Run> = stored
                .into_iter()
                .filter(|r| !self.pruned.contains_key(&r.id))
                .map(|r| (r.id.clone(), r))
                .collect();
            merged.extend(in_memory.map(|r| (r.id.clone(), r)));
            let exhausted = end.is_none();
            for run in merged.into_values() {
                if page.len() == limit {
                    return page;
                }
                if wanted(&run) {
                    page.push(run);
                }
            }
            if exhausted {
                break;
            }
            // Every id up to the chunk's last was looked at, the pruned
            // ones too: a chunk of pruned runs alone moves the cursor on.
            cursor = end;
        }
        page
    }

    /// Every ledger entry of `run`: the state store's, each replaced by its
    /// version in memory if it has one, and those only memory holds; in
    /// key order (`BooksRead::effects_of`'s order).
    pub(crate) fn effects_of(&self, cold: &ColdReader<'_>, run: &RunId) -> Vec<EffectEntry> {
        let mut all: BTreeMap<EffectKey, EffectEntry> =
            if !self.pruned.contains_key(run) && cold.holds_run(run) {
                cold.with(|books| books.effects_of(run))
                    .into_iter()
                    .map(|e| (e.key.clone(), e))
                    .collect()
            } else {
                BTreeMap::new()
            };
        if let Some(hot) = self.runs.get(run) {
            all.extend(
                hot.effects
                    .values()
                    .map(|(e, _)| (e.key.clone(), e.clone())),
            );
        }
        all.into_values().collect()
    }

    /// How many runs are held in memory.
    pub(crate) fn run_count(&self) -> usize {
        self.runs.len()
    }
}

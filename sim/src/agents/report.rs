//! What one agent run did and what it checked: the counts behind the
//! runner's summary line, and how many times each invariant was checked.
//!
//! **Invariant:** every count is of something that happened in this run;
//! summing reports of many seeds gives the campaign's totals.

use std::collections::BTreeMap;

/// Counts of one agent run (or, summed, of a campaign).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentReport {
    /// Runs created.
    pub runs: u64,
    /// Runs that completed.
    pub completed: u64,
    /// Runs that failed (a refused hedge, an unknown effect).
    pub failed: u64,
    /// Process crashes (engine dropped, power cut), recovery cuts included.
    pub crashes: u64,
    /// Recoveries checked against the reference model.
    pub recoveries: u64,
    /// Commands the engine acknowledged.
    pub commands: u64,
    /// Commands from a stale holder that the engine fenced.
    pub zombies_fenced: u64,
    /// Workers that lost their lease to expiry.
    pub leases_lost: u64,
    /// Tool replies dropped after the act.
    pub acks_dropped: u64,
    /// Same-key resends the engine handed out.
    pub resends: u64,
    /// Of those, resends of an intent within one resend margin of its
    /// tool's horizon (the dedup window less the margin): the last ones
    /// the engine makes before the window's end.
    pub edge_resends: u64,
    /// Acts on a tool that deduplicates the engine left unknown, not
    /// resent, though the tool's window was still open: their intent was
    /// past the window less the margin.
    pub edge_unknowns: u64,
    /// Clock jumps that brought an open act's intent to the end of its
    /// tool's dedup window (`Event::EdgeJump`).
    pub edge_jumps: u64,
    /// Queries sent to resolve an ambiguous intent.
    pub queries: u64,
    /// Steps that ended `Unknown` (non-idempotent tools only).
    pub unknowns: u64,
    /// Compensations confirmed.
    pub compensations: u64,
    /// Ledger entries whose receipt is kept in the blob store by digest
    /// (larger than `RECEIPT_INLINE_BYTES_MAX`), at the end.
    pub receipts_by_digest: u64,
    /// Model calls paid for.
    pub model_calls: u64,
    /// Decisions replayed from the journal instead of paid again.
    pub decisions_replayed: u64,
    /// Acts that happened in the world.
    pub applications: u64,
    /// Outcomes recorded in one record with their checkpoint (and the
    /// run's end, when it was the last step).
    pub one_record_steps: u64,
    /// Outcomes recorded alone because their follow-ups were refused.
    pub follow_ups_refused: u64,
    /// Operator pauses, resumes and cancels that changed a run.
    pub operator_actions: u64,
    /// Operators' requests answered as carried out before (sent again
    /// after a lost answer or a crash): nothing changed.
    pub operator_repeats: u64,
    /// Operators' answers lost on their way back (the request sent again).
    pub operator_answers_lost: u64,
    /// Worker calls refused because an operator had paused the run.
    pub not_running_refused: u64,
    /// Waits a worker opened that parked its run (released the lease).
    pub waits_parked: u64,
    /// Approvals an approver decided (acknowledged).
    pub approvals: u64,
    /// Approvals refused: another digest, another role, too late, twice.
    pub approvals_refused: u64,
    /// Signals sent to runs (acknowledged).
    pub signals: u64,
    /// Webhook replies of an asynchronous tool recorded (acknowledged).
    pub replies: u64,
    /// Budget holds granted for a call (research runs).
    pub reserves: u64,
    /// Holds settled with a recorded call's cost.
    pub settles: u64,
    /// Reserves refused by an exhausted budget (the run paused, the call
    /// never made).
    pub budgets_exhausted: u64,
    /// Budgets an operator raised to let a paused run go on.
    pub budgets_raised: u64,
    /// Child runs a parent's step started (with the parent's wait).
    pub children_started: u64,
    /// Completed children whose result a parent took.
    pub children_joined: u64,
    /// Runs a worker saw move to compensating when it ended them.
    pub sagas_opened: u64,
    /// Compensations a saga began (or resumed).
    pub saga_undos: u64,
    /// Sagas ended, the run reaching its end.
    pub sagas_ended: u64,
    /// Times a worker left a saga only a person could move on.
    pub sagas_stuck: u64,
    /// A person's findings recorded for a stuck saga (calm phase).
    pub person_reconciles: u64,
    /// Resource holds granted anew (a customer's lease).
    pub resource_grants: u64,
    /// Tries for a resource another run held.
    pub resource_busy: u64,
    /// Compare-and-sets of a shared key that lost a race and read again.
    pub cas_conflicts: u64,
    /// Runs retention removed from the books (an operator's pass after a
    /// checkpoint).
    pub runs_pruned: u64,
    /// Runs such a pass named that the books kept (a dedup window still
    /// open, a parent not over), with the reason.
    pub runs_kept: u64,
    /// Commands a worker sent under a guard of another run, all refused.
    pub mixed_guards_refused: u64,
    /// Processes that came back redeployed with checkpoint schema 2 (at
    /// most one per run of a schedule).
    pub redeploys: u64,
    /// Checkpoints of schema 1 a worker of schema 2 read through the
    /// migration (a run's latest, or a child's result).
    pub migrations: u64,
    /// Checkpoint parts acknowledged in append form (schema 1's notes).
    pub appended_parts: u64,
    /// Of those, the parts whose base was kept in blobs, not held inline
    /// in its metadata (notes past `CHECKPOINT_INLINE_BYTES_MAX`).
    pub appended_on_blobs: u64,
    /// Virtual time the run covered, in ms.
    pub simulated_ms: u64,
    /// How many times each invariant was checked.
    pub checks: BTreeMap<&'static str, u64>,
}

impl AgentReport {
    /// Counts one check of `invariant`.
    pub fn checked(&mut self, invariant: &'static str) {
        *self.checks.entry(invariant).or_default() += 1;
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &AgentReport) {
        self.runs += other.runs;
        self.completed += other.completed;
        self.failed += other.failed;
        self.crashes += other.crashes;
        self.recoveries += other.recoveries;
        self.commands += other.commands;
        self.zombies_fenced += other.zombies_fenced;
        self.leases_lost += other.leases_lost;
        self.acks_dropped += other.acks_dropped;
        self.resends += other.resends;
        self.edge_resends += other.edge_resends;
        self.edge_unknowns += other.edge_unknowns;
        self.edge_jumps += other.edge_jumps;
        self.queries += other.queries;
        self.unknowns += other.unknowns;
        self.compensations += other.compensations;
        self.receipts_by_digest += other.receipts_by_digest;
        self.model_calls += other.model_calls;
        self.decisions_replayed += other.decisions_replayed;
        self.applications += other.applications;
        self.one_record_steps += other.one_record_steps;
        self.follow_ups_refused += other.follow_ups_refused;
        self.operator_actions += other.operator_actions;
        self.operator_repeats += other.operator_repeats;
        self.operator_answers_lost += other.operator_answers_lost;
        self.not_running_refused += other.not_running_refused;
        self.waits_parked += other.waits_parked;
        self.approvals += other.approvals;
        self.approvals_refused += other.approvals_refused;
        self.signals += other.signals;
        self.replies += other.replies;
        self.reserves += other.reserves;
        self.settles += other.settles;
        self.budgets_exhausted += other.budgets_exhausted;
        self.budgets_raised += other.budgets_raised;
        self.children_started += other.children_started;
        self.children_joined += other.children_joined;
        self.sagas_opened += other.sagas_opened;
        self.saga_undos += other.saga_undos;
        self.sagas_ended += other.sagas_ended;
        self.sagas_stuck += other.sagas_stuck;
        self.person_reconciles += other.person_reconciles;
        self.resource_grants += other.resource_grants;
        self.resource_busy += other.resource_busy;
        self.cas_conflicts += other.cas_conflicts;
        self.runs_pruned += other.runs_pruned;
        self.runs_kept += other.runs_kept;
        self.mixed_guards_refused += other.mixed_guards_refused;
        self.redeploys += other.redeploys;
        self.migrations += other.migrations;
        self.appended_parts += other.appended_parts;
        self.appended_on_blobs += other.appended_on_blobs;
        self.simulated_ms += other.simulated_ms;
        for (name, count) in &other.checks {
            *self.checks.entry(name).or_default() += count;
        }
    }

    /// The one-line summary the runner prints.
    pub fn summary(&self) -> String {
        format!(
            "{} runs ({} completed, {} failed), {} crashes, {} checked recoveries, {} \
             commands, {} zombie commands fenced, {} leases lost, {} acks dropped, {} resends \
             ({} within a margin of a window's end, {} left unknown inside it after {} jumps to \
             it), {} queries, {} unknowns, {} compensations ({} receipts by digest), {} model calls ({} replayed from the \
             journal), {} acts in the world, {} steps in one record ({} follow-ups refused), {} \
             operator actions ({} operator requests answered as done before, {} answers lost; {} worker calls refused on a paused run), {} waits parked, {} \
             approvals decided ({} refused), {} signals, {} webhook replies, {} budget holds ({} settled, {} \
             exhausted, {} raised), {} child runs started ({} results taken), {} sagas ended \
             ({} undos begun, {} left stuck, {} settled by a person), {} customer holds ({} \
             tries found it held), {} compare-and-set races lost, {} runs pruned ({} kept), {} mixed-up guards refused, {} redeploys to checkpoint \
             schema 2 ({} checkpoints migrated), {} checkpoint parts saved in append form ({} on a \
             base in blobs)",
            self.runs,
            self.completed,
            self.failed,
            self.crashes,
            self.recoveries,
            self.commands,
            self.zombies_fenced,
            self.leases_lost,
            self.acks_dropped,
            self.resends,
            self.edge_resends,
            self.edge_unknowns,
            self.edge_jumps,
            self.queries,
            self.unknowns,
            self.compensations,
            self.receipts_by_digest,
            self.model_calls,
            self.decisions_replayed,
            self.applications,
            self.one_record_steps,
            self.follow_ups_refused,
            self.operator_actions,
            self.operator_repeats,
            self.operator_answers_lost,
            self.not_running_refused,
            self.waits_parked,
            self.approvals,
            self.approvals_refused,
            self.signals,
            self.replies,
            self.reserves,
            self.settles,
            self.budgets_exhausted,
            self.budgets_raised,
            self.children_started,
            self.children_joined,
            self.sagas_ended,
            self.saga_undos,
            self.sagas_stuck,
            self.person_reconciles,
            self.resource_grants,
            self.resource_busy,
            self.cas_conflicts,
            self.runs_pruned,
            self.runs_kept,
            self.mixed_guards_refused,
            self.redeploys,
            self.migrations,
            self.appended_parts,
            self.appended_on_blobs
        )
    }
}

//! What one run of the runtime family did, summed over seeds for the
//! campaign's summary line.
//!
//! **Invariant:** every count is of something that happened in the run.

use std::fmt;

/// Counts of one run of the runtime family (or, summed, of a campaign).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeReport {
    /// Runs started.
    pub runs: u64,
    /// Turns that claimed a run.
    pub turns: u64,
    /// Runs the runtime completed, the research runs' children included.
    pub completed: u64,
    /// Turns that ended with the lease lost.
    pub leases_lost: u64,
    /// Turns that parked a run on a wait.
    pub parked: u64,
    /// Turns that paused a run for a person.
    pub paused: u64,
    /// Requests sent to tools (acts, undos, queries).
    pub calls: u64,
    /// Calls that stalled past the lease while another worker took a turn.
    pub stalls: u64,
    /// Processes that died with a request just sent.
    pub died_after_send: u64,
    /// Process crashes (each followed by a recovery).
    pub crashes: u64,
    /// Clock jumps inside the process's calls.
    pub jumps: u64,
    /// Model calls paid for.
    pub model_calls: u64,
    /// Outcomes a person settled from the world's records.
    pub reconciled: u64,
    /// Approvals and signals sent.
    pub answers: u64,
    /// Runs an operator cancelled.
    pub cancels: u64,
    /// Budgets a person raised for a run paused with its searches spent.
    pub budgets_raised: u64,
    /// Fan-outs: waits for several children a run opened (for all of
    /// them, or for the first).
    pub fan_outs: u64,
    /// Of those, waits for the first child only.
    pub fan_outs_first: u64,
    /// Turns the runtime paused a run whose handler diverged from its
    /// journal (a broken deploy).
    pub diverged: u64,
    /// Broken deploys the team rolled back.
    pub rollbacks: u64,
    /// Acts that happened in the world.
    pub applications: u64,
    /// Invariants checked (counting each check).
    pub checks: u64,
    /// Runs an operator moved to another version.
    pub moves: u64,
    /// Failed runs a person retried.
    pub retries: u64,
    /// Retries the engine refused, as the books said it must.
    pub retries_refused: u64,
    /// Retries from a checkpoint before the latest (restored as the newest).
    pub retries_restored: u64,
    /// Runs a person forked (a run whose saga undid what it did).
    pub forks: u64,
    /// Requests to a tool that ignores tokens still on their way when
    /// their caller gave up.
    pub late: u64,
    /// Waits a step opened to outlive such a request before it queried.
    pub lifetime_waits: u64,
    /// Questions a compensating run's saga asked: about an act the run
    /// left open, or an undo request (each once it could no longer land).
    pub saga_asks: u64,
    /// Waits an asynchronous step opened for its tool's reply.
    pub reply_waits: u64,
    /// Of those, waits whose deadline passed with no reply (the run was
    /// paused for a person).
    pub replies_elapsed: u64,
    /// Replies the asynchronous tool's webhook delivered (each delivery).
    pub webhooks: u64,
    /// Of those, deliveries of a reply the books held already (a webhook
    /// that retries).
    pub webhooks_repeated: u64,
    /// Of those, replies recorded before their step waited for them.
    pub replies_early: u64,
}

impl RuntimeReport {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &RuntimeReport) {
        self.runs += other.runs;
        self.turns += other.turns;
        self.completed += other.completed;
        self.leases_lost += other.leases_lost;
        self.parked += other.parked;
        self.paused += other.paused;
        self.calls += other.calls;
        self.stalls += other.stalls;
        self.died_after_send += other.died_after_send;
        self.crashes += other.crashes;
        self.jumps += other.jumps;
        self.model_calls += other.model_calls;
        self.reconciled += other.reconciled;
        self.answers += other.answers;
        self.cancels += other.cancels;
        self.budgets_raised += other.budgets_raised;
        self.fan_outs += other.fan_outs;
        self.diverged += other.diverged;
        self.rollbacks += other.rollbacks;
        self.fan_outs_first += other.fan_outs_first;
        self.applications += other.applications;
        self.checks += other.checks;
        self.moves += other.moves;
        self.retries += other.retries;
        self.retries_refused += other.retries_refused;
        self.retries_restored += other.retries_restored;
        self.forks += other.forks;
        self.late += other.late;
        self.lifetime_waits += other.lifetime_waits;
        self.saga_asks += other.saga_asks;
        self.reply_waits += other.reply_waits;
        self.replies_elapsed += other.replies_elapsed;
        self.webhooks += other.webhooks;
        self.webhooks_repeated += other.webhooks_repeated;
        self.replies_early += other.replies_early;
    }
}

impl fmt::Display for RuntimeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} runs started, {} runs completed (children included) in {} turns; {} crashes ({} with a request just sent), {} \
             clock jumps, {} stalls past the lease, {} leases lost, {} parked, {} paused for a \
             person ({} outcomes settled, {} budgets raised), {} cancelled, {} moved between versions, {} failed runs retried ({} refused, {} from an earlier checkpoint), {} forked; {} paused diverged, {} rollbacks; {} fan-outs ({} for the first); {} tool calls, {} applied, {} late past their caller's timeout ({} lifetime waits), {} asked by sagas; {} reply waits ({} elapsed), {} webhooks ({} repeated, {} before the wait); {} model calls; {} checks",
            self.runs,
            self.completed,
            self.turns,
            self.crashes,
            self.died_after_send,
            self.jumps,
            self.stalls,
            self.leases_lost,
            self.parked,
            self.paused,
            self.reconciled,
            self.budgets_raised,
            self.cancels,
            self.moves,
            self.retries,
            self.retries_refused,
            self.retries_restored,
            self.forks,
            self.diverged,
            self.rollbacks,
            self.fan_outs,
            self.fan_outs_first,
            self.calls,
            self.applications,
            self.late,
            self.lifetime_waits,
            self.saga_asks,
            self.reply_waits,
            self.replies_elapsed,
            self.webhooks,
            self.webhooks_repeated,
            self.replies_early,
            self.model_calls,
            self.checks
        )
    }
}

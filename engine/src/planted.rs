//! Known bugs, plantable only with the `planted-bugs` cargo feature, so the
//! simulator can show it catches each one (docs/SIMULATION.md, "The harness
//! bites"). The storage bugs live in the WAL; the engine bugs in the commit
//! path, the step ceremony and recovery, except `MigrationKeepsByteOrder`,
//! which lives in the agent simulator's migration of a checkpoint (the
//! function a caller hands `Engine::load_latest_migrating`), since the
//! engine leaves the migration to its caller. Without the feature, `planted`
//! is a constant `false` and the options carry no bug.
//!
//! **Invariant:** a build without the feature contains no planted code path
//! that can be switched on.

use crate::wal::WalOptions;

/// A known bug the simulator must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// Acknowledge appends without `fdatasync`.
    AckBeforeFsync,
    /// Recovery accepts a record whose payload checksum fails.
    AcceptBadChecksum,
    /// Skip the directory sync after creating a segment.
    SkipSegmentDirSync,
    /// Recovery treats damage to acknowledged records as a torn tail.
    CorruptionAsTornTail,
    /// The step ceremony resends an ambiguous intent under a fresh key.
    ResendWithFreshKey,
    /// `begin_effect` answers `Proceed` before the intent is durable.
    ProceedBeforeDurable,
    /// The engine accepts a mutation presenting a stale fencing token.
    AcceptStaleToken,
    /// The engine takes a guard granted on another run for one of the
    /// command's run, as if guards did not name their run.
    AcceptAnotherRunsGuard,
    /// The step ceremony acts on resume without consulting the ledger.
    SkipLedgerOnResume,
    /// Recovery applies the first replayed record twice.
    ReplayRecordTwice,
    /// Recovery drops the compensation an intent registered.
    LoseCompensationOnCrash,
    /// The hot books let a settled ledger entry leave memory without
    /// remembering its step, so the step looks never begun.
    ForgetEvictedSteps,
    /// `finish_step_with` whose follow-ups are refused drops the outcome
    /// instead of recording it alone.
    LoseOutcomeWithRefusedFollowUps,
    /// Recycling an old segment file renames it without writing the new
    /// segment's header, so the file still names its old number.
    RecycleKeepsOldHeader,
    /// The engine begins an effect on a run an operator paused, as if the
    /// run were running (the lifecycle rule skipped).
    BeginOnPausedRun,
    /// The engine takes an approval for whatever arguments the approver
    /// names, as if they were the ones the wait is bound to.
    ApproveAnyDigest,
    /// The engine's claims see every open wait's deadline an hour early,
    /// so a timer fires (or an approval expires) before its time.
    WakeEarly,
    /// The engine's reserves see no limits, so a run spends past its
    /// budget and the calls it should have refused are made.
    OverspendBudget,
    /// The engine's reserves skip the replay check, so a step replayed from
    /// the books is charged again.
    ChargeReplays,
    /// `start_child` names the child afresh under each lease and creates
    /// it in one commit and the parent's wait in another, so a crash
    /// between them leaves a child no wait names, and the parent's re-run
    /// starts a second one.
    SpawnChildTwice,
    /// The engine writes an intent without the arguments its caller
    /// passed, so a resumed worker cannot read what was sent.
    DropIntentArgs,
    /// `deliver_reply` ends the run's wait for the reply and wakes it, but
    /// drops the outcome, so the ledger never learns what the tool did.
    ReplyWithoutOutcome,
    /// A run parked in a wait leaves memory at a checkpoint without its
    /// entry in the claim index, so its deadline never wakes it.
    ForgetParkedDeadlines,
    /// The sweep of stuck runs looks only at the runs in memory, missing
    /// the parked runs that wait longest.
    SweepSkipsParked,
    /// An open parks the live runs no lease holds out of memory without
    /// their entries in the claim index, so a pending or orphaned run the
    /// state store held is never claimed again after a restart.
    ParkAtOpenUnindexed,
    /// A claim walks each agent version's claimable runs in turn (in the
    /// order the claim index numbered the versions) instead of merging
    /// them by claim order, so a run of one agent claimable earlier waits
    /// behind a later run of another.
    ClaimAgentsInTurn,
    /// `saga_next` walks a saga's steps first to last, so compensations
    /// run in the order the acts did, not backwards.
    UndoFirstStepFirst,
    /// A run that fails or is cancelled ends at once, without its saga:
    /// its confirmed acts are never compensated.
    EndWithoutCompensating,
    /// A run is granted a resource another run holds live.
    ResourceIgnoresHolder,
    /// A shared key's compare-and-set ignores the version its setter read.
    SharedSetBlind,
    /// A checkpoint writing a prune deletes every blob the pruned run
    /// referenced, counted or not, so kept runs lose the parts they share.
    PruneSharedBlobs,
    /// The blob stream's cleaner appends a live record again at the
    /// stream's end but leaves its index entry on the old copy, whose
    /// chunk it then removes.
    CleanerLosesMoves,
    /// The hot books drop the blob references a command adds to its run's
    /// (`Writes::blob_refs_added`, a saved part's new blob), so the run's
    /// references in memory miss them: a later save of the same bytes
    /// counts the blob's holder again, and a prune frees a blob by a count
    /// that is not the state store's.
    ForgetAddedBlobRefs,
    /// The open releases only the leases the state store held, read before
    /// the log is replayed: a lease granted since the last checkpoint stays
    /// held by the process that died.
    ReleaseStoredLeasesOnly,
    /// The runtime's lease keeper takes a refused renewal for a granted
    /// one and moves its own idea of the expiry on, so a handler whose
    /// lease ran out still sends its act.
    RenewAfterLoss,
    /// A resumed handler's step whose act the books call confirmed calls
    /// the act again (its outcome thrown away) instead of answering from
    /// the ledger alone.
    ResendConfirmedStep,
    /// A step's retry after a retryable failure sends the new attempt's
    /// request under the key of the attempt that failed.
    RetryReusesFailedKey,
    /// A wait for all of several children ends when the first of them
    /// ends, so a fan-out's parent goes on without the others' results.
    JoinAllAtFirstEnd,
    /// An operator's move to another agent version is decided as if the
    /// run held no lease, so a run moves under its holder's feet and the
    /// old version's handler goes on acting on it.
    MoveLeasedRun,
    /// The runtime skips its journal check: a resumed handler whose n-th
    /// call is not the journal's n-th goes on as if the call were new, so
    /// a handler changed under a run in flight acts.
    SkipJournalCheck,
    /// After an operator's retry, a resumed handler takes the steps the
    /// retry reached as new work: a step whose act the books call
    /// confirmed is sent again (as a reset to a checkpoint that re-runs
    /// what came after it would), instead of being replayed.
    RetryResendsConfirmed,
    /// A step whose tool ignores fencing tokens queries an ambiguous
    /// request at once, without waiting out the request's lifetime, so a
    /// request still on its way lands after the query found nothing.
    QueryBeforeRequestLifetime,
    /// The runtime's saga asks about an undo request (or an act it
    /// resolves) on a tool that ignores fencing tokens at once, without
    /// waiting out the request's lifetime.
    SagaQueriesAtOnce,
    /// The migration of an agent checkpoint from schema 1 to schema 2
    /// copies the cursor's bytes as schema 1 wrote them (little-endian)
    /// where schema 2 reads them big-endian, so a resumed run stands
    /// elsewhere on its path than its checkpoint said.
    MigrationKeepsByteOrder,
    /// A resumed asynchronous step whose reply the books say it awaited
    /// sends its request again before it answers from the wait, as if the
    /// wait did not record that the request left.
    ResendAwaitedRequest,
    /// The engine saves a checkpoint part given in append form as its new
    /// bytes alone, dropping the base it extends.
    AppendDropsBase,
    /// A grow of the segment being written zero-fills from the length the
    /// file had when it was made or opened, not from the end of its last
    /// grow, so a second grow zeroes records acknowledged since the first.
    GrowFromStaleSize,
    /// A repair that drops acknowledged records zeroes the stop segment
    /// only up to the next group boundary, as for a torn tail, so the valid
    /// records behind the damage keep their ack watermark and the next
    /// ordinary open calls the same damage corruption again.
    RepairCutDoesNotLast,
    /// An operator's request sent again under the same id is carried out
    /// again: the engine reads the request's mark but does not take it for
    /// "done", so a retried signal lands twice.
    RepeatOperatorRequest,
    /// The engine's look at its books reads the state store's copy of
    /// every run, the runs memory holds too, so a run in memory is counted
    /// twice, once as the last checkpoint left it.
    LookCountsStoredCopies,
    /// The state store keeps the read transaction its readers share past
    /// a checkpoint's commit, so a run the checkpoint let leave memory is
    /// read as the store held it before (or not at all).
    SharedReadOutlivesCommit,
    /// A read of the state store whose block does not match the sum kept
    /// for it is handed to redb as it is, so after a clean close (when the
    /// open checks pages as they are read, not all at once) damage at rest
    /// is read as data.
    PageSumsUnchecked,
    /// A state store refused at open (its whole check found damage) keeps
    /// its redb handle until the process ends instead of letting it go, as
    /// every refused store did before handles were let go: its file stays
    /// open and its memory is never freed.
    KeepRefusedStore,
    /// The PostgreSQL backend decides a command on a snapshot read in a
    /// transaction of its own, then applies its ops in another: the lease
    /// and the ledger it checked may have changed in between.
    PgDecideOutsideTransaction,
    /// The PostgreSQL backend's connections commit with
    /// `synchronous_commit = off`: a command is answered before the server
    /// made it durable, and a server crash can lose it.
    PgAnswerBeforeDurable,
    /// The PostgreSQL backend judges a command's `COMMIT` by its own answer
    /// only: a queued write the server refused in the same pipeline (the
    /// transaction failed there, and its `COMMIT` answered `ROLLBACK`) is
    /// answered as committed, though nothing landed; and an optimistic
    /// command's write the server refused (for another cause than its
    /// guard) is answered as committed too.
    PgRefusedWriteAsCommitted,
    /// An optimistic command whose write the server refused because its
    /// run changed since its read (the guard failed) is answered as
    /// committed instead of run again in a transaction.
    PgStaleWriteAsCommitted,
    /// The first write after an open of a cleanly closed database skips
    /// the syncs the open left to it (the segments', the WAL directory's,
    /// the manifest copies' and the database directory's), so a database
    /// copied without syncing (`cp`) can lose what its first session
    /// acknowledged.
    FirstWriteSkipsOpenSyncs,
    /// A state store opened on redb's read-only handle keeps beginning its
    /// readers' transactions there after its first commit opened the
    /// writable handle: they read the store as it was at open (and pages
    /// the writable handle may since have reused).
    ReadOnlyHandleOutlivesWrite,
    /// A checkpoint part given in append form on a base the metadata holds
    /// inline is saved as its new bytes alone, as if the base were empty:
    /// the inline path of an append loses the base.
    InlineAppendDropsBase,
    /// A run's claim row (`books_live_claims`, what an open files a live
    /// run by) is written only when the run becomes live, not when its row
    /// changes after: an open files the run as it was then.
    StaleLiveClaims,
}

impl PlantedBug {
    /// The bugs of the storage core, which the storage campaign catches.
    pub const STORAGE: [PlantedBug; 10] = [
        PlantedBug::AckBeforeFsync,
        PlantedBug::AcceptBadChecksum,
        PlantedBug::SkipSegmentDirSync,
        PlantedBug::CorruptionAsTornTail,
        PlantedBug::RecycleKeepsOldHeader,
        PlantedBug::GrowFromStaleSize,
        PlantedBug::RepairCutDoesNotLast,
        PlantedBug::PageSumsUnchecked,
        PlantedBug::FirstWriteSkipsOpenSyncs,
        PlantedBug::KeepRefusedStore,
    ];

    /// The bugs of the engine, which the agent campaign catches.
    pub const ENGINE: [PlantedBug; 37] = [
        PlantedBug::ResendWithFreshKey,
        PlantedBug::ProceedBeforeDurable,
        PlantedBug::AcceptStaleToken,
        PlantedBug::AcceptAnotherRunsGuard,
        PlantedBug::SkipLedgerOnResume,
        PlantedBug::ReplayRecordTwice,
        PlantedBug::LoseCompensationOnCrash,
        PlantedBug::ForgetEvictedSteps,
        PlantedBug::LoseOutcomeWithRefusedFollowUps,
        PlantedBug::BeginOnPausedRun,
        PlantedBug::ApproveAnyDigest,
        PlantedBug::WakeEarly,
        PlantedBug::OverspendBudget,
        PlantedBug::ChargeReplays,
        PlantedBug::SpawnChildTwice,
        PlantedBug::DropIntentArgs,
        PlantedBug::ReplyWithoutOutcome,
        PlantedBug::ForgetParkedDeadlines,
        PlantedBug::SweepSkipsParked,
        PlantedBug::ParkAtOpenUnindexed,
        PlantedBug::ClaimAgentsInTurn,
        PlantedBug::UndoFirstStepFirst,
        PlantedBug::EndWithoutCompensating,
        PlantedBug::ResourceIgnoresHolder,
        PlantedBug::SharedSetBlind,
        PlantedBug::PruneSharedBlobs,
        PlantedBug::CleanerLosesMoves,
        PlantedBug::ForgetAddedBlobRefs,
        PlantedBug::ReleaseStoredLeasesOnly,
        PlantedBug::MigrationKeepsByteOrder,
        PlantedBug::AppendDropsBase,
        PlantedBug::RepeatOperatorRequest,
        PlantedBug::LookCountsStoredCopies,
        PlantedBug::SharedReadOutlivesCommit,
        PlantedBug::ReadOnlyHandleOutlivesWrite,
        PlantedBug::InlineAppendDropsBase,
        PlantedBug::StaleLiveClaims,
    ];

    /// The bugs of the runtime, and of what only the runtime family uses
    /// (the fan-out, the operator's move to another version), which the
    /// runtime family of the agent campaign catches.
    pub const RUNTIME: [PlantedBug; 10] = [
        PlantedBug::RenewAfterLoss,
        PlantedBug::ResendConfirmedStep,
        PlantedBug::RetryReusesFailedKey,
        PlantedBug::JoinAllAtFirstEnd,
        PlantedBug::MoveLeasedRun,
        PlantedBug::SkipJournalCheck,
        PlantedBug::RetryResendsConfirmed,
        PlantedBug::QueryBeforeRequestLifetime,
        PlantedBug::SagaQueriesAtOnce,
        PlantedBug::ResendAwaitedRequest,
    ];

    /// The bugs of the PostgreSQL backend, which its kill loop catches.
    pub const POSTGRES: [PlantedBug; 4] = [
        PlantedBug::PgDecideOutsideTransaction,
        PlantedBug::PgAnswerBeforeDurable,
        PlantedBug::PgRefusedWriteAsCommitted,
        PlantedBug::PgStaleWriteAsCommitted,
    ];

    /// Every plantable bug.
    pub const ALL: [PlantedBug; 61] = [
        PlantedBug::AckBeforeFsync,
        PlantedBug::AcceptBadChecksum,
        PlantedBug::SkipSegmentDirSync,
        PlantedBug::CorruptionAsTornTail,
        PlantedBug::ResendWithFreshKey,
        PlantedBug::ProceedBeforeDurable,
        PlantedBug::AcceptStaleToken,
        PlantedBug::AcceptAnotherRunsGuard,
        PlantedBug::SkipLedgerOnResume,
        PlantedBug::ReplayRecordTwice,
        PlantedBug::LoseCompensationOnCrash,
        PlantedBug::ForgetEvictedSteps,
        PlantedBug::LoseOutcomeWithRefusedFollowUps,
        PlantedBug::RecycleKeepsOldHeader,
        PlantedBug::BeginOnPausedRun,
        PlantedBug::ApproveAnyDigest,
        PlantedBug::WakeEarly,
        PlantedBug::OverspendBudget,
        PlantedBug::ChargeReplays,
        PlantedBug::SpawnChildTwice,
        PlantedBug::DropIntentArgs,
        PlantedBug::ReplyWithoutOutcome,
        PlantedBug::ForgetParkedDeadlines,
        PlantedBug::SweepSkipsParked,
        PlantedBug::ParkAtOpenUnindexed,
        PlantedBug::ClaimAgentsInTurn,
        PlantedBug::UndoFirstStepFirst,
        PlantedBug::EndWithoutCompensating,
        PlantedBug::ResourceIgnoresHolder,
        PlantedBug::SharedSetBlind,
        PlantedBug::PruneSharedBlobs,
        PlantedBug::CleanerLosesMoves,
        PlantedBug::ForgetAddedBlobRefs,
        PlantedBug::ReleaseStoredLeasesOnly,
        PlantedBug::RenewAfterLoss,
        PlantedBug::ResendConfirmedStep,
        PlantedBug::RetryReusesFailedKey,
        PlantedBug::JoinAllAtFirstEnd,
        PlantedBug::MoveLeasedRun,
        PlantedBug::SkipJournalCheck,
        PlantedBug::RetryResendsConfirmed,
        PlantedBug::QueryBeforeRequestLifetime,
        PlantedBug::SagaQueriesAtOnce,
        PlantedBug::MigrationKeepsByteOrder,
        PlantedBug::ResendAwaitedRequest,
        PlantedBug::AppendDropsBase,
        PlantedBug::GrowFromStaleSize,
        PlantedBug::RepairCutDoesNotLast,
        PlantedBug::RepeatOperatorRequest,
        PlantedBug::LookCountsStoredCopies,
        PlantedBug::SharedReadOutlivesCommit,
        PlantedBug::PageSumsUnchecked,
        PlantedBug::PgDecideOutsideTransaction,
        PlantedBug::PgAnswerBeforeDurable,
        PlantedBug::PgRefusedWriteAsCommitted,
        PlantedBug::PgStaleWriteAsCommitted,
        PlantedBug::FirstWriteSkipsOpenSyncs,
        PlantedBug::ReadOnlyHandleOutlivesWrite,
        PlantedBug::InlineAppendDropsBase,
        PlantedBug::KeepRefusedStore,
        PlantedBug::StaleLiveClaims,
    ];

    /// The bug's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::AckBeforeFsync => "ack-before-fsync",
            PlantedBug::AcceptBadChecksum => "accept-bad-checksum",
            PlantedBug::SkipSegmentDirSync => "skip-segment-dir-sync",
            PlantedBug::CorruptionAsTornTail => "corruption-as-torn-tail",
            PlantedBug::ResendWithFreshKey => "resend-with-fresh-key",
            PlantedBug::ProceedBeforeDurable => "proceed-before-durable",
            PlantedBug::AcceptStaleToken => "accept-stale-token",
            PlantedBug::AcceptAnotherRunsGuard => "accept-another-runs-guard",
            PlantedBug::SkipLedgerOnResume => "skip-ledger-on-resume",
            PlantedBug::ReplayRecordTwice => "replay-record-twice",
            PlantedBug::LoseCompensationOnCrash => "lose-compensation-on-crash",
            PlantedBug::ForgetEvictedSteps => "forget-evicted-steps",
            PlantedBug::LoseOutcomeWithRefusedFollowUps => "lose-outcome-with-refused-follow-ups",
            PlantedBug::RecycleKeepsOldHeader => "recycle-keeps-old-header",
            PlantedBug::BeginOnPausedRun => "begin-on-paused-run",
            PlantedBug::ApproveAnyDigest => "approve-any-digest",
            PlantedBug::WakeEarly => "wake-early",
            PlantedBug::OverspendBudget => "overspend-budget",
            PlantedBug::ChargeReplays => "charge-replays",
            PlantedBug::SpawnChildTwice => "spawn-child-twice",
            PlantedBug::DropIntentArgs => "drop-intent-args",
            PlantedBug::ReplyWithoutOutcome => "reply-without-outcome",
            PlantedBug::ForgetParkedDeadlines => "forget-parked-deadlines",
            PlantedBug::SweepSkipsParked => "sweep-skips-parked",
            PlantedBug::ParkAtOpenUnindexed => "park-at-open-unindexed",
            PlantedBug::ClaimAgentsInTurn => "claim-agents-in-turn",
            PlantedBug::UndoFirstStepFirst => "undo-first-step-first",
            PlantedBug::EndWithoutCompensating => "end-without-compensating",
            PlantedBug::ResourceIgnoresHolder => "resource-ignores-holder",
            PlantedBug::SharedSetBlind => "shared-set-blind",
            PlantedBug::PruneSharedBlobs => "prune-shared-blobs",
            PlantedBug::CleanerLosesMoves => "cleaner-loses-moves",
            PlantedBug::ForgetAddedBlobRefs => "forget-added-blob-refs",
            PlantedBug::ReleaseStoredLeasesOnly => "release-stored-leases-only",
            PlantedBug::RenewAfterLoss => "renew-after-loss",
            PlantedBug::ResendConfirmedStep => "resend-confirmed-step",
            PlantedBug::RetryReusesFailedKey => "retry-reuses-failed-key",
            PlantedBug::JoinAllAtFirstEnd => "join-all-at-first-end",
            PlantedBug::MoveLeasedRun => "move-leased-run",
            PlantedBug::SkipJournalCheck => "skip-journal-check",
            PlantedBug::RetryResendsConfirmed => "retry-resends-confirmed",
            PlantedBug::QueryBeforeRequestLifetime => "query-before-request-lifetime",
            PlantedBug::SagaQueriesAtOnce => "saga-queries-at-once",
            PlantedBug::MigrationKeepsByteOrder => "migration-keeps-byte-order",
            PlantedBug::ResendAwaitedRequest => "resend-awaited-request",
            PlantedBug::AppendDropsBase => "append-drops-base",
            PlantedBug::GrowFromStaleSize => "grow-fills-from-stale-size",
            PlantedBug::RepairCutDoesNotLast => "repair-cut-does-not-last",
            PlantedBug::RepeatOperatorRequest => "repeat-operator-request",
            PlantedBug::LookCountsStoredCopies => "look-counts-stored-copies",
            PlantedBug::SharedReadOutlivesCommit => "shared-read-outlives-commit",
            PlantedBug::PageSumsUnchecked => "page-sums-unchecked",
            PlantedBug::PgDecideOutsideTransaction => "pg-decide-outside-transaction",
            PlantedBug::PgAnswerBeforeDurable => "pg-answer-before-durable",
            PlantedBug::PgRefusedWriteAsCommitted => "pg-refused-write-as-committed",
            PlantedBug::PgStaleWriteAsCommitted => "pg-stale-write-as-committed",
            PlantedBug::FirstWriteSkipsOpenSyncs => "first-write-skips-open-syncs",
            PlantedBug::ReadOnlyHandleOutlivesWrite => "read-only-handle-outlives-write",
            PlantedBug::InlineAppendDropsBase => "inline-append-drops-base",
            PlantedBug::StaleLiveClaims => "stale-live-claims",
            PlantedBug::KeepRefusedStore => "keep-refused-store",
        }
    }

    /// The bug named `name`, if any.
    pub fn from_name(name: &str) -> Option<PlantedBug> {
        PlantedBug::ALL.into_iter().find(|bug| bug.name() == name)
    }
}

/// Whether `bug` is planted in these options.
#[cfg(feature = "planted-bugs")]
pub(crate) fn planted(options: &WalOptions, bug: PlantedBug) -> bool {
    options.planted_bug == Some(bug)
}

/// Whether `bug` is planted in these options: never, without the feature.
#[cfg(not(feature = "planted-bugs"))]
pub(crate) fn planted(_options: &WalOptions, _bug: PlantedBug) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_every_bug_is_in_one_family() {
        for bug in PlantedBug::ALL {
            assert_eq!(PlantedBug::from_name(bug.name()), Some(bug));
            let families = [
                PlantedBug::STORAGE.contains(&bug),
                PlantedBug::ENGINE.contains(&bug),
                PlantedBug::RUNTIME.contains(&bug),
                PlantedBug::POSTGRES.contains(&bug),
            ];
            assert_eq!(families.iter().filter(|&&f| f).count(), 1, "{bug:?}");
        }
        assert_eq!(PlantedBug::from_name("no-such-bug"), None);
    }
}

//! The agent campaign bites: each known engine bug, planted behind the
//! test-only `planted-bugs` feature, is caught within a stated number of
//! seeds (docs/SIMULATION.md lists the measured seeds-to-catch), by the
//! invariant that names what the bug breaks.

use actum_sim::agents::{
    AgentConfig, CHECKPOINT_LOADS_AS_SAVED, MIGRATION_KEEPS_STATE, PlantedBug, run_agent_seed,
};

/// The most seeds any planted engine bug may survive before it is caught
/// (the slowest from seed 0, `resource-ignores-holder`, is caught at its
/// 103rd since blobs became a stream of chunks (schema 13) moved the I/O
/// its crashes land on; its 75th before, its 41st before the page sums:
/// docs/SIMULATION.md).
const SEEDS_TO_CATCH_MAX: u64 = 120;

fn caught(bug: PlantedBug) -> (u64, String) {
    let config = AgentConfig {
        planted: Some(bug),
        ..AgentConfig::default()
    };
    let (seed, failure) = (0..SEEDS_TO_CATCH_MAX)
        .find_map(|seed| run_agent_seed(seed, &config).err().map(|f| (seed, f)))
        .unwrap_or_else(|| {
            panic!(
                "planted bug {} survived {SEEDS_TO_CATCH_MAX} seeds",
                bug.name()
            )
        });
    println!(
        "{} caught at seed {seed}: {}",
        bug.name(),
        failure.invariant
    );
    (seed, failure.invariant.to_string())
}

#[test]
fn resending_under_a_fresh_key_is_caught_by_the_intent_check() {
    // The engine plans to resend under a key no intent was written for:
    // the worker's check that a resend has its intent (and its arguments)
    // sees it before the tool does (seeds 0, 1006, 2002, 3000, 4002 of
    // blocks of 40).
    let (_, invariant) = caught(PlantedBug::ResendWithFreshKey);
    assert_eq!(invariant, "an intent keeps the arguments it was sent with");
}

#[test]
fn proceeding_before_the_intent_is_durable_is_caught_by_intent_before_act() {
    let (_, invariant) = caught(PlantedBug::ProceedBeforeDurable);
    assert_eq!(invariant, "no application without a durable intent");
}

#[test]
fn accepting_a_stale_token_is_caught_by_the_fencing_check() {
    let (_, invariant) = caught(PlantedBug::AcceptStaleToken);
    assert_eq!(invariant, "no mutation accepted from a stale lease");
}

#[test]
fn accepting_another_runs_guard_is_caught_by_the_fencing_check() {
    let (_, invariant) = caught(PlantedBug::AcceptAnotherRunsGuard);
    assert_eq!(invariant, "no mutation accepted from a stale lease");
}

#[test]
fn skipping_the_ledger_on_resume_is_caught_by_at_most_once_or_the_ledger_check() {
    // Caught in the world when a tool applies the second send, or in the
    // ledger when the engine plans a call for a step the books hold
    // confirmed (a tool that deduplicates hides the second send), or when
    // the engine refuses the outcome of a compensation sent again after its
    // first send was recorded unknown.
    let (_, invariant) = caught(PlantedBug::SkipLedgerOnResume);
    assert!(
        [
            "no side effect fires twice",
            "a confirmed step is never acted on again",
            "the engine accepts every step of a valid workflow"
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn applying_a_replayed_record_twice_is_caught_by_recovery() {
    // The second application of a record does not apply to the books it
    // built (a run created twice): the open, an operator's snapshot of the
    // live database (which replays the log into memory) or a recovery,
    // refuses, naming the record.
    let (_, invariant) = caught(PlantedBug::ReplayRecordTwice);
    assert!(
        [SNAPSHOT_HOLDS_THE_BOOKS, "recovery succeeds without faults"]
            .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn losing_a_registered_compensation_in_a_crash_is_caught_by_the_model() {
    // A snapshot replays the log as a recovery does: it drops the
    // compensation the live books hold, or a recovery does and the model
    // keeps it.
    let (_, invariant) = caught(PlantedBug::LoseCompensationOnCrash);
    assert!(
        [
            SNAPSHOT_HOLDS_THE_BOOKS,
            "after every recovery the books equal the model"
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

/// The invariant of the operator who reads the live database.
const SNAPSHOT_HOLDS_THE_BOOKS: &str = "a snapshot of the live database holds its books at its LSN";

#[test]
fn forgetting_a_step_whose_entry_left_memory_is_caught_by_at_most_once_or_replay() {
    // The step is intended again under its old key: the engine plans an act
    // of a step the books hold confirmed, or the model replays the step
    // where the engine begins it afresh, or the world sees a second act, or
    // the state store refuses the second intent (at the next checkpoint,
    // which halts the engine, or at the next open).
    let (_, invariant) = caught(PlantedBug::ForgetEvictedSteps);
    assert!(
        [
            "a confirmed step is never acted on again",
            "the engine decides as the reference model does",
            "no side effect fires twice",
            "no error without a fault",
            "recovery succeeds without faults",
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn losing_an_outcome_whose_follow_ups_were_refused_is_caught_by_the_model() {
    // Caught at the next recovery, or earlier: the worker asks again for
    // the step whose outcome the engine lost, and the engine plans to act
    // on a step the model holds confirmed, or answers it otherwise than
    // the model does.
    let (_, invariant) = caught(PlantedBug::LoseOutcomeWithRefusedFollowUps);
    assert!(
        [
            "after every recovery the books equal the model",
            "a confirmed step is never acted on again",
            "the engine decides as the reference model does"
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn beginning_an_effect_on_a_paused_run_is_caught_by_the_lifecycle_check() {
    let (_, invariant) = caught(PlantedBug::BeginOnPausedRun);
    assert_eq!(invariant, "no effect begins unless its run is running");
}

#[test]
fn taking_an_approval_for_other_arguments_is_caught_by_the_approval_check() {
    let (_, invariant) = caught(PlantedBug::ApproveAnyDigest);
    assert_eq!(invariant, "an approval binds the exact effect it approves");
}

#[test]
fn waking_a_run_before_its_deadline_is_caught() {
    // The claim the engine grants early is one the model does not grant:
    // the worker's next call, or the next recovery, shows it.
    let (_, invariant) = caught(PlantedBug::WakeEarly);
    assert!(
        [
            "the engine decides as the reference model does",
            "a wait ends only on its own terms",
            "after every recovery the books equal the model",
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn spending_past_a_budget_is_caught_by_the_hold_check() {
    let (_, invariant) = caught(PlantedBug::OverspendBudget);
    assert_eq!(
        invariant,
        "a hold is granted only within budget, never for a replay"
    );
}

#[test]
fn charging_a_replayed_call_again_is_caught_by_the_hold_check() {
    let (_, invariant) = caught(PlantedBug::ChargeReplays);
    assert_eq!(
        invariant,
        "a hold is granted only within budget, never for a replay"
    );
}

#[test]
fn starting_a_second_child_for_one_step_is_caught() {
    // The engine names the child afresh: the reference model, which holds
    // the derived child, sees the engine's books part from it at the
    // child's first command, or at the next recovery a child no wait names.
    let (_, invariant) = caught(PlantedBug::SpawnChildTwice);
    assert!(
        [
            "the engine decides as the reference model does",
            "a parent's step starts one child, and waits for it",
            "after every recovery the books equal the model",
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn writing_an_intent_without_its_arguments_is_caught() {
    // A resumed worker reads what the intent was sent with before it
    // resends or queries; the model, which stored the arguments, shows the
    // difference at the next recovery if no resend comes first.
    let (_, invariant) = caught(PlantedBug::DropIntentArgs);
    assert!(
        [
            "an intent keeps the arguments it was sent with",
            "after every recovery the books equal the model",
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn a_reply_that_wakes_the_run_without_its_outcome_is_caught() {
    // The woken worker resends a step the model holds confirmed, or finds
    // the wait replied and reads the ledger; a recovery in between shows
    // the books differ from the model first.
    let (_, invariant) = caught(PlantedBug::ReplyWithoutOutcome);
    assert!(
        [
            "a confirmed step is never acted on again",
            "a wait ends only on its own terms",
            "after every recovery the books equal the model",
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn a_parked_run_that_forgets_its_deadline_is_caught() {
    // A vendor run parked on its week-long timer leaves memory at a
    // checkpoint; without its claim index entry nothing wakes it, so it
    // never ends, or the model grants a claim the engine does not.
    let (_, invariant) = caught(PlantedBug::ForgetParkedDeadlines);
    assert!(
        [
            "every run ends once the faults stop",
            "the engine decides as the reference model does",
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn an_open_that_parks_runs_without_their_claim_entries_is_caught() {
    // A run pending or let go when the process died, and written by a
    // checkpoint, stays out of memory after the restart; without its claim
    // index entry no worker claims it again (first caught at seeds 15,
    // 1009, 2006, 3000, ... of blocks of 100).
    let (_, invariant) = caught(PlantedBug::ParkAtOpenUnindexed);
    assert!(
        [
            "the engine decides as the reference model does",
            "after every recovery the books equal the model",
            "every run ends once the faults stop",
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn a_claim_that_walks_each_agent_in_turn_is_caught() {
    // The claim index keeps each agent version's runs apart; a claim that
    // walks them one agent after another, not merged by claim order, hands
    // out another run than the model's claim (first caught at seeds 0,
    // 1000, 2000, 3000, 4003, ... of blocks of 100). Once the model and
    // the engine disagree on who holds which run, the lease check or the
    // recovered books can be the first to see it.
    let (_, invariant) = caught(PlantedBug::ClaimAgentsInTurn);
    assert!(
        [
            "the engine decides as the reference model does",
            "after every recovery the books equal the model",
            "no mutation accepted from a stale lease",
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn a_sweep_that_skips_parked_runs_is_caught() {
    let (_, invariant) = caught(PlantedBug::SweepSkipsParked);
    assert_eq!(invariant, "the stuck runs swept are the books'");
}

#[test]
fn a_saga_that_undoes_its_first_step_first_is_caught_by_the_saga_check() {
    let (_, invariant) = caught(PlantedBug::UndoFirstStepFirst);
    assert_eq!(
        invariant,
        "a saga undoes what its run did, last first, each once"
    );
}

#[test]
fn a_run_that_ends_without_its_saga_is_caught() {
    // The engine ends the run where the model compensates: the worker's
    // next call (or the books at recovery) disagrees with the model, the
    // model's run never ends (no worker claims a run the engine ended), or
    // the end-of-run saga check finds the act never undone.
    let (_, invariant) = caught(PlantedBug::EndWithoutCompensating);
    assert!(
        [
            "the engine decides as the reference model does",
            "after every recovery the books equal the model",
            "every run ends once the faults stop",
            "a saga undoes what its run did, last first, each once"
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn granting_a_resource_another_run_holds_is_caught() {
    // The model, which holds the other run's live hold, refuses the grant;
    // had it not, the world would see two runs act under one customer.
    let (_, invariant) = caught(PlantedBug::ResourceIgnoresHolder);
    assert!(
        [
            "the engine decides as the reference model does",
            "a resource is held by one run at a time"
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn a_compare_and_set_that_ignores_the_version_read_is_caught() {
    let (_, invariant) = caught(PlantedBug::SharedSetBlind);
    assert!(
        [
            "the engine decides as the reference model does",
            "a registry written by compare-and-set loses no update"
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn a_prune_that_takes_blobs_kept_runs_share_is_caught() {
    // Every run of a workflow saves the same plan part: once a checkpoint
    // writes the prune, the recovered books lack a blob the model keeps,
    // or a kept run's checkpoint names a part that is gone (when a worker
    // loads it, or when a clean close checkpoints the state store).
    let (_, invariant) = caught(PlantedBug::PruneSharedBlobs);
    assert!(
        [
            "after every recovery the books equal the model",
            "no error without a fault",
            "a clean close succeeds"
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn hot_books_that_drop_the_blob_references_a_save_adds_are_caught() {
    // A save's new part adds a reference to its run's; dropped from
    // memory, the run's references there lack it, and the counts and
    // references the engine keeps part from the model's.
    let (_, invariant) = caught(PlantedBug::ForgetAddedBlobRefs);
    assert!(
        [
            "a snapshot of the live database holds its books at its LSN",
            "after every recovery the books equal the model",
            "the engine decides as the reference model does",
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn an_open_that_releases_only_the_leases_the_state_store_held_is_caught_by_the_model() {
    // A lease granted since the last checkpoint is in the log only: an open
    // that reads the leases before replaying it leaves that one held by the
    // process that died, where the model released it.
    let (_, invariant) = caught(PlantedBug::ReleaseStoredLeasesOnly);
    assert_eq!(invariant, "after every recovery the books equal the model");
}

#[test]
fn a_migration_that_keeps_the_cursor_little_endian_is_caught_by_the_migration_check() {
    // Every seed redeploys its workers to checkpoint schema 2 (at its first
    // crash, or when the faults stop): the first run resumed from a
    // schema-1 checkpoint past its first action reads another cursor than
    // the one its checkpoint held.
    let (_, invariant) = caught(PlantedBug::MigrationKeepsByteOrder);
    assert_eq!(invariant, MIGRATION_KEEPS_STATE);
}

#[test]
fn an_append_that_drops_its_base_is_caught_by_the_load_or_the_model() {
    // Schema 1's notes are saved in append form at three saves in four
    // before the redeploy: the engine that stores only the new bytes loads
    // shorter notes than the acknowledged saves made (the worker's load
    // holds them to the model's checkpoint of that version), or a recovery
    // finds the checkpoint's metadata unlike the model's (seeds 2, 1002,
    // 2000, 3021, 4000, 5000, 6000, 7004, 8002, 9000 of blocks of 100).
    let (_, invariant) = caught(PlantedBug::AppendDropsBase);
    assert!(
        [
            CHECKPOINT_LOADS_AS_SAVED,
            "after every recovery the books equal the model"
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn an_operator_request_carried_out_again_is_caught_by_the_request_check() {
    // An operator's answer is lost one time in four, and a request the
    // process died under is sent again once it is up: the engine that
    // takes the repeat for a new request answers it with the command's own
    // answer (seed 0: a cancel sent again).
    let (_, invariant) = caught(PlantedBug::RepeatOperatorRequest);
    assert_eq!(
        invariant,
        "an operator's request is carried out once, however often it is sent"
    );
}

#[test]
fn a_look_that_counts_the_stored_copies_of_runs_in_memory_is_caught() {
    // Every run a checkpoint wrote and memory still holds is counted a
    // second time, from the state store: the first operator's look after a
    // checkpoint disagrees with the books (seed 0 of every block of 100).
    let (_, invariant) = caught(PlantedBug::LookCountsStoredCopies);
    assert_eq!(
        invariant,
        "the engine's look at its live books is theirs at its LSN"
    );
}

#[test]
fn a_shared_read_kept_past_a_checkpoint_is_caught() {
    // After a checkpoint lets runs leave memory, the engine reads them
    // from a snapshot taken before it: their latest state is missing, and
    // the engine decides otherwise than the reference model.
    // Seed 0: the books copied for a check find a run's audit shorter than
    // memory says (an assertion of the engine's, reported as a failure of
    // the schedule); replayed with its history, an intent read back
    // without its arguments.
    let (_, invariant) = caught(PlantedBug::SharedReadOutlivesCommit);
    assert!(
        [
            actum_sim::agents::PANICKED,
            "an intent keeps the arguments it was sent with",
            "the engine decides as the reference model does",
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn a_read_only_handle_kept_past_the_first_commit_is_caught() {
    // A store reopened after a clean close starts on redb's read-only
    // handle; its first commit opens the writable one. Kept beginning its
    // readers there, the engine reads runs a checkpoint let leave memory
    // as the store held them at open: an intent without its arguments, or
    // a run's audit shorter than memory says (an assertion of the
    // engine's, reported as the seed's failure).
    let (_, invariant) = caught(PlantedBug::ReadOnlyHandleOutlivesWrite);
    assert!(
        [
            actum_sim::agents::PANICKED,
            "an intent keeps the arguments it was sent with",
            "the engine decides as the reference model does",
            "after every recovery the books equal the model",
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn a_blob_cleaner_that_loses_moved_records_is_caught() {
    // Prunes leave dead records in the blob stream; once they are more
    // than half the live bytes, each prune's checkpoint cleans the
    // stream's head. A live record moved without its index entry is read
    // from a chunk that is gone: when an open after a crash replays the
    // log over the state store (seed 21), when a worker loads its
    // checkpoint, when a clean close checkpoints, or when a snapshot of
    // the live database reads the stream (docs/SIMULATION.md).
    let (_, invariant) = caught(PlantedBug::CleanerLosesMoves);
    assert!(
        [
            "recovery succeeds without faults",
            "after every recovery the books equal the model",
            "a snapshot of the live database holds its books at its LSN",
            "no error without a fault",
            "a clean close succeeds"
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn an_append_that_drops_a_base_held_inline_is_caught() {
    // In about half the runs schema 1's notes ask to be held inline, and
    // stay under the limit, so their appends extend a base held in the
    // checkpoint's metadata. Saved as the new bytes alone, a recovery finds
    // the checkpoint unlike the model's, or a worker's load holds shorter
    // notes than the acknowledged saves made (seeds 2, 1002, 2000, 3021,
    // 4008, 5003, 6007, 7004, 8007, 9001 of blocks of 100).
    let (_, invariant) = caught(PlantedBug::InlineAppendDropsBase);
    assert!(
        [
            CHECKPOINT_LOADS_AS_SAVED,
            "after every recovery the books equal the model"
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

#[test]
fn a_claim_row_left_stale_is_caught_by_the_open_that_checks_it() {
    // A run's claim row (what an open files a live run by, without its run
    // row) written only when the run becomes live says "not leased" of a
    // run a worker leased since: the simulator's engines check every claim
    // row against its run row at open (`check_live_claims`), so the next
    // snapshot or recovery fails, naming the run (seeds 5, 1001, 2000,
    // 3000, 4000, 5003, 6001, 7000, 8000, 9000 of blocks of 100).
    let (_, invariant) = caught(PlantedBug::StaleLiveClaims);
    assert!(
        [
            "a snapshot of the live database holds its books at its LSN",
            "recovery succeeds without faults"
        ]
        .contains(&invariant.as_str()),
        "{invariant}"
    );
}

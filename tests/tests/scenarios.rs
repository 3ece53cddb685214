//! The scenario, crash, format and simulator tests of the engine, one test
//! binary (each file beside this one is a module of it, named after the
//! file): linked once, where thirty-five binaries each linked the engine,
//! redb and the PostgreSQL client. Run one file's tests with its module
//! name as the filter, e.g. `cargo test -p actum-tests --test scenarios
//! sim_agents::`.

#[path = "support/mod.rs"]
mod support;

#[path = "a_panic_inside_redb_is_an_error_of_the_call_that_met_it.rs"]
mod a_panic_inside_redb_is_an_error_of_the_call_that_met_it;
#[path = "a_small_database_is_small.rs"]
mod a_small_database_is_small;
#[path = "checkpoint_parts_grow_by_appending.rs"]
mod checkpoint_parts_grow_by_appending;
#[path = "coordination_resources_and_shared_keys.rs"]
mod coordination_resources_and_shared_keys;
#[path = "db_directory.rs"]
mod db_directory;
#[path = "effects_exactly_once_across_crashes.rs"]
mod effects_exactly_once_across_crashes;
#[path = "engine_concurrent_commits.rs"]
mod engine_concurrent_commits;
#[path = "engine_crash_at_every_io_matches_the_model.rs"]
mod engine_crash_at_every_io_matches_the_model;
#[path = "errors_keep_their_causes_typed.rs"]
mod errors_keep_their_causes_typed;
#[path = "every_engine_method_has_a_doc_example.rs"]
mod every_engine_method_has_a_doc_example;
#[path = "fencing_and_engine_derived_keys.rs"]
mod fencing_and_engine_derived_keys;
#[path = "fuzz_corpus_replay.rs"]
mod fuzz_corpus_replay;
#[path = "golden_bytes_pin_the_formats.rs"]
mod golden_bytes_pin_the_formats;
#[path = "large_receipts_go_to_the_blob_store.rs"]
mod large_receipts_go_to_the_blob_store;
#[path = "lost_acks_late_facts_and_compensations.rs"]
mod lost_acks_late_facts_and_compensations;
#[path = "operations_metrics_stuck_and_audit_export.rs"]
mod operations_metrics_stuck_and_audit_export;
#[path = "operator_moves_runs_between_versions.rs"]
mod operator_moves_runs_between_versions;
#[path = "operator_pause_resume_cancel.rs"]
mod operator_pause_resume_cancel;
#[path = "operator_retries_and_forks_runs.rs"]
mod operator_retries_and_forks_runs;
#[path = "parked_runs_leave_memory.rs"]
mod parked_runs_leave_memory;
#[path = "queries_list_runs_effects_and_arguments.rs"]
mod queries_list_runs_effects_and_arguments;
#[path = "replay_of_an_unappliable_record_is_corrupt_not_a_panic.rs"]
mod replay_of_an_unappliable_record_is_corrupt_not_a_panic;
#[path = "retention_prunes_old_runs_and_the_files_stop_growing.rs"]
mod retention_prunes_old_runs_and_the_files_stop_growing;
#[path = "sagas_undo_last_first_across_crashes.rs"]
mod sagas_undo_last_first_across_crashes;
#[path = "sim_agents.rs"]
mod sim_agents;
#[path = "sim_agents_planted_bugs.rs"]
mod sim_agents_planted_bugs;
#[path = "sim_agents_proptest.rs"]
mod sim_agents_proptest;
#[path = "sim_campaign.rs"]
mod sim_campaign;
#[path = "sim_planted_bugs.rs"]
mod sim_planted_bugs;
#[path = "sim_proptest.rs"]
mod sim_proptest;
#[path = "sim_runtime.rs"]
mod sim_runtime;
#[path = "sim_user_harness.rs"]
mod sim_user_harness;
#[path = "snapshots_of_a_live_database.rs"]
mod snapshots_of_a_live_database;
#[path = "the_books_are_layered.rs"]
mod the_books_are_layered;
#[path = "waits_across_a_restart.rs"]
mod waits_across_a_restart;

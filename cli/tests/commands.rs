//! The `actum` command's tests, one test binary (each file beside this one
//! is a module of it, named after the file): linked once, where fifteen
//! binaries each linked the engine, its PostgreSQL client and an HTTP
//! client. Run one file's tests with its module name as the filter, e.g.
//! `cargo test -p actum-cli --test commands verify_names_the_damaged_file_and_offset::`.

#[path = "support/mod.rs"]
mod support;

#[path = "answers_reach_the_run.rs"]
mod answers_reach_the_run;
#[path = "commands_take_a_postgres_url.rs"]
mod commands_take_a_postgres_url;
#[path = "crash_demo_quick_mode.rs"]
mod crash_demo_quick_mode;
#[path = "migrate_moves_runs_to_another_version.rs"]
mod migrate_moves_runs_to_another_version;
#[path = "missing_foreign_and_locked_directories.rs"]
mod missing_foreign_and_locked_directories;
#[path = "operator_writes_change_the_run.rs"]
mod operator_writes_change_the_run;
#[path = "prune_removes_old_runs.rs"]
mod prune_removes_old_runs;
#[path = "read_commands_answer_on_a_live_database.rs"]
mod read_commands_answer_on_a_live_database;
#[path = "read_commands_keep_their_exit_codes_on_damaged_copies.rs"]
mod read_commands_keep_their_exit_codes_on_damaged_copies;
#[path = "read_commands_report_the_known_books.rs"]
mod read_commands_report_the_known_books;
#[path = "retry_and_fork_a_failed_run.rs"]
mod retry_and_fork_a_failed_run;
#[path = "runs_and_show_tell_the_known_books.rs"]
mod runs_and_show_tell_the_known_books;
#[path = "tail_runs_and_show_on_a_live_database.rs"]
mod tail_runs_and_show_on_a_live_database;
#[path = "ui_serves_pages_and_guards_writes.rs"]
mod ui_serves_pages_and_guards_writes;
#[path = "verify_names_the_damaged_file_and_offset.rs"]
mod verify_names_the_damaged_file_and_offset;
#[path = "writes_reach_a_live_engine.rs"]
mod writes_reach_a_live_engine;

//! The PostgreSQL backend under real faults (`actum_sim::pgkill`): the
//! kill loop's quick mode (process kills, server crashes, cut connections
//! and writes the server refuses) finds nothing wrong, and each planted bug
//! of the backend is caught. Needs a server: scripts/postgres.sh (test.sh runs
//! this under it) sets ACTUM_PG_URL and what crashing the server takes;
//! without one the tests skip, unless ACTUM_PG_REQUIRED is set.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use std::path::Path;

use actum::planted::PlantedBug;
use actum_sim::pgkill::{KillConfig, drive};

/// Whether a server is there to test against.
fn server() -> bool {
    actum::pg::server_for_tests().is_some()
}

fn worker() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_actum-pg-kill"))
}

/// One test at a time: they crash the one server they share.
static SERVER: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn three_hundred_kills_and_twenty_server_crashes_break_no_promise() {
    if !server() {
        return;
    }
    let _turn = SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let config = KillConfig::quick(1);
    let report = drive(&config, worker()).unwrap();
    eprintln!("pg-kill quick: {}", report);
    assert!(report.kills >= 300 && report.crashes >= 20, "{}", report);
    assert!(
        report.refusals >= 50,
        "the server refused writes: {}",
        report
    );
    assert!(report.checked.violations.is_empty(), "{}", report);
    let completed = report.checked.ended.get("completed").copied().unwrap_or(0);
    assert_eq!(completed, report.runs, "every run completed: {}", report);
    assert!(report.runs > 100, "the loop did work: {}", report);
}

/// Runs short loops with `bug` planted until one finds a violation (at
/// most `rounds`): the violations found. A loop of 20 kills and 6 server
/// crashes (about 8 s) caught each bug at its first seed in two runs of
/// three, the refused write at its second in the other (2026-12-01); loops
/// of twice that caught them all at the first, in twice the time.
fn caught(bug: PlantedBug, rounds: u64) -> Vec<String> {
    let _turn = SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for seed in 1..=rounds {
        let config = KillConfig {
            kills: 20,
            crashes: 6,
            planted: Some(bug),
            ..KillConfig::quick(seed)
        };
        let report = drive(&config, worker()).unwrap();
        eprintln!("pg-kill {} seed {seed}: {}", bug.name(), report);
        if !report.checked.violations.is_empty() {
            // (Expected: the world is not left behind in the temp dir,
            // unless asked for.)
            if let Some(kept) = report
                .kept
                .as_ref()
                .filter(|_| std::env::var_os("ACTUM_PG_KILL_KEEP").is_none())
            {
                std::fs::remove_dir_all(kept).unwrap();
            }
            return report.checked.violations;
        }
    }
    Vec::new()
}

#[test]
fn a_command_decided_outside_its_transaction_is_caught() {
    if !server() {
        return;
    }
    let found = caught(PlantedBug::PgDecideOutsideTransaction, 3);
    assert!(
        found
            .iter()
            .any(|v| v.contains("inconsistent") || v.contains("charged")),
        "{found:#?}"
    );
}

#[test]
fn a_commit_answered_before_it_is_durable_is_caught() {
    if !server() {
        return;
    }
    let found = caught(PlantedBug::PgAnswerBeforeDurable, 6);
    assert!(
        found.iter().any(|v| v.contains("charged")
            || v.contains("ledger does not hold")
            || v.contains("the books do not hold it")),
        "{found:#?}"
    );
}

#[test]
fn a_refused_write_answered_as_committed_is_caught() {
    if !server() {
        return;
    }
    // The loop's trigger refuses a few writes to runs and to the ledger;
    // answered as committed, a refused intent or outcome is an act the
    // handler saw succeed that the ledger never holds.
    let found = caught(PlantedBug::PgRefusedWriteAsCommitted, 6);
    assert!(
        found
            .iter()
            .any(|v| v.contains("does not hold it confirmed") || v.contains("charged")),
        "{found:#?}"
    );
}

#[test]
fn a_stale_optimistic_write_answered_as_committed_is_caught() {
    if !server() {
        return;
    }
    // An intent or an outcome decided on a read its run's lease keeper
    // renewed behind (or another worker claimed behind) is refused by the
    // write's guard; answered as committed, the handler acts on an intent
    // the ledger never holds, or sees an outcome the ledger never holds.
    let found = caught(PlantedBug::PgStaleWriteAsCommitted, 6);
    assert!(
        found.iter().any(|v| v.contains("does not hold")
            || v.contains("charged")
            || v.contains("without a durable intent")),
        "{found:#?}"
    );
}

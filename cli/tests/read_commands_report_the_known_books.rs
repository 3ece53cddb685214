//! The read-only commands against a database whose contents the test
//! built through the engine: `inspect --json` counts exactly those runs,
//! leases, effects and waits; `export --run` is the engine's audit, line
//! for line; `stuck` finds the old wait, the unknown effect and the paused
//! run (with the operator's reason) and nothing else; `verify` passes; and none of them changes a byte of the directory,
//! even where an open would cut a torn tail.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use actum::books::RunId;
use actum::engine::{Engine, EngineOptions};
use serde_json::Value;
use support::*;

fn json(output: &std::process::Output) -> Value {
    assert_eq!(code(output), 0, "{}", stderr(output));
    serde_json::from_str(&stdout(output)).unwrap()
}

#[test]
fn inspect_reports_the_exact_counts_of_the_known_books() {
    let db = known_db();
    let found = json(&actum_on(db.path(), &["inspect", "{}", "--json"]));
    assert_eq!(found["runs"], 7);
    let states = &found["runs_by_state"];
    let expected = [
        ("pending", 1),
        ("running", 2),
        ("waiting_tool", 1),
        ("waiting_human", 0),
        ("paused", 1),
        ("completed", 1),
        ("failed", 0),
        ("cancelled", 1),
    ];
    for (state, count) in expected {
        assert_eq!(states[state], count, "{state}: {states}");
    }
    // Per agent version: what each still serves.
    let agents = &found["runs_by_agent"];
    assert_eq!(agents["shop@1"]["runs"], 2, "{agents}");
    assert_eq!(agents["shop@1"]["not_over"], 1, "the pending run");
    assert_eq!(agents["shop@2"]["runs"], 5, "{agents}");
    assert_eq!(agents["shop@2"]["not_over"], 4, "all but the cancelled run");
    let leases = found["leases"].as_array().unwrap();
    let held: Vec<&str> = leases.iter().map(|l| l["run"].as_str().unwrap()).collect();
    assert_eq!(held, [runs::INTENDED, runs::UNKNOWN]);
    assert!(leases.iter().all(|l| l["worker"] == "w-live"));
    let pending = found["effects_pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["key"], INTENDED_KEY);
    let unknown = found["effects_unknown"].as_array().unwrap();
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0]["key"], UNKNOWN_KEY);
    assert_eq!(unknown[0]["reason"], "timeout");
    let waits = found["waits"].as_array().unwrap();
    assert_eq!(waits.len(), 1);
    assert_eq!(waits[0]["run"], runs::WAITING);
    assert_eq!(waits[0]["waits_for"], "signal paid");
    let sizes = &found["sizes"];
    assert_eq!(sizes["manifest_bytes"], 1024, "two 512-byte copies");
    assert!(sizes["wal_segments"].as_u64().unwrap() >= 1);
    assert!(sizes["state_bytes"].as_u64().unwrap() > 0);
    // The tables say the same to a person.
    let table = actum_on(db.path(), &["inspect", "{}"]);
    assert_eq!(code(&table), 0);
    let text = stdout(&table);
    assert!(text.contains("7 runs"), "{text}");
    assert!(
        text.contains(INTENDED_KEY) && text.contains(UNKNOWN_KEY),
        "{text}"
    );
    assert!(text.contains("open waits: 1"), "{text}");
    let shop2 = text
        .lines()
        .find(|l| l.starts_with("shop@2"))
        .unwrap_or_default();
    let columns: Vec<&str> = shop2.split_whitespace().collect();
    assert_eq!(columns, ["shop@2", "5", "4"], "{text}");
}

#[test]
fn export_of_a_run_is_its_audit_journal_line_for_line() {
    let db = known_db();
    let out = actum_on(db.path(), &["export", "{}", "--run", runs::DONE]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let engine = open_retrying(|| Engine::open_read_only(db.path(), EngineOptions::default()));
    let audit = engine.audit(&RunId::new(runs::DONE).unwrap()).unwrap();
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), audit.len());
    assert!(
        audit.len() >= 6,
        "create, lease, start, intent, outcome, end"
    );
    for (line, entry) in lines.iter().zip(&audit) {
        assert_eq!(line["run"], runs::DONE);
        assert_eq!(line["seq"], entry.seq);
        assert_eq!(line["at_ms"], entry.at_ms);
        assert_eq!(line["what"], entry.what.to_string());
        assert_eq!(line["why"], entry.why.as_str());
    }
    let mut direct = Vec::new();
    engine
        .export_audit(&RunId::new(runs::DONE).unwrap(), &mut direct)
        .unwrap();
    assert_eq!(out.stdout, direct, "the command adds nothing to the lines");
    drop(engine);
    // Every run: each run's lines, in run id order.
    let all = actum_on(db.path(), &["export", "{}", "--all"]);
    assert_eq!(code(&all), 0, "{}", stderr(&all));
    let runs_seen: Vec<String> = stdout(&all)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["run"].to_string())
        .collect();
    let mut distinct = runs_seen.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 7, "{distinct:?}");
    let missing = actum_on(db.path(), &["export", "{}", "--run", "r-nope"]);
    assert_eq!(code(&missing), 2);
    assert!(
        stderr(&missing).contains("run r-nope"),
        "{}",
        stderr(&missing)
    );
}

/// Each row of `stuck --json` as (run, kind, where it is stuck).
fn stuck_at(rows: &Value) -> Vec<(&str, &str, &str)> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run"].as_str().unwrap(),
                r["kind"].as_str().unwrap(),
                r["at"].as_str().unwrap(),
            )
        })
        .collect()
}

#[test]
fn stuck_lists_the_old_wait_the_unknown_effect_and_the_paused_run_and_nothing_younger() {
    let db = known_db();
    let rows = json(&actum_on(
        db.path(),
        &["stuck", "{}", "--older-than", "1h", "--json"],
    ));
    let found = stuck_at(&rows);
    let rows = rows.as_array().unwrap();
    assert_eq!(
        found,
        [
            (runs::PAUSED, "paused", "-"),
            (runs::UNKNOWN, "unknown", UNKNOWN_KEY),
            (runs::WAITING, "waiting", "hook"),
        ]
    );
    // Why it is paused: the journal's words, and what lets it go on.
    let what = rows[0]["what"].as_str().unwrap();
    assert!(
        what.starts_with("operator ops-anna (pause): test") && what.contains("actum resume"),
        "{what}"
    );
    assert!(
        rows.iter()
            .all(|r| r["for_ms"].as_u64().unwrap() >= 3 * 3_600_000 - 60_000)
    );
    let young = json(&actum_on(
        db.path(),
        &["stuck", "{}", "--older-than", "4h", "--json"],
    ));
    assert_eq!(young.as_array().unwrap().len(), 0);
    // Without --older-than, an hour: the same rows as asking for 1h.
    // (their ages differ by the time between the two commands).
    let default = json(&actum_on(db.path(), &["stuck", "{}", "--json"]));
    assert_eq!(stuck_at(&default), found);
    let table = actum_on(db.path(), &["stuck", "{}", "--older-than", "90m"]);
    assert!(stdout(&table).starts_with("3 run(s) stuck for 1h 30m or longer"));
    let bad = actum_on(db.path(), &["stuck", "{}", "--older-than", "soon"]);
    assert_eq!(code(&bad), 2);
    assert!(stderr(&bad).contains("not a duration"), "{}", stderr(&bad));
}

#[test]
fn verify_passes_on_an_intact_database_and_says_what_it_checked() {
    let db = known_db();
    let out = actum_on(db.path(), &["verify", "{}"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    for file in ["MANIFEST-0", "MANIFEST-1", "state.redb", "wal"] {
        assert!(text.contains(file), "{file} is named: {text}");
    }
    assert!(text.contains(": intact"), "{text}");
    let report = json(&actum_on(db.path(), &["verify", "{}", "--json"]));
    assert_eq!(report["damaged"], false);
    assert!(report["wal_records_checked"].as_u64().unwrap() > 10);
    assert!(report["state_rows_checked"].as_u64().unwrap() > 10);
}

/// The bytes of a record the engine never acknowledged, half written at
/// the next group boundary after the log's last record: a torn write.
fn tear_the_tail(db: &std::path::Path) {
    use actum::wal::format::{
        RECORD_HEADER_BYTES, RecordMeta, SEGMENT_HEADER_BYTES, decode_record_header, encode_record,
        record_seed,
    };
    let manifest = std::fs::read(db.join("MANIFEST-0")).unwrap();
    let id = actum::manifest::decode(&manifest).unwrap().database_id;
    let path = segment(db, 1);
    let bytes = std::fs::read(&path).unwrap();
    let seed = record_seed(id, actum::SegmentId(1));
    let (mut at, mut last) = (SEGMENT_HEADER_BYTES as usize, None);
    // Bounded by the segment: walk the records the engine wrote.
    while let Some(h) = decode_record_header(&bytes[at..], seed) {
        last = Some(h);
        at = usize::try_from(h.next_offset(at as u64)).unwrap();
    }
    let last = last.unwrap();
    let mut torn = Vec::new();
    let meta = RecordMeta {
        lsn: last.lsn.next(),
        ack: last.lsn,
        epoch: last.epoch,
        more: false,
        group_end: true,
    };
    encode_record(&mut torn, seed, meta, &[7u8; 300]);
    torn.truncate(RECORD_HEADER_BYTES + 100);
    let mut bytes = bytes;
    bytes[at..at + torn.len()].copy_from_slice(&torn);
    std::fs::write(&path, bytes).unwrap();
}

#[test]
fn read_only_commands_leave_every_file_byte_identical_even_over_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    // Dropped, not closed: a crash, so an open has records to replay.
    drop(build_known(dir.path()));
    tear_the_tail(dir.path());
    let before = hash_tree(dir.path());
    let commands: [&[&str]; 7] = [
        &["inspect", "{}"],
        &["inspect", "{}", "--json"],
        &["verify", "{}"],
        &["verify", "{}", "--json"],
        &["export", "{}", "--all"],
        &["export", "{}", "--run", runs::WAITING],
        &["stuck", "{}", "--older-than", "1s"],
    ];
    for args in commands {
        let out = actum_on(dir.path(), args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert_eq!(hash_tree(dir.path()), before, "{args:?} changed a file");
    }
    let verified = stdout(&actum_on(dir.path(), &["verify", "{}"]));
    assert!(verified.contains("torn tail"), "{verified}");
    // The check can fail: an open for writing does change the directory.
    Engine::open(dir.path(), EngineOptions::default())
        .unwrap()
        .close()
        .unwrap();
    assert_ne!(hash_tree(dir.path()), before);
}

//! `actum runs` lists exactly the runs of the known database, filtered and
//! paged without a gap or a repeat; `actum show` tells one run's story
//! from its books (states, steps with outcome and receipt size, waits, the
//! journal line for line); neither changes a byte; bad input is refused
//! with a message that names it.

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

fn listed(db: &std::path::Path, extra: &[&str]) -> (Vec<String>, Value) {
    let mut args = vec!["runs", "{}", "--json"];
    args.extend_from_slice(extra);
    let found = json(&actum_on(db, &args));
    let ids = found["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap().to_string())
        .collect();
    (ids, found["next_after"].clone())
}

#[test]
fn runs_lists_filters_and_pages_the_known_runs() {
    let db = known_db();
    let before = hash_tree(db.path());
    let mut all = vec![
        runs::DONE,
        runs::PENDING,
        runs::PAUSED,
        runs::CANCELLED,
        runs::INTENDED,
        runs::UNKNOWN,
        runs::WAITING,
    ];
    all.sort_unstable();
    let (ids, next) = listed(db.path(), &[]);
    assert_eq!(ids, all);
    assert_eq!(next, Value::Null, "every run was seen");

    let (ids, _) = listed(db.path(), &["--state", "running"]);
    assert_eq!(ids, [runs::INTENDED, runs::UNKNOWN]);
    let (ids, _) = listed(db.path(), &["--kind", "shop", "--version", "1"]);
    assert_eq!(ids, [runs::DONE, runs::PENDING]);
    let (ids, _) = listed(db.path(), &["--kind", "other"]);
    assert!(ids.is_empty());
    // The history is three hours old.
    let (ids, _) = listed(db.path(), &["--since", "1h"]);
    assert!(ids.is_empty(), "{ids:?}");
    let (ids, _) = listed(db.path(), &["--since", "1d"]);
    assert_eq!(ids.len(), 7);

    // Pages of three: no gap, no repeat.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..4 {
        let mut extra = vec!["--limit", "3"];
        if let Some(a) = &after {
            extra.extend(["--after", a.as_str()]);
        }
        let (ids, next) = listed(db.path(), &extra);
        assert!(ids.len() <= 3);
        paged.extend(ids);
        match next.as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(paged, all);

    // For a person: a table, and a hint at the next page.
    let table = actum_on(db.path(), &["runs", "{}", "--limit", "2"]);
    assert_eq!(code(&table), 0, "{}", stderr(&table));
    let text = stdout(&table);
    assert!(text.starts_with("RUN"), "{text}");
    assert!(text.contains(all[0]) && text.contains(all[1]), "{text}");
    assert!(text.contains(&format!("--after {}", all[1])), "{text}");
    let none = actum_on(db.path(), &["runs", "{}", "--kind", "other"]);
    assert!(stdout(&none).contains("no run in"), "{}", stdout(&none));

    // Bad input names what it takes.
    let bad = actum_on(db.path(), &["runs", "{}", "--state", "asleep"]);
    assert_eq!(code(&bad), 2);
    assert!(stderr(&bad).contains("waiting_human"), "{}", stderr(&bad));
    let bad = actum_on(db.path(), &["runs", "{}", "--limit", "0"]);
    assert_eq!(code(&bad), 2);
    assert_eq!(hash_tree(db.path()), before, "runs changed the directory");
}

#[test]
fn show_tells_a_run_as_its_books_hold_it() {
    let db = known_db();
    let before = hash_tree(db.path());
    let audit = {
        let engine = open_retrying(|| Engine::open_read_only(db.path(), EngineOptions::default()));
        engine.audit(&RunId::new(runs::DONE).unwrap()).unwrap()
    };

    let story = json(&actum_on(db.path(), &["show", "{}", runs::DONE, "--json"]));
    assert_eq!(story["head"]["run"], runs::DONE);
    assert_eq!(story["head"]["state"], "completed");
    assert_eq!(story["head"]["agent"], "shop@1");
    let states: Vec<(Value, Value)> = story["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["from"].clone(), s["to"].clone()))
        .collect();
    assert_eq!(
        states,
        [
            (Value::Null, "pending".into()),
            ("pending".into(), "running".into()),
            ("running".into(), "completed".into()),
        ]
    );
    let steps = story["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0]["key"], format!("{}/pay/1", runs::DONE));
    assert_eq!(steps[0]["tool"], "bank.transfer");
    assert_eq!(steps[0]["class"], "queryable");
    assert_eq!(steps[0]["outcome"], "confirmed");
    assert_eq!(steps[0]["receipt_bytes"], 4, "tx-1");
    assert_eq!(steps[0]["rationale"], "invoice due");
    // The journal is the engine's audit, line for line.
    let journal = story["journal"].as_array().unwrap();
    assert_eq!(journal.len(), audit.len());
    for (line, entry) in journal.iter().zip(&audit) {
        assert_eq!(line["seq"], entry.seq);
        assert_eq!(line["at_ms"], entry.at_ms);
        assert_eq!(line["what"], entry.what.to_string());
    }

    let unknown = json(&actum_on(
        db.path(),
        &["show", "{}", runs::UNKNOWN, "--json"],
    ));
    let step = &unknown["steps"][0];
    assert_eq!(step["key"], UNKNOWN_KEY);
    assert_eq!(
        (&step["outcome"], &step["detail"]),
        (&"unknown".into(), &"timeout".into())
    );
    assert_eq!(unknown["head"]["lease"]["live"], true);

    let waiting = json(&actum_on(
        db.path(),
        &["show", "{}", runs::WAITING, "--json"],
    ));
    let wait = &waiting["waits"][0];
    assert_eq!(wait["waits_for"], "signal paid");
    assert_eq!(wait["how"], "open");
    assert_eq!(wait["ended_ms"], Value::Null);

    // For a person: the same, with durations and local times.
    let text = stdout(&actum_on(db.path(), &["show", "{}", runs::DONE]));
    assert!(
        text.starts_with(&format!("run {}: completed (agent shop@1)", runs::DONE)),
        "{text}"
    );
    for needle in [
        "states",
        "steps",
        "bank.transfer",
        "confirmed",
        "4 B",
        "journal (",
        "invoice due",
    ] {
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    let text = stdout(&actum_on(db.path(), &["show", "{}", runs::WAITING]));
    assert!(
        text.contains("signal paid") && text.contains("so far"),
        "{text}"
    );

    let missing = actum_on(db.path(), &["show", "{}", "r-nobody"]);
    assert_eq!(code(&missing), 2);
    assert!(
        stderr(&missing).contains("no run r-nobody"),
        "{}",
        stderr(&missing)
    );
    let bad = actum_on(db.path(), &["show", "{}", "not a run id!"]);
    assert_eq!(code(&bad), 2);
    assert!(!stderr(&bad).contains("panicked"), "{}", stderr(&bad));
    assert_eq!(hash_tree(db.path()), before, "show changed the directory");
}

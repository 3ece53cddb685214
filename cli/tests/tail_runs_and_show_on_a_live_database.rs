//! `actum tail` follows the journal of a database an engine in this process
//! holds: runs created after its first look are printed by a later one, in
//! LSN order, each once; `--run` keeps one run's lines. `runs` and `show`
//! answer on the live database too, from a snapshot, and say so.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use actum::books::{CreateRun, RunId, digest_of};
use actum::{Engine, EngineOptions};
use support::*;

fn create(engine: &Engine, name: &str) {
    engine
        .create_run(CreateRun {
            run: RunId::new(name).unwrap(),
            input_digest: digest_of(name.as_bytes()),
            agent_version: "tail@1".into(),
            trace_id: "t".into(),
            parent: None,
            input: None,
        })
        .unwrap();
}

/// The LSNs of the lines `tail` printed, and their texts.
fn lines(out: &str) -> Vec<(u64, String)> {
    out.lines()
        .filter_map(|l| {
            let (lsn, rest) = l.trim_start().split_once(' ')?;
            Some((lsn.parse().ok()?, rest.to_string()))
        })
        .collect()
}

#[test]
fn tail_prints_what_is_committed_after_it_starts_each_line_once() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open_retrying(|| Engine::open(dir.path(), EngineOptions::default()));
    create(&engine, "before-1");
    let mut child = Command::new(env!("CARGO_BIN_EXE_actum"))
        .args([
            "tail",
            dir.path().to_str().unwrap(),
            "--reads",
            "3",
            "--interval",
            "400ms",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its first look has happened once it says where it starts.
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.starts_with("following "), "{first}");
    assert!(first.contains("live database"), "{first}");
    for n in 0..3 {
        create(&engine, &format!("after-{n}"));
    }
    let status = child.wait().unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success(), "{out}");
    let printed = lines(&out);
    let names: Vec<&str> = printed
        .iter()
        .filter_map(|(_, t)| t.split_whitespace().nth(3))
        .collect();
    assert_eq!(names, ["after-0", "after-1", "after-2"], "{out}");
    let lsns: Vec<u64> = printed.iter().map(|(l, _)| *l).collect();
    assert!(lsns.windows(2).all(|w| w[0] < w[1]), "{out}");
    assert!(
        printed
            .iter()
            .all(|(_, t)| t.contains("created (agent tail@1")),
        "{out}"
    );

    // From the start, one run only.
    let out = actum_on(
        dir.path(),
        &[
            "tail",
            "{}",
            "--from-start",
            "--reads",
            "1",
            "--run",
            "after-1",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let printed = lines(&stdout(&out));
    assert_eq!(printed.len(), 1, "{}", stdout(&out));
    assert!(
        printed[0].1.contains("after-1  created"),
        "{}",
        stdout(&out)
    );

    // runs and show answer on the live database, from a snapshot.
    let out = actum_on(dir.path(), &["runs", "{}", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("live database"), "{}", stderr(&out));
    let listed: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(listed["runs"].as_array().unwrap().len(), 4);
    let out = actum_on(dir.path(), &["show", "{}", "after-2"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("(live database"), "{}", stdout(&out));
    drop(engine);
}

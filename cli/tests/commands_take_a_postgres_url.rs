//! The commands that take a database directory take a `postgres://` URL in
//! its place: the reads say the server they read, the writes change the
//! books in the database (seen by an engine another process has open), and
//! the commands about a directory's files (`verify`, `repair`, `tail`)
//! refuse the URL, naming the server without its password.
//!
//! They need a server: `scripts/postgres.sh` starts one and sets
//! ACTUM_PG_URL to it (and ACTUM_PG_REQUIRED=1). Without ACTUM_PG_URL the
//! tests skip, unless ACTUM_PG_REQUIRED is set: then they fail. Each test
//! makes a database of its own on the server.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use actum::books::{RunId, RunState};
use actum::engine::{Engine, EngineOptions};
use support::*;

/// A new database holding the known runs ([`support::runs`]), and an
/// engine open on it, as a worker process would have it open while the
/// commands run.
fn known_database(prefix: &str) -> Option<(String, Engine)> {
    let server = actum::pg::server_for_tests()?;
    let url = actum::pg::scratch_database(&server, prefix).unwrap();
    let engine = Engine::open_postgres(&url, EngineOptions::default()).unwrap();
    fill_known(&engine);
    Some((url, engine))
}

fn state_of(engine: &Engine, run: &str) -> RunState {
    engine
        .run(&RunId::new(run).unwrap())
        .unwrap()
        .unwrap()
        .state
}

/// The server as errors name it: the URL without its password.
fn server_of(url: &str) -> String {
    actum::pg::without_password(url)
}

#[test]
fn read_commands_read_the_books_and_name_the_server() {
    let Some((url, engine)) = known_database("cli_reads") else {
        return;
    };
    let server = server_of(&url);

    let listed = actum(&["runs", &url]);
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    for run in [runs::DONE, runs::PENDING, runs::PAUSED, runs::WAITING] {
        assert!(stdout(&listed).contains(run), "{}", stdout(&listed));
    }
    assert!(
        stderr(&listed).contains(&format!("from PostgreSQL {server}")),
        "{}",
        stderr(&listed)
    );
    let json = actum(&["runs", &url, "--state", "paused", "--json"]);
    assert_eq!(code(&json), 0, "{}", stderr(&json));
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["runs"].as_array().unwrap().len(), 1, "{value}");
    assert_eq!(value["runs"][0]["run"], runs::PAUSED, "{value}");

    let shown = actum(&["show", &url, runs::DONE]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    let text = stdout(&shown);
    assert!(
        text.contains(&format!("from PostgreSQL {server}")),
        "{text}"
    );
    assert!(!text.contains("as of LSN"), "{text}");
    assert!(text.contains("bank.transfer"), "{text}");
    let missing = actum(&["show", &url, "r-nobody"]);
    assert_eq!(code(&missing), 2);
    assert!(
        stderr(&missing).contains(&format!("{server}: no run r-nobody")),
        "{}",
        stderr(&missing)
    );

    let inspected = actum(&["inspect", &url]);
    assert_eq!(code(&inspected), 0, "{}", stderr(&inspected));
    let text = stdout(&inspected);
    assert!(
        text.contains(&format!("PostgreSQL {server}: 7 runs")),
        "{text}"
    );
    assert!(
        !text.contains("WAL segment"),
        "no files on a server: {text}"
    );
    assert!(text.contains(support::UNKNOWN_KEY), "{text}");
    let json = actum(&["inspect", &url, "--json"]);
    assert_eq!(code(&json), 0, "{}", stderr(&json));
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["runs"], 7, "{value}");
    assert_eq!(value["postgres"], server.as_str(), "{value}");

    let exported = actum(&["export", &url, "--run", runs::DONE]);
    assert_eq!(code(&exported), 0, "{}", stderr(&exported));
    let lines: Vec<serde_json::Value> = stdout(&exported)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(lines.len() >= 4, "{}", stdout(&exported));
    assert!(lines.iter().all(|l| l["run"] == runs::DONE), "{lines:?}");
    let all = actum(&["export", &url, "--all"]);
    assert_eq!(code(&all), 0, "{}", stderr(&all));
    assert!(stdout(&all).lines().count() > lines.len());

    let stuck = actum(&["stuck", &url, "--older-than", "0s"]);
    assert_eq!(code(&stuck), 0, "{}", stderr(&stuck));
    assert!(stdout(&stuck).contains(runs::WAITING), "{}", stdout(&stuck));
    assert!(
        stdout(&stuck).contains(&format!("from PostgreSQL {server}")),
        "{}",
        stdout(&stuck)
    );
    engine.close().unwrap();
}

#[test]
fn writes_change_the_books_an_open_engine_sees() {
    let Some((url, engine)) = known_database("cli_writes") else {
        return;
    };
    let operate = |verb: &str, run: &str| {
        actum(&[
            verb,
            &url,
            "--run",
            run,
            "--operator",
            "ops-anna",
            "--reason",
            "fraud check",
        ])
    };
    // The engine stays open all along: on PostgreSQL there is no lock to
    // wait for and no channel to go through.
    let paused = operate("pause", runs::PENDING);
    assert_eq!(code(&paused), 0, "{}", stderr(&paused));
    assert!(
        stdout(&paused).contains("pending -> paused"),
        "{}",
        stdout(&paused)
    );
    assert_eq!(state_of(&engine, runs::PENDING), RunState::Paused);
    let again = operate("pause", runs::PENDING);
    assert!(
        stdout(&again).contains("nothing changed"),
        "{}",
        stdout(&again)
    );
    let resumed = operate("resume", runs::PENDING);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    assert_ne!(state_of(&engine, runs::PENDING), RunState::Paused);
    let cancelled = operate("cancel", runs::PAUSED);
    assert_eq!(code(&cancelled), 0, "{}", stderr(&cancelled));
    assert_eq!(state_of(&engine, runs::PAUSED), RunState::Cancelled);
    let journal = engine.audit(&RunId::new(runs::PAUSED).unwrap()).unwrap();
    assert!(
        journal.iter().any(|e| e.why.contains("fraud check")),
        "{journal:?}"
    );

    let signalled = actum(&[
        "signal",
        &url,
        "--run",
        runs::WAITING,
        "--name",
        "paid",
        "--sender",
        "bank",
        "--json",
    ]);
    assert_eq!(code(&signalled), 0, "{}", stderr(&signalled));
    let value: serde_json::Value = serde_json::from_slice(&signalled.stdout).unwrap();
    assert_eq!(value["via"], "opened", "{value}");
    assert!(
        engine
            .waits(&RunId::new(runs::WAITING).unwrap())
            .unwrap()
            .waits
            .iter()
            .all(|w| w.status != actum::books::WaitStatus::Open),
        "the signal ended the wait"
    );

    let budgeted = actum(&[
        "budget",
        &url,
        "--run",
        runs::PENDING,
        "--tool-calls",
        "3",
        "--by",
        "ops-anna",
        "--reason",
        "cap",
    ]);
    assert_eq!(code(&budgeted), 0, "{}", stderr(&budgeted));
    let book = engine.budget(&RunId::new(runs::PENDING).unwrap()).unwrap();
    assert_eq!(book.limits.unwrap().tool_calls, Some(3));

    let reconciled = actum(&[
        "reconcile",
        &url,
        "--key",
        support::UNKNOWN_KEY,
        "--outcome",
        "confirmed",
        "--receipt",
        "sent",
        "--operator",
        "ops-anna",
        "--reason",
        "the mail server's log",
    ]);
    assert_eq!(code(&reconciled), 0, "{}", stderr(&reconciled));
    assert!(
        stdout(&reconciled).contains("-> confirmed"),
        "{}",
        stdout(&reconciled)
    );
    engine.close().unwrap();
}

#[test]
fn directory_commands_refuse_a_url_naming_the_server() {
    let Some(server) = actum::pg::server_for_tests() else {
        return;
    };
    let url = actum::pg::scratch_database(&server, "cli_refuse").unwrap();
    // A password in the URL never reaches the output.
    let (scheme, rest) = url.split_once("://").unwrap();
    let with_password = match rest.split_once('@') {
        Some((user, host)) => format!("{scheme}://{user}:hunter2@{host}"),
        None => format!("{scheme}://actum:hunter2@{rest}"),
    };
    let shown = server_of(&with_password);
    assert!(!shown.contains("hunter2"), "{shown}");
    for args in [
        vec!["verify", with_password.as_str()],
        vec!["repair", with_password.as_str()],
        vec!["tail", with_password.as_str(), "--reads", "1"],
    ] {
        let out = actum(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(said.contains(&shown), "{args:?}: {said}");
        assert!(said.contains("PostgreSQL"), "{args:?}: {said}");
        assert!(!said.contains("hunter2"), "{args:?}: {said}");
        assert!(!said.contains("panicked"), "{args:?}: {said}");
    }
}

#[test]
fn a_server_that_is_not_there_is_a_clear_failure() {
    let url = "postgres://nobody:hunter2@127.0.0.1:1/books";
    for args in [
        vec!["runs", url],
        vec!["inspect", url],
        vec![
            "pause",
            url,
            "--run",
            "r",
            "--operator",
            "o",
            "--reason",
            "x",
        ],
    ] {
        let out = actum(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("postgres://nobody@127.0.0.1:1/books"),
            "{args:?}: {said}"
        );
        assert!(!said.contains("hunter2"), "{args:?}: {said}");
        assert!(said.contains("because: "), "the cause: {args:?}: {said}");
    }
}

/// `actum ui URL` serves the pages of the books in PostgreSQL.
#[test]
fn the_ui_serves_a_url() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let Some((url, engine)) = known_database("cli_ui") else {
        return;
    };
    let server = server_of(&url);
    let mut child = Command::new(env!("CARGO_BIN_EXE_actum"))
        .args(["ui", &url, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains(&format!("serving {server} at ")), "{line}");
    let base = line
        .split_whitespace()
        .last()
        .unwrap()
        .split_once("/?token=")
        .unwrap()
        .0
        .to_string();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let get = |path: &str| {
        let mut response = agent.get(format!("{base}{path}")).call().unwrap();
        let body = response.body_mut().read_to_string().unwrap();
        (response.status().as_u16(), body)
    };
    let (status, runs_page) = get("/runs");
    let (story_status, story) = get(&format!("/runs/{}", runs::DONE));
    let (metrics_status, metrics) = get("/metrics");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(status, 200, "{runs_page}");
    assert!(runs_page.contains(runs::WAITING), "{runs_page}");
    assert!(
        runs_page.contains(&format!("from PostgreSQL {server}")),
        "{runs_page}"
    );
    assert_eq!(story_status, 200, "{story}");
    assert!(story.contains("bank.transfer"), "{story}");
    assert!(!story.contains("as of LSN"), "{story}");
    assert_eq!(metrics_status, 200, "{metrics}");
    engine.close().unwrap();
}

//! `actum pause`, `signal`, `reconcile` and `resume` on a directory an
//! engine in this process holds and serves its operator channel for: each
//! reaches that engine through the socket, lands once however often it
//! is sent under its request id, and, once the engine is closed, the same
//! commands open the directory themselves.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use actum::books::{EffectStatus, RunId, RunState};
use actum::operator::channel::{CHANNEL_DIR, socket_path};
use actum::{Engine, EngineOptions};
use support::*;

fn json(out: &std::process::Output) -> serde_json::Value {
    assert_eq!(code(out), 0, "{}", stderr(out));
    serde_json::from_str(stdout(out).trim()).unwrap()
}

#[test]
fn writes_reach_the_engine_that_serves_its_channel_once_per_request_id() {
    let db = known_db();
    let dir = db.path();
    let options = EngineOptions {
        operator_channel: true,
        ..EngineOptions::default()
    };
    let engine = Arc::new(open_retrying(|| Engine::open(dir, options.clone())));
    let socket = engine.serve_operators().unwrap();
    assert_eq!(socket, socket_path(dir));
    let mode = std::fs::metadata(dir.join(CHANNEL_DIR))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "only the owner may reach the socket");

    // A pause, sent twice under one id: carried out once.
    let pause = [
        "pause",
        "{}",
        "--run",
        runs::PENDING,
        "--operator",
        "ops-anna",
        "--reason",
        "vendor on hold",
        "--request-id",
        "req-1",
        "--json",
    ];
    let first = json(&actum_on(dir, &pause));
    assert_eq!(first["via"], "channel");
    assert_eq!(
        (first["before"].as_str(), first["after"].as_str()),
        (Some("pending"), Some("paused"))
    );
    let run = RunId::new(runs::PENDING).unwrap();
    let after_first = engine.run(&run).unwrap().unwrap();
    assert_eq!(after_first.state, RunState::Paused);
    let again = json(&actum_on(dir, &pause));
    assert_eq!(again["repeated"], true, "{again}");
    assert_eq!(again["by"], "ops-anna");
    assert_eq!(
        engine.run(&run).unwrap().unwrap().version,
        after_first.version,
        "the repeat changed nothing"
    );
    // The same id for another request is refused.
    let reused = actum_on(
        dir,
        &[
            "cancel",
            "{}",
            "--run",
            runs::PENDING,
            "--operator",
            "ops-anna",
            "--reason",
            "x",
            "--request-id",
            "req-1",
        ],
    );
    assert_eq!(code(&reused), 2);
    assert!(
        stderr(&reused).contains("used before for another request"),
        "{}",
        stderr(&reused)
    );
    assert_eq!(engine.run(&run).unwrap().unwrap().state, RunState::Paused);

    // Bytes that are no request change nothing: a frame of another version
    // is dropped unanswered, a body that does not decode is answered with
    // an error, and the next request is served.
    let version = actum::operator::channel::FRAME_VERSION;
    for (garbage, answered) in [
        (vec![9, 0, 0, 0, 0], false),
        ([&[version, 3, 0, 0, 0][..], b"abc"].concat(), true),
    ] {
        let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        stream.write_all(&garbage).unwrap();
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).unwrap();
        assert_eq!(reply.first() == Some(&version), answered, "{reply:?}");
    }
    assert_eq!(
        engine.run(&run).unwrap().unwrap().version,
        after_first.version
    );

    // A signal sent twice under one id ends the wait once and leaves no
    // second signal in the inbox.
    let signal = [
        "signal",
        "{}",
        "--run",
        runs::WAITING,
        "--name",
        "paid",
        "--sender",
        "bank-ops",
        "--request-id",
        "sig-1",
        "--json",
    ];
    let sent = json(&actum_on(dir, &signal));
    assert_eq!(sent["taken_by"], "hook");
    assert_eq!(json(&actum_on(dir, &signal))["repeated"], true);
    let waits = engine.waits(&RunId::new(runs::WAITING).unwrap()).unwrap();
    assert_eq!((waits.signals_received, waits.inbox.len()), (1, 0));

    // A reconcile of the unknown mail, from what the operator found.
    let settled = json(&actum_on(
        dir,
        &[
            "reconcile",
            "{}",
            "--key",
            UNKNOWN_KEY,
            "--outcome",
            "confirmed",
            "--receipt",
            "mail-id-9",
            "--operator",
            "ops-anna",
            "--reason",
            "found in the outbox",
            "--json",
        ],
    ));
    assert_eq!(
        (settled["before"].as_str(), settled["after"].as_str()),
        (Some("unknown"), Some("confirmed"))
    );
    let key = actum::books::EffectKey::parse(UNKNOWN_KEY).unwrap();
    assert!(matches!(
        engine.effect(&key).unwrap().unwrap().status,
        EffectStatus::Confirmed { .. }
    ));

    // A prune runs in the live engine, once per request id.
    let prune = [
        "prune",
        "{}",
        "--older-than",
        "1h",
        "--request-id",
        "prune-1",
        "--json",
    ];
    let pruned = json(&actum_on(dir, &prune));
    assert_eq!(pruned["via"], "channel", "{pruned}");
    assert!(pruned["pruned"].as_u64().unwrap() >= 1, "{pruned}");
    let cancelled = RunId::new(runs::CANCELLED).unwrap();
    assert!(
        engine.run(&cancelled).unwrap().is_none(),
        "over for 3h: pruned"
    );
    assert_eq!(json(&actum_on(dir, &prune))["repeated"], true);

    // Closed, the engine stops serving and removes its socket; the next
    // command opens the directory itself.
    Arc::into_inner(engine).unwrap().close().unwrap();
    assert!(!socket.exists(), "the socket is gone with the engine");
    let resumed = json(&actum_on(
        dir,
        &[
            "resume",
            "{}",
            "--run",
            runs::PENDING,
            "--operator",
            "ops-anna",
            "--reason",
            "vendor paid",
            "--json",
        ],
    ));
    assert_eq!(resumed["via"], "opened");
    assert_eq!(resumed["after"], "running");
}

#[test]
fn a_socket_left_by_a_process_that_died_is_not_taken_for_a_live_engine() {
    let db = known_db();
    let dir = db.path();
    // A process served the channel and died: its socket file stays, and
    // nobody listens on it.
    std::fs::create_dir_all(dir.join(CHANNEL_DIR)).unwrap();
    drop(std::os::unix::net::UnixListener::bind(socket_path(dir)).unwrap());
    assert!(socket_path(dir).exists());
    let out = move_pending(dir, "pause");
    assert_eq!(out["via"], "opened", "nobody listens on a stale socket");
    // An engine that opens the directory replaces the stale socket.
    let engine = Arc::new(open_retrying(|| {
        Engine::open(dir, EngineOptions::default())
    }));
    engine.serve_operators().unwrap();
    let out = move_pending(dir, "resume");
    assert_eq!(out["via"], "channel");
}

/// `actum ACTION DIR --run r-pending ... --json`, answered.
fn move_pending(dir: &std::path::Path, action: &str) -> serde_json::Value {
    let args = [action, "{}", "--run", runs::PENDING, "--operator", "ops"];
    json(&actum_on(
        dir,
        &[&args[..], &["--reason", "x", "--json"]].concat(),
    ))
}

#[test]
fn a_caller_without_permission_on_the_channel_gets_nothing() {
    // Another user can be played only by root (`setpriv` drops to
    // nobody); as any other user the mode check above is the proof.
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
    if !root || !std::path::Path::new("/usr/bin/setpriv").exists() {
        println!("not root, or no setpriv: another user's request is not tried");
        return;
    }
    let db = known_db();
    let dir = db.path();
    // Anyone may enter the database directory: only the channel's own
    // directory keeps them out.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let engine = Arc::new(open_retrying(|| {
        Engine::open(dir, EngineOptions::default())
    }));
    engine.serve_operators().unwrap();
    let out = std::process::Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_actum"))
        .args(["pause"])
        .arg(dir)
        .args([
            "--run",
            runs::PENDING,
            "--operator",
            "mallory",
            "--reason",
            "x",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ermission denied"),
        "{}",
        stderr(&out)
    );
    let run = engine
        .run(&RunId::new(runs::PENDING).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(run.state, RunState::Pending, "nothing was carried out");
}
